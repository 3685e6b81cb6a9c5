//! CloneSets on a real node: real containers (containerd and runc) on a kubelet of the pinned
//! Kubernetes, their images pulled from the local registry. `make test` starts the test cluster
//! with one real node when it runs as root, and then runs these tests; elsewhere they are
//! reported as ignored, with the reason. Run on a cluster without a real node, they fail naming
//! what is missing. The real node is tainted: the pods here tolerate and select it.

use std::collections::BTreeMap;

use e2e::nodes::real::{LABEL, TAINT};
use e2e::real_node::*;
use e2e::testenv::watch_until;
use e2e::workload::{Env, T, condition, env, manifest, rolled_out};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn an_in_place_image_update_restarts_the_real_container_after_the_pod_turns_unready() {
    let cluster = real_cluster().await;
    let digests = &cluster.digests;
    let e: Env = env("real-inplace").await;
    let mut spec = on_the_real_node(json!({"updateStrategy": {"type": "InPlaceIfPossible"}}));
    json_patch::merge(&mut spec, &served("nginx:1.27"));
    e.create(&manifest("web", 2, "nginx:1.27", spec)).await;
    e.wait_status("web", "2 real pods ready", |cs| rolled_out(cs, 2)).await;

    let before: BTreeMap<String, Pod> = e.active_pods("web").await.into_iter().map(|p| (p.name_any(), p)).collect();
    for p in before.values() {
        assert_eq!(
            main_status(p).image_id,
            image_id(digests, "docker.io/library/nginx:1.27"),
            "{}: imageID from the registry",
            p.name_any()
        );
        assert_eq!(http_get(&pod_ip(p)).await.trim(), "nginx 1.27", "{} serves from a real container", p.name_any());
    }
    let (seen, watch) = e2e::testenv::record_selected(&e.pods, watcher::Config::default().labels("app=web"), Pod::clone).await.unwrap();
    e.patch("web", served("nginx:1.28")).await;
    e.wait_status("web", "updated in place", |cs| rolled_out(cs, 2)).await;
    watch.abort();

    let after = e.active_pods("web").await;
    assert_eq!(after.len(), 2);
    let seen = histories(&seen.lock().unwrap());
    for p in &after {
        let name = p.name_any();
        let old = before.get(&name).unwrap_or_else(|| panic!("{name} is a new pod: not updated in place"));
        assert_eq!(p.metadata.uid, old.metadata.uid, "{name}: same pod");
        assert_eq!(pod_ip(p), pod_ip(old), "{name}: same IP");
        let (was, is) = (main_status(old), main_status(p));
        assert_ne!(is.container_id, was.container_id, "{name}: a new container");
        assert_eq!(is.restart_count, was.restart_count + 1, "{name}: restarted once");
        assert_eq!(is.image_id, image_id(digests, "docker.io/library/nginx:1.28"), "{name}: imageID is the new digest from the registry");
        assert_eq!(http_get(&pod_ip(p)).await.trim(), "nginx 1.28", "{name} serves the new image");
        // From the watch: the pod was unready, with its readiness gate False, while the old
        // container still ran, and only then did a new container appear.
        let history = &seen[&name];
        let first_new = history.iter().position(|s| s.container_id != was.container_id).expect("the new container was seen");
        assert!(
            history[..first_new].iter().any(|s| s.ready.as_deref() == Some("False") && s.in_place_ready.as_deref() == Some("False")),
            "{name}: not seen unready (InPlaceUpdateReady False) before its container was replaced: {history:#?}"
        );
        assert_eq!(history.last().map(|s| (s.ready.as_deref(), s.in_place_ready.as_deref())), Some((Some("True"), Some("True"))));
    }
}

