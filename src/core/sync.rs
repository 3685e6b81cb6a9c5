//! What one reconcile pass should do to the pods: refresh them, or scale, or update — one phase
//! per pass, in Kruise's order (§4.4, §5.2). Pure: the controller executes the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::shared::LifecycleState;
use crate::api::{CloneSet, keys};
use crate::config::FeatureGates;
use crate::core::diff::{self, DiffInput, ExpectationDiffs, PodView};
use crate::core::{lifecycle, order, pods::hash_matches, status};

/// One pass's view of a CloneSet and its active pods.
pub struct SyncInput<'a> {
    pub cloneset: &'a CloneSet,
    /// Active pods: owned, not terminating, not Succeeded/Failed.
    pub pods: &'a [&'a Pod],
    pub current_revision: &'a str,
    pub update_revision: &'a str,
    pub gates: FeatureGates,
    /// `--cloneset-scaling-exclude-preparing-delete`.
    pub exclude_preparing_delete_flag: bool,
    /// Labels of the nodes pods run on (for the topology-spread deletion ranker).
    pub node_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub now: Timestamp,
}

impl SyncInput<'_> {
    fn exclude_preparing_delete(&self) -> bool {
        self.exclude_preparing_delete_flag
            || self
                .cloneset
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(keys::SCALING_EXCLUDE_PREPARING_DELETE))
                .is_some_and(|v| v == "true")
    }

    fn is_on_update_revision(&self, pod: &Pod) -> bool {
        status::pod_revision(pod).is_some_and(|h| hash_matches(h, self.update_revision))
    }

    fn specified_delete(&self, pod: &Pod) -> bool {
        let labelled = pod.metadata.labels.as_ref().is_some_and(|l| l.contains_key(keys::SPECIFIED_DELETE));
        let listed = pod.metadata.name.as_ref().is_some_and(|n| self.cloneset.spec.scale_strategy.pods_to_delete.contains(n));
        labelled || listed
    }

    fn diff_input(&self) -> DiffInput<'_> {
        let s = &self.cloneset.spec;
        DiffInput {
            replicas: s.replicas.unwrap_or(1),
            partition: s.update_strategy.partition.as_ref(),
            max_surge: s.update_strategy.max_surge.as_ref(),
            max_unavailable: s.update_strategy.max_unavailable.as_ref(),
            scale_max_unavailable: s.scale_strategy.max_unavailable.as_ref(),
            paused: s.update_strategy.paused,
            revisions_consistent: self.current_revision == self.update_revision,
            partition_rollback: self.gates.cloneset_partition_rollback,
            exclude_preparing_delete: self.exclude_preparing_delete(),
        }
    }

    /// Views for the arithmetic. For scaling, `PreparingUpdateAsUpdate` makes a PreparingUpdate
    /// pod count as updated; for updating, only the revision hash counts.
    fn views(&self, for_scale: bool) -> Vec<PodView> {
        let mrs = self.cloneset.spec.min_ready_seconds;
        self.pods
            .iter()
            .map(|p| {
                let st = lifecycle::state(p);
                let updated = self.is_on_update_revision(p)
                    || (for_scale && self.gates.preparing_update_as_update && st == Some(LifecycleState::PreparingUpdate));
                PodView {
                    updated,
                    preparing_delete: st == Some(LifecycleState::PreparingDelete),
                    specified_delete: self.specified_delete(p),
                    available: status::is_available(p, mrs, self.now),
                }
            })
            .collect()
    }
}

/// A pod to patch during refresh.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refresh {
    pub pod: String,
    /// Set the `InPlaceUpdateReady` condition True (first sight of the pod).
    pub mark_in_place_update_ready: bool,
    /// Labels to set (a missing `pod-template-hash`, the lifecycle state).
    pub labels: BTreeMap<String, String>,
    /// Set the lifecycle timestamp annotation (when the state changes).
    pub touch_lifecycle_timestamp: bool,
}

