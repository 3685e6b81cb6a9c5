//! The pod's messages: the fields of `k8s.io/api/core/v1/generated.proto` (and of
//! apimachinery's `ObjectMeta`, `Time` and `Quantity`) the pod cache reads, with their field
//! numbers; a field the cache drops is not declared, so prost skips it unread.

use std::collections::BTreeMap;

use prost::Message;

use crate::pod_cache::fields::is_read_env;

/// `metav1.Time`: seconds only (the apiserver drops nanoseconds from JSON too). An empty message
/// is Go's zero time, which its JSON writes as null.
#[derive(Clone, PartialEq, Message)]
pub struct Time {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
}

/// `resource.Quantity`: its canonical string, as in JSON.
#[derive(Clone, PartialEq, Message)]
pub struct Quantity {
    #[prost(string, optional, tag = "1")]
    pub string: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Pod {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<PodSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<PodStatus>,
}

/// ObjectMeta without managedFields (17), which is skipped unread.
#[derive(Clone, PartialEq, Message)]
pub struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub self_link: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    pub creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<Time>,
    #[prost(int64, optional, tag = "10")]
    pub deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    pub owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    pub finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct OwnerReference {
    #[prost(string, optional, tag = "5")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "1")]
    pub kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub uid: Option<String>,
    #[prost(bool, optional, tag = "6")]
    pub controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    pub block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSpec {
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    #[prost(message, repeated, tag = "20")]
    pub init_containers: Vec<Container>,
    #[prost(string, optional, tag = "10")]
    pub node_name: Option<String>,
    #[prost(message, repeated, tag = "28")]
    pub readiness_gates: Vec<PodReadinessGate>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Container {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub image: Option<String>,
    /// Only the variables the controller reads are written (as `WirePod` keeps only those).
    #[prost(message, repeated, tag = "7")]
    pub env: Vec<EnvVar>,
    #[prost(message, optional, tag = "8")]
    pub resources: Option<ResourceRequirements>,
    #[prost(message, repeated, tag = "23")]
    pub resize_policy: Vec<ContainerResizePolicy>,
    #[prost(string, optional, tag = "24")]
    pub restart_policy: Option<String>,
}

/// Whether the cache keeps this variable (`is_read_env`).
pub(crate) fn is_kept_env(v: &EnvVar) -> bool {
    let path = v.value_from.as_ref().and_then(|f| f.field_ref.as_ref()).and_then(|f| f.field_path.as_deref());
    is_read_env(v.name.as_deref().unwrap_or_default(), v.value.as_deref(), path)
}

#[derive(Clone, PartialEq, Message)]
pub struct EnvVar {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub value_from: Option<EnvVarSource>,
}

/// Without fileKeyRef (5), which the k8s-openapi version built here does not know either.
#[derive(Clone, PartialEq, Message)]
pub struct EnvVarSource {
    #[prost(message, optional, tag = "1")]
    pub field_ref: Option<ObjectFieldSelector>,
    #[prost(message, optional, tag = "2")]
    pub resource_field_ref: Option<ResourceFieldSelector>,
    #[prost(message, optional, tag = "3")]
    pub config_map_key_ref: Option<KeySelector>,
    #[prost(message, optional, tag = "4")]
    pub secret_key_ref: Option<KeySelector>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ObjectFieldSelector {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub field_path: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceFieldSelector {
    #[prost(string, optional, tag = "1")]
    pub container_name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub resource: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub divisor: Option<Quantity>,
}

/// ConfigMapKeySelector and SecretKeySelector: the same fields, the name inlined in JSON.
#[derive(Clone, PartialEq, Message)]
pub struct KeySelector {
    #[prost(message, optional, tag = "1")]
    pub local_object_reference: Option<LocalObjectReference>,
    #[prost(string, optional, tag = "2")]
    pub key: Option<String>,
    #[prost(bool, optional, tag = "3")]
    pub optional: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
pub struct LocalObjectReference {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceRequirements {
    #[prost(btree_map = "string, message", tag = "1")]
    pub limits: BTreeMap<String, Quantity>,
    #[prost(btree_map = "string, message", tag = "2")]
    pub requests: BTreeMap<String, Quantity>,
    #[prost(message, repeated, tag = "3")]
    pub claims: Vec<ResourceClaim>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceClaim {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub request: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerResizePolicy {
    #[prost(string, optional, tag = "1")]
    pub resource_name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub restart_policy: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodReadinessGate {
    #[prost(string, optional, tag = "1")]
    pub condition_type: Option<String>,
}

/// PodStatus without the IP lists (12, 16), which the cache drops.
#[derive(Clone, PartialEq, Message)]
pub struct PodStatus {
    #[prost(int64, optional, tag = "17")]
    pub observed_generation: Option<i64>,
    #[prost(string, optional, tag = "1")]
    pub phase: Option<String>,
    #[prost(message, repeated, tag = "2")]
    pub conditions: Vec<PodCondition>,
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub nominated_node_name: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub host_ip: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub pod_ip: Option<String>,
    #[prost(message, optional, tag = "7")]
    pub start_time: Option<Time>,
    #[prost(message, repeated, tag = "10")]
    pub init_container_statuses: Vec<ContainerStatus>,
    #[prost(message, repeated, tag = "8")]
    pub container_statuses: Vec<ContainerStatus>,
    #[prost(string, optional, tag = "9")]
    pub qos_class: Option<String>,
    #[prost(message, repeated, tag = "13")]
    pub ephemeral_container_statuses: Vec<ContainerStatus>,
    #[prost(string, optional, tag = "14")]
    pub resize: Option<String>,
    #[prost(message, repeated, tag = "15")]
    pub resource_claim_statuses: Vec<PodResourceClaimStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodCondition {
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub observed_generation: Option<i64>,
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub last_probe_time: Option<Time>,
    #[prost(message, optional, tag = "4")]
    pub last_transition_time: Option<Time>,
    #[prost(string, optional, tag = "5")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub message: Option<String>,
}

/// ContainerStatus without the volume mounts (12) and the user (13), which the cache drops.
#[derive(Clone, PartialEq, Message)]
pub struct ContainerStatus {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub state: Option<ContainerState>,
    #[prost(message, optional, tag = "3")]
    pub last_state: Option<ContainerState>,
    #[prost(bool, optional, tag = "4")]
    pub ready: Option<bool>,
    #[prost(int32, optional, tag = "5")]
    pub restart_count: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub image: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub image_id: Option<String>,
    #[prost(string, optional, tag = "8")]
    pub container_id: Option<String>,
    #[prost(bool, optional, tag = "9")]
    pub started: Option<bool>,
    #[prost(btree_map = "string, message", tag = "10")]
    pub allocated_resources: BTreeMap<String, Quantity>,
    #[prost(message, optional, tag = "11")]
    pub resources: Option<ResourceRequirements>,
    #[prost(message, repeated, tag = "14")]
    pub allocated_resources_status: Vec<ResourceStatus>,
    #[prost(string, optional, tag = "15")]
    pub stop_signal: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerState {
    #[prost(message, optional, tag = "1")]
    pub waiting: Option<ContainerStateWaiting>,
    #[prost(message, optional, tag = "2")]
    pub running: Option<ContainerStateRunning>,
    #[prost(message, optional, tag = "3")]
    pub terminated: Option<ContainerStateTerminated>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerStateWaiting {
    #[prost(string, optional, tag = "1")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub message: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerStateRunning {
    #[prost(message, optional, tag = "1")]
    pub started_at: Option<Time>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerStateTerminated {
    #[prost(int32, optional, tag = "1")]
    pub exit_code: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    pub signal: Option<i32>,
    #[prost(string, optional, tag = "3")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub message: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub started_at: Option<Time>,
    #[prost(message, optional, tag = "6")]
    pub finished_at: Option<Time>,
    #[prost(string, optional, tag = "7")]
    pub container_id: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceStatus {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(message, repeated, tag = "2")]
    pub resources: Vec<ResourceHealth>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceHealth {
    #[prost(string, optional, tag = "1")]
    pub resource_id: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub health: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodResourceClaimStatus {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub resource_claim_name: Option<String>,
}
