//! What one reconcile asks of the apiserver, checked without a cluster: a [`Context`] whose client
//! is the stand-in apiserver (`crate::stand_in`), over caches the test fills from the objects it
//! holds. The tier between the pure core's unit tests and the e2e suite: a change to the
//! reconcile (`reconcile.rs`, `revisions.rs`, `execute.rs`) or to `writes.rs` that sends other
//! requests, or sends them in another order, fails here in seconds.

use std::sync::Arc;

use http::Method;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
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
use crate::stand_in::{Apiserver, Sent};

/// The caches' writing ends, for a test to fill.
pub(super) struct Writers {
    clonesets: Writer<CachedCloneSet>,
    pods: OwnedStoreWriter<CompactPod>,
    pvcs: OwnedStoreWriter<PersistentVolumeClaim>,
    revisions: OwnedStoreWriter<CachedRevision>,
    interner: Interner,
}

/// A Context over `client` with empty caches, and their writers (the node cache stays empty).
pub(super) fn context_with(client: kube::Client) -> (Context, Writers) {
    let (clonesets, cs_writer) = reflector::store();
    let (pods, pod_writer) = owned_store();
    let (pvcs, pvc_writer) = owned_store();
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
    (ctx, Writers { clonesets: cs_writer, pods: pod_writer, pvcs: pvc_writer, revisions: rev_writer, interner: Interner::default() })
}