/// §5.2 step 1: what every pod needs before anything else happens.
pub fn plan_refresh(input: &SyncInput<'_>) -> Vec<Refresh> {
    let pre_normal = input.cloneset.spec.lifecycle.as_ref().and_then(|l| l.pre_normal.as_ref());
    let mut out = Vec::new();
    for pod in input.pods {
        let mut r = Refresh { pod: pod.metadata.name.clone().unwrap_or_default(), ..Default::default() };
        let has_gate = pod
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.as_ref())
            .is_some_and(|g| g.iter().any(|g| g.condition_type == keys::INPLACE_UPDATE_READY));
        let has_condition = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == keys::INPLACE_UPDATE_READY));
        r.mark_in_place_update_ready = has_gate && !has_condition;
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        if !labels.contains_key(keys::POD_TEMPLATE_HASH)
            && let Some(rev) = labels.get(keys::CONTROLLER_REVISION_HASH)
        {
            r.labels.insert(keys::POD_TEMPLATE_HASH.into(), crate::core::pods::short_hash(rev).into());
        }
        if lifecycle::state(pod) == Some(LifecycleState::PreparingNormal) && lifecycle::ready_for_normal(pod, pre_normal) {
            r.labels.insert(keys::LIFECYCLE_STATE.into(), LifecycleState::Normal.as_str().into());
            r.touch_lifecycle_timestamp = true;
        }
        if r.mark_in_place_update_ready || !r.labels.is_empty() {
            out.push(r);
        }
    }
    out
}

/// The scale phase's decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScalePlan {
    pub diffs: ExpectationDiffs,
    /// New pods to create from the current revision, then from the update revision.
    pub create_current: usize,
    pub create_update: usize,
    /// Set when `scaleStrategy.maxUnavailable` cut a scale-up (the `ScaleUpLimited` event).
    pub scale_up_limited_to: Option<i32>,
    /// Pods to delete, in order.
    pub delete: Vec<String>,
}

impl ScalePlan {
    pub fn changes_pods(&self) -> bool {
        self.create_current + self.create_update > 0 || !self.delete.is_empty()
    }
}

/// §4.4: scale up, or delete PreparingDelete / specified / surplus pods — the first step that
/// has something to do wins.
pub fn plan_scale(input: &SyncInput<'_>) -> ScalePlan {
    let views = input.views(true);
    let diffs = diff::calculate_diffs(&input.diff_input(), &views);
    let mut plan = ScalePlan { diffs, ..Default::default() };
    if diffs.scale_up_num > diffs.scale_up_limit {
        plan.scale_up_limited_to = Some(diffs.scale_up_limit);
    }
    if diffs.scale_up_num > 0 {
        let total = diffs.scale_up_limit.max(0) as usize;
        let current =
            if input.current_revision == input.update_revision { 0 } else { (diffs.scale_up_num_old_revision.max(0) as usize).min(total) };
        plan.create_current = current;
        plan.create_update = total - current;
        return plan;
    }
    let pre_delete_hook = input.cloneset.spec.lifecycle.as_ref().and_then(|l| l.pre_delete.as_ref());
    let mrs_zero_ready = |p: &Pod| status::is_available(p, 0, input.now);

    // PreparingDelete pods whose hook has been released are deleted.
    let preparing: Vec<&Pod> =
        input.pods.iter().copied().filter(|p| lifecycle::state(p) == Some(LifecycleState::PreparingDelete)).collect();
    let released: Vec<String> =
        preparing.iter().filter(|p| !lifecycle::is_hooked(pre_delete_hook, p)).filter_map(|p| p.metadata.name.clone()).collect();
    if !released.is_empty() {
        plan.delete = released;
        return plan;
    }

    // Specified deletes: not-ready pods always, ready ones within deleteReadyLimit.
    let specified: Vec<&Pod> = input
        .pods
        .iter()
        .copied()
        .filter(|p| input.specified_delete(p) && lifecycle::state(p) != Some(LifecycleState::PreparingDelete))
        .collect();
    let mut ready_budget = diffs.delete_ready_limit;
    let mut take = |pods: &[&Pod], out: &mut Vec<String>| {
        for p in pods {
            if !mrs_zero_ready(p) {
                out.extend(p.metadata.name.clone());
            } else if ready_budget > 0 {
                ready_budget -= 1;
                out.extend(p.metadata.name.clone());
            }
        }
    };
    let mut delete = Vec::new();
    take(&specified, &mut delete);
    if !delete.is_empty() {
        plan.delete = delete;
        return plan;
    }

    if diffs.scale_down_num > 0 && specified.is_empty() && preparing.is_empty() {
        let spread = order::pod_spread_constraints(input.cloneset.spec.template.spec.as_ref());
        let ctx = order::VictimContext {
            min_ready_seconds: input.cloneset.spec.min_ready_seconds,
            now: input.now,
            spread_constraints: &spread,
            node_labels: input.node_labels,
        };
        let victims = order::choose_pods_to_delete(
            diffs.scale_down_num.max(0) as usize,
            diffs.scale_down_num_old_revision.max(0) as usize,
            input.pods,
            |p: &Pod| input.is_on_update_revision(p),
            &ctx,
        );
        let victims: Vec<&Pod> = victims.into_iter().map(|i| input.pods[i]).collect();
        take(&victims, &mut plan.delete);
    }
    plan
}

