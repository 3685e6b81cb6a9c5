//! The simulated kubelet, observed through the real apiserver: one test per behaviour a CloneSet
//! controller depends on.

use std::time::{Duration, Instant};

use e2e::nodes::simulated::{ANNOTATION_NEVER_READY, ANNOTATION_STARTUP_DELAY, NODE_LABEL};
use e2e::testenv::{self, TEST_MAX_GRACE_PERIOD, TEST_RESTART_DELAY, TestNamespace, wait_deleted, wait_until, watch_until};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;

const T: Duration = Duration::from_secs(60);

fn pod(name: &str, containers: serde_json::Value, extra_spec: serde_json::Value, annotations: serde_json::Value) -> Pod {
    let mut spec = json!({"containers": containers, "terminationGracePeriodSeconds": 1});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(extra.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}, "spec": spec})).unwrap()
}

fn simple_pod(name: &str, image: &str) -> Pod {
    pod(name, json!([{"name": "app", "image": image}]), json!({}), json!({}))
}

fn condition(p: &Pod, type_: &str) -> Option<String> {
    p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

fn is_ready(p: &Pod) -> bool {
    condition(p, "Ready").as_deref() == Some("True")
}

fn is_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn statuses(p: &Pod) -> Vec<ContainerStatus> {
    p.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default()
}

async fn set_condition(pods: &Api<Pod>, name: &str, type_: &str, status: &str) {
    let patch = json!({"status": {"conditions": [{"type": type_, "status": status, "reason": "Test"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();
}

#[tokio::test]
async fn three_nodes_are_ready_and_their_leases_are_renewed() {
    let client = testenv::client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let sim_nodes = nodes.list(&ListParams::default().labels(NODE_LABEL)).await.unwrap().items;
    assert!(sim_nodes.len() >= 3, "expected at least 3 simulated nodes, found {}", sim_nodes.len());
    for n in &sim_nodes {
        assert!(e2e::node_is_ready(n), "node {} is not Ready", n.name_any());
        assert!(n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_none_or(|t| t.is_empty()), "node {} is tainted", n.name_any());
    }
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    let name = sim_nodes[0].name_any();
    let renew = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone()).map(|t| t.0);
    let first = renew(&leases.get(&name).await.unwrap()).expect("lease has a renewTime");
    wait_until(Duration::from_secs(30), "the node lease to be renewed", || async {
        Ok(renew(&leases.get(&name).await?).is_some_and(|t| t > first))
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn scheduled_pod_runs_with_kubelet_like_container_statuses() {
    let ns = TestNamespace::create("running").await.unwrap();
    let pods: Api<Pod> = ns.api();
    let containers = json!([{"name": "web", "image": "nginx:1.27"}, {"name": "side", "image": "busybox:1.36"}]);
    pods.create(&PostParams::default(), &pod("a", containers.clone(), json!({}), json!({}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("b", containers, json!({}), json!({}))).await.unwrap();
    let a = watch_until(&pods, "a", T, |p| is_running(p) && is_ready(p)).await.unwrap();
    let b = watch_until(&pods, "b", T, |p| is_running(p) && is_ready(p)).await.unwrap();

    let status = a.status.as_ref().unwrap();
    assert!(status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()), "pod has an IP");
    assert!(a.spec.as_ref().unwrap().node_name.as_deref().is_some_and(|n| n.starts_with("sim-node-")));
    let (sa, sb) = (statuses(&a), statuses(&b));
    assert_eq!(sa.len(), 2);
    for (s, image) in sa.iter().zip(["nginx:1.27", "busybox:1.36"]) {
        assert_eq!(s.image, image);
        let digest = s.image_id.split_once("@sha256:").map(|(_, d)| d).unwrap_or_default();
        assert!(digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()), "imageID {:?} is digest-shaped", s.image_id);
        assert!(s.container_id.as_deref().is_some_and(|id| id.starts_with("containerd://")));
        assert_eq!(s.started, Some(true));
        assert!(s.ready);
        assert_eq!(s.restart_count, 0);
        assert!(s.state.as_ref().unwrap().running.is_some());
    }
    assert_ne!(sa[0].image_id, sa[1].image_id, "different images have different imageIDs");
    assert_eq!(sa[0].image_id, sb[0].image_id, "the same image has the same imageID on another pod");
    assert_ne!(sa[0].container_id, sb[0].container_id, "containerIDs are per container instance");
    assert_ne!(a.status.as_ref().unwrap().pod_ip, b.status.as_ref().unwrap().pod_ip, "pods get distinct IPs");
}

#[tokio::test]
async fn ready_is_recomputed_when_a_readiness_gate_condition_changes() {
    let ns = TestNamespace::create("gates").await.unwrap();
    let pods: Api<Pod> = ns.api();
    let p = pod(
        "gated",
        json!([{"name": "app", "image": "nginx:1.27"}]),
        json!({"readinessGates": [{"conditionType": "InPlaceUpdateReady"}]}),
        json!({}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();

    // Containers ready but the gate's condition is missing: not Ready.
    let p = watch_until(&pods, "gated", T, |p| condition(p, "ContainersReady").as_deref() == Some("True")).await.unwrap();
    assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
    let reason = p.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready").unwrap().reason.clone();
    assert_eq!(reason.as_deref(), Some("ReadinessGatesNotReady"));

    set_condition(&pods, "gated", "InPlaceUpdateReady", "True").await;
    watch_until(&pods, "gated", T, is_ready).await.unwrap();

    set_condition(&pods, "gated", "InPlaceUpdateReady", "False").await;
    let p = watch_until(&pods, "gated", T, |p| condition(p, "Ready").as_deref() == Some("False")).await.unwrap();
    assert_eq!(condition(&p, "ContainersReady").as_deref(), Some("True"), "only the gate made it unready");

    set_condition(&pods, "gated", "InPlaceUpdateReady", "True").await;
    watch_until(&pods, "gated", T, is_ready).await.unwrap();
}

/// kube-apiserver's 409 answers to pod writes so far.
async fn pod_conflicts(client: &kube::Client) -> f64 {
    let text = client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    e2e::bench::apiserver_pod_conflicts(&text)
}

/// The real kubelet reads a pod before each status write and patches it with the UID as the only
/// precondition, so a change another writer makes in between never gets its write refused.
/// (With a resourceVersion precondition from its watch, these flips met conflicts.)
#[tokio::test]
async fn status_writes_meet_no_conflict_while_another_writer_changes_the_pod() {
    let client = testenv::client().await.unwrap();
    let ns = TestNamespace::create("no-conflicts").await.unwrap();
    let pods: Api<Pod> = ns.api();
    let gated = json!({"readinessGates": [{"conditionType": "InPlaceUpdateReady"}]});
    pods.create(&PostParams::default(), &pod("flipped", json!([{"name": "app", "image": "nginx:1.27"}]), gated, json!({}))).await.unwrap();
    watch_until(&pods, "flipped", T, |p| condition(p, "ContainersReady").as_deref() == Some("True")).await.unwrap();

    let before = pod_conflicts(&client).await;
    // Each flip of the gate makes the kubelet rewrite Ready while the next flip is on its way.
    for i in 0..30 {
        set_condition(&pods, "flipped", "InPlaceUpdateReady", if i % 2 == 0 { "True" } else { "False" }).await;
    }
    set_condition(&pods, "flipped", "InPlaceUpdateReady", "True").await;
    watch_until(&pods, "flipped", T, is_ready).await.unwrap();
    assert_eq!(pod_conflicts(&client).await - before, 0.0, "kube-apiserver refused pod writes as conflicts");
}

#[tokio::test]
async fn image_change_restarts_the_container_in_place() {
    let ns = TestNamespace::create("inplace").await.unwrap();
    let pods: Api<Pod> = ns.api();
    let containers = json!([{"name": "web", "image": "nginx:1.27"}, {"name": "side", "image": "busybox:1.36"}]);
    pods.create(&PostParams::default(), &pod("p", containers, json!({}), json!({}))).await.unwrap();
    let before = watch_until(&pods, "p", T, |p| is_running(p) && is_ready(p)).await.unwrap();
    let old = statuses(&before);

    let patch = json!({"spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}});
    let patched_at = Instant::now();
    pods.patch("p", &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();

    let mut saw_old_image_after_patch = false;
    let after = watch_until(&pods, "p", T, |p| {
        let web = statuses(p).into_iter().find(|s| s.name == "web").unwrap();
        let spec_image = p.spec.as_ref().unwrap().containers[0].image.clone().unwrap();
        if spec_image == "nginx:1.28" && web.image == "nginx:1.27" {
            saw_old_image_after_patch = true;
        }
        web.image == "nginx:1.28"
    })
    .await
    .unwrap();
    let restart_took = patched_at.elapsed();

    let new = statuses(&after);
    assert_eq!(new[0].restart_count, 1, "the changed container restarted once");
    assert_ne!(new[0].image_id, old[0].image_id, "imageID follows the new image");
    assert_ne!(new[0].container_id, old[0].container_id, "a new container instance");
    assert_eq!(new[1], old[1], "the unchanged container was not touched");
    assert_eq!(after.uid(), before.uid(), "same pod UID");
    assert_eq!(after.status.as_ref().unwrap().pod_ip, before.status.as_ref().unwrap().pod_ip, "same pod IP");
    assert!(saw_old_image_after_patch, "the restart was not instantaneous: the old image was reported after the patch");
    assert!(restart_took >= TEST_RESTART_DELAY.mul_f64(0.9), "restart came after the configured delay (took {restart_took:?})");
}

/// A resize through the pods/resize subresource (as `kubectl patch --subresource resize`): the
/// container reports the new resources with no restart, and no resize condition stays.
#[tokio::test]
async fn a_resize_is_applied_without_restarting_the_container() {
    let ns = TestNamespace::create("resize").await.unwrap();
    let pods: Api<Pod> = ns.api();
    let resources = |cpu: &str| json!({"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "64Mi"}});
    let containers = json!([{"name": "web", "image": "nginx:1.27", "resources": resources("100m")}]);
    pods.create(&PostParams::default(), &pod("p", containers, json!({}), json!({}))).await.unwrap();
    let reported_cpu = |p: &Pod| {
        let web = statuses(p).into_iter().find(|s| s.name == "web")?;
        Some(web.resources?.requests?.get("cpu")?.0.clone())
    };
    let before = watch_until(&pods, "p", T, |p| is_ready(p) && reported_cpu(p).as_deref() == Some("100m")).await.unwrap();

    let resize = json!({"spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "200m"}}}]}});
    pods.patch_subresource("resize", "p", &PatchParams::default(), &Patch::Strategic(resize)).await.unwrap();
    let after = watch_until(&pods, "p", T, |p| reported_cpu(p).as_deref() == Some("200m")).await.unwrap();

    let (old, new) = (&statuses(&before)[0], &statuses(&after)[0]);
    assert_eq!((new.restart_count, &new.container_id), (0, &old.container_id), "the container was not restarted");
    assert_eq!(new.allocated_resources.as_ref().and_then(|a| a.get("cpu")).map(|q| q.0.as_str()), Some("200m"));
    assert_eq!(after.uid(), before.uid(), "same pod UID");
    assert!(is_ready(&after), "still Ready");
    let conditions = after.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    assert!(conditions.iter().all(|c| c.type_ != "PodResizePending" && c.type_ != "PodResizeInProgress"), "{conditions:?}");
}

/// Two tags of one digest (the test profile's registry has `nginx:mainline-alpine` share
/// `nginx:alpine`'s, as Kruise's e2e spec "in-place update images with the same imageID" needs):
/// the container restarts for the new tag, but its imageID stays.
#[tokio::test]
async fn a_tag_sharing_the_digest_restarts_the_container_with_the_same_image_id() {
    let ns = TestNamespace::create("samedigest").await.unwrap();
    let pods: Api<Pod> = ns.api();
    pods.create(&PostParams::default(), &simple_pod("p", "docker.io/library/nginx:alpine")).await.unwrap();
    let before = watch_until(&pods, "p", T, |p| is_running(p) && is_ready(p)).await.unwrap();
    let patch = json!({"spec": {"containers": [{"name": "app", "image": "docker.io/library/nginx:mainline-alpine"}]}});
    pods.patch("p", &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();
    let after = watch_until(&pods, "p", T, |p| statuses(p)[0].image == "docker.io/library/nginx:mainline-alpine").await.unwrap();
    let (old, new) = (&statuses(&before)[0], &statuses(&after)[0]);
    assert_eq!(new.restart_count, 1, "the container restarted for the new tag");
    assert_ne!(new.container_id, old.container_id);
    assert_eq!(new.image_id, old.image_id, "one digest, one imageID");
}

#[tokio::test]
async fn deleted_pod_goes_away_after_its_grace_period() {
    let ns = TestNamespace::create("grace").await.unwrap();
    let pods: Api<Pod> = ns.api();
    let mut p = simple_pod("graceful", "nginx:1.27");
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(2);
    pods.create(&PostParams::default(), &p).await.unwrap();
    watch_until(&pods, "graceful", T, is_running).await.unwrap();

    let deleted_at = Instant::now();
    pods.delete("graceful", &DeleteParams::default()).await.unwrap();
    let terminating = pods.get("graceful").await.expect("still present while terminating");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let gone = wait_deleted(&pods, "graceful", T).await.unwrap();
    // deletionTimestamp has whole-second precision, so allow one second less than the grace.
    assert!(gone - deleted_at >= Duration::from_secs(1), "removed too early: {:?}", gone - deleted_at);
}

#[tokio::test]
async fn long_grace_periods_are_capped_for_tests() {
    let ns = TestNamespace::create("gracecap").await.unwrap();
    let pods: Api<Pod> = ns.api();
    let mut p = simple_pod("slow", "nginx:1.27");
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(3600);
    pods.create(&PostParams::default(), &p).await.unwrap();
    watch_until(&pods, "slow", T, is_running).await.unwrap();
    let deleted_at = Instant::now();
    pods.delete("slow", &DeleteParams::default()).await.unwrap();
    let gone = wait_deleted(&pods, "slow", TEST_MAX_GRACE_PERIOD + Duration::from_secs(30)).await.unwrap();
    assert!(gone - deleted_at >= TEST_MAX_GRACE_PERIOD - Duration::from_secs(1), "removed before the cap: {:?}", gone - deleted_at);
}

#[tokio::test]
async fn startup_delay_keeps_a_pod_pending_first() {
    let ns = TestNamespace::create("startup").await.unwrap();
    let pods: Api<Pod> = ns.api();
    let p = pod("late", json!([{"name": "app", "image": "nginx:1.27"}]), json!({}), json!({ANNOTATION_STARTUP_DELAY: "3s"}));
    let created = Instant::now();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let mut saw_creating = false;
    watch_until(&pods, "late", T, |p| {
        let waiting = statuses(p).first().and_then(|s| s.state.clone()).and_then(|s| s.waiting).and_then(|w| w.reason);
        saw_creating |= waiting.as_deref() == Some("ContainerCreating") && p.status.as_ref().unwrap().phase.as_deref() == Some("Pending");
        is_running(p) && is_ready(p)
    })
    .await
    .unwrap();
    assert!(saw_creating, "the pod was reported Pending/ContainerCreating before it ran");
    assert!(created.elapsed() >= Duration::from_secs(2), "ran after about the startup delay, took {:?}", created.elapsed());
}

#[tokio::test]
async fn unpullable_images_and_never_ready_pods_stay_unready() {
    let ns = TestNamespace::create("knobs").await.unwrap();
    let pods: Api<Pod> = ns.api();
    pods.create(&PostParams::default(), &simple_pod("nopull", "registry.example/unpullable:1")).await.unwrap();
    let never = pod("never", json!([{"name": "app", "image": "nginx:1.27"}]), json!({}), json!({ANNOTATION_NEVER_READY: "true"}));
    pods.create(&PostParams::default(), &never).await.unwrap();
    // A control pod created after both: once it is Ready, the others had every chance to be.
    pods.create(&PostParams::default(), &simple_pod("control", "nginx:1.27")).await.unwrap();
    watch_until(&pods, "control", T, is_ready).await.unwrap();
    let nopull = watch_until(&pods, "nopull", T, |p| !statuses(p).is_empty()).await.unwrap();
    let never = watch_until(&pods, "never", T, is_running).await.unwrap();

    let s = &statuses(&nopull)[0];
    let waiting = s.state.as_ref().and_then(|st| st.waiting.as_ref()).expect("waiting");
    assert_eq!(waiting.reason.as_deref(), Some("ErrImagePull"));
    assert!(!s.ready);
    assert!(!is_ready(&nopull));
    assert_eq!(nopull.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));

    assert!(statuses(&never).iter().all(|s| !s.ready && s.state.as_ref().unwrap().running.is_some()));
    assert!(!is_ready(&never));
}
