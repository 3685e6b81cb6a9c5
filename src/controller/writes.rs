//! Every write the controller makes. Each records its expectation before the call (so the watch
//! event cannot be missed) and withdraws it when the call fails; events use Kruise's reasons
//! and messages.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
pub use kube::runtime::events::EventType;
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

use super::Context;
use crate::api::{CloneSet, CloneSetStatus};
use crate::core::expectations::ObjectKind;
use crate::core::pod_read::PodRead;
use crate::pod_cache::wire::WirePod;

/// Why a write failed, in terms of what the caller must do.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The asked-for change cannot be made (e.g. InPlaceOnly without an in-place path).
    #[error("{0}")]
    Refused(String),
    #[error("encoding: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The error as Kruise shows it in events and conditions: the apiserver's own message (Go's
/// `StatusError.Error()`), not a debug dump of the response.
pub(crate) fn plain_message(e: &WriteError) -> String {
    match e {
        WriteError::Api(err) => plain_kube_message(err),
        other => other.to_string(),
    }
}

pub(crate) fn plain_kube_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

pub(crate) fn cs_key(cs: &CloneSet) -> String {
    format!("{}/{}", cs.namespace().unwrap_or_default(), cs.name_any())
}

/// Pod writes' responses are decoded as the pod watch decodes events: a pod three managers have
/// written is mostly managedFields, and only its UID and resource version are read here. With
/// pods in protobuf (the default) the apiserver answers in protobuf and managedFields are never
/// written as JSON at all (`crate::pod_cache::protobuf`).
fn pods(ctx: &Context, ns: &str) -> Api<WirePod> {
    Api::namespaced(ctx.client.clone(), ns)
}

fn pvcs(ctx: &Context, ns: &str) -> Api<PersistentVolumeClaim> {
    Api::namespaced(ctx.client.clone(), ns)
}

/// Creates a pod and the PVCs it needs that do not exist yet. Any failure, a name taken
/// included, fails the pod as in Kruise (`createOnePod`): a PVC or pod of that name that is not
/// in our cache is not ours to use (a 409 on the pod can only be a pod our cache holds as
/// inactive, e.g. an Evicted one still holding its reused instance id); the FailedCreate event and
/// the FailedScale condition say so, and the pass is retried with backoff.
pub(crate) async fn create_pod(ctx: &Context, cs: &CloneSet, pod: &Pod, new_pvcs: &[PersistentVolumeClaim]) -> Result<(), WriteError> {
    let key = cs_key(cs);
    let ns = cs.namespace().unwrap_or_default();
    let name = pod.name_any();
    for pvc in new_pvcs {
        let pvc_name = pvc.name_any();
        ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).expect_creation(&key, ObjectKind::Pvc, &pvc_name);
        if let Err(e) = pvcs(ctx, &ns).create(&PostParams::default(), pvc).await {
            ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).withdraw(&key, ObjectKind::Pvc, &pvc_name);
            let msg = format!("failed to create pvc: {}, pvc: {pvc_name}", plain_kube_message(&e));
            ctx.events.record(cs, EventType::Warning, "FailedCreate", msg).await;
            return Err(e.into());
        }
    }
    ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).expect_creation(&key, ObjectKind::Pod, &name);
    match create_pod_object(ctx, &ns, pod).await {
        Ok(_) => {
            ctx.events.record(cs, EventType::Normal, "SuccessfulCreate", format!("succeed to create pod {name}")).await;
            Ok(())
        }
        Err(e) => {
            ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).withdraw(&key, ObjectKind::Pod, &name);
            ctx.events
                .record(cs, EventType::Warning, "FailedCreate", format!("failed to create pod: {}, pod: {name}", plain_kube_message(&e)))
                .await;
            Err(e.into())
        }
    }
}

/// `Api::create` with the response decoded as a [`WirePod`] (`Api<WirePod>` cannot send a `Pod`).
async fn create_pod_object(ctx: &Context, ns: &str, pod: &Pod) -> Result<WirePod, kube::Error> {
    let body = serde_json::to_vec(pod).map_err(kube::Error::SerdeError)?;
    let req =
        kube::core::Request::new(pods(ctx, ns).resource_url()).create(&PostParams::default(), body).map_err(kube::Error::BuildRequest)?;
    ctx.client.request(req).await
}

/// Deletes a pod (only the exact pod we saw, by UID) and then the PVCs of its instance.
pub(crate) async fn delete_pod(ctx: &Context, cs: &CloneSet, pod: &dyn PodRead, instance_pvcs: &[String]) -> Result<(), WriteError> {
    let key = cs_key(cs);
    let ns = cs.namespace().unwrap_or_default();
    let name = pod.name().to_string();
    let uid = uid_of(pod);
    ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).expect_deletion(&key, ObjectKind::Pod, &name);
    let dp = DeleteParams { preconditions: Some(Preconditions { uid: uid.clone(), resource_version: None }), ..Default::default() };
    match pods(ctx, &ns).delete(&name, &dp).await {
        Ok(_) => ctx.events.record(cs, EventType::Normal, "SuccessfulDelete", format!("succeed to delete pod {name}")).await,
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => {
            ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).withdraw(&key, ObjectKind::Pod, &name);
            ctx.events
                .record(cs, EventType::Warning, "FailedDelete", format!("failed to delete pod {name}: {}", plain_kube_message(&e)))
                .await;
            return Err(e.into());
        }
    }
    if let Some(uid) = &uid {
        ctx.rv_expectations.lock().unwrap_or_else(|e| e.into_inner()).forget(uid);
    }
    for pvc in instance_pvcs {
        delete_pvc(ctx, cs, pvc, PvcDeletion::WithPod).await?;
    }
    Ok(())
}

