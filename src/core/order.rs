//! Pod ordering, ported from Kruise v1.9.0 (built against Kubernetes v1.32.6):
//!
//! * readiness and CloneSet availability (`IsPodAvailable` in `cloneset_sync_utils.go`);
//! * scale-down victims (`choosePodsToDelete` in `cloneset_scale.go` with `ActivePodsWithRanks`,
//!   the same-node ranker and the topology-spread ranker of `cloneset/utils/pod_sorter.go`);
//! * the order of pods to update (`SortUpdateIndexes` in `cloneset_update.go`: Kubernetes'
//!   `controller.ActivePods`, then `pkg/util/updatesort` priority and scatter, then PreparingUpdate
//!   first);
//! * the maxUnavailable cut of that list (`limitUpdateIndexes`).
//!
//! Everything here is a pure function of the pods, explicit parameters and `now`.
//!
//! Where Go sorts with an unstable sort (`sort.Sort`, `sort.Slice`), this module sorts stably:
//! equal pods keep the order they were given in. Go's pdqsort is an insertion sort (and
//! therefore stable) up to 12 elements, so the two agree on every list of at most 12 pods, which is
//! all Kruise's unit tests use; above it Go's tie order is an accident of the algorithm.
//!
//! Functions that take a pod list accept anything that borrows as a [`Pod`] (`&[Pod]`,
//! `&[&Pod]`, `&[Arc<Pod>]`), and return positions in that list.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::keys;
use crate::api::shared::{LifecycleState, UpdatePriorityStrategy, UpdateScatterTerm};

/// The well-known node label `kubernetes.io/hostname` (`v1.LabelHostname`). It is a node label
/// that CloneSet never writes, so `api::keys` does not carry it.
const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
const CONDITION_READY: &str = "Ready";
const STATUS_TRUE: &str = "True";
const PHASE_UNKNOWN: &str = "Unknown";
const PHASE_RUNNING: &str = "Running";
const RESTART_POLICY_ALWAYS: &str = "Always";
/// Go's zero `time.Time`, 0001-01-01T00:00:00Z, in Unix seconds.
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

// ---------------------------------------------------------------------------------------------
// Readiness and availability
// ---------------------------------------------------------------------------------------------

/// Kubernetes' `podutil.IsPodReady`: the pod's first `Ready` condition has status `True`.
/// The phase is not looked at.
pub fn is_pod_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == STATUS_TRUE)
}

/// Kruise's CloneSet `IsPodAvailable(coreControl, pod, minReadySeconds)`, which all of these use:
/// the scale/update arithmetic (unavailable counts), scale-down victim order, and
/// `limitUpdateIndexes`. A pod is available when all of these hold:
///
/// * its `lifecycle.apps.kruise.io/state` label is absent, empty or `Normal` (any other value,
///   including one Kruise does not know, makes it unavailable);
/// * its phase is `Running`;
/// * Kubernetes' `podutil.IsPodAvailable`: ready, and either `min_ready_seconds` is 0 or the
///   first `Ready` condition has a non-zero `lastTransitionTime` with
///   `lastTransitionTime + min_ready_seconds` strictly before `now`;
/// * its first `InPlaceUpdateReady` condition, if there is one, has status `True`.
///
/// With `min_ready_seconds == 0` this is Kruise's `isPodReady`, the test that decides whether
/// deleting a pod consumes `deleteReadyLimit`.
pub fn is_pod_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    let state = lifecycle_state(pod);
    if !state.is_empty() && state != LifecycleState::Normal.as_str() {
        return false;
    }
    if phase(pod) != PHASE_RUNNING || !k8s_is_pod_available(pod, min_ready_seconds, now) {
        return false;
    }
    first_condition(pod, keys::INPLACE_UPDATE_READY).is_none_or(|c| c.status == STATUS_TRUE)
}

/// `podutil.IsPodAvailable` (no phase, no lifecycle, no in-place condition).
fn k8s_is_pod_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    let Some(c) = ready_condition(pod).filter(|c| c.status == STATUS_TRUE) else {
        return false;
    };
    if min_ready_seconds == 0 {
        return true;
    }
    let Some(since) = non_zero_time(c.last_transition_time.as_ref()) else {
        return false;
    };
    since.checked_add(SignedDuration::from_secs(i64::from(min_ready_seconds))).is_ok_and(|t| t < now)
}

/// The value of `controller.kubernetes.io/pod-deletion-cost`, parsed as Kubernetes and Kruise
/// parse it: absent or invalid means 0. Valid values are decimal int32 strings starting with
/// `-`, a non-zero digit, or exactly `"0"`; so `"+10"`, `"008"`, `""`, `" 1"` and anything out of
/// int32 range are invalid, while `"-0"` and `"-007"` are accepted.
pub fn pod_deletion_cost(pod: &Pod) -> i32 {
    let Some(value) = pod.metadata.annotations.as_ref().and_then(|a| a.get(keys::POD_DELETION_COST)) else {
        return 0;
    };
    let valid_first = match value.as_bytes().first() {
        None => false,
        Some(b'-') | Some(b'1'..=b'9') => true,
        Some(b'0') => value == "0",
        Some(_) => false,
    };
    if !valid_first {
        return 0;
    }
    value.parse::<i32>().unwrap_or(0)
}

fn conditions(pod: &Pod) -> &[PodCondition] {
    pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or(&[])
}

fn first_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    conditions(pod).iter().find(|c| c.type_ == type_)
}

fn ready_condition(pod: &Pod) -> Option<&PodCondition> {
    first_condition(pod, CONDITION_READY)
}

