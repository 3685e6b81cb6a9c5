//! The pod cache's own watcher, which decodes each protobuf pod straight into the [`WirePod`] the
//! cache compacts.
//!
//! kube's watcher decodes JSON only, so a pod read in protobuf would be written out as JSON and
//! parsed again by kube: two passes over every pod event, a large share of the operator's CPU
//! when pods are created in bulk (figures: e2e/bench/HISTORY.md). This watcher asks for the same requests kube's does (kube's own request builders, the same
//! parameters), and [`PodWatch`] follows kube's watcher (v5) step by step:
//! - list in pages, or as a streaming list (a watch with initial events, ended by the bookmark
//!   that says so);
//! - watch from the list's resourceVersion with bookmarks;
//! - when a watch ends, watch again from the last resourceVersion seen;
//! - on 410 Gone, list again;
//! - yield every error, for the caller to back off.
//!
//! It yields kube's [`Event`]s, so the owned store and everything after it are unchanged. A JSON
//! answer (`--kube-api-content-type=application/json`, or an apiserver without protobuf) is
//! decoded as JSON, into the same `WirePod`.

use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use futures::{Stream, StreamExt as _};
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{ListParams, WatchParams};
use kube::runtime::watcher::Event;
use prost::Message as _;

use crate::pod_cache::protobuf::{self as protobuf_pods, PROTOBUF_CONTENT_TYPE, TranscodeError, Untranscoded};
use crate::pod_cache::wire::WirePod;

/// The watch timeout kube asks for, and how long past it a silent watch is given up on (kube's
/// margin).
const WATCH_TIMEOUT_SECONDS: u32 = 290;
const WATCH_IDLE: Duration = Duration::from_secs(WATCH_TIMEOUT_SECONDS as u64 + 5);
/// The bookmark annotation that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

#[derive(Debug, thiserror::Error)]
pub enum PodWatchError {
    #[error("pod request failed: {0}")]
    Request(#[from] kube::Error),
    #[error("building a pod request: {0}")]
    Build(#[from] kube::core::request::Error),
    #[error("reading a pod response: {0}")]
    Body(String),
    #[error(transparent)]
    Protobuf(#[from] TranscodeError),
    #[error("decoding a pod response's JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the apiserver answered {code}: {message}")]
    Api { code: u16, message: String },
    #[error("a pod list or watched pod without a resourceVersion")]
    NoResourceVersion,
    #[error("a watch event of type {0:?}")]
    UnexpectedEvent(String),
    #[error("no event on the pod watch for {0:?}")]
    Idle(Duration),
}

/// One event of a pod watch, decoded.
#[derive(Debug, PartialEq)]
pub(crate) enum PodWatchEvent {
    Added(WirePod),
    Modified(WirePod),
    Deleted(WirePod),
    Bookmark { resource_version: String, initial_events_end: bool },
    Error { code: u16, message: String },
}

/// A page of a pod list.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct PodPage {
    pub items: Vec<WirePod>,
    pub resource_version: Option<String>,
    pub continue_token: Option<String>,
}

/// What the watcher does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// List a page (the first when `continue_token` is `None`).
    List { continue_token: Option<String> },
    /// Open a watch from `resource_version`; `initial_events`: a streaming list.
    Watch { resource_version: String, initial_events: bool },
    /// Read the next event of the open watch.
    Read,
}

#[derive(Debug)]
enum Phase {
    /// Nothing listed: the next step lists (or opens a streaming list).
    Empty,
    /// Listing in pages; `continue_token` is the next page's.
    Paging { continue_token: String },
    /// A streaming list is open and still sending its initial events.
    InitialEvents,
    /// Listed; no watch open.
    Listed { resource_version: String },
    /// A watch is open from `resource_version` (the last one seen).
    Watching { resource_version: String },
}

/// The watcher's states, without I/O: [`PodWatch::next`] says what to request, and the
/// `on_*` methods take what came back and give the events to yield.
#[derive(Debug)]
pub(crate) struct PodWatch {
    streaming: bool,
    phase: Phase,
}

type Item = Result<Event<WirePod>, PodWatchError>;

/// What one step yields: a single event without a heap allocation of its own (a decoded pod is
/// 2.3 KB inline), or a page's events in order.
#[derive(Debug)]
#[expect(clippy::large_enum_variant, reason = "inline is the point: boxing the event is the allocation this avoids")]
pub(crate) enum Yielded {
    Nothing,
    One(Item),
    /// A page of a list: `Init` first when it starts the list, its pods, `InitDone` last when it
    /// ends it.
    Page {
        init: bool,
        pods: std::vec::IntoIter<WirePod>,
        done: bool,
    },
}

impl Iterator for Yielded {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        match self {
            Self::Nothing => None,
            Self::One(_) => match std::mem::replace(self, Self::Nothing) {
                Self::One(item) => Some(item),
                _ => unreachable!(),
            },
            Self::Page { init, pods, done } => {
                if std::mem::take(init) {
                    return Some(Ok(Event::Init));
                }
                if let Some(pod) = pods.next() {
                    return Some(Ok(Event::InitApply(pod)));
                }
                std::mem::take(done).then_some(Ok(Event::InitDone))
            }
        }
    }
}

