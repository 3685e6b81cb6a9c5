//! The order of pods to update (`SortUpdateIndexes` in `cloneset_update.go`: Kubernetes'
//! `controller.ActivePods`, then `pkg/util/updatesort` priority and scatter, then PreparingUpdate
//! first) and the maxUnavailable cut of that list (`limitUpdateIndexes`).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;

use super::pod::{
    cmp_zero_then_later, creation_time, is_pod_available, is_pod_ready, label_value, lifecycle_state, phase_ordinal, ready_since,
    sorted_positions,
};
use crate::api::shared::{LifecycleState, UpdatePriorityStrategy, UpdateScatterTerm};
use crate::core::pod_read::PodRead;

/// Kruise's `SortUpdateIndexes`: orders `candidates` (positions in `pods`; every one must be a
/// valid position) for updating.
///
/// 1. Kubernetes v1.32 `controller.ActivePods` order: unscheduled first; phase Pending/other <
///    Unknown < Running; not ready first; among ready pods, ready more recently (or at a zero
///    time) first; more regular-container restarts first, then more sidecar (restartable init
///    container) restarts first; newer (or zero) creationTimestamp first. Go sorts this step
///    unstably; here equal pods keep their candidate order.
/// 2. `priority` (stable): by weight (sum of the weights whose `matchSelector` matches, higher
///    first; a selector with an unknown operator adds nothing) when `weightPriority` is not empty,
///    else by `orderPriority`: the index of the first `orderedKey` the pod carries, lower first,
///    then the integer at the end of that label's value, higher first. A pod with none of the
///    keys gets level −1 and so sorts before all others (Kruise's code, contrary to its API
///    comment).
/// 3. `scatter`: see [`scatter_sort`].
/// 4. Pods in lifecycle state `PreparingUpdate` move to the front (stable).
///
/// No pod is read whole: the keys, the priority and the scatter read labels and status in place.
pub fn sort_update_indexes<P: PodRead>(
    pods: &[P],
    mut candidates: Vec<usize>,
    priority: Option<&UpdatePriorityStrategy>,
    scatter: &[UpdateScatterTerm],
) -> Vec<usize> {
    let keys: Vec<ActiveKeys> = candidates.iter().map(|&i| ActiveKeys::of(&pods[i])).collect();
    candidates = sorted_positions(&keys, cmp_active).into_iter().map(|k| candidates[k]).collect();

    if let Some(strategy) = priority {
        candidates = priority_sort(strategy, pods, candidates);
    }
    if !scatter.is_empty() {
        let all: Vec<Option<&P>> = pods.iter().map(Some).collect();
        candidates = scatter_sort(scatter, &all, candidates);
    }

    candidates.sort_by_key(|&i| lifecycle_state(&pods[i]) != LifecycleState::PreparingUpdate.as_str());
    candidates
}

/// The keys of Kubernetes' `controller.ActivePods.Less` (v1.32).
#[derive(Clone, Debug)]
struct ActiveKeys {
    assigned: bool,
    phase: u8,
    ready: bool,
    ready_since: Option<Timestamp>,
    restarts: i32,
    sidecar_restarts: i32,
    created: Option<Timestamp>,
}

impl ActiveKeys {
    fn of(pod: &dyn PodRead) -> Self {
        let (restarts, sidecar_restarts) = pod.max_restarts();
        ActiveKeys {
            assigned: !pod.node_name().is_empty(),
            phase: phase_ordinal(pod),
            ready: is_pod_ready(pod),
            ready_since: ready_since(pod),
            restarts,
            sidecar_restarts,
            created: creation_time(pod),
        }
    }
}

fn cmp_active(a: &ActiveKeys, b: &ActiveKeys) -> Ordering {
    a.assigned
        .cmp(&b.assigned)
        .then(a.phase.cmp(&b.phase))
        .then(a.ready.cmp(&b.ready))
        .then_with(|| cmp_zero_then_later(a.ready_since, b.ready_since))
        .then(b.restarts.cmp(&a.restarts))
        .then(b.sidecar_restarts.cmp(&a.sidecar_restarts))
        .then_with(|| cmp_zero_then_later(a.created, b.created))
}

/// `updatesort.prioritySort.Sort` (stable; equal pods keep their order).
fn priority_sort<P: PodRead>(strategy: &UpdatePriorityStrategy, pods: &[P], candidates: Vec<usize>) -> Vec<usize> {
    if strategy.weight_priority.is_empty() && strategy.order_priority.is_empty() {
        return candidates;
    }
    let keys: Vec<PriorityKey> = candidates.iter().map(|&i| priority_key(strategy, &|k| pods[i].label(k))).collect();
    let order = sorted_positions(&keys, |a, b| cmp_priority(strategy, a, b));
    order.into_iter().map(|k| candidates[k]).collect()
}

/// What the priority compares of one pod: its weight, or its `(level, order)` by `orderPriority`.
type PriorityKey = (i64, i64);

fn priority_key<'a>(strategy: &UpdatePriorityStrategy, label: &dyn Fn(&str) -> Option<&'a str>) -> PriorityKey {
    if strategy.weight_priority.is_empty() { order_priority(strategy, label) } else { (weight_priority(strategy, label), 0) }
}

