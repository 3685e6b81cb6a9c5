//! In-place updates: whether a revision change can be applied to a running pod
//! without recreating it, the patch that does it, Kruise's state and grace annotations, and how
//! completion is detected.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::api::keys;
use crate::api::shared::{InPlaceUpdateContainerBatch, InPlaceUpdateContainerStatus, InPlaceUpdateState, RefMetadata};
use crate::core::pod_read::PodRead;
use crate::core::{defaults, env_metadata, resources, revision};

/// What an in-place update changes, and Kruise's JSON for it (held in the grace annotation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateSpec {
    pub revision: String,
    /// Container name → new image.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_images: BTreeMap<String, String>,
    /// Container name → the labels and annotations its env reads that this update changes,
    /// applied with the update for kruise-daemon to restart it with (Kruise's field).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_ref_metadata: BTreeMap<String, RefMetadata>,
    /// Container name → the cpu/memory values to resize to (InPlaceWorkloadVerticalScaling).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_resources: BTreeMap<String, ResourceRequirements>,
    /// A merge patch of the pod's labels and annotations (Go writes `[]byte` as base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_data_patch: Option<ByteString>,
    /// The containers' env is refreshed through kruise-daemon (`container_ref_metadata`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_env_from_metadata: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub grace_seconds: i32,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

impl UpdateSpec {
    fn metadata_patch(&self) -> Option<Value> {
        self.meta_data_patch.as_ref().and_then(|b| serde_json::from_slice(&b.0).ok())
    }

    /// The labels and annotations this update changes that an env variable of the new
    /// template (`new_data`, the target revision's data) reads ([`env_metadata::changed_reads`]).
    pub(crate) fn changed_reads(&self, new_data: &[u8]) -> Vec<env_metadata::ChangedRead> {
        self.metadata_patch().map(|patch| env_metadata::changed_reads(new_data, &patch)).unwrap_or_default()
    }

    /// This update as Kruise writes it for kruise-daemon to refresh the env of `changed`: those
    /// keys in `containerRefMetadata`, `updateEnvFromMetadata` set. `None` when the daemon cannot.
    pub(crate) fn through_daemon(&self, changed: &[env_metadata::ChangedRead]) -> Option<UpdateSpec> {
        let (rest, refs) = env_metadata::split_for_daemon(&self.metadata_patch()?, changed)?;
        Some(UpdateSpec {
            meta_data_patch: rest.map(|p| ByteString(serde_json::to_vec(&p).unwrap_or_default())),
            container_ref_metadata: refs,
            update_env_from_metadata: true,
            ..self.clone()
        })
    }
}

/// Decides from the pod's revision data and the target revision's data whether the change can
/// be made in place: only container images (`replace /spec/containers/<i>/image`) and template
/// labels/annotations may differ, and with `vertical_scaling` (InPlaceWorkloadVerticalScaling)
/// containers' cpu/memory values too, as long as the pod QoS class stays. `None`: recreate (or
/// refuse, under InPlaceOnly). A pod whose revision is gone (truncated history) cannot be
/// updated in place.
pub(crate) fn in_place_spec(
    old_data: Option<&[u8]>,
    new_data: &[u8],
    new_revision: &str,
    grace_seconds: i32,
    vertical_scaling: bool,
) -> Option<UpdateSpec> {
    let old = revision::template_from_revision_data(old_data?).ok()?;
    let new = revision::template_from_revision_data(new_data).ok()?;
    let (old_meta, new_meta) = (old.get("metadata").cloned().unwrap_or(json!({})), new.get("metadata").cloned().unwrap_or(json!({})));
    let (mut old_spec, mut new_spec) = (old.get("spec").cloned().unwrap_or(json!({})), new.get("spec").cloned().unwrap_or(json!({})));
    // Kruise's webhook defaults every stored template, so a default spelled out on one side only
    // is no change there; it must not force a recreate here.
    defaults::set_default_pod_spec(&mut old_spec);
    defaults::set_default_pod_spec(&mut new_spec);

    // A resize never changes the QoS class (the apiserver refuses one that would).
    let same_qos = resources::qos_class(&old_spec).is_some() && resources::qos_class(&old_spec) == resources::qos_class(&new_spec);

    // Images: same containers in the same order, differing only in `image` (and resources).
    let mut images = BTreeMap::new();
    let mut container_resources = BTreeMap::new();
    {
        let oc = old_spec.get_mut("containers").and_then(Value::as_array_mut)?;
        let nc = new_spec.get_mut("containers").and_then(Value::as_array_mut)?;
        if oc.len() != nc.len() {
            return None;
        }
        for (o, n) in oc.iter_mut().zip(nc.iter_mut()) {
            let (oi, ni) = (o.as_object_mut()?.remove("image"), n.as_object_mut()?.remove("image"));
            match (oi, ni) {
                (Some(a), Some(b)) if a != b => {
                    let name = o.get("name")?.as_str()?.to_string();
                    images.insert(name, b.as_str()?.to_string());
                }
                (a, b) if a == b => {}
                _ => return None,
            }
            let (or, nr) = (o.as_object_mut()?.remove("resources"), n.as_object_mut()?.remove("resources"));
            if or != nr {
                let resize = resources::resize_of(or.as_ref(), nr.as_ref()).filter(|_| vertical_scaling && same_qos)?;
                container_resources.insert(o.get("name")?.as_str()?.to_string(), resize);
            }
        }
    }
    if old_spec != new_spec {
        return None;
    }

    // Metadata: labels, annotations and finalizers are patched onto the pod (Kruise's
    // MetaDataPatch, a strategic-merge patch of the template metadata); anything else (name,
    // namespace, owner references: nothing a template sensibly sets) recreates.
    let strip = |m: &Value| -> Value {
        let mut m = m.as_object().cloned().unwrap_or_default();
        for k in ["labels", "annotations", "finalizers", "creationTimestamp"] {
            m.remove(k);
        }
        Value::Object(m)
    };
    if strip(&old_meta) != strip(&new_meta) {
        return None;
    }
    let mut meta = Map::new();
    for field in ["labels", "annotations"] {
        let empty = Map::new();
        let o = old_meta.get(field).and_then(Value::as_object).unwrap_or(&empty);
        let n = new_meta.get(field).and_then(Value::as_object).unwrap_or(&empty);
        let mut diff = Map::new();
        for (k, v) in n {
            if o.get(k) != Some(v) {
                diff.insert(k.clone(), v.clone());
            }
        }
        for k in o.keys().filter(|k| !n.contains_key(*k)) {
            diff.insert(k.clone(), Value::Null);
        }
        if !diff.is_empty() {
            meta.insert(field.into(), Value::Object(diff));
        }
    }
    meta.extend(finalizers_patch(&old_meta, &new_meta));
    let meta_data_patch = (!meta.is_empty()).then(|| serde_json::to_vec(&json!({"metadata": meta})).ok()).flatten().map(ByteString);
    Some(UpdateSpec {
        revision: new_revision.to_string(),
        container_images: images,
        container_resources,
        meta_data_patch,
        grace_seconds: grace_seconds.max(0),
        ..Default::default()
    })
}

