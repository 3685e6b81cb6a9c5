//! CloneSets as the cache holds them: decoded, or — when the stored JSON does not fit our types
//! (e.g. `spec.replicas: "three"`, stored while a schemaless CRD was installed) — their metadata
//! and the decode error. Decoding one CloneSet never fails the list or watch of all of them, so
//! one bad object cannot stop every other CloneSet from being reconciled.
//!
//! An undecodable CloneSet is skipped: the worker logs it (namespace/name and the short error,
//! never the object), records a Warning event and sets the [`FAILED_DECODE`] condition. Kruise
//! has no such condition (its typed informer fails the same way ours did); the type follows its
//! `FailedScale`/`FailedUpdate` naming.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::Context;
use super::reconcile::ReconcileError;
use crate::api::CloneSet;

/// The condition an undecodable CloneSet carries until it decodes again (also the event reason).
pub(crate) const FAILED_DECODE: &str = "FailedDecode";
/// The condition's reason.
pub(crate) const DECODE_ERROR_REASON: &str = "DecodeError";
/// Longest decode error kept: the error quotes the offending value, which may be large.
const MAX_ERROR_LEN: usize = 300;

/// One cached CloneSet (see the module docs).
#[derive(Clone, Debug)]
pub enum CachedCloneSet {
    Decoded(Arc<CompactCloneSet>),
    Undecodable(Box<Undecodable>),
}

/// A decoded CloneSet as the cache holds it: its pod template as JSON text, not as k8s-openapi's
/// types. A reconcile reads the template only through its revision data, computed once per
/// generation (`revisions::TemplateRevisionCache`), and its topology spread constraints (the
/// scale-down order). Decoded into k8s-openapi's types (whose `Container` is large before any of
/// its strings), a template costs many times its text; more with probes, env and volumes.
#[derive(Clone, Debug)]
pub struct CompactCloneSet {
    /// The CloneSet, with `spec.template.spec` cut to its topology spread constraints (none when
    /// it has none); the template's metadata is whole.
    pub cloneset: CloneSet,
    /// `spec.template`, whole, as JSON (as the decoded template encodes).
    pub template: Box<str>,
    /// The paths of the template's fields that revisions and pods do not carry
    /// (`gojson::dropped_fields`), read from the object as stored: the decode into k8s-openapi's
    /// types has already lost the unknown ones.
    pub dropped_fields: Box<[String]>,
}

impl CompactCloneSet {
    pub(crate) fn new(mut cloneset: CloneSet) -> Self {
        let template = serde_json::to_string(&cloneset.spec.template).expect("a decoded template encodes as JSON");
        let spread = cloneset.spec.template.spec.take().and_then(|s| s.topology_spread_constraints);
        cloneset.spec.template.spec = spread.map(|t| PodSpec { topology_spread_constraints: Some(t), ..Default::default() });
        Self { cloneset, template: template.into(), dropped_fields: Box::default() }
    }
}

/// What is kept of a CloneSet that does not decode.
#[derive(Clone, Debug)]
pub struct Undecodable {
    pub metadata: ObjectMeta,
    /// Where and why decoding failed, e.g. `spec.replicas: invalid type: string "three", expected i32`.
    pub error: String,
    /// `status.conditions` as stored: a merge patch replaces the list, so ours is added to these.
    pub conditions: Vec<Value>,
}

impl CachedCloneSet {
    /// Decodes `value`; never fails.
    pub(crate) fn from_value(value: Value) -> Self {
        match serde_path_to_error::deserialize::<_, CloneSet>(&value) {
            Ok(cs) => {
                let template = value.pointer("/spec/template").unwrap_or(&Value::Null);
                let dropped_fields = crate::core::gojson::dropped_fields(template, "spec.template").into();
                Self::Decoded(Arc::new(CompactCloneSet { dropped_fields, ..CompactCloneSet::new(cs) }))
            }
            Err(e) => {
                let conditions = value.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
                Self::Undecodable(Box::new(Undecodable { metadata: metadata_of(&value), error: short_error(&e), conditions }))
            }
        }
    }
}