/// The update phase's decision (recreate path: mark pods for deletion).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpdatePlan {
    pub diffs: ExpectationDiffs,
    /// Pods to update, in order; the target is `update_revision` (or the current revision when
    /// rolling back under `CloneSetPartitionRollback`).
    pub pods: Vec<String>,
    pub rolling_back: bool,
}

/// §5.2 steps 2–6.
pub fn plan_update(input: &SyncInput<'_>) -> UpdatePlan {
    let strategy = &input.cloneset.spec.update_strategy;
    if strategy.paused {
        return UpdatePlan::default();
    }
    let diffs = diff::calculate_diffs(&input.diff_input(), &input.views(false));
    if diffs.update_num == 0 {
        return UpdatePlan { diffs, ..Default::default() };
    }
    let rolling_back = diffs.update_num < 0;
    let candidates: Vec<usize> = input
        .pods
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            let st = lifecycle::state(p);
            let in_grace = p
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(keys::INPLACE_UPDATE_GRACE) || a.contains_key(keys::INPLACE_UPDATE_GRACE_LEGACY));
            let wants = if rolling_back { input.is_on_update_revision(p) } else { !input.is_on_update_revision(p) };
            st != Some(LifecycleState::PreparingDelete) && !in_grace && (wants || st == Some(LifecycleState::Updated))
        })
        .map(|(i, _)| i)
        .collect();
    let sorted = order::sort_update_indexes(input.pods, candidates, strategy.priority_strategy.as_ref(), &strategy.scatter_strategy);
    let target = if rolling_back { input.current_revision } else { input.update_revision };
    let chosen = order::limit_update_indexes(
        input.pods,
        sorted,
        diffs.update_num.abs(),
        diffs.update_max_unavailable,
        |p: &Pod| status::pod_revision(p).is_some_and(|h| hash_matches(h, target)),
        input.cloneset.spec.min_ready_seconds,
        input.now,
    );
    UpdatePlan { diffs, pods: chosen.into_iter().filter_map(|i| input.pods[i].metadata.name.clone()).collect(), rolling_back }
}

/// When a pod that is Ready but not yet available (minReadySeconds) becomes available.
pub fn next_availability(input: &SyncInput<'_>) -> Option<Duration> {
    let mrs = input.cloneset.spec.min_ready_seconds;
    if mrs <= 0 {
        return None;
    }
    input
        .pods
        .iter()
        .filter(|p| status::is_ready(p) && !status::is_available(p, mrs, input.now))
        .filter_map(|p| {
            let since = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")?.last_transition_time.as_ref()?.0;
            let at = since + SignedDuration::from_secs(i64::from(mrs));
            Some(Duration::try_from(at.duration_since(input.now)).unwrap_or(Duration::ZERO) + Duration::from_millis(500))
        })
        .min()
}

