//! What one cached pod costs the operator's heap: the figure a platform team sizes the manager
//! by (about 11 KB per pod when the cache held decoded `Pod`s). Its own test binary, because it
//! counts every allocation of the process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use cloneset_operator::controller::owned_store::{Held, owned_store};
use cloneset_operator::controller::without_managed_fields;
use cloneset_operator::pod_cache::compact::{CompactPod, Interner};
use cloneset_operator::pod_cache::fields::keep_read_fields;
use cloneset_operator::pod_cache::wire::WirePod;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::watcher::Event;

/// Bytes the process holds on its heap, as asked for (the allocator's own overhead comes on
/// top: glibc rounds each block up to 16 bytes and adds 8).
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Allocations made since the process started.
static ALLOCATIONS: AtomicIsize = AtomicIsize::new(0);
/// What [`LIVE`]'s blocks take in glibc's heap: each rounded up with its 8-byte header to a
/// multiple of 16, at least 32. Many small blocks cost more than their sizes say.
static CHUNKS: AtomicIsize = AtomicIsize::new(0);
/// Blocks allocated and not yet freed.
static BLOCKS: AtomicIsize = AtomicIsize::new(0);

fn chunk(size: usize) -> isize {
    ((size + 8).div_ceil(16) * 16).max(32) as isize
}

thread_local! {
    /// Bytes this thread allocated less what it freed: unlike [`LIVE`], deaf to the test
    /// harness's other threads (a correlator sample once read 648 KiB short because of them).
    static THREAD_LIVE: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
    /// Allocations this thread made, deaf to the harness's other threads likewise.
    static THREAD_ALLOCATIONS: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
}

fn thread_live() -> isize {
    THREAD_LIVE.with(std::cell::Cell::get)
}

/// Held by each test: the counts are the whole process's, so the tests run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

