//! What one reconcile pass should do to the pods: refresh them, or scale, or update — one phase
//! per pass, in Kruise's order (§4.4, §5.2). Pure: the controller executes the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use serde_json::{Value, json};

use crate::api::cloneset::update_type;
use crate::api::shared::LifecycleState;
use crate::api::{CloneSet, keys};
use crate::config::FeatureGates;
use crate::core::diff::{self, DiffInput, ExpectationDiffs, PodView};
use crate::core::inplace::{self, UpdateSpec};
use crate::core::pods::{hash_matches, rfc3339_seconds};
use crate::core::{lifecycle, order, status};

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
    /// Revision name → revision data, for deciding what can be updated in place.
    pub revision_data: &'a BTreeMap<String, Vec<u8>>,
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

/// Writes one pod needs during refresh.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Refresh {
    pub pod: String,
    /// Pod conditions to set (merged by type), written to the status first.
    pub conditions: Vec<Value>,
    /// A strategic-merge patch of the pod (labels, annotations, container images).
    pub patch: Option<Value>,
    /// Event to emit once written: (reason, message).
    pub event: Option<(String, String)>,
}

fn condition(type_: &str, status: bool, reason: &str, message: &str, now: Timestamp) -> Value {
    let mut c = json!({"type": type_, "status": if status { "True" } else { "False" }, "lastTransitionTime": rfc3339_seconds(now)});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
    }
    if !message.is_empty() {
        c["message"] = json!(message);
    }
    c
}

fn has_gate(pod: &Pod, gate: &str) -> bool {
    pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref()).is_some_and(|g| g.iter().any(|g| g.condition_type == gate))
}

fn condition_status<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

/// Combines two patches into one. Unlike applying a merge patch, `null` leaves are kept: in a
/// patch they mean "remove this key" and must reach the apiserver.
pub fn combine_patches(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => combine_patches(existing, v),
                    _ => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (into, from) => *into = from.clone(),
    }
}

/// A lifecycle state change as label + timestamp annotation.
fn state_patch(state: LifecycleState, now: Timestamp) -> Value {
    json!({"metadata": {"labels": {keys::LIFECYCLE_STATE: state.as_str()}, "annotations": {keys::LIFECYCLE_TIMESTAMP: rfc3339_seconds(now)}}})
}