/// The strategic-merge directives `CreateTwoWayMergePatch` writes for a change of
/// `metadata.finalizers` (a set-like list): the new order, the added ones, the removed ones.
fn finalizers_patch(old_meta: &Value, new_meta: &Value) -> Map<String, Value> {
    let list = |m: &Value| -> Vec<Value> { m.get("finalizers").and_then(Value::as_array).cloned().unwrap_or_default() };
    let (old, new) = (list(old_meta), list(new_meta));
    let mut out = Map::new();
    if old == new {
        return out;
    }
    if new.is_empty() {
        out.insert("finalizers".into(), Value::Null);
        return out;
    }
    let added: Vec<Value> = new.iter().filter(|f| !old.contains(f)).cloned().collect();
    let removed: Vec<Value> = old.iter().filter(|f| !new.contains(f)).cloned().collect();
    out.insert("$setElementOrder/finalizers".into(), Value::Array(new));
    if !added.is_empty() {
        out.insert("finalizers".into(), Value::Array(added));
    }
    if !removed.is_empty() {
        out.insert("$deleteFromPrimitiveList/finalizers".into(), Value::Array(removed));
    }
    out
}

/// The state annotation's value as a pod carries it (current key first, legacy key as fallback).
pub(crate) fn read_state(pod: &dyn PodRead) -> Option<InPlaceUpdateState> {
    serde_json::from_str(state_annotation(pod)?).ok()
}

fn state_annotation(pod: &dyn PodRead) -> Option<&str> {
    pod.annotation(keys::INPLACE_UPDATE_STATE).or_else(|| pod.annotation(keys::INPLACE_UPDATE_STATE_LEGACY))
}

/// Whether the pod's state may name a next launch-priority batch, read without parsing it: the
/// state is written with `nextContainerImages` omitted when empty (Kruise's `omitempty`, and ours),
/// so a state without the key has no batch left. `true` means "parse it to know".
pub(crate) fn may_have_next_batch(pod: &dyn PodRead) -> bool {
    state_annotation(pod).is_some_and(|raw| raw.contains("\"nextContainerImages\""))
}

/// The grace annotation's UpdateSpec, if the pod is in a grace period.
pub(crate) fn read_grace(pod: &dyn PodRead) -> Option<UpdateSpec> {
    let raw = pod.annotation(keys::INPLACE_UPDATE_GRACE).or_else(|| pod.annotation(keys::INPLACE_UPDATE_GRACE_LEGACY))?;
    serde_json::from_str(raw).ok()
}

/// The state written when an in-place update starts, and the images changed in this write: with
/// no grace period the first container batch is applied at once, so its imageIDs and batch
/// record are in the state already; with one, nothing changes yet.
pub(crate) fn start_state(pod: &Pod, spec: &UpdateSpec, now: Timestamp) -> (InPlaceUpdateState, BTreeMap<String, String>) {
    let mut state = InPlaceUpdateState {
        revision: spec.revision.clone(),
        update_timestamp: Some(Time(now)),
        last_container_statuses: None,
        update_images: !spec.container_images.is_empty(),
        update_resources: !spec.container_resources.is_empty(),
        update_env_from_metadata: spec.update_env_from_metadata,
        ..Default::default()
    };
    let batch = if spec.grace_seconds <= 0 {
        record_batch(&mut state, pod, &spec.container_images, &spec.container_ref_metadata, now)
    } else {
        BTreeMap::new()
    };
    (state, batch)
}

/// Each container's launch priority, as Kruise's in-place update reads it: from the barrier env
/// (`KRUISE_CONTAINER_BARRIER`, key `p_<N>`) that Kruise's pod webhook injects. A pod that never
/// went through that webhook (ours) gets what the webhook would have injected: with the
/// `Ordered` annotation, 0, -1, -2… by position; otherwise each container's
/// `KRUISE_CONTAINER_PRIORITY` (absent: 0), but only when some priority is non-zero and they are
/// not all equal. A container with no priority is updated in the first batch.
fn launch_priorities(pod: &Pod) -> BTreeMap<String, i32> {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    let env = |c: &k8s_openapi::api::core::v1::Container, name: &str| c.env.iter().flatten().find(|e| e.name == name).cloned();
    let barrier = |c: &k8s_openapi::api::core::v1::Container| -> Option<i32> {
        env(c, keys::CONTAINER_BARRIER_ENV)?.value_from?.config_map_key_ref?.key.strip_prefix("p_")?.parse().ok()
    };
    if containers.iter().any(|c| env(c, keys::CONTAINER_BARRIER_ENV).is_some()) {
        return containers.iter().filter_map(|c| Some((c.name.clone(), barrier(c)?))).collect();
    }
    if containers.len() < 2 {
        return BTreeMap::new();
    }
    let ordered = pod.metadata.annotations.as_ref().and_then(|a| a.get(keys::CONTAINER_LAUNCH_PRIORITY)).is_some_and(|v| v == "Ordered");
    if ordered {
        return containers.iter().enumerate().map(|(i, c)| (c.name.clone(), -(i as i32))).collect();
    }
    let declared: Vec<i32> =
        containers.iter().map(|c| env(c, keys::CONTAINER_PRIORITY_ENV).and_then(|e| e.value?.trim().parse().ok()).unwrap_or(0)).collect();
    let prioritised = declared.iter().any(|p| *p != 0) && declared.iter().any(|p| *p != declared[0]);
    if !prioritised {
        return BTreeMap::new();
    }
    containers.iter().zip(declared).map(|(c, p)| (c.name.clone(), p)).collect()
}

/// Launch priority: of the containers to update, those without a priority and those with
/// the highest one go now, the rest wait for a later batch.
fn split_batch(pod: &Pod, images: &BTreeMap<String, String>) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let priorities = launch_priorities(pod);
    let highest = images.keys().filter_map(|n| priorities.get(n)).max();
    images.iter().map(|(n, i)| (n.clone(), i.clone())).partition(|(n, _)| {
        let p = priorities.get(n);
        p.is_none() || p == highest
    })
}

