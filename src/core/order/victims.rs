//! Scale-down victims: `choosePodsToDelete` in `cloneset_scale.go` with `ActivePodsWithRanks`,
//! the same-node ranker and the topology-spread ranker of `cloneset/utils/pod_sorter.go`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::jiff::Timestamp;

use crate::core::pod_read::PodRead;

use super::pod::{
    LABEL_HOSTNAME, cmp_zero_then_later, creation_time, is_pod_available, is_pod_ready, phase_ordinal, pod_deletion_cost, ready_since,
    sorted_positions,
};

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
pub fn choose_pods_to_delete<P: PodRead>(
    total_diff: usize,
    old_revision_diff: usize,
    pods: &[P],
    is_updated: impl Fn(&dyn PodRead) -> bool,
    ctx: &VictimContext<'_>,
) -> Vec<usize> {
    let (updated, not_updated): (Vec<usize>, Vec<usize>) = (0..pods.len()).partition(|&i| is_updated(&pods[i]));
    let choose = |group: Vec<usize>, diff: usize| -> Vec<usize> {
        if diff >= group.len() {
            return group;
        }
        let members: Vec<&dyn PodRead> = group.iter().map(|&i| &pods[i] as &dyn PodRead).collect();
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
fn sort_victims(pods: &[&dyn PodRead], ctx: &VictimContext<'_>) -> Vec<usize> {
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
    fn of(pod: &dyn PodRead, available: Option<bool>, rank: f64) -> Self {
        VictimKeys {
            assigned: !pod.node_name().is_empty(),
            phase: phase_ordinal(pod),
            available,
            ready: is_pod_ready(pod),
            cost: pod_deletion_cost(pod),
            rank,
            ready_since: ready_since(pod),
            restarts: pod.max_restarts().0,
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

/// Kruise's `NewSameNodeRanker`: for each node holding more than one of `pods`, the node's pods
/// are sorted by `ActivePodsWithRanks` (no ranker, no availability); the last (best to keep)
/// gets rank 0 and the others, from the first, k−1 down to 1. Unscheduled pods and pods alone on
/// their node get 0. Returns one rank per position of `pods`.
fn same_node_ranks(pods: &[&dyn PodRead]) -> Vec<f64> {
    let mut ranks = vec![0.0; pods.len()];
    let mut on_node: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, p) in pods.iter().enumerate() {
        let node = p.node_name();
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
    pods: &[&dyn PodRead],
    constraints: &[PodSpreadConstraint],
    node_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<f64> {
    let mut ranks = vec![0.0; pods.len()];
    let mut nodes: Vec<&str> = Vec::new();
    let mut on_node: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, p) in pods.iter().enumerate() {
        let node = p.node_name();
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerStatus, Pod, TopologySpreadConstraint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::SignedDuration;

    use super::*;
    use crate::api::keys;
    use crate::core::order::fixtures::*;
    use crate::core::order::pod::label_value;

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
        let refs: Vec<&dyn PodRead> = pods.iter().map(|p| p as &dyn PodRead).collect();
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
        let refs: Vec<&dyn PodRead> = pods.iter().map(|p| p as &dyn PodRead).collect();
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

    fn is_new(p: &dyn PodRead) -> bool {
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
}
