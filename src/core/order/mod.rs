//! Pod ordering, ported from Kruise v1.9.0 (built against Kubernetes v1.32.6), in three parts:
//!
//! * [`pod`]: readiness and CloneSet availability (`IsPodAvailable` in
//!   `cloneset_sync_utils.go`), and the pod accessors the two sorts share;
//! * [`victims`]: scale-down victims (`choosePodsToDelete` in `cloneset_scale.go` with
//!   `ActivePodsWithRanks`, the same-node ranker and the topology-spread ranker of
//!   `cloneset/utils/pod_sorter.go`);
//! * [`update`]: the order of pods to update (`SortUpdateIndexes` in `cloneset_update.go`:
//!   Kubernetes' `controller.ActivePods`, then `pkg/util/updatesort` priority and scatter, then
//!   PreparingUpdate first) and the maxUnavailable cut of that list (`limitUpdateIndexes`).
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

mod pod;
mod update;
mod victims;

pub use pod::{is_pod_available, is_pod_ready, is_sidecar_restart_policy, max_container_restarts, max_sidecar_restarts, pod_deletion_cost};
pub use update::{limit_update_indexes, selector_matches, selector_matches_by, sort_update_indexes};
pub use victims::{PodSpreadConstraint, VictimContext, choose_pods_to_delete, pod_spread_constraints};

/// Pods for the tests of all three parts.
#[cfg(test)]
mod fixtures {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    pub(super) const ZONE: &str = "failure-domain.beta.kubernetes.io/zone";

    pub(super) fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    pub(super) fn now() -> Timestamp {
        ts("2025-06-01T12:00:00Z")
    }

    pub(super) fn cond(type_: &str, status: &str, since: Option<Timestamp>) -> PodCondition {
        PodCondition { type_: type_.into(), status: status.into(), last_transition_time: since.map(Time), ..Default::default() }
    }

    /// A pod with the given phase and conditions.
    pub(super) fn pod_with(phase: Option<&str>, conditions: Vec<PodCondition>) -> Pod {
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
    pub(super) fn ready_pod() -> Pod {
        pod_with(Some("Running"), vec![cond("Ready", "True", None)])
    }

    pub(super) fn with_labels(mut pod: Pod, labels: &[(&str, &str)]) -> Pod {
        let map = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in labels {
            map.insert((*k).into(), (*v).into());
        }
        pod
    }

    pub(super) fn on_node(mut pod: Pod, node: &str) -> Pod {
        pod.spec.get_or_insert_with(Default::default).node_name = (!node.is_empty()).then(|| node.into());
        pod
    }

    pub(super) fn named(mut pod: Pod, name: &str) -> Pod {
        pod.metadata.name = Some(name.into());
        pod
    }

    pub(super) fn label_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    /// Parses `"k=v,k2=v2"` (entries without `=` are ignored, as in Kruise's scatter tests).
    pub(super) fn parse_labels(s: &str) -> BTreeMap<String, String> {
        s.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
    }

    /// `pod` at revision `rev`.
    pub(super) fn rev(pod: Pod, rev: &str) -> Pod {
        with_labels(pod, &[(crate::api::keys::CONTROLLER_REVISION_HASH, rev)])
    }

    pub(super) fn labelled(s: &str) -> Pod {
        Pod { metadata: ObjectMeta { labels: Some(parse_labels(s)), ..Default::default() }, ..Default::default() }
    }
}
