//! The refresh step: what every pod needs before a pass scales or updates anything (Kruise's
//! `inplaceupdate.Refresh` and `refreshPodState`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use serde_json::json;

use super::*;
use crate::api::keys;
use crate::api::shared::LifecycleState;
use crate::core::inplace::{self};
use crate::core::pod_read::PodRead;
use crate::core::pods::hash_matches;
use crate::core::{lifecycle, readiness};

/// The writes refresh makes to one pod, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Refresh {
    pub pod: String,
    pub writes: Vec<PodWrite>,
    /// Kruise's `patchedState`: a lifecycle move or a `pod-template-hash` fix. Once one is
    /// written, the pass ends before the update step (which would decide on the old state).
    pub moves_lifecycle: bool,
}

/// Kruise's `CheckPodUpdateCompleted`: no grace period pending, and the last in-place update (if
/// any) has all its containers running the new images with no batch left. It does not look at
/// the `InPlaceUpdateReady` condition, so a pod whose condition write was lost (or that has no
/// gate at all) still finishes.
pub(crate) fn in_place_update_completed(pod: &dyn PodRead) -> bool {
    inplace::read_grace(pod).is_none() && inplace::read_state(pod).is_none_or(|s| inplace::update_completed(pod, &s))
}

/// Kruise's `inplaceupdate.Refresh`: a grace period that ends, the next launch-priority batch,
/// or `InPlaceUpdateReady=True` once no in-place update is pending. Returns the writes and when
/// to look again.
pub(super) fn refresh_in_place(pod: &dyn PodRead, now: Timestamp) -> (Vec<PodWrite>, Option<Duration>) {
    let revision_label = pod.label(keys::CONTROLLER_REVISION_HASH).unwrap_or_default();
    if let Some(grace) = inplace::read_grace(pod) {
        if !hash_matches(revision_label, &grace.revision) {
            // The pod's revision moved on: drop the grace spec and go through the update again.
            let drop = json!({"metadata": {"annotations": {keys::INPLACE_UPDATE_GRACE: null, keys::INPLACE_UPDATE_GRACE_LEGACY: null}}});
            return (vec![PodWrite::Patch(drop)], None);
        }
        let Some(state) = inplace::read_state(pod) else { return (vec![], None) };
        if let Some(remaining) = inplace::grace_remaining(&state, grace.grace_seconds, now) {
            return (vec![], Some(remaining));
        }
        let pod = &*pod.whole();
        let (new_state, batch) = inplace::state_after_grace(pod, &state, &grace, now);
        let mut apply = inplace::apply_patch(pod, &grace, &batch, &new_state, &BTreeMap::new(), None);
        combine_patches(&mut apply, &json!({"metadata": {"annotations": {keys::INPLACE_UPDATE_GRACE: null}}}));
        // As Kruise: the resize first, so a refused one leaves the grace spec to retry.
        let resize = inplace::resize_patch(pod, &grace).map(PodWrite::Resize);
        return (resize.into_iter().chain([PodWrite::Patch(apply)]).collect(), None);
    }
    if in_place_ready_settled(pod) && !inplace::may_have_next_batch(pod) {
        // Nothing to write whatever the state says of the last update, so it is not parsed:
        // every pod updated in place keeps it (Kruise never removes it), and parsing it was the
        // largest part of a pass over such pods.
        return (vec![], None);
    }
    refresh_in_place_by_state(pod, now)
}

/// No `InPlaceUpdateReady` gate, or its condition already `True` as refresh writes it.
fn in_place_ready_settled(pod: &dyn PodRead) -> bool {
    !pod.has_readiness_gate(keys::INPLACE_UPDATE_READY) || readiness::has_equal(pod, keys::INPLACE_UPDATE_READY, true, "", "")
}

/// [`refresh_in_place`] past the grace period, from the parsed in-place state.
pub(super) fn refresh_in_place_by_state(pod: &dyn PodRead, now: Timestamp) -> (Vec<PodWrite>, Option<Duration>) {
    if let Some(state) = inplace::read_state(pod) {
        if !state.next_container_images.is_empty() {
            // The next batch once the last one runs its new images and is Ready; until then, wait.
            return (inplace::next_batch_patch(&pod.whole(), &state, now).map(PodWrite::Patch).into_iter().collect(), None);
        }
        if !inplace::update_completed(pod, &state) {
            return (vec![], None);
        }
    }
    if in_place_ready_settled(pod) {
        return (vec![], None);
    }
    (vec![PodWrite::Conditions(vec![readiness::condition(keys::INPLACE_UPDATE_READY, true, "", "", now)])], None)
}

