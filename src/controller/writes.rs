//! Every write the controller makes. Each records its expectation before the call (so the watch
//! event cannot be missed) and withdraws it when the call fails; events use Kruise's reasons
//! and messages.

use std::collections::HashMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
pub use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt as _};
use serde_json::{Value, json};

use super::Context;
use crate::api::{CloneSet, CloneSetStatus};
use crate::core::events;
use crate::core::expectations::ObjectKind;
use crate::core::pod_read::PodRead;
use crate::pod_cache::wire::WirePod;

/// Why a write failed, in terms of what the caller must do.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
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
pub fn plain_message(e: &WriteError) -> String {
    match e {
        WriteError::Api(err) => plain_kube_message(err),
        other => other.to_string(),
    }
}

pub fn plain_kube_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

pub fn cs_key(cs: &CloneSet) -> String {
    format!("{}/{}", cs.namespace().unwrap_or_default(), cs.name_any())
}

/// Publishes an event in the background, as Kruise's core/v1 event broadcaster (client-go's
/// `record` package) does: a reconcile never waits for it. The event is a core/v1 Event with
/// `source.component: cloneset-controller`, and a repeat patches the first one (`count`,
/// `lastTimestamp`) as client-go's correlator does ([`crate::core::events`]). Like client-go's
/// `EventSourceObjectSpamFilter`, each CloneSet may publish [`EVENT_BURST`] events of a type at
/// once and then one per [`EVENT_REFILL`]; the rest are dropped (a scale-up of 1,000 pods sends
/// about 25 `SuccessfulCreate` events, not 1,000, and their requests no longer compete with pod
/// writes for the client's tokens). At most [`EVENTS_IN_FLIGHT`] are being sent at once, and at
/// most [`MAX_QUEUED_EVENTS`] wait: like client-go's broadcaster, which drops an event when its
/// queue is full, an event beyond them is dropped before the spam filter and the correlator see it.
pub async fn event(ctx: &Context, cs: &CloneSet, type_: EventType, reason: &str, note: String) {
    let Some(queued) = ctx.event_queue.enter() else {
        tracing::debug!(reason, note, "event dropped: {MAX_QUEUED_EVENTS} events are waiting to be sent");
        return;
    };
    let type_ = match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    };
    let allowed = {
        let mut budgets = ctx.event_budgets.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        budgets.retain(|_, b| b.full_at(now).is_none_or(|t| t > now));
        let object = cs.metadata.uid.clone().unwrap_or_else(|| cs_key(cs));
        budgets.entry(format!("{object}/{type_}")).or_insert_with(|| EventBudget::new(now)).take(now)
    };
    if !allowed {
        tracing::debug!(reason, note, "event dropped by the per-CloneSet spam filter");
        return;
    }
    let note = within_note_limit(note);
    let involved: ObjectReference = cs.object_ref(&());
    let now = k8s_openapi::jiff::Timestamp::now();
    let object_key = format!(
        "{EVENT_SOURCE}\0{}\0{}\0{}\0{}\0{}",
        involved.kind.as_deref().unwrap_or_default(),
        involved.namespace.as_deref().unwrap_or_default(),
        involved.name.as_deref().unwrap_or_default(),
        involved.uid.as_deref().unwrap_or_default(),
        involved.api_version.as_deref().unwrap_or_default()
    );
    // The turn is taken under the correlator's lock, so sends of a name go in the order of their
    // counts even when two tasks record the same event at once.
    let (occurrence, turn) = {
        let mut correlator = ctx.event_correlator.lock().unwrap_or_else(|e| e.into_inner());
        let occurrence = correlator.correlate(
            &events::NewEvent {
                object_key: &object_key,
                object_name: involved.name.as_deref().unwrap_or_default(),
                type_,
                reason,
                message: &note,
            },
            now,
        );
        let turn = ctx.event_queue.turn(&occurrence.name);
        (occurrence, turn)
    };
    let ev = core_event(&involved, type_, reason, &occurrence);
    let client = ctx.client.clone();
    let reason = reason.to_string();
    let sending = ctx.event_queue.sending.clone();
    tokio::spawn(async move {
        let _queued = queued;
        let _done = turn.wait().await;
        let Ok(_permit) = sending.acquire().await else { return };
        if let Err(e) = send_event(client, ev, occurrence.patch).await {
            tracing::warn!(error = %plain_kube_message(&e), reason, "could not publish event");
        }
    });
}