/// Kruise's `prioritySort.compare` without its tie value: `Less` means `a` updates first,
/// `Equal` means the strategy does not tell them apart.
fn cmp_priority(strategy: &UpdatePriorityStrategy, a: &PriorityKey, b: &PriorityKey) -> Ordering {
    if !strategy.weight_priority.is_empty() {
        b.0.cmp(&a.0)
    } else if !strategy.order_priority.is_empty() {
        a.0.cmp(&b.0).then(b.1.cmp(&a.1))
    } else {
        Ordering::Equal
    }
}

fn weight_priority<'a>(strategy: &UpdatePriorityStrategy, label: &dyn Fn(&str) -> Option<&'a str>) -> i64 {
    strategy
        .weight_priority
        .iter()
        .filter(|term| selector_matches_by(&term.match_selector, label) == Some(true))
        .map(|term| i64::from(term.weight))
        .sum()
}

/// `(index of the first orderedKey present, integer suffix of its value)`, `(-1, 0)` if none.
fn order_priority<'a>(strategy: &UpdatePriorityStrategy, label: &dyn Fn(&str) -> Option<&'a str>) -> (i64, i64) {
    strategy
        .order_priority
        .iter()
        .enumerate()
        .find_map(|(i, term)| label(&term.ordered_key).map(|v| (i as i64, int_suffix(v))))
        .unwrap_or((-1, 0))
}

/// Kruise's `getIntFromStringSuffix`: the integer formed by the trailing ASCII digits
/// (`sts-10` → 10), 0 when there are none or they overflow i64.
fn int_suffix(value: &str) -> i64 {
    let digits = value.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return 0;
    }
    value[value.len() - digits..].parse().unwrap_or(0)
}

/// A label selector as Kruise's `ValidatedLabelSelectorAsSelector` builds it (no validation of
/// keys or values): `None` when an expression has an unknown operator, otherwise whether every
/// requirement holds. A selector with no requirements matches everything.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Option<bool> {
    selector_matches_by(selector, |k| labels.get(k).map(String::as_str))
}

/// [`selector_matches`] over labels read one key at a time.
pub fn selector_matches_by<'a>(selector: &LabelSelector, label: impl Fn(&str) -> Option<&'a str>) -> Option<bool> {
    let mut all = true;
    for (k, v) in selector.match_labels.iter().flatten() {
        all &= label(k) == Some(v.as_str());
    }
    for expr in selector.match_expressions.iter().flatten() {
        let values = expr.values.as_deref().unwrap_or(&[]);
        let present = label(&expr.key);
        let holds = match expr.operator.as_str() {
            "In" => present.is_some_and(|v| values.iter().any(|x| x == v)),
            "NotIn" => present.is_none_or(|v| !values.iter().any(|x| x == v)),
            "Exists" => present.is_some(),
            "DoesNotExist" => present.is_none(),
            _ => return None,
        };
        all &= holds;
    }
    Some(all)
}

/// `updatesort.scatterSort.Sort`. `pods` is the whole pod list (a `None` is a hole Kruise's
/// StatefulSet callers can have; it counts for nothing); `candidates` index into it and must
/// not point at holes.
///
/// With several terms they are first reduced to those matched by some candidate (label present
/// with that value) and ordered by how many candidates match, most first (ties keep the
/// strategy's order); a single term is used as given. Then, term by term: candidates whose label
/// `key` equals `value` (a missing label reads as `""`) are "matched". If at most one candidate
/// is matched or at most one is not, nothing changes. Otherwise the last matched candidate is
/// moved to the very end, and the rest are interleaved in groups sized by the matched/unmatched
/// density of the whole pod list (or of the candidates, when the candidates are at least as
/// dense in unmatched pods as the whole list).
fn scatter_sort<P: PodRead>(strategy: &[UpdateScatterTerm], pods: &[Option<P>], mut candidates: Vec<usize>) -> Vec<usize> {
    if strategy.is_empty() || candidates.len() <= 1 {
        return candidates;
    }
    for term in scatter_terms(strategy, pods, &candidates) {
        candidates = scatter_by_term(&term, pods, candidates);
    }
    candidates
}

/// `scatterSort.getScatterTerms`.
fn scatter_terms<P: PodRead>(strategy: &[UpdateScatterTerm], pods: &[Option<P>], candidates: &[usize]) -> Vec<UpdateScatterTerm> {
    if strategy.len() == 1 {
        return strategy.to_vec();
    }
    let mut terms: Vec<UpdateScatterTerm> = Vec::new();
    let mut counts: HashMap<UpdateScatterTerm, usize> = HashMap::new();
    for term in strategy {
        for &i in candidates {
            let Some(pod) = &pods[i] else { continue };
            if pod.label(&term.key) == Some(term.value.as_str()) {
                *counts.entry(term.clone()).or_insert_with(|| {
                    terms.push(term.clone());
                    0
                }) += 1;
            }
        }
    }
    terms.sort_by(|a, b| counts[b].cmp(&counts[a]));
    terms
}

/// `scatterSort.scatterPodsByRule`.
fn scatter_by_term<P: PodRead>(term: &UpdateScatterTerm, pods: &[Option<P>], candidates: Vec<usize>) -> Vec<usize> {
    let is_matched = |pod: &P| label_value(pod, &term.key) == term.value;
    let (mut matched, mut unmatched): (Vec<usize>, Vec<usize>) =
        candidates.iter().partition(|&&i| pods[i].as_ref().is_some_and(is_matched));
    if matched.len() <= 1 || unmatched.len() <= 1 {
        return candidates;
    }
    let total_matched = pods.iter().flatten().filter(|p| is_matched(p)).count();
    let total_unmatched = pods.iter().flatten().count() - total_matched;

    let last_matched = matched.pop().expect("more than one matched candidate");
    let group = group_by_density(total_matched - 1, total_unmatched, matched.len(), unmatched.len());

    let mut out = Vec::with_capacity(candidates.len());
    out.extend(unmatched.drain(..group.unmatched_remainder));
    for _ in 0..group.groups {
        migrate(&mut matched, &mut out, group.matched_size);
        migrate(&mut unmatched, &mut out, group.unmatched_size);
    }
    out.append(&mut matched);
    out.append(&mut unmatched);
    out.push(last_matched);
    out
}