/// `podReadyTime`: when the pod became ready, `None` when it is not ready or the time is zero.
fn ready_since(pod: &Pod) -> Option<Timestamp> {
    if !is_pod_ready(pod) {
        return None;
    }
    conditions(pod)
        .iter()
        .find(|c| c.type_ == CONDITION_READY && c.status == STATUS_TRUE)
        .and_then(|c| non_zero_time(c.last_transition_time.as_ref()))
}

/// A `metav1.Time` as Go sees it: absent and Go's zero instant are both "zero" (`None`).
fn non_zero_time(t: Option<&Time>) -> Option<Timestamp> {
    t.map(|t| t.0).filter(|t| t.as_second() != GO_ZERO_TIME_SECONDS || t.subsec_nanosecond() != 0)
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// `Pending < Unknown < Running`; every other phase (including none) ranks with Pending,
/// as a missing key in Go's map reads as 0.
fn phase_ordinal(pod: &Pod) -> u8 {
    match phase(pod) {
        PHASE_UNKNOWN => 1,
        PHASE_RUNNING => 2,
        _ => 0,
    }
}

fn node_name(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
}

fn pod_labels(pod: &Pod) -> Option<&BTreeMap<String, String>> {
    pod.metadata.labels.as_ref()
}

/// A label value, `""` when absent (Go's map read).
fn label_value<'a>(pod: &'a Pod, key: &str) -> &'a str {
    pod_labels(pod).and_then(|l| l.get(key)).map_or("", String::as_str)
}

fn lifecycle_state(pod: &Pod) -> &str {
    label_value(pod, keys::LIFECYCLE_STATE)
}

fn creation_time(pod: &Pod) -> Option<Timestamp> {
    non_zero_time(pod.metadata.creation_timestamp.as_ref())
}

/// The highest restart count among regular containers.
fn max_container_restarts(pod: &Pod) -> i32 {
    pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or(&[]).iter().map(|c| c.restart_count).fold(0, i32::max)
}

/// The highest restart count among sidecars (init containers with `restartPolicy: Always`).
pub fn max_sidecar_restarts(pod: &Pod) -> i32 {
    let sidecars: BTreeSet<&str> = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|c| c.restart_policy.as_deref() == Some(RESTART_POLICY_ALWAYS))
        .map(|c| c.name.as_str())
        .collect();
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|c| sidecars.contains(c.name.as_str()))
        .map(|c| c.restart_count)
        .fold(0, i32::max)
}

/// Go's `afterOrZero` as an ordering of "zero first, then later first": `Less` means `a` sorts
/// before `b`.
fn cmp_zero_then_later(a: Option<Timestamp>, b: Option<Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

// ---------------------------------------------------------------------------------------------
// Scale-down victims
// ---------------------------------------------------------------------------------------------

/// One `topologySpreadConstraints` entry as the scale-down ranker uses it (Kruise's
/// `PodSpreadConstraint`). CloneSet only ever fills `topology_key`; `limited_values`, when not
/// empty, restricts ranking to those topology values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSpreadConstraint {
    pub topology_key: String,
    pub limited_values: Vec<String>,
}

/// The spread constraints Kruise ranks by for a CloneSet (`GetPodSpreadConstraint`): one per
/// `topologySpreadConstraints` entry of the template's pod spec, in order, duplicates kept.
pub fn pod_spread_constraints(template_spec: Option<&PodSpec>) -> Vec<PodSpreadConstraint> {
    template_spec
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or(&[])
        .iter()
        .map(|c| PodSpreadConstraint { topology_key: c.topology_key.clone(), limited_values: Vec::new() })
        .collect()
}

/// What the scale-down sort needs besides the pods.
#[derive(Clone, Copy, Debug)]
pub struct VictimContext<'a> {
    /// The CloneSet's `spec.minReadySeconds`, for availability.
    pub min_ready_seconds: i32,
    pub now: Timestamp,
    /// From [`pod_spread_constraints`]. Empty: rank by the same-node ranker.
    pub spread_constraints: &'a [PodSpreadConstraint],
    /// Node name → node labels, for the spread ranker. A pod whose node is missing here is
    /// treated as Kruise treats a failed node read: it takes no part in any topology.
    pub node_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
}

