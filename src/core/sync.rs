//! What one reconcile pass should do to the pods: refresh them, or scale, or update — one phase
//! per pass, in Kruise's order. Pure: the controller executes the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use serde_json::{Value, json};

use crate::api::cloneset::update_type;
use crate::api::shared::LifecycleState;
use crate::api::{CloneSet, keys};
use crate::core::diff::{self, DiffInput, ExpectationDiffs, PodView};
use crate::core::gates::FeatureGates;
use crate::core::inplace::{self, UpdateSpec};
use crate::core::pod_read::PodRead;
use crate::core::pods::{hash_matches, rfc3339_seconds};
use crate::core::{env_metadata, lifecycle, order, readiness, status};

/// One pass's view of a CloneSet and its active pods.
pub struct SyncInput<'a> {
    pub cloneset: &'a CloneSet,
    /// Active pods: owned, not terminating, not Succeeded/Failed.
    pub pods: &'a [&'a dyn PodRead],
    pub current_revision: &'a str,
    pub update_revision: &'a str,
    pub gates: FeatureGates,
    /// What this cluster lets an in-place resize change (InPlaceWorkloadVerticalScaling).
    pub resize: inplace::ResizeSupport,
    /// `--cloneset-scaling-exclude-preparing-delete`.
    pub exclude_preparing_delete_flag: bool,
    /// Labels of the nodes pods run on (for the topology-spread deletion ranker).
    pub node_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// Revision name → revision data, for deciding what can be updated in place.
    pub revision_data: &'a BTreeMap<String, Arc<[u8]>>,
    /// Revision name → its `kruise.io/cloneset-volumeclaimtemplate-hash` annotation, where it
    /// has one (`RecreatePodWhenChangeVCTInCloneSetGate`).
    pub revision_vct_hashes: &'a BTreeMap<String, String>,
    pub now: Timestamp,
}

impl<'a> SyncInput<'a> {
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

    fn is_on_update_revision(&self, pod: &dyn PodRead) -> bool {
        status::pod_revision(pod).is_some_and(|h| hash_matches(h, self.update_revision))
    }