/// §5.2 step 1: what every pod needs before anything else happens — the readiness-gate
/// conditions set on first sight, a missing `pod-template-hash`, lifecycle moves, and the
/// progress of in-place updates (grace periods, completion). Returns the writes and, when a
/// grace period is running, when to look again.
pub fn plan_refresh(input: &SyncInput<'_>) -> (Vec<Refresh>, Option<Duration>) {
    let lifecycle_spec = input.cloneset.spec.lifecycle.as_ref();
    let pre_normal = lifecycle_spec.and_then(|l| l.pre_normal.as_ref());
    let in_place_hook = lifecycle_spec.and_then(|l| l.in_place_update.as_ref());
    let mut out = Vec::new();
    let mut requeue: Option<Duration> = None;
    for pod in input.pods {
        let mut r = Refresh { pod: pod.metadata.name.clone().unwrap_or_default(), ..Default::default() };
        let mut patch = json!({});
        for gate in [keys::INPLACE_UPDATE_READY, keys::KRUISE_POD_READY] {
            if has_gate(pod, gate) && condition_status(pod, gate).is_none() {
                r.conditions.push(condition(gate, true, "", "", input.now));
            }
        }
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let revision_label = labels.get(keys::CONTROLLER_REVISION_HASH).cloned().unwrap_or_default();
        if !labels.contains_key(keys::POD_TEMPLATE_HASH) && !revision_label.is_empty() {
            combine_patches(
                &mut patch,
                &json!({"metadata": {"labels": {keys::POD_TEMPLATE_HASH: crate::core::pods::short_hash(&revision_label)}}}),
            );
        }
        let st = lifecycle::state(pod);
        let on_update_revision = input.is_on_update_revision(pod);
        match st {
            Some(LifecycleState::PreparingNormal) if lifecycle::ready_for_normal(pod, pre_normal) => {
                combine_patches(&mut patch, &state_patch(LifecycleState::Normal, input.now));
            }
            // A rollback reached a pod still waiting to be updated (Kruise issue #1156).
            Some(LifecycleState::PreparingUpdate) if on_update_revision => {
                combine_patches(&mut patch, &state_patch(lifecycle::state_after_update(pod, in_place_hook), input.now));
            }
            Some(LifecycleState::Updated) if lifecycle::state_after_update(pod, in_place_hook) == LifecycleState::Normal => {
                combine_patches(&mut patch, &state_patch(LifecycleState::Normal, input.now));
            }
            _ => {}
        }

        // In-place update in progress: the state names the pod's revision and the gate is False.
        let state = inplace::read_state(pod).filter(|s| hash_matches(&revision_label, &s.revision));
        let updating = condition_status(pod, keys::INPLACE_UPDATE_READY) == Some("False");
        if let (Some(state), true) = (state, updating) {
            match inplace::read_grace(pod) {
                Some(grace) if !hash_matches(&revision_label, &grace.revision) => {
                    combine_patches(
                        &mut patch,
                        &json!({"metadata": {"annotations": {keys::INPLACE_UPDATE_GRACE: null, keys::INPLACE_UPDATE_GRACE_LEGACY: null}}}),
                    );
                }
                Some(grace) => match inplace::grace_remaining(&state, grace.grace_seconds, input.now) {
                    Some(rem) => requeue = Some(requeue.map_or(rem, |r| r.min(rem))),
                    None => {
                        let (new_state, batch) = inplace::state_after_grace(pod, &state, &grace, input.now);
                        let mut apply = inplace::apply_patch(pod, &grace, &batch, &new_state, &BTreeMap::new(), None);
                        combine_patches(&mut apply, &json!({"metadata": {"annotations": {keys::INPLACE_UPDATE_GRACE: null}}}));
                        combine_patches(&mut patch, &apply);
                    }
                },
                // Launch priority: the next container batch once the last one is updated and Ready.
                None if !state.next_container_images.is_empty() => {
                    if let Some(next) = inplace::next_batch_patch(pod, &state, input.now) {
                        combine_patches(&mut patch, &next);
                    }
                }
                None if inplace::update_completed(pod, &state) => {
                    r.conditions.push(condition(keys::INPLACE_UPDATE_READY, true, "", "", input.now));
                    if st == Some(LifecycleState::Updating) {
                        combine_patches(&mut patch, &state_patch(lifecycle::state_after_update(pod, in_place_hook), input.now));
                    }
                }
                None => {}
            }
        }
        if patch != json!({}) {
            r.patch = Some(patch);
        }
        if !r.conditions.is_empty() || r.patch.is_some() {
            out.push(r);
        }
    }
    (out, requeue)
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
    /// Pods to move to PreparingDelete instead (their preDelete hook holds them).
    pub prepare_delete: Vec<String>,
    /// PreparingDelete pods a scale-up brings back (to PreparingNormal).
    pub cancel_delete: Vec<String>,
}

impl ScalePlan {
    pub fn changes_pods(&self) -> bool {
        self.create_current + self.create_update > 0
            || !self.delete.is_empty()
            || !self.prepare_delete.is_empty()
            || !self.cancel_delete.is_empty()
    }
}