/// The events.k8s.io API refuses a note longer than this (in bytes); kept for core/v1 events too,
/// so an error message cannot make an event too large to record.
const MAX_NOTE_BYTES: usize = 1024;

/// `note` cut to what the Events API accepts, on a character boundary, marked as cut.
fn within_note_limit(mut note: String) -> String {
    if note.len() > MAX_NOTE_BYTES {
        let mut end = MAX_NOTE_BYTES - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

/// client-go's `EventSource.Component` of Kruise's CloneSet recorder.
pub const EVENT_SOURCE: &str = "cloneset-controller";

/// The core/v1 Event client-go's recorder writes (`makeEvent` + `generateEvent`).
fn core_event(involved: &ObjectReference, type_: &str, reason: &str, o: &events::Occurrence) -> CoreEvent {
    use k8s_openapi::api::core::v1::EventSource;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    // client-go puts events of a cluster-scoped object into `default`.
    let namespace = involved.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into());
    CoreEvent {
        metadata: ObjectMeta { name: Some(o.name.clone()), namespace: Some(namespace), ..Default::default() },
        involved_object: involved.clone(),
        reason: Some(reason.into()),
        message: Some(o.message.clone()),
        first_timestamp: Some(Time(o.first_timestamp)),
        last_timestamp: Some(Time(o.last_timestamp)),
        count: Some(o.count),
        type_: Some(type_.into()),
        source: Some(EventSource { component: Some(EVENT_SOURCE.into()), host: None }),
        reporting_component: o.reporting.then(|| EVENT_SOURCE.into()),
        reporting_instance: None,
        ..Default::default()
    }
}

/// Creates the event, or patches a repeat as client-go's `recordEvent` does (falling back to a
/// create when the first is gone; a create that meets a racing first create patches instead).
async fn send_event(client: kube::Client, ev: CoreEvent, patch: bool) -> Result<(), kube::Error> {
    let api: Api<CoreEvent> = Api::namespaced(client, ev.metadata.namespace.as_deref().unwrap_or("default"));
    let name = ev.metadata.name.clone().unwrap_or_default();
    let repeat = json!({"count": ev.count, "lastTimestamp": ev.last_timestamp, "message": ev.message});
    if patch {
        match api.patch(&name, &PatchParams::default(), &Patch::Strategic(&repeat)).await {
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            other => return other.map(drop),
        }
    }
    match api.create(&PostParams::default(), &ev).await {
        Err(kube::Error::Api(e)) if e.code == 409 && patch => {
            api.patch(&name, &PatchParams::default(), &Patch::Strategic(&repeat)).await.map(drop)
        }
        other => other.map(drop),
    }
}

/// Events sent concurrently (the rest wait for a slot in their own tasks).
const EVENTS_IN_FLIGHT: usize = 16;
/// client-go's `maxQueuedEvents`: events waiting to be sent. Unbounded, a mass creation of pods
/// left thousands of tasks alive, nearly all of them events waiting in their own tasks, each
/// holding its Event.
pub const MAX_QUEUED_EVENTS: usize = 1000;

/// Per event name, the latest send not yet finished: its turn's id, and what ends when it ends.
type SendsInFlight = std::sync::Arc<std::sync::Mutex<HashMap<String, (u64, tokio::sync::oneshot::Receiver<()>)>>>;

/// The events [`event`] has queued: at most [`MAX_QUEUED_EVENTS`] waiting, at most
/// [`EVENTS_IN_FLIGHT`] of them being sent. One per operator, in its [`Context`].
#[derive(Debug)]
pub struct EventQueue {
    waiting: std::sync::Arc<tokio::sync::Semaphore>,
    sending: std::sync::Arc<tokio::sync::Semaphore>,
    /// The latest send of each event name not yet finished. A repeat (a patch of `count`) waits
    /// for the send before it, as client-go's broadcaster sends one event at a time: sent side by
    /// side, a repeat overtook its event's creation (404, then a create that met it: 409;
    /// 194-330 wasted requests when 4,000 pods were created, and a first create that lost the
    /// race logged as a failure), and two repeats could land in either order (a count going back).
    in_flight: SendsInFlight,
    turns: std::sync::atomic::AtomicU64,
}

impl Default for EventQueue {
    fn default() -> Self {
        Self {
            waiting: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_QUEUED_EVENTS)),
            sending: std::sync::Arc::new(tokio::sync::Semaphore::new(EVENTS_IN_FLIGHT)),
            in_flight: Default::default(),
            turns: Default::default(),
        }
    }
}

