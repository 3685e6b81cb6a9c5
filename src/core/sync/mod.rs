//! What one reconcile pass should do to the pods: refresh them, or scale, or update — one phase
//! per pass, in Kruise's order. Pure: the controller executes the plan. The steps live in
//! refresh.rs, scale.rs and update.rs; this file holds what they share (the pass's input, the
//! writes) and how a pass goes from one step to the next.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use serde_json::{Value, json};

use crate::api::shared::LifecycleState;
use crate::api::{CloneSet, keys};
use crate::core::diff::{DiffInput, PodView};
use crate::core::gates::FeatureGates;
use crate::core::inplace::{self};
use crate::core::pod_read::PodRead;
use crate::core::pods::{hash_matches, rfc3339_seconds};
use crate::core::{lifecycle, status};

mod refresh;
mod scale;
#[cfg(test)]
mod tests;
mod update;

pub use refresh::*;
pub use scale::*;
pub use update::*;

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

    /// Which pods are specified for deletion, asked once per pod: `podsToDelete` as a set, so a
    /// long list costs a lookup per pod rather than a scan.
    fn specified_deletes(&self) -> SpecifiedDeletes<'a> {
        SpecifiedDeletes(self.cloneset.spec.scale_strategy.pods_to_delete.iter().map(String::as_str).collect())
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
        let specified = self.specified_deletes();
        self.pods
            .iter()
            .map(|&p| {
                let st = lifecycle::state(p);
                let updated = self.is_on_update_revision(p)
                    || (for_scale && self.gates.preparing_update_as_update && st == Some(LifecycleState::PreparingUpdate));
                PodView {
                    updated,
                    preparing_delete: st == Some(LifecycleState::PreparingDelete),
                    specified_delete: specified.contains(p),
                    available: status::is_available(p, mrs, self.now),
                }
            })
            .collect()
    }
}

/// The specified-delete label or `scaleStrategy.podsToDelete` (see [`SyncInput::specified_deletes`]).
struct SpecifiedDeletes<'a>(HashSet<&'a str>);

impl SpecifiedDeletes<'_> {
    fn contains(&self, pod: &dyn PodRead) -> bool {
        pod.label(keys::SPECIFIED_DELETE).is_some() || self.0.contains(pod.name())
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

/// Combines two patches into one. Unlike applying a merge patch, `null` leaves are kept: in a
/// patch they mean "remove this key" and must reach the apiserver.
pub(crate) fn combine_patches(into: &mut Value, from: &Value) {
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

/// Shortest of two optional requeue delays.
pub(crate) fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Where a pass goes after a step, as Kruise's `syncCloneSet` and `Update` decide it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Scale,
    Refresh,
    Update,
    Done,
}

/// What a step did: whether it changed any pod, and whether a write failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StepOutcome {
    pub changed: bool,
    pub failed: bool,
}

/// The step after `step`. A scale step that changed pods ends the pass (the next pass sees the
/// new pods); one that changed nothing — even because every write failed — goes on to refresh
/// and update the pods that exist, so a quota that blocks new pods never keeps the admitted ones
/// from becoming Ready. Refresh ends the pass on a failure or once it moved a lifecycle state.
/// A failed step is still returned as the pass's error, and retried with backoff.
pub(crate) fn next_step(step: Step, outcome: StepOutcome) -> Step {
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