/// Starts the batch of `images` due now: records the batch's current imageIDs and the batch
/// (with the containers whose env reads changed metadata, `refreshed`), leaves the rest for
/// later (to start once this batch is updated and Ready), and returns the images to write now.
fn record_batch(
    state: &mut InPlaceUpdateState,
    pod: &Pod,
    images: &BTreeMap<String, String>,
    refreshed: &BTreeMap<String, RefMetadata>,
    now: Timestamp,
) -> BTreeMap<String, String> {
    let (batch, next) = split_batch(pod, images);
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let last = state.last_container_statuses.get_or_insert_with(BTreeMap::new);
    for name in batch.keys() {
        let image_id = statuses.and_then(|ss| ss.iter().find(|s| &s.name == name)).map(|s| s.image_id.clone()).unwrap_or_default();
        last.insert(name.clone(), InPlaceUpdateContainerStatus { image_id });
    }
    state.pre_check_before_next = (!next.is_empty())
        .then(|| crate::api::shared::InPlaceUpdatePreCheckBeforeNext { containers_required_ready: batch.keys().cloned().collect() });
    state.next_container_images = next;
    state.container_batches_record.push(InPlaceUpdateContainerBatch {
        timestamp: Some(Time(now)),
        containers: batch.keys().chain(refreshed.keys()).cloned().collect::<BTreeSet<_>>().into_iter().collect(),
    });
    batch
}

/// The strategic-merge patch that applies an update spec to a pod: `images` by container name
/// (this batch's), the spec's labels/annotations, and the new state; `extra_labels` are the hash
/// and lifecycle labels to write.
pub(crate) fn apply_patch(
    pod: &Pod,
    spec: &UpdateSpec,
    images: &BTreeMap<String, String>,
    state: &InPlaceUpdateState,
    extra_labels: &BTreeMap<String, String>,
    now_label: Option<&str>,
) -> Value {
    let mut labels = Map::new();
    let mut annotations = Map::new();
    if let Some(meta) = spec.metadata_patch() {
        if let Some(l) = meta["metadata"]["labels"].as_object() {
            labels.extend(l.clone());
        }
        if let Some(a) = meta["metadata"]["annotations"].as_object() {
            annotations.extend(a.clone());
        }
    }
    // Every container's read metadata at once: launch priority batches only images here.
    for meta in spec.container_ref_metadata.values() {
        labels.extend(meta.labels.iter().flatten().map(|(k, v)| (k.clone(), json!(v))));
        annotations.extend(meta.annotations.iter().flatten().map(|(k, v)| (k.clone(), json!(v))));
    }
    for (k, v) in extra_labels {
        labels.insert(k.clone(), json!(v));
    }
    annotations.insert(keys::INPLACE_UPDATE_STATE.into(), json!(serde_json::to_string(state).unwrap_or_default()));
    if pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(keys::INPLACE_UPDATE_STATE_LEGACY)) {
        annotations.insert(keys::INPLACE_UPDATE_STATE_LEGACY.into(), Value::Null);
    }
    if let Some(ts) = now_label {
        annotations.insert(keys::LIFECYCLE_TIMESTAMP.into(), json!(ts));
    }
    let mut patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
    if let Some(meta) = spec.metadata_patch().as_ref().and_then(|m| m["metadata"].as_object()) {
        for (k, v) in meta.iter().filter(|(k, _)| k.ends_with("finalizers")) {
            patch["metadata"][k] = v.clone();
        }
    }
    if !images.is_empty() {
        let containers: Vec<Value> = images.iter().map(|(n, i)| json!({"name": n, "image": i})).collect();
        patch["spec"] = json!({"containers": containers});
    }
    patch
}

/// The pod patch that starts an in-place update: revision labels, lifecycle Updating, the state
/// annotation, and either the new images (no grace period) or the grace annotation holding them.
pub(crate) fn start_patch(pod: &Pod, spec: &UpdateSpec, revision_label: &str, now: Timestamp) -> Value {
    let (state, batch) = start_state(pod, spec, now);
    let labels: BTreeMap<String, String> = [
        (keys::CONTROLLER_REVISION_HASH.to_string(), revision_label.to_string()),
        (keys::POD_TEMPLATE_HASH.to_string(), crate::core::pods::short_hash(&spec.revision).to_string()),
        (keys::LIFECYCLE_STATE.to_string(), crate::api::shared::LifecycleState::Updating.as_str().to_string()),
    ]
    .into();
    let stamp = crate::core::pods::rfc3339_seconds(now);
    if spec.grace_seconds <= 0 {
        return apply_patch(pod, spec, &batch, &state, &labels, Some(&stamp));
    }
    json!({"metadata": {
        "labels": labels,
        "annotations": {
            keys::INPLACE_UPDATE_STATE: serde_json::to_string(&state).unwrap_or_default(),
            keys::INPLACE_UPDATE_GRACE: serde_json::to_string(spec).unwrap_or_default(),
            keys::LIFECYCLE_TIMESTAMP: stamp,
        },
    }})
}

/// The patch of the pod's `resize` subresource that applies the spec's resources: per container,
/// the cpu/memory values that differ from what its spec has now. `None`: nothing to resize.
pub(crate) fn resize_patch(pod: &Pod, spec: &UpdateSpec) -> Option<Value> {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    let mut patched = Vec::new();
    for c in containers {
        let Some(wanted) = spec.container_resources.get(&c.name) else { continue };
        let current = c.resources.clone().unwrap_or_default();
        let changed = |wanted: &Option<BTreeMap<String, Quantity>>, current: &Option<BTreeMap<String, Quantity>>| {
            let mut out = Map::new();
            for (name, q) in wanted.iter().flatten().filter(|(name, _)| resources::RESIZABLE.contains(&name.as_str())) {
                if !current.as_ref().and_then(|m| m.get(name)).is_some_and(|cur| resources::same_quantity(cur, q)) {
                    out.insert(name.clone(), json!(q.0));
                }
            }
            out
        };
        let (limits, requests) = (changed(&wanted.limits, &current.limits), changed(&wanted.requests, &current.requests));
        let mut resources = Map::new();
        if !limits.is_empty() {
            resources.insert("limits".into(), Value::Object(limits));
        }
        if !requests.is_empty() {
            resources.insert("requests".into(), Value::Object(requests));
        }
        if !resources.is_empty() {
            patched.push(json!({"name": c.name, "resources": resources}));
        }
    }
    (!patched.is_empty()).then(|| json!({"spec": {"containers": patched}}))
}