/// Why a PVC is deleted: the message of Kruise's FailedDelete event differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PvcDeletion {
    /// With its pod, on scale-down (`deletePods`).
    WithPod,
    /// A PVC with no pod at all, with DisablePVCReuse (`deleteOnePVC`).
    CleanUp,
}

pub(crate) async fn delete_pvc(ctx: &Context, cs: &CloneSet, name: &str, why: PvcDeletion) -> Result<(), WriteError> {
    let key = cs_key(cs);
    ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).expect_deletion(&key, ObjectKind::Pvc, name);
    match pvcs(ctx, &cs.namespace().unwrap_or_default()).delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => {
            ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).withdraw(&key, ObjectKind::Pvc, name);
            let msg = match why {
                PvcDeletion::WithPod => format!("failed to delete pvc {name}: {}", plain_kube_message(&e)),
                PvcDeletion::CleanUp => format!("failed to clean up PVC {name}: {}", plain_kube_message(&e)),
            };
            ctx.events.record(cs, EventType::Warning, "FailedDelete", msg).await;
            Err(e.into())
        }
    }
}

/// Sets a PVC's owner references (handing it to a dead pod so garbage collection takes it).
pub(crate) async fn set_pvc_owners(
    ctx: &Context,
    cs: &CloneSet,
    pvc: &PersistentVolumeClaim,
    owners: &[OwnerReference],
) -> Result<(), WriteError> {
    let name = pvc.name_any();
    let patch = json!({"metadata": {"ownerReferences": owners, "resourceVersion": pvc.resource_version()}});
    match pvcs(ctx, &cs.namespace().unwrap_or_default()).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => {
            ctx.events
                .record(cs, EventType::Warning, "FailedUpdate", format!("failed to update PVC {name}: {}", plain_kube_message(&e)))
                .await;
            Err(e.into())
        }
    }
}

/// A metadata patch on a pod (labels, annotations, owner references), recorded as a
/// read-your-writes expectation.
pub(crate) async fn patch_pod(ctx: &Context, ns: &str, pod: &dyn PodRead, patch: Value) -> Result<(), WriteError> {
    let updated = pods(ctx, ns).patch(pod.name(), &PatchParams::default(), &Patch::Strategic(&patch)).await?;
    expect_version(ctx, &updated);
    Ok(())
}

/// A strategic-merge patch of the pod's `resize` subresource, the only way to change a running
/// pod's cpu/memory. A refusal to lower a memory limit is remembered, so later plans avoid it.
pub(crate) async fn resize_pod(ctx: &Context, ns: &str, pod: &dyn PodRead, patch: Value) -> Result<(), WriteError> {
    let resized = pods(ctx, ns).patch_subresource("resize", pod.name(), &PatchParams::default(), &Patch::Strategic(&patch)).await;
    if let Err(e) = &resized
        && super::resize_support::refuses_memory_limit_decrease(e)
    {
        ctx.resize.record_memory_limit_decrease(false);
    }
    let updated = resized?;
    expect_version(ctx, &updated);
    Ok(())
}

/// The resize [`resize_pod`] would make, as a dry run: the apiserver validates it and changes
/// nothing (asked before the first resize that lowers a memory limit).
pub(crate) async fn resize_pod_dry_run(ctx: &Context, ns: &str, pod: &dyn PodRead, patch: &Value) -> Result<(), kube::Error> {
    let dry_run = PatchParams { dry_run: true, ..Default::default() };
    pods(ctx, ns).patch_subresource("resize", pod.name(), &dry_run, &Patch::Strategic(patch)).await.map(|_| ())
}