impl PodWatch {
    pub(crate) fn new(streaming: bool) -> Self {
        Self { streaming, phase: Phase::Empty }
    }

    pub(crate) fn next(&self) -> Next {
        match &self.phase {
            Phase::Empty if self.streaming => Next::Watch { resource_version: "0".into(), initial_events: true },
            Phase::Empty => Next::List { continue_token: None },
            Phase::Paging { continue_token } => Next::List { continue_token: Some(continue_token.clone()) },
            Phase::Listed { resource_version } => Next::Watch { resource_version: resource_version.clone(), initial_events: false },
            Phase::InitialEvents | Phase::Watching { .. } => Next::Read,
        }
    }

    /// A page arrived: the first starts a relist (`Init`), the last ends it (`InitDone`).
    pub(crate) fn on_page(&mut self, page: PodPage) -> Yielded {
        let first = matches!(self.phase, Phase::Empty);
        let PodPage { items, resource_version, continue_token } = page;
        let resource_version = resource_version.filter(|v| !v.is_empty());
        let continue_token = continue_token.filter(|t| !t.is_empty());
        let pods = items.into_iter();
        match (continue_token, resource_version) {
            (Some(continue_token), _) => {
                self.phase = Phase::Paging { continue_token };
                Yielded::Page { init: first, pods, done: false }
            }
            (None, Some(resource_version)) => {
                self.phase = Phase::Listed { resource_version };
                Yielded::Page { init: first, pods, done: true }
            }
            // Nothing to watch from.
            (None, None) => {
                self.phase = Phase::Empty;
                Yielded::One(Err(PodWatchError::NoResourceVersion))
            }
        }
    }

    /// A list failed: the next step lists from the start (kube's watcher does the same).
    pub(crate) fn on_list_failed(&mut self, error: PodWatchError) -> Yielded {
        self.phase = Phase::Empty;
        Yielded::One(Err(error))
    }

    /// A watch was opened as [`Next::Watch`] asked.
    pub(crate) fn on_watch_opened(&mut self) -> Yielded {
        match std::mem::replace(&mut self.phase, Phase::Empty) {
            Phase::Empty => {
                self.phase = Phase::InitialEvents;
                Yielded::One(Ok(Event::Init))
            }
            Phase::Listed { resource_version } => {
                self.phase = Phase::Watching { resource_version };
                Yielded::Nothing
            }
            other => unreachable!("a watch opened in {other:?}"),
        }
    }

    /// A watch could not be opened: a streaming list starts again, a watch is opened again
    /// from the same resourceVersion, unless it is gone (410), when the next step lists again.
    pub(crate) fn on_watch_failed(&mut self, error: PodWatchError) -> Yielded {
        if matches!(error, PodWatchError::Api { code: 410, .. }) {
            self.phase = Phase::Empty;
        }
        Yielded::One(Err(error))
    }