/// Kruise's `choosePodsToDelete`: the pods to remove on scale-down, as positions in `pods`, in
/// the order Kruise would try them.
///
/// * `total_diff` is `scaleDownNum` and `old_revision_diff` is `scaleDownNumOldRevision`.
/// * `is_updated` splits the pods as Kruise's `GroupUpdateAndNotUpdatePods` does (pass
///   `revision.IsPodUpdate` against the update revision: with the `PreparingUpdateAsUpdate` gate a
///   PreparingUpdate pod counts as updated).
/// * If `old_revision_diff >= total_diff`, all victims come from the not-updated pods; else if it
///   is positive, `old_revision_diff` come from the not-updated pods followed by
///   `total_diff - old_revision_diff` from the updated ones; else all come from the updated pods.
///   A group is never topped up from the other one.
/// * Within a group, when fewer pods than the group holds are needed, the group is sorted (see
///   below) and the first ones are taken. When the whole group (or more) is asked for, it is
///   returned in input order, unsorted.
///
/// The sort (`ActivePodsWithRanks` with an availability function), ascending, first deleted:
/// unscheduled before scheduled; phase Pending/other < Unknown < Running; not available before
/// available; not ready before ready; lower pod-deletion-cost first; higher rank first; among
/// ready pods, ready more recently (or at a zero time) first; more restarts of regular containers
/// first; newer (or zero) creationTimestamp first; otherwise input order.
///
/// The rank is computed over the group being sorted: with spread constraints, the
/// topology-spread rank; otherwise the same-node rank (on a node holding k > 1 of the group's
/// pods, all but the best get k−1 … 1).
pub fn choose_pods_to_delete<P: Borrow<Pod>>(
    total_diff: usize,
    old_revision_diff: usize,
    pods: &[P],
    is_updated: impl Fn(&Pod) -> bool,
    ctx: &VictimContext<'_>,
) -> Vec<usize> {
    let (updated, not_updated): (Vec<usize>, Vec<usize>) = (0..pods.len()).partition(|&i| is_updated(pods[i].borrow()));
    let choose = |group: Vec<usize>, diff: usize| -> Vec<usize> {
        if diff >= group.len() {
            return group;
        }
        let members: Vec<&Pod> = group.iter().map(|&i| pods[i].borrow()).collect();
        let order = sort_victims(&members, ctx);
        order.into_iter().take(diff).map(|k| group[k]).collect()
    };
    if old_revision_diff >= total_diff {
        choose(not_updated, total_diff)
    } else if old_revision_diff > 0 {
        let mut victims = choose(not_updated, old_revision_diff);
        victims.extend(choose(updated, total_diff - old_revision_diff));
        victims
    } else {
        choose(updated, total_diff)
    }
}

/// Sorts a victim group; returns positions in `pods`, first deleted first.
fn sort_victims(pods: &[&Pod], ctx: &VictimContext<'_>) -> Vec<usize> {
    let ranks = if ctx.spread_constraints.is_empty() {
        same_node_ranks(pods)
    } else {
        spread_constraint_ranks(pods, ctx.spread_constraints, ctx.node_labels)
    };
    let keys: Vec<VictimKeys> = pods
        .iter()
        .zip(&ranks)
        .map(|(p, &rank)| VictimKeys::of(p, Some(is_pod_available(p, ctx.min_ready_seconds, ctx.now)), rank))
        .collect();
    sorted_positions(&keys, cmp_victims)
}

/// The keys of Kruise's `ActivePodsWithRanks.Less`, computed once per pod.
#[derive(Clone, Debug)]
struct VictimKeys {
    assigned: bool,
    phase: u8,
    /// `None` when the sort has no availability function (the rankers' inner sorts).
    available: Option<bool>,
    ready: bool,
    cost: i32,
    rank: f64,
    ready_since: Option<Timestamp>,
    restarts: i32,
    created: Option<Timestamp>,
}

impl VictimKeys {
    fn of(pod: &Pod, available: Option<bool>, rank: f64) -> Self {
        VictimKeys {
            assigned: !node_name(pod).is_empty(),
            phase: phase_ordinal(pod),
            available,
            ready: is_pod_ready(pod),
            cost: pod_deletion_cost(pod),
            rank,
            ready_since: ready_since(pod),
            restarts: max_container_restarts(pod),
            created: creation_time(pod),
        }
    }
}

/// `Less` means `a` is deleted before `b`.
fn cmp_victims(a: &VictimKeys, b: &VictimKeys) -> Ordering {
    a.assigned
        .cmp(&b.assigned)
        .then(a.phase.cmp(&b.phase))
        .then_with(|| match (a.available, b.available) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => Ordering::Equal,
        })
        .then(a.ready.cmp(&b.ready))
        .then(a.cost.cmp(&b.cost))
        .then_with(|| b.rank.partial_cmp(&a.rank).unwrap_or(Ordering::Equal))
        // Ready times only differ between two ready pods: a not-ready pod's time is zero.
        .then_with(|| cmp_zero_then_later(a.ready_since, b.ready_since))
        .then(b.restarts.cmp(&a.restarts))
        .then_with(|| cmp_zero_then_later(a.created, b.created))
}

/// Positions `0..keys.len()` sorted stably by `cmp`.
fn sorted_positions<K>(keys: &[K], cmp: impl Fn(&K, &K) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| cmp(&keys[a], &keys[b]));
    order
}

/// Kruise's `NewSameNodeRanker`: for each node holding more than one of `pods`, the node's pods
/// are sorted by `ActivePodsWithRanks` (no ranker, no availability); the last (best to keep)
/// gets rank 0 and the others, from the first, k−1 down to 1. Unscheduled pods and pods alone on
/// their node get 0. Returns one rank per position of `pods`.
fn same_node_ranks(pods: &[&Pod]) -> Vec<f64> {
    let mut ranks = vec![0.0; pods.len()];
    let mut on_node: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, p) in pods.iter().enumerate() {
        let node = node_name(p);
        if !node.is_empty() {
            on_node.entry(node).or_default().push(i);
        }
    }
    for members in on_node.values().filter(|m| m.len() > 1) {
        let keys: Vec<VictimKeys> = members.iter().map(|&i| VictimKeys::of(pods[i], None, 0.0)).collect();
        let order = sorted_positions(&keys, cmp_victims);
        let ranked = order.len() - 1;
        for (pos, &k) in order[..ranked].iter().enumerate() {
            ranks[members[k]] = (ranked - pos) as f64;
        }
    }
    ranks
}

