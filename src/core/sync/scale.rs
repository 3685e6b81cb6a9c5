//! The scale step: pods to create, delete or move to PreparingDelete (Kruise's
//! `cloneset_scale.go`).

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::CloneSet;
use crate::api::shared::LifecycleState;
use crate::core::diff::{self, ExpectationDiffs};
use crate::core::pod_read::PodRead;
use crate::core::{lifecycle, order, readiness, status};

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
    #[cfg(test)]
    pub(crate) fn changes_pods(&self) -> bool {
        self.create_current + self.create_update > 0
            || !self.delete.is_empty()
            || !self.prepare_delete.is_empty()
            || !self.cancel_delete.is_empty()
    }
}

/// Scale up, or delete PreparingDelete / specified / surplus pods — the first step that
/// has something to do wins.
pub fn plan_scale(input: &SyncInput<'_>) -> ScalePlan {
    let hooks = input.cloneset.spec.lifecycle.as_ref();
    let pre_delete_hook = hooks.and_then(|l| l.pre_delete.as_ref());
    let preparing: Vec<&dyn PodRead> =
        input.pods.iter().copied().filter(|&p| lifecycle::state(p) == Some(LifecycleState::PreparingDelete)).collect();
    let specified_delete = input.specified_deletes();

    // A scale-up cancels pending deletions first, unless a hook marks pods not ready.
    let mark_not_ready = [hooks.and_then(|l| l.pre_delete.as_ref()), hooks.and_then(|l| l.in_place_update.as_ref())]
        .iter()
        .any(|h| h.is_some_and(|h| h.mark_pod_not_ready));
    if !mark_not_ready && !preparing.is_empty() {
        let planned = input
            .pods
            .iter()
            .filter(|&&p| specified_delete.contains(p) || lifecycle::state(p) == Some(LifecycleState::PreparingDelete))
            .count();
        let mut diff = input.cloneset.spec.replicas.unwrap_or(1) as i64 - input.pods.len() as i64 + planned as i64;
        let mut cancel = Vec::new();
        for &p in &preparing {
            if diff <= 0 {
                break;
            }
            if !specified_delete.contains(p) {
                cancel.push(p.name().to_string());
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
    let mrs_zero_ready = |p: &dyn PodRead| status::is_available(p, 0, input.now);

    // PreparingDelete pods whose hook has been released are deleted.
    let released: Vec<String> =
        preparing.iter().filter(|p| !lifecycle::is_hooked(pre_delete_hook, *p)).map(|p| p.name().to_string()).collect();
    if !released.is_empty() {
        plan.delete = released;
        return plan;
    }

    // Specified deletes: not-ready pods always, ready ones within deleteReadyLimit.
    let specified: Vec<&dyn PodRead> = input
        .pods
        .iter()
        .copied()
        .filter(|&p| specified_delete.contains(p) && lifecycle::state(p) != Some(LifecycleState::PreparingDelete))
        .collect();
    let mut ready_budget = diffs.delete_ready_limit;
    let mut take = |pods: &[&dyn PodRead], out: &mut Vec<String>| {
        for &p in pods {
            if !mrs_zero_ready(p) {
                out.push(p.name().to_string());
            } else if ready_budget > 0 {
                ready_budget -= 1;
                out.push(p.name().to_string());
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
            |p| input.is_on_update_revision(p),
            &ctx,
        );
        let victims: Vec<&dyn PodRead> = victims.into_iter().map(|i| input.pods[i]).collect();
        take(&victims, &mut plan.delete);
        split_hooked(input, pre_delete_hook, &mut plan);
    }
    plan
}

/// Pods their preDelete hook holds go to PreparingDelete instead of being deleted.
fn split_hooked(input: &SyncInput<'_>, hook: Option<&crate::api::shared::LifecycleHook>, plan: &mut ScalePlan) {
    if hook.is_none() || plan.delete.is_empty() {
        return;
    }
    // One pass over the pods, not one per deleted name.
    let deleted: HashSet<&str> = plan.delete.iter().map(String::as_str).collect();
    let held_names: HashSet<String> =
        input.pods.iter().filter(|p| deleted.contains(p.name()) && lifecycle::is_hooked(hook, **p)).map(|p| p.name().to_string()).collect();
    let (held, free): (Vec<String>, Vec<String>) = plan.delete.drain(..).partition(|n| held_names.contains(n));
    plan.delete = free;
    plan.prepare_delete = held;
}

/// The scale step's writes to one existing pod moving to `state` (PreparingDelete, or back to
/// PreparingNormal): the preDelete hook's not-ready key first, then the label.
pub(crate) fn lifecycle_writes(cs: &CloneSet, pod: &Pod, state: LifecycleState, now: Timestamp) -> Vec<PodWrite> {
    let pre_delete = cs.spec.lifecycle.as_ref().and_then(|l| l.pre_delete.as_ref());
    let mut writes = Vec::new();
    if state == LifecycleState::PreparingDelete && pre_delete.is_some_and(|h| h.mark_pod_not_ready) {
        writes.extend(readiness::add_not_ready_key(pod, readiness::PRE_DELETE_HOOK, now).map(PodWrite::Conditions));
    }
    if lifecycle::state(pod) != Some(state) {
        writes.push(PodWrite::Patch(state_patch(state, now)));
    }
    writes
}

/// Names in `podsToDelete` that are not active pods of this CloneSet (Kruise drops them).
pub fn stale_pods_to_delete(cs: &CloneSet, active: &[&dyn PodRead]) -> Option<Vec<String>> {
    let list = &cs.spec.scale_strategy.pods_to_delete;
    if list.is_empty() {
        return None;
    }
    // Looked up from the (short) list, so a pass costs one probe per pod.
    let listed: HashSet<&str> = list.iter().map(String::as_str).collect();
    let present: HashSet<&str> = active.iter().map(|p| p.name()).filter(|n| listed.contains(n)).collect();
    let kept: Vec<String> = list.iter().filter(|n| present.contains(n.as_str())).cloned().collect();
    (kept.len() != list.len()).then_some(kept)
}
