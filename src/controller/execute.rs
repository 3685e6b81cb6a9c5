//! Carries out a pass's plans: pods released or PVCs handed on before the pass, then the scale,
//! refresh and update steps' writes, in Kruise's order and batches.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::runtime::events::EventType;
use serde_json::json;

use super::Context;
use super::error::ReconcileError;
use super::resize_support;
use super::revisions::NewPodTemplates;
use super::writes::{self, WriteError};
use crate::api::CloneSet;
use crate::api::shared::LifecycleState;
use crate::core::pod_read::PodRead;
use crate::core::sync::{self, sooner};
use crate::core::{inplace, order, pods as podcore};
use crate::pod_cache::compact::ReadPod;

/// Owned pods that no longer match the selector are released (owner removed).
/// While the CloneSet is being deleted they are only left out, as Kruise's RefManager does, so
/// garbage collection still takes them with it.
pub(super) async fn release_mismatched_pods(ctx: &Context, cs: &CloneSet, active: Vec<ReadPod>) -> Result<Vec<ReadPod>, ReconcileError> {
    let ns = cs.namespace().unwrap_or_default();
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    let deleting = cs.metadata.deletion_timestamp.is_some();
    let mut kept = Vec::with_capacity(active.len());
    for p in active {
        if order::selector_matches_by(&cs.spec.selector, |k| p.label(k)) == Some(true) {
            kept.push(p);
        } else if !deleting {
            writes::release_pod(ctx, &ns, p.full(), &uid).await?;
        }
    }
    Ok(kept)
}

/// With PVC reuse disabled: PVCs of inactive pods go to those pods (garbage collected with
/// them); PVCs with no pod at all are deleted.
pub(super) async fn cleanup_pvcs(
    ctx: &Context,
    cs: &CloneSet,
    active: &[ReadPod],
    inactive: &[ReadPod],
    pvcs: &[Arc<PersistentVolumeClaim>],
) -> Result<(), ReconcileError> {
    let active_ids: BTreeSet<&str> = active.iter().filter_map(|p| podcore::pod_instance_id(p)).collect();
    for pvc in pvcs {
        let Some(id) = podcore::instance_id(pvc.metadata.labels.as_ref()) else { continue };
        if active_ids.contains(id) {
            continue;
        }
        match inactive.iter().find(|p| podcore::pod_instance_id(*p) == Some(id)) {
            Some(pod) => {
                let cs_uid = cs.metadata.uid.as_deref().unwrap_or_default();
                let owners = podcore::pvc_owners_handed_to_pod(pvc.owner_references(), cs_uid, pod.name(), pod.pod_uid());
                writes::set_pvc_owners(ctx, cs, pvc, &owners).await?;
            }
            None => writes::delete_pvc(ctx, cs, &pvc.name_any(), writes::PvcDeletion::CleanUp).await?,
        }
    }
    Ok(())
}

pub(super) fn ns_of(cs: &CloneSet) -> String {
    cs.namespace().unwrap_or_default()
}

/// Sends `writes` to `pod` in order, stopping at the first failure.
async fn apply_pod_writes(ctx: &Context, ns: &str, pod: &dyn PodRead, writes: &[sync::PodWrite]) -> Result<(), WriteError> {
    for w in writes {
        match w {
            sync::PodWrite::Conditions(c) => writes::patch_pod_status(ctx, ns, pod, json!({"status": {"conditions": c}})).await?,
            sync::PodWrite::Patch(p) => writes::patch_pod(ctx, ns, pod, p.clone()).await?,
            sync::PodWrite::Resize(p) => writes::resize_pod(ctx, ns, pod, p.clone()).await?,
        }
    }
    Ok(())
}

