//! The envelopes: `runtime.Unknown` around every object, lists, watch events and statuses, and
//! the answer to a pod write as its writer reads it. What is written back as JSON (a written
//! pod, a Status) derives `Serialize` with Go's `omitempty` rules.

use bytes::{Buf, Bytes};
use prost::Message;
use serde::{Serialize, Serializer};

use super::{Pod, TranscodeError};

/// What protobuf responses start with, before the `runtime.Unknown` envelope.
pub(super) const MAGIC: &[u8] = b"k8s\0";

fn no_text(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

fn no_signal(n: &Option<i32>) -> bool {
    n.is_none_or(|n| n == 0)
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
