//! Pods in Kubernetes' protobuf encoding: the messages the pod cache decodes its lists and
//! watches from, and the layer that reads the answers to pod writes in protobuf.
//!
//! Encoding a pod as JSON is most of what a cold start costs the apiserver (managedFields make
//! up most of its bytes; e2e/bench/HISTORY.md has the measurement). kube speaks JSON only, so
//! [`PodsInProtobufLayer`] asks for protobuf where the operator reads pods at volume:
//! - the pod cache's own lists and watches (`controller::pod_watch`), which mark their requests
//!   [`Untranscoded`] and decode the protobuf themselves, straight into the cached pod
//!   ([`Pod::into_wire`]), with no JSON between;
//! - pod writes (a create, and a patch, update or deletion of a pod, its status or its resize,
//!   each answered with the whole pod): the answer is rewritten as JSON holding the written
//!   pod's name, namespace, uid and resourceVersion only ([`WrittenPod`]), all that the writes'
//!   resourceVersion expectations read.
//!
//! Any other pod request, a list or watch through kube's `Api` among them, passes through as
//! JSON with every field: only a reader that decodes protobuf itself gets protobuf.
//!
//! Kruise's manager does the same: controller-runtime (v0.20, `apiutil.createRestConfig`) reads
//! every built-in kind in protobuf. Here only pods are: with managedFields they are nearly all the
//! bytes a large cluster sends. A response the apiserver sends as JSON (an apiserver or proxy
//! without protobuf) passes through untouched.
//!
//! The messages below are the subset of `k8s.io/api/core/v1/generated.proto` and
//! `k8s.io/apimachinery/.../generated.proto` the cache reads, with their field numbers. Each
//! field is written as Go's JSON would write it (`omitempty`: an empty string or a zero count
//! is left out), so a pod decodes to the same [`WirePod`](crate::pod_cache::wire::WirePod)
//! either way: `tests/pod_decoders.rs` checks field numbers and types against Kubernetes' complete
//! generated messages (k8s-pb), and `e2e/tests/operator/pod_cache.rs` against the apiserver.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::{Request, Response, header};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use prost::Message;
use serde::{Serialize, Serializer};
use tower::{Layer, Service};

use crate::pod_cache::fields::is_read_env;

mod into_wire;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What protobuf responses start with, before the `runtime.Unknown` envelope.
const MAGIC: &[u8] = b"k8s\0";
/// The values of `--kube-api-content-type` (kube-controller-manager's flag).
pub const PROTOBUF_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
pub const JSON_CONTENT_TYPE: &str = "application/json";
/// Protobuf first, JSON where the apiserver (or a proxy) serves no protobuf.
const ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";

fn no_text(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

fn no_count(n: &Option<i64>) -> bool {
    n.is_none_or(|n| n == 0)
}

fn no_signal(n: &Option<i32>) -> bool {
    n.is_none_or(|n| n == 0)
}

/// `metav1.Time`: seconds only (the apiserver drops nanoseconds from JSON too). An empty message
/// is Go's zero time, which its JSON writes as null.
#[derive(Clone, PartialEq, Message)]
pub struct Time {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
}

fn no_time(t: &Option<Time>) -> bool {
    t.as_ref().is_none_or(|t| t.seconds.is_none())
}

fn time<S: Serializer>(t: &Option<Time>, s: S) -> Result<S::Ok, S::Error> {
    let seconds = t.as_ref().and_then(|t| t.seconds).unwrap_or_default();
    let at = k8s_openapi::jiff::Timestamp::from_second(seconds).map_err(serde::ser::Error::custom)?;
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at).serialize(s)
}

/// `resource.Quantity`: its canonical string, as in JSON.
#[derive(Clone, PartialEq, Message)]
pub struct Quantity {
    #[prost(string, optional, tag = "1")]
    pub string: Option<String>,
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.string.as_deref().unwrap_or_default())
    }
}