/// Kruise's `NewSpreadConstraintsRanker`. Pods on nodes found in `node_labels` are grouped, per
/// constraint, into topology domains by the node label `topology_key` (nodes without the label,
/// or with a value outside non-empty `limited_values`, are left out). Within a domain the pods
/// (in order of their nodes' first appearance, then input order) are sorted by
/// `ActivePodsWithRanks` with the same-node rank of all `pods` as ranker, except for the
/// hostname key which sorts without a ranker; the i-th of n gets `(n − i) · ln(domains + 2)`
/// added to its rank. Returns one rank per position of `pods`.
fn spread_constraint_ranks(
    pods: &[&Pod],
    constraints: &[PodSpreadConstraint],
    node_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<f64> {
    let mut ranks = vec![0.0; pods.len()];
    let mut nodes: Vec<&str> = Vec::new();
    let mut on_node: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, p) in pods.iter().enumerate() {
        let node = node_name(p);
        if node.is_empty() || !node_labels.contains_key(node) {
            continue;
        }
        let members = on_node.entry(node).or_insert_with(|| {
            nodes.push(node);
            Vec::new()
        });
        members.push(i);
    }

    let same_node = same_node_ranks(pods);
    for constraint in constraints {
        let limited: Option<BTreeSet<&str>> =
            (!constraint.limited_values.is_empty()).then(|| constraint.limited_values.iter().map(String::as_str).collect());
        let mut domains: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &node in &nodes {
            let Some(value) = node_labels.get(node).and_then(|l| l.get(&constraint.topology_key)) else {
                continue;
            };
            if limited.as_ref().is_some_and(|set| !set.contains(value.as_str())) {
                continue;
            }
            domains.entry(value.as_str()).or_default().extend(&on_node[node]);
        }
        let use_same_node = constraint.topology_key != LABEL_HOSTNAME;
        let weight = ((domains.len() + 2) as f64).ln();
        for members in domains.values() {
            let keys: Vec<VictimKeys> =
                members.iter().map(|&i| VictimKeys::of(pods[i], None, if use_same_node { same_node[i] } else { 0.0 })).collect();
            let order = sorted_positions(&keys, cmp_victims);
            let n = order.len();
            for (pos, &k) in order.iter().enumerate() {
                ranks[members[k]] += (n - pos) as f64 * weight;
            }
        }
    }
    ranks
}