/// With a grace period, the real container keeps running (and serving) through the grace
/// period after the pod turned unready, and is replaced only after it.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_grace_period_keeps_the_real_container_running_until_it_ends() {
    let _cluster = real_cluster().await;
    let e = env("real-grace").await;
    let mut spec =
        on_the_real_node(json!({"updateStrategy": {"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {"gracePeriodSeconds": 3}}}));
    json_patch::merge(&mut spec, &served("nginx:1.27"));
    e.create(&manifest("web", 1, "nginx:1.27", spec)).await;
    e.wait_status("web", "ready", |cs| rolled_out(cs, 1)).await;
    let pod = e.active_pods("web").await.remove(0);
    let (name, ip, first) = (pod.name_any(), pod_ip(&pod), main_status(&pod).container_id);
    e.patch("web", served("nginx:1.28")).await;
    let unready = watch_until(&e.pods, &name, T, |p| condition(p, "InPlaceUpdateReady").as_deref() == Some("False")).await.unwrap();
    assert_eq!(main_status(&unready).container_id, first);
    assert_eq!(http_get(&ip).await.trim(), "nginx 1.27", "the old container serves once the pod is unready");
    let replaced = watch_until(&e.pods, &name, T, |p| main_status(p).container_id != first).await.unwrap();
    // From the apiserver's and the kubelet's own time stamps (whole seconds, hence 1 s of slack):
    // the old container stopped no sooner than the grace period after the pod turned unready.
    let conditions = unready.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let gate = conditions.iter().find(|c| c.type_ == "InPlaceUpdateReady");
    let unready_since = gate.and_then(|c| c.last_transition_time.clone()).unwrap().0;
    let stopped =
        main_status(&replaced).last_state.and_then(|l| l.terminated).and_then(|t| t.finished_at).expect("the old container's end").0;
    let lived = stopped.duration_since(unready_since);
    assert!(
        lived >= k8s_openapi::jiff::SignedDuration::from_secs(2),
        "the old container stopped {lived:?} after the pod turned unready; grace 3 s"
    );
    assert_eq!(main_status(&replaced).restart_count, 1);
    e.wait_status("web", "rolled out", |cs| rolled_out(cs, 1)).await;
    assert_eq!(http_get(&ip).await.trim(), "nginx 1.28");
}

/// A container that prints `X`, read from template label `ver` through the downward API.
fn prints_ver(ver: &str) -> Value {
    json!({"template": {"metadata": {"labels": {"ver": ver}}, "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
        "name": "main", "image": "nginx:1.27", "command": ["/bin/sh", "-c", "echo X=$X; exec sleep 3600"],
        "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ver']"}}}]}]}}})
}