#[derive(Clone, PartialEq, Message, Serialize)]
pub struct Pod {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// The pod a write is answered with, as the writer reads it: its identity and resourceVersion
/// (what the read-your-writes expectations record). The spec, the status and the rest of the
/// metadata are skipped unread: decoding and re-encoding them showed in the operator's CPU
/// profile of an in-place rollout.
#[derive(Clone, PartialEq, Message, Serialize)]
pub(crate) struct WrittenPod {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<WrittenMeta>,
}

/// The fields of `ObjectMeta` a written pod keeps, with their field numbers there.
#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WrittenMeta {
    #[prost(string, optional, tag = "1")]
    #[serde(skip_serializing_if = "no_text")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "no_text")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    #[serde(skip_serializing_if = "no_text")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    #[serde(skip_serializing_if = "no_text")]
    pub resource_version: Option<String>,
}

/// ObjectMeta without managedFields (17), which is skipped unread.
#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    #[serde(skip_serializing_if = "no_text")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "no_text")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "no_text")]
    pub self_link: Option<String>,
    #[prost(string, optional, tag = "5")]
    #[serde(skip_serializing_if = "no_text")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    #[serde(skip_serializing_if = "no_text")]
    pub resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    #[serde(skip_serializing_if = "no_count")]
    pub generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    #[serde(skip_serializing_if = "no_time", serialize_with = "time")]
    pub creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    #[serde(skip_serializing_if = "no_time", serialize_with = "time")]
    pub deletion_timestamp: Option<Time>,
    #[prost(int64, optional, tag = "10")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    #[prost(message, repeated, tag = "20")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    #[prost(string, optional, tag = "10")]
    #[serde(skip_serializing_if = "no_text")]
    pub node_name: Option<String>,
    #[prost(message, repeated, tag = "28")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub readiness_gates: Vec<PodReadinessGate>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub image: Option<String>,
    /// Only the variables the controller reads are written (as `WirePod` keeps only those).
    #[prost(message, repeated, tag = "7")]
    #[serde(skip_serializing_if = "no_read_env", serialize_with = "read_env")]
    pub env: Vec<EnvVar>,
    #[prost(message, optional, tag = "8")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[prost(message, repeated, tag = "23")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resize_policy: Vec<ContainerResizePolicy>,
    #[prost(string, optional, tag = "24")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// Whether the cache keeps this variable (`is_read_env`).
pub(crate) fn is_kept_env(v: &EnvVar) -> bool {
    let path = v.value_from.as_ref().and_then(|f| f.field_ref.as_ref()).and_then(|f| f.field_path.as_deref());
    is_read_env(v.name.as_deref().unwrap_or_default(), v.value.as_deref(), path)
}

fn no_read_env(env: &[EnvVar]) -> bool {
    !env.iter().any(is_kept_env)
}

