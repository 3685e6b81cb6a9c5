//! What one reconcile asks of the apiserver, checked without a cluster: a [`Context`] whose client
//! is a stand-in apiserver ([`Apiserver`]) that records every request and serves it from the
//! objects it holds, over caches the test fills from those objects. The tier between the pure
//! core's unit tests and the e2e suite: a change to `reconcile.rs` or `writes.rs` that sends other
//! requests, or sends them in another order, fails here in seconds.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::cached_revision::CachedRevision;
use super::cloneset_cache::CachedCloneSet;
use super::owned_store::{OwnedStoreWriter, owned_store};
use super::reconcile::{ReconcileError, reconcile};
use super::recorder::Recorder;
use super::writes::WriteError;
use super::{Context, Stores, WorkQueue};
use crate::api::CloneSet;
use crate::pod_cache::compact::{CompactPod, Interner};

/// A request as the stand-in apiserver received it.
#[derive(Clone, Debug)]
pub(super) struct Sent {
    pub method: Method,
    /// The path without the query.
    pub path: String,
    pub body: Value,
}

impl Sent {
    /// `METHOD path`, the path from the resource on (`POST pods`, `PATCH clonesets/web/status`).
    fn line(&self) -> String {
        let path = self.path.split_once("/namespaces/ns/").map_or(self.path.as_str(), |(_, rest)| rest);
        format!("{} {path}", self.method)
    }

    fn is_event(&self) -> bool {
        self.path.contains("/events")
    }
}

/// Which requests the stand-in refuses, and with what status code.
type Refusal = Box<dyn Fn(&Sent) -> Option<u16> + Send>;

#[derive(Default)]
struct Served {
    log: Vec<Sent>,
    /// By path (a subresource's object is its parent's).
    objects: BTreeMap<String, Value>,
    version: u64,
    refuse: Option<Refusal>,
}

/// A stand-in apiserver: it records each request and serves it from the objects it holds. A
/// create stores the object (named from `generateName` if need be, given a uid); a patch merges
/// into the stored object (a strategic one merging conditions by type), or into an empty one of
/// that name; each write gets the next resourceVersion; a deletion removes the object; a read
/// answers the object or 404; a request the test refuses gets its code and a Status.
#[derive(Clone, Default)]
pub(super) struct Apiserver(Arc<Mutex<Served>>);

/// The path of the object a request is about: its own, less a subresource.
fn object_path(path: &str) -> &str {
    let parts: Vec<&str> = path.split('/').collect();
    // .../namespaces/<ns>/<resource>/<name>/<subresource>
    match parts.iter().position(|p| *p == "namespaces") {
        Some(i) if parts.len() == i + 5 => &path[..path.rfind('/').unwrap()],
        _ => path,
    }
}

/// Merges a strategic-merge or merge `patch` into `obj`: conditions by type, the rest as a JSON
/// merge patch, directives (`$setElementOrder/...`) dropped.
fn merge(obj: &mut Value, mut patch: Value) {
    if let Some(conditions) = patch.pointer_mut("/status/conditions").map(Value::take) {
        let held = obj.pointer_mut("/status/conditions").and_then(Value::as_array_mut);
        let held = match held {
            Some(h) => h,
            None => {
                obj["status"]["conditions"] = json!([]);
                obj["status"]["conditions"].as_array_mut().unwrap()
            }
        };
        for c in conditions.as_array().into_iter().flatten() {
            match held.iter_mut().find(|h| h["type"] == c["type"]) {
                Some(h) => json_patch::merge(h, c),
                None => held.push(c.clone()),
            }
        }
        patch["status"].as_object_mut().unwrap().remove("conditions");
    }
    fn drop_directives(v: &mut Value) {
        if let Value::Object(m) = v {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(drop_directives);
        }
    }
    drop_directives(&mut patch);
    json_patch::merge(obj, &patch);
}

impl Apiserver {
    /// Refuses the requests `refuse` picks, with the code it gives.
    fn refusing(refuse: impl Fn(&Sent) -> Option<u16> + Send + 'static) -> Self {
        let a = Self::default();
        a.0.lock().unwrap().refuse = Some(Box::new(refuse));
        a
    }

    /// The requests received since the last call.
    fn take(&self) -> Vec<Sent> {
        std::mem::take(&mut self.0.lock().unwrap().log)
    }

    fn put(&self, path: &str, obj: Value) {
        self.0.lock().unwrap().objects.insert(path.to_string(), obj);
    }