/// What container `main` of pod `name` printed, once it printed a line starting with `X=`.
async fn printed_x(pods: &Api<Pod>, name: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let log = pods.logs(name, &Default::default()).await.unwrap_or_default();
        if let Some(line) = log.lines().find(|l| l.starts_with("X=")) {
            return line.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "{name} printed no X= line within 60 s: {log:?}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// CloneSet `web` (InPlaceIfPossible) with one pod on the real node whose container printed X=1.
async fn printing_ver_1(name: &str) -> (Env, Pod) {
    let e = env(name).await;
    let mut spec = on_the_real_node(json!({"updateStrategy": {"type": "InPlaceIfPossible"}}));
    json_patch::merge(&mut spec, &prints_ver("1"));
    e.create(&manifest("web", 1, "nginx:1.27", spec)).await;
    e.wait_status("web", "ready", |cs| rolled_out(cs, 1)).await;
    let [before] = <[Pod; 1]>::try_from(e.active_pods("web").await).unwrap();
    assert_eq!(printed_x(&e.pods, &before.name_any()).await, "X=1");
    (e, before)
}

/// A label the real container reads into its env: changed under InPlaceIfPossible, the pod is
/// replaced and the new container prints the new value. Patched in place (what happened before,
/// and what Kruise does without kruise-daemon), the running container would go on with the old
/// one while the pod counted as updated.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_label_read_into_env_reaches_the_real_container_after_the_update() {
    let _cluster = real_cluster().await;
    let (e, before) = printing_ver_1("real-envmeta").await;
    let started = std::time::Instant::now();
    e.patch("web", json!({"template": {"metadata": {"labels": {"ver": "2"}}}})).await;
    e.wait_status("web", "updated", |cs| rolled_out(cs, 1)).await;
    let [after] = <[Pod; 1]>::try_from(e.active_pods("web").await).unwrap();
    assert_eq!(printed_x(&e.pods, &after.name_any()).await, "X=2", "the container sees the new value");
    assert_ne!(after.uid(), before.uid(), "a new pod");
    println!("env from metadata: the new container printed X=2 {:.1?} after the label changed", started.elapsed());
}

/// kruise-daemon (OpenKruise's node agent, built from its source outside this repository) run on
/// the real node as its DaemonSet would: its CRI socket at `/hostvarrun` (in a mount namespace of
/// its own; the empty directory is created on the host, and removed after), `NODE_NAME` set,
/// stopped when dropped.
struct KruiseDaemon {
    child: std::process::Child,
    made_mount_point: bool,
}

impl KruiseDaemon {
    const MOUNT_POINT: &str = "/hostvarrun";

    fn start(cluster: &RealCluster, binary: &str) -> Self {
        let node = &cluster.real.nodes[0];
        let made_mount_point = !std::path::Path::new(Self::MOUNT_POINT).exists();
        std::fs::create_dir_all(Self::MOUNT_POINT).unwrap();
        let script = format!(
            "mount --bind {run} {mp} && exec {binary} --socket-file=containerd.sock --addr=127.0.0.1:0 --enable-pprof=false",
            run = node.run_dir.display(),
            mp = Self::MOUNT_POINT,
        );
        let log = std::fs::File::create(cluster.dir.join("logs").join("kruise-daemon.log")).unwrap();
        let child = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .env("NODE_NAME", &node.name)
            .env("KUBECONFIG", cluster.dir.join("kubeconfig"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting kruise-daemon under unshare");
        Self { child, made_mount_point }
    }
}

impl Drop for KruiseDaemon {
    fn drop(&mut self) {
        _ = self.child.kill();
        _ = self.child.wait();
        if self.made_mount_point {
            _ = std::fs::remove_dir(Self::MOUNT_POINT);
        }
    }
}

/// With kruise-daemon on the node, a label the real container reads into its env is changed in
/// place, as Kruise does it: the same pod, its container restarted once by the daemon, and the
/// new container printing the new value; the pod counts as updated only after that.
#[tokio::test]
#[ignore = "needs kruise-daemon built from OpenKruise's source outside this repository (CLONESET_E2E_KRUISE_DAEMON=<binary>) and a real node; make test skips it without the variable"]
async fn with_kruise_daemon_a_label_read_into_env_is_refreshed_in_place() {
    let binary = std::env::var("CLONESET_E2E_KRUISE_DAEMON")
        .expect("CLONESET_E2E_KRUISE_DAEMON: the path of a kruise-daemon binary built from OpenKruise's source");
    let cluster = real_cluster().await;
    let _daemon = KruiseDaemon::start(&cluster, &binary);
    let (e, before) = printing_ver_1("real-envdaemon").await;
    watch_until(&e.pods, &before.name_any(), T, |p| p.annotations().contains_key(cloneset_operator::api::keys::RUNTIME_CONTAINERS_META))
        .await
        .expect("kruise-daemon reports on the pod");
    let started = std::time::Instant::now();
    e.patch("web", json!({"template": {"metadata": {"labels": {"ver": "2"}}}})).await;
    watch_until(&e.pods, &before.name_any(), T, |p| {
        condition(p, "InPlaceUpdateReady").as_deref() == Some("False") && p.labels().get("ver").is_some_and(|v| v == "2")
    })
    .await
    .expect("the pod is patched in place, waiting for its container");
    e.wait_status("web", "updated", |cs| rolled_out(cs, 1)).await;
    let [after] = <[Pod; 1]>::try_from(e.active_pods("web").await).unwrap();
    assert_eq!(after.uid(), before.uid(), "the same pod");
    assert_eq!(main_status(&after).restart_count, 1, "its container restarted once");
    assert_eq!(printed_x(&e.pods, &after.name_any()).await, "X=2", "the container sees the new value");
    println!("env from metadata with kruise-daemon: X=2 in place {:.1?} after the label changed", started.elapsed());
}

/// A recreate update replaces the real pods: new names and containers, the old ones stopped
/// (their containers exit on SIGTERM within the grace period).
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_recreate_update_replaces_the_real_pods() {
    let _cluster = real_cluster().await;
    let e = env("real-recreate").await;
    let mut spec = on_the_real_node(json!({"updateStrategy": {"type": "ReCreate"}}));
    json_patch::merge(&mut spec, &served("nginx:1.27"));
    e.create(&manifest("web", 2, "nginx:1.27", spec)).await;
    e.wait_status("web", "ready", |cs| rolled_out(cs, 2)).await;
    let before: BTreeMap<String, String> = e.active_pods("web").await.iter().map(|p| (p.name_any(), pod_ip(p))).collect();
    e.patch("web", served("nginx:1.28")).await;
    e.wait_status("web", "recreated", |cs| rolled_out(cs, 2)).await;
    let after = e.active_pods("web").await;
    assert_eq!(after.len(), 2);
    for p in &after {
        assert!(!before.contains_key(&p.name_any()), "{} was not recreated", p.name_any());
        assert_eq!(main_status(p).restart_count, 0);
        assert_eq!(http_get(&pod_ip(p)).await.trim(), "nginx 1.28");
    }
    for name in before.keys() {
        e2e::testenv::wait_deleted(&e.pods, name, T).await.unwrap();
    }
}

/// A pod on the real node evicted (phase Failed, reason Evicted, as the kubelet's eviction
/// leaves it) with a PVC it may reuse: the operator deletes it, and the replacement runs on the
/// real node under the same instance id with the same PVC, its volume mounted by the kubelet.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn an_evicted_real_pod_is_replaced_under_its_id_with_its_pvc() {
    let _cluster = real_cluster().await;
    let e = env("real-evicted").await;
    let mut spec = on_the_real_node(json!({"volumeClaimTemplates": [{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}));
    json_patch::merge(&mut spec, &served("nginx:1.27"));
    let mut cs = manifest("db", 1, "nginx:1.27", spec);
    let pod_spec = cs.spec.template.spec.as_mut().unwrap();
    pod_spec.containers[0].volume_mounts = Some(vec![serde_json::from_value(json!({"name": "data", "mountPath": "/data"})).unwrap()]);
    e.create(&cs).await;
    e.wait_status("db", "ready", |cs| rolled_out(cs, 1)).await;
    let victim = e.active_pods("db").await.remove(0);
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> = e.ns.api();
    let id = victim.labels()[cloneset_operator::api::keys::CLONESET_INSTANCE_ID].clone();
    let pvc_uid = pvcs.get(&format!("data-db-{id}")).await.unwrap().metadata.uid;
    let status = json!({"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}});
    e.pods.patch_status(&victim.name_any(), &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&status)).await.unwrap();
    let replacement = watch_until(&e.pods, &victim.name_any(), T, |p| {
        p.metadata.uid != victim.metadata.uid && p.status.as_ref().is_some_and(|s| s.phase.as_deref() == Some("Running"))
    })
    .await
    .unwrap_or_else(|err| panic!("{err:#}\n{}", e.operator.log_tail(30)));
    e.wait_status("db", "ready again", |cs| rolled_out(cs, 1)).await;
    assert_eq!(replacement.spec.as_ref().unwrap().node_name, victim.spec.as_ref().unwrap().node_name, "on the real node");
    assert_eq!(pvcs.get(&format!("data-db-{id}")).await.unwrap().metadata.uid, pvc_uid, "the same PVC");
    assert_eq!(http_get(&pod_ip(&e.active_pods("db").await[0])).await.trim(), "nginx 1.27", "the replacement serves");
}

/// A rollout to an image whose containers never become ready (they exit) stops at
/// maxUnavailable: the watch never sees more pods unready than that, the CloneSet reports no
/// progress past it, and the exiting containers are restarted by the kubelet, not recreated by
/// the operator.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_failing_new_version_keeps_the_rollout_within_max_unavailable() {
    let _cluster = real_cluster().await;
    let e = env("real-unavailable").await;
    let mut spec =
        on_the_real_node(json!({"updateStrategy": {"type": "ReCreate", "maxUnavailable": 1, "maxSurge": 0}, "minReadySeconds": 0}));
    json_patch::merge(&mut spec, &served("nginx:1.27"));
    e.create(&manifest("web", 3, "nginx:1.27", spec)).await;
    e.wait_status("web", "ready", |cs| rolled_out(cs, 3)).await;
    let (extremes, monitor) = e2e::workload::monitor(e.pods.clone(), "app=web".into());
    e.patch("web", served("cloneset-e2e-exits:1")).await;
    // The new pod's container exits, again and again: the rollout cannot go on.
    let deadline = std::time::Instant::now() + T;
    let crashing = loop {
        let pods = e.active_pods("web").await;
        let crashing = |p: &&Pod| reported_main(p).is_some_and(|c| c.image.contains("cloneset-e2e-exits") && c.restart_count >= 2);
        if let Some(p) = pods.iter().find(crashing) {
            break p.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no new pod restarted twice within {T:?}: {pods:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    let cs = e.clonesets.get("web").await.unwrap();
    let s = cs.status.clone().unwrap();
    assert_eq!((s.replicas, s.ready_replicas, s.updated_replicas, s.updated_ready_replicas), (3, 2, 1, 0), "{s:?}");
    let pods = e.active_pods("web").await;
    assert_eq!(pods.len(), 3);
    assert!(pods.iter().any(|p| p.metadata.uid == crashing.metadata.uid), "the crashing pod was not recreated");
    let last = main_status(&crashing).last_state.and_then(|l| l.terminated).expect("the exit is in lastState");
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    monitor.abort();
    let seen = extremes.lock().unwrap();
    assert!(seen.max_unready <= 1, "more than maxUnavailable unready at once: {seen:?}");
    assert!(seen.max_active <= 3, "maxSurge 0 exceeded: {seen:?}");
}

/// A new version whose readiness probe fails: the redis stand-in serves on 6379 while the probe
/// asks port 80. The in-place update restarts the container, which runs but never turns ready
/// (the real kubelet's `Unhealthy` event says why); the rollout stops at maxUnavailable, the
/// kubelet never restarts a container for a failing readiness probe, and the CloneSet counts the
/// pod updated but not ready. Going back to the old image finishes in place.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_failing_readiness_probe_holds_an_in_place_rollout_at_max_unavailable() {
    let _cluster = real_cluster().await;
    let e = env("real-probe").await;
    let mut spec = on_the_real_node(json!({"updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1, "maxSurge": 0}}));
    json_patch::merge(&mut spec, &served("nginx:1.27"));
    e.create(&manifest("web", 3, "nginx:1.27", spec)).await;
    e.wait_status("web", "ready", |cs| rolled_out(cs, 3)).await;
    let before: BTreeMap<String, ContainerStatus> = e.active_pods("web").await.iter().map(|p| (p.name_any(), main_status(p))).collect();
    let (extremes, monitor) = e2e::workload::monitor(e.pods.clone(), "app=web".into());
    e.patch("web", served("registry.k8s.io/e2e-test-images/redis:5.0.5-3")).await;

    // One pod runs the new image, and the real kubelet reports its probe failing after the new
    // container started. (Probes fail for a moment around every container's start and stop too:
    // the old pods' start-up, and the old container being stopped for the update.)
    let redis = |p: &Pod| reported_main(p).is_some_and(|c| c.image.contains("redis") && c.state.and_then(|s| s.running).is_some());
    let on_redis = || async { e.active_pods("web").await.into_iter().find(|p| redis(p)) };
    e2e::testenv::wait_until(T, "a pod running the new image", || async { Ok(on_redis().await.is_some()) }).await.unwrap();
    let updated = on_redis().await.expect("seen running the new image");
    let failing = updated.name_any();
    let started = main_status(&updated).state.and_then(|s| s.running).and_then(|r| r.started_at).expect("started").0;
    let events: Api<k8s_openapi::api::core::v1::Event> = e.ns.api();
    let failures = kube::api::ListParams::default().fields(&format!("reason=Unhealthy,involvedObject.name={failing}"));
    e2e::testenv::wait_until(T, "the kubelet to report the new container's readiness probe failing", || async {
        let list = events.list(&failures).await?;
        Ok(list.items.iter().any(|ev| {
            ev.message.as_deref().is_some_and(|m| m.starts_with("Readiness probe failed"))
                && ev.last_timestamp.as_ref().is_some_and(|t| t.0 > started)
        }))
    })
    .await
    .unwrap();
    // Held there: one pod updated and unready, the other two untouched.
    let cs = e.wait_status("web", "one pod updated, not ready", |cs| e2e::workload::st(cs).updated_replicas == 1).await;
    let s = e2e::workload::st(&cs);
    assert_eq!((s.replicas, s.ready_replicas, s.updated_replicas, s.updated_ready_replicas), (3, 2, 1, 0), "{s:?}");
    for p in e.active_pods("web").await {
        let (name, now) = (p.name_any(), main_status(&p));
        let was = before.get(&name).unwrap_or_else(|| panic!("{name} is a new pod: the update was not in place"));
        if name == failing {
            assert_eq!(now.restart_count, was.restart_count + 1, "{name}: restarted once, for the image, never for the probe");
            assert!(now.state.as_ref().is_some_and(|st| st.running.is_some()) && !now.ready, "{name}: running, not ready: {now:?}");
            assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
            assert_eq!(condition(&p, "InPlaceUpdateReady").as_deref(), Some("True"), "{name}: the update itself completed");
        } else {
            assert_eq!((now.container_id, now.ready), (was.container_id.clone(), true), "{name}: not touched while the rollout is held");
        }
    }

    // Back to the old image: the unready pod is updated in place again and everything is ready.
    e.patch("web", served("nginx:1.27")).await;
    e.wait_status("web", "back to nginx:1.27", |cs| rolled_out(cs, 3)).await;
    monitor.abort();
    let seen = extremes.lock().unwrap();
    assert!(seen.max_unready <= 1, "more than maxUnavailable unready at once: {seen:?}");
    assert_eq!(seen.uids.len(), 3, "no pod was recreated: {seen:?}");
}

/// The kubelet restarted (stopped, then started again with its command line): no pod is
/// recreated and no container restarted; the CloneSet stays rolled out, its pods come back
/// Ready, and the operator writes nothing to them in between.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_kubelet_restart_recreates_no_pod_and_restarts_no_container() {
    let _alone = REAL_NODE.write().await;
    let state = e2e::testenv::cluster_state().await.unwrap();
    let cluster = RealCluster::without_lock(state);
    let kubelet = format!("kubelet-{}", cluster.real.nodes[0].name);
    let e = env("real-kubelet-restart").await;
    let mut spec = on_the_real_node(json!({}));
    json_patch::merge(&mut spec, &served("nginx:1.27"));
    e.create(&manifest("web", 2, "nginx:1.27", spec)).await;
    e.wait_status("web", "ready", |cs| rolled_out(cs, 2)).await;
    let identity = |pods: &[Pod]| -> BTreeMap<String, (Option<String>, Option<String>, i32)> {
        pods.iter().map(|p| (p.name_any(), (p.metadata.uid.clone(), main_status(p).container_id, main_status(p).restart_count))).collect()
    };
    let before = identity(&e.active_pods("web").await);

    e2e::cluster::stop_component(&cluster.dir, &kubelet).unwrap();
    // While it is down the containers keep running: the pods still serve.
    for p in e.active_pods("web").await {
        assert_eq!(http_get(&pod_ip(&p)).await.trim(), "nginx 1.27", "{} serves while the kubelet is down", p.name_any());
    }
    e2e::cluster::start_component(&cluster.dir, &kubelet).unwrap();
    let node = &cluster.real.nodes[0].name;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(e.ns.client.clone());
    watch_until(&nodes, node, T, e2e::node_is_ready).await.unwrap();
    // The restarted kubelet re-probes: wait until both pods are Ready again.
    e.wait_status("web", "ready again", |cs| rolled_out(cs, 2)).await;
    assert_eq!(identity(&e.active_pods("web").await), before, "a pod was recreated or a container restarted");
}

/// InPlaceWorkloadVerticalScaling on the real node: a cpu request change is applied to the
/// running container through pods/resize (no restart, same container), and the kubelet reports
/// the new request.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn the_vertical_scaling_gate_resizes_the_real_container() {
    let _cluster = real_cluster().await;
    let e = e2e::workload::env_with("real-resize", &["--feature-gates=InPlaceWorkloadVerticalScaling=true"]).await;
    let sized = |cpu: &str| {
        json!({"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27",
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "64Mi"}}}]}}})
    };
    let mut spec = on_the_real_node(json!({"updateStrategy": {"type": "InPlaceIfPossible"}}));
    json_patch::merge(&mut spec, &sized("100m"));
    e.create(&manifest("web", 1, "nginx:1.27", spec)).await;
    e.wait_status("web", "ready", |cs| rolled_out(cs, 1)).await;
    let before = e.active_pods("web").await.remove(0);
    e.patch("web", sized("200m")).await;
    let reported_cpu = |p: &Pod| main_status(p).resources.and_then(|r| r.requests).and_then(|r| r.get("cpu").map(|q| q.0.clone()));
    let resized = watch_until(&e.pods, &before.name_any(), T, |p| reported_cpu(p).as_deref() == Some("200m")).await;
    let resized = resized.unwrap_or_else(|err| {
        panic!("{err:#}: the real kubelet did not report the resize (containerd 1.6 on cgroup v1)\n{}", e.operator.log_tail(30))
    });
    assert_eq!(resized.metadata.uid, before.metadata.uid, "resized, not recreated");
    assert_eq!(main_status(&resized).container_id, main_status(&before).container_id, "the same container");
    assert_eq!(main_status(&resized).restart_count, 0);
    e.wait_status("web", "rolled out", |cs| rolled_out(cs, 1)).await;
}

/// Scale-down with a preDelete hook on the real node: the chosen pod waits in PreparingDelete
/// with its container still running, and goes (its container stopped) once the hook is released.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_pre_delete_hook_holds_a_real_pod_until_released() {
    let _cluster = real_cluster().await;
    let e = env("real-predelete").await;
    let mut spec = on_the_real_node(json!({"lifecycle": {"preDelete": {"labelsHandler": {"example.io/hold": "true"}}}}));
    json_patch::merge(&mut spec, &served("nginx:1.27"));
    let mut cs = manifest("web", 2, "nginx:1.27", spec);
    cs.spec.template.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert("example.io/hold".into(), "true".into());
    e.create(&cs).await;
    e.wait_status("web", "ready", |cs| rolled_out(cs, 2)).await;
    e.patch("web", json!({"replicas": 1})).await;
    let state = cloneset_operator::api::keys::LIFECYCLE_STATE;
    let deadline = std::time::Instant::now() + T;
    let held = loop {
        let pods = e.active_pods("web").await;
        if let Some(p) = pods.iter().find(|p| p.labels().get(state).map(String::as_str) == Some("PreparingDelete")) {
            break p.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no pod in PreparingDelete within {T:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(http_get(&pod_ip(&held)).await.trim(), "nginx 1.27", "the held pod's container still serves");
    e.pods
        .patch(
            &held.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"example.io/hold": null}}})),
        )
        .await
        .unwrap();
    e2e::testenv::wait_deleted(&e.pods, &held.name_any(), T).await.unwrap();
    assert!(http_get(&pod_ip(&held)).await.starts_with('<'), "the container stopped with its pod");
    e.wait_status("web", "one left", |cs| rolled_out(cs, 1)).await;
}

