//! `apps.kruise.io/v1beta1` CloneSet, as Kruise's next release serves it: the rolling-update
//! settings under `updateStrategy.rollingUpdate`, `OnDelete`, `enablePVCReuse` (false by
//! default), and the exclude-preparing-delete label and image pre-download annotations as spec
//! fields. Stored as v1alpha1: `conversion.rs` maps one to the other; the controller reads only
//! the stored form.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::cloneset::{CloneSetStatus, VolumeClaimTemplate};
use super::rules::*;
use super::shared::{Lifecycle, UpdatePriorityStrategy, UpdateScatterTerm};

/// Desired state of a CloneSet.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "apps.kruise.io",
    version = "v1beta1",
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
#[x_kube(validation = Rule::new(PROGRESS_DEADLINE).message(PROGRESS_DEADLINE_MESSAGE).field_path(".progressDeadlineSeconds"))]
#[x_kube(validation = Rule::new(concat!(
    "!has(self.replicas) || self.replicas == 0 || !has(self.updateStrategy) || !has(self.updateStrategy.rollingUpdate) || !(",
    "(!has(self.updateStrategy.rollingUpdate.maxUnavailable) || ", int_or_percent_is_zero!("self.updateStrategy.rollingUpdate.maxUnavailable"), ") && ",
    "(!has(self.updateStrategy.rollingUpdate.maxSurge) || ", int_or_percent_is_zero!("self.updateStrategy.rollingUpdate.maxSurge"), "))"
)).message(BOTH_ZERO_MESSAGE).field_path(".updateStrategy.rollingUpdate.maxUnavailable"))]
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

/// How pods are created and deleted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetScaleStrategy {
    /// Pods to delete first; names that are no longer pods are removed by the controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods_to_delete: Vec<String>,

    /// Caps each scale-up by this many unavailable pods (scale-up only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,

    /// When true, a new pod reuses the PVCs its instance left behind; when false (the default)
    /// they are deleted and created afresh.
    #[serde(default, skip_serializing_if = "std::ops::Not::not", rename = "enablePVCReuse")]
    #[schemars(extend("default" = false))]
    pub enable_pvc_reuse: bool,

    /// When true, pods being deleted through a preDelete hook do not count as replicas.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclude_preparing_delete: bool,
}

/// How pods are updated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetUpdateStrategy {
    /// RollingUpdate (default) or OnDelete: pods are replaced only when deleted.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = "RollingUpdate"))]
    #[x_kube(validation = Rule::new("self in ['', 'RollingUpdate', 'OnDelete']").message("must be 'RollingUpdate' or 'OnDelete'"))]
    pub type_: String,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateCloneSetStrategy>,
}

/// How a rolling update proceeds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(concat!(
    "!has(self.podUpdatePolicy) || self.podUpdatePolicy != 'InPlaceOnly' || !has(self.maxSurge) || ", int_or_percent_is_zero!("self.maxSurge")
)).message("can not use maxSurge with podUpdatePolicy InPlaceOnly").field_path(".maxSurge"))]
pub struct RollingUpdateCloneSetStrategy {
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

    /// ReCreate (default), InPlaceIfPossible or InPlaceOnly.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = "ReCreate"))]
    #[x_kube(validation = Rule::new("self in ['', 'ReCreate', 'InPlaceIfPossible', 'InPlaceOnly']").message("must be 'ReCreate', 'InPlaceIfPossible' or 'InPlaceOnly'"))]
    pub pod_update_policy: String,

    /// Stop updating pods (scaling continues).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,

    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scatter_strategy: Vec<UpdateScatterTerm>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_strategy: Option<InPlaceUpdateStrategy>,
}

/// In-place update settings; the image pre-download settings are annotations in v1alpha1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateStrategy {
    /// Seconds between marking a pod not-ready and patching its images.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub grace_period_seconds: i32,

    /// Nodes pre-pulling the next revision's images at once (an integer, no percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("type(self) == int ? self >= 0 : string(self).matches('^[0-9]+$')").message("imagePreDownloadParallelism must be a non-negative integer"))]
    pub image_pre_download_parallelism: Option<IntOrString>,

    /// Timeout of each pre-download pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub image_pre_download_timeout_seconds: Option<i32>,

    /// Updated ready pods needed before the next batch's images are pre-downloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub image_pre_download_min_updated_ready_pods: Option<i32>,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}