struct Counting;

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        CHUNKS.fetch_add(chunk(layout.size()), Ordering::Relaxed);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        let _ = THREAD_LIVE.try_with(|l| l.set(l.get() + layout.size() as isize));
        let _ = THREAD_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        CHUNKS.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        let _ = THREAD_LIVE.try_with(|l| l.set(l.get() - layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A pod as Kruise v1.9.0 left it after an in-place update on a real cluster (the golden
/// object): an update-state annotation, seven conditions, a last state.
fn golden_pod() -> Pod {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/kruise-v1.9.0-objects/pod-after-in-place-update.yaml"))
            .expect("the golden pod");
    serde_saphyr::from_str(&text).expect("decodes")
}

/// The golden pod as the `i`th pod of CloneSet `c`: its own name, UID, instance id, container
/// ID and IP; its CloneSet's owner reference.
fn pod(base: &Pod, c: usize, i: usize) -> Pod {
    let mut p = base.clone();
    let name = format!("cs-{c:04}-{i:05}");
    p.metadata.name = Some(name.clone());
    p.metadata.uid = Some(format!("afe506fc-d951-4ddc-{c:04}-{i:012}"));
    p.metadata.resource_version = Some(format!("{}", 100_000 + c * 100 + i));
    p.metadata.labels.as_mut().unwrap().insert("apps.kruise.io/cloneset-instance-id".into(), format!("{i:05}"));
    let owner = &mut p.metadata.owner_references.as_mut().unwrap()[0];
    owner.name = format!("cs-{c:04}");
    owner.uid = format!("6c4846ec-ff30-4d6a-b9c7-{c:012}");
    let status = p.status.as_mut().unwrap();
    status.pod_ip = Some(format!("10.{}.{}.{}", c / 256, c % 256, i));
    status.container_statuses.as_mut().unwrap()[0].container_id = Some(format!("containerd://{c:032}{i:032}"));
    p
}

const CLONESETS: usize = 100;
const PODS_EACH: usize = 40;

/// The golden pod as its CloneSet created it, before any update: no update-state annotation,
/// no restart.
fn fresh_pod() -> Pod {
    let mut p = golden_pod();
    p.metadata.annotations = None;
    let status = &mut p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
    status.last_state = Some(Default::default());
    status.restart_count = 0;
    p
}

/// Heap bytes per pod of a store holding `CLONESETS` × `PODS_EACH` pods like `base`, index
/// included: as asked for, as glibc's chunks hold them, and in how many blocks (hundredths).
fn heap_per_pod<H: Held>(base: Pod, hold: impl Fn(&mut Interner, Pod) -> H) -> (isize, isize, isize) {
    let pods: Vec<Pod> = (0..CLONESETS).flat_map(|c| (0..PODS_EACH).map(move |i| (c, i))).map(|(c, i)| pod(&base, c, i)).collect();
    let (before, chunks_before, blocks_before) =
        (LIVE.load(Ordering::SeqCst), CHUNKS.load(Ordering::SeqCst), BLOCKS.load(Ordering::SeqCst));
    let (store, mut writer) = owned_store::<H>();
    let mut interner = Interner::default();
    writer.apply_as(Event::Init, |p| hold(&mut interner, p));
    for p in pods.iter().cloned() {
        writer.apply_as(Event::InitApply(p), |p| hold(&mut interner, p));
    }
    writer.apply_as(Event::InitDone, |p| hold(&mut interner, p));
    // Each pod's Pod was freed as it was compacted: what stays is the store, index and interner.
    let held = LIVE.load(Ordering::SeqCst) - before;
    let chunks = CHUNKS.load(Ordering::SeqCst) - chunks_before;
    let blocks = BLOCKS.load(Ordering::SeqCst) - blocks_before;
    assert_eq!(store.owned_by("6c4846ec-ff30-4d6a-b9c7-000000000007").len(), PODS_EACH);
    let pods = (CLONESETS * PODS_EACH) as isize;
    (held / pods, chunks / pods, blocks * 100 / pods)
}

/// The target is 2 KB of resident memory per cached pod at 20,000 pods; the heap is
/// most of it. Decoded `Pod`s held these pods at 8.8 KB of heap each, stripped; compact pods
/// with their own containers, owners and status block 1,314 and 1,624 bytes, before the pods
/// of a revision shared them, and 818 and 1,128 (975 and 1,359 in glibc's chunks) with a block
/// for each of their own strings.
#[test]
fn a_cached_pod_costs_a_tenth_of_a_decoded_one() {
    let _alone = alone();
    let (fresh, fresh_chunks, fresh_blocks) = heap_per_pod(fresh_pod(), |i, p| CompactPod::new(p, i));
    let (updated, updated_chunks, updated_blocks) = heap_per_pod(golden_pod(), |i, p| CompactPod::new(p, i));
    println!(
        "heap per cached pod, store and owner index included: {fresh} bytes as created, {updated} after an in-place update \
         ({fresh_chunks} and {updated_chunks} in glibc's chunks; {} and {} blocks)",
        fresh_blocks as f64 / 100.0,
        updated_blocks as f64 / 100.0
    );
    assert!(fresh <= 850, "{fresh} bytes of heap per cached pod as created");
    assert!(updated <= 1150, "{updated} bytes of heap per cached pod after an in-place update");
}

/// The fresh pod with a container requesting resources; with `reported`, as a kubelet reports
/// such a container since in-place resize (Kubernetes 1.33): `allocatedResources` and
/// `resources` in its status, the same in every pod of the revision.
fn requesting_pod(reported: bool) -> Pod {
    let mut p = fresh_pod();
    let requests: std::collections::BTreeMap<String, Quantity> =
        [("cpu".to_string(), Quantity("100m".into())), ("memory".to_string(), Quantity("64Mi".into()))].into();
    let resources = ResourceRequirements { requests: Some(requests.clone()), ..Default::default() };
    p.spec.as_mut().unwrap().containers[0].resources = Some(resources.clone());
    if reported {
        let status = &mut p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
        status.allocated_resources = Some(requests);
        status.resources = Some(resources);
    }
    p
}

/// What the kubelet's report of a container's resources adds to a cached pod: the same in every
/// pod of a revision, it is shared, not held by each pod.
#[test]
fn resources_reported_in_a_pod_s_status_cost_each_pod_nothing() {
    let _alone = alone();
    let (unreported, ..) = heap_per_pod(requesting_pod(false), |i, p| CompactPod::new(p, i));
    let (reported, ..) = heap_per_pod(requesting_pod(true), |i, p| CompactPod::new(p, i));
    println!("heap per cached pod with requests: {unreported} bytes before the kubelet reports them, {reported} after");
    assert!(reported <= unreported + 4, "{reported} bytes per pod with its resources reported against {unreported} without");
}

/// The pod watch's path to the cache (decoded as a `WirePod`, its managedFields dropped by the
/// watch, compacted without stripping again) costs what compacting a decoded pod does. It cost
/// about 360 bytes more per pod when the watch left an empty managedFields list behind, which
/// the compact pod kept by boxing the rest of the metadata.
#[test]
fn a_pod_cached_from_its_watch_costs_what_a_compacted_one_does() {
    let _alone = alone();
    let (compacted, ..) = heap_per_pod(fresh_pod(), |i, p| CompactPod::new(p, i));
    let (watched, ..) = heap_per_pod(fresh_pod(), |i, mut p| {
        keep_read_fields(&mut p);
        let mut event = WirePod(p);
        without_managed_fields(&mut event);
        CompactPod::from_wire(event, i)
    });
    println!("heap per cached pod: {compacted} bytes compacted from a Pod, {watched} as the pod watch caches it");
    assert!(watched <= compacted, "{watched} bytes per pod from the watch against {compacted}");
}

/// (allocations, bytes) decoding `text` as a `T` takes.
fn decoding_cost<T: serde::de::DeserializeOwned>(text: &str) -> (isize, isize) {
    // This thread's counts: the harness's other threads once made the shares fail.
    let allocations = || THREAD_ALLOCATIONS.with(std::cell::Cell::get);
    let (n, live) = (allocations(), thread_live());
    let value: T = serde_json::from_str(text).expect("decodes");
    let cost = (allocations() - n, thread_live() - live);
    drop(value);
    cost
}

/// A pod event is decoded without what the cache would drop: its managedFields, the spec the
/// controller never reads (volumes, tolerations, mounts, policies) and the status's IP lists and
/// mounts are skipped, not decoded and then dropped, on every pod event. The pod is one of the
/// soak's, as kube-apiserver sent it (its creator's, its status writer's and the simulated
/// kubelet's managedFields entries). Skipping managedFields alone took 108 allocations (47%) and
/// 16.7 KB; skipping the spec too, 78 (34%) and 9.9 KB.
#[test]
fn a_pod_event_is_decoded_without_what_the_cache_drops() {
    let _alone = alone();
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pod-with-managed-fields.json")).unwrap();
    let (pod_allocations, pod_bytes) = decoding_cost::<Pod>(&text);
    let (wire_allocations, wire_bytes) = decoding_cost::<WirePod>(&text);
    println!(
        "decoding a pod event: {pod_allocations} allocations / {pod_bytes} bytes as a Pod, {wire_allocations} / {wire_bytes} as the watch decodes it"
    );
    assert!(wire_allocations * 3 <= pod_allocations, "{wire_allocations} allocations against {pod_allocations}");
    assert!(wire_bytes * 3 <= pod_bytes, "{wire_bytes} bytes against {pod_bytes}");
}

/// A relist (every watch relists when kube-apiserver restarts) of pods that did not change
/// keeps the cached pods it holds instead of compacting each again: what it allocates per pod is
/// the new index's entry, not a second cache filled while the first is still held.
#[test]
fn a_relist_of_unchanged_pods_does_not_build_the_cache_again() {
    let _alone = alone();
    let base = fresh_pod();
    let pods: Vec<Pod> = (0..CLONESETS).flat_map(|c| (0..PODS_EACH).map(move |i| (c, i))).map(|(c, i)| pod(&base, c, i)).collect();
    let (store, mut writer) = owned_store::<CompactPod>();
    let mut interner = Interner::default();
    let mut relist = |pods: Vec<Pod>| {
        writer.apply_as(Event::Init, |p| CompactPod::new(p, &mut interner));
        for p in pods {
            writer.apply_as(Event::InitApply(p), |p| CompactPod::new(p, &mut interner));
        }
        writer.apply_as(Event::InitDone, |p| CompactPod::new(p, &mut interner));
    };
    let count = pods.len();
    // The second relist's pods are decoded before the count starts, as the watcher hands them
    // over, and freed as they are applied.
    let before_copy = LIVE.load(Ordering::SeqCst);
    let again = pods.clone();
    let copy_bytes = LIVE.load(Ordering::SeqCst) - before_copy;
    relist(pods);
    let (n, live) = (ALLOCATIONS.load(Ordering::SeqCst), LIVE.load(Ordering::SeqCst));
    relist(again);
    let per_pod = (ALLOCATIONS.load(Ordering::SeqCst) - n) / count as isize;
    let growth = LIVE.load(Ordering::SeqCst) - (live - copy_bytes);
    println!("a relist of {count} unchanged pods: {per_pod} allocations per pod, heap {growth:+} bytes");
    assert_eq!(store.owned_by("6c4846ec-ff30-4d6a-b9c7-000000000007").len(), PODS_EACH);
    assert!(per_pod <= 5, "{per_pod} allocations per relisted pod (13 when each is compacted again)");
    assert!(growth.abs() < 64 * 1024, "the heap grew {growth} bytes over a relist that changed nothing");
}

/// A cached ControllerRevision holds its data as the bytes revisions are compared by, not as a
/// JSON tree, and of the annotations Kruise copies onto it from its CloneSet (the whole
/// last-applied configuration among them) only the one a reconcile reads.
#[test]
fn a_cached_revision_costs_a_fraction_of_a_decoded_one() {
    use cloneset_operator::controller::cached_revision::CachedRevision;
    use k8s_openapi::api::apps::v1::ControllerRevision;
    #[derive(serde::Deserialize)]
    struct List {
        items: Vec<ControllerRevision>,
    }
    let _alone = alone();
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/kruise-v1.9.0-objects/controllerrevisions-canary.yaml"))
            .expect("the golden revisions");
    let revisions = serde_saphyr::from_str::<List>(&text).expect("decodes").items;
    for revision in revisions {
        let start = thread_live();
        let decoded = revision.clone();
        let decoded_bytes = thread_live() - start;
        let start = thread_live();
        let cached = CachedRevision::new(revision.clone());
        let cached_bytes = thread_live() - start;
        println!(
            "revision {}: {decoded_bytes} bytes decoded, {cached_bytes} cached",
            revision.metadata.name.as_deref().unwrap_or_default()
        );
        assert!(cached_bytes * 3 <= decoded_bytes, "{cached_bytes} bytes cached against {decoded_bytes} decoded");
        drop((decoded, cached));
    }
}

/// A cached CloneSet keeps its pod template as JSON text: k8s-openapi's decoded template (a
/// `Container` alone is 2,120 bytes before any of its strings) is what made a CloneSet cost
/// 6.5 KB of heap with the bench's one-container template (6.8 KB a CloneSet in a heap profile at
/// 100,000 pods). Measured on Kruise's golden CloneSet and on the same with a template using
/// more of the pod spec (two containers with env, resources, a probe, volumes).
#[test]
fn a_cached_cloneset_keeps_its_template_as_text() {
    use cloneset_operator::api::CloneSet;
    use cloneset_operator::controller::cloneset_cache::CachedCloneSet;
    let _alone = alone();
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/kruise-v1.9.0-objects/cloneset-in-place.yaml"))
        .expect("the golden CloneSet");
    let golden: serde_json::Value = serde_saphyr::from_str(&text).expect("decodes");
    let mut rich = golden.clone();
    rich["spec"]["template"]["spec"]["containers"] = serde_json::json!([
        {"name": "main", "image": "nginx:1.26", "ports": [{"containerPort": 80}],
         "env": [{"name": "X", "value": "1"}, {"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
         "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 5},
         "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
        {"name": "sidecar", "image": "busybox", "command": ["sleep", "3600"]}]);
    rich["spec"]["template"]["spec"]["volumes"] = serde_json::json!([{"name": "data", "emptyDir": {}}]);
    // The Go encoding schema the cache reads dropped fields with is parsed once per process (the
    // revisions need it anyway): not a cost of any one CloneSet.
    cloneset_operator::core::gojson::dropped_fields(&serde_json::json!({}), "");
    for (name, value) in [("golden", golden), ("richer template", rich)] {
        let json = value.to_string();
        let start = thread_live();
        // As the cache held it before: decoded whole, in an Arc.
        let decoded: std::sync::Arc<CloneSet> = std::sync::Arc::new(serde_json::from_str(&json).expect("decodes"));
        let decoded_bytes = thread_live() - start;
        let start = thread_live();
        let cached: CachedCloneSet = serde_json::from_str(&json).expect("decodes");
        let cached_bytes = thread_live() - start;
        let CachedCloneSet::Decoded(compact) = &cached else { panic!("{name} decodes") };
        let text = compact.template.len() as isize;
        println!("{name}: {decoded_bytes} bytes decoded, {cached_bytes} cached (the template's text {text})");
        assert!(cached_bytes * 10 <= decoded_bytes * 7, "{name}: {cached_bytes} bytes cached against {decoded_bytes} decoded");
        drop((decoded, cached));
    }
}

/// The event correlator remembers at most client-go's two caches of 4,096 entries, whatever
/// the number of distinct events: in a soak it fills them over about 100 minutes (one entry per
/// pod a CloneSet's events name, until ten distinct messages within ten minutes are combined),
/// which is the heap-in-use growth a soak shows before it levels off. Full, they held 6.25 MB
/// while they kept each key's strings, and 2.25 MB keyed by 64-bit digests.
#[test]
fn the_event_correlator_holds_at_most_its_two_caches() {
    use cloneset_operator::core::events::{EventCorrelator, NewEvent};
    let _alone = alone();
    let live = thread_live();
    let mut correlator = EventCorrelator::default();
    let start = k8s_openapi::jiff::Timestamp::from_second(1_795_636_149).unwrap();
    let mut held = Vec::new();
    for i in 0..48_000_i64 {
        // 100 CloneSets; each is a new object every 900 events, so none reaches the ten
        // distinct messages that would combine its events: every event is a new entry, and
        // every object keeps nine messages (both caches full after 4,096 x 9 events).
        let key = format!("CloneSet/e2e-bench-soak/soak-{:04}/6c4846ec-ff30-4d6a-b9c7-{:012}", i % 100, i % 100 + (i / 900) * 100);
        let message = format!("succeed to create pod soak-{:04}-{i:05}", i % 100);
        let event = NewEvent { object_key: &key, object_name: "soak", type_: "Normal", reason: "SuccessfulCreate", message: &message };
        correlator.correlate(&event, start + k8s_openapi::jiff::SignedDuration::from_millis(i * 1500));
        if (i + 1) % 8000 == 0 {
            held.push(thread_live() - live);
        }
    }
    println!("event correlator: bytes held after every 8,000 distinct events: {held:?}");
    let full = held[held.len() - 2];
    assert!(held[held.len() - 1] <= full + full / 20, "{held:?}: grows past its caches");
    assert!(full <= 3 << 20, "{full} bytes for 2 x 4,096 entries");
}