    /// An event of the open watch.
    pub(crate) fn on_event(&mut self, event: PodWatchEvent) -> Yielded {
        let initial = matches!(self.phase, Phase::InitialEvents);
        match event {
            PodWatchEvent::Added(pod) | PodWatchEvent::Modified(pod) if initial => Yielded::One(Ok(Event::InitApply(pod))),
            PodWatchEvent::Deleted(_) if initial => {
                // Impossible in initial events (the API's promise); kube's watcher drops it too.
                tracing::error!("a pod deleted among a streaming list's initial events; ignored");
                Yielded::Nothing
            }
            PodWatchEvent::Bookmark { resource_version, initial_events_end } if initial => {
                if initial_events_end {
                    self.phase = Phase::Watching { resource_version };
                    Yielded::One(Ok(Event::InitDone))
                } else {
                    Yielded::Nothing
                }
            }
            PodWatchEvent::Added(pod) | PodWatchEvent::Modified(pod) => self.seen(pod, Event::Apply),
            PodWatchEvent::Deleted(pod) => self.seen(pod, Event::Delete),
            PodWatchEvent::Bookmark { resource_version, .. } => {
                self.phase = Phase::Watching { resource_version };
                Yielded::Nothing
            }
            PodWatchEvent::Error { code, message } => {
                // 410 Gone: the resourceVersion is out of the apiserver's window; list again.
                if code == 410 {
                    self.phase = Phase::Empty;
                }
                Yielded::One(Err(PodWatchError::Api { code, message }))
            }
        }
    }

    /// A watched pod: its resourceVersion is where a new watch resumes.
    fn seen(&mut self, pod: WirePod, event: fn(WirePod) -> Event<WirePod>) -> Yielded {
        match pod.0.metadata.resource_version.clone().filter(|v| !v.is_empty()) {
            Some(resource_version) => {
                self.phase = Phase::Watching { resource_version };
                Yielded::One(Ok(event(pod)))
            }
            None => {
                self.phase = Phase::Empty;
                Yielded::One(Err(PodWatchError::NoResourceVersion))
            }
        }
    }