/// Releases a pod whose labels no longer match the selector: removes our owner reference (a
/// merge patch replaces the list; a strategic one would merge it back).
pub(crate) async fn release_pod(ctx: &Context, ns: &str, pod: &Pod, owner_uid: &str) -> Result<(), WriteError> {
    let refs: Vec<_> = pod.owner_references().iter().filter(|o| o.uid != owner_uid).cloned().collect();
    let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": pod.resource_version()}});
    pods(ctx, ns).patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// A status patch on a pod (conditions merge by type).
pub(crate) async fn patch_pod_status(ctx: &Context, ns: &str, pod: &dyn PodRead, patch: Value) -> Result<(), WriteError> {
    let updated = pods(ctx, ns).patch_status(pod.name(), &PatchParams::default(), &Patch::Strategic(&patch)).await?;
    expect_version(ctx, &updated);
    Ok(())
}

/// A pod's UID, when it has one.
fn uid_of(pod: &dyn PodRead) -> Option<String> {
    Some(pod.pod_uid()).filter(|u| !u.is_empty()).map(str::to_string)
}

/// Only pods: the reconcile checks (and `delete_pod` forgets) pod expectations alone, as Kruise
/// expects no revision writes (but for image pre-download, which is off).
fn expect_version(ctx: &Context, WirePod(pod): &WirePod) {
    if let (Some(uid), Some(rv)) = (pod.metadata.uid.as_deref(), pod.metadata.resource_version.as_deref()) {
        ctx.rv_expectations.lock().unwrap_or_else(|e| e.into_inner()).expect(uid, rv);
    }
}

/// Writes the status. Fields that disappeared are removed explicitly (a merge patch would
/// otherwise keep them).
pub(crate) async fn write_status(ctx: &Context, cs: &CloneSet, old: &CloneSetStatus, new: &CloneSetStatus) -> Result<(), WriteError> {
    let mut status = serde_json::to_value(new)?;
    if let (Value::Object(old), Value::Object(new)) = (serde_json::to_value(old)?, &mut status) {
        for k in old.keys() {
            new.entry(k.clone()).or_insert(Value::Null);
        }
    }
    let api: Api<CloneSet> = Api::namespaced(ctx.client.clone(), &cs.namespace().unwrap_or_default());
    api.patch_status(&cs.name_any(), &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await?;
    Ok(())
}

/// Rewrites `spec.scaleStrategy.podsToDelete` (Kruise truncates names that are no longer pods).
pub(crate) async fn set_pods_to_delete(ctx: &Context, cs: &CloneSet, names: &[String]) -> Result<(), WriteError> {
    let api: Api<CloneSet> = Api::namespaced(ctx.client.clone(), &cs.namespace().unwrap_or_default());
    let value = if names.is_empty() { Value::Null } else { json!(names) };
    let patch = json!({"metadata": {"resourceVersion": cs.resource_version()}, "spec": {"scaleStrategy": {"podsToDelete": value}}});
    api.patch(&cs.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Creates a ControllerRevision whose `data` is exactly `data` (the Go-encoded bytes), so the
/// stored revision is byte-identical to one Kruise would write.
pub(crate) async fn create_revision(
    ctx: &Context,
    ns: &str,
    mut revision: ControllerRevision,
    data: &[u8],
) -> Result<ControllerRevision, kube::Error> {
    revision.data = None;
    let mut body = serde_json::to_vec(&revision).map_err(kube::Error::SerdeError)?;
    // Splice the raw data in before the closing brace: `...,"data":<raw>}`.
    body.pop();
    body.extend_from_slice(b",\"data\":");
    body.extend_from_slice(data);
    body.push(b'}');
    let url = format!("/apis/apps/v1/namespaces/{ns}/controllerrevisions");
    let req = kube::core::Request::new(url).create(&PostParams::default(), body).map_err(kube::Error::BuildRequest)?;
    ctx.client.request(req).await
}

/// Moves an existing revision to the head of history (a rollback to its template).
pub(crate) async fn bump_revision(ctx: &Context, ns: &str, name: &str, revision: i64, vct_hash: &str) -> Result<(), kube::Error> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    let patch = json!({"revision": revision, "metadata": {"annotations": {crate::api::keys::VOLUME_CLAIM_TEMPLATE_HASH: vct_hash}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

pub(crate) async fn delete_revision(ctx: &Context, ns: &str, name: &str) -> Result<(), kube::Error> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Context whose apiserver echoes every write back with a uid and a resourceVersion (what
    /// the write helpers record as expectations).
    fn echoing_context() -> Context {
        use super::super::reconcile_requests::context_with;
        use crate::stand_in::Apiserver;
        context_with(Apiserver::default().client()).0
    }

    /// Kruise expects resourceVersions of the pods it writes only (revisions only with image
    /// pre-download, which is off): an expectation for a revision is never checked or forgotten.
    #[tokio::test]
    async fn writing_controller_revisions_records_no_resource_version_expectation() {
        let ctx = echoing_context();
        let rev = ControllerRevision {
            metadata: kube::api::ObjectMeta { name: Some("web-1".into()), ..Default::default() },
            ..Default::default()
        };
        create_revision(&ctx, "ns", rev, b"{}").await.unwrap();
        bump_revision(&ctx, "ns", "web-1", 3, "").await.unwrap();
        assert!(ctx.rv_expectations.lock().unwrap().is_empty());
        // The helper a pod write uses does record one.
        patch_pod(
            &ctx,
            "ns",
            &Pod { metadata: kube::api::ObjectMeta { name: Some("p".into()), ..Default::default() }, ..Default::default() },
            json!({}),
        )
        .await
        .unwrap();
        assert_eq!(ctx.rv_expectations.lock().unwrap().len(), 1);
    }
}