/// What the cluster lets an in-place resize change, as its apiserver answers (never its version
/// number): whether it serves `pods/resize` at all (its discovery lists the subresource only
/// while its own `InPlacePodVerticalScaling` gate is on, off by default before Kubernetes 1.33),
/// and whether it lowers a container's memory limit in place when the container's memory
/// `resizePolicy` is not `RestartContainer` (Kubernetes 1.33 refuses that; a dry-run resize
/// finds out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResizeSupport {
    pub served: bool,
    pub memory_limit_decrease: bool,
}

impl Default for ResizeSupport {
    fn default() -> Self {
        Self { served: true, memory_limit_decrease: true }
    }
}

/// Why this cluster would refuse the resize `spec` makes of `pod`, if it would; the update is then
/// made by a new pod (or held, under InPlaceOnly) instead of being refused write after write.
pub(crate) fn resize_refusal(pod: &Pod, spec: &UpdateSpec, support: ResizeSupport) -> Option<&'static str> {
    if spec.container_resources.is_empty() {
        None
    } else if !support.served {
        Some(
            "the resources change needs the pods/resize subresource, which this cluster's apiserver does not serve (its InPlacePodVerticalScaling feature gate is off)",
        )
    } else if !support.memory_limit_decrease && lowers_memory_limit(pod, spec) {
        Some(
            "this cluster's apiserver refuses to lower a container's memory limit in place unless the container's memory resizePolicy is RestartContainer",
        )
    } else {
        None
    }
}

/// Whether the resize `spec` makes of `pod` lowers (or adds, lowering it from unlimited) the
/// memory limit of a container whose memory `resizePolicy` is not `RestartContainer`: the resize
/// Kubernetes 1.33 refuses.
pub(crate) fn lowers_memory_limit(pod: &Pod, spec: &UpdateSpec) -> bool {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    containers.iter().any(|c| {
        let Some(new) = spec.container_resources.get(&c.name).and_then(|r| r.limits.as_ref()).and_then(|l| l.get("memory")) else {
            return false;
        };
        let old = c.resources.as_ref().and_then(|r| r.limits.as_ref()).and_then(|l| l.get("memory"));
        let lower = match old {
            None => true,
            Some(old) => resources::quantity_nanos(&old.0).zip(resources::quantity_nanos(&new.0)).is_some_and(|(o, n)| n < o),
        };
        let restarts = c.resize_policy.iter().flatten().any(|p| p.resource_name == "memory" && p.restart_policy == "RestartContainer");
        lower && !restarts
    })
}

/// Kruise's `CheckPodNeedsBeUnready` for a pod with the InPlaceUpdateReady gate: an update of
/// resources alone leaves the pod Ready, unless a container's resize policy restarts it for a
/// resource that changes.
pub(crate) fn needs_unready(pod: &Pod, spec: &UpdateSpec) -> bool {
    if spec.container_resources.is_empty() || !spec.container_images.is_empty() {
        return true;
    }
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    containers.iter().any(|c| {
        let Some(r) = spec.container_resources.get(&c.name) else { return false };
        let changes = |name: &str| [&r.limits, &r.requests].into_iter().flatten().any(|m| m.contains_key(name));
        c.resize_policy.iter().flatten().any(|p| p.restart_policy == "RestartContainer" && changes(&p.resource_name))
    })
}

/// When a grace period ends: `None` if it already has.
pub(crate) fn grace_remaining(state: &InPlaceUpdateState, grace_seconds: i32, now: Timestamp) -> Option<Duration> {
    let started = state.update_timestamp.as_ref()?.0;
    let end = started + SignedDuration::from_secs(i64::from(grace_seconds));
    if now >= end {
        return None;
    }
    // Rounded up to whole seconds, as Kruise requeues.
    let rem = end.duration_since(now);
    let secs = rem.as_secs() + i64::from(rem.subsec_nanos() > 0);
    Some(Duration::from_secs(secs.max(1) as u64))
}

/// After the grace period: the state gains the first batch's imageIDs and record; returns it
/// with the images to write now.
pub(crate) fn state_after_grace(
    pod: &Pod,
    state: &InPlaceUpdateState,
    spec: &UpdateSpec,
    now: Timestamp,
) -> (InPlaceUpdateState, BTreeMap<String, String>) {
    let mut s = state.clone();
    let batch = record_batch(&mut s, pod, &spec.container_images, &spec.container_ref_metadata, now);
    (s, batch)
}

/// The next container batch, once the current one has its new images and the containers it
/// names are Ready: the patch writing its images and the updated state. `None` while waiting.
pub(crate) fn next_batch_patch(pod: &Pod, state: &InPlaceUpdateState, now: Timestamp) -> Option<Value> {
    if state.next_container_images.is_empty() || read_grace(pod).is_some() || !containers_updated(pod, state) {
        return None;
    }
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    let required = state.pre_check_before_next.iter().flat_map(|p| &p.containers_required_ready);
    if !required.into_iter().all(|name| statuses.iter().any(|s| &s.name == name && s.ready)) {
        return None;
    }
    let mut next = state.clone();
    let images = std::mem::take(&mut next.next_container_images);
    let batch = record_batch(&mut next, pod, &images, &BTreeMap::new(), now);
    Some(apply_patch(pod, &UpdateSpec::default(), &batch, &next, &BTreeMap::new(), None))
}

/// Whether the containers report the new images (and, after a resize, the new resources;
/// after a change of metadata their env reads, kruise-daemon's hashes of the new values).
/// Not complete while a grace period or a next batch is pending; otherwise each recorded
/// container must show a new imageID, or report the spec image (covering re-tags of the same
/// image).
pub(crate) fn update_completed(pod: &dyn PodRead, state: &InPlaceUpdateState) -> bool {
    read_grace(pod).is_none()
        && state.next_container_images.is_empty()
        && (!state.update_resources || resources::resources_applied(pod.full()))
        && containers_updated(pod, state)
        && (!state.update_env_from_metadata || env_metadata::daemon_caught_up(&pod.whole()))
}