    /// The object at `path`, if held.
    fn get(&self, path: &str) -> Option<Value> {
        self.0.lock().unwrap().objects.get(path).cloned()
    }

    /// The objects held under `collection` (a path).
    fn objects(&self, collection: &str) -> Vec<Value> {
        let served = self.0.lock().unwrap();
        let prefix = format!("{collection}/");
        served.objects.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).map(|(_, v)| v.clone()).collect()
    }

    fn serve(&self, sent: Sent) -> (StatusCode, Value) {
        let mut served = self.0.lock().unwrap();
        served.log.push(sent.clone());
        let failure =
            |code: u16, message: &str| json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "message": message});
        if let Some(code) = served.refuse.as_ref().and_then(|r| r(&sent)) {
            return (StatusCode::from_u16(code).unwrap(), failure(code, "refused by the test"));
        }
        let path = object_path(&sent.path).to_string();
        let not_found = || (StatusCode::NOT_FOUND, failure(404, "not found"));
        served.version += 1;
        let version = served.version.to_string();
        match sent.method {
            Method::GET => served.objects.get(&path).map_or_else(not_found, |o| (StatusCode::OK, o.clone())),
            Method::DELETE => match served.objects.remove(&path) {
                Some(_) => (StatusCode::OK, json!({"apiVersion": "v1", "kind": "Status", "status": "Success"})),
                None => not_found(),
            },
            Method::POST => {
                let mut obj = sent.body;
                let meta = &mut obj["metadata"];
                if meta.get("name").is_none_or(Value::is_null) {
                    meta["name"] = json!(format!("{}{version}", meta["generateName"].as_str().unwrap_or_default()));
                }
                let name = meta["name"].as_str().unwrap().to_string();
                meta["uid"] = json!(format!("uid-{name}"));
                meta["resourceVersion"] = json!(version);
                served.objects.insert(format!("{path}/{name}"), obj.clone());
                (StatusCode::CREATED, obj)
            }
            _ => {
                let name = path.rsplit('/').next().unwrap_or_default().to_string();
                let obj = served.objects.entry(path).or_insert_with(|| json!({"metadata": {"name": name, "uid": format!("uid-{name}")}}));
                merge(obj, sent.body);
                obj["metadata"]["resourceVersion"] = json!(version);
                (StatusCode::OK, obj.clone())
            }
        }
    }

    /// A client of this apiserver.
    pub(super) fn client(&self) -> kube::Client {
        let apiserver = self.clone();
        let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
            let apiserver = apiserver.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let sent = Sent {
                    method: parts.method,
                    path: parts.uri.path().to_string(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                let (code, body) = apiserver.serve(sent);
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .status(code)
                        .header(http::header::CONTENT_TYPE, "application/json")
                        .body(Full::new(Bytes::from(body.to_string())))
                        .unwrap(),
                )
            }
        });
        kube::Client::new(svc, "ns")
    }
}

/// The caches' writing ends, for a test to fill.
pub(super) struct Writers {
    clonesets: Writer<CachedCloneSet>,
    pods: OwnedStoreWriter<CompactPod>,
    revisions: OwnedStoreWriter<CachedRevision>,
    interner: Interner,
}

/// A Context over `client` with empty caches, and their writers (the PVC cache stays empty).
pub(super) fn context_with(client: kube::Client) -> (Context, Writers) {
    let (clonesets, cs_writer) = reflector::store();
    let (pods, pod_writer) = owned_store();
    let (pvcs, _) = owned_store();
    let (revisions, rev_writer) = owned_store();
    let (nodes, _) = reflector::store();
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let ctx = Context {
        client: client.clone(),
        config: Default::default(),
        stores: Stores { clonesets, pods, pvcs, revisions, nodes },
        scale_expectations: Default::default(),
        rv_expectations: Default::default(),
        template_revisions: Default::default(),
        dropped_field_warnings: Default::default(),
        queue: WorkQueue::with_limits(Default::default(), metrics.queue()),
        metrics,
        events: Recorder::new(client),
        resize: super::resize_support::ResizeAnswers::new(true),
        leading: Default::default(),
    };
    (ctx, Writers { clonesets: cs_writer, pods: pod_writer, revisions: rev_writer, interner: Interner::default() })
}

