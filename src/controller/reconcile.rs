//! One reconcile of one CloneSet, in Kruise's order: observe → gate on expectations →
//! revisions → scale or update → status → housekeeping → requeue hint.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::runtime::events::EventType;

use super::Context;
pub(crate) use super::error::ReconcileError;
use super::execute::{
    ask_memory_limit_decrease, cleanup_pvcs, execute_refresh, execute_scale, execute_update, ns_of, release_mismatched_pods,
};
use super::revisions::{recorded_vct_hashes, sync_revisions, truncate_history};
use super::writes::{self, WriteError};
use crate::api::cloneset::condition;
use crate::api::{CloneSet, CloneSetCondition};
use crate::core::expectations::{Cached, Gate, ObjectKind, combine};
use crate::core::pod_read::PodRead;
use crate::core::sync::{self, SyncInput, sooner};
use crate::core::{intstr, pod_read, status};
use crate::pod_cache::compact::ReadPod;

/// After a leak with `ForceDeleteTimeoutExpectationGate`, look again this soon.
const AFTER_FORCED_EXPECTATIONS: Duration = Duration::from_secs(10);

pub(crate) async fn reconcile(ctx: &Arc<Context>, key: &str) -> Result<Option<Duration>, ReconcileError> {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    let Some(cached) = ctx.stores.cloneset(ns, name) else {
        ctx.metrics.forget_status(ns, name);
        ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).forget(key);
        ctx.template_revisions.forget(key);
        ctx.dropped_field_warnings.forget(key);
        return Ok(None);
    };
    let cs: &CloneSet = &cached.cloneset;
    let now_i = Instant::now();
    let now = Timestamp::now();
    let timeout = ctx.config.expectation_timeout;

    // Gate: our own creates and deletes must be visible in the cache first.
    let gate = {
        let lookup = |kind: ObjectKind, n: &str| -> Cached {
            let meta = match kind {
                ObjectKind::Pod => ctx.stores.pods.get(ns, n).map(|p| p.is_terminating()),
                ObjectKind::Pvc => ctx.stores.pvcs.get(ns, n).map(|p| p.metadata.deletion_timestamp.is_some()),
            };
            match meta {
                None => Cached::Absent,
                Some(true) => Cached::Terminating,
                Some(false) => Cached::Present,
            }
        };
        ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).check(key, lookup, now_i, timeout)
    };
    match gate {
        Gate::Proceed => {}
        Gate::Wait(d) => return Ok(Some(d)),
        Gate::Leaked => {
            ctx.record_leak(key);
            tracing::warn!(cloneset = %key, "scale expectations not observed within --expectation-timeout ({timeout:?})");
            if ctx.config.gates.force_delete_timeout_expectation {
                ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).forget(key);
                return Ok(Some(AFTER_FORCED_EXPECTATIONS));
            }
            return Ok(None);
        }
    }

    // Observe: owned pods and PVCs, by owner UID (orphans are never adopted), from the owner index.
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    let owned = ctx.stores.pods.owned_by(&uid);
    // Read compact; a pod is expanded only where a decision or write needs all of it.
    let (active, inactive): (Vec<ReadPod>, Vec<ReadPod>) =
        owned.into_iter().filter(|p| p.namespace() == ns).map(ReadPod::new).partition(|p| is_active(p));
    let pvcs: Vec<Arc<PersistentVolumeClaim>> = ctx
        .stores
        .pvcs
        .owned_by(&uid)
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns) && p.metadata.deletion_timestamp.is_none())
        .collect();

    if cs.spec.scale_strategy.disable_pvc_reuse {
        cleanup_pvcs(ctx, cs, &active, &inactive, &pvcs).await?;
    }
    let active = release_mismatched_pods(ctx, cs, active).await?;

    // Revisions.
    let revs = sync_revisions(ctx, key, cs, &cached.template).await?;
    super::dropped_fields::warn(ctx, key, cs, &cached.dropped_fields, &revs.update).await;
    let update_revision = revs.update.clone();
    let current_revision = revs.current.clone();

    // Read-your-writes: every pod we patched must be seen at that version before we decide.
    let mut gate = Gate::Proceed;
    {
        let mut rv = ctx.rv_expectations.lock().unwrap_or_else(|e| e.into_inner());
        for p in &active {
            gate = combine(gate, rv.check(p.pod_uid(), p.pod_resource_version(), now_i, timeout));
        }
    }
    match gate {
        Gate::Proceed => {}
        Gate::Wait(d) => return Ok(Some(d)),
        Gate::Leaked => {
            tracing::warn!(cloneset = %key, "pod writes not observed within --expectation-timeout; waiting for new events");
            return Ok(None);
        }
    }

    let active_refs: Vec<&dyn PodRead> = pod_read::refs(&active);
    let node_labels: BTreeMap<String, BTreeMap<String, String>> = if has_spread_constraints(cs) {
        ctx.stores.nodes.state().iter().map(|n| (n.name_any(), n.labels().clone())).collect()
    } else {
        BTreeMap::new()
    };
    let revision_data: BTreeMap<String, Arc<[u8]>> = revs.sorted.iter().map(|r| (r.name.clone(), r.data.clone())).collect();
    let revision_vct_hashes = recorded_vct_hashes(&revs.sorted, &revs.template.vct_hash, &revs.template.legacy_vct_hash);
    let mut input = SyncInput {
        cloneset: cs,
        revision_data: &revision_data,
        revision_vct_hashes: &revision_vct_hashes,
        pods: &active_refs,
        current_revision: &current_revision,
        update_revision: &update_revision,
        gates: ctx.config.gates,
        resize: ctx.resize.support(),
        exclude_preparing_delete_flag: ctx.config.exclude_preparing_delete,
        node_labels: &node_labels,
        now,
    };

    // Scale, then refresh and update, as `sync::next_step` sequences them. A failed step sets
    // its condition and becomes the pass's error (retried with backoff) after the status write.
    let mut failures: Vec<CloneSetCondition> = Vec::new();
    let mut first_error: Option<WriteError> = None;
    let mut requeue: Option<Duration> = None;
    let mut step = if cs.metadata.deletion_timestamp.is_none() { sync::Step::Scale } else { sync::Step::Done };
    while step != sync::Step::Done {
        let (outcome, error, condition_type) = match step {
            sync::Step::Scale => {
                let scale = sync::plan_scale(&input);
                if let Some(limit) = scale.scale_up_limited_to {
                    let msg = format!("scaleUp is limited because of scaleStrategy.maxUnavailable, limit: {limit}");
                    ctx.events.record(cs, EventType::Warning, "ScaleUpLimited", msg).await;
                }
                let templates = revs.templates_for(&scale)?;
                let (changed, error) = execute_scale(ctx, cs, &scale, &templates, &active_refs, &inactive, &pvcs, now).await;
                (sync::StepOutcome { changed: changed > 0, failed: error.is_some() }, error, condition::FAILED_SCALE)
            }
            sync::Step::Refresh => {
                let (refresh, grace_requeue) = sync::plan_refresh(&input);
                requeue = sooner(requeue, grace_requeue);
                let (moved, error) = execute_refresh(ctx, &ns_of(cs), &refresh, &active_refs).await;
                (sync::StepOutcome { changed: moved, failed: error.is_some() }, error, condition::FAILED_UPDATE)
            }
            sync::Step::Update | sync::Step::Done => {
                let mut update = sync::plan_update(&input);
                if ask_memory_limit_decrease(ctx, cs, &update, &active_refs).await {
                    // The apiserver refuses such a resize: plan again knowing it.
                    input.resize = ctx.resize.support();
                    update = sync::plan_update(&input);
                }
                let (after, error) = execute_update(ctx, cs, &update, &active_refs, now).await;
                requeue = sooner(requeue, after);
                (sync::StepOutcome { changed: false, failed: error.is_some() }, error, condition::FAILED_UPDATE)
            }
        };
        if let Some(e) = error {
            failures.push(failed(condition_type, &writes::plain_message(&e), now));
            first_error.get_or_insert(e);
        }
        step = sync::next_step(step, outcome);
    }

    // Status, from the pods observed at the start of this pass.
    let replicas = cs.spec.replicas.unwrap_or(1);
    let partition = intstr::partition_replicas(replicas, cs.spec.update_strategy.partition.as_ref()).unwrap_or(0);
    let (mut new_status, status_requeue) = status::compute(&status::StatusInput {
        cloneset: cs,
        pods: &active_refs,
        update_revision: &update_revision,
        current_revision: &current_revision,
        collision_count: revs.collision_count,
        expected_updated_replicas: replicas - partition,
        now,
    });
    for f in failures {
        status::set_condition(&mut new_status.conditions, f);
    }
    let s = &new_status;
    let counts =
        [s.replicas, s.ready_replicas, s.available_replicas, s.updated_replicas, s.updated_ready_replicas, s.expected_updated_replicas];
    ctx.metrics.set_status(ns, name, counts);
    let old_status = cs.status.clone().unwrap_or_default();
    if status::needs_write(&old_status, &new_status) {
        writes::write_status(ctx, cs, &old_status, &new_status).await?;
    }

    // Housekeeping, also after a failed step (as Kruise does); the step's error comes first.
    let mut housekeeping = Ok(());
    if let Some(kept) = sync::stale_pods_to_delete(cs, &active_refs) {
        housekeeping = writes::set_pods_to_delete(ctx, cs, &kept).await.map_err(ReconcileError::from);
    }
    if housekeeping.is_ok() {
        housekeeping = truncate_history(ctx, cs, &revs, &active_refs, &new_status.current_revision).await;
    }
    if let Some(e) = first_error {
        return Err(e.into());
    }
    housekeeping?;
    Ok(sooner(sooner(status_requeue, sync::next_availability(&input)), requeue))
}

fn is_active(p: &dyn PodRead) -> bool {
    !p.is_terminating() && p.phase() != "Succeeded" && p.phase() != "Failed"
}

pub(super) fn has_spread_constraints(cs: &CloneSet) -> bool {
    cs.spec.template.spec.as_ref().and_then(|s| s.topology_spread_constraints.as_ref()).is_some_and(|t| !t.is_empty())
}

/// FailedScale or FailedUpdate as Kruise's syncCloneSet builds it: only lastTransitionTime is set
/// (no lastUpdateTime, no reason).
fn failed(type_: &str, message: &str, now: Timestamp) -> CloneSetCondition {
    CloneSetCondition {
        type_: type_.into(),
        status: "True".into(),
        last_update_time: None,
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
        reason: String::new(),
        message: message.into(),
    }
}