/// Names in `podsToDelete` that are not active pods of this CloneSet (Kruise drops them, §4.6).
pub fn stale_pods_to_delete(cs: &CloneSet, active: &[&Pod]) -> Option<Vec<String>> {
    let names: BTreeSet<&str> = active.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
    let list = &cs.spec.scale_strategy.pods_to_delete;
    let kept: Vec<String> = list.iter().filter(|n| names.contains(n.as_str())).cloned().collect();
    (kept.len() != list.len()).then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cloneset(replicas: i32, mrs: i32, pods_to_delete: &[&str]) -> CloneSet {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "foo", "namespace": "ns", "uid": "u"},
            "spec": {"replicas": replicas, "minReadySeconds": mrs, "selector": {"matchLabels": {"app": "foo"}},
                     "template": {"metadata": {"labels": {"app": "foo"}}},
                     "scaleStrategy": {"podsToDelete": pods_to_delete},
                     "updateStrategy": {"maxUnavailable": "20%", "partition": 0, "maxSurge": 0}},
        }))
        .unwrap()
    }

    fn ready_pod(name: &str, revision: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "foo", keys::CONTROLLER_REVISION_HASH: revision, keys::LIFECYCLE_STATE: "Normal"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "InPlaceUpdateReady", "status": "True"}]},
        }))
        .unwrap()
    }

    fn plan(cs: &CloneSet, pods: &[Pod]) -> ScalePlan {
        let refs: Vec<&Pod> = pods.iter().collect();
        let nodes = BTreeMap::new();
        plan_scale(&SyncInput {
            cloneset: cs,
            pods: &refs,
            current_revision: "foo-r1",
            update_revision: "foo-r1",
            gates: FeatureGates::default(),
            exclude_preparing_delete_flag: false,
            node_labels: &nodes,
            now: "2026-01-01T01:00:00Z".parse().unwrap(),
        })
    }

    fn five_pods() -> Vec<Pod> {
        (1..=5).map(|i| ready_pod(&format!("foo-{i}"), "foo-r1")).collect()
    }

    #[test]
    fn scale_a_huge_min_ready_seconds_blocks_scale_down() {
        // Kruise TestScale case 1 (issue #1478): every pod counts as unavailable.
        let p = plan(&cloneset(3, 9999, &[]), &five_pods());
        assert_eq!(p.diffs.scale_down_num, 2);
        assert!(p.delete.is_empty(), "deleteReadyLimit is 0: {p:?}");
    }

    #[test]
    fn scale_specified_delete_takes_precedence_over_scale_down() {
        let p = plan(&cloneset(3, 0, &["foo-4"]), &five_pods());
        assert_eq!(p.delete, ["foo-4"]);
    }

    #[test]
    fn scale_normal_scale_down_five_to_three() {
        let p = plan(&cloneset(3, 0, &[]), &five_pods());
        assert_eq!(p.delete.len(), 2);
        assert_eq!(p.create_current + p.create_update, 0);
    }

    #[test]
    fn scale_up_creates_the_missing_pods_from_the_update_revision() {
        let p = plan(&cloneset(8, 0, &[]), &five_pods());
        assert_eq!((p.create_current, p.create_update), (0, 3));
        assert!(p.delete.is_empty());
    }

    #[test]
    fn refresh_moves_scheduled_pods_to_normal_and_sets_the_gate_condition() {
        let cs = cloneset(1, 0, &[]);
        let mut pod = ready_pod("foo-1", "foo-r1");
        pod.metadata.labels.as_mut().unwrap().insert(keys::LIFECYCLE_STATE.into(), "PreparingNormal".into());
        pod.spec.as_mut().unwrap().readiness_gates =
            Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: keys::INPLACE_UPDATE_READY.into() }]);
        pod.status.as_mut().unwrap().conditions.as_mut().unwrap().retain(|c| c.type_ != keys::INPLACE_UPDATE_READY);
        let refs = [&pod];
        let nodes = BTreeMap::new();
        let input = SyncInput {
            cloneset: &cs,
            pods: &refs,
            current_revision: "foo-r1",
            update_revision: "foo-r1",
            gates: FeatureGates::default(),
            exclude_preparing_delete_flag: false,
            node_labels: &nodes,
            now: Timestamp::UNIX_EPOCH,
        };
        let r = plan_refresh(&input);
        assert_eq!(r.len(), 1);
        assert!(r[0].mark_in_place_update_ready);
        assert_eq!(r[0].labels[keys::LIFECYCLE_STATE], "Normal");
        assert_eq!(r[0].labels[keys::POD_TEMPLATE_HASH], "r1", "a missing pod-template-hash is added");
    }
}