const CLONESETS: &str = "/apis/apps.kruise.io/v1alpha1/namespaces/ns/clonesets";
const PODS: &str = "/api/v1/namespaces/ns/pods";
const REVISIONS: &str = "/apis/apps/v1/namespaces/ns/controllerrevisions";

/// One CloneSet on a stand-in apiserver, a Context over it, and a scheduler and kubelet that run
/// every pod at once.
struct Bed {
    apiserver: Apiserver,
    ctx: Arc<Context>,
    caches: Writers,
    name: String,
}

impl Bed {
    /// `cs` held by `apiserver` and cached.
    fn new(apiserver: Apiserver, cs: &CloneSet) -> Self {
        let (ctx, caches) = context_with(apiserver.client());
        let name = cs.metadata.name.clone().unwrap();
        apiserver.put(&format!("{CLONESETS}/{name}"), serde_json::to_value(cs).unwrap());
        let mut bed = Self { apiserver, ctx: Arc::new(ctx), caches, name };
        bed.sync_caches();
        bed
    }

    /// The scheduler and kubelet run each new pod (bound, Running, Ready), and the caches catch
    /// up with the apiserver: pods, revisions and the CloneSet as it holds them, deleted pods gone.
    fn sync_caches(&mut self) {
        for mut pod in self.apiserver.objects(PODS) {
            if pod.get("status").is_none_or(Value::is_null) {
                let name = pod["metadata"]["name"].as_str().unwrap().to_string();
                pod["spec"]["nodeName"] = json!("node-1");
                pod["status"] = json!({"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"},
                ]});
                self.apiserver.put(&format!("{PODS}/{name}"), pod);
            }
        }
        let held: Vec<Pod> = self.apiserver.objects(PODS).into_iter().map(|p| serde_json::from_value(p).unwrap()).collect();
        let cs = self.cloneset();
        let w = &mut self.caches;
        let interner = &mut w.interner;
        w.pods.apply_as(Event::Init, |p: Pod| CompactPod::new(p, interner));
        for pod in held {
            w.pods.apply_as(Event::InitApply(pod), |p| CompactPod::new(p, interner));
        }
        w.pods.apply_as(Event::InitDone, |p: Pod| CompactPod::new(p, interner));
        for rev in self.apiserver.objects(REVISIONS) {
            w.revisions.apply_as(Event::Apply(serde_json::from_value(rev).unwrap()), CachedRevision::new);
        }
        w.clonesets.apply_watcher_event(&Event::Apply(CachedCloneSet::from_value(cs)));
    }

    /// The CloneSet as the apiserver holds it.
    fn cloneset(&self) -> Value {
        self.apiserver.get(&format!("{CLONESETS}/{}", self.name)).unwrap()
    }

    fn pods(&self) -> Vec<Value> {
        self.apiserver.objects(PODS)
    }

    async fn reconcile(&self) -> Result<Option<std::time::Duration>, ReconcileError> {
        reconcile(&self.ctx, &format!("ns/{}", self.name)).await
    }

    /// Reconciles until a pass sends nothing, the caches catching up after each; the request
    /// lines of each pass that sent any.
    async fn until_quiet(&mut self) -> Vec<Vec<String>> {
        let mut passes = Vec::new();
        for _ in 0..10 {
            let requeue = self.reconcile().await.unwrap();
            let sent = lines(&self.apiserver.take());
            if sent.is_empty() {
                // Quiet, and not held back waiting on an expectation.
                assert!(requeue.is_none_or(|d| d > std::time::Duration::from_secs(1)), "a quiet pass that waits: {requeue:?}");
                return passes;
            }
            self.sync_caches();
            passes.push(sent);
        }
        panic!("no quiet pass in ten: {passes:?}");
    }
}

/// Kruise's own CloneSet (v1.9.0) with `replicas`, as it is before its first reconcile: no status.
fn cloneset(replicas: i32) -> CloneSet {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/kruise-v1.9.0-objects/cloneset-in-place.yaml");
    let mut cs: CloneSet = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    cs.metadata.namespace = Some("ns".into());
    cs.spec.replicas = Some(replicas);
    cs.status = None;
    cs
}

/// The lines of `sent` but the events (sent by the recorder's own task, in its own time).
fn lines(sent: &[Sent]) -> Vec<String> {
    sent.iter().filter(|s| !s.is_event()).map(Sent::line).collect()
}