/// §4.4: scale up, or delete PreparingDelete / specified / surplus pods — the first step that
/// has something to do wins.
pub fn plan_scale(input: &SyncInput<'_>) -> ScalePlan {
    let hooks = input.cloneset.spec.lifecycle.as_ref();
    let pre_delete_hook = hooks.and_then(|l| l.pre_delete.as_ref());
    let preparing: Vec<&Pod> =
        input.pods.iter().copied().filter(|p| lifecycle::state(p) == Some(LifecycleState::PreparingDelete)).collect();

    // A scale-up cancels pending deletions first, unless a hook marks pods not ready.
    let mark_not_ready = [hooks.and_then(|l| l.pre_delete.as_ref()), hooks.and_then(|l| l.in_place_update.as_ref())]
        .iter()
        .any(|h| h.is_some_and(|h| h.mark_pod_not_ready));
    if !mark_not_ready && !preparing.is_empty() {
        let planned =
            input.pods.iter().filter(|p| input.specified_delete(p) || lifecycle::state(p) == Some(LifecycleState::PreparingDelete)).count();
        let mut diff = input.cloneset.spec.replicas.unwrap_or(1) as i64 - input.pods.len() as i64 + planned as i64;
        let mut cancel = Vec::new();
        for p in &preparing {
            if diff <= 0 {
                break;
            }
            if !input.specified_delete(p) {
                cancel.extend(p.metadata.name.clone());
                diff -= 1;
            }
        }
        if !cancel.is_empty() {
            return ScalePlan { cancel_delete: cancel, ..Default::default() };
        }
    }

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
    let mrs_zero_ready = |p: &Pod| status::is_available(p, 0, input.now);

    // PreparingDelete pods whose hook has been released are deleted.
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
        split_hooked(input, pre_delete_hook, &mut plan);
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
        split_hooked(input, pre_delete_hook, &mut plan);
    }
    plan
}

/// Pods their preDelete hook holds go to PreparingDelete instead of being deleted.
fn split_hooked(input: &SyncInput<'_>, hook: Option<&crate::api::shared::LifecycleHook>, plan: &mut ScalePlan) {
    let hooked = |name: &String| input.pods.iter().any(|p| p.metadata.name.as_ref() == Some(name) && lifecycle::is_hooked(hook, p));
    let (held, free): (Vec<String>, Vec<String>) = plan.delete.drain(..).partition(hooked);
    plan.delete = free;
    plan.prepare_delete = held;
}

/// What to do with one pod chosen for update.
#[derive(Clone, Debug, PartialEq)]
pub enum PodAction {
    /// Mark it `specified-delete`; a later scale pass replaces it.
    Recreate,
    /// Update it in place.
    InPlace(UpdateSpec),
    /// Move it to PreparingUpdate first (the inPlaceUpdate hook holds it).
    PrepareUpdate,
    /// It is held by the hook; nothing to do yet.
    Wait,
    /// It cannot be updated as asked (InPlaceOnly without an in-place path, or its state).
    Refuse(String),
}

/// The update phase's decision.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdatePlan {
    pub diffs: ExpectationDiffs,
    /// Pods to update, in order, with what to do to each. The target is `update_revision`, or
    /// the current revision when rolling back under `CloneSetPartitionRollback`.
    pub pods: Vec<(String, PodAction)>,
    pub rolling_back: bool,
    pub target: String,
}

/// §5.2 steps 2–7.
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
    let pods = chosen
        .into_iter()
        .map(|i| (input.pods[i].metadata.name.clone().unwrap_or_default(), pod_action(input, input.pods[i], target)))
        .collect();
    UpdatePlan { diffs, pods, rolling_back, target: target.to_string() }
}