/// `migrateItems`: move the first `size` items of `src` (all of them if fewer) to `dst`.
fn migrate(src: &mut Vec<usize>, dst: &mut Vec<usize>, size: usize) {
    let n = size.min(src.len());
    dst.extend(src.drain(..n));
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ScatterGroup {
    groups: usize,
    matched_size: usize,
    unmatched_size: usize,
    unmatched_remainder: usize,
}

/// `newScatterGroup`: as many groups as the smaller side, sizes rounded half away from zero.
fn scatter_group(matched: usize, unmatched: usize) -> ScatterGroup {
    let groups = matched.min(unmatched);
    ScatterGroup {
        groups,
        matched_size: (matched as f64 / groups as f64).round() as usize,
        unmatched_size: (unmatched as f64 / groups as f64).round() as usize,
        unmatched_remainder: 0,
    }
}

/// `calculateGroupByDensity`. All counts are at least 1 here (the caller returns early
/// otherwise), so no division by zero can happen.
fn group_by_density(total_matched: usize, total_unmatched: usize, update_matched: usize, update_unmatched: usize) -> ScatterGroup {
    let total = scatter_group(total_matched, total_unmatched);
    let update = scatter_group(update_matched, update_unmatched);
    // Go compares these as float32.
    if total_unmatched as f32 / total_matched as f32 >= update_unmatched as f32 / update_matched as f32 {
        return update;
    }
    let groups = (update_matched / total.matched_size).min(update_unmatched / total.unmatched_size);
    ScatterGroup {
        groups,
        matched_size: total.matched_size,
        unmatched_size: total.unmatched_size,
        unmatched_remainder: update_unmatched - groups * total.unmatched_size,
    }
}

// ---------------------------------------------------------------------------------------------
// Update limit
// ---------------------------------------------------------------------------------------------

/// Kruise's `limitUpdateIndexes`: how many of the sorted `candidates` may be updated now.
///
/// * `update_num` and `update_max_unavailable` are `updateNum` and `updateMaxUnavailable` from
///   the diff arithmetic; the list is first cut to `|update_num|`.
/// * Every pod of `pods` that is not available ([`is_pod_available`] with `min_ready_seconds`,
///   so pods being updated in place, in a non-Normal lifecycle state, not Running or not yet
///   ready long enough all count) adds to the unavailable count; those for which
///   `is_on_target_revision` holds (Kruise: `EqualToRevisionHash` with the target revision —
///   updateRevision when rolling forward, currentRevision when rolling back; a pod being updated
///   in place already carries the target hash) also add to the target-unavailable count.
/// * Walking the candidates in order: stop once target-unavailable + taken ≥
///   `update_max_unavailable`; a currently available candidate also stops the walk when the
///   unavailable count has reached `update_max_unavailable`, and otherwise raises it by one (an
///   already unavailable candidate costs nothing extra); each candidate that passes is taken.
///
/// Returns the taken prefix of `candidates`.
pub fn limit_update_indexes<P: PodRead>(
    pods: &[P],
    mut candidates: Vec<usize>,
    update_num: i32,
    update_max_unavailable: i32,
    is_on_target_revision: impl Fn(&dyn PodRead) -> bool,
    min_ready_seconds: i32,
    now: Timestamp,
) -> Vec<usize> {
    candidates.truncate(update_num.unsigned_abs() as usize);
    let max_unavailable = i64::from(update_max_unavailable);

    let mut unavailable: i64 = 0;
    let mut target_unavailable: i64 = 0;
    for pod in pods {
        if !is_pod_available(pod, min_ready_seconds, now) {
            unavailable += 1;
            if is_on_target_revision(pod) {
                target_unavailable += 1;
            }
        }
    }

    let mut taken: i64 = 0;
    for &i in &candidates {
        if target_unavailable + taken >= max_unavailable {
            break;
        }
        if is_pod_available(&pods[i], min_ready_seconds, now) {
            if unavailable >= max_unavailable {
                break;
            }
            unavailable += 1;
        }
        taken += 1;
    }
    candidates.truncate(taken as usize);
    candidates
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, Time};
    use k8s_openapi::jiff::SignedDuration;

    use super::*;
    use crate::api::keys;
    use crate::api::shared::{UpdatePriorityOrderTerm, UpdatePriorityWeightTerm};
    use crate::core::order::fixtures::*;

    // ---- update order (cloneset_update_test.go)

    /// Kruise `TestSortUpdateIndexes`.
    #[test]
    fn test_sort_update_indexes() {
        let pods = vec![
            pod_with(Some("Pending"), vec![cond("Ready", "True", None)]),
            pod_with(Some("Pending"), vec![]),
            pod_with(Some("Pending"), vec![]),
            pod_with(Some("Running"), vec![cond("Ready", "True", None)]),
            pod_with(Some("Running"), vec![]),
        ];
        assert_eq!(sort_update_indexes(&pods, vec![0, 1, 3, 4], None, &[]), vec![1, 0, 4, 3]);
    }

    #[test]
    fn default_update_order_keys() {
        let n = now();
        let mut restarted = ready_pod();
        restarted.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus { restart_count: 3, ..Default::default() }]);
        let mut sidecar_restarted = ready_pod();
        sidecar_restarted.spec = Some(PodSpec {
            init_containers: Some(vec![
                Container { name: "side".into(), restart_policy: Some("Always".into()), ..Default::default() },
                Container { name: "init".into(), ..Default::default() },
            ]),
            ..Default::default()
        });
        sidecar_restarted.status.as_mut().unwrap().init_container_statuses = Some(vec![
            ContainerStatus { name: "side".into(), restart_count: 2, ..Default::default() },
            ContainerStatus { name: "init".into(), restart_count: 50, ..Default::default() },
        ]);
        let mut plain_init_restarted = ready_pod();
        plain_init_restarted.status.as_mut().unwrap().init_container_statuses =
            Some(vec![ContainerStatus { name: "init".into(), restart_count: 50, ..Default::default() }]);
        let mut old = ready_pod();
        old.metadata.creation_timestamp = Some(Time(n - SignedDuration::from_hours(2)));
        let mut newer = ready_pod();
        newer.metadata.creation_timestamp = Some(Time(n - SignedDuration::from_hours(1)));
        let ready_earlier = pod_with(Some("Running"), vec![cond("Ready", "True", Some(n - SignedDuration::from_hours(5)))]);
        let ready_later = pod_with(Some("Running"), vec![cond("Ready", "True", Some(n - SignedDuration::from_hours(4)))]);
        let pods = vec![
            on_node(old.clone(), "n"),                       // 0
            on_node(newer, "n"),                             // 1
            on_node(plain_init_restarted, "n"),              // 2: init restarts do not count; zero creation time
            on_node(sidecar_restarted, "n"),                 // 3
            on_node(restarted, "n"),                         // 4
            on_node(ready_earlier, "n"),                     // 5
            on_node(ready_later, "n"),                       // 6
            on_node(pod_with(Some("Unknown"), vec![]), "n"), // 7
            old,                                             // 8: unscheduled
        ];
        // Ready pods with a zero ready time come before those with one; among these, more
        // restarts first, then more sidecar restarts, then zero/newer creation.
        assert_eq!(sort_update_indexes(&pods, (0..9).collect(), None, &[]), vec![8, 7, 4, 3, 2, 1, 0, 6, 5]);
    }

    #[test]
    fn preparing_update_goes_first_stably() {
        let prep = |p: Pod| with_labels(p, &[(keys::LIFECYCLE_STATE, "PreparingUpdate")]);
        let pods = vec![ready_pod(), prep(ready_pod()), pod_with(Some("Pending"), vec![]), prep(pod_with(Some("Pending"), vec![]))];
        assert_eq!(sort_update_indexes(&pods, vec![0, 1, 2, 3], None, &[]), vec![3, 1, 2, 0]);
    }

    // ---- priority (priority_sort_test.go)

    fn weight_strategy(terms: &[(i32, &str, &str)]) -> UpdatePriorityStrategy {
        UpdatePriorityStrategy {
            weight_priority: terms
                .iter()
                .map(|(w, k, v)| UpdatePriorityWeightTerm {
                    weight: *w,
                    match_selector: LabelSelector { match_labels: Some(label_map(&[(k, v)])), ..Default::default() },
                })
                .collect(),
            ..Default::default()
        }
    }

    fn order_strategy(keys: &[&str]) -> UpdatePriorityStrategy {
        UpdatePriorityStrategy {
            order_priority: keys.iter().map(|k| UpdatePriorityOrderTerm { ordered_key: (*k).into() }).collect(),
            ..Default::default()
        }
    }

    /// Kruise `TestCompare`. Go's `compare(podI, podJ, true)` returns the tie value `true` when the
    /// strategy cannot tell the pods apart; here that is `Equal` (the sort keeps their order).
    #[test]
    fn test_compare() {
        let w2 = weight_strategy(&[(20, "key", "foo"), (10, "key", "bar")]);
        let w3a = weight_strategy(&[(20, "key1", "foo"), (10, "key2", "bar"), (15, "key3", "baz")]);
        let w3b = weight_strategy(&[(20, "key1", "foo"), (10, "key2", "bar"), (5, "key3", "baz")]);
        let o = order_strategy(&["key1", "key2"]);
        use Ordering::*;
        let cases: Vec<(&UpdatePriorityStrategy, &str, &str, Ordering)> = vec![
            (&w2, "", "", Equal),
            (&w2, "key=foo", "key=foo", Equal),
            (&w2, "key=bar", "key=foo", Greater),
            (&w2, "", "key=bar", Greater),
            (&w2, "", "key=foo", Greater),
            (&w3a, "key1=foo", "key2=bar,key3=baz", Greater),
            (&w3b, "key2=bar,key3=baz", "key1=foo", Greater),
            (&o, "", "", Equal),
            (&o, "key1=o-10", "key1=o-5", Less),
            (&o, "key1=o-10", "key1=o-10", Equal),
            (&o, "key1=o-10", "key1=o-20", Greater),
            (&o, "key2=o-20", "key1=o-10", Greater),
            (&o, "key2=o-20", "key2=o-10", Less),
        ];
        for (i, (strategy, a, b, want)) in cases.into_iter().enumerate() {
            let key = |l: &str| {
                let labels = parse_labels(l);
                priority_key(strategy, &|k| labels.get(k).map(String::as_str))
            };
            assert_eq!(cmp_priority(strategy, &key(a), &key(b)), want, "case #{i}");
        }
    }

    #[test]
    fn int_suffix_takes_trailing_digits() {
        for (v, want) in [("sts-10", 10), ("o-5", 5), ("10", 10), ("abc", 0), ("", 0), ("a1b", 0), ("x-99999999999999999999", 0), ("é7", 7)]
        {
            assert_eq!(int_suffix(v), want, "{v}");
        }
    }

    #[test]
    fn priority_pods_without_keys_sort_first_and_ties_keep_order() {
        let o = order_strategy(&["key1", "key2"]);
        let pods: Vec<Pod> = ["key2=a-1", "", "key1=b-3", "key1=b-7", "x=1", "key2=a-9"].iter().map(|s| labelled(s)).collect();
        // Level -1 (no key) first, then key1 (higher suffix first), then key2.
        assert_eq!(sort_update_indexes(&pods, (0..6).collect(), Some(&o), &[]), vec![1, 4, 3, 2, 5, 0]);
    }

    /// Kruise issue #2106 (fixed by PR #2107 in v1.9.0): a priority that matches no pod keeps the
    /// default order, so an unavailable pod stays ahead of an available one.
    #[test]
    fn priority_matching_nothing_keeps_default_order() {
        let w = weight_strategy(&[(50, "never", "matches")]);
        let pods = vec![ready_pod(), pod_with(Some("Running"), vec![])];
        assert_eq!(sort_update_indexes(&pods, vec![0, 1], Some(&w), &[]), vec![1, 0]);
        let o = order_strategy(&["never"]);
        assert_eq!(sort_update_indexes(&pods, vec![0, 1], Some(&o), &[]), vec![1, 0]);
    }

    #[test]
    fn weight_selectors_use_expressions_and_skip_invalid_ones() {
        let expr = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).into()).collect()),
        };
        let term = |weight: i32, exprs: Vec<LabelSelectorRequirement>| UpdatePriorityWeightTerm {
            weight,
            match_selector: LabelSelector { match_expressions: Some(exprs), ..Default::default() },
        };
        let s = UpdatePriorityStrategy {
            weight_priority: vec![
                term(1, vec![expr("zone", "In", &["a", "b"])]),
                term(2, vec![expr("zone", "NotIn", &["a"])]),
                term(4, vec![expr("gpu", "Exists", &[])]),
                term(8, vec![expr("gpu", "DoesNotExist", &[]), expr("zone", "Exists", &[])]),
                term(100, vec![expr("zone", "Gt", &["1"])]),
            ],
            ..Default::default()
        };
        let w = |l: &str| {
            let labels = parse_labels(l);
            weight_priority(&s, &|k| labels.get(k).map(String::as_str))
        };
        assert_eq!(w("zone=a"), 1 + 8);
        assert_eq!(w("zone=b"), 1 + 2 + 8);
        assert_eq!(w("zone=c,gpu=x"), 2 + 4);
        assert_eq!(w(""), 2);
        // An empty selector matches everything.
        let all = UpdatePriorityStrategy {
            weight_priority: vec![UpdatePriorityWeightTerm { weight: 3, match_selector: LabelSelector::default() }],
            ..Default::default()
        };
        assert_eq!(weight_priority(&all, &|_| None), 3);
    }

    // ---- scatter (scatter_sort_test.go)

    const A: &str = "labelA=AAA";
    const B: &str = "labelB=BBB";
    /// A nil pod in Kruise's scatter test tables.
    const NIL: &str = "<nil>";

    fn scatter(terms: &[(&str, &str)]) -> Vec<UpdateScatterTerm> {
        terms.iter().map(|(k, v)| UpdateScatterTerm { key: (*k).into(), value: (*v).into() }).collect()
    }

    /// Kruise `TestGenerateRules`.
    #[test]
    fn test_generate_rules() {
        struct Case {
            desc: &'static str,
            labels: &'static [&'static str],
            strategy: &'static [(&'static str, &'static str)],
            expected: &'static [(&'static str, &'static str)],
        }
        let cases = [
            Case {
                desc: "one pod one label",
                labels: &["", "", "", "", A, A],
                strategy: &[("labelA", "AAA")],
                expected: &[("labelA", "AAA")],
            },
            Case {
                desc: "same pods a label",
                labels: &["", "", "labelB=B", B, A, A],
                strategy: &[("labelA", "AAA"), ("labelB", "BBB")],
                expected: &[("labelA", "AAA"), ("labelB", "BBB")],
            },
        ];
        for c in cases {
            let pods: Vec<Pod> = c.labels.iter().map(|l| labelled(l)).collect();
            let all: Vec<Option<&Pod>> = pods.iter().map(Some).collect();
            let candidates: Vec<usize> = (0..pods.len()).collect();
            assert_eq!(scatter_terms(&scatter(c.strategy), &all, &candidates), scatter(c.expected), "{}", c.desc);
        }
    }

    /// Kruise `TestScatterPodsByRule` (the pods are the first `expected.len()` label entries).
    #[test]
    fn test_scatter_pods_by_rule() {
        let term = UpdateScatterTerm { key: "labelA".into(), value: "AAA".into() };
        let a = A;
        let cases: Vec<(&str, Vec<&str>, Vec<usize>)> = vec![
            ("no label", vec![""], vec![0]),
            ("only one scattered pod", vec![a], vec![0]),
            ("odd scattered pod + odd ordinary pod", vec![a, "bbb"], vec![0, 1]),
            ("even scattered pods + even ordinary pods", vec!["", "", "", "", a, a], vec![4, 0, 1, 2, 3, 5]),
            ("odd scattered pods + odd ordinary pods", vec!["", "", "", a, a, a], vec![3, 0, 1, 4, 2, 5]),
            ("even scattered pods + odd ordinary pods", vec!["", "", "", a, "", "", a], vec![3, 0, 1, 2, 4, 5, 6]),
            ("odd scattered pods + even ordinary pods", vec!["", "", "", "", "", "", a, a, a], vec![6, 0, 1, 2, 7, 3, 4, 5, 8]),
            (
                "even scattered pods + even ordinary pods + scattered pods more than ordinary pods",
                vec!["", "", a, a, a, a],
                vec![2, 3, 0, 4, 1, 5],
            ),
            (
                "odd scattered pods + odd ordinary pods + scattered pods more than ordinary pods",
                vec!["", "", "", a, a, a, a, a],
                vec![3, 0, 1, 4, 2, 5],
            ),
            (
                "even scattered pods + odd ordinary pods + scattered pods more than ordinary pods",
                vec!["", "", a, "", a, a, a, a, a],
                vec![2, 4, 0, 5, 6, 1, 7, 3, 8],
            ),
            (
                "odd scattered pods + even ordinary pods + scattered pods more than ordinary pods",
                vec!["", a, "", a, "", "", a, a, a],
                vec![1, 0, 3, 2, 6, 4, 7, 5, 8],
            ),
            ("invalid label", vec!["", "", "", "", "ee", "a", "", a, a, "labelA=AAA,labelB=BBB"], vec![7, 0, 1, 2, 3, 8, 4, 5, 6, 9]),
        ];
        for (desc, labels, expected) in cases {
            let pods: Vec<Pod> = labels[..expected.len()].iter().map(|l| labelled(l)).collect();
            let all: Vec<Option<&Pod>> = pods.iter().map(Some).collect();
            let got = scatter_by_term(&term, &all, (0..pods.len()).collect());
            assert_eq!(got, expected, "{desc}");
        }
    }

    /// Kruise `TestSort` (scatter). Candidates are the first `expected.len()` entries that are not
    /// `NIL` (a nil pod); the remaining entries are pods that are not candidates.
    #[test]
    fn test_scatter_sort() {
        struct Case {
            desc: &'static str,
            labels: &'static [&'static str],
            strategy: &'static [(&'static str, &'static str)],
            expected: &'static [usize],
        }
        const TA: &[(&str, &str)] = &[("labelA", "AAA")];
        const TAB: &[(&str, &str)] = &[("labelA", "AAA"), ("labelB", "BBB")];
        const TABC: &[(&str, &str)] = &[("labelA", "AAA"), ("labelB", "BBB"), ("labelC", "CCC")];
        const E: &str = "sdfb=eee";
        const S: &str = "dsf=same";
        const AB: &str = "labelA=AAA,labelB=BBB";
        const AC: &str = "labelA=AAA,labelC=CCC";
        const BC: &str = "labelB=BBB,labelC=CCC";
        const C: &str = "labelC=CCC";
        let cases = [
            Case { desc: "a scattered pod + a ordinary pod", labels: &[AB], strategy: TA, expected: &[0] },
            Case { desc: "all ordinary pods", labels: &["", "", "", "", "", ""], strategy: &[], expected: &[0, 1, 2, 3, 4, 5] },
            Case { desc: "one pod one label", labels: &["", "", "", "", A, A], strategy: TA, expected: &[4, 0, 1, 2, 3, 5] },
            Case {
                desc: "one pod more labels",
                labels: &["", "", "", "", E, S, B, A, A, AB],
                strategy: &[("labelB", "BBB")],
                expected: &[6, 0, 1, 2, 3, 4, 5, 7, 8, 9],
            },
            Case { desc: "2 dimensions + one pod one label", labels: &[B, B, "", "", A, A], strategy: TAB, expected: &[0, 4, 2, 3, 5, 1] },
            Case {
                desc: "2 dimensions + one pod more labels",
                labels: &["", "", "", B, AB, A],
                strategy: TAB,
                expected: &[4, 0, 1, 2, 5, 3],
            },
            Case {
                desc: "2 dimensions + same label + sequence: A + B",
                labels: &["", "", "", "", E, S, B, A, A, B],
                strategy: &[("labelB", "BBB"), ("labelA", "AAA")],
                expected: &[7, 6, 0, 1, 2, 3, 4, 5, 9, 8],
            },
            Case {
                desc: "2 dimensions + same label + sequence: B + A",
                labels: &["", "", "", "", E, S, B, A, A, B],
                strategy: TAB,
                expected: &[6, 7, 0, 1, 2, 3, 4, 5, 8, 9],
            },
            Case {
                desc: "2 dimensions + same pod same label + even scatter pods + even ordinary pods",
                labels: &["", "", "", "", E, S, AB, "", "", AB],
                strategy: TAB,
                expected: &[6, 0, 1, 2, 3, 4, 5, 7, 8, 9],
            },
            Case {
                desc: "2 dimensions + same pod same label + even scatter pods + odd ordinary pods",
                labels: &["", "", "", E, S, AB, "", "", AB],
                strategy: TAB,
                expected: &[5, 0, 1, 2, 3, 4, 6, 7, 8],
            },
            Case {
                desc: "2 dimensions + same pod same label + odd scatter pods + odd ordinary pods",
                labels: &["", "", "", A, E, S, AB, "", "", ""],
                strategy: TAB,
                expected: &[3, 0, 1, 2, 4, 5, 7, 6],
            },
            Case {
                desc: "2 dimensions + same pod same label + odd scatter pods + odd ordinary pods (second)",
                labels: &["", "", "", A, "", "", E, S, AB, "", "", AB],
                strategy: TAB,
                expected: &[0, 1, 2, 4, 3, 5, 6, 7, 9, 10, 8],
            },
            Case {
                desc: "2 dimensions + same pod same label + even scatter pods + even ordinary pods + scatter pods more than ordinary pods",
                labels: &["", "", "", A, "sdfb=eee,labelA=AAA", S, AB, "", "", AB],
                strategy: TAB,
                expected: &[6, 3, 0, 1, 4, 2, 5, 7, 8, 9],
            },
            Case {
                desc: "2 dimensions + same pod same label + even scatter pods + odd ordinary pods + scatter pods more than ordinary pods",
                labels: &["", A, A, E, S, AB, "", "", AB],
                strategy: TAB,
                expected: &[5, 1, 0, 3, 2, 4, 6, 7, 8],
            },
            Case {
                desc: "2 dimensions + same pod same label + odd scatter pods + odd ordinary pods + scatter pods more than ordinary pods",
                labels: &[A, "", "", A, "sdfb=eee,labelA=AAA", S, AB, "", "", AB],
                strategy: TAB,
                expected: &[1, 0, 2, 3, 5, 4, 7, 6],
            },
            Case {
                desc: "2 dimensions + same pod same label + odd scatter pods + odd ordinary pods + scatter pods more than ordinary pods (second)",
                labels: &["", "", A, A, "", A, E, S, AB, "", "", AB],
                strategy: TAB,
                expected: &[0, 2, 1, 4, 3, 6, 7, 5, 9, 10, 8],
            },
            Case {
                desc: "3 dimensions + one pod one label",
                labels: &["", A, A, B, B, C, C, C, C, C],
                strategy: TABC,
                expected: &[3, 1, 5, 0, 6, 7, 8, 9, 2, 4],
            },
            Case {
                desc: "3 dimensions + one pod more label",
                labels: &["", A, AC, BC, B, "", "", C, C, C],
                strategy: TABC,
                expected: &[3, 2, 0, 7, 8, 5, 6, 9, 1, 4],
            },
            Case { desc: "continuous sort 1", labels: &["", "", "", "", A, A, A], strategy: TA, expected: &[0, 1, 4, 2, 3, 5] },
            Case {
                desc: "continuous sort 2",
                labels: &[A, A, "", "", "", "", "", "", "", A],
                strategy: TA,
                expected: &[2, 0, 3, 4, 5, 6, 1],
            },
            Case {
                desc: "reserveOrdinals nil in slice",
                labels: &["", A, AC, BC, B, NIL, "", "", C, C, C],
                strategy: TABC,
                expected: &[3, 2, 0, 8, 9, 6, 7, 10, 1, 4],
            },
        ];
        for c in cases {
            let pods: Vec<Option<Pod>> = c.labels.iter().map(|&l| (l != NIL).then(|| labelled(l))).collect();
            let all: Vec<Option<&Pod>> = pods.iter().map(Option::as_ref).collect();
            let mut candidates = Vec::new();
            let mut holes = 0;
            let mut i = 0;
            while i < c.expected.len() + holes {
                if all[i].is_some() {
                    candidates.push(i);
                } else {
                    holes += 1;
                }
                i += 1;
            }
            assert_eq!(scatter_sort(&scatter(c.strategy), &all, candidates), c.expected, "{}", c.desc);
        }
    }

    #[test]
    fn scatter_applies_after_priority_and_before_preparing_update() {
        let pods: Vec<Pod> = ["", "", "", "", "labelA=AAA", "labelA=AAA"].iter().map(|l| labelled(l)).collect();
        let terms = scatter(&[("labelA", "AAA")]);
        assert_eq!(sort_update_indexes(&pods, (0..6).collect(), None, &terms), vec![4, 0, 1, 2, 3, 5]);
    }

    // ---- limit (cloneset_update_test.go TestCalculateUpdateCount)

    /// Kruise `TestCalculateUpdateCount`: its 16 unnamed cases (`case #0`…`#15`), each run
    /// through `calculateDiffsWithExpectation` then `limitUpdateIndexes` with minReadySeconds 0
    /// and the CloneSetPartitionRollback gate on. The `updateNum`/`updateMaxUnavailable` each
    /// case produces were derived by hand from Kruise's diff arithmetic (no toDelete, no PreparingDelete; current
    /// "current" ≠ update "updated"; maxUnavailable defaults to 20% rounded up without surge):
    /// `updateOldDiff = old − partition`, `updateNewDiff = new − (replicas − partition)`,
    /// `updateNum` = the smaller in magnitude (`−updateNewDiff` for the latter),
    /// `updateMaxUnavailable = maxUnavailable + len(pods) − replicas` (0 when updateNum is 0).
    /// Candidates are the old pods in the test's order when updateNum > 0, the new pods when
    /// updateNum < 0; the target revision follows.
    #[test]
    fn test_calculate_update_count() {
        struct Case {
            name: &'static str,
            /// One letter per pod: `r` = Kruise's `readyPod()`, `u` = an empty (unavailable) pod.
            pods: &'static str,
            old: &'static [usize],
            update_num: i32,
            update_max_unavailable: i32,
            expected: usize,
        }
        let case = |name, pods, old, update_num, update_max_unavailable, expected| Case {
            name,
            pods,
            old,
            update_num,
            update_max_unavailable,
            expected,
        };
        let cases = [
            case("#0 replicas 3, defaults (maxUnavailable 1)", "rrr", &[0, 1, 2], 3, 1, 1),
            case("#1 replicas 3, one unavailable old pod", "rur", &[0, 1, 2], 3, 1, 0),
            case("#2 replicas 3, the first old pod unavailable", "urr", &[0, 1, 2], 3, 1, 1),
            case("#3 replicas 10 (maxUnavailable 2), 9 old", "urrrrrrrur", &[0, 1, 2, 3, 4, 5, 6, 7, 8], 9, 2, 1),
            case("#4 partition 2, maxUnavailable 3: nothing to update", "urr", &[0, 1], 0, 0, 0),
            case("#5 replicas 8, partition 2, maxUnavailable 50% (4)", "ururrrru", &[0, 1, 2, 3, 4, 5, 6], 5, 4, 3),
            case("#6 old revision all unavailable, partition 0, maxUnavailable 2: update 2", "uuuuu", &[0, 1, 2, 3, 4], 5, 2, 2),
            case("#7 old all unavailable, maxUnavailable 2, 2 updating: none", "uuuuu", &[0, 1, 2], 3, 2, 0),
            case("#8 old all unavailable, maxUnavailable 2, 1 updated 1 updating: 1", "uuuru", &[0, 1, 2], 3, 2, 1),
            case("#9 maxUnavailable 2, maxSurge 1, 1 creating: 2", "uuuuuu", &[0, 1, 2, 3, 4], 4, 3, 2),
            case("#10 maxUnavailable 2, maxSurge 1, 1 updated 1 updating: 2", "uuuuru", &[0, 1, 2, 3], 3, 3, 2),
            case("#11 maxUnavailable 2, maxSurge 1, 1 updated 2 updating: 1", "uuuuru", &[0, 1, 2], 2, 3, 1),
            case("#12 maxUnavailable 2, maxSurge 1, 3 updating: none", "uuuuuu", &[0, 1, 2], 2, 3, 0),
            case("#13 rollback, partition 7 of 8, new pods unavailable", "rrruuuuu", &[0, 1, 2], -4, 2, 2),
            case("#14 maxUnavailable 0, maxSurge 2, usedSurge 1", "rrrrr", &[0, 1], 1, 1, 1),
            case("#15 maxUnavailable 0, maxSurge 2, usedSurge 2", "rrrrrr", &[0, 1, 2, 3], 2, 2, 2),
        ];
        for Case { name, pods: shape, old, update_num, update_max_unavailable, expected } in cases {
            let pods: Vec<Pod> = shape
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    let p = if c == 'r' { ready_pod() } else { Pod::default() };
                    rev(p, if old.contains(&i) { "current" } else { "updated" })
                })
                .collect();
            let (candidates, target) = match update_num.signum() {
                1 => (old.to_vec(), "updated"),
                -1 => ((0..pods.len()).filter(|i| !old.contains(i)).collect(), "current"),
                _ => (vec![], ""),
            };
            let got = limit_update_indexes(
                &pods,
                candidates,
                update_num,
                update_max_unavailable,
                |p| label_value(p, keys::CONTROLLER_REVISION_HASH) == target,
                0,
                now(),
            );
            assert_eq!(got.len(), expected, "{name}: got {got:?}");
        }
    }

    #[test]
    fn limit_counts_inplace_updating_target_pods_and_min_ready_seconds() {
        let n = now();
        let updating = with_labels(
            rev(pod_with(Some("Running"), vec![cond("Ready", "True", None), cond(keys::INPLACE_UPDATE_READY, "False", None)]), "new"),
            &[(keys::LIFECYCLE_STATE, "Updating")],
        );
        let fresh = rev(pod_with(Some("Running"), vec![cond("Ready", "True", Some(n - SignedDuration::from_secs(3)))]), "old");
        let pods = vec![updating, rev(ready_pod(), "old"), rev(ready_pod(), "old"), fresh];
        let on_new = |p: &dyn PodRead| label_value(p, keys::CONTROLLER_REVISION_HASH) == "new";
        // The in-place updating pod already uses one of two slots.
        assert_eq!(limit_update_indexes(&pods, vec![1, 2, 3], 3, 2, on_new, 0, n), vec![1]);
        // With minReadySeconds 10 the fresh pod is unavailable: updating it costs no extra
        // unavailability, but it still counts as taken, so with the updating pod the third
        // candidate reaches the budget of 3.
        assert_eq!(limit_update_indexes(&pods, vec![3, 1, 2], 3, 3, on_new, 10, n), vec![3, 1]);
        // A non-positive budget updates nothing; the list is cut to |updateNum| first.
        assert_eq!(limit_update_indexes(&pods, vec![1, 2], 2, 0, on_new, 0, n), Vec::<usize>::new());
        assert_eq!(limit_update_indexes(&pods, vec![1, 2, 3], -1, 10, on_new, 0, n), vec![1]);
    }
}