// ---------------------------------------------------------------------------------------------
// Update order
// ---------------------------------------------------------------------------------------------

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
pub fn sort_update_indexes<P: Borrow<Pod>>(
    pods: &[P],
    mut candidates: Vec<usize>,
    priority: Option<&UpdatePriorityStrategy>,
    scatter: &[UpdateScatterTerm],
) -> Vec<usize> {
    let pod = |i: usize| -> &Pod { pods[i].borrow() };
    let keys: Vec<ActiveKeys> = candidates.iter().map(|&i| ActiveKeys::of(pod(i))).collect();
    candidates = sorted_positions(&keys, cmp_active).into_iter().map(|k| candidates[k]).collect();

    if let Some(strategy) = priority {
        candidates = priority_sort(strategy, pods, candidates);
    }
    let all: Vec<Option<&Pod>> = pods.iter().map(|p| Some(p.borrow())).collect();
    candidates = scatter_sort(scatter, &all, candidates);

    candidates.sort_by_key(|&i| lifecycle_state(pod(i)) != LifecycleState::PreparingUpdate.as_str());
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
    fn of(pod: &Pod) -> Self {
        ActiveKeys {
            assigned: !node_name(pod).is_empty(),
            phase: phase_ordinal(pod),
            ready: is_pod_ready(pod),
            ready_since: ready_since(pod),
            restarts: max_container_restarts(pod),
            sidecar_restarts: max_sidecar_restarts(pod),
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
fn priority_sort<P: Borrow<Pod>>(strategy: &UpdatePriorityStrategy, pods: &[P], candidates: Vec<usize>) -> Vec<usize> {
    if strategy.weight_priority.is_empty() && strategy.order_priority.is_empty() {
        return candidates;
    }
    let empty = BTreeMap::new();
    let labels: Vec<&BTreeMap<String, String>> = candidates.iter().map(|&i| pod_labels(pods[i].borrow()).unwrap_or(&empty)).collect();
    let order = sorted_positions(&labels, |a, b| cmp_priority(strategy, a, b));
    order.into_iter().map(|k| candidates[k]).collect()
}

/// Kruise's `prioritySort.compare` without its tie value: `Less` means `a` updates first,
/// `Equal` means the strategy does not tell them apart.
fn cmp_priority(strategy: &UpdatePriorityStrategy, a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Ordering {
    if !strategy.weight_priority.is_empty() {
        weight_priority(strategy, b).cmp(&weight_priority(strategy, a))
    } else if !strategy.order_priority.is_empty() {
        let (level_a, order_a) = order_priority(strategy, a);
        let (level_b, order_b) = order_priority(strategy, b);
        level_a.cmp(&level_b).then(order_b.cmp(&order_a))
    } else {
        Ordering::Equal
    }
}

fn weight_priority(strategy: &UpdatePriorityStrategy, labels: &BTreeMap<String, String>) -> i64 {
    strategy
        .weight_priority
        .iter()
        .filter(|term| selector_matches(&term.match_selector, labels) == Some(true))
        .map(|term| i64::from(term.weight))
        .sum()
}

/// `(index of the first orderedKey present, integer suffix of its value)`, `(-1, 0)` if none.
fn order_priority(strategy: &UpdatePriorityStrategy, labels: &BTreeMap<String, String>) -> (i64, i64) {
    strategy
        .order_priority
        .iter()
        .enumerate()
        .find_map(|(i, term)| labels.get(&term.ordered_key).map(|v| (i as i64, int_suffix(v))))
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
    let mut all = true;
    for (k, v) in selector.match_labels.iter().flatten() {
        all &= labels.get(k) == Some(v);
    }
    for expr in selector.match_expressions.iter().flatten() {
        let values = expr.values.as_deref().unwrap_or(&[]);
        let present = labels.get(&expr.key);
        let holds = match expr.operator.as_str() {
            "In" => present.is_some_and(|v| values.contains(v)),
            "NotIn" => present.is_none_or(|v| !values.contains(v)),
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
fn scatter_sort(strategy: &[UpdateScatterTerm], pods: &[Option<&Pod>], mut candidates: Vec<usize>) -> Vec<usize> {
    if strategy.is_empty() || candidates.len() <= 1 {
        return candidates;
    }
    for term in scatter_terms(strategy, pods, &candidates) {
        candidates = scatter_by_term(&term, pods, candidates);
    }
    candidates
}

/// `scatterSort.getScatterTerms`.
fn scatter_terms(strategy: &[UpdateScatterTerm], pods: &[Option<&Pod>], candidates: &[usize]) -> Vec<UpdateScatterTerm> {
    if strategy.len() == 1 {
        return strategy.to_vec();
    }
    let mut terms: Vec<UpdateScatterTerm> = Vec::new();
    let mut counts: HashMap<UpdateScatterTerm, usize> = HashMap::new();
    for term in strategy {
        for &i in candidates {
            let Some(pod) = pods[i] else { continue };
            if pod_labels(pod).and_then(|l| l.get(&term.key)) == Some(&term.value) {
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
fn scatter_by_term(term: &UpdateScatterTerm, pods: &[Option<&Pod>], candidates: Vec<usize>) -> Vec<usize> {
    let is_matched = |pod: &Pod| label_value(pod, &term.key) == term.value;
    let (mut matched, mut unmatched): (Vec<usize>, Vec<usize>) = candidates.iter().partition(|&&i| pods[i].is_some_and(is_matched));
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
///   the diff arithmetic (§5.1); the list is first cut to `|update_num|`.
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
pub fn limit_update_indexes<P: Borrow<Pod>>(
    pods: &[P],
    mut candidates: Vec<usize>,
    update_num: i32,
    update_max_unavailable: i32,
    is_on_target_revision: impl Fn(&Pod) -> bool,
    min_ready_seconds: i32,
    now: Timestamp,
) -> Vec<usize> {
    candidates.truncate(update_num.unsigned_abs() as usize);
    let max_unavailable = i64::from(update_max_unavailable);

    let mut unavailable: i64 = 0;
    let mut target_unavailable: i64 = 0;
    for pod in pods.iter().map(Borrow::borrow) {
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
        if is_pod_available(pods[i].borrow(), min_ready_seconds, now) {
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
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodStatus, TopologySpreadConstraint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};

    use crate::api::shared::{UpdatePriorityOrderTerm, UpdatePriorityWeightTerm};

    const ZONE: &str = "failure-domain.beta.kubernetes.io/zone";

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn now() -> Timestamp {
        ts("2025-06-01T12:00:00Z")
    }

    fn cond(type_: &str, status: &str, since: Option<Timestamp>) -> PodCondition {
        PodCondition { type_: type_.into(), status: status.into(), last_transition_time: since.map(Time), ..Default::default() }
    }

    /// A pod with the given phase and conditions.
    fn pod_with(phase: Option<&str>, conditions: Vec<PodCondition>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: phase.map(Into::into),
                conditions: (!conditions.is_empty()).then_some(conditions),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Kruise's `readyPod()`: Running with Ready=True, no transition time.
    fn ready_pod() -> Pod {
        pod_with(Some("Running"), vec![cond("Ready", "True", None)])
    }

    fn with_labels(mut pod: Pod, labels: &[(&str, &str)]) -> Pod {
        let map = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in labels {
            map.insert((*k).into(), (*v).into());
        }
        pod
    }

    fn on_node(mut pod: Pod, node: &str) -> Pod {
        pod.spec.get_or_insert_with(Default::default).node_name = (!node.is_empty()).then(|| node.into());
        pod
    }

    fn named(mut pod: Pod, name: &str) -> Pod {
        pod.metadata.name = Some(name.into());
        pod
    }

    fn label_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    /// Parses `"k=v,k2=v2"` (entries without `=` are ignored, as in Kruise's scatter tests).
    fn parse_labels(s: &str) -> BTreeMap<String, String> {
        s.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn labelled(s: &str) -> Pod {
        Pod { metadata: ObjectMeta { labels: Some(parse_labels(s)), ..Default::default() }, ..Default::default() }
    }

    // ---- availability

    #[test]
    fn ready_ignores_phase_and_uses_first_ready_condition() {
        assert!(is_pod_ready(&pod_with(Some("Pending"), vec![cond("Ready", "True", None)])));
        assert!(!is_pod_ready(&pod_with(Some("Running"), vec![])));
        assert!(!is_pod_ready(&pod_with(Some("Running"), vec![cond("Ready", "False", None), cond("Ready", "True", None)])));
    }

    #[test]
    fn available_needs_running_normal_state_and_inplace_ready() {
        let n = now();
        assert!(is_pod_available(&ready_pod(), 0, n));
        assert!(!is_pod_available(&pod_with(Some("Pending"), vec![cond("Ready", "True", None)]), 0, n));
        for (state, ok) in [("", true), ("Normal", true), ("PreparingNormal", false), ("Updating", false), ("Bogus", false)] {
            assert_eq!(is_pod_available(&with_labels(ready_pod(), &[(keys::LIFECYCLE_STATE, state)]), 0, n), ok, "{state}");
        }
        let mut p = ready_pod();
        p.status.as_mut().unwrap().conditions.as_mut().unwrap().push(cond(keys::INPLACE_UPDATE_READY, "False", None));
        assert!(!is_pod_available(&p, 0, n));
        p.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].status = "True".into();
        assert!(is_pod_available(&p, 0, n));
    }

    #[test]
    fn available_waits_min_ready_seconds_strictly() {
        let n = now();
        let since = |secs: i64| pod_with(Some("Running"), vec![cond("Ready", "True", Some(n - SignedDuration::from_secs(secs)))]);
        assert!(!is_pod_available(&since(10), 10, n), "exactly minReadySeconds is not enough (Before is strict)");
        assert!(is_pod_available(&since(11), 10, n));
        assert!(!is_pod_available(&since(5), 10, n));
        // A zero transition time never satisfies a positive minReadySeconds.
        assert!(!is_pod_available(&ready_pod(), 1, n));
        let go_zero = pod_with(Some("Running"), vec![cond("Ready", "True", Some(ts("0001-01-01T00:00:00Z")))]);
        assert!(!is_pod_available(&go_zero, 1, n));
    }

    #[test]
    fn deletion_cost_parses_like_kubernetes() {
        let cost = |v: &str| {
            let mut p = Pod::default();
            p.metadata.annotations = Some(label_map(&[(keys::POD_DELETION_COST, v)]));
            pod_deletion_cost(&p)
        };
        assert_eq!(pod_deletion_cost(&Pod::default()), 0);
        for (v, want) in [
            ("10", 10),
            ("-5", -5),
            ("0", 0),
            ("-0", 0),
            ("-007", -7),
            ("+10", 0),
            ("008", 0),
            ("", 0),
            ("abc", 0),
            ("1a", 0),
            (" 1", 0),
            ("-", 0),
            ("2147483647", i32::MAX),
            ("2147483648", 0),
            ("-2147483648", i32::MIN),
        ] {
            assert_eq!(cost(v), want, "{v:?}");
        }
    }

    // ---- scale-down sort (pod_sorter_test.go)

    /// Kruise `TestSortingActivePods`, on `ActivePodsWithRanks` without ranker or availability.
    #[test]
    fn test_sorting_active_pods() {
        let now = now();
        let then = now - SignedDuration::from_hours(24 * 30);
        let pod = |name: &str,
                   node: &str,
                   phase: &str,
                   ready: bool,
                   restarts: i32,
                   ready_since: Option<Timestamp>,
                   created: Option<Timestamp>,
                   cost: Option<&str>| {
            let mut p = pod_with(Some(phase), if ready { vec![cond("Ready", "True", ready_since)] } else { vec![] });
            if ready {
                p.status.as_mut().unwrap().container_statuses =
                    Some(vec![ContainerStatus { restart_count: restarts, ..Default::default() }]);
            }
            p.metadata.creation_timestamp = created.map(Time);
            p.metadata.annotations = cost.map(|c| label_map(&[(keys::POD_DELETION_COST, c)]));
            named(on_node(p, node), name)
        };
        let unscheduled = pod("unscheduled", "", "Pending", false, 0, None, None, None);
        let scheduled_pending = pod("pending", "node", "Pending", false, 0, None, None, None);
        let unknown_phase = pod("unknown-phase", "node", "Unknown", false, 0, None, None, None);
        let running_not_ready = pod("not-ready", "node", "Running", false, 0, None, None, None);
        let ready_no_ltt = pod("ready-no-last-transition-time", "node", "Running", true, 0, None, None, None);
        let ready_now = pod("ready-now", "node", "Running", true, 0, Some(now), Some(now), None);
        let ready_then = pod("ready-then", "node", "Running", true, 0, Some(then), Some(then), None);
        let ready_high_restarts = pod("ready-high-restarts", "node", "Running", true, 9001, Some(now), Some(now), None);
        let ready_now_created_then = pod("ready-now-created-then", "node", "Running", true, 0, Some(now), Some(then), None);
        let low_cost = pod("low-deletion-cost", "node", "Running", true, 0, Some(now), Some(then), Some("10"));
        let high_cost = pod("high-deletion-cost", "node", "Running", true, 0, Some(now), Some(then), Some("100"));

        let keys = |p: &Pod| VictimKeys::of(p, None, 0.0);
        for p in [
            &unscheduled,
            &scheduled_pending,
            &unknown_phase,
            &running_not_ready,
            &ready_now_created_then,
            &ready_now,
            &ready_then,
            &ready_high_restarts,
            &ready_now_created_then,
        ] {
            assert_eq!(cmp_victims(&keys(p), &keys(p)), Ordering::Equal, "{:?}", p.metadata.name);
        }
        let inequalities = [
            (&unscheduled, &scheduled_pending),
            (&unscheduled, &scheduled_pending),
            (&scheduled_pending, &unknown_phase),
            (&unknown_phase, &running_not_ready),
            (&running_not_ready, &ready_no_ltt),
            (&ready_no_ltt, &ready_now),
            (&ready_now, &ready_then),
            (&ready_high_restarts, &ready_now),
            (&ready_now, &ready_now_created_then),
            (&low_cost, &high_cost),
        ];
        for (i, (lesser, greater)) in inequalities.into_iter().enumerate() {
            assert_eq!(cmp_victims(&keys(lesser), &keys(greater)), Ordering::Less, "test{i}");
            assert_eq!(cmp_victims(&keys(greater), &keys(lesser)), Ordering::Greater, "test{i}");
        }
    }

    /// Kruise `TestSameNodeRanker`.
    #[test]
    fn test_same_node_ranker() {
        // node a: 0, 4, 10; node b: 3, 6; node c: 5; node d: 7, 8, 9; 1 and 2 unscheduled.
        let nodes = ["a", "", "", "b", "a", "c", "b", "d", "d", "d", "a"];
        let pods: Vec<Pod> = nodes.iter().map(|n| on_node(Pod::default(), n)).collect();
        let refs: Vec<&Pod> = pods.iter().collect();
        let ranks = same_node_ranks(&refs);
        assert_eq!(ranks, vec![2.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 2.0, 1.0, 0.0, 0.0]);
    }

    /// Kruise `TestSpreadConstraintsRanker`.
    #[test]
    fn test_spread_constraints_ranker() {
        let mut node_labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        node_labels.insert("a".into(), BTreeMap::new());
        for (node, zone) in [("b", "z1"), ("c", "z1"), ("d", "z1"), ("e", "z2"), ("f", "z2"), ("g", "z2"), ("h", "z3"), ("i", "z3")] {
            node_labels.insert(node.into(), label_map(&[(LABEL_HOSTNAME, node), (ZONE, zone)]));
        }
        let mut pods: Vec<Pod> = Vec::new();
        for (node, n) in [("a", 2), ("b", 2), ("c", 3), ("d", 5), ("e", 5), ("f", 3), ("i", 5)] {
            for i in 0..n {
                pods.push(named(on_node(Pod::default(), node), &format!("{node}-{i}")));
            }
        }
        // z1: 10 pods (b: 2, c: 3, d: 5); z2: 8 pods (e: 5, f: 3); z3: 5 pods (i: 5)
        let zone = |limited: &[&str]| PodSpreadConstraint {
            topology_key: ZONE.into(),
            limited_values: limited.iter().map(|s| (*s).into()).collect(),
        };
        let host = PodSpreadConstraint { topology_key: LABEL_HOSTNAME.into(), limited_values: vec![] };
        let cases: Vec<(&str, Vec<PodSpreadConstraint>, Vec<&str>)> = vec![
            (
                "zone{no limit}",
                vec![zone(&[])],
                vec![
                    "d-0", "d-1", "c-0", "e-0", "d-2", "e-1", "b-0", "e-2", "c-1", "f-0", "i-0", "d-3", "e-3", "i-1", "b-1", "f-1", "i-2",
                    "c-2", "e-4", "i-3", "d-4", "f-2", "i-4",
                ],
            ),
            (
                "zone{limited (z2, z3)}",
                vec![zone(&["z2", "z3"])],
                vec!["e-0", "e-1", "e-2", "f-0", "i-0", "e-3", "i-1", "f-1", "i-2", "e-4", "i-3", "f-2", "i-4"],
            ),
            (
                "zone{no limit}, host",
                vec![zone(&[]), host],
                vec![
                    "d-0", "e-0", "d-1", "e-1", "c-0", "i-0", "d-2", "e-2", "i-1", "f-0", "b-0", "c-1", "i-2", "d-3", "e-3", "f-1", "i-3",
                    "b-1", "c-2", "e-4", "d-4", "f-2", "i-4",
                ],
            ),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        for (name, constraints, expected) in cases {
            let ranks = spread_constraint_ranks(&refs, &constraints, &node_labels);
            let mut got: Vec<usize> = (0..pods.len()).filter(|&i| ranks[i] > 0.0).collect();
            got.sort_by(|&a, &b| ranks[b].partial_cmp(&ranks[a]).unwrap());
            let got: Vec<&str> = got.iter().map(|&i| pods[i].metadata.name.as_deref().unwrap()).collect();
            assert_eq!(got, expected, "{name}");
        }
    }

    fn ctx<'a>(
        min_ready: i32,
        constraints: &'a [PodSpreadConstraint],
        nodes: &'a BTreeMap<String, BTreeMap<String, String>>,
    ) -> VictimContext<'a> {
        VictimContext { min_ready_seconds: min_ready, now: now(), spread_constraints: constraints, node_labels: nodes }
    }

    fn rev(pod: Pod, rev: &str) -> Pod {
        with_labels(pod, &[(keys::CONTROLLER_REVISION_HASH, rev)])
    }

    fn is_new(p: &Pod) -> bool {
        label_value(p, keys::CONTROLLER_REVISION_HASH) == "new"
    }

    #[test]
    fn choose_pods_to_delete_splits_by_revision() {
        let nodes = BTreeMap::new();
        let c = ctx(0, &[], &nodes);
        // old: 0 (ready), 2 (not ready), 4 (ready); new: 1 (not ready), 3 (ready)
        let pods = vec![
            rev(on_node(ready_pod(), "n0"), "old"),
            rev(on_node(pod_with(Some("Running"), vec![]), "n1"), "new"),
            rev(on_node(pod_with(Some("Running"), vec![]), "n2"), "old"),
            rev(on_node(ready_pod(), "n3"), "new"),
            rev(on_node(ready_pod(), "n4"), "old"),
        ];
        // Everything from the old group when old_revision_diff >= total.
        assert_eq!(choose_pods_to_delete(1, 3, &pods, is_new, &c), vec![2]);
        assert_eq!(choose_pods_to_delete(2, 2, &pods, is_new, &c), vec![2, 0]);
        // Old first, then the rest from the new group.
        assert_eq!(choose_pods_to_delete(2, 1, &pods, is_new, &c), vec![2, 1]);
        // Only new.
        assert_eq!(choose_pods_to_delete(1, 0, &pods, is_new, &c), vec![1]);
        // A whole group is returned unsorted, in input order.
        assert_eq!(choose_pods_to_delete(3, 3, &pods, is_new, &c), vec![0, 2, 4]);
        assert_eq!(choose_pods_to_delete(2, 0, &pods, is_new, &c), vec![1, 3]);
        // Asking for more than a group holds returns the group and does not top up from the other.
        assert_eq!(choose_pods_to_delete(5, 5, &pods, is_new, &c), vec![0, 2, 4]);
        assert_eq!(choose_pods_to_delete(0, 0, &pods, is_new, &c), Vec::<usize>::new());
    }

    #[test]
    fn choose_pods_to_delete_key_order() {
        let nodes = BTreeMap::new();
        let n = now();
        let ready_since = |secs: i64| pod_with(Some("Running"), vec![cond("Ready", "True", Some(n - SignedDuration::from_secs(secs)))]);
        let cost = |p: Pod, c: &str| {
            let mut p = p;
            p.metadata.annotations = Some(label_map(&[(keys::POD_DELETION_COST, c)]));
            p
        };
        // Ready for 5 s with minReadySeconds 10: not yet available, so before the available ones
        // even though it has a higher deletion cost; then the cheaper available pod; then the
        // pod sharing a node with another (higher same-node rank) before the one alone.
        let pods = vec![
            on_node(ready_since(100), "solo"),          // 0 available, cost 0, alone
            cost(on_node(ready_since(5), "x"), "9"),    // 1 not available yet
            cost(on_node(ready_since(100), "y"), "-1"), // 2 available, cost -1
            on_node(ready_since(100), "shared"),        // 3 available, shares node (older ready: best on node)
            on_node(ready_since(50), "shared"),         // 4 available, shares node, rank 1
        ];
        let c = ctx(10, &[], &nodes);
        assert_eq!(choose_pods_to_delete(4, 0, &pods, |_| true, &c), vec![1, 2, 4, 0]);
        // Without minReadySeconds the pod ready for 5 s is available; its cost 9 puts it last.
        let c = ctx(0, &[], &nodes);
        assert_eq!(choose_pods_to_delete(4, 0, &pods, |_| true, &c), vec![2, 4, 0, 3]);
        // Unscheduled and Pending come first.
        let mut with_early = pods.clone();
        with_early.push(pod_with(Some("Pending"), vec![]));
        with_early.push(on_node(pod_with(Some("Pending"), vec![]), "z"));
        assert_eq!(choose_pods_to_delete(3, 0, &with_early, |_| true, &c), vec![5, 6, 2]);
    }

    #[test]
    fn choose_pods_to_delete_uses_spread_ranker_with_constraints() {
        let mut nodes: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        nodes.insert("a".into(), label_map(&[(ZONE, "z1")]));
        nodes.insert("b".into(), label_map(&[(ZONE, "z1")]));
        nodes.insert("c".into(), label_map(&[(ZONE, "z2")]));
        let pods = vec![
            named(on_node(ready_pod(), "c"), "c-0"),
            named(on_node(ready_pod(), "a"), "a-0"),
            named(on_node(ready_pod(), "b"), "b-0"),
            named(on_node(ready_pod(), "b"), "b-1"),
        ];
        let constraints = pod_spread_constraints(Some(&PodSpec {
            topology_spread_constraints: Some(vec![TopologySpreadConstraint { topology_key: ZONE.into(), ..Default::default() }]),
            ..Default::default()
        }));
        assert_eq!(constraints, vec![PodSpreadConstraint { topology_key: ZONE.into(), limited_values: vec![] }]);
        // z1 holds three pods (b-0 has the same-node rank): b-0 3, a-0 2, b-1 1; z2: c-0 1.
        let c = ctx(0, &constraints, &nodes);
        assert_eq!(choose_pods_to_delete(2, 0, &pods, |_| true, &c), vec![2, 1]);
        // Without constraints only the same-node rank counts: b-0 first, then input order.
        let c = ctx(0, &[], &nodes);
        assert_eq!(choose_pods_to_delete(2, 0, &pods, |_| true, &c), vec![2, 0]);
        // Pods on nodes that cannot be read get no spread rank at all.
        let unknown = BTreeMap::new();
        let c = ctx(0, &constraints, &unknown);
        assert_eq!(choose_pods_to_delete(2, 0, &pods, |_| true, &c), vec![0, 1]);
    }

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
            assert_eq!(cmp_priority(strategy, &parse_labels(a), &parse_labels(b)), want, "case #{i}");
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
        let w = |l: &str| weight_priority(&s, &parse_labels(l));
        assert_eq!(w("zone=a"), 1 + 8);
        assert_eq!(w("zone=b"), 1 + 2 + 8);
        assert_eq!(w("zone=c,gpu=x"), 2 + 4);
        assert_eq!(w(""), 2);
        // An empty selector matches everything.
        let all = UpdatePriorityStrategy {
            weight_priority: vec![UpdatePriorityWeightTerm { weight: 3, match_selector: LabelSelector::default() }],
            ..Default::default()
        };
        assert_eq!(weight_priority(&all, &BTreeMap::new()), 3);
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
    /// case produces were derived by hand from §5.1 (no toDelete, no PreparingDelete; current
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
        let on_new = |p: &Pod| label_value(p, keys::CONTROLLER_REVISION_HASH) == "new";
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