    /// The open watch ended (the server's timeout, a closed connection, an error reading it):
    /// a streaming list not yet complete starts again; a watch resumes from the last
    /// resourceVersion seen.
    pub(crate) fn on_watch_ended(&mut self) {
        self.phase = match std::mem::replace(&mut self.phase, Phase::Empty) {
            Phase::Watching { resource_version } => Phase::Listed { resource_version },
            Phase::InitialEvents => Phase::Empty,
            other => other,
        };
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn of(headers: &http::HeaderMap) -> Self {
        let content_type = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if content_type.starts_with(PROTOBUF_CONTENT_TYPE) { Self::Protobuf } else { Self::Json }
    }
}

/// A status answer (`kind: Status`) as an error.
fn status_error(encoding: Encoding, body: Bytes, http_code: u16) -> PodWatchError {
    let decoded = match encoding {
        Encoding::Protobuf => protobuf_pods::unenvelope(body.clone())
            .ok()
            .filter(|(_, kind, _)| kind == "Status")
            .and_then(|(_, _, raw)| protobuf_pods::Status::decode(raw).ok())
            .map(|s| (s.code.map_or(http_code, |c| c as u16), s.message.unwrap_or_default())),
        Encoding::Json => serde_json::from_slice::<kube::core::Status>(&body).ok().map(|s| (s.code, s.message)),
    };
    let (code, message) = decoded.unwrap_or_else(|| (http_code, String::from_utf8_lossy(&body).into_owned()));
    PodWatchError::Api { code, message }
}

/// Decodes one page of a pod list.
fn decode_page(encoding: Encoding, body: Bytes) -> Result<PodPage, PodWatchError> {
    match encoding {
        Encoding::Protobuf => {
            let (_, kind, raw) = protobuf_pods::unenvelope(body.clone())?;
            if kind == "Status" {
                return Err(status_error(encoding, body, 500));
            }
            if kind != "PodList" {
                return Err(TranscodeError::UnexpectedKind(kind).into());
            }
            let list = protobuf_pods::PodList::decode(raw).map_err(TranscodeError::from)?;
            let meta = list.metadata.unwrap_or_default();
            let items = list.items.into_iter().map(protobuf_pods::Pod::into_wire).collect::<Result<_, _>>()?;
            Ok(PodPage { items, resource_version: meta.resource_version, continue_token: meta.r#continue })
        }
        Encoding::Json => {
            let list: kube::core::ObjectList<WirePod> = serde_json::from_slice(&body)?;
            Ok(PodPage { items: list.items, resource_version: list.metadata.resource_version, continue_token: list.metadata.continue_ })
        }
    }
}

/// Decodes one protobuf watch frame (a `metav1.WatchEvent`).
fn decode_frame(frame: Bytes) -> Result<PodWatchEvent, PodWatchError> {
    let event = protobuf_pods::WatchEvent::decode(frame).map_err(TranscodeError::from)?;
    let kind_of_event = event.r#type.unwrap_or_default();
    let (_, kind, raw) = protobuf_pods::unenvelope(event.object.and_then(|o| o.raw).unwrap_or_default())?;
    if kind == "Status" {
        let status = protobuf_pods::Status::decode(raw).map_err(TranscodeError::from)?;
        return Ok(PodWatchEvent::Error { code: status.code.unwrap_or_default() as u16, message: status.message.unwrap_or_default() });
    }
    if kind != "Pod" {
        return Err(TranscodeError::UnexpectedKind(kind).into());
    }
    let pod = protobuf_pods::Pod::decode(raw).map_err(TranscodeError::from)?;
    Ok(match kind_of_event.as_str() {
        "ADDED" => PodWatchEvent::Added(pod.into_wire()?),
        "MODIFIED" => PodWatchEvent::Modified(pod.into_wire()?),
        "DELETED" => PodWatchEvent::Deleted(pod.into_wire()?),
        "BOOKMARK" => {
            let meta = pod.metadata.unwrap_or_default();
            PodWatchEvent::Bookmark {
                initial_events_end: meta.annotations.get(INITIAL_EVENTS_END).is_some_and(|v| v == "true"),
                resource_version: meta.resource_version.unwrap_or_default(),
            }
        }
        _ => return Err(PodWatchError::UnexpectedEvent(kind_of_event)),
    })
}

/// Decodes one JSON watch line.
fn decode_line(line: &[u8]) -> Result<PodWatchEvent, PodWatchError> {
    use kube::core::WatchEvent;
    Ok(match serde_json::from_slice::<WatchEvent<WirePod>>(line)? {
        WatchEvent::Added(p) => PodWatchEvent::Added(p),
        WatchEvent::Modified(p) => PodWatchEvent::Modified(p),
        WatchEvent::Deleted(p) => PodWatchEvent::Deleted(p),
        WatchEvent::Bookmark(b) => PodWatchEvent::Bookmark {
            initial_events_end: b.metadata.annotations.get(INITIAL_EVENTS_END).is_some_and(|v| v == "true"),
            resource_version: b.metadata.resource_version,
        },
        WatchEvent::Error(e) => PodWatchEvent::Error { code: e.code, message: e.message },
    })
}

/// Splits a watch body into events as its bytes arrive: protobuf frames (a 4-byte big-endian
/// length, then that many bytes) or JSON lines.
#[derive(Debug)]
pub(crate) struct WatchDecoder {
    encoding: Encoding,
    buffered: BytesMut,
}

impl WatchDecoder {
    fn new(encoding: Encoding) -> Self {
        Self { encoding, buffered: BytesMut::new() }
    }

    fn push(&mut self, data: &[u8]) {
        self.buffered.extend_from_slice(data);
    }

    /// The next complete event, if one has arrived whole.
    fn next_event(&mut self) -> Result<Option<PodWatchEvent>, PodWatchError> {
        match self.encoding {
            Encoding::Protobuf => {
                if self.buffered.len() < 4 {
                    return Ok(None);
                }
                let len = u32::from_be_bytes([self.buffered[0], self.buffered[1], self.buffered[2], self.buffered[3]]) as usize;
                if self.buffered.len() < 4 + len {
                    return Ok(None);
                }
                self.buffered.advance(4);
                decode_frame(self.buffered.split_to(len).freeze()).map(Some)
            }
            Encoding::Json => loop {
                let Some(end) = self.buffered.iter().position(|&b| b == b'\n') else { return Ok(None) };
                let line = self.buffered.split_to(end + 1);
                if line.iter().any(|b| !b.is_ascii_whitespace()) {
                    return decode_line(&line).map(Some);
                }
            },
        }
    }

    /// Whether part of an event is left over (the body ended inside it).
    fn is_cut_short(&self) -> bool {
        self.buffered.iter().any(|b| !b.is_ascii_whitespace())
    }
}

/// An open watch: its body and the events decoded from it so far.
struct OpenWatch {
    body: kube::client::Body,
    decoder: WatchDecoder,
}

impl OpenWatch {
    /// The next event; `None` once the watch has ended.
    async fn next(&mut self) -> Option<Result<PodWatchEvent, PodWatchError>> {
        loop {
            match self.decoder.next_event() {
                Ok(Some(event)) => return Some(Ok(event)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            match tokio::time::timeout(WATCH_IDLE, self.body.frame()).await {
                Err(_) => return Some(Err(PodWatchError::Idle(WATCH_IDLE))),
                Ok(None) if self.decoder.is_cut_short() => {
                    return Some(Err(TranscodeError::Truncated(self.decoder.buffered.len()).into()));
                }
                Ok(None) => return None,
                Ok(Some(Err(e))) => return Some(Err(PodWatchError::Body(e.to_string()))),
                Ok(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        self.decoder.push(data);
                    }
                }
            }
        }
    }
}

/// What the watcher lists and watches.
#[derive(Clone, Debug)]
pub struct PodWatchConfig {
    pub namespace: Option<String>,
    /// List as a streaming list (else in pages).
    pub streaming: bool,
    pub page_size: u32,
}

/// Sends `request` through the client, its answer left as the apiserver sent it; an answer
/// other than 2xx is an error with the apiserver's message.
async fn send(client: &Client, request: http::Request<Vec<u8>>) -> Result<(Encoding, kube::client::Body), PodWatchError> {
    let mut request = request.map(kube::client::Body::from);
    request.extensions_mut().insert(Untranscoded);
    let response = client.send(request).await?;
    let encoding = Encoding::of(response.headers());
    let code = response.status();
    let body = response.into_body();
    if code.is_success() {
        return Ok((encoding, body));
    }
    let bytes = body.collect().await.map_err(|e| PodWatchError::Body(e.to_string()))?.to_bytes();
    Err(status_error(encoding, bytes, code.as_u16()))
}

/// The pod watch's I/O: carries out what [`PodWatch`] asks for.
struct Driver {
    client: Client,
    requests: kube::core::Request,
    page_size: u32,
    watch: PodWatch,
    open: Option<OpenWatch>,
}

impl Driver {
    async fn step(&mut self) -> Yielded {
        match self.watch.next() {
            Next::List { continue_token } => {
                let params = ListParams { limit: Some(self.page_size), continue_token, ..Default::default() };
                match list(&self.client, &self.requests, &params).await {
                    Ok(page) => self.watch.on_page(page),
                    Err(e) => self.watch.on_list_failed(e),
                }
            }
            Next::Watch { resource_version, initial_events } => {
                let params = WatchParams {
                    bookmarks: true,
                    send_initial_events: initial_events,
                    timeout: Some(WATCH_TIMEOUT_SECONDS),
                    ..Default::default()
                };
                match open_watch(&self.client, &self.requests, &params, &resource_version).await {
                    Ok(open) => {
                        self.open = Some(open);
                        self.watch.on_watch_opened()
                    }
                    Err(e) => self.watch.on_watch_failed(e),
                }
            }
            Next::Read => {
                let event = match self.open.as_mut() {
                    Some(open) => open.next().await,
                    None => None,
                };
                match event {
                    Some(Ok(event)) => self.watch.on_event(event),
                    Some(Err(e)) => {
                        self.open = None;
                        self.watch.on_watch_ended();
                        Yielded::One(Err(e))
                    }
                    None => {
                        self.open = None;
                        self.watch.on_watch_ended();
                        Yielded::Nothing
                    }
                }
            }
        }
    }
}

async fn list(client: &Client, requests: &kube::core::Request, params: &ListParams) -> Result<PodPage, PodWatchError> {
    let (encoding, body) = send(client, requests.list(params)?).await?;
    let bytes = body.collect().await.map_err(|e| PodWatchError::Body(e.to_string()))?.to_bytes();
    decode_page(encoding, bytes)
}

async fn open_watch(
    client: &Client,
    requests: &kube::core::Request,
    params: &WatchParams,
    resource_version: &str,
) -> Result<OpenWatch, PodWatchError> {
    let (encoding, body) = send(client, requests.watch(params, resource_version)?).await?;
    Ok(OpenWatch { body, decoder: WatchDecoder::new(encoding) })
}

/// Lists and watches pods as [`PodWatch`] says, for ever; errors are yielded (back off on them).
pub fn pod_events(client: Client, config: PodWatchConfig) -> impl Stream<Item = Result<Event<WirePod>, PodWatchError>> + Send {
    let url = <Pod as kube::Resource>::url_path(&(), config.namespace.as_deref());
    let driver = Driver {
        client,
        requests: kube::core::Request::new(url),
        page_size: config.page_size,
        watch: PodWatch::new(config.streaming),
        open: None,
    };
    futures::stream::unfold(driver, |mut driver| async move {
        let yielded = driver.step().await;
        Some((futures::stream::iter(yielded), driver))
    })
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, resource_version: &str) -> WirePod {
        WirePod(Pod {
            metadata: ObjectMeta { name: Some(name.into()), resource_version: Some(resource_version.into()), ..Default::default() },
            ..Default::default()
        })
    }

    fn page(names: &[&str], resource_version: Option<&str>, continue_token: Option<&str>) -> PodPage {
        PodPage {
            items: names.iter().map(|n| pod(n, "1")).collect(),
            resource_version: resource_version.map(Into::into),
            continue_token: continue_token.map(Into::into),
        }
    }

    /// The events as short strings: `init`, `+name` (InitApply), `done`, `apply name`, `delete name`, `err`.
    fn said(yielded: Yielded) -> Vec<String> {
        yielded
            .into_iter()
            .map(|e| match e {
                Ok(Event::Init) => "init".to_string(),
                Ok(Event::InitApply(p)) => format!("+{}", p.0.metadata.name.unwrap()),
                Ok(Event::InitDone) => "done".to_string(),
                Ok(Event::Apply(p)) => format!("apply {}", p.0.metadata.name.unwrap()),
                Ok(Event::Delete(p)) => format!("delete {}", p.0.metadata.name.unwrap()),
                Err(e) => format!("err {e}"),
            })
            .collect()
    }

    fn watch_from(v: &str) -> Next {
        Next::Watch { resource_version: v.into(), initial_events: false }
    }

    #[test]
    fn a_paged_list_is_one_relist_then_a_watch_from_its_resource_version() {
        let mut w = PodWatch::new(false);
        assert_eq!(w.next(), Next::List { continue_token: None });
        assert_eq!(said(w.on_page(page(&["a", "b"], Some("10"), Some("t1")))), ["init", "+a", "+b"]);
        assert_eq!(w.next(), Next::List { continue_token: Some("t1".into()) });
        assert_eq!(said(w.on_page(page(&["c"], Some("10"), None))), ["+c", "done"]);
        assert_eq!(w.next(), watch_from("10"));
        assert!(said(w.on_watch_opened()).is_empty());
        assert_eq!(w.next(), Next::Read);
        assert_eq!(said(w.on_event(PodWatchEvent::Modified(pod("a", "11")))), ["apply a"]);
        assert_eq!(said(w.on_event(PodWatchEvent::Deleted(pod("b", "12")))), ["delete b"]);
        // A watch that ends resumes from the last resourceVersion seen, a bookmark's included.
        w.on_watch_ended();
        assert_eq!(w.next(), watch_from("12"));
        w.on_watch_opened();
        assert!(said(w.on_event(PodWatchEvent::Bookmark { resource_version: "20".into(), initial_events_end: false })).is_empty());
        w.on_watch_ended();
        assert_eq!(w.next(), watch_from("20"));
    }

    #[test]
    fn a_list_or_a_page_that_fails_lists_again_from_the_start() {
        let mut w = PodWatch::new(false);
        w.on_page(page(&["a"], Some("10"), Some("t1")));
        assert_eq!(said(w.on_list_failed(PodWatchError::Api { code: 410, message: "continue expired".into() })).len(), 1);
        assert_eq!(w.next(), Next::List { continue_token: None });
        // The relist starts with Init again, so the store drops what the failed one buffered.
        assert_eq!(said(w.on_page(page(&["a"], Some("11"), None))), ["init", "+a", "done"]);
        // A list without a resourceVersion cannot be watched from.
        let mut w = PodWatch::new(false);
        assert_eq!(said(w.on_page(page(&["a"], None, None))), ["err a pod list or watched pod without a resourceVersion"]);
        assert_eq!(w.next(), Next::List { continue_token: None });
    }

    #[test]
    fn gone_lists_again_other_errors_resume_the_watch() {
        let mut w = PodWatch::new(false);
        w.on_page(page(&[], Some("10"), None));
        w.on_watch_opened();
        let error = |code| PodWatchEvent::Error { code, message: "m".into() };
        assert_eq!(said(w.on_event(error(500))), ["err the apiserver answered 500: m"]);
        w.on_watch_ended();
        assert_eq!(w.next(), watch_from("10"));
        // A watch that cannot be opened is opened again from the same place...
        w.on_watch_failed(PodWatchError::Api { code: 503, message: "m".into() });
        assert_eq!(w.next(), watch_from("10"));
        // ...unless that place is gone, on the stream or in the answer to the watch itself.
        w.on_watch_opened();
        w.on_event(error(410));
        assert_eq!(w.next(), Next::List { continue_token: None });
        let mut w = PodWatch::new(false);
        w.on_page(page(&[], Some("10"), None));
        w.on_watch_failed(PodWatchError::Api { code: 410, message: "m".into() });
        assert_eq!(w.next(), Next::List { continue_token: None });
        // A watched pod without a resourceVersion cannot be resumed from: list again.
        let mut w = PodWatch::new(false);
        w.on_page(page(&[], Some("10"), None));
        w.on_watch_opened();
        let mut nameless = pod("x", "");
        nameless.0.metadata.resource_version = None;
        assert_eq!(said(w.on_event(PodWatchEvent::Added(nameless))), ["err a pod list or watched pod without a resourceVersion"]);
        assert_eq!(w.next(), Next::List { continue_token: None });
    }

    #[test]
    fn a_streaming_list_ends_at_its_bookmark_and_is_watched_on() {
        let mut w = PodWatch::new(true);
        assert_eq!(w.next(), Next::Watch { resource_version: "0".into(), initial_events: true });
        assert_eq!(said(w.on_watch_opened()), ["init"]);
        assert_eq!(said(w.on_event(PodWatchEvent::Added(pod("a", "5")))), ["+a"]);
        assert!(said(w.on_event(PodWatchEvent::Deleted(pod("a", "6")))).is_empty(), "no deletion among initial events");
        assert!(said(w.on_event(PodWatchEvent::Bookmark { resource_version: "6".into(), initial_events_end: false })).is_empty());
        assert_eq!(said(w.on_event(PodWatchEvent::Added(pod("b", "7")))), ["+b"]);
        assert_eq!(said(w.on_event(PodWatchEvent::Bookmark { resource_version: "9".into(), initial_events_end: true })), ["done"]);
        assert_eq!(said(w.on_event(PodWatchEvent::Added(pod("c", "10")))), ["apply c"]);
        // Resumed, the watch asks for no initial events.
        w.on_watch_ended();
        assert_eq!(w.next(), watch_from("10"));
        // A streaming list cut before its end starts again, with Init.
        let mut w = PodWatch::new(true);
        w.on_watch_opened();
        w.on_event(PodWatchEvent::Added(pod("a", "5")));
        w.on_watch_ended();
        assert_eq!(w.next(), Next::Watch { resource_version: "0".into(), initial_events: true });
        assert_eq!(said(w.on_watch_opened()), ["init"]);
    }

    fn frame(event: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        use crate::pod_cache::protobuf::{RawExtension, TypeMeta, Unknown, WatchEvent};
        let unknown =
            Unknown { type_meta: Some(TypeMeta { api_version: Some("v1".into()), kind: Some(kind.into()) }), raw: Some(raw.into()) };
        let enveloped = [b"k8s\0".as_slice(), &unknown.encode_to_vec()].concat();
        let bytes = WatchEvent { r#type: Some(event.into()), object: Some(RawExtension { raw: Some(enveloped.into()) }) }.encode_to_vec();
        [&(bytes.len() as u32).to_be_bytes()[..], &bytes].concat()
    }

    fn proto_pod(name: &str, resource_version: &str, annotations: &[(&str, &str)]) -> Vec<u8> {
        protobuf_pods::Pod {
            metadata: Some(protobuf_pods::ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(resource_version.into()),
                annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// The events of `bytes` pushed `chunk` bytes at a time, and the decoder after them.
    fn decoded_in_chunks(encoding: Encoding, bytes: &[u8], chunk: usize) -> (Vec<PodWatchEvent>, WatchDecoder) {
        let mut decoder = WatchDecoder::new(encoding);
        let mut events = Vec::new();
        for part in bytes.chunks(chunk) {
            decoder.push(part);
            while let Some(event) = decoder.next_event().unwrap() {
                events.push(event);
            }
        }
        (events, decoder)
    }

    #[test]
    fn protobuf_frames_decode_as_they_arrive_whole() {
        let status = protobuf_pods::Status { code: Some(410), message: Some("too old resource version".into()), ..Default::default() };
        let bytes = [
            frame("ADDED", "Pod", proto_pod("a", "5", &[])),
            frame("BOOKMARK", "Pod", proto_pod("", "9", &[(INITIAL_EVENTS_END, "true")])),
            frame("DELETED", "Pod", proto_pod("a", "10", &[])),
            frame("ERROR", "Status", status.encode_to_vec()),
        ]
        .concat();
        // A byte at a time: nothing is decoded before its frame is whole.
        let (events, mut decoder) = decoded_in_chunks(Encoding::Protobuf, &bytes, 1);
        assert_eq!(
            events,
            [
                PodWatchEvent::Added(pod("a", "5")),
                PodWatchEvent::Bookmark { resource_version: "9".into(), initial_events_end: true },
                PodWatchEvent::Deleted(pod("a", "10")),
                PodWatchEvent::Error { code: 410, message: "too old resource version".into() },
            ]
        );
        assert!(!decoder.is_cut_short());
        decoder.push(&bytes[..7]);
        assert!(decoder.next_event().unwrap().is_none() && decoder.is_cut_short());
        // What is not a pod or a status is an error, not a skipped event.
        let mut decoder = WatchDecoder::new(Encoding::Protobuf);
        decoder.push(&frame("ADDED", "Secret", Vec::new()));
        assert!(matches!(decoder.next_event(), Err(PodWatchError::Protobuf(TranscodeError::UnexpectedKind(k))) if k == "Secret"));
    }

    #[test]
    fn json_lines_decode_as_they_arrive_whole() {
        let lines = concat!(
            r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}}"#,
            "\n\n",
            r#"{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
            "\n",
            r#"{"type":"ERROR","object":{"apiVersion":"v1","kind":"Status","metadata":{},"status":"Failure","message":"gone","reason":"Expired","code":410}}"#,
            "\n",
        );
        let (events, decoder) = decoded_in_chunks(Encoding::Json, lines.as_bytes(), 17);
        assert_eq!(
            events,
            [
                PodWatchEvent::Added(pod("a", "5")),
                PodWatchEvent::Bookmark { resource_version: "9".into(), initial_events_end: true },
                PodWatchEvent::Error { code: 410, message: "gone".into() },
            ]
        );
        assert!(!decoder.is_cut_short());
    }

    #[test]
    fn a_protobuf_page_keeps_its_resource_version_and_continue_token() {
        let list = protobuf_pods::PodList {
            metadata: Some(protobuf_pods::ListMeta {
                resource_version: Some("12".into()),
                r#continue: Some("t".into()),
                remaining_item_count: None,
            }),
            items: vec![protobuf_pods::Pod::decode(proto_pod("a", "5", &[]).as_slice()).unwrap()],
        };
        let unknown = protobuf_pods::Unknown {
            type_meta: Some(protobuf_pods::TypeMeta { api_version: Some("v1".into()), kind: Some("PodList".into()) }),
            raw: Some(list.encode_to_vec().into()),
        };
        let body = Bytes::from([b"k8s\0".as_slice(), &unknown.encode_to_vec()].concat());
        assert_eq!(
            decode_page(Encoding::Protobuf, body).unwrap(),
            PodPage { items: vec![pod("a", "5")], resource_version: Some("12".into()), continue_token: Some("t".into()) }
        );
        let json = Bytes::from_static(br#"{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"12","continue":"t"},"items":[{"metadata":{"name":"a","resourceVersion":"5"}}]}"#);
        assert_eq!(
            decode_page(Encoding::Json, json).unwrap(),
            PodPage { items: vec![pod("a", "5")], resource_version: Some("12".into()), continue_token: Some("t".into()) }
        );
    }
}
