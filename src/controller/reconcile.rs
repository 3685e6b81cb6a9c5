//! One reconcile of one CloneSet, in Kruise's order: observe → gate on expectations →
//! revisions → scale or update → status → housekeeping → requeue hint.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::future::join_all;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::runtime::events::EventType;
use serde_json::{Value, json};

use super::Context;
use super::cached_revision::CachedRevision;
use super::resize_support;
use super::writes::{self, WriteError};
use crate::api::cloneset::condition;
use crate::api::shared::LifecycleState;
use crate::api::{CloneSet, CloneSetCondition, keys};
use crate::core::expectations::{Cached, Gate, ObjectKind, combine};
use crate::core::history::{self, RevisionView, UpdateRevisionPlan};
use crate::core::pod_read::PodRead;
use crate::core::sync::{self, SyncInput, sooner};
use crate::core::{inplace, intstr, order, pod_read, pods as podcore, revision, status};
use crate::pod_cache::compact::ReadPod;

/// Why a reconcile failed; the worker retries with backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReconcileError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("revision: {0}")]
    Revision(String),
}

impl ReconcileError {
    /// An optimistic-concurrency conflict: our cache was behind; retrying soon is routine.
    pub(crate) fn is_conflict(&self) -> bool {
        let api = match self {
            Self::Write(WriteError::Api(kube::Error::Api(e))) | Self::Kube(kube::Error::Api(e)) => Some(e.code),
            _ => None,
        };
        api == Some(409)
    }
}

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

fn has_spread_constraints(cs: &CloneSet) -> bool {
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

// ---------------------------------------------------------------------------------------------
// Revisions

/// The revisions this reconcile works with.
pub(crate) struct Revisions {
    pub update: String,
    pub current: String,
    pub collision_count: i32,
    /// All revisions of this CloneSet, oldest first, as seen (plus one created now).
    pub sorted: Vec<RevisionView>,
    /// What the CloneSet's template and volumeClaimTemplates give, for this generation.
    pub template: Arc<TemplateRevisionData>,
}

impl Revisions {
    /// The templates `plan`'s new pods are built from. Decoded here, not with the revisions:
    /// only a pass that creates pods reads one.
    fn templates_for(&self, plan: &sync::ScalePlan) -> Result<NewPodTemplates<'_>, ReconcileError> {
        let decode = |needed: bool, name: &str| -> Result<Option<PodTemplateSpec>, ReconcileError> {
            match self.sorted.iter().find(|r| r.name == name).filter(|_| needed) {
                Some(r) => template_of(&r.data).map(Some),
                None => Ok(None),
            }
        };
        Ok(NewPodTemplates {
            current: (&self.current, decode(plan.create_current > 0, &self.current)?),
            update: (&self.update, decode(plan.create_update > 0, &self.update)?),
        })
    }
}