/// An event's place after the earlier sends of its name ([`EventQueue::turn`]).
pub struct Turn {
    after: Option<tokio::sync::oneshot::Receiver<()>>,
    done: TurnDone,
}

impl Turn {
    /// Waits until the send before this one (of the same name) has finished; the send after
    /// this one waits until what this returns is dropped.
    pub async fn wait(self) -> TurnDone {
        if let Some(earlier) = self.after {
            // Its sender is dropped when that send ends, however it ends.
            let _ = earlier.await;
        }
        self.done
    }
}

/// Held while an event is sent; dropped, it lets the next send of the name go.
pub struct TurnDone {
    name: String,
    id: u64,
    _next_may_go: tokio::sync::oneshot::Sender<()>,
    in_flight: SendsInFlight,
}

impl Drop for TurnDone {
    fn drop(&mut self) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        // Still the latest send of the name: nothing waits for it, so the name is forgotten.
        if in_flight.get(&self.name).is_some_and(|(id, _)| *id == self.id) {
            in_flight.remove(&self.name);
        }
    }
}

impl EventQueue {
    /// A place in the queue, held until the event is sent; `None` when the queue is full.
    fn enter(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.waiting.clone().try_acquire_owned().ok()
    }

    /// This send's turn among the sends of the event `name`, in the order they are asked for.
    pub fn turn(&self, name: &str) -> Turn {
        let id = self.turns.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (next_may_go, this_is_done) = tokio::sync::oneshot::channel();
        let after = self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), (id, this_is_done));
        Turn {
            after: after.map(|(_, earlier)| earlier),
            done: TurnDone { name: name.to_string(), id, _next_may_go: next_may_go, in_flight: self.in_flight.clone() },
        }
    }

    /// Events queued and not yet sent.
    pub fn len(&self) -> usize {
        MAX_QUEUED_EVENTS - self.waiting.available_permits()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// client-go's `defaultSpamBurst`.
pub const EVENT_BURST: f64 = 25.0;
/// client-go's `defaultSpamQPS` (1/300): one more event per 5 minutes.
pub const EVENT_REFILL: std::time::Duration = std::time::Duration::from_secs(300);

/// One CloneSet's event token bucket (client-go's spam filter).
#[derive(Clone, Copy, Debug)]
pub struct EventBudget {
    tokens: f64,
    last: std::time::Instant,
}

impl EventBudget {
    pub fn new(now: std::time::Instant) -> Self {
        Self { tokens: EVENT_BURST, last: now }
    }

    /// Takes a token if there is one.
    pub fn take(&mut self, now: std::time::Instant) -> bool {
        let refill = now.saturating_duration_since(self.last).as_secs_f64() / EVENT_REFILL.as_secs_f64();
        self.tokens = (self.tokens + refill).min(EVENT_BURST);
        self.last = now.max(self.last);
        if self.tokens >= 1.0 - 1e-9 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the bucket is full again (`None`: it is full): after that it can be forgotten.
    pub fn full_at(&self, _now: std::time::Instant) -> Option<std::time::Instant> {
        (self.tokens < EVENT_BURST).then(|| self.last + EVENT_REFILL.mul_f64(EVENT_BURST - self.tokens))
    }
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
pub async fn create_pod(ctx: &Context, cs: &CloneSet, pod: &Pod, new_pvcs: &[PersistentVolumeClaim]) -> Result<(), WriteError> {
    let key = cs_key(cs);
    let ns = cs.namespace().unwrap_or_default();
    let name = pod.name_any();
    for pvc in new_pvcs {
        let pvc_name = pvc.name_any();
        ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).expect_creation(&key, ObjectKind::Pvc, &pvc_name);
        if let Err(e) = pvcs(ctx, &ns).create(&PostParams::default(), pvc).await {
            ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).withdraw(&key, ObjectKind::Pvc, &pvc_name);
            let msg = format!("failed to create pvc: {}, pvc: {pvc_name}", plain_kube_message(&e));
            event(ctx, cs, EventType::Warning, "FailedCreate", msg).await;
            return Err(e.into());
        }
    }
    ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).expect_creation(&key, ObjectKind::Pod, &name);
    match create_pod_object(ctx, &ns, pod).await {
        Ok(_) => {
            event(ctx, cs, EventType::Normal, "SuccessfulCreate", format!("succeed to create pod {name}")).await;
            Ok(())
        }
        Err(e) => {
            ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).withdraw(&key, ObjectKind::Pod, &name);
            event(ctx, cs, EventType::Warning, "FailedCreate", format!("failed to create pod: {}, pod: {name}", plain_kube_message(&e)))
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
pub async fn delete_pod(ctx: &Context, cs: &CloneSet, pod: &dyn PodRead, instance_pvcs: &[String]) -> Result<(), WriteError> {
    let key = cs_key(cs);
    let ns = cs.namespace().unwrap_or_default();
    let name = pod.name().to_string();
    let uid = uid_of(pod);
    ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).expect_deletion(&key, ObjectKind::Pod, &name);
    let dp = DeleteParams { preconditions: Some(Preconditions { uid: uid.clone(), resource_version: None }), ..Default::default() };
    match pods(ctx, &ns).delete(&name, &dp).await {
        Ok(_) => event(ctx, cs, EventType::Normal, "SuccessfulDelete", format!("succeed to delete pod {name}")).await,
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => {
            ctx.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).withdraw(&key, ObjectKind::Pod, &name);
            event(ctx, cs, EventType::Warning, "FailedDelete", format!("failed to delete pod {name}: {}", plain_kube_message(&e))).await;
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
pub enum PvcDeletion {
    /// With its pod, on scale-down (`deletePods`).
    WithPod,
    /// A PVC with no pod at all, with DisablePVCReuse (`deleteOnePVC`).
    CleanUp,
}

pub async fn delete_pvc(ctx: &Context, cs: &CloneSet, name: &str, why: PvcDeletion) -> Result<(), WriteError> {
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
            event(ctx, cs, EventType::Warning, "FailedDelete", msg).await;
            Err(e.into())
        }
    }
}

/// Sets a PVC's owner references (handing it to a dead pod so garbage collection takes it).
pub async fn set_pvc_owners(
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
            event(ctx, cs, EventType::Warning, "FailedUpdate", format!("failed to update PVC {name}: {}", plain_kube_message(&e))).await;
            Err(e.into())
        }
    }
}