/// Carries out the scale plan: creates pods in slow-start batches (1, 2, 4, …), stopping after
/// the first batch with a failure (a finished pod that holds a free PVC's id is deleted first, so
/// its replacement can take the id next pass); or moves and deletes pods, stopping at the first
/// failure. Returns how many pods it changed, and the failure.
#[allow(clippy::too_many_arguments)]
pub(super) async fn execute_scale(
    ctx: &Context,
    cs: &CloneSet,
    plan: &sync::ScalePlan,
    templates: &NewPodTemplates<'_>,
    active: &[&dyn PodRead],
    inactive: &[ReadPod],
    pvcs: &[Arc<PersistentVolumeClaim>],
    now: Timestamp,
) -> (usize, Option<WriteError>) {
    let total = plan.create_current + plan.create_update;
    if total > 0 {
        let active_ids: BTreeSet<String> = active.iter().filter_map(|&p| podcore::pod_instance_id(p).map(str::to_string)).collect();
        let pvc_ids: Vec<&str> = pvcs.iter().filter_map(|p| podcore::instance_id(p.metadata.labels.as_ref())).collect();
        let free = if cs.spec.scale_strategy.disable_pvc_reuse {
            BTreeSet::new()
        } else {
            podcore::free_pvc_ids(pvc_ids.iter().copied(), &active_ids)
        };
        let in_use: BTreeSet<String> = active_ids.iter().cloned().chain(pvc_ids.iter().map(|s| s.to_string())).collect();
        let held: BTreeMap<String, podcore::HeldBy> = inactive
            .iter()
            .filter_map(|p| {
                let by = if p.is_terminating() { podcore::HeldBy::Terminating } else { podcore::HeldBy::Finished { pod: p.name() } };
                Some((podcore::pod_instance_id(p)?.to_string(), by))
            })
            .collect();
        let random = std::hash::RandomState::new();
        let mut n = 0u64;
        // A pod waiting for a terminating one is created once that one is gone (its event queues us).
        let podcore::NewPodIds { ids, delete_first, waiting: _ } = podcore::instance_ids_for_new_pods(total, &free, &in_use, &held, || {
            use std::hash::{BuildHasher as _, Hasher as _};
            n += 1;
            let mut h = random.build_hasher();
            h.write_u64(n);
            h.finish()
        });
        let mut deleted = 0;
        for name in &delete_first {
            let Some(pod) = inactive.iter().find(|p| p.name() == name) else { continue };
            if let Err(e) = writes::delete_pod(ctx, cs, pod, &[]).await {
                return (deleted, Some(e));
            }
            deleted += 1;
        }
        let existing_pvcs: BTreeSet<String> = pvcs.iter().map(|p| p.name_any()).collect();
        let short_hash = ctx.config.gates.cloneset_short_hash;
        let to_create: Vec<(&str, &str, &PodTemplateSpec)> = ids
            .iter()
            .enumerate()
            .filter_map(|(i, id)| {
                let (revision, template) = if i < plan.create_current { &templates.current } else { &templates.update };
                Some((id.as_str(), *revision, template.as_ref()?))
            })
            .collect();
        let build = |&(id, revision, template): &(&str, &str, &PodTemplateSpec)| {
            let pod = podcore::build_pod(&podcore::PodRecipe {
                cloneset: cs,
                template,
                revision_name: revision,
                instance_id: id,
                short_hash_label: short_hash,
                now,
            });
            let claims: Vec<PersistentVolumeClaim> =
                podcore::build_pvcs(cs, id).into_iter().filter(|c| !existing_pvcs.contains(&c.name_any())).collect();
            (pod, claims)
        };
        let (to_create, build) = (&to_create, &build);
        let mut created = 0;
        let mut batch = 1;
        let mut start = 0;
        while start < to_create.len() {
            let end = (start + batch).min(to_create.len());
            // All of a batch is created, as Kruise's goroutines do, but each pod is built only
            // when a create can start: the client sends a few dozen requests at once anyway, and
            // a batch of thousands would otherwise hold all its whole pods until it ends.
            // (Indices, not references: a closure over references inside the spawned reconcile
            // future fails to compile, "FnOnce is not general enough".)
            let mut results = futures::stream::iter(start..end)
                .map(move |i| async move {
                    let (pod, claims) = build(&to_create[i]);
                    writes::create_pod(ctx, cs, &pod, &claims).await
                })
                .buffer_unordered(CREATES_IN_FLIGHT);
            let mut failure = None;
            while let Some(r) = results.next().await {
                match r {
                    Ok(()) => created += 1,
                    Err(e) => {
                        failure.get_or_insert(e);
                    }
                }
            }
            if failure.is_some() {
                return (deleted + created, failure);
            }
            start = end;
            batch *= 2;
        }
        return (deleted + created, None);
    }
    let ns = ns_of(cs);
    let mut changed = 0;
    for (names, state) in [(&plan.prepare_delete, LifecycleState::PreparingDelete), (&plan.cancel_delete, LifecycleState::PreparingNormal)]
    {
        for name in names {
            let Some(pod) = find_pod(active, name) else { continue };
            if let Err(e) = apply_pod_writes(ctx, &ns, pod, &sync::lifecycle_writes(cs, &pod.whole(), state, now)).await {
                return (changed, Some(e));
            }
            changed += 1;
        }
    }
    for name in &plan.delete {
        let Some(pod) = find_pod(active, name) else { continue };
        let id = podcore::pod_instance_id(pod).unwrap_or_default().to_string();
        let claims: Vec<String> = pvcs
            .iter()
            .filter(|p| !id.is_empty() && podcore::instance_id(p.metadata.labels.as_ref()) == Some(id.as_str()))
            .map(|p| p.name_any())
            .collect();
        if let Err(e) = writes::delete_pod(ctx, cs, pod, &claims).await {
            return (changed, Some(e));
        }
        changed += 1;
    }
    (changed, None)
}