fn read_env<S: Serializer>(env: &[EnvVar], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(env.iter().filter(|v| is_kept_env(v)))
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub value: Option<String>,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

/// Without fileKeyRef (5), which the k8s-openapi version built here does not know either.
#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarSource {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<ResourceFieldSelector>,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeySelector>,
    #[prost(message, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeySelector>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectFieldSelector {
    #[prost(string, optional, tag = "1")]
    #[serde(skip_serializing_if = "no_text")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub field_path: Option<String>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFieldSelector {
    #[prost(string, optional, tag = "1")]
    #[serde(skip_serializing_if = "no_text")]
    pub container_name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub resource: Option<String>,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
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

impl Serialize for KeySelector {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut m = s.serialize_map(None)?;
        if let Some(name) = self.local_object_reference.as_ref().and_then(|r| r.name.as_deref()).filter(|n| !n.is_empty()) {
            m.serialize_entry("name", name)?;
        }
        m.serialize_entry("key", self.key.as_deref().unwrap_or_default())?;
        if let Some(optional) = self.optional {
            m.serialize_entry("optional", &optional)?;
        }
        m.end()
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct LocalObjectReference {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[prost(btree_map = "string, message", tag = "1")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
    #[prost(btree_map = "string, message", tag = "2")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
    #[prost(message, repeated, tag = "3")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ResourceClaim>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
pub struct ResourceClaim {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub request: Option<String>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerResizePolicy {
    #[prost(string, optional, tag = "1")]
    pub resource_name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub restart_policy: Option<String>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReadinessGate {
    #[prost(string, optional, tag = "1")]
    pub condition_type: Option<String>,
}

/// PodStatus without the IP lists (12, 16), which the cache drops.
#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[prost(int64, optional, tag = "17")]
    #[serde(skip_serializing_if = "no_count")]
    pub observed_generation: Option<i64>,
    #[prost(string, optional, tag = "1")]
    #[serde(skip_serializing_if = "no_text")]
    pub phase: Option<String>,
    #[prost(message, repeated, tag = "2")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodCondition>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "no_text")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "no_text")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "11")]
    #[serde(skip_serializing_if = "no_text")]
    pub nominated_node_name: Option<String>,
    #[prost(string, optional, tag = "5")]
    #[serde(rename = "hostIP", skip_serializing_if = "no_text")]
    pub host_ip: Option<String>,
    #[prost(string, optional, tag = "6")]
    #[serde(rename = "podIP", skip_serializing_if = "no_text")]
    pub pod_ip: Option<String>,
    #[prost(message, optional, tag = "7")]
    #[serde(skip_serializing_if = "no_time", serialize_with = "time")]
    pub start_time: Option<Time>,
    #[prost(message, repeated, tag = "10")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub init_container_statuses: Vec<ContainerStatus>,
    #[prost(message, repeated, tag = "8")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub container_statuses: Vec<ContainerStatus>,
    #[prost(string, optional, tag = "9")]
    #[serde(skip_serializing_if = "no_text")]
    pub qos_class: Option<String>,
    #[prost(message, repeated, tag = "13")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ephemeral_container_statuses: Vec<ContainerStatus>,
    #[prost(string, optional, tag = "14")]
    #[serde(skip_serializing_if = "no_text")]
    pub resize: Option<String>,
    #[prost(message, repeated, tag = "15")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_claim_statuses: Vec<PodResourceClaimStatus>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    #[prost(int64, optional, tag = "7")]
    #[serde(skip_serializing_if = "no_count")]
    pub observed_generation: Option<i64>,
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "no_time", serialize_with = "time")]
    pub last_probe_time: Option<Time>,
    #[prost(message, optional, tag = "4")]
    #[serde(skip_serializing_if = "no_time", serialize_with = "time")]
    pub last_transition_time: Option<Time>,
    #[prost(string, optional, tag = "5")]
    #[serde(skip_serializing_if = "no_text")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "6")]
    #[serde(skip_serializing_if = "no_text")]
    pub message: Option<String>,
}

/// ContainerStatus without the volume mounts (12) and the user (13), which the cache drops.
#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_state: Option<ContainerState>,
    #[prost(bool, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[prost(int32, optional, tag = "5")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<i32>,
    #[prost(string, optional, tag = "6")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[prost(string, optional, tag = "7")]
    #[serde(rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[prost(string, optional, tag = "8")]
    #[serde(rename = "containerID", skip_serializing_if = "no_text")]
    pub container_id: Option<String>,
    #[prost(bool, optional, tag = "9")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<bool>,
    #[prost(btree_map = "string, message", tag = "10")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated_resources: BTreeMap<String, Quantity>,
    #[prost(message, optional, tag = "11")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[prost(message, repeated, tag = "14")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocated_resources_status: Vec<ResourceStatus>,
    #[prost(string, optional, tag = "15")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
pub struct ContainerState {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<ContainerStateWaiting>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<ContainerStateRunning>,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminated: Option<ContainerStateTerminated>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
pub struct ContainerStateWaiting {
    #[prost(string, optional, tag = "1")]
    #[serde(skip_serializing_if = "no_text")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub message: Option<String>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateRunning {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "no_time", serialize_with = "time")]
    pub started_at: Option<Time>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateTerminated {
    #[prost(int32, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_signal")]
    pub signal: Option<i32>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "no_text")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "no_text")]
    pub message: Option<String>,
    #[prost(message, optional, tag = "5")]
    #[serde(skip_serializing_if = "no_time", serialize_with = "time")]
    pub started_at: Option<Time>,
    #[prost(message, optional, tag = "6")]
    #[serde(skip_serializing_if = "no_time", serialize_with = "time")]
    pub finished_at: Option<Time>,
    #[prost(string, optional, tag = "7")]
    #[serde(rename = "containerID", skip_serializing_if = "no_text")]
    pub container_id: Option<String>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
pub struct ResourceStatus {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(message, repeated, tag = "2")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceHealth>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
pub struct ResourceHealth {
    #[prost(string, optional, tag = "1")]
    #[serde(rename = "resourceID")]
    pub resource_id: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub health: Option<String>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodResourceClaimStatus {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claim_name: Option<String>,
}

// The envelopes: `runtime.Unknown` around every object, lists, watch events and statuses.

#[derive(Clone, PartialEq, Message)]
pub(crate) struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    pub raw: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub object: Option<RawExtension>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct RawExtension {
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub raw: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct PodList {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    pub items: Vec<Pod>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListMeta {
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "no_text")]
    pub r#continue: Option<String>,
    #[prost(int64, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_item_count: Option<i64>,
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Status {
    /// Always written, as Go's JSON writes a struct that `omitempty` cannot leave out.
    #[prost(message, optional, tag = "1")]
    #[serde(serialize_with = "list_meta")]
    pub metadata: Option<ListMeta>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub status: Option<String>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "no_text")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "no_text")]
    pub reason: Option<String>,
    #[prost(message, optional, tag = "5")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    #[prost(int32, optional, tag = "6")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
}

fn list_meta<S: Serializer>(meta: &Option<ListMeta>, s: S) -> Result<S::Ok, S::Error> {
    match meta {
        Some(meta) => meta.serialize(s),
        None => ListMeta::default().serialize(s),
    }
}

#[derive(Clone, PartialEq, Message, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusDetails {
    #[prost(string, optional, tag = "1")]
    #[serde(skip_serializing_if = "no_text")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub group: Option<String>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "no_text")]
    pub kind: Option<String>,
    #[prost(string, optional, tag = "6")]
    #[serde(skip_serializing_if = "no_text")]
    pub uid: Option<String>,
    #[prost(message, repeated, tag = "4")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[prost(int32, optional, tag = "5")]
    #[serde(skip_serializing_if = "no_signal")]
    pub retry_after_seconds: Option<i32>,
}

/// Why a write was refused, field by field (a 422's causes); `type` in protobuf, `reason` in JSON.
#[derive(Clone, PartialEq, Message, Serialize)]
pub(crate) struct StatusCause {
    #[prost(string, optional, tag = "1")]
    #[serde(rename = "reason", skip_serializing_if = "no_text")]
    pub r#type: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "no_text")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "no_text")]
    pub field: Option<String>,
}

/// Why a protobuf response could not be read: the watch ends with this error (kube's watcher
/// then backs off and lists again), a list fails with it.
#[derive(Debug, thiserror::Error)]
pub enum TranscodeError {
    #[error("protobuf response without the k8s magic prefix")]
    NoMagic,
    #[error("protobuf response of kind {0:?}, expected a Pod, PodList or Status")]
    UnexpectedKind(String),
    #[error("undecodable protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("writing JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("a watch frame of {0} bytes is cut short")]
    Truncated(usize),
    #[error("a time out of range: {0}")]
    Time(String),
}

/// Writes `object` as JSON with its apiVersion and kind first (kube reads a bookmark's).
fn typed_json<T: Serialize>(api_version: &str, kind: &str, object: &T, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    out.extend_from_slice(b"{\"apiVersion\":");
    serde_json::to_writer(&mut *out, api_version)?;
    out.extend_from_slice(b",\"kind\":");
    serde_json::to_writer(&mut *out, kind)?;
    let fields_at = out.len();
    serde_json::to_writer(&mut *out, object)?;
    // The object's own `{` becomes the separator; `{}` leaves only the closing brace.
    if out.len() - fields_at == 2 {
        out.truncate(fields_at);
        out.push(b'}');
    } else {
        out[fields_at] = b',';
    }
    Ok(())
}

/// One object's envelope (`k8s\0` + `runtime.Unknown`) opened: its apiVersion, kind and bytes.
pub(crate) fn unenvelope(mut envelope: Bytes) -> Result<(Option<String>, String, Bytes), TranscodeError> {
    if !envelope.starts_with(MAGIC) {
        return Err(TranscodeError::NoMagic);
    }
    envelope.advance(MAGIC.len());
    let unknown = Unknown::decode(envelope)?;
    let meta = unknown.type_meta.unwrap_or_default();
    Ok((meta.api_version, meta.kind.unwrap_or_default(), unknown.raw.unwrap_or_default()))
}

/// Writes the answer to a pod write (`k8s\0` + `runtime.Unknown`: the written pod, or the
/// Status of a refusal) as JSON into `out`, the pod as its identity and resourceVersion only.
fn written_json(envelope: Bytes, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    let (api_version, kind, raw) = unenvelope(envelope)?;
    let api_version = api_version.as_deref().unwrap_or("v1");
    match kind.as_str() {
        "Pod" => typed_json(api_version, &kind, &WrittenPod::decode(raw)?, out)?,
        "Status" => typed_json(api_version, &kind, &Status::decode(raw)?, out)?,
        _ => return Err(TranscodeError::UnexpectedKind(kind)),
    }
    Ok(())
}

/// A response body of JSON transcoded from protobuf.
pub(crate) type TranscodedBody = UnsyncBoxBody<Bytes, BoxError>;

/// A write's answer as one JSON document, once the whole body has arrived.
fn transcode_written<B>(body: B) -> TranscodedBody
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let json = futures::stream::once(async move {
        let bytes = body.collect().await.map_err(Into::into)?.to_bytes();
        let mut out = Vec::new();
        written_json(bytes, &mut out)?;
        Ok::<_, BoxError>(hyper::body::Frame::data(Bytes::from(out)))
    });
    UnsyncBoxBody::new(http_body_util::StreamBody::new(json))
}

/// Whether the response to `method` on `path` is a pod, a pod list or a watch of pods that is
/// read in protobuf: lists and watches of the pods collection, a pod's creation, and the pod
/// every patch, update or deletion of one pod (or of its `status` or `resize`) answers with.
/// A single pod's GET stays JSON: it is how a reader gets a whole pod.
fn pods_answer_in_protobuf(method: &http::Method, path: &str) -> bool {
    use http::Method;
    let Some(rest) = path.strip_prefix("/api/v1/") else { return false };
    if rest == "pods" {
        return method == Method::GET;
    }
    let Some((ns, tail)) = rest.strip_prefix("namespaces/").and_then(|r| r.split_once('/')) else { return false };
    if ns.is_empty() {
        return false;
    }
    let Some(after) = tail.strip_prefix("pods") else { return false };
    if after.is_empty() {
        return [Method::GET, Method::POST].contains(method);
    }
    // One pod (`pods/<name>`) or its subresource (`pods/<name>/<sub>`), split without allocating:
    // this runs for every request the client makes.
    let Some((name, subresource)) = after.strip_prefix('/').map(|one| one.split_once('/').unwrap_or((one, ""))) else {
        return false;
    };
    let writes_one = [Method::PATCH, Method::PUT].contains(method);
    match subresource {
        _ if name.is_empty() => false,
        "" => writes_one || method == Method::DELETE,
        "status" | "resize" => writes_one,
        _ => false,
    }
}

/// Marks a pod list or watch whose reader decodes the response itself (the pod cache's watcher,
/// `controller::pod_watch`): the layer asks for protobuf when enabled and passes the response
/// through untouched.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Untranscoded;

/// Asks for protobuf on pod lists, watches and writes and hands kube their JSON (see the module);
/// not `enabled`, it passes every request and response through as they are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PodsInProtobufLayer {
    pub enabled: bool,
}