/// The object's metadata; if even that does not decode, its identifying strings.
fn metadata_of(value: &Value) -> ObjectMeta {
    let meta = &value["metadata"];
    ObjectMeta::deserialize(meta).unwrap_or_else(|_| {
        let text = |k: &str| meta[k].as_str().map(str::to_string);
        ObjectMeta {
            name: text("name"),
            namespace: text("namespace"),
            uid: text("uid"),
            resource_version: text("resourceVersion"),
            ..Default::default()
        }
    })
}

fn short_error(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let mut text = e.to_string();
    if text.len() > MAX_ERROR_LEN {
        let mut end = MAX_ERROR_LEN;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

impl<'de> Deserialize<'de> for CachedCloneSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Fails only on malformed JSON, which the apiserver does not send.
        Value::deserialize(d).map(Self::from_value)
    }
}

impl Resource for CachedCloneSet {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        CloneSet::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        CloneSet::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        CloneSet::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        CloneSet::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        CloneSet::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Decoded(cs) => &cs.cloneset.metadata,
            Self::Undecodable(u) => &u.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            // Unshared while the cache prepares it (the only caller), so this does not copy.
            Self::Decoded(cs) => &mut Arc::make_mut(cs).cloneset.metadata,
            Self::Undecodable(u) => &mut u.metadata,
        }
    }
}

/// Runs before every reconcile of `key`. Handles an undecodable CloneSet (`Some`: the reconcile
/// is skipped), and clears [`FAILED_DECODE`] from one that decodes again (`Some` too: the write's
/// watch event queues it again, and the reconcile must not copy the stale condition back).
pub(crate) async fn before_reconcile(ctx: &Context, key: &str) -> Option<Result<Option<Duration>, ReconcileError>> {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    match super::cached(&ctx.stores.clonesets, ns, name)?.as_ref() {
        CachedCloneSet::Undecodable(u) => Some(report(ctx, u).await),
        CachedCloneSet::Decoded(cs) => {
            let cs = &cs.cloneset;
            let conditions = &cs.status.as_ref()?.conditions;
            if !conditions.iter().any(|c| c.type_ == FAILED_DECODE) {
                return None;
            }
            tracing::info!(cloneset = %key, "CloneSet decodes again; clearing its {FAILED_DECODE} condition");
            let kept: Vec<_> = conditions.iter().filter(|c| c.type_ != FAILED_DECODE).collect();
            Some(patch_conditions(ctx, &cs.metadata, json!(kept)).await.map(|()| None))
        }
    }
}

/// Logs, records a Warning event and sets the [`FAILED_DECODE`] condition (unless it already
/// says the same).
async fn report(ctx: &Context, u: &Undecodable) -> Result<Option<Duration>, ReconcileError> {
    let key = format!("{}/{}", u.metadata.namespace.as_deref().unwrap_or_default(), u.metadata.name.as_deref().unwrap_or_default());
    tracing::warn!(cloneset = %key, error = %u.error, "cannot decode CloneSet; skipping it until it is fixed");
    // The event needs only the object's reference, which the metadata gives.
    let reference = CloneSet { metadata: u.metadata.clone(), spec: Default::default(), status: None };
    let note = format!("cannot decode the CloneSet, so it is not reconciled: {}", u.error);
    ctx.events.record(&reference, EventType::Warning, FAILED_DECODE, note).await;

    let message = format!("cannot decode: {}", u.error);
    let ours = |c: &&Value| c["type"] == FAILED_DECODE;
    if u.conditions.iter().find(ours).is_some_and(|c| c["status"] == "True" && c["message"] == message.as_str()) {
        return Ok(None);
    }
    let now = crate::core::pods::rfc3339_seconds(Timestamp::now());
    let mut conditions: Vec<Value> = u.conditions.iter().filter(|c| !ours(c)).cloned().collect();
    conditions.push(json!({
        "type": FAILED_DECODE, "status": "True", "reason": DECODE_ERROR_REASON, "message": message,
        "lastUpdateTime": now, "lastTransitionTime": now,
    }));
    match patch_conditions(ctx, &u.metadata, Value::Array(conditions)).await {
        // The apiserver may refuse any write to the object while it fails our schema.
        Err(ReconcileError::Kube(kube::Error::Api(e))) if e.code == 422 => {
            tracing::info!(cloneset = %key, reason = %e.message, "could not set the {FAILED_DECODE} condition");
            Ok(None)
        }
        other => other.map(|()| None),
    }
}