/// Carries out refresh. A pod whose write fails keeps its later writes for the next pass, but
/// the other pods are still refreshed: Kruise stops at the first failing pod, so one pod whose
/// writes are denied would keep every other pod of the CloneSet from finishing. Returns whether
/// a lifecycle state was moved (which ends the pass), and the first failure.
pub(super) async fn execute_refresh(
    ctx: &Context,
    ns: &str,
    refresh: &[sync::Refresh],
    active: &[&dyn PodRead],
) -> (bool, Option<WriteError>) {
    // The futures are built first: stream combinators with closures inside the spawned reconcile
    // future fail to compile (a "higher-ranked lifetime error").
    let mut writes = Vec::with_capacity(refresh.len());
    for r in refresh {
        if let Some(pod) = find_pod(active, &r.pod) {
            writes.push(async move { (r.moves_lifecycle, apply_pod_writes(ctx, ns, pod, &r.writes).await) });
        }
    }
    let mut results = futures::stream::iter(writes).buffer_unordered(POD_WRITES_IN_FLIGHT);
    let mut moved = false;
    let mut first_error = None;
    while let Some((moves, result)) = results.next().await {
        match result {
            Ok(()) => moved |= moves,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    (moved, first_error)
}

/// Pods whose writes are under way at once. Each pod's own writes stay in order (the
/// readiness-gate sequence); different pods no longer wait for each other, so a rollout of many
/// pods is not one long chain of round trips.
const POD_WRITES_IN_FLIGHT: usize = 16;

/// Pod creations of one slow-start batch under way at once: twice the client's own limit, so
/// its every request slot stays busy.
const CREATES_IN_FLIGHT: usize = 2 * crate::client::MAX_REQUESTS_IN_FLIGHT;

fn find_pod<'a>(active: &[&'a dyn PodRead], name: &str) -> Option<&'a dyn PodRead> {
    active.iter().copied().find(|p| p.name() == name)
}

/// Before the first in-place update that would lower a memory limit, asks the apiserver with a
/// dry run of that resize whether it does so in place; true when it refuses (and the plan must be
/// made again). Any other failure leaves the question open for the next pass.
pub(super) async fn ask_memory_limit_decrease(ctx: &Context, cs: &CloneSet, plan: &sync::UpdatePlan, active: &[&dyn PodRead]) -> bool {
    if !ctx.resize.must_ask_memory_limit_decrease() {
        return false;
    }
    let asked = plan.pods.iter().find_map(|(name, action)| {
        let sync::PodAction::InPlace(spec) = action else { return None };
        let pod = find_pod(active, name)?.whole();
        inplace::lowers_memory_limit(&pod, spec).then(|| inplace::resize_patch(&pod, spec)).flatten().map(|patch| (name, patch))
    });
    let Some((name, patch)) = asked else { return false };
    let Some(pod) = find_pod(active, name) else { return false };
    match writes::resize_pod_dry_run(ctx, &ns_of(cs), pod, &patch).await {
        Ok(()) => {
            ctx.resize.record_memory_limit_decrease(true);
            false
        }
        Err(e) if resize_support::refuses_memory_limit_decrease(&e) => {
            ctx.resize.record_memory_limit_decrease(false);
            true
        }
        Err(e) => {
            tracing::debug!(cloneset = %writes::cs_key(cs), pod = %name, error = %e, "a dry-run resize failed; asking again next time");
            false
        }
    }
}

