//! The update step: which pods move to the target revision, and how (Kruise's
//! `cloneset_update.go`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use serde_json::json;

use super::*;
use crate::api::cloneset::update_type;
use crate::api::shared::LifecycleState;
use crate::api::{CloneSet, keys};
use crate::core::diff::{self, ExpectationDiffs};
use crate::core::inplace::{self, UpdateSpec};
use crate::core::pod_read::PodRead;
use crate::core::pods::hash_matches;
use crate::core::{env_metadata, lifecycle, order, readiness, status};

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
    /// Refused as well, for a reason Kruise does not have (an env variable that would go stale
    /// without kruise-daemon, a resize the cluster would refuse): said by a Warning event too.
    Hold(String),
}

impl PodAction {
    /// The message of a refusal ([`PodAction::Refuse`] or [`PodAction::Hold`]).
    pub(crate) fn refusal(&self) -> Option<&str> {
        match self {
            PodAction::Refuse(msg) | PodAction::Hold(msg) => Some(msg),
            _ => None,
        }
    }
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

/// The update step: which pods move to the target revision now, and how (Kruise's `Update`).
pub fn plan_update(input: &SyncInput<'_>) -> UpdatePlan {
    let strategy = &input.cloneset.spec.update_strategy;
    // OnDelete leaves every pod to its deletion; refresh still runs, as in Kruise.
    if strategy.paused || strategy.type_ == update_type::ON_DELETE {
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
        .filter(|&(_, &p)| {
            let st = lifecycle::state(p);
            let in_grace = p.annotation(keys::INPLACE_UPDATE_GRACE).is_some() || p.annotation(keys::INPLACE_UPDATE_GRACE_LEGACY).is_some();
            // Only pods not on the target revision are candidates (an Updated pod already on it
            // waits for its hook's owner, then refresh moves it to Normal).
            let waits = if rolling_back { input.is_on_update_revision(p) } else { !input.is_on_update_revision(p) };
            waits
                && match st {
                    Some(LifecycleState::PreparingDelete) => false,
                    Some(LifecycleState::Updated) => true,
                    _ => !in_grace,
                }
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
        |p: &dyn PodRead| status::pod_revision(p).is_some_and(|h| hash_matches(h, target)),
        input.cloneset.spec.min_ready_seconds,
        input.now,
    );
    let mut specs = InPlaceSpecs::new();
    let pods =
        chosen.into_iter().map(|i| (input.pods[i].name().to_string(), pod_action(input, input.pods[i], target, &mut specs))).collect();
    UpdatePlan { diffs, pods, rolling_back, target: target.to_string() }
}

/// The in-place change from each pod revision to the target, worked out once per pass (it
/// parses both revisions' templates) rather than once per pod.
type InPlaceSpecs = std::collections::HashMap<Option<String>, Option<UpdateSpec>>;

/// Recreate, or in place when the strategy allows and the change permits.
fn pod_action(input: &SyncInput<'_>, pod: &dyn PodRead, target: &str, specs: &mut InPlaceSpecs) -> PodAction {
    let strategy = &input.cloneset.spec.update_strategy;
    let kind = if strategy.type_.is_empty() { update_type::RECREATE } else { strategy.type_.as_str() };
    if kind == update_type::RECREATE {
        return PodAction::Recreate;
    }
    let pod_revision = status::pod_revision(pod).unwrap_or_default();
    let old_name = input.revision_data.keys().find(|name| hash_matches(pod_revision, name));
    let old = old_name.and_then(|n| input.revision_data.get(n)).map(|data| &**data);
    let grace = strategy.in_place_update_strategy.as_ref().map_or(0, |s| s.grace_period_seconds);
    // RecreatePodWhenChangeVCTInCloneSetGate: a pod whose revision had other volumeClaimTemplates
    // is recreated (with new PVCs), except under InPlaceOnly; a revision without the hash passes.
    let vct_changed = input.gates.recreate_pod_when_change_vct
        && kind != update_type::IN_PLACE_ONLY
        && match (old_name.and_then(|n| input.revision_vct_hashes.get(n)), input.revision_vct_hashes.get(target)) {
            (Some(old), Some(new)) => old != new,
            _ => false,
        };
    let new = input.revision_data.get(target).filter(|_| !vct_changed);
    let mut spec = specs
        .entry(old_name.cloned())
        .or_insert_with(|| {
            new.and_then(|new| inplace::in_place_spec(old, new, target, grace, input.gates.in_place_workload_vertical_scaling))
        })
        .clone();
    // An env variable read from a changed label or annotation would stay stale in a container
    // updated in place: kruise-daemon, where it reports on the pod, restarts the container;
    // without it such a change takes a new pod.
    let changed = match (&spec, new) {
        (Some(spec), Some(new)) if input.gates.in_place_update_env_from_metadata => spec.changed_reads(new),
        _ => vec![],
    };
    let mut stale_env = changed.first().map(env_metadata::ChangedRead::describe);
    if let Some(refreshed) =
        spec.as_ref().filter(|_| stale_env.is_some() && env_metadata::daemon_reports(pod)).and_then(|s| s.through_daemon(&changed))
    {
        spec = Some(refreshed);
        stale_env = None;
    }
    let hold = match (stale_env, &spec) {
        (Some(env), _) => Some(format!("{env} reads a label or annotation the update changes, which only a new pod would see")),
        (None, Some(s)) => inplace::resize_refusal(&pod.whole(), s, input.resize).map(str::to_string),
        (None, None) => None,
    };
    let Some(spec) = spec.filter(|_| hold.is_none()) else {
        return if kind == update_type::IN_PLACE_ONLY {
            let refused = format!("find Pod {} update strategy is InPlaceOnly but can not update in-place", pod.name());
            match hold {
                Some(why) => PodAction::Hold(format!("{refused}: {why}")),
                None => PodAction::Refuse(refused),
            }
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

/// The writes that carry out `action` on `pod`, in Kruise's order; the not-ready key always
/// goes before the label that depends on it, so a pass that fails between them is completed by
/// the next. `revision_label` is what pods carry for the target revision (full or short hash).
pub(crate) fn action_writes(cs: &CloneSet, pod: &Pod, action: &PodAction, revision_label: &str, now: Timestamp) -> Vec<PodWrite> {
    let hook = cs.spec.lifecycle.as_ref().and_then(|l| l.in_place_update.as_ref());
    match action {
        PodAction::Recreate => {
            // Kruise's PatchPodSpecifiedDelete writes nothing when the label is already there.
            let labelled = pod.metadata.labels.as_ref().is_some_and(|l| l.get(keys::SPECIFIED_DELETE).is_some_and(|v| v == "true"));
            if labelled { vec![] } else { vec![PodWrite::Patch(json!({"metadata": {"labels": {keys::SPECIFIED_DELETE: "true"}}}))] }
        }
        PodAction::InPlace(spec) => {
            let mut writes = Vec::new();
            if pod.has_readiness_gate(keys::INPLACE_UPDATE_READY) && inplace::needs_unready(pod, spec) {
                writes.push(PodWrite::Conditions(readiness::start_in_place_update(pod, now)));
            }
            // Kruise resizes first and writes the revision and state after: a refused resize
            // leaves the pod on its old revision, to be tried again.
            if spec.grace_seconds <= 0 {
                writes.extend(inplace::resize_patch(pod, spec).map(PodWrite::Resize));
            }
            writes.push(PodWrite::Patch(inplace::start_patch(pod, spec, revision_label, now)));
            writes
        }
        PodAction::PrepareUpdate => {
            let mut writes = Vec::new();
            if hook.is_some_and(|h| h.mark_pod_not_ready) {
                writes.extend(readiness::add_not_ready_key(pod, readiness::PRE_UPDATE_HOOK, now).map(PodWrite::Conditions));
            }
            let mut patch = state_patch(LifecycleState::PreparingUpdate, now);
            if lifecycle::state(pod) == Some(LifecycleState::Updated) {
                // Kruise's UpdatePodLifecycleWithHandler: another update of an Updated pod puts
                // the hook's handlers back with it.
                let (labels, finalizers) = lifecycle::hook_handlers_patch(hook);
                combine_patches(&mut patch, &json!({"metadata": {"labels": labels}}));
                let mut all: Vec<String> = pod.metadata.finalizers.clone().unwrap_or_default();
                all.extend(finalizers.into_iter().filter(|f| !pod.metadata.finalizers.as_ref().is_some_and(|has| has.contains(f))));
                patch["metadata"]["finalizers"] = json!(all);
            }
            writes.push(PodWrite::Patch(patch));
            writes
        }
        PodAction::Wait | PodAction::Refuse(_) | PodAction::Hold(_) => vec![],
    }
}