/// A metadata patch on a pod (labels, annotations, owner references), recorded as a
/// read-your-writes expectation.
pub async fn patch_pod(ctx: &Context, ns: &str, pod: &dyn PodRead, patch: Value) -> Result<(), WriteError> {
    let updated = pods(ctx, ns).patch(pod.name(), &PatchParams::default(), &Patch::Strategic(&patch)).await?;
    expect_version(ctx, &updated);
    Ok(())
}

/// A strategic-merge patch of the pod's `resize` subresource (Kubernetes 1.32+), the only way to
/// change a running pod's cpu/memory.
pub async fn resize_pod(ctx: &Context, ns: &str, pod: &dyn PodRead, patch: Value) -> Result<(), WriteError> {
    let updated = pods(ctx, ns).patch_subresource("resize", pod.name(), &PatchParams::default(), &Patch::Strategic(&patch)).await?;
    expect_version(ctx, &updated);
    Ok(())
}

/// Releases a pod whose labels no longer match the selector: removes our owner reference (a
/// merge patch replaces the list; a strategic one would merge it back).
pub async fn release_pod(ctx: &Context, ns: &str, pod: &Pod, owner_uid: &str) -> Result<(), WriteError> {
    let refs: Vec<_> = pod.owner_references().iter().filter(|o| o.uid != owner_uid).cloned().collect();
    let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": pod.resource_version()}});
    pods(ctx, ns).patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// A status patch on a pod (conditions merge by type).
pub async fn patch_pod_status(ctx: &Context, ns: &str, pod: &dyn PodRead, patch: Value) -> Result<(), WriteError> {
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
pub async fn write_status(ctx: &Context, cs: &CloneSet, old: &CloneSetStatus, new: &CloneSetStatus) -> Result<(), WriteError> {
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
pub async fn set_pods_to_delete(ctx: &Context, cs: &CloneSet, names: &[String]) -> Result<(), WriteError> {
    let api: Api<CloneSet> = Api::namespaced(ctx.client.clone(), &cs.namespace().unwrap_or_default());
    let value = if names.is_empty() { Value::Null } else { json!(names) };
    let patch = json!({"metadata": {"resourceVersion": cs.resource_version()}, "spec": {"scaleStrategy": {"podsToDelete": value}}});
    api.patch(&cs.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Creates a ControllerRevision whose `data` is exactly `data` (the Go-encoded bytes), so the
/// stored revision is byte-identical to one Kruise would write.
pub async fn create_revision(
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
pub async fn bump_revision(ctx: &Context, ns: &str, name: &str, revision: i64, vct_hash: &str) -> Result<(), kube::Error> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    let patch = json!({"revision": revision, "metadata": {"annotations": {crate::api::keys::VOLUME_CLAIM_TEMPLATE_HASH: vct_hash}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

pub async fn delete_revision(ctx: &Context, ns: &str, name: &str) -> Result<(), kube::Error> {
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
    use std::time::{Duration, Instant};

    /// A Context whose client is an apiserver that echoes every write back with a uid and a
    /// resourceVersion (what the write helpers record as expectations).
    fn echoing_context() -> Context {
        use bytes::Bytes;
        use http_body_util::{BodyExt as _, Full};
        let svc = tower::service_fn(|req: http::Request<kube::client::Body>| async move {
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let mut obj: Value = serde_json::from_slice(&body).unwrap_or_else(|_| json!({}));
            obj["metadata"]["uid"] = json!("uid-echo");
            obj["metadata"]["resourceVersion"] = json!("42");
            obj["metadata"]["name"] = json!("echo");
            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(obj.to_string()))))
        });
        context_with(kube::Client::new(svc, "default"))
    }

    fn context_with(client: kube::Client) -> Context {
        let (clonesets, _) = kube::runtime::reflector::store();
        let (pods, _) = super::super::owned_store::owned_store();
        let (pvcs, _) = super::super::owned_store::owned_store();
        let (revisions, _) = super::super::owned_store::owned_store();
        let (nodes, _) = kube::runtime::reflector::store();
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
        Context {
            client,
            config: Default::default(),
            stores: super::super::Stores { clonesets, pods, pvcs, revisions, nodes },
            scale_expectations: Default::default(),
            rv_expectations: Default::default(),
            template_revisions: Default::default(),
            event_correlator: Default::default(),
            queue: super::super::WorkQueue::with_limits(Default::default(), metrics.queue()),
            metrics,
            event_budgets: Default::default(),
            event_queue: EventQueue::default(),
            leading: Default::default(),
        }
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

    /// While the apiserver does not answer, events wait in client-go's queue of 1,000 and the
    /// rest are dropped, not held: 1,500 CloneSets' first events make 1,000 requests once it
    /// answers again.
    #[tokio::test]
    async fn events_beyond_client_go_s_queue_are_dropped_while_the_apiserver_is_slow() {
        use bytes::Bytes;
        use http_body_util::Full;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let requests = std::sync::Arc::new(AtomicUsize::new(0));
        let answering = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        let svc = {
            let (requests, answering) = (requests.clone(), answering.clone());
            tower::service_fn(move |_req: http::Request<kube::client::Body>| {
                let (requests, answering) = (requests.clone(), answering.clone());
                async move {
                    requests.fetch_add(1, Ordering::SeqCst);
                    let _answer = answering.acquire().await;
                    let created = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}, "involvedObject": {}});
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(created.to_string()))))
                }
            })
        };
        let ctx = context_with(kube::Client::new(svc, "default"));
        for i in 0..1500 {
            let cs: CloneSet = serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                "metadata": {"name": format!("cs-{i}"), "namespace": "ns", "uid": format!("uid-{i}")},
                "spec": {"selector": {}, "template": {}},
            }))
            .unwrap();
            event(&ctx, &cs, EventType::Normal, "SuccessfulCreate", format!("succeed to create pod cs-{i}-a")).await;
        }
        assert_eq!(ctx.event_queue.len(), MAX_QUEUED_EVENTS, "the queue is full");
        answering.add_permits(1 << 20);
        let deadline = Instant::now() + Duration::from_secs(30);
        while requests.load(Ordering::SeqCst) < MAX_QUEUED_EVENTS || !ctx.event_queue.is_empty() {
            let waiting = ctx.event_queue.len();
            assert!(Instant::now() < deadline, "{} requests, {waiting} events still queued", requests.load(Ordering::SeqCst));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(requests.load(Ordering::SeqCst), MAX_QUEUED_EVENTS);
    }

    /// A CloneSet's 25 events of one burst (9 creates, then the combined event created and
    /// patched 15 times) reach an apiserver whose creates are slow in the order they were
    /// recorded: no repeat overtakes its creation (no 404, no 409), and the count ends at 16.
    #[tokio::test]
    async fn repeats_of_an_event_are_sent_after_its_creation() {
        use bytes::Bytes;
        use http_body_util::{BodyExt as _, Full};
        type Seen = std::sync::Arc<std::sync::Mutex<(HashMap<String, i64>, Vec<(String, u16)>)>>;
        let seen: Seen = Default::default();
        let svc = {
            let seen = seen.clone();
            tower::service_fn(move |req: http::Request<kube::client::Body>| {
                let seen = seen.clone();
                async move {
                    let method = req.method().to_string();
                    let path = req.uri().path().to_string();
                    let body: Value = serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes()).unwrap();
                    let (name, code) = if method == "POST" {
                        // A creation takes longer than a patch, as when the apiserver is busy.
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        let name = body["metadata"]["name"].as_str().unwrap().to_string();
                        let mut seen = seen.lock().unwrap();
                        let exists = seen.0.contains_key(&name);
                        if !exists {
                            seen.0.insert(name.clone(), body["count"].as_i64().unwrap());
                        }
                        (name, if exists { 409 } else { 201 })
                    } else {
                        let name = path.rsplit('/').next().unwrap().to_string();
                        let mut seen = seen.lock().unwrap();
                        let code = match seen.0.get_mut(&name) {
                            Some(count) => {
                                *count = body["count"].as_i64().unwrap();
                                200
                            }
                            None => 404,
                        };
                        (name, code)
                    };
                    seen.lock().unwrap().1.push((format!("{method} {name}"), code));
                    let answer = if code < 300 {
                        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}, "involvedObject": {}})
                    } else {
                        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code})
                    };
                    let mut res = http::Response::new(Full::new(Bytes::from(answer.to_string())));
                    *res.status_mut() = http::StatusCode::from_u16(code).unwrap();
                    Ok::<_, std::convert::Infallible>(res)
                }
            })
        };
        let ctx = context_with(kube::Client::new(svc, "default"));
        let cs: CloneSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web"},
            "spec": {"selector": {}, "template": {}},
        }))
        .unwrap();
        for i in 0..25 {
            event(&ctx, &cs, EventType::Normal, "SuccessfulCreate", format!("succeed to create pod web-{i}")).await;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ctx.event_queue.is_empty() {
            assert!(Instant::now() < deadline, "{} events still queued", ctx.event_queue.len());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (counts, requests) = seen.lock().unwrap().clone();
        let refused: Vec<_> = requests.iter().filter(|(_, code)| *code >= 300).collect();
        assert!(refused.is_empty(), "refused: {refused:?} of {requests:?}");
        assert_eq!(requests.len(), 25, "{requests:?}");
        assert_eq!(counts.len(), 10, "9 events and the combined one: {counts:?}");
        assert_eq!(counts.values().max(), Some(&16), "the combined event counts its 16 occurrences: {counts:?}");
        assert!(ctx.event_queue.in_flight.lock().unwrap().is_empty(), "finished sends are forgotten");
    }

    #[test]
    fn event_notes_fit_the_events_api_limit() {
        assert_eq!(within_note_limit("short".into()), "short");
        let long = "é".repeat(1000);
        let cut = within_note_limit(long);
        assert!(cut.len() <= MAX_NOTE_BYTES && cut.ends_with("..."), "{}", cut.len());
    }

    #[test]
    fn the_event_spam_filter_allows_a_burst_then_one_per_refill() {
        let t0 = Instant::now();
        let mut b = EventBudget::new(t0);
        assert_eq!(b.full_at(t0), None);
        assert!((0..25).all(|_| b.take(t0)));
        assert!(!b.take(t0));
        assert!(!b.take(t0 + Duration::from_secs(299)));
        assert!(b.take(t0 + Duration::from_secs(301)));
        assert!(!b.take(t0 + Duration::from_secs(302)));
        let full = b.full_at(t0 + Duration::from_secs(302)).unwrap();
        assert!(full > t0 + Duration::from_secs(300 * 24));
        let mut later = b;
        assert!((0..25).all(|_| later.take(full)));
    }
}