/// A new CloneSet of three: its revision, then its pods, then its status; then each new pod marked
/// ready for in-place updates and moved to Normal; then nothing. Each pod is written three times,
/// as under Kruise's manager.
#[tokio::test]
async fn a_new_cloneset_is_created_in_kruise_s_order_and_then_left_alone() {
    let mut bed = Bed::new(Apiserver::default(), &cloneset(3));
    let passes = bed.until_quiet().await;
    let first = &passes[0];
    assert_eq!(first[..4], ["POST controllerrevisions", "POST pods", "POST pods", "POST pods"], "{passes:#?}");
    assert_eq!(first.last().map(String::as_str), Some("PATCH clonesets/inplace/status"), "{passes:#?}");
    let pods = bed.pods();
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let writes: Vec<&String> = passes.iter().flatten().filter(|l| l.starts_with("PATCH pods/") && l.contains(name)).collect();
        assert_eq!(writes.len(), 2, "{name}: a patch and a status write after its create: {passes:#?}");
    }
    // The pods as Kruise makes them: its revision's hash label, an instance id, the readiness gate.
    let cs = bed.cloneset();
    let revision = cs["status"]["updateRevision"].as_str().unwrap();
    for pod in &pods {
        let (name, labels) = (pod["metadata"]["name"].as_str().unwrap(), &pod["metadata"]["labels"]);
        assert_eq!(labels["controller-revision-hash"], revision, "{name}");
        assert_eq!(format!("inplace-{}", labels["apps.kruise.io/cloneset-instance-id"].as_str().unwrap()), name);
        let gates = pod["spec"]["readinessGates"].as_array().unwrap();
        assert!(gates.contains(&json!({"conditionType": "InPlaceUpdateReady"})), "{name}: {gates:?}");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], cs["metadata"]["uid"], "{name}");
    }
    assert_eq!(cs["status"]["readyReplicas"], 3, "{}", cs["status"]);
}

/// Scaled down by one, a settled CloneSet deletes one pod and writes its status, nothing else.
#[tokio::test]
async fn a_scale_down_deletes_one_pod_and_writes_the_status() {
    let mut bed = Bed::new(Apiserver::default(), &cloneset(3));
    bed.until_quiet().await;
    let path = format!("{CLONESETS}/inplace");
    let mut cs = bed.cloneset();
    cs["spec"]["replicas"] = json!(2);
    bed.apiserver.put(&path, cs);
    bed.sync_caches();
    let passes = bed.until_quiet().await;
    let all: Vec<&String> = passes.iter().flatten().collect();
    assert_eq!(all.iter().filter(|l| l.starts_with("DELETE pods/")).count(), 1, "{all:?}");
    assert!(all.iter().all(|l| l.starts_with("DELETE pods/") || *l == "PATCH clonesets/inplace/status"), "{all:?}");
    assert_eq!(bed.pods().len(), 2);
    assert_eq!(bed.cloneset()["status"]["replicas"], 2);
}

/// A refused pod create (a quota, say) is a value with a next step: the status gets FailedScale
/// with the apiserver's message, a Warning event says FailedCreate, and the pass fails with the
/// refusal so the worker retries it with backoff. Nothing is created after the refusal.
#[tokio::test]
async fn a_refused_create_sets_failed_scale_and_fails_the_pass() {
    let apiserver = Apiserver::refusing(|s| (s.method == Method::POST && s.path == PODS).then_some(403));
    let bed = Bed::new(apiserver, &cloneset(3));
    let error = bed.reconcile().await.expect_err("the pass fails");
    assert!(matches!(&error, ReconcileError::Write(WriteError::Api(kube::Error::Api(s))) if s.code == 403), "{error:?}");
    let mut sent = bed.apiserver.take();
    assert_eq!(lines(&sent), ["POST controllerrevisions", "POST pods", "PATCH clonesets/inplace/status"]);
    let status = &sent.iter().rfind(|s| s.line() == "PATCH clonesets/inplace/status").unwrap().body["status"];
    let failed: Vec<&Value> = status["conditions"].as_array().unwrap().iter().filter(|c| c["type"] == "FailedScale").collect();
    assert_eq!(failed.len(), 1, "{status}");
    assert!(failed[0]["message"].as_str().unwrap().contains("refused by the test"), "{status}");
    // The event is sent by the recorder's own task, maybe already: a polled deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(e) = sent.iter().find(|s| s.is_event() && s.body["reason"] == "FailedCreate") {
            assert_eq!(e.body["type"], "Warning");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no FailedCreate event");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        sent.extend(bed.apiserver.take());
    }
}