/// §5.6 and §5.8: recreate, or in place when the strategy allows and the change permits.
fn pod_action(input: &SyncInput<'_>, pod: &Pod, target: &str) -> PodAction {
    let strategy = &input.cloneset.spec.update_strategy;
    let kind = if strategy.type_.is_empty() { update_type::RECREATE } else { strategy.type_.as_str() };
    if kind == update_type::RECREATE {
        return PodAction::Recreate;
    }
    let pod_revision = status::pod_revision(pod).unwrap_or_default();
    let old = input.revision_data.iter().find(|(name, _)| hash_matches(pod_revision, name)).map(|(_, d)| d.as_slice());
    let grace = strategy.in_place_update_strategy.as_ref().map_or(0, |s| s.grace_period_seconds);
    let spec = input.revision_data.get(target).and_then(|new| inplace::in_place_spec(old, new, target, grace));
    let Some(spec) = spec else {
        return if kind == update_type::IN_PLACE_ONLY {
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            PodAction::Refuse(format!("find Pod {name} update strategy is InPlaceOnly but can not update in-place"))
        } else {
            PodAction::Recreate
        };
    };
    let hook = input.cloneset.spec.lifecycle.as_ref().and_then(|l| l.in_place_update.as_ref());
    match lifecycle::in_place_gate(pod, hook) {
        lifecycle::InPlaceGate::Proceed => PodAction::InPlace(spec),
        lifecycle::InPlaceGate::PrepareUpdate => PodAction::PrepareUpdate,
        lifecycle::InPlaceGate::Wait => PodAction::Wait,
        lifecycle::InPlaceGate::NotAllowed(msg) => PodAction::Refuse(msg),
    }
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

    const NO_NODES: &BTreeMap<String, BTreeMap<String, String>> = &BTreeMap::new();
    const NO_REVISIONS: &BTreeMap<String, Vec<u8>> = &BTreeMap::new();

    /// A pass over `pods` with current revision `foo-r1` and the given update revision.
    fn input<'a>(cs: &'a CloneSet, pods: &'a [&'a Pod], update_revision: &'a str, now: Timestamp) -> SyncInput<'a> {
        SyncInput {
            cloneset: cs,
            pods,
            current_revision: "foo-r1",
            update_revision,
            gates: FeatureGates::default(),
            exclude_preparing_delete_flag: false,
            node_labels: NO_NODES,
            revision_data: NO_REVISIONS,
            now,
        }
    }

    fn plan(cs: &CloneSet, pods: &[Pod]) -> ScalePlan {
        let refs: Vec<&Pod> = pods.iter().collect();
        plan_scale(&input(cs, &refs, "foo-r1", "2026-01-01T01:00:00Z".parse().unwrap()))
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
    fn update_takes_as_many_pods_as_max_unavailable_allows() {
        let mut cs = cloneset(6, 0, &[]);
        cs.spec.update_strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("100%".into()));
        let pods: Vec<Pod> = (1..=6).map(|i| ready_pod(&format!("foo-{i}"), "foo-r1")).collect();
        let refs: Vec<&Pod> = pods.iter().collect();
        let plan = plan_update(&input(&cs, &refs, "foo-r2", "2026-01-01T01:00:00Z".parse().unwrap()));
        assert_eq!(plan.diffs.update_num, 6, "{:?}", plan.diffs);
        assert_eq!(plan.pods.len(), 6, "{plan:?}");
    }

    #[test]
    fn combined_patches_keep_removals() {
        let mut p = json!({"metadata": {"annotations": {"a": "1"}}});
        combine_patches(&mut p, &json!({"metadata": {"annotations": {"b": null}, "labels": {"c": "2"}}}));
        assert_eq!(p, json!({"metadata": {"annotations": {"a": "1", "b": null}, "labels": {"c": "2"}}}));
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
        let (r, requeue) = plan_refresh(&input(&cs, &refs, "foo-r1", Timestamp::UNIX_EPOCH));
        assert_eq!(r.len(), 1);
        assert_eq!(requeue, None);
        assert_eq!(r[0].conditions.len(), 1);
        assert_eq!(r[0].conditions[0]["type"], "InPlaceUpdateReady");
        assert_eq!(r[0].conditions[0]["status"], "True");
        let patch = r[0].patch.as_ref().unwrap();
        assert_eq!(patch["metadata"]["labels"][keys::LIFECYCLE_STATE], "Normal");
        assert_eq!(patch["metadata"]["labels"][keys::POD_TEMPLATE_HASH], "r1", "a missing pod-template-hash is added");
    }
}