const CLONESETS: &str = "/apis/apps.kruise.io/v1alpha1/namespaces/ns/clonesets";
const PODS: &str = "/api/v1/namespaces/ns/pods";
const REVISIONS: &str = "/apis/apps/v1/namespaces/ns/controllerrevisions";
const PVCS: &str = "/api/v1/namespaces/ns/persistentvolumeclaims";

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
    /// up with the apiserver: pods, PVCs, revisions and the CloneSet as it holds them, deleted
    /// objects gone.
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
        w.revisions.apply_as(Event::Init, CachedRevision::new);
        for rev in self.apiserver.objects(REVISIONS) {
            w.revisions.apply_as(Event::InitApply(serde_json::from_value(rev).unwrap()), CachedRevision::new);
        }
        w.revisions.apply_as(Event::InitDone, CachedRevision::new);
        let same = |c: PersistentVolumeClaim| c;
        w.pvcs.apply_as(Event::Init, same);
        for pvc in self.apiserver.objects(PVCS) {
            w.pvcs.apply_as(Event::InitApply(serde_json::from_value(pvc).unwrap()), same);
        }
        w.pvcs.apply_as(Event::InitDone, same);
        w.clonesets.apply_watcher_event(&Event::Apply(CachedCloneSet::from_value(cs)));
    }

    /// A user's change to the CloneSet: `edit` applied to what the apiserver holds, a new
    /// generation, and the cache updated.
    fn edit(&mut self, edit: impl FnOnce(&mut Value)) {
        let mut cs = self.cloneset();
        edit(&mut cs);
        cs["metadata"]["generation"] = json!(cs["metadata"]["generation"].as_i64().unwrap_or(1) + 1);
        self.apiserver.put(&format!("{CLONESETS}/{}", self.name), cs);
        self.sync_caches();
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
    bed.edit(|cs| cs["spec"]["replicas"] = json!(2));
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

/// The pod writes (`PATCH pods/...`) among `lines`.
fn pod_patches(lines: &[String]) -> Vec<&str> {
    lines.iter().filter(|l| l.starts_with("PATCH pods/")).map(String::as_str).collect()
}

/// A new image under InPlaceIfPossible: a new revision, then each pod the update takes
/// (maxUnavailable 2 of 3) gets `InPlaceUpdateReady=False` before the patch that changes its
/// image and revision; no pod is created or deleted.
#[tokio::test]
async fn an_image_change_updates_pods_in_place_not_ready_first() {
    let mut bed = Bed::new(Apiserver::default(), &cloneset(3));
    bed.until_quiet().await;
    bed.edit(|cs| {
        cs["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
        cs["spec"]["updateStrategy"]["inPlaceUpdateStrategy"]["gracePeriodSeconds"] = json!(0);
    });
    bed.reconcile().await.unwrap();
    let sent = lines(&bed.apiserver.take());
    assert_eq!(sent.first().map(String::as_str), Some("POST controllerrevisions"), "{sent:#?}");
    assert!(!sent.iter().any(|l| l.starts_with("POST pods") || l.starts_with("DELETE pods")), "{sent:#?}");
    let patches = pod_patches(&sent);
    assert_eq!(patches.len(), 4, "two pods, two writes each: {sent:#?}");
    for patch in patches.iter().filter(|l| !l.ends_with("/status")) {
        let status = patches.iter().position(|l| *l == format!("{patch}/status"));
        assert!(status.is_some_and(|at| at < patches.iter().position(|l| l == patch).unwrap()), "status first: {sent:#?}");
    }
    let revision = bed.cloneset()["status"]["updateRevision"].as_str().unwrap().to_string();
    let updated: Vec<Value> = bed.pods().into_iter().filter(|p| p["spec"]["containers"][0]["image"] == "nginx:1.27").collect();
    assert_eq!(updated.len(), 2);
    for pod in &updated {
        assert_eq!(pod["metadata"]["labels"]["controller-revision-hash"], revision.as_str());
        let ready = pod["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "InPlaceUpdateReady").unwrap();
        assert_eq!(ready["status"], "False", "{pod}");
    }
}

/// A new image under ReCreate: each old pod is labelled `specified-delete`, then deleted, and
/// nothing else (no in-place update), and replaced by a pod of the new revision.
#[tokio::test]
async fn under_recreate_an_image_change_replaces_each_pod() {
    let mut cs = cloneset(3);
    cs.spec.update_strategy.type_ = "ReCreate".into();
    let mut bed = Bed::new(Apiserver::default(), &cs);
    bed.until_quiet().await;
    let old: Vec<String> = bed.pods().iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_string()).collect();
    bed.edit(|cs| cs["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27"));
    let all: Vec<String> = bed.until_quiet().await.concat();
    for name in &old {
        let about: Vec<&String> = all.iter().filter(|l| l.contains(&format!("pods/{name}"))).collect();
        assert_eq!(about, [&format!("PATCH pods/{name}"), &format!("DELETE pods/{name}")], "{name}: labelled, then deleted: {all:#?}");
    }
    assert_eq!(all.iter().filter(|l| l.starts_with("POST pods")).count(), 3, "{all:#?}");
    let revision = bed.cloneset()["status"]["updateRevision"].as_str().unwrap().to_string();
    let pods = bed.pods();
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        assert!(!old.iter().any(|n| pod["metadata"]["name"] == n.as_str()), "{pod}");
        assert_eq!(pod["metadata"]["labels"]["controller-revision-hash"], revision.as_str());
        assert_eq!(pod["spec"]["containers"][0]["image"], "nginx:1.27");
    }
}

/// With volumeClaimTemplates, each new pod's PVC is created before the pod, named and labelled
/// for the pod's instance, and the pod mounts it.
#[tokio::test]
async fn a_pod_s_pvc_is_created_before_the_pod() {
    let mut cs = cloneset(2);
    cs.spec.volume_claim_templates = vec![
        serde_json::from_value(json!({"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap(),
    ];
    let mut bed = Bed::new(Apiserver::default(), &cs);
    let sent = bed.apiserver.take();
    assert!(sent.is_empty());
    bed.reconcile().await.unwrap();
    let sent = bed.apiserver.take();
    let creates: Vec<(&str, &str)> = sent
        .iter()
        .filter(|s| s.method == Method::POST && !s.is_event())
        .map(|s| (s.path.rsplit('/').next().unwrap(), s.body["metadata"]["name"].as_str().unwrap_or_default()))
        .collect();
    let pods = bed.pods();
    assert_eq!(pods.len(), 2, "{creates:?}");
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let claim = format!("data-{name}");
        let pvc_at = creates.iter().position(|&(kind, n)| kind == "persistentvolumeclaims" && n == claim);
        let pod_at = creates.iter().position(|&(kind, n)| kind == "pods" && n == name);
        assert!(matches!((pvc_at, pod_at), (Some(a), Some(b)) if a < b), "{claim} before {name}: {creates:?}");
        let pvc = bed.apiserver.get(&format!("{PVCS}/{claim}")).unwrap();
        let id = &pod["metadata"]["labels"]["apps.kruise.io/cloneset-instance-id"];
        assert_eq!(&pvc["metadata"]["labels"]["apps.kruise.io/cloneset-instance-id"], id);
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        assert!(volumes.iter().any(|v| v["name"] == "data" && v["persistentVolumeClaim"]["claimName"] == claim.as_str()), "{volumes:?}");
    }
    bed.sync_caches();
    let passes = bed.until_quiet().await;
    assert!(!passes.concat().iter().any(|l| l.starts_with("POST")), "nothing created twice: {passes:#?}");
}

/// A 409 on a pod's update (the cache was behind) fails the pass as a conflict, which the worker
/// retries soon, with `FailedUpdate` in the status written on the way out; the next pass, once
/// the apiserver accepts, updates the pod.
#[tokio::test]
async fn a_conflict_on_a_pod_update_fails_the_pass_and_the_next_one_updates() {
    let conflict = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let refusing = conflict.clone();
    let apiserver = Apiserver::refusing(move |s| {
        let pod_patch = s.method == Method::PATCH && s.path.starts_with(&format!("{PODS}/")) && !s.path.ends_with("/status");
        (pod_patch && refusing.load(std::sync::atomic::Ordering::SeqCst)).then_some(409)
    });
    let mut bed = Bed::new(apiserver, &cloneset(3));
    bed.until_quiet().await;
    conflict.store(true, std::sync::atomic::Ordering::SeqCst);
    bed.edit(|cs| {
        cs["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
        cs["spec"]["updateStrategy"]["inPlaceUpdateStrategy"]["gracePeriodSeconds"] = json!(0);
    });
    let error = bed.reconcile().await.expect_err("the pass fails");
    assert!(error.is_conflict(), "{error:?}");
    let sent = bed.apiserver.take();
    let status = &sent.iter().rfind(|s| s.line() == "PATCH clonesets/inplace/status").expect("a status write").body["status"];
    let failed = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "FailedUpdate").expect("FailedUpdate");
    assert!(failed["message"].as_str().unwrap().contains("refused by the test"), "{status}");
    assert!(bed.pods().iter().all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.26"));
    conflict.store(false, std::sync::atomic::Ordering::SeqCst);
    bed.sync_caches();
    bed.reconcile().await.unwrap();
    assert_eq!(bed.pods().iter().filter(|p| p["spec"]["containers"][0]["image"] == "nginx:1.27").count(), 2);
}

/// With `revisionHistoryLimit: 1`, a third template deletes the oldest revision that no pod
/// uses and that is neither current nor the update revision, and keeps the others.
#[tokio::test]
async fn history_beyond_the_limit_is_deleted_oldest_first() {
    let mut cs = cloneset(0);
    cs.spec.revision_history_limit = Some(1);
    let mut bed = Bed::new(Apiserver::default(), &cs);
    let mut names = Vec::new();
    for image in ["nginx:1.26", "nginx:1.27", "nginx:1.28"] {
        if image != "nginx:1.26" {
            bed.edit(|cs| cs["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image));
        }
        let sent = bed.until_quiet().await.concat();
        names.push(bed.cloneset()["status"]["updateRevision"].as_str().unwrap().to_string());
        let deleted: Vec<&String> = sent.iter().filter(|l| l.starts_with("DELETE")).collect();
        match image {
            "nginx:1.28" => assert_eq!(deleted, [&format!("DELETE controllerrevisions/{}", names[0])], "{sent:#?}"),
            _ => assert!(deleted.is_empty(), "{sent:#?}"),
        }
    }
    let held: Vec<String> = bed.apiserver.objects(REVISIONS).iter().map(|r| r["metadata"]["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(held, names[1..].iter().cloned().collect::<std::collections::BTreeSet<_>>().into_iter().collect::<Vec<_>>());
}

/// A revision of another owner already holds the name the new revision hashes to: the create's
/// 409 is read as a hash collision, `collisionCount` goes up, and the revision is created under
/// the next name.
#[tokio::test]
async fn a_hash_collision_raises_collision_count_and_renames_the_revision() {
    let name = {
        let bed = Bed::new(Apiserver::default(), &cloneset(0));
        bed.reconcile().await.unwrap();
        bed.cloneset()["status"]["updateRevision"].as_str().unwrap().to_string()
    };
    let apiserver = Apiserver::default();
    let squatter = json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": 1, "data": {"other": true},
                          "metadata": {"name": name, "namespace": "ns", "uid": "other-uid"}});
    apiserver.put(&format!("{REVISIONS}/{name}"), squatter.clone());
    let bed = Bed::new(apiserver, &cloneset(0));
    bed.reconcile().await.unwrap();
    let sent = lines(&bed.apiserver.take());
    assert_eq!(
        sent,
        [
            "POST controllerrevisions".to_string(),
            format!("GET controllerrevisions/{name}"),
            "POST controllerrevisions".to_string(),
            "PATCH clonesets/inplace/status".to_string(),
        ]
    );
    let status = &bed.cloneset()["status"];
    assert_eq!(status["collisionCount"], 1, "{status}");
    let renamed = status["updateRevision"].as_str().unwrap();
    assert_ne!(renamed, name);
    assert_eq!(bed.apiserver.get(&format!("{REVISIONS}/{name}")), Some(squatter), "the other owner's revision is left alone");
    assert!(bed.apiserver.get(&format!("{REVISIONS}/{renamed}")).is_some());
}

/// A pod relabelled out of the selector is released (its owner reference to the CloneSet
/// removed, the pod kept) and a replacement is created in the same pass.
#[tokio::test]
async fn a_pod_that_no_longer_matches_is_released_and_replaced() {
    let mut bed = Bed::new(Apiserver::default(), &cloneset(2));
    bed.until_quiet().await;
    let mut pod = bed.pods().remove(0);
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    pod["metadata"]["labels"]["app"] = json!("debugging");
    pod["metadata"]["resourceVersion"] = json!("1000");
    bed.apiserver.put(&format!("{PODS}/{name}"), pod);
    bed.sync_caches();
    bed.reconcile().await.unwrap();
    let sent = lines(&bed.apiserver.take());
    assert_eq!(sent[..2], [format!("PATCH pods/{name}"), "POST pods".to_string()], "{sent:#?}");
    let released = bed.apiserver.get(&format!("{PODS}/{name}")).expect("the pod is kept");
    assert_eq!(released["metadata"]["ownerReferences"], json!([]), "{released}");
    assert_eq!(bed.pods().len(), 3);
}

/// A CloneSet gone from the cache (deleted) is forgotten without a request: what was expected
/// of it is dropped, so a CloneSet of that name created later starts clean.
#[tokio::test]
async fn a_cloneset_gone_from_the_cache_is_forgotten_without_a_request() {
    use crate::core::expectations::ObjectKind;
    let mut bed = Bed::new(Apiserver::default(), &cloneset(2));
    bed.until_quiet().await;
    let expectations = || bed.ctx.scale_expectations.lock().unwrap();
    expectations().expect_creation("ns/inplace", ObjectKind::Pod, "inplace-never-seen");
    let cached = CachedCloneSet::from_value(bed.cloneset());
    bed.caches.clonesets.apply_watcher_event(&Event::Delete(cached));
    assert_eq!(bed.reconcile().await.unwrap(), None);
    assert!(bed.apiserver.take().is_empty());
    assert_eq!(expectations().pending("ns/inplace"), (0, 0));
}
