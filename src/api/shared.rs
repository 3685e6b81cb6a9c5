//! Kruise's shared ("pub") API types used by CloneSet: lifecycle hooks, update priority and
//! scatter strategies, and the in-place update records kept in pod annotations.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Lifecycle hooks for a CloneSet's pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// The hook before a pod is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_delete: Option<LifecycleHook>,
    /// The hook before a pod is updated in place and after it has been updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update: Option<LifecycleHook>,
    /// The hook before a new pod becomes Normal (available).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_normal: Option<LifecycleHook>,
}

/// A lifecycle hook: a pod is "hooked" while it carries any of these labels or finalizers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHook {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels_handler: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers_handler: Vec<String>,
    /// Set the pod NotReady (through the KruisePodReady gate) while it is prepared for the hook.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mark_pod_not_ready: bool,
}

/// Update ordering by weight or by a label's ordered value. Only one of the two may be set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.weightPriority) && size(self.weightPriority) > 0 && has(self.orderPriority) && size(self.orderPriority) > 0)").message("only one of weightPriority and orderPriority can be used"))]
pub struct UpdatePriorityStrategy {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order_priority: Vec<UpdatePriorityOrderTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_priority: Vec<UpdatePriorityWeightTerm>,
}

/// Pods are ordered by the integer at the end of this label's value (`sts-10` → 10).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityOrderTerm {
    #[x_kube(validation = Rule::new("self != ''").message("order key can not be empty"))]
    pub ordered_key: String,
}

/// Pods matching the selector get this weight; higher total weight updates first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.matchSelector.matchLabels) && size(self.matchSelector.matchLabels) > 0) || (has(self.matchSelector.matchExpressions) && size(self.matchSelector.matchExpressions) > 0)").message("selector can not be empty").field_path(".matchSelector"))]
pub struct UpdatePriorityWeightTerm {
    #[x_kube(validation = Rule::new("self >= 0 && self <= 100").message("weight must be valid number in the range 1-100"))]
    pub weight: i32,
    // Operator validity is checked by the admission policy (a nested CRD rule exceeds the CEL budget).
    pub match_selector: LabelSelector,
}

/// One term of a scatter strategy: pods with label `key=value` are spread across update batches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, KubeSchema)]
pub struct UpdateScatterTerm {
    #[x_kube(validation = Rule::new("self != ''").message("key should not be empty"))]
    pub key: String,
    pub value: String,
}

/// In-place update settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateStrategy {
    /// Seconds between marking a pod not-ready and patching its images.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub grace_period_seconds: i32,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// The in-place update record kept in the pod annotation `apps.kruise.io/inplace-update-state`.
/// Field order and omission rules follow Kruise's JSON exactly (a pod written by either
/// controller must be readable and re-writable by the other).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InPlaceUpdateState {
    pub revision: String,
    pub update_timestamp: Option<Time>,
    /// Container name → the imageID it had before the update. Go writes `null` for nil.
    pub last_container_statuses: Option<BTreeMap<String, InPlaceUpdateContainerStatus>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_env_from_metadata: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_resources: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_images: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub next_container_images: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub next_container_ref_metadata: BTreeMap<String, RefMetadata>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub next_container_resources: BTreeMap<String, ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_check_before_next: Option<InPlaceUpdatePreCheckBeforeNext>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_batches_record: Vec<InPlaceUpdateContainerBatch>,
}

/// The labels and annotations Kruise keeps for a container whose env reads them: a Go
/// `metav1.ObjectMeta` with only those set, which Go writes with `"creationTimestamp":null` first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefMetadata {
    #[serde(default)]
    pub creation_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// kruise-daemon's report on a pod's containers (`apps.kruise.io/runtime-containers-meta`), as
/// far as the operator reads it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub(crate) struct RuntimeContainerMetaSet {
    #[serde(default)]
    pub containers: Vec<RuntimeContainerMeta>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub(crate) struct RuntimeContainerMeta {
    pub name: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(default)]
    pub hashes: RuntimeContainerHashes,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuntimeContainerHashes {
    /// The hash of the values the container's env really read from metadata.
    #[serde(default)]
    pub extracted_env_from_metadata_hash: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InPlaceUpdateContainerStatus {
    #[serde(rename = "imageID", default, skip_serializing_if = "String::is_empty")]
    pub image_id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InPlaceUpdatePreCheckBeforeNext {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers_required_ready: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct InPlaceUpdateContainerBatch {
    pub timestamp: Option<Time>,
    pub containers: Vec<String>,
}

/// Lifecycle states written to the `lifecycle.apps.kruise.io/state` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum LifecycleState {
    PreparingNormal,
    Normal,
    PreparingUpdate,
    Updating,
    Updated,
    PreparingDelete,
}

impl LifecycleState {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::PreparingNormal => "PreparingNormal",
            Self::Normal => "Normal",
            Self::PreparingUpdate => "PreparingUpdate",
            Self::Updating => "Updating",
            Self::Updated => "Updated",
            Self::PreparingDelete => "PreparingDelete",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        [Self::PreparingNormal, Self::Normal, Self::PreparingUpdate, Self::Updating, Self::Updated, Self::PreparingDelete]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}