/// Replaces `status.conditions`, only if the object is still at the cached resourceVersion
/// (a merge patch replaces the whole list, so it must not race another writer).
async fn patch_conditions(ctx: &Context, meta: &ObjectMeta, conditions: Value) -> Result<(), ReconcileError> {
    let api: Api<CachedCloneSet> = Api::namespaced(ctx.client.clone(), meta.namespace.as_deref().unwrap_or_default());
    let patch = json!({"metadata": {"resourceVersion": meta.resource_version}, "status": {"conditions": conditions}});
    api.patch_status(meta.name.as_deref().unwrap_or_default(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cloneset(replicas: Value) -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}},
            "status": {"conditions": [{"type": "Progressing", "status": "True"}]},
        })
    }

    #[test]
    fn a_list_with_an_undecodable_cloneset_still_decodes_every_item() {
        let list = json!({"kind": "CloneSetList", "metadata": {}, "items": [cloneset(json!("three")), cloneset(json!(3))]});
        let list: kube::core::ObjectList<CachedCloneSet> = serde_json::from_value(list).expect("the list decodes");
        let [bad, good] = &list.items[..] else { panic!("two items") };
        let CachedCloneSet::Undecodable(bad) = bad else { panic!("replicas \"three\" does not decode") };
        assert_eq!(bad.metadata.name.as_deref(), Some("web"));
        assert_eq!(bad.metadata.resource_version.as_deref(), Some("7"));
        assert!(bad.error.starts_with("spec.replicas: invalid type: string \"three\""), "{}", bad.error);
        assert_eq!(bad.conditions, [json!({"type": "Progressing", "status": "True"})]);
        let CachedCloneSet::Decoded(good) = good else { panic!("replicas 3 decodes") };
        assert_eq!(good.cloneset.spec.replicas, Some(3));
    }

    /// The decode into k8s-openapi's types loses a field they lack; the cache names it first.
    #[test]
    fn fields_the_template_drops_are_named_from_the_stored_object() {
        let mut v = cloneset(json!(3));
        v["spec"]["template"]["spec"]["hostnameOverride"] = json!("web");
        v["spec"]["template"]["spec"]["containers"][0]["restartPolicyRules"] = json!([{"action": "Restart"}]);
        let CachedCloneSet::Decoded(cs) = CachedCloneSet::from_value(v) else { panic!("decodes") };
        assert_eq!(
            &*cs.dropped_fields,
            ["spec.template.spec.containers[0].restartPolicyRules".to_string(), "spec.template.spec.hostnameOverride".to_string()]
        );
        assert!(!cs.template.contains("hostnameOverride"), "k8s-openapi's types do not have it: {}", cs.template);
        let CachedCloneSet::Decoded(plain) = CachedCloneSet::from_value(cloneset(json!(3))) else { panic!("decodes") };
        assert!(plain.dropped_fields.is_empty());
    }

    #[test]
    fn a_huge_offending_value_is_not_copied_into_the_error() {
        let huge = "x".repeat(10_000);
        let CachedCloneSet::Undecodable(bad) = CachedCloneSet::from_value(cloneset(json!(huge))) else { panic!() };
        assert!(bad.error.chars().count() <= MAX_ERROR_LEN + 1, "{}", bad.error.len());
    }

    #[test]
    fn the_cache_can_strip_managed_fields_of_either_kind() {
        use kube::ResourceExt as _;
        for replicas in [json!(1), json!("one")] {
            let mut v = cloneset(replicas);
            v["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
            let mut cached = CachedCloneSet::from_value(v);
            cached.managed_fields_mut().clear();
            assert!(cached.managed_fields().is_empty());
        }
    }
}
