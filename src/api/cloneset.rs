//! `apps.kruise.io/v1alpha1` CloneSet, with Kruise v1.9.0's JSON field names, optionality and
//! int-or-string fields. Defaults and validation rules live on the fields they govern; rules that
//! need the schemaless pod template live in the admission policy (`crd.rs`).

use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::rules::*;
use super::shared::{InPlaceUpdateStrategy, Lifecycle, UpdatePriorityStrategy, UpdateScatterTerm};

/// Desired state of a CloneSet.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "CloneSet",
    plural = "clonesets",
    singular = "cloneset",
    shortname = "clone",
    namespaced,
    status = "CloneSetStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "CloneSet is the Schema for the clonesets API"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(concat!(
    "!has(self.replicas) || self.replicas == 0 || !has(self.updateStrategy) || !(",
    "(!has(self.updateStrategy.maxUnavailable) || ", int_or_percent_is_zero!("self.updateStrategy.maxUnavailable"), ") && ",
    "(!has(self.updateStrategy.maxSurge) || ", int_or_percent_is_zero!("self.updateStrategy.maxSurge"), "))"
)).message(BOTH_ZERO_MESSAGE).field_path(".updateStrategy.maxUnavailable"))]
#[x_kube(validation = Rule::new(PROGRESS_DEADLINE).message(PROGRESS_DEADLINE_MESSAGE).field_path(".progressDeadlineSeconds"))]
pub struct CloneSetSpec {
    /// Desired number of pods. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 1))]
    pub replicas: Option<i32>,

    /// Label query over pods; must match the template's labels. Immutable.
    #[x_kube(validation = Rule::new(SELECTOR_NOT_EMPTY).message(SELECTOR_NOT_EMPTY_MESSAGE))]
    #[x_kube(validation = Rule::new(SELECTOR_OPERATORS).message(SELECTOR_OPERATORS_MESSAGE))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(IMMUTABLE_MESSAGE))]
    pub selector: LabelSelector,

    /// Template of the pods. Kept schemaless, as in Kruise: the apiserver stores it as given.
    #[schemars(schema_with = "crate::api::rules::schemaless")]
    pub template: PodTemplateSpec,

    /// One PVC per pod instance is created from each entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::api::rules::schemaless")]
    pub volume_claim_templates: Vec<VolumeClaimTemplate>,

    /// How pods are created and deleted.
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub scale_strategy: CloneSetScaleStrategy,

    /// How pods are updated when the template changes.
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub update_strategy: CloneSetUpdateStrategy,

    /// Number of non-live ControllerRevisions kept. Defaults to 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 10))]
    pub revision_history_limit: Option<i32>,

    /// Seconds a pod must be Ready before it counts as available.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_ready_seconds: i32,

    /// Lifecycle hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,

    /// Seconds for a rollout to make progress before the Progressing condition turns False.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub progress_deadline_seconds: Option<i32>,
}

/// A PersistentVolumeClaim as written inside `volumeClaimTemplates`: like Go's embedded
/// `PersistentVolumeClaim`, without the `apiVersion`/`kind` k8s-openapi's type always writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VolumeClaimTemplate {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PersistentVolumeClaimSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PersistentVolumeClaimStatus>,
}

/// How pods are created and deleted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetScaleStrategy {
    /// Pods to delete first; names that are no longer pods are removed by the controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // No duplicates: checked by the admission policy (a quadratic CRD rule exceeds the CEL budget).
    pub pods_to_delete: Vec<String>,

    /// Caps each scale-up by this many unavailable pods (scale-up only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,

    /// When true, PVCs of pods that are gone are deleted instead of reused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not", rename = "disablePVCReuse")]
    pub disable_pvc_reuse: bool,
}

/// How pods are updated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(concat!(
    "!has(self.type) || self.type != 'InPlaceOnly' || !has(self.maxSurge) || ", int_or_percent_is_zero!("self.maxSurge")
)).message("can not use maxSurge with strategy type InPlaceOnly").field_path(".maxSurge"))]
pub struct CloneSetUpdateStrategy {
    /// ReCreate (default), InPlaceIfPossible or InPlaceOnly.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = "ReCreate"))]
    /// `OnDelete` is stored when written through v1beta1, and kept by writes through v1alpha1
    /// that leave it (the operator's status writes): not every supported apiserver ratchets an
    /// unchanged value on a status write.
    #[x_kube(validation = Rule::new(
        "self in ['', 'ReCreate', 'InPlaceIfPossible', 'InPlaceOnly'] || (self == 'OnDelete' && oldSelf.hasValue() && oldSelf.value() == self)"
    ).optional_old_self(true).message("must be 'ReCreate', 'InPlaceIfPossible' or 'InPlaceOnly'"))]
    pub type_: String,

    /// Pods (or percent of replicas) kept at the old revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    #[x_kube(validation = Rule::new(NON_NEGATIVE_INT_OR_PERCENT).message(NON_NEGATIVE_INT_OR_PERCENT_MESSAGE))]
    pub partition: Option<IntOrString>,

    /// Maximum unavailable pods during an update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "20%"))]
    #[x_kube(validation = Rule::new(NON_NEGATIVE_INT_OR_PERCENT).message(NON_NEGATIVE_INT_OR_PERCENT_MESSAGE))]
    pub max_unavailable: Option<IntOrString>,

    /// Extra pods above replicas allowed during an update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    #[x_kube(validation = Rule::new(NON_NEGATIVE_INT_OR_PERCENT).message(NON_NEGATIVE_INT_OR_PERCENT_MESSAGE))]
    pub max_surge: Option<IntOrString>,

    /// Stop updating pods (scaling continues).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,

    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // Unique key=value terms: checked by the admission policy (see podsToDelete).
    pub scatter_strategy: Vec<UpdateScatterTerm>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_strategy: Option<InPlaceUpdateStrategy>,
}

/// Observed state of a CloneSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetStatus {
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub ready_replicas: i32,
    #[serde(default)]
    pub available_replicas: i32,
    #[serde(default)]
    pub updated_replicas: i32,
    #[serde(default)]
    pub updated_ready_replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub updated_available_replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expected_updated_replicas: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_revision: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<CloneSetCondition>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label_selector: String,
}

/// A condition of a CloneSet: FailedScale, FailedUpdate or Progressing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Update strategy types.
pub mod update_type {
    pub const RECREATE: &str = "ReCreate";
    pub const IN_PLACE_IF_POSSIBLE: &str = "InPlaceIfPossible";
    pub const IN_PLACE_ONLY: &str = "InPlaceOnly";
    /// Only through v1beta1 (v1alpha1 refuses it at create, as Kruise's webhook does): pods move
    /// to the update revision only when deleted and recreated.
    pub(crate) const ON_DELETE: &str = "OnDelete";
}

/// Condition types and Progressing reasons.
pub mod condition {
    pub(crate) const FAILED_SCALE: &str = "FailedScale";
    pub const FAILED_UPDATE: &str = "FailedUpdate";
    pub(crate) const PROGRESSING: &str = "Progressing";
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}