/// The real node's kubelet stopped: the node goes NotReady (the controller-manager's 50 s grace),
/// its pods are evicted (they tolerate `unreachable` for 1 s), and the CloneSet replaces them on
/// the other node allowed to it, a simulated one; never more than replicas + maxSurge active.
/// When the kubelet comes back it stops the evicted pods' containers and they go.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_stopped_kubelet_gets_its_pods_replaced_on_another_node() {
    let _alone = REAL_NODE.write().await;
    let cluster = RealCluster::without_lock(e2e::testenv::cluster_state().await.unwrap());
    let real_node = cluster.real.nodes[0].name.clone();
    let kubelet = format!("kubelet-{real_node}");
    let e = env("real-kubelet-down").await;
    // The pods may run on the real node or on sim-node-0, and prefer the real one; their own
    // (loose) spread constraint keeps the scheduler's default spreading from splitting them.
    let placement = json!({"template": {"spec": {
        "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [real_node, "sim-node-0"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {"matchExpressions": [
                {"key": LABEL, "operator": "In", "values": ["true"]}]}}]}},
        "topologySpreadConstraints": [{"maxSkew": 10, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {"app": "web"}}}],
        "tolerations": [
            {"key": TAINT, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}],
    }}});
    e.create(&manifest("web", 2, "nginx:1.27", placement)).await;
    e.wait_status("web", "ready", |cs| rolled_out(cs, 2)).await;
    let pods = e.active_pods("web").await;
    let on_real: Vec<String> =
        pods.iter().filter(|p| p.spec.as_ref().unwrap().node_name.as_ref() == Some(&real_node)).map(|p| p.name_any()).collect();
    assert!(
        !on_real.is_empty(),
        "no pod landed on the real node: {:?}",
        pods.iter().map(|p| &p.spec.as_ref().unwrap().node_name).collect::<Vec<_>>()
    );
    let (extremes, monitor) = e2e::workload::monitor(e.pods.clone(), "app=web".into());

    e2e::cluster::stop_component(&cluster.dir, &kubelet).unwrap();
    let restart = scopeguard(|| {
        let _ = e2e::cluster::start_component(&cluster.dir, &kubelet);
    });
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(e.ns.client.clone());
    watch_until(&nodes, &real_node, std::time::Duration::from_secs(120), |n| !e2e::node_is_ready(n)).await.unwrap();
    // Evicted (deleted, but stuck terminating while the kubelet is away), then replaced.
    for name in &on_real {
        watch_until(&e.pods, name, T, |p| p.metadata.deletion_timestamp.is_some()).await.unwrap();
    }
    e.wait_status("web", "replaced", |cs| {
        let s = cs.status.clone().unwrap_or_default();
        s.ready_replicas == 2 && s.available_replicas == 2
    })
    .await;
    for p in e.active_pods("web").await {
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("sim-node-0"), "{} replaced onto the other node", p.name_any());
    }
    drop(restart);
    watch_until(&nodes, &real_node, T, e2e::node_is_ready).await.unwrap();
    for name in &on_real {
        e2e::testenv::wait_deleted(&e.pods, name, T).await.unwrap();
    }
    monitor.abort();
    let seen = extremes.lock().unwrap();
    assert!(seen.max_active <= 2, "more than replicas active at once: {seen:?}");
}

/// Runs `f` when dropped: the kubelet comes back even if an assertion fails.
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}