/// The current and the update revision's names, with their templates where the scale plan
/// creates pods of them (none for a revision not seen).
struct NewPodTemplates<'a> {
    current: (&'a str, Option<PodTemplateSpec>),
    update: (&'a str, Option<PodTemplateSpec>),
}

/// What a CloneSet's spec gives its revisions, which a pass compares the existing revisions with.
/// It changes only with the spec, so it is computed once per generation
/// ([`TemplateRevisionCache`]): serializing, defaulting and encoding the template as Go does
/// cost a third as much as the decisions themselves on every pass.
#[derive(Debug, PartialEq)]
pub(crate) struct TemplateRevisionData {
    uid: String,
    generation: i64,
    /// The revision data of the template as stored.
    pub stored: Arc<[u8]>,
    /// The revision data of the template as Kruise's webhook would have defaulted it, which
    /// Kruise hashes and builds pods from (`stored` itself under TemplateNoDefaults).
    pub candidate: Arc<[u8]>,
    /// The VCT hash of the current volumeClaimTemplates (what a new revision records).
    pub vct_hash: String,
    /// The VCT hash this operator recorded for them before it hashed like Kruise.
    pub legacy_vct_hash: String,
}

impl TemplateRevisionData {
    /// `template`: `cs.spec.template` as JSON (the cache keeps it as text, see `CompactCloneSet`).
    fn compute(cs: &CloneSet, template: &str, template_no_defaults: bool) -> Result<Self, ReconcileError> {
        let stored: Value = serde_json::from_str(template).map_err(|e| ReconcileError::Revision(e.to_string()))?;
        let stored_data: Arc<[u8]> = revision::revision_data(&stored).into();
        let candidate = if template_no_defaults {
            stored_data.clone()
        } else {
            revision::revision_data(&crate::core::defaults::default_pod_template(&stored)).into()
        };
        Ok(Self {
            uid: cs.metadata.uid.clone().unwrap_or_default(),
            generation: cs.metadata.generation.unwrap_or_default(),
            stored: stored_data,
            candidate,
            vct_hash: vct_hash(cs, template_no_defaults),
            legacy_vct_hash: legacy_vct_hash(cs),
        })
    }
}

/// [`TemplateRevisionData`] by CloneSet key, for the generation it was computed at. The apiserver
/// bumps `metadata.generation` on every change outside metadata and status, so a CloneSet seen at
/// the same uid and generation has the same template. One without a generation (never from the
/// apiserver) is computed every pass. An entry is dropped when its CloneSet leaves the cache.
#[derive(Default)]
pub(crate) struct TemplateRevisionCache(Mutex<HashMap<String, Arc<TemplateRevisionData>>>);

impl TemplateRevisionCache {
    /// `template`: `cs.spec.template` as JSON.
    pub(crate) fn get(
        &self,
        key: &str,
        cs: &CloneSet,
        template: &str,
        template_no_defaults: bool,
    ) -> Result<Arc<TemplateRevisionData>, ReconcileError> {
        let uid = cs.metadata.uid.as_deref().unwrap_or_default();
        let Some(generation) = cs.metadata.generation else {
            return TemplateRevisionData::compute(cs, template, template_no_defaults).map(Arc::new);
        };
        let cached = self.lock().get(key).filter(|d| d.uid == uid && d.generation == generation).cloned();
        if let Some(data) = cached {
            return Ok(data);
        }
        let data = Arc::new(TemplateRevisionData::compute(cs, template, template_no_defaults)?);
        self.lock().insert(key.to_string(), data.clone());
        Ok(data)
    }

    pub(crate) fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TemplateRevisionData>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn owned_revisions(ctx: &Context, cs: &CloneSet) -> Vec<Arc<CachedRevision>> {
    let ns = cs.namespace().unwrap_or_default();
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    let selector = &cs.spec.selector;
    // Its own (from the owner index) and the orphans of its namespace it may adopt; a revision
    // that names it without being controlled by it is also an orphan: keep it once.
    let mut candidates = ctx.stores.revisions.owned_by(&uid);
    let own: BTreeSet<String> = candidates.iter().map(|r| r.object.name_any()).collect();
    candidates.extend(ctx.stores.revisions.orphans_in(&ns).into_iter().filter(|r| !own.contains(&r.object.name_any())));
    candidates
        .into_iter()
        .filter(|r| r.object.namespace().as_deref() == Some(ns.as_str()))
        .filter(|r| {
            let controller = r.object.owner_references().iter().find(|o| o.controller == Some(true));
            controller.is_none_or(|o| o.uid == uid) && order::selector_matches(selector, r.object.labels()) == Some(true)
        })
        .collect()
}

fn view(r: &CachedRevision) -> RevisionView {
    let o = &r.object;
    RevisionView {
        name: o.name_any(),
        revision: o.revision,
        created: o.metadata.creation_timestamp.as_ref().map(|t| t.0),
        data: r.data.clone(),
        vct_hash: o.annotations().get(keys::VOLUME_CLAIM_TEMPLATE_HASH).cloned(),
    }
}

fn template_of(data: &[u8]) -> Result<PodTemplateSpec, ReconcileError> {
    let v = revision::template_from_revision_data(data).map_err(|e| ReconcileError::Revision(e.to_string()))?;
    serde_json::from_value(v).map_err(|e| ReconcileError::Revision(e.to_string()))
}

/// The `kruise.io/cloneset-volumeclaimtemplate-hash` Kruise records on revisions (`""` without
/// VCTs), over the templates as its webhook would have stored them.
fn vct_hash(cs: &CloneSet, template_no_defaults: bool) -> String {
    let stored = serde_json::to_value(&cs.spec.volume_claim_templates).unwrap_or_default();
    let seen = if template_no_defaults { stored } else { crate::core::defaults::default_volume_claim_templates(&stored) };
    revision::volume_claim_templates_hash(&seen)
}

/// The VCT hash this operator recorded before it hashed like Kruise.
fn legacy_vct_hash(cs: &CloneSet) -> String {
    revision::legacy_volume_claim_templates_hash(&serde_json::to_value(&cs.spec.volume_claim_templates).unwrap_or_default())
}

/// Revision name → its recorded VCT hash, for the update's "did the templates change" check. A
/// revision carrying the legacy hash of the current templates had these templates, so it counts as
/// carrying their current hash: an upgrade alone never makes RecreatePodWhenChangeVCTInCloneSetGate
/// recreate pods.
fn recorded_vct_hashes(revisions: &[RevisionView], current: &str, legacy_of_current: &str) -> BTreeMap<String, String> {
    revisions
        .iter()
        .filter_map(|r| {
            let recorded = r.vct_hash.as_deref()?;
            let hash = if !legacy_of_current.is_empty() && recorded == legacy_of_current { current } else { recorded };
            Some((r.name.clone(), hash.to_string()))
        })
        .collect()
}

/// Find or create the update revision; pick the current one.
async fn sync_revisions(ctx: &Context, key: &str, cs: &CloneSet, template: &str) -> Result<Revisions, ReconcileError> {
    let ns = cs.namespace().unwrap_or_default();
    let cs_name = cs.name_any();
    let existing = owned_revisions(ctx, cs);
    let mut sorted: Vec<RevisionView> = existing.iter().map(|r| view(r)).collect();
    history::sort_revisions(&mut sorted);
    let template = ctx.template_revisions.get(key, cs, template, ctx.config.gates.template_no_defaults)?;
    // Kruise hashes (and builds pods from) the template its webhook defaulted, unless TemplateNoDefaults.
    let data = &template.candidate;
    let mut collision_count = cs.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0);
    let vct = &template.vct_hash;

    let update = match history::plan_update_revision(&sorted, data, &template.stored) {
        UpdateRevisionPlan::Existing { name } => {
            collision_count = revision::collision_count_naming(&cs_name, &name, &[data, &template.stored], collision_count);
            name
        }
        UpdateRevisionPlan::Reuse { name, revision } => {
            writes::bump_revision(ctx, &ns, &name, revision, vct).await?;
            if let Some(r) = sorted.iter_mut().find(|r| r.name == name) {
                r.revision = revision;
                r.vct_hash = Some(vct.clone());
            }
            history::sort_revisions(&mut sorted);
            name
        }
        UpdateRevisionPlan::Create { revision: number } => {
            let hash_label = revision::hash_revision(data, collision_count);
            loop {
                let hash = revision::hash_revision(data, collision_count);
                let name = revision::revision_name(&cs_name, &hash);
                let mut labels = cs.spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
                labels.insert(keys::CONTROLLER_REVISION_HASH_LABEL.into(), hash_label.clone());
                let mut annotations = cs.annotations().clone();
                annotations.insert(keys::VOLUME_CLAIM_TEMPLATE_HASH.into(), vct.clone());
                let rev = ControllerRevision {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        labels: Some(labels),
                        annotations: Some(annotations),
                        owner_references: Some(vec![podcore::controller_ref(cs)]),
                        ..Default::default()
                    },
                    data: None,
                    revision: number,
                };
                match writes::create_revision(ctx, &ns, rev, data).await {
                    Ok(created) => {
                        sorted.push(view(&CachedRevision::new(created)));
                        break name;
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        let api: kube::Api<ControllerRevision> = kube::Api::namespaced(ctx.client.clone(), &ns);
                        let other = api.get(&name).await?;
                        let same_owner = other.owner_references().iter().any(|o| Some(&o.uid) == cs.metadata.uid.as_ref());
                        let other = view(&CachedRevision::new(other));
                        if same_owner && other.data == *data {
                            if !sorted.iter().any(|r| r.name == name) {
                                sorted.push(other);
                            }
                            break name;
                        }
                        // A different revision holds this name: a hash collision.
                        collision_count += 1;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    let status_current = cs.status.as_ref().map(|s| s.current_revision.clone()).unwrap_or_default();
    let current = if sorted.iter().any(|r| r.name == status_current) { status_current } else { update.clone() };
    Ok(Revisions { update, current, collision_count, sorted, template })
}

/// Delete non-live revisions beyond `revisionHistoryLimit`, oldest first.
async fn truncate_history(
    ctx: &Context,
    cs: &CloneSet,
    revs: &Revisions,
    active: &[&dyn PodRead],
    current_after: &str,
) -> Result<(), ReconcileError> {
    let mut live: BTreeSet<String> = [revs.update.clone(), revs.current.clone(), current_after.to_string()].into();
    for r in &revs.sorted {
        if active.iter().any(|p| status::pod_revision(p).is_some_and(|h| podcore::hash_matches(h, &r.name))) {
            live.insert(r.name.clone());
        }
    }
    let limit = cs.spec.revision_history_limit.unwrap_or(10);
    let ns = cs.namespace().unwrap_or_default();
    for name in history::revisions_to_truncate(&revs.sorted, &live, limit) {
        writes::delete_revision(ctx, &ns, &name).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Pods and PVCs

/// Owned pods that no longer match the selector are released (owner removed).
/// While the CloneSet is being deleted they are only left out, as Kruise's RefManager does, so
/// garbage collection still takes them with it.
async fn release_mismatched_pods(ctx: &Context, cs: &CloneSet, active: Vec<ReadPod>) -> Result<Vec<ReadPod>, ReconcileError> {
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
async fn cleanup_pvcs(
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

fn ns_of(cs: &CloneSet) -> String {
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
async fn execute_scale(
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
        let mut new_pods = Vec::with_capacity(total);
        for (i, id) in ids.iter().enumerate() {
            let (revision, template) = if i < plan.create_current { &templates.current } else { &templates.update };
            let Some(template) = template else { continue };
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
            new_pods.push((pod, claims));
        }
        let mut created = 0;
        let mut batch = 1;
        let mut start = 0;
        while start < new_pods.len() {
            let end = (start + batch).min(new_pods.len());
            let results = join_all(new_pods[start..end].iter().map(|(pod, claims)| writes::create_pod(ctx, cs, pod, claims))).await;
            let mut failure = None;
            for r in results {
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
async fn execute_refresh(ctx: &Context, ns: &str, refresh: &[sync::Refresh], active: &[&dyn PodRead]) -> (bool, Option<WriteError>) {
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

fn find_pod<'a>(active: &[&'a dyn PodRead], name: &str) -> Option<&'a dyn PodRead> {
    active.iter().copied().find(|p| p.name() == name)
}

/// Before the first in-place update that would lower a memory limit, asks the apiserver with a
/// dry run of that resize whether it does so in place; true when it refuses (and the plan must be
/// made again). Any other failure leaves the question open for the next pass.
async fn ask_memory_limit_decrease(ctx: &Context, cs: &CloneSet, plan: &sync::UpdatePlan, active: &[&dyn PodRead]) -> bool {
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
async fn execute_update(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::cloneset_cache::CompactCloneSet;

    const KEY: &str = "takeover/inplace";

    /// Kruise's own CloneSet, at generation 2, whose update revision kruise-manager v1.9.0 named.
    fn golden_cloneset() -> CloneSet {
        let path = format!("{}/tests/golden/kruise-v1.9.0-objects/cloneset-in-place.yaml", env!("CARGO_MANIFEST_DIR"));
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// The template revision data of `cs` as a reconcile gets it: from the cached (compact) CloneSet.
    fn get(cache: &TemplateRevisionCache, key: &str, cs: &CloneSet) -> Arc<TemplateRevisionData> {
        let cached = CompactCloneSet::new(cs.clone());
        cache.get(key, &cached.cloneset, &cached.template, false).unwrap()
    }

    fn compute(cs: &CloneSet, template_no_defaults: bool) -> TemplateRevisionData {
        TemplateRevisionData::compute(cs, &serde_json::to_string(&cs.spec.template).unwrap(), template_no_defaults).unwrap()
    }

    fn revision_name_of(cs: &CloneSet, data: &TemplateRevisionData) -> String {
        revision::revision_name(&cs.name_any(), &revision::hash_revision(&data.candidate, 0))
    }

    #[test]
    fn a_cloneset_s_template_revision_data_is_computed_once_per_generation() {
        let cache = TemplateRevisionCache::default();
        let mut cs = golden_cloneset();
        let first = get(&cache, KEY, &cs);
        assert_eq!(revision_name_of(&cs, &first), "inplace-b55cd4488", "the revision Kruise's manager made of this template");
        assert!(Arc::ptr_eq(&first, &get(&cache, KEY, &cs)), "the same generation again: not computed again");
        // A status write or a relist gives a new object of the same generation.
        cs.metadata.resource_version = Some("9999".into());
        cs.status.as_mut().unwrap().ready_replicas = 0;
        assert!(Arc::ptr_eq(&first, &get(&cache, KEY, &cs)));

        cs.spec.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.27".into());
        cs.metadata.generation = Some(3);
        let changed = get(&cache, KEY, &cs);
        assert_ne!(changed.candidate, first.candidate, "a new generation's template is encoded anew");
        assert_eq!(*changed, compute(&cs, false));
        assert!(Arc::ptr_eq(&changed, &get(&cache, KEY, &cs)));
    }

    #[test]
    fn a_recreated_or_forgotten_cloneset_s_template_revision_data_is_computed_again() {
        let cache = TemplateRevisionCache::default();
        let cs = golden_cloneset();
        let first = get(&cache, KEY, &cs);

        let mut recreated = cs.clone();
        recreated.metadata.uid = Some("another-uid".into());
        recreated.spec.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.27".into());
        let second = get(&cache, KEY, &recreated);
        assert_ne!(second.candidate, first.candidate, "same name and generation, another uid: its own template");

        cache.forget(KEY);
        assert!(!Arc::ptr_eq(&second, &get(&cache, KEY, &recreated)), "forgotten: computed again");

        let mut without_generation = cs;
        without_generation.metadata.generation = None;
        let a = get(&cache, "other/one", &without_generation);
        assert!(!Arc::ptr_eq(&a, &get(&cache, "other/one", &without_generation)), "never cached");
    }

    #[test]
    fn without_defaults_the_candidate_is_the_stored_template() {
        let cs = golden_cloneset();
        let no_defaults = compute(&cs, true);
        assert!(Arc::ptr_eq(&no_defaults.stored, &no_defaults.candidate));
        let defaulted = compute(&cs, false);
        assert_eq!(defaulted.stored, no_defaults.stored);
    }

    /// The cache keeps a CloneSet's template as text; its revision data must be the bytes the
    /// decoded template gave (what Kruise hashes), for a template using much of the pod spec.
    #[test]
    fn the_cached_template_text_gives_the_revision_data_of_the_decoded_template() {
        let mut cs = golden_cloneset();
        let rich = serde_json::json!({
            "metadata": {"labels": {"app": "inplace", "tier": "web"}, "annotations": {"a": "b"}},
            "spec": {
                "containers": [{"name": "main", "image": "nginx:1.26", "ports": [{"containerPort": 80}],
                                "env": [{"name": "X", "value": "1"}, {"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                                "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 5},
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                               {"name": "sidecar", "image": "busybox", "command": ["sleep", "3600"]}],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                                               "labelSelector": {"matchLabels": {"app": "inplace"}}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "terminationGracePeriodSeconds": 5,
            },
        });
        cs.spec.template = serde_json::from_value(rich).unwrap();
        for no_defaults in [false, true] {
            let stored = serde_json::to_value(&cs.spec.template).unwrap();
            let expected = if no_defaults { stored.clone() } else { crate::core::defaults::default_pod_template(&stored) };
            let cached = CompactCloneSet::new(cs.clone());
            let data = TemplateRevisionCache::default().get(KEY, &cached.cloneset, &cached.template, no_defaults).unwrap();
            assert_eq!(&*data.stored, revision::revision_data(&stored).as_slice());
            assert_eq!(&*data.candidate, revision::revision_data(&expected).as_slice());
        }
        // What a pass reads of the template besides: its metadata and spread constraints.
        let cached = CompactCloneSet::new(cs.clone());
        assert_eq!(cached.cloneset.spec.template.metadata, cs.spec.template.metadata);
        assert!(has_spread_constraints(&cached.cloneset));
        let spread = |c: &CloneSet| crate::core::order::pod_spread_constraints(c.spec.template.spec.as_ref());
        assert_eq!(spread(&cached.cloneset), spread(&cs));
        assert!(cached.cloneset.spec.template.spec.as_ref().unwrap().containers.is_empty(), "the rest is kept as text only");
        assert!(!has_spread_constraints(&CompactCloneSet::new(golden_cloneset()).cloneset));
    }
}