    fn specified_delete(&self, pod: &dyn PodRead) -> bool {
        pod.label(keys::SPECIFIED_DELETE).is_some() || self.cloneset.spec.scale_strategy.pods_to_delete.iter().any(|n| n == pod.name())
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
            .map(|&p| {
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

/// One write to one pod, exactly as the controller sends it.
#[derive(Clone, Debug, PartialEq)]
pub enum PodWrite {
    /// A status patch of these conditions (strategic merge by `type`).
    Conditions(Vec<Value>),
    /// A strategic-merge patch of the pod (labels, annotations, finalizers, container images).
    Patch(Value),
    /// A strategic-merge patch of the pod's `resize` subresource (containers' cpu/memory).
    Resize(Value),
}

/// The writes refresh makes to one pod, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Refresh {
    pub pod: String,
    pub writes: Vec<PodWrite>,
    /// Kruise's `patchedState`: a lifecycle move or a `pod-template-hash` fix. Once one is
    /// written, the pass ends before the update step (which would decide on the old state).
    pub moves_lifecycle: bool,
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

/// Kruise's `CheckPodUpdateCompleted`: no grace period pending, and the last in-place update (if
/// any) has all its containers running the new images with no batch left. It does not look at
/// the `InPlaceUpdateReady` condition, so a pod whose condition write was lost (or that has no
/// gate at all) still finishes.
pub fn in_place_update_completed(pod: &dyn PodRead) -> bool {
    inplace::read_grace(pod).is_none() && inplace::read_state(pod).is_none_or(|s| inplace::update_completed(pod, &s))
}

/// Kruise's `inplaceupdate.Refresh`: a grace period that ends, the next launch-priority batch,
/// or `InPlaceUpdateReady=True` once no in-place update is pending. Returns the writes and when
/// to look again.
fn refresh_in_place(pod: &dyn PodRead, now: Timestamp) -> (Vec<PodWrite>, Option<Duration>) {
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
fn refresh_in_place_by_state(pod: &dyn PodRead, now: Timestamp) -> (Vec<PodWrite>, Option<Duration>) {
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

/// Shortest of two optional requeue delays.
pub fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
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

/// Scale up, or delete PreparingDelete / specified / surplus pods — the first step that
/// has something to do wins.
pub fn plan_scale(input: &SyncInput<'_>) -> ScalePlan {
    let hooks = input.cloneset.spec.lifecycle.as_ref();
    let pre_delete_hook = hooks.and_then(|l| l.pre_delete.as_ref());
    let preparing: Vec<&dyn PodRead> =
        input.pods.iter().copied().filter(|&p| lifecycle::state(p) == Some(LifecycleState::PreparingDelete)).collect();

    // A scale-up cancels pending deletions first, unless a hook marks pods not ready.
    let mark_not_ready = [hooks.and_then(|l| l.pre_delete.as_ref()), hooks.and_then(|l| l.in_place_update.as_ref())]
        .iter()
        .any(|h| h.is_some_and(|h| h.mark_pod_not_ready));
    if !mark_not_ready && !preparing.is_empty() {
        let planned = input
            .pods
            .iter()
            .filter(|&&p| input.specified_delete(p) || lifecycle::state(p) == Some(LifecycleState::PreparingDelete))
            .count();
        let mut diff = input.cloneset.spec.replicas.unwrap_or(1) as i64 - input.pods.len() as i64 + planned as i64;
        let mut cancel = Vec::new();
        for &p in &preparing {
            if diff <= 0 {
                break;
            }
            if !input.specified_delete(p) {
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
        .filter(|&p| input.specified_delete(p) && lifecycle::state(p) != Some(LifecycleState::PreparingDelete))
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
    let hooked = |name: &String| input.pods.iter().any(|p| p.name() == name && lifecycle::is_hooked(hook, *p));
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
    /// Refused as well, for a reason Kruise does not have (an env variable that would go stale
    /// without kruise-daemon, a resize the cluster would refuse): said by a Warning event too.
    Hold(String),
}

impl PodAction {
    /// The message of a refusal ([`PodAction::Refuse`] or [`PodAction::Hold`]).
    pub fn refusal(&self) -> Option<&str> {
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
    let pods = chosen.into_iter().map(|i| (input.pods[i].name().to_string(), pod_action(input, input.pods[i], target))).collect();
    UpdatePlan { diffs, pods, rolling_back, target: target.to_string() }
}

/// Recreate, or in place when the strategy allows and the change permits.
fn pod_action(input: &SyncInput<'_>, pod: &dyn PodRead, target: &str) -> PodAction {
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
    let mut spec = new.and_then(|new| inplace::in_place_spec(old, new, target, grace, input.gates.in_place_workload_vertical_scaling));
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
pub fn action_writes(cs: &CloneSet, pod: &Pod, action: &PodAction, revision_label: &str, now: Timestamp) -> Vec<PodWrite> {
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

/// The scale step's writes to one existing pod moving to `state` (PreparingDelete, or back to
/// PreparingNormal): the preDelete hook's not-ready key first, then the label.
pub fn lifecycle_writes(cs: &CloneSet, pod: &Pod, state: LifecycleState, now: Timestamp) -> Vec<PodWrite> {
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

/// Where a pass goes after a step, as Kruise's `syncCloneSet` and `Update` decide it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Scale,
    Refresh,
    Update,
    Done,
}

/// What a step did: whether it changed any pod, and whether a write failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepOutcome {
    pub changed: bool,
    pub failed: bool,
}

/// The step after `step`. A scale step that changed pods ends the pass (the next pass sees the
/// new pods); one that changed nothing — even because every write failed — goes on to refresh
/// and update the pods that exist, so a quota that blocks new pods never keeps the admitted ones
/// from becoming Ready. Refresh ends the pass on a failure or once it moved a lifecycle state.
/// A failed step is still returned as the pass's error, and retried with backoff.
pub fn next_step(step: Step, outcome: StepOutcome) -> Step {
    match step {
        Step::Scale if outcome.changed => Step::Done,
        Step::Scale => Step::Refresh,
        Step::Refresh if outcome.failed || outcome.changed => Step::Done,
        Step::Refresh => Step::Update,
        Step::Update | Step::Done => Step::Done,
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
        .filter(|&&p| status::is_ready(p) && !status::is_available(p, mrs, input.now))
        .filter_map(|p| {
            let since = p.condition("Ready")?.last_transition_time?;
            let at = since + SignedDuration::from_secs(i64::from(mrs));
            Some(Duration::try_from(at.duration_since(input.now)).unwrap_or(Duration::ZERO) + Duration::from_millis(500))
        })
        .min()
}

/// Names in `podsToDelete` that are not active pods of this CloneSet (Kruise drops them).
pub fn stale_pods_to_delete(cs: &CloneSet, active: &[&dyn PodRead]) -> Option<Vec<String>> {
    let names: BTreeSet<&str> = active.iter().map(|p| p.name()).collect();
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

    /// Refresh skips parsing the in-place state of a pod whose `InPlaceUpdateReady` is settled and
    /// whose state names no next batch; what it decides must be what the parsed state decides,
    /// for every mix of gate, condition, state (none, done, pending, a batch left, an empty batch
    /// map, unreadable, under the legacy key) and container status.
    #[test]
    fn refresh_without_parsing_the_state_decides_as_refresh_with_it() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let last = json!({"main": {"imageID": "old@sha256:1"}});
        let states = [
            None,
            Some((keys::INPLACE_UPDATE_STATE, json!({"revision": "r2", "lastContainerStatuses": last}).to_string())),
            Some((keys::INPLACE_UPDATE_STATE_LEGACY, json!({"revision": "r2", "lastContainerStatuses": last}).to_string())),
            Some((
                keys::INPLACE_UPDATE_STATE,
                json!({"revision": "r2", "lastContainerStatuses": last, "nextContainerImages": {"side": "s:2"}}).to_string(),
            )),
            Some((
                keys::INPLACE_UPDATE_STATE,
                json!({"revision": "r2", "lastContainerStatuses": last, "nextContainerImages": {}}).to_string(),
            )),
            Some((keys::INPLACE_UPDATE_STATE, "{not json".to_string())),
        ];
        let conditions = [
            json!([]),
            json!([{"type": "InPlaceUpdateReady", "status": "True"}]),
            json!([{"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate"}]),
        ];
        let mut batches_started = 0;
        for state in &states {
            for gate in [false, true] {
                for conditions in &conditions {
                    for image_id in ["old@sha256:1", "new@sha256:2"] {
                        let annotations: BTreeMap<&str, &str> = state.iter().map(|(k, v)| (*k, v.as_str())).collect();
                        let pod: Pod = serde_json::from_value(json!({
                            "metadata": {"name": "p", "labels": {keys::CONTROLLER_REVISION_HASH: "r2"}, "annotations": annotations},
                            "spec": {"readinessGates": if gate { json!([{"conditionType": "InPlaceUpdateReady"}]) } else { json!([]) },
                                     "containers": [{"name": "main", "image": "i:2"}, {"name": "side", "image": "s:1"}]},
                            "status": {"phase": "Running", "conditions": conditions,
                                       "containerStatuses": [{"name": "main", "image": "i:2", "imageID": image_id, "ready": true, "restartCount": 0},
                                                             {"name": "side", "image": "s:1", "imageID": "s@sha256:1", "ready": true, "restartCount": 0}]},
                        }))
                        .unwrap();
                        let (writes, requeue) = refresh_in_place(&pod, now);
                        assert_eq!((&writes, requeue), (&refresh_in_place_by_state(&pod, now).0, None), "{pod:?}");
                        batches_started += usize::from(writes.iter().any(|w| matches!(w, PodWrite::Patch(_))));
                    }
                }
            }
        }
        assert!(batches_started > 0, "some case starts the next batch, so skipping the parse for it would show");
    }

    const NO_NODES: &BTreeMap<String, BTreeMap<String, String>> = &BTreeMap::new();
    const NO_REVISIONS: &BTreeMap<String, Arc<[u8]>> = &BTreeMap::new();
    const NO_VCT_HASHES: &BTreeMap<String, String> = &BTreeMap::new();

    /// A pass over `pods` with current revision `foo-r1` and the given update revision.
    fn input<'a>(cs: &'a CloneSet, pods: &'a [&'a dyn PodRead], update_revision: &'a str, now: Timestamp) -> SyncInput<'a> {
        SyncInput {
            cloneset: cs,
            pods,
            current_revision: "foo-r1",
            update_revision,
            gates: FeatureGates::default(),
            resize: Default::default(),
            exclude_preparing_delete_flag: false,
            node_labels: NO_NODES,
            revision_data: NO_REVISIONS,
            revision_vct_hashes: NO_VCT_HASHES,
            now,
        }
    }

    fn plan(cs: &CloneSet, pods: &[Pod]) -> ScalePlan {
        let refs: Vec<&dyn PodRead> = crate::core::pod_read::refs(pods);
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
    fn on_delete_updates_no_pod_and_scale_up_creates_from_the_update_revision() {
        let mut cs = cloneset(4, 0, &[]);
        cs.spec.update_strategy.type_ = update_type::ON_DELETE.into();
        cs.spec.update_strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("100%".into()));
        let pods: Vec<Pod> = (1..=3).map(|i| ready_pod(&format!("foo-{i}"), "foo-r1")).collect();
        let refs: Vec<&dyn PodRead> = crate::core::pod_read::refs(&pods);
        let input = input(&cs, &refs, "foo-r2", "2026-01-01T01:00:00Z".parse().unwrap());
        assert_eq!(plan_update(&input), UpdatePlan::default());
        let scale = plan_scale(&input);
        assert_eq!((scale.create_current, scale.create_update), (0, 1), "{scale:?}");
    }

    #[test]
    fn update_takes_as_many_pods_as_max_unavailable_allows() {
        let mut cs = cloneset(6, 0, &[]);
        cs.spec.update_strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("100%".into()));
        let pods: Vec<Pod> = (1..=6).map(|i| ready_pod(&format!("foo-{i}"), "foo-r1")).collect();
        let refs: Vec<&dyn PodRead> = crate::core::pod_read::refs(&pods);
        let plan = plan_update(&input(&cs, &refs, "foo-r2", "2026-01-01T01:00:00Z".parse().unwrap()));
        assert_eq!(plan.diffs.update_num, 6, "{:?}", plan.diffs);
        assert_eq!(plan.pods.len(), 6, "{plan:?}");
    }

    fn in_place_cloneset(lifecycle: serde_json::Value) -> CloneSet {
        let mut cs = cloneset(2, 0, &[]);
        cs.spec.update_strategy.type_ = "InPlaceIfPossible".into();
        cs.spec.update_strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("100%".into()));
        cs.spec.lifecycle = serde_json::from_value(lifecycle).unwrap();
        cs
    }

    fn with_label(mut pod: Pod, key: &str, value: &str) -> Pod {
        pod.metadata.labels.as_mut().unwrap().insert(key.into(), value.into());
        pod
    }

    #[test]
    fn kruise_update_skips_an_updated_pod_already_on_the_update_revision() {
        // Kruise's Update only considers pods not on the target revision: an Updated pod that is
        // waits for its hook's owner, and is never prepared for update again by us.
        let cs = in_place_cloneset(json!({"inPlaceUpdate": {"labelsHandler": {"hook": "true"}}}));
        let done = with_label(ready_pod("foo-1", "foo-r2"), keys::LIFECYCLE_STATE, "Updated");
        let old = with_label(ready_pod("foo-2", "foo-r1"), keys::LIFECYCLE_STATE, "Updated");
        let pods: [&dyn PodRead; 2] = [&done, &old];
        let plan = plan_update(&input(&cs, &pods, "foo-r2", "2026-01-01T01:00:00Z".parse().unwrap()));
        let chosen: Vec<&str> = plan.pods.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(chosen, ["foo-2"], "only the pod still on the old revision: {plan:?}");
    }

    #[test]
    fn kruise_refresh_sets_a_stale_in_place_update_ready_false_back_to_true() {
        // inplaceupdate.Refresh: no update pending, condition not (True, "", "") → True, whole.
        let cs = cloneset(1, 0, &[]);
        let mut pod = with_label(ready_pod("foo-1", "foo-r1"), keys::POD_TEMPLATE_HASH, "r1");
        pod.spec.as_mut().unwrap().readiness_gates =
            Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: keys::INPLACE_UPDATE_READY.into() }]);
        for c in pod.status.as_mut().unwrap().conditions.as_mut().unwrap() {
            if c.type_ == keys::INPLACE_UPDATE_READY {
                c.status = "False".into();
                c.reason = Some("StartInPlaceUpdate".into());
            }
        }
        let refs: [&dyn PodRead; 1] = [&pod];
        let (r, _) = plan_refresh(&input(&cs, &refs, "foo-r1", Timestamp::UNIX_EPOCH));
        let [PodWrite::Conditions(c)] = r[0].writes.as_slice() else { panic!("{r:?}") };
        assert_eq!((c[0]["status"].as_str(), &c[0]["reason"]), (Some("True"), &Value::Null));
        assert!(!r[0].moves_lifecycle, "a condition write alone does not end the pass");
    }

    #[test]
    fn kruise_a_condition_only_refresh_does_not_postpone_the_update_step() {
        assert_eq!(next_step(Step::Refresh, StepOutcome { changed: false, failed: false }), Step::Update);
        assert_eq!(next_step(Step::Refresh, StepOutcome { changed: true, failed: false }), Step::Done, "a lifecycle move ends the pass");
        assert_eq!(next_step(Step::Refresh, StepOutcome { changed: false, failed: true }), Step::Done);
    }

    #[test]
    fn kruise_a_scale_up_that_created_nothing_goes_on_to_refresh_and_update() {
        assert_eq!(next_step(Step::Scale, StepOutcome { changed: false, failed: true }), Step::Refresh);
        assert_eq!(next_step(Step::Scale, StepOutcome { changed: true, failed: true }), Step::Done, "some pods were created");
        assert_eq!(next_step(Step::Scale, StepOutcome { changed: false, failed: false }), Step::Refresh);
        assert_eq!(next_step(Step::Update, StepOutcome::default()), Step::Done);
    }

    #[test]
    fn kruise_specified_delete_is_not_patched_again_when_the_label_is_there() {
        let cs = cloneset(1, 0, &[]);
        let pod = ready_pod("foo-1", "foo-r1");
        let now = Timestamp::UNIX_EPOCH;
        assert_eq!(action_writes(&cs, &pod, &PodAction::Recreate, "foo-r2", now).len(), 1);
        let labelled = with_label(pod, keys::SPECIFIED_DELETE, "true");
        assert!(action_writes(&cs, &labelled, &PodAction::Recreate, "foo-r2", now).is_empty());
    }

    #[test]
    fn kruise_mark_pod_not_ready_writes_the_key_before_the_preparing_update_label() {
        let cs = in_place_cloneset(json!({"inPlaceUpdate": {"labelsHandler": {"hook": "true"}, "markPodNotReady": true}}));
        let mut pod = with_label(ready_pod("foo-1", "foo-r1"), "hook", "true");
        pod.spec.as_mut().unwrap().readiness_gates =
            Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: keys::KRUISE_POD_READY.into() }]);
        pod.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(serde_json::from_value(json!({"type": "KruisePodReady", "status": "True"})).unwrap());
        let writes = action_writes(&cs, &pod, &PodAction::PrepareUpdate, "foo-r2", Timestamp::UNIX_EPOCH);
        let [PodWrite::Conditions(c), PodWrite::Patch(p)] = writes.as_slice() else { panic!("{writes:?}") };
        assert_eq!(c[0]["type"], "KruisePodReady");
        assert_eq!(c[0]["message"], r#"[{"userAgent":"Lifecycle","key":"preUpdateHook"}]"#);
        assert_eq!(p["metadata"]["labels"][keys::LIFECYCLE_STATE], "PreparingUpdate");
    }

    #[test]
    fn kruise_recreates_a_pod_when_volume_claim_templates_changed_under_the_gate() {
        let template =
            |image: &str| json!({"metadata": {"labels": {"app": "foo"}}, "spec": {"containers": [{"name": "c", "image": image}]}});
        let data: BTreeMap<String, Arc<[u8]>> = [
            ("foo-r1".to_string(), crate::core::revision::revision_data(&template("nginx:1")).into()),
            ("foo-r2".to_string(), crate::core::revision::revision_data(&template("nginx:2")).into()),
        ]
        .into();
        let mut cs = in_place_cloneset(serde_json::Value::Null);
        let pod = ready_pod("foo-1", "foo-r1");
        let pods: [&dyn PodRead; 1] = [&pod];
        let action = |cs: &CloneSet, gate: bool, hashes: &BTreeMap<String, String>| {
            let mut i = input(cs, &pods, "foo-r2", "2026-01-01T01:00:00Z".parse().unwrap());
            i.revision_data = &data;
            i.revision_vct_hashes = hashes;
            i.gates.recreate_pod_when_change_vct = gate;
            plan_update(&i).pods[0].1.clone()
        };
        let changed: BTreeMap<String, String> = [("foo-r1".into(), "1".into()), ("foo-r2".into(), "2".into())].into();
        let same: BTreeMap<String, String> = [("foo-r1".into(), "1".into()), ("foo-r2".into(), "1".into())].into();
        let old_without: BTreeMap<String, String> = [("foo-r2".into(), "2".into())].into();
        assert_eq!(action(&cs, true, &changed), PodAction::Recreate);
        assert!(matches!(action(&cs, false, &changed), PodAction::InPlace(_)), "gate off: in place");
        assert!(matches!(action(&cs, true, &same), PodAction::InPlace(_)));
        assert!(matches!(action(&cs, true, &old_without), PodAction::InPlace(_)), "no hash on the old revision: in place");
        cs.spec.update_strategy.type_ = "InPlaceOnly".into();
        assert!(matches!(action(&cs, true, &changed), PodAction::InPlace(_)), "InPlaceOnly ignores the hash");
    }

    /// InPlaceWorkloadVerticalScaling: a cpu change is made in place, through the resize
    /// subresource before the revision and state are written, and leaves the pod Ready.
    #[test]
    fn kruise_resizes_in_place_under_the_vertical_scaling_gate_and_recreates_without_it() {
        let sized = |cpu: &str| json!({"requests": {"cpu": cpu}});
        let template = |cpu: &str| json!({"metadata": {"labels": {"app": "foo"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1", "resources": sized(cpu)}]}});
        let data: BTreeMap<String, Arc<[u8]>> = [
            ("foo-r1".to_string(), crate::core::revision::revision_data(&template("100m")).into()),
            ("foo-r2".to_string(), crate::core::revision::revision_data(&template("200m")).into()),
        ]
        .into();
        let cs = in_place_cloneset(serde_json::Value::Null);
        let mut pod = ready_pod("foo-1", "foo-r1");
        let spec = pod.spec.as_mut().unwrap();
        spec.containers = vec![serde_json::from_value(json!({"name": "c", "image": "nginx:1", "resources": sized("100m")})).unwrap()];
        spec.readiness_gates =
            Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: keys::INPLACE_UPDATE_READY.into() }]);
        let pods: [&dyn PodRead; 1] = [&pod];
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let action = |gate: bool| {
            let mut i = input(&cs, &pods, "foo-r2", now);
            i.revision_data = &data;
            i.gates.in_place_workload_vertical_scaling = gate;
            plan_update(&i).pods[0].1.clone()
        };
        assert_eq!(action(false), PodAction::Recreate);
        let in_place = action(true);
        assert!(matches!(in_place, PodAction::InPlace(_)), "{in_place:?}");
        let writes = action_writes(&cs, &pod, &in_place, "foo-r2", now);
        let [PodWrite::Resize(resize), PodWrite::Patch(patch)] = writes.as_slice() else { panic!("{writes:?}") };
        assert_eq!(resize, &json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m"}}}]}}));
        assert_eq!(patch["metadata"]["labels"][keys::CONTROLLER_REVISION_HASH], "foo-r2");
        assert!(patch.get("spec").is_none(), "resources go through the resize subresource only: {patch}");

        // With a grace period the resize waits in the grace annotation, and comes once it ends.
        let spec = crate::core::inplace::in_place_spec(Some(&data["foo-r1"]), &data["foo-r2"], "foo-r2", 5, true).unwrap();
        let writes = action_writes(&cs, &pod, &PodAction::InPlace(spec), "foo-r2", now);
        let [PodWrite::Patch(start)] = writes.as_slice() else { panic!("nothing is resized during the grace period: {writes:?}") };
        let annotations: BTreeMap<String, String> = serde_json::from_value(start["metadata"]["annotations"].clone()).unwrap();
        let mut waiting = with_label(pod.clone(), keys::CONTROLLER_REVISION_HASH, "foo-r2");
        waiting.metadata.annotations = Some(annotations);
        let refs: [&dyn PodRead; 1] = [&waiting];
        let (r, requeue) = plan_refresh(&input(&cs, &refs, "foo-r2", now + SignedDuration::from_secs(2)));
        assert_eq!(requeue, Some(Duration::from_secs(3)));
        assert!(r.iter().flat_map(|r| &r.writes).all(|w| !matches!(w, PodWrite::Resize(_))), "{r:?}");
        let (r, _) = plan_refresh(&input(&cs, &refs, "foo-r2", now + SignedDuration::from_secs(5)));
        let [PodWrite::Resize(resize), PodWrite::Patch(apply), ..] = r[0].writes.as_slice() else { panic!("{r:?}") };
        assert_eq!(resize["spec"]["containers"][0]["resources"], json!({"requests": {"cpu": "200m"}}));
        assert_eq!(apply["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE], json!(null), "the grace annotation goes with it");
    }

    /// A resize the cluster would refuse (no `pods/resize`, a lowered memory limit where that is
    /// forbidden) is never written: a new pod under InPlaceIfPossible, a hold that says why under
    /// InPlaceOnly; what the cluster allows is still resized in place.
    #[test]
    fn a_resize_the_cluster_refuses_recreates_or_holds_the_pod() {
        let template = |memory: &str| {
            json!({"metadata": {"labels": {"app": "foo"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1",
                "resources": {"limits": {"memory": memory}}}]}})
        };
        let data: BTreeMap<String, Arc<[u8]>> = [
            ("foo-r1".to_string(), crate::core::revision::revision_data(&template("128Mi")).into()),
            ("foo-r2".to_string(), crate::core::revision::revision_data(&template("64Mi")).into()),
            ("foo-r3".to_string(), crate::core::revision::revision_data(&template("256Mi")).into()),
        ]
        .into();
        let mut pod = ready_pod("foo-1", "foo-r1");
        pod.spec.as_mut().unwrap().containers =
            vec![serde_json::from_value(json!({"name": "c", "image": "nginx:1", "resources": {"limits": {"memory": "128Mi"}}})).unwrap()];
        let pods: [&dyn PodRead; 1] = [&pod];
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let action = |type_: &str, target: &str, resize: inplace::ResizeSupport| {
            let mut cs = in_place_cloneset(serde_json::Value::Null);
            cs.spec.update_strategy.type_ = type_.into();
            let mut i = input(&cs, &pods, target, now);
            i.revision_data = &data;
            i.gates.in_place_workload_vertical_scaling = true;
            i.resize = resize;
            plan_update(&i).pods[0].1.clone()
        };
        let everything = inplace::ResizeSupport::default();
        let not_served = inplace::ResizeSupport { served: false, ..everything };
        let no_decrease = inplace::ResizeSupport { memory_limit_decrease: false, ..everything };
        let held = |why: &str| format!("find Pod foo-1 update strategy is InPlaceOnly but can not update in-place: {why}");

        for target in ["foo-r2", "foo-r3"] {
            assert!(matches!(action("InPlaceIfPossible", target, everything), PodAction::InPlace(_)));
            assert_eq!(action("InPlaceIfPossible", target, not_served), PodAction::Recreate);
            let PodAction::Hold(why) = action("InPlaceOnly", target, not_served) else { panic!("InPlaceOnly holds the pod") };
            assert!(why.starts_with(&held("the resources change needs the pods/resize subresource")), "{why}");
        }
        assert_eq!(action("InPlaceIfPossible", "foo-r2", no_decrease), PodAction::Recreate);
        let PodAction::Hold(why) = action("InPlaceOnly", "foo-r2", no_decrease) else { panic!("InPlaceOnly holds the pod") };
        assert!(why.starts_with(&held("this cluster's apiserver refuses to lower a container's memory limit")), "{why}");
        assert!(matches!(action("InPlaceOnly", "foo-r3", no_decrease), PodAction::InPlace(_)), "raising it is allowed");
    }

    /// A container reading `metadata.labels['ver']` into its env: changing `ver` takes a new pod
    /// (or, under InPlaceOnly, a refusal that says why), unless the gate is off; changing a label
    /// no env reads stays in place.
    #[test]
    fn a_label_an_env_reads_is_not_changed_in_place() {
        let template = |ver: &str, other: &str| {
            json!({"metadata": {"labels": {"app": "foo", "ver": ver, "other": other}}, "spec": {"containers": [{"name": "c", "image": "nginx:1",
                "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ver']"}}}]}]}})
        };
        let data: BTreeMap<String, Arc<[u8]>> = [
            ("foo-r1".to_string(), crate::core::revision::revision_data(&template("1", "a")).into()),
            ("foo-r2".to_string(), crate::core::revision::revision_data(&template("2", "a")).into()),
            ("foo-r3".to_string(), crate::core::revision::revision_data(&template("1", "b")).into()),
        ]
        .into();
        let pod = ready_pod("foo-1", "foo-r1");
        let pods: [&dyn PodRead; 1] = [&pod];
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let action = |type_: &str, target: &str, gate: bool| {
            let mut cs = in_place_cloneset(serde_json::Value::Null);
            cs.spec.update_strategy.type_ = type_.into();
            let mut i = input(&cs, &pods, target, now);
            i.revision_data = &data;
            i.gates.in_place_update_env_from_metadata = gate;
            plan_update(&i).pods[0].1.clone()
        };
        assert_eq!(action("InPlaceIfPossible", "foo-r2", true), PodAction::Recreate);
        let PodAction::Hold(why) = action("InPlaceOnly", "foo-r2", true) else { panic!("InPlaceOnly holds the pod") };
        assert!(
            why.starts_with(
                "find Pod foo-1 update strategy is InPlaceOnly but can not update in-place: container c env X (metadata.labels['ver'])"
            ),
            "{why}"
        );
        assert!(matches!(action("InPlaceIfPossible", "foo-r2", false), PodAction::InPlace(_)), "gate off: Kruise's stale env");
        assert!(matches!(action("InPlaceIfPossible", "foo-r3", true), PodAction::InPlace(_)), "no env reads `other`");
        assert!(matches!(action("InPlaceOnly", "foo-r3", true), PodAction::InPlace(_)));
    }

    /// Where kruise-daemon reports on the pod, the same change is made in place: the label moves
    /// to the reading container's `containerRefMetadata`, the state asks for the env to be
    /// refreshed, and the pod is not updated until the daemon reports the new value's hash.
    #[test]
    fn a_label_an_env_reads_is_changed_in_place_where_kruise_daemon_reports() {
        let env = json!([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ver']"}}}]);
        let template = |ver: &str| json!({"metadata": {"labels": {"app": "foo", "ver": ver}}, "spec": {"containers": [{"name": "c", "image": "nginx:1", "env": env}]}});
        let data: BTreeMap<String, Arc<[u8]>> = [
            ("foo-r1".to_string(), crate::core::revision::revision_data(&template("1")).into()),
            ("foo-r2".to_string(), crate::core::revision::revision_data(&template("2")).into()),
        ]
        .into();
        let report = |id: &str, ver: &str| {
            let c: k8s_openapi::api::core::v1::Container = serde_json::from_value(json!({"name": "c", "env": env})).unwrap();
            let hash = crate::core::env_metadata::expected_hash(&c, Some(&[("ver".into(), ver.into())].into()), None);
            json!({"containers": [{"name": "c", "containerID": id, "restartCount": 0, "hashes": {"plainHash": 7, "extractedEnvFromMetadataHash": hash}}]})
                .to_string()
        };
        let mut pod = ready_pod("foo-1", "foo-r1");
        pod.metadata.labels.get_or_insert_with(Default::default).insert("ver".into(), "1".into());
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(keys::RUNTIME_CONTAINERS_META.into(), report("containerd://1", "1"));
        pod.spec.as_mut().unwrap().containers = vec![serde_json::from_value(json!({"name": "c", "image": "nginx:1", "env": env})).unwrap()];
        pod.status.as_mut().unwrap().container_statuses =
            Some(vec![serde_json::from_value(json!({"name": "c", "containerID": "containerd://1", "image": "nginx:1", "imageID": "i1", "ready": true, "restartCount": 0})).unwrap()]);
        let pods: [&dyn PodRead; 1] = [&pod];
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let cs = in_place_cloneset(serde_json::Value::Null);
        let mut i = input(&cs, &pods, "foo-r2", now);
        i.revision_data = &data;
        let PodAction::InPlace(spec) = plan_update(&i).pods[0].1.clone() else { panic!("in place, through the daemon") };
        assert!(spec.update_env_from_metadata);
        let writes = action_writes(&cs, &pod, &PodAction::InPlace(spec), "foo-r2", now);
        let Some(PodWrite::Patch(patch)) = writes.last() else { panic!("{writes:?}") };
        assert_eq!(patch["metadata"]["labels"]["ver"], json!("2"), "the label the env reads is written");
        let mut updating = pod.clone();
        updating.metadata.labels.as_mut().unwrap().extend([("ver".to_string(), "2".to_string())]);
        let state = patch["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE].as_str().unwrap().to_string();
        assert!(state.contains(r#""updateEnvFromMetadata":true"#) && state.contains(r#""containers":["c"]"#), "{state}");
        updating.metadata.annotations.as_mut().unwrap().insert(keys::INPLACE_UPDATE_STATE.into(), state);
        assert!(!in_place_update_completed(&updating), "the container still has the old value");
        let restarted =
            |p: &mut Pod| p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].container_id = Some("containerd://2".into());
        restarted(&mut updating);
        assert!(!in_place_update_completed(&updating), "restarted, not reported yet");
        updating.metadata.annotations.as_mut().unwrap().insert(keys::RUNTIME_CONTAINERS_META.into(), report("containerd://2", "2"));
        assert!(in_place_update_completed(&updating), "the daemon reports the new value");

        // Without the daemon's annotation: a new pod, as before.
        let mut plain = pod.clone();
        plain.metadata.annotations.as_mut().unwrap().remove(keys::RUNTIME_CONTAINERS_META);
        let plain_pods: [&dyn PodRead; 1] = [&plain];
        let mut i = input(&cs, &plain_pods, "foo-r2", now);
        i.revision_data = &data;
        assert_eq!(plan_update(&i).pods[0].1, PodAction::Recreate);
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
        let refs: [&dyn PodRead; 1] = [&pod];
        let (r, requeue) = plan_refresh(&input(&cs, &refs, "foo-r1", Timestamp::UNIX_EPOCH));
        assert_eq!(r.len(), 1);
        assert_eq!(requeue, None);
        let [PodWrite::Conditions(conditions), PodWrite::Patch(patch)] = r[0].writes.as_slice() else { panic!("{r:?}") };
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0]["type"], "InPlaceUpdateReady");
        assert_eq!(conditions[0]["status"], "True");
        assert!(r[0].moves_lifecycle);
        assert_eq!(patch["metadata"]["labels"][keys::LIFECYCLE_STATE], "Normal");
        assert_eq!(patch["metadata"]["labels"][keys::POD_TEMPLATE_HASH], "r1", "a missing pod-template-hash is added");
    }
}