/// Carries out the update plan, in order, several pods at a time. After the first failure no
/// further pod is started (those under way finish), as Kruise stops at its first failing pod; a
/// refusal (InPlaceOnly without an in-place path) ends the list where it stands. Returns when to
/// look again (a grace period's end), and the failure.
pub(super) async fn execute_update(
    ctx: &Context,
    cs: &CloneSet,
    plan: &sync::UpdatePlan,
    active: &[&dyn PodRead],
    now: Timestamp,
) -> (Option<Duration>, Option<WriteError>) {
    let ns = ns_of(cs);
    let target = plan.target.as_str();
    let label = if ctx.config.gates.cloneset_short_hash { podcore::short_hash(target) } else { target };
    if !plan.pods.is_empty() {
        tracing::debug!(cloneset = %writes::cs_key(cs), diffs = ?plan.diffs, pods = ?plan.pods.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), "updating pods");
    }
    let refusal = plan.pods.iter().map(|(_, a)| a).find(|a| a.refusal().is_some());
    if let Some(sync::PodAction::Hold(msg)) = refusal {
        ctx.events.record(cs, EventType::Warning, "FailedUpdatePodInPlace", msg.clone()).await;
    }
    let refused = refusal.and_then(sync::PodAction::refusal).map(str::to_string);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let failed = &failed;
    let ns = ns.as_str();
    let mut updates = Vec::with_capacity(plan.pods.len());
    for (name, action) in &plan.pods {
        if action.refusal().is_some() {
            break;
        }
        let Some(pod) = find_pod(active, name) else { continue };
        updates.push(async move {
            if failed.load(std::sync::atomic::Ordering::Acquire) {
                return None;
            }
            let result = apply_pod_writes(ctx, ns, pod, &sync::action_writes(cs, &pod.whole(), action, label, now)).await;
            if result.is_err() {
                failed.store(true, std::sync::atomic::Ordering::Release);
            }
            Some((name, action, result))
        });
    }
    let mut results = futures::stream::iter(updates).buffered(POD_WRITES_IN_FLIGHT);
    let mut requeue = None;
    let mut first_error = None;
    while let Some(done) = results.next().await {
        let Some((name, action, result)) = done else { continue };
        match (action, result) {
            (sync::PodAction::Recreate, Ok(())) => {
                let msg = format!("successfully patch pod {name} specified-delete for update(revision {target})");
                ctx.events.record(cs, EventType::Normal, "SuccessfulUpdatePodReCreate", msg).await;
            }
            (sync::PodAction::Recreate, Err(e)) => {
                let msg =
                    format!("failed to patch pod specified-delete {name} for update(revision {target}): {}", writes::plain_message(&e));
                ctx.events.record(cs, EventType::Warning, "FailedUpdatePodReCreate", msg).await;
                first_error.get_or_insert(e);
            }
            (sync::PodAction::InPlace(spec), Ok(())) => {
                let msg = format!("successfully update pod {name} in-place(revision {target})");
                ctx.events.record(cs, EventType::Normal, "SuccessfulUpdatePodInPlace", msg).await;
                if spec.grace_seconds > 0 {
                    requeue = sooner(requeue, Some(Duration::from_secs(spec.grace_seconds as u64)));
                }
            }
            (sync::PodAction::InPlace(_), Err(e)) => {
                let msg = format!("failed to update pod {name} in-place(revision {target}): {}", writes::plain_message(&e));
                ctx.events.record(cs, EventType::Warning, "FailedUpdatePodInPlace", msg).await;
                first_error.get_or_insert(e);
            }
            (_, Err(e)) => {
                first_error.get_or_insert(e);
            }
            (_, Ok(())) => {}
        }
    }
    // Kruise returns a refusal as the pass's error: the FailedUpdate condition says it.
    (requeue, first_error.or(refused.map(WriteError::Refused)))
}