/// Every container recorded in the state shows a new imageID or reports its spec image.
fn containers_updated(pod: &dyn PodRead, state: &InPlaceUpdateState) -> bool {
    for (name, last) in state.last_container_statuses.iter().flatten() {
        let Some(status) = pod.container_status(name) else { return false };
        let spec_image = pod.container_image(name).unwrap_or_default();
        let reports_spec_image =
            if spec_image.contains(':') { status.image == spec_image } else { status.image.strip_suffix(":latest") == Some(spec_image) };
        if status.image_id == last.image_id && !reports_spec_image {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(template: Value) -> Vec<u8> {
        revision::revision_data(&template)
    }

    fn tpl(image: &str, labels: Value, env: Option<&str>) -> Value {
        let mut c = json!({"name": "main", "image": image});
        if let Some(e) = env {
            c["env"] = json!([{"name": "E", "value": e}]);
        }
        json!({"metadata": {"labels": labels}, "spec": {"containers": [c, {"name": "side", "image": "busybox:1"}]}})
    }

    /// The template Kruise v1.9.0 stored for CloneSet `inplace` (tests/golden/kruise-v1.9.0-objects/
    /// cloneset-in-place.yaml), whose manifest was `containers: [{name: main, image: nginx:1.25,
    /// ports: [{containerPort: 80}]}]` with the image later changed to nginx:1.26.
    fn kruise_stored_in_place_template() -> Value {
        json!({"metadata": {"creationTimestamp": null, "labels": {"app": "inplace"}}, "spec": {
            "containers": [{"image": "nginx:1.26", "imagePullPolicy": "Always", "name": "main",
                            "ports": [{"containerPort": 80, "protocol": "TCP"}], "resources": {},
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
            "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler", "securityContext": {},
            "terminationGracePeriodSeconds": 30}})
    }

    fn bare_in_place_manifest(image: &str) -> Value {
        json!({"metadata": {"labels": {"app": "inplace"}}, "spec": {"containers": [{"name": "main", "image": image, "ports": [{"containerPort": 80}]}]}})
    }

    /// After taking over a CloneSet Kruise created (its template defaulted by Kruise's webhook),
    /// re-applying the bare manifest with a new image is an image-only change, whether the new
    /// revision was recorded without defaults (TemplateNoDefaults, or by an older version of this
    /// operator) or with them.
    #[test]
    fn kruise_stored_template_to_the_bare_manifest_with_a_new_image_is_in_place() {
        let old = data(kruise_stored_in_place_template());
        let bare = bare_in_place_manifest("nginx:1.27");
        let want = BTreeMap::from([("main".to_string(), "nginx:1.27".to_string())]);
        for new in [data(bare.clone()), data(defaults::default_pod_template(&bare))] {
            let spec = in_place_spec(Some(&old), &new, "inplace-new", 0, false).expect("in place");
            assert_eq!(spec.container_images, want);
            assert_eq!(spec.meta_data_patch, None);
        }
        // Spelling out a value other than Kruise's default is a real change: recreate.
        let mut not_default = bare;
        not_default["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
        assert_eq!(in_place_spec(Some(&old), &data(not_default), "inplace-new", 0, false), None);
    }

    /// Kruise pulls every regular container `Always` unless told otherwise, tagged or not (not
    /// Kubernetes' `IfNotPresent` for a tagged image): a template that spells out `Always` and
    /// one that leaves it out are the same.
    #[test]
    fn kruise_default_pull_policy_is_always_for_tagged_images_too() {
        let mut always = bare_in_place_manifest("nginx:1.25");
        always["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        let spec = in_place_spec(Some(&data(always)), &data(bare_in_place_manifest("nginx:1.26")), "r", 0, false).expect("in place");
        assert_eq!(spec.container_images, BTreeMap::from([("main".to_string(), "nginx:1.26".to_string())]));
    }

    #[test]
    fn image_changes_are_in_place() {
        let spec = in_place_spec(
            Some(&data(tpl("nginx:1", json!({"a": "1"}), None))),
            &data(tpl("nginx:2", json!({"a": "1"}), None)),
            "cs-new",
            0,
            false,
        )
        .unwrap();
        assert_eq!(spec.container_images, BTreeMap::from([("main".to_string(), "nginx:2".to_string())]));
        assert_eq!(spec.meta_data_patch, None);
        assert_eq!(spec.revision, "cs-new");
    }

    #[test]
    fn label_and_annotation_changes_are_in_place() {
        let spec = in_place_spec(
            Some(&data(tpl("nginx:1", json!({"a": "1", "b": "2"}), None))),
            &data(tpl("nginx:1", json!({"a": "9", "c": "3"}), None)),
            "r",
            0,
            false,
        )
        .unwrap();
        assert!(spec.container_images.is_empty());
        let patch: Value = serde_json::from_slice(&spec.meta_data_patch.unwrap().0).unwrap();
        assert_eq!(patch, json!({"metadata": {"labels": {"a": "9", "b": null, "c": "3"}}}));
    }

    /// Kruise's MetaDataPatch takes any template metadata change, finalizers included, as the
    /// strategic-merge patch Go's CreateTwoWayMergePatch writes.
    #[test]
    fn template_finalizer_changes_are_in_place_through_the_metadata_patch() {
        let with = |finalizers: Value| {
            let mut t = tpl("nginx:1", json!({"a": "1"}), None);
            t["metadata"]["finalizers"] = finalizers;
            data(t)
        };
        let spec = in_place_spec(Some(&with(json!(["x/keep", "x/old"]))), &with(json!(["x/keep", "x/new"])), "r", 0, false).unwrap();
        let patch: Value = serde_json::from_slice(&spec.meta_data_patch.clone().unwrap().0).unwrap();
        let expected = json!({"$deleteFromPrimitiveList/finalizers": ["x/old"], "$setElementOrder/finalizers": ["x/keep", "x/new"], "finalizers": ["x/new"]});
        assert_eq!(patch, json!({"metadata": expected}));
        assert_eq!(
            String::from_utf8(spec.meta_data_patch.clone().unwrap().0).unwrap(),
            json!({"metadata": expected}).to_string(),
            "Go's key order"
        );
        let pod = Pod::default();
        let on_pod = apply_patch(&pod, &spec, &BTreeMap::new(), &InPlaceUpdateState::default(), &BTreeMap::new(), None);
        assert_eq!(on_pod["metadata"]["finalizers"], json!(["x/new"]));
        assert_eq!(on_pod["metadata"]["$deleteFromPrimitiveList/finalizers"], json!(["x/old"]));
        let gone = in_place_spec(Some(&with(json!(["x/old"]))), &with(json!(null)), "r", 0, false).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&gone.meta_data_patch.unwrap().0).unwrap(), json!({"metadata": {"finalizers": null}}));
    }

    #[test]
    fn other_spec_changes_and_missing_revisions_recreate() {
        assert_eq!(
            in_place_spec(Some(&data(tpl("nginx:1", json!({}), None))), &data(tpl("nginx:2", json!({}), Some("x"))), "r", 0, false),
            None,
            "env change"
        );
        let added = json!({"spec": {"containers": [{"name": "main", "image": "nginx:1"}]}});
        assert_eq!(in_place_spec(Some(&data(tpl("nginx:1", json!({}), None))), &data(added), "r", 0, false), None, "container removed");
        assert_eq!(in_place_spec(None, &data(tpl("nginx:2", json!({}), None)), "r", 0, false), None, "old revision gone");
    }

    /// A template whose container `main` runs `image` with `resources`.
    fn sized(image: &str, resources: Value) -> Vec<u8> {
        data(
            json!({"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "main", "image": image, "resources": resources}]}}),
        )
    }

    fn burstable(cpu: &str) -> Value {
        json!({"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "128Mi"}})
    }

    /// InPlaceWorkloadVerticalScaling: a cpu/memory value change is resized in place with the
    /// gate, and recreates without it.
    #[test]
    fn a_resources_only_change_is_in_place_only_under_the_vertical_scaling_gate() {
        let (old, new) = (sized("nginx:1", burstable("100m")), sized("nginx:1", burstable("200m")));
        let spec = in_place_spec(Some(&old), &new, "r2", 0, true).expect("in place");
        assert!(spec.container_images.is_empty());
        assert_eq!(serde_json::to_value(&spec.container_resources).unwrap(), json!({"main": {"requests": {"cpu": "200m"}}}));
        assert_eq!(in_place_spec(Some(&old), &new, "r2", 0, false), None, "gate off: recreate");
        assert_eq!(
            serde_json::to_string(&spec).unwrap(),
            r#"{"revision":"r2","containerResources":{"main":{"requests":{"cpu":"200m"}}}}"#,
            "Kruise's UpdateSpec JSON"
        );
    }

    #[test]
    fn a_resources_change_that_changes_the_qos_class_recreates() {
        let guaranteed = json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}});
        let burst = json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(in_place_spec(Some(&sized("nginx:1", guaranteed.clone())), &sized("nginx:1", burst), "r", 0, true), None);
        let bigger = json!({"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}});
        assert!(in_place_spec(Some(&sized("nginx:1", guaranteed)), &sized("nginx:1", bigger), "r", 0, true).is_some(), "still Guaranteed");
        // A resource added is no resize either (Kruise's json patch "add").
        let added = json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi", "cpu": "1"}});
        assert_eq!(in_place_spec(Some(&sized("nginx:1", burstable("100m"))), &sized("nginx:1", added), "r", 0, true), None);
    }

    #[test]
    fn an_image_and_resources_change_updates_both_in_place_and_restarts() {
        let spec = in_place_spec(Some(&sized("nginx:1", burstable("100m"))), &sized("nginx:2", burstable("1")), "r2", 0, true).unwrap();
        assert_eq!(spec.container_images, BTreeMap::from([("main".to_string(), "nginx:2".to_string())]));
        assert_eq!(serde_json::to_value(&spec.container_resources).unwrap(), json!({"main": {"requests": {"cpu": "1"}}}));
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "main", "image": "nginx:1", "resources": burstable("100m")}]}}))
        .unwrap();
        assert!(needs_unready(&pod, &spec), "an image change restarts the container");
        let (state, _) = start_state(&pod, &spec, "2026-01-01T00:00:00Z".parse().unwrap());
        assert!(state.update_images && state.update_resources);
        assert_eq!(in_place_spec(Some(&sized("nginx:1", burstable("100m"))), &sized("nginx:2", burstable("1")), "r2", 0, false), None);
    }

    #[test]
    fn the_resize_patch_names_only_the_values_that_change() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "main", "image": "nginx:1", "resources": burstable("100m"),
             "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]},
            {"name": "side", "image": "busybox:1"}]}}))
        .unwrap();
        let spec = UpdateSpec {
            container_resources: [(
                "main".to_string(),
                serde_json::from_value(json!({"requests": {"cpu": "0.2", "memory": "64Mi"}})).unwrap(),
            )]
            .into(),
            ..Default::default()
        };
        assert_eq!(
            resize_patch(&pod, &spec),
            Some(json!({"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "0.2"}}}]}}))
        );
        let cpu = UpdateSpec {
            container_resources: [("main".to_string(), serde_json::from_value(json!({"requests": {"cpu": "0.2"}})).unwrap())].into(),
            ..Default::default()
        };
        assert!(!needs_unready(&pod, &cpu), "cpu resizes without a restart: the pod stays Ready");
        let memory = UpdateSpec {
            container_resources: [("main".to_string(), serde_json::from_value(json!({"limits": {"memory": "1Gi"}})).unwrap())].into(),
            ..Default::default()
        };
        assert!(needs_unready(&pod, &memory), "the memory resize policy restarts the container");
        let done = UpdateSpec {
            container_resources: [(
                "main".to_string(),
                serde_json::from_value(json!({"requests": {"cpu": "0.1", "memory": "64Mi"}})).unwrap(),
            )]
            .into(),
            ..Default::default()
        };
        assert_eq!(resize_patch(&pod, &done), None, "0.1 is 100m: nothing to resize");
    }

    /// A resize the cluster would refuse is named before it is written: any resize where
    /// `pods/resize` is not served, a lowered memory limit where the cluster forbids it (unless
    /// the container restarts for memory).
    #[test]
    fn a_resize_the_cluster_would_refuse_is_named() {
        let pod = |policy: Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "main", "image": "nginx:1", "resizePolicy": policy,
                 "resources": {"limits": {"cpu": "1", "memory": "128Mi"}}}]}}))
            .unwrap()
        };
        let resize = |limits: Value| UpdateSpec {
            container_resources: [("main".to_string(), serde_json::from_value(json!({ "limits": limits })).unwrap())].into(),
            ..Default::default()
        };
        let keeps = pod(json!([{"resourceName": "memory", "restartPolicy": "NotRequired"}]));
        let restarts = pod(json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]));
        let (lower, raise, cpu) = (resize(json!({"memory": "64Mi"})), resize(json!({"memory": "0.25Gi"})), resize(json!({"cpu": "500m"})));
        let everything = ResizeSupport::default();
        let not_served = ResizeSupport { served: false, ..everything };
        let no_decrease = ResizeSupport { memory_limit_decrease: false, ..everything };

        for spec in [&lower, &raise, &cpu] {
            assert_eq!(resize_refusal(&keeps, spec, everything), None);
            assert!(resize_refusal(&keeps, spec, not_served).is_some_and(|why| why.contains("pods/resize")));
        }
        assert_eq!(resize_refusal(&keeps, &UpdateSpec::default(), not_served), None, "no resize, nothing to refuse");
        assert!(resize_refusal(&keeps, &lower, no_decrease).is_some_and(|why| why.contains("memory limit")));
        assert!(lowers_memory_limit(&pod(Value::Null), &lower), "no policy is NotRequired");
        let unlimited: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}}))
                .unwrap();
        assert!(lowers_memory_limit(&unlimited, &raise), "a new limit lowers it from unlimited");
        for (p, spec) in [(&restarts, &lower), (&keeps, &raise), (&keeps, &cpu)] {
            assert_eq!(resize_refusal(p, spec, no_decrease), None);
        }
    }

    /// Kruise's resize completion: every container reports the resources its spec asks for.
    #[test]
    fn a_resize_is_complete_once_the_status_reports_the_new_resources() {
        let pod = |reported: Option<Value>| -> Pod {
            let mut status = json!({"name": "main", "image": "nginx:1", "imageID": "id-1", "ready": true, "restartCount": 0});
            if let Some(r) = reported {
                status["resources"] = r;
            }
            serde_json::from_value(json!({"metadata": {"name": "p"},
                "spec": {"containers": [{"name": "main", "image": "nginx:1", "resources": burstable("200m")}]},
                "status": {"containerStatuses": [status]}}))
            .unwrap()
        };
        let state = InPlaceUpdateState { revision: "r2".into(), update_resources: true, ..Default::default() };
        assert!(!update_completed(&pod(None), &state), "nothing reported yet");
        assert!(!update_completed(&pod(Some(burstable("100m"))), &state), "still the old cpu");
        assert!(update_completed(&pod(Some(burstable("0.2"))), &state), "the new cpu, spelled otherwise");
        assert!(update_completed(&pod(None), &InPlaceUpdateState { update_resources: false, ..state }), "no resize asked");
    }

    #[test]
    fn grace_spec_serializes_like_kruise() {
        let spec = UpdateSpec {
            revision: "rev_new".into(),
            container_images: [("c1".into(), "foo2".into())].into(),
            container_resources: BTreeMap::new(),
            meta_data_patch: None,
            grace_seconds: 3630,
            ..Default::default()
        };
        assert_eq!(serde_json::to_string(&spec).unwrap(), r#"{"revision":"rev_new","containerImages":{"c1":"foo2"},"graceSeconds":3630}"#);
        // Kruise's UpdateSpec for an env refreshed through kruise-daemon (its field order; Go's
        // ObjectMeta writes a null creationTimestamp).
        let refreshed = UpdateSpec {
            revision: "rev_new".into(),
            container_ref_metadata: [(
                "c1".into(),
                RefMetadata { labels: Some([("ver".into(), "2".into())].into()), ..Default::default() },
            )]
            .into(),
            update_env_from_metadata: true,
            grace_seconds: 5,
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&refreshed).unwrap(),
            r#"{"revision":"rev_new","containerRefMetadata":{"c1":{"creationTimestamp":null,"labels":{"ver":"2"}}},"updateEnvFromMetadata":true,"graceSeconds":5}"#
        );
        assert_eq!(serde_json::from_str::<UpdateSpec>(&serde_json::to_string(&refreshed).unwrap()).unwrap(), refreshed);
    }

    fn running_pod(image: &str, image_id: &str, status_image: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": {}},
            "spec": {"containers": [{"name": "main", "image": image}]},
            "status": {"containerStatuses": [{"name": "main", "image": status_image, "imageID": image_id, "ready": true, "restartCount": 0}]},
        }))
        .unwrap()
    }

    /// Containers `a` (priority 10), `b` (priority 1) and `c` (priority 10) with spec image
    /// `<name>:<spec[i]>`, running `<name>:<running[i]>` (imageID `<name>-<running[i]>`); `ready`
    /// tells whether a and c report Ready.
    fn prioritised_pod(spec: [u8; 3], running: [u8; 3], ready: bool) -> Pod {
        let env = |p: Option<&str>| p.map_or(json!([]), |p| json!([{"name": keys::CONTAINER_PRIORITY_ENV, "value": p}]));
        let names = ["a", "b", "c"];
        let priorities = [Some("10"), Some("1"), Some("10")];
        let containers: Vec<Value> =
            (0..3).map(|i| json!({"name": names[i], "image": format!("{}:{}", names[i], spec[i]), "env": env(priorities[i])})).collect();
        let statuses: Vec<Value> = (0..3)
            .map(|i| {
                json!({"name": names[i], "image": format!("{}:{}", names[i], running[i]), "imageID": format!("{}-{}", names[i], running[i]),
                       "ready": ready || names[i] == "b", "restartCount": 0})
            })
            .collect();
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": containers}, "status": {"containerStatuses": statuses}}),
        )
        .unwrap()
    }

    /// The highest priority goes first; the rest only once those have their new images and
    /// are Ready, as a second batch on record.
    /// Kruise's pod webhook gives a container without `KRUISE_CONTAINER_PRIORITY` priority 0 (so
    /// it goes after a positive one), none at all when every priority is equal, and reads the
    /// barrier env it injected on pods it saw; `Ordered` means 0, -1, -2… by position.
    #[test]
    fn launch_priorities_are_what_kruise_s_pod_webhook_injects() {
        let pod = |containers: Value, annotations: Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p", "annotations": annotations}, "spec": {"containers": containers}}))
                .unwrap()
        };
        let with = |name: &str, p: Option<&str>| match p {
            Some(p) => json!({"name": name, "env": [{"name": keys::CONTAINER_PRIORITY_ENV, "value": p}]}),
            None => json!({"name": name}),
        };
        let redis_first = pod(json!([with("nginx", None), with("redis", Some("10"))]), json!({}));
        assert_eq!(launch_priorities(&redis_first), BTreeMap::from([("nginx".into(), 0), ("redis".into(), 10)]));
        let images: BTreeMap<String, String> = [("nginx".to_string(), "n:2".to_string()), ("redis".to_string(), "r:2".to_string())].into();
        let (now, later) = split_batch(&redis_first, &images);
        assert_eq!(
            (now.keys().map(String::as_str).collect::<Vec<_>>(), later.keys().map(String::as_str).collect::<Vec<_>>()),
            (vec!["redis"], vec!["nginx"])
        );

        assert!(launch_priorities(&pod(json!([with("a", Some("5")), with("b", Some("5"))]), json!({}))).is_empty(), "all equal: none");
        assert!(launch_priorities(&pod(json!([with("a", None), with("b", None)]), json!({}))).is_empty());
        let ordered = pod(json!([with("a", None), with("b", None), with("c", None)]), json!({keys::CONTAINER_LAUNCH_PRIORITY: "Ordered"}));
        assert_eq!(launch_priorities(&ordered), BTreeMap::from([("a".into(), 0), ("b".into(), -1), ("c".into(), -2)]));
        let barrier =
            |key: &str| json!({"name": keys::CONTAINER_BARRIER_ENV, "valueFrom": {"configMapKeyRef": {"name": "p-barrier", "key": key}}});
        let kruise_made =
            pod(json!([{"name": "a", "env": [barrier("p_-1")]}, {"name": "b", "env": [barrier("p_3")]}, {"name": "c"}]), json!({}));
        assert_eq!(launch_priorities(&kruise_made), BTreeMap::from([("a".into(), -1), ("b".into(), 3)]), "c has none: it goes first");
    }

    #[test]
    fn launch_priority_updates_containers_in_batches() {
        let images: BTreeMap<String, String> = ["a", "b", "c"].map(|n| (n.to_string(), format!("{n}:2"))).into();
        let spec = UpdateSpec { revision: "r2".into(), container_images: images, ..Default::default() };
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let (state, batch) = start_state(&prioritised_pod([1, 1, 1], [1, 1, 1], true), &spec, t0);
        assert_eq!(batch.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(state.next_container_images, BTreeMap::from([("b".to_string(), "b:2".to_string())]));
        assert_eq!(state.pre_check_before_next.as_ref().unwrap().containers_required_ready, ["a", "c"]);

        // Not yet: a and c still run their old images; then they run the new ones but are not Ready.
        let patched = prioritised_pod([2, 1, 2], [1, 1, 1], true);
        assert!(!update_completed(&patched, &state));
        assert_eq!(next_batch_patch(&patched, &state, t0), None);
        assert_eq!(next_batch_patch(&prioritised_pod([2, 1, 2], [2, 1, 2], false), &state, t0), None);

        let t1: Timestamp = "2026-01-01T00:00:07Z".parse().unwrap();
        let pod = prioritised_pod([2, 1, 2], [2, 1, 2], true);
        assert!(!update_completed(&pod, &state), "b is still to come");
        let patch = next_batch_patch(&pod, &state, t1).expect("the second batch starts");
        assert_eq!(patch["spec"], json!({"containers": [{"name": "b", "image": "b:2"}]}));
        let next: InPlaceUpdateState =
            serde_json::from_str(patch["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE].as_str().unwrap()).unwrap();
        assert!(next.next_container_images.is_empty() && next.pre_check_before_next.is_none());
        let recorded: Vec<(String, String)> =
            next.last_container_statuses.clone().unwrap().into_iter().map(|(n, s)| (n, s.image_id)).collect();
        assert_eq!(recorded, [("a", "a-1"), ("b", "b-1"), ("c", "c-1")].map(|(a, b)| (a.to_string(), b.to_string())));
        let batches: Vec<Vec<String>> = next.container_batches_record.iter().map(|b| b.containers.clone()).collect();
        assert_eq!(batches, [vec!["a".to_string(), "c".to_string()], vec!["b".to_string()]]);
        assert_eq!(next.container_batches_record[1].timestamp, Some(Time(t1)));
        assert!(!update_completed(&prioritised_pod([2, 2, 2], [2, 1, 2], true), &next), "b has not restarted yet");
        assert!(update_completed(&prioritised_pod([2, 2, 2], [2, 2, 2], true), &next));
    }

    #[test]
    fn state_records_image_ids_and_the_batch() {
        let pod = running_pod("nginx:1", "id-1", "nginx:1");
        let spec = UpdateSpec { revision: "r2".into(), container_images: [("main".into(), "nginx:2".into())].into(), ..Default::default() };
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let (state, batch) = start_state(&pod, &spec, now);
        assert_eq!(batch, spec.container_images);
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(
            json,
            r#"{"revision":"r2","updateTimestamp":"2026-01-01T00:00:00Z","lastContainerStatuses":{"main":{"imageID":"id-1"}},"updateImages":true,"containerBatchesRecord":[{"timestamp":"2026-01-01T00:00:00Z","containers":["main"]}]}"#
        );
        let (with_grace, batch) = start_state(&pod, &UpdateSpec { grace_seconds: 5, ..spec }, now);
        assert!(batch.is_empty(), "nothing changes during the grace period");
        assert_eq!(
            serde_json::to_string(&with_grace).unwrap(),
            r#"{"revision":"r2","updateTimestamp":"2026-01-01T00:00:00Z","lastContainerStatuses":null,"updateImages":true}"#
        );
    }

    #[test]
    fn completion_is_a_new_image_id_or_the_spec_image_reported() {
        let state = InPlaceUpdateState {
            revision: "r2".into(),
            last_container_statuses: Some([("main".to_string(), InPlaceUpdateContainerStatus { image_id: "id-1".into() })].into()),
            ..Default::default()
        };
        assert!(!update_completed(&running_pod("nginx:2", "id-1", "nginx:1"), &state), "still the old container");
        assert!(update_completed(&running_pod("nginx:2", "id-2", "nginx:2"), &state), "new imageID");
        assert!(update_completed(&running_pod("nginx:2", "id-1", "nginx:2"), &state), "same imageID, re-tagged image");
        assert!(update_completed(&running_pod("nginx", "id-1", "nginx:latest"), &state), "untagged spec image means :latest");
        let mut missing = running_pod("nginx:2", "id-2", "nginx:2");
        missing.status.as_mut().unwrap().container_statuses = Some(vec![]);
        assert!(!update_completed(&missing, &state), "a recorded container missing from status");
    }

    #[test]
    fn grace_remainder_rounds_up() {
        let state = InPlaceUpdateState { update_timestamp: Some(Time("2026-01-01T00:00:00Z".parse().unwrap())), ..Default::default() };
        let now: Timestamp = "2026-01-01T00:00:02.300Z".parse().unwrap();
        assert_eq!(grace_remaining(&state, 5, now), Some(Duration::from_secs(3)));
        assert_eq!(grace_remaining(&state, 2, now), None);
    }
}