impl<S> Layer<S> for PodsInProtobufLayer {
    type Service = PodsInProtobuf<S>;

    fn layer(&self, inner: S) -> PodsInProtobuf<S> {
        PodsInProtobuf { inner, enabled: self.enabled }
    }
}

#[derive(Clone)]
pub(crate) struct PodsInProtobuf<S> {
    inner: S,
    enabled: bool,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for PodsInProtobuf<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<TranscodedBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        // A list or watch only for the reader that decodes protobuf itself: any other pod list
        // (kube's `Api`, anywhere in the operator) gets the apiserver's whole JSON.
        let untranscoded = req.extensions().get::<Untranscoded>().is_some();
        let read = req.method() == http::Method::GET;
        let pods = self.enabled && pods_answer_in_protobuf(req.method(), req.uri().path()) && (untranscoded || !read);
        if pods {
            req.headers_mut().insert(header::ACCEPT, http::HeaderValue::from_static(ACCEPT));
        }
        let res = self.inner.call(req);
        Box::pin(async move {
            let res = res.await?;
            let content_type = res.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
            if untranscoded || !(pods && content_type.starts_with(PROTOBUF_CONTENT_TYPE)) {
                return Ok(res.map(|b| UnsyncBoxBody::new(b.map_err(Into::into))));
            }
            let (mut parts, body) = res.into_parts();
            parts.headers.insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
            parts.headers.remove(header::CONTENT_LENGTH);
            Ok(Response::from_parts(parts, transcode_written(body)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enveloped(kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown =
            Unknown { type_meta: Some(TypeMeta { api_version: Some("v1".into()), kind: Some(kind.into()) }), raw: Some(raw.into()) };
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    #[test]
    fn pod_lists_watches_and_the_answers_to_pod_writes_are_read_in_protobuf() {
        use http::Method;
        let ns = "/api/v1/namespaces/default";
        for (method, path, protobuf) in [
            (Method::GET, "/api/v1/pods".to_string(), true),
            (Method::GET, format!("{ns}/pods"), true),
            (Method::POST, format!("{ns}/pods"), true),
            (Method::PATCH, format!("{ns}/pods/web-1"), true),
            (Method::PUT, format!("{ns}/pods/web-1"), true),
            (Method::DELETE, format!("{ns}/pods/web-1"), true),
            (Method::PATCH, format!("{ns}/pods/web-1/status"), true),
            (Method::PATCH, format!("{ns}/pods/web-1/resize"), true),
            // A whole pod, read by name; what is not a pod (an eviction, a log, a list deletion).
            (Method::GET, format!("{ns}/pods/web-1"), false),
            (Method::GET, format!("{ns}/pods/web-1/status"), false),
            (Method::POST, format!("{ns}/pods/web-1/eviction"), false),
            (Method::GET, format!("{ns}/pods/web-1/log"), false),
            (Method::DELETE, format!("{ns}/pods"), false),
            (Method::POST, "/api/v1/pods".to_string(), false),
            (Method::PATCH, format!("{ns}/pods/"), false),
            (Method::PATCH, format!("{ns}/pods//status"), false),
            (Method::PATCH, format!("{ns}/pods/web-1/status/x"), false),
            (Method::PATCH, format!("{ns}/podsx/web-1"), false),
            (Method::GET, "/api/v1/namespaces//pods".to_string(), false),
            (Method::GET, format!("{ns}/persistentvolumeclaims"), false),
            (Method::GET, format!("{ns}/podtemplates"), false),
            (Method::PATCH, "/apis/apps.kruise.io/v1alpha1/namespaces/default/clonesets/web".to_string(), false),
        ] {
            assert_eq!(pods_answer_in_protobuf(&method, &path), protobuf, "{method} {path}");
        }
    }

    /// Only the pod cache's own reads (marked [`Untranscoded`]) and pod writes ask for protobuf;
    /// a pod list through kube's `Api` gets the apiserver's whole JSON, and only a write's answer
    /// is trimmed.
    #[tokio::test]
    async fn only_the_caches_reads_and_pod_writes_are_asked_in_protobuf() {
        use http_body_util::Full;
        let pod = Pod {
            metadata: Some(ObjectMeta { name: Some("web-1".into()), resource_version: Some("7".into()), ..Default::default() }),
            ..Default::default()
        };
        let body = Bytes::from(enveloped("Pod", pod.encode_to_vec()));
        let served = body.clone();
        // The apiserver: protobuf when asked for it, JSON otherwise.
        let apiserver = tower::service_fn(move |req: Request<()>| {
            let body = served.clone();
            let protobuf = req.headers().get(header::ACCEPT).is_some_and(|a| a.to_str().unwrap().starts_with(PROTOBUF_CONTENT_TYPE));
            let (content_type, bytes) =
                if protobuf { (PROTOBUF_CONTENT_TYPE, body) } else { (JSON_CONTENT_TYPE, Bytes::from_static(b"{\"whole\":true}")) };
            async move {
                Ok::<_, std::convert::Infallible>(
                    Response::builder().header(header::CONTENT_TYPE, content_type).body(Full::new(bytes)).unwrap(),
                )
            }
        });
        let mut layer = PodsInProtobufLayer { enabled: true }.layer(apiserver);
        let path = "/api/v1/namespaces/default/pods";
        let ask = |method: http::Method, path: &str, marked: bool| {
            let mut req = Request::builder().method(method).uri(path).body(()).unwrap();
            if marked {
                req.extensions_mut().insert(Untranscoded);
            }
            req
        };
        let text = |res: Response<TranscodedBody>| async move { res.into_body().collect().await.unwrap().to_bytes() };
        let listed = text(layer.call(ask(http::Method::GET, path, false)).await.unwrap()).await;
        assert_eq!(&listed[..], b"{\"whole\":true}", "kube's own pod list: the apiserver's JSON");
        let cached = text(layer.call(ask(http::Method::GET, path, true)).await.unwrap()).await;
        assert_eq!(cached, body, "the cache's read: protobuf, untouched");
        let written = text(layer.call(ask(http::Method::PATCH, &format!("{path}/web-1"), false)).await.unwrap()).await;
        assert_eq!(&written[..], br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","resourceVersion":"7"}}"#);
    }

    #[test]
    fn a_written_pod_is_answered_with_its_identity_and_resource_version_only() {
        let pod = Pod {
            metadata: Some(ObjectMeta {
                name: Some("web-1".into()),
                generate_name: Some("web-".into()),
                namespace: Some("default".into()),
                uid: Some("u-1".into()),
                resource_version: Some("7".into()),
                labels: [("app".to_string(), "web".to_string())].into(),
                ..Default::default()
            }),
            spec: Some(PodSpec { node_name: Some("node-a".into()), ..Default::default() }),
            status: Some(PodStatus { phase: Some("Running".into()), ..Default::default() }),
        };
        let answer = || {
            let mut out = Vec::new();
            written_json(enveloped("Pod", pod.encode_to_vec()).into(), &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            answer(),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"default","uid":"u-1","resourceVersion":"7"}}"#
        );
        // What a write's caller reads of it (writes::expect_version).
        let written: crate::pod_cache::wire::WirePod = serde_json::from_str(&answer()).unwrap();
        assert_eq!((written.0.metadata.uid.as_deref(), written.0.metadata.resource_version.as_deref()), (Some("u-1"), Some("7")));
        // A refused write is answered with a Status either way.
        let refused = Status { status: Some("Failure".into()), code: Some(409), ..Default::default() };
        let mut out = Vec::new();
        written_json(enveloped("Status", refused.encode_to_vec()).into(), &mut out).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"apiVersion":"v1","kind":"Status","metadata":{},"status":"Failure","code":409}"#
        );
    }

    #[test]
    fn what_is_not_a_pod_or_status_is_an_error() {
        let mut out = Vec::new();
        for kind in ["Secret", "PodList"] {
            assert!(matches!(written_json(enveloped(kind, vec![]).into(), &mut out), Err(TranscodeError::UnexpectedKind(k)) if k == kind));
        }
        assert!(matches!(written_json(Bytes::from_static(b"{\"kind\":\"Pod\"}"), &mut out), Err(TranscodeError::NoMagic)));
    }

    #[test]
    fn go_zero_times_and_empty_strings_are_left_out_as_go_json_leaves_them() {
        let condition = PodCondition {
            r#type: Some("Ready".into()),
            status: Some("True".into()),
            last_probe_time: Some(Time { seconds: None }),
            last_transition_time: Some(Time { seconds: Some(1_764_000_000) }),
            reason: Some(String::new()),
            observed_generation: Some(0),
            message: None,
        };
        assert_eq!(
            serde_json::to_string(&condition).unwrap(),
            r#"{"type":"Ready","status":"True","lastTransitionTime":"2025-11-24T16:00:00Z"}"#
        );
    }
}
