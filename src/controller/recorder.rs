//! The controller's event recorder: Kruise's core/v1 events, correlated, rate limited and sent
//! in the background as client-go's `record` package does. One per operator, owning all of its
//! state (the correlator, the per-CloneSet spam filter, the queue of events to send).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use kube::{Api, Resource as _};
use serde_json::json;

use super::writes::{cs_key, plain_kube_message};
use crate::api::CloneSet;
use crate::core::events::{self, EventCorrelator};

/// Records the events of one operator (see the module).
pub(crate) struct Recorder {
    client: kube::Client,
    correlator: Mutex<EventCorrelator>,
    /// Per CloneSet UID and event type: its spam-filter bucket.
    budgets: Mutex<HashMap<String, EventBudget>>,
    /// Events waiting to be sent, at most client-go's [`MAX_QUEUED_EVENTS`].
    queue: EventQueue,
}

impl Recorder {
    pub(crate) fn new(client: kube::Client) -> Self {
        Self { client, correlator: Mutex::default(), budgets: Mutex::default(), queue: EventQueue::default() }
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
    pub(crate) async fn record(&self, cs: &CloneSet, type_: EventType, reason: &str, note: String) {
        let Some(queued) = self.queue.enter() else {
            tracing::debug!(reason, note, "event dropped: {MAX_QUEUED_EVENTS} events are waiting to be sent");
            return;
        };
        let type_ = match type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let allowed = {
            let mut budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
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
            let mut correlator = self.correlator.lock().unwrap_or_else(|e| e.into_inner());
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
            let turn = self.queue.turn(&occurrence.name);
            (occurrence, turn)
        };
        let ev = core_event(&involved, type_, reason, &occurrence);
        let client = self.client.clone();
        let reason = reason.to_string();
        let sending = self.queue.sending.clone();
        tokio::spawn(async move {
            let _queued = queued;
            let _done = turn.wait().await;
            let Ok(_permit) = sending.acquire().await else { return };
            if let Err(e) = send_event(client, ev, occurrence.patch).await {
                tracing::warn!(error = %plain_kube_message(&e), reason, "could not publish event");
            }
        });
    }
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
pub(crate) const EVENT_SOURCE: &str = "cloneset-controller";

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
pub(crate) const MAX_QUEUED_EVENTS: usize = 1000;

/// Per event name, the latest send not yet finished: its turn's id, and what ends when it ends.
type SendsInFlight = std::sync::Arc<std::sync::Mutex<HashMap<String, (u64, tokio::sync::oneshot::Receiver<()>)>>>;

/// The events [`Recorder::record`] has queued: at most [`MAX_QUEUED_EVENTS`] waiting, at most
/// [`EVENTS_IN_FLIGHT`] of them being sent. One per recorder.
#[derive(Debug)]
pub(crate) struct EventQueue {
    waiting: std::sync::Arc<tokio::sync::Semaphore>,
    sending: std::sync::Arc<tokio::sync::Semaphore>,
    /// The latest send of each event name not yet finished. A repeat (a patch of `count`) waits
    /// for the send before it, as client-go's broadcaster sends one event at a time: sent side by
    /// side, a repeat overtook its event's creation (404, then a create that met it: 409,
    /// hundreds of wasted requests in a bulk creation, and a first create that lost the race
    /// logged as a failure), and two repeats could land in either order (a count going back).
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
pub(crate) struct Turn {
    after: Option<tokio::sync::oneshot::Receiver<()>>,
    done: TurnDone,
}

impl Turn {
    /// Waits until the send before this one (of the same name) has finished; the send after
    /// this one waits until what this returns is dropped.
    pub(crate) async fn wait(self) -> TurnDone {
        if let Some(earlier) = self.after {
            // Its sender is dropped when that send ends, however it ends.
            let _ = earlier.await;
        }
        self.done
    }
}

/// Held while an event is sent; dropped, it lets the next send of the name go.
pub(crate) struct TurnDone {
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
    pub(crate) fn turn(&self, name: &str) -> Turn {
        let id = self.turns.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (next_may_go, this_is_done) = tokio::sync::oneshot::channel();
        let after = self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), (id, this_is_done));
        Turn {
            after: after.map(|(_, earlier)| earlier),
            done: TurnDone { name: name.to_string(), id, _next_may_go: next_may_go, in_flight: self.in_flight.clone() },
        }
    }

    /// Events queued and not yet sent.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        MAX_QUEUED_EVENTS - self.waiting.available_permits()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// client-go's `defaultSpamBurst`.
pub(crate) const EVENT_BURST: f64 = 25.0;
/// client-go's `defaultSpamQPS` (1/300): one more event per 5 minutes.
pub(crate) const EVENT_REFILL: std::time::Duration = std::time::Duration::from_secs(300);

/// One CloneSet's event token bucket (client-go's spam filter).
#[derive(Clone, Copy, Debug)]
pub(crate) struct EventBudget {
    tokens: f64,
    last: std::time::Instant,
}

impl EventBudget {
    pub(crate) fn new(now: std::time::Instant) -> Self {
        Self { tokens: EVENT_BURST, last: now }
    }

    /// Takes a token if there is one.
    pub(crate) fn take(&mut self, now: std::time::Instant) -> bool {
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
    pub(crate) fn full_at(&self, _now: std::time::Instant) -> Option<std::time::Instant> {
        (self.tokens < EVENT_BURST).then(|| self.last + EVENT_REFILL.mul_f64(EVENT_BURST - self.tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::time::{Duration, Instant};

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
        let recorder = Recorder::new(kube::Client::new(svc, "default"));
        for i in 0..1500 {
            let cs: CloneSet = serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                "metadata": {"name": format!("cs-{i}"), "namespace": "ns", "uid": format!("uid-{i}")},
                "spec": {"selector": {}, "template": {}},
            }))
            .unwrap();
            recorder.record(&cs, EventType::Normal, "SuccessfulCreate", format!("succeed to create pod cs-{i}-a")).await;
        }
        assert_eq!(recorder.queue.len(), MAX_QUEUED_EVENTS, "the queue is full");
        answering.add_permits(1 << 20);
        let deadline = Instant::now() + Duration::from_secs(30);
        while requests.load(Ordering::SeqCst) < MAX_QUEUED_EVENTS || !recorder.queue.is_empty() {
            let waiting = recorder.queue.len();
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
        let recorder = Recorder::new(kube::Client::new(svc, "default"));
        let cs: CloneSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web"},
            "spec": {"selector": {}, "template": {}},
        }))
        .unwrap();
        for i in 0..25 {
            recorder.record(&cs, EventType::Normal, "SuccessfulCreate", format!("succeed to create pod web-{i}")).await;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !recorder.queue.is_empty() {
            assert!(Instant::now() < deadline, "{} events still queued", recorder.queue.len());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (counts, requests) = seen.lock().unwrap().clone();
        let refused: Vec<_> = requests.iter().filter(|(_, code)| *code >= 300).collect();
        assert!(refused.is_empty(), "refused: {refused:?} of {requests:?}");
        assert_eq!(requests.len(), 25, "{requests:?}");
        assert_eq!(counts.len(), 10, "9 events and the combined one: {counts:?}");
        assert_eq!(counts.values().max(), Some(&16), "the combined event counts its 16 occurrences: {counts:?}");
        assert!(recorder.queue.in_flight.lock().unwrap().is_empty(), "finished sends are forgotten");
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