/// Kruise's `refreshPodState`: the lifecycle state a pod should move to now, if any.
fn lifecycle_move(input: &SyncInput<'_>, pod: &dyn PodRead) -> Option<LifecycleState> {
    let lifecycle_spec = input.cloneset.spec.lifecycle.as_ref();
    let pre_normal = lifecycle_spec.and_then(|l| l.pre_normal.as_ref());
    match lifecycle::state(pod)? {
        LifecycleState::PreparingNormal if lifecycle::ready_for_normal(pod, pre_normal) => Some(LifecycleState::Normal),
        // A rollback reached a pod still waiting to be updated (Kruise issue #1156).
        LifecycleState::PreparingUpdate if input.is_on_update_revision(pod) => Some(lifecycle::state_after_update(pod, lifecycle_spec)),
        LifecycleState::Updating if in_place_update_completed(pod) => Some(lifecycle::state_after_update(pod, lifecycle_spec)),
        LifecycleState::Updated if lifecycle::updated_may_become_normal(pod, lifecycle_spec) => Some(LifecycleState::Normal),
        _ => None,
    }
}

/// What every pod needs before anything else happens, in Kruise's order — the
/// in-place refresh (grace periods, batches, `InPlaceUpdateReady=True`), then the lifecycle
/// move (with the inPlaceUpdate hook's not-ready key first), then a missing
/// `pod-template-hash`. The `KruisePodReady` condition Kruise's pod-readiness controller sets
/// on a new pod is set here too. Every write is derived from what is stored, so a pass that
/// failed between two of them is completed by the next one. Returns the writes and, while a
/// grace period runs, when to look again.
pub fn plan_refresh(input: &SyncInput<'_>) -> (Vec<Refresh>, Option<Duration>) {
    let in_place_hook = input.cloneset.spec.lifecycle.as_ref().and_then(|l| l.in_place_update.as_ref());
    let mark_not_ready = in_place_hook.is_some_and(|h| h.mark_pod_not_ready);
    let mut out = Vec::new();
    let mut requeue: Option<Duration> = None;
    for &pod in input.pods {
        let mut r = Refresh { pod: pod.name().to_string(), ..Default::default() };
        let (in_place, after) = refresh_in_place(pod, input.now);
        requeue = sooner(requeue, after);
        let mut conditions = Vec::new();
        if pod.has_readiness_gate(keys::KRUISE_POD_READY) && pod.condition(keys::KRUISE_POD_READY).is_none() {
            conditions.push(readiness::condition(keys::KRUISE_POD_READY, true, "", "", input.now));
        }
        for write in in_place {
            match write {
                PodWrite::Conditions(c) => conditions.extend(c),
                write => r.writes.push(write),
            }
        }
        let mut patch = json!({});
        if let Some(next) = lifecycle_move(input, pod) {
            if mark_not_ready && next == LifecycleState::Updated {
                // Entering Updated releases the hook's not-ready mark (Kruise's
                // executePodNotReadyPolicy), before the label moves.
                conditions
                    .extend(readiness::remove_not_ready_key(&pod.whole(), readiness::PRE_UPDATE_HOOK, input.now).into_iter().flatten());
            }
            if lifecycle::state(pod) != Some(next) {
                combine_patches(&mut patch, &state_patch(next, input.now));
            }
        }
        if !conditions.is_empty() {
            r.writes.push(PodWrite::Conditions(conditions));
        }
        let revision_label = pod.label(keys::CONTROLLER_REVISION_HASH).unwrap_or_default();
        if pod.label(keys::POD_TEMPLATE_HASH).is_none() && !revision_label.is_empty() {
            combine_patches(
                &mut patch,
                &json!({"metadata": {"labels": {keys::POD_TEMPLATE_HASH: crate::core::pods::short_hash(revision_label)}}}),
            );
        }
        if patch != json!({}) {
            r.writes.push(PodWrite::Patch(patch));
            r.moves_lifecycle = true;
        }
        if !r.writes.is_empty() {
            out.push(r);
        }
    }
    (out, requeue)
}
