//! The simulated kubelet held against the real one: the same scenario on both, the pods' shapes
//! as a watch sees them compared; and a real pod's network (the apiserver through its Service,
//! no route out). These need the test cluster's real node, as `make test` starts it as root.

use e2e::nodes::real::TAINT;
use e2e::real_node::*;
use e2e::testenv::watch_until;
use e2e::workload::{Env, T, condition, env, manifest, rolled_out};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};
use serde_json::json;

/// A pod on the real node reaches the apiserver through the `kubernetes` Service (in-cluster
/// configuration) and nothing beyond the run's bridge: it has no default route, so a connection
/// to an outside address fails inside the pod, before any packet. Its log comes back through
/// the apiserver from the real kubelet (`kubectl logs`).
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_real_pod_reaches_the_apiserver_through_its_service_and_has_no_route_out() {
    let cluster = real_cluster().await;
    let real = &cluster.real;
    let ns = e2e::testenv::TestNamespace::create("real-net").await.unwrap();
    let pods: Api<Pod> = ns.api();
    // 198.51.100.1 is a documentation address (RFC 5737): nothing would answer it anyway.
    let script = "ip route; \
        nc -w 3 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT </dev/null && echo apiserver: connected; \
        nc -w 3 198.51.100.1 80 </dev/null 2>&1 | sed 's/^/outside: /'; echo done; sleep 3600";
    let mut spec = on_the_real_node(json!({}))["template"]["spec"].clone();
    let containers = json!({"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": "nginx:1.27", "command": ["/bin/sh", "-c", script]}]});
    json_patch::merge(&mut spec, &containers);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "probe"}, "spec": spec})).unwrap();
    pods.create(&Default::default(), &pod).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let log = loop {
        let log = pods.logs("probe", &Default::default()).await.unwrap_or_default();
        if log.contains("done") {
            break log;
        }
        assert!(std::time::Instant::now() < deadline, "the probe did not finish within 60 s: {log}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    let b = real.network;
    assert!(log.contains("apiserver: connected"), "{log}");
    assert!(log.contains("outside: nc: can't connect to remote host (198.51.100.1): Network is unreachable"), "{log}");
    let routes: Vec<&str> = log.lines().take_while(|l| l.contains(" dev ")).collect();
    assert!(!routes.iter().any(|r| r.starts_with("default")), "a default route out of the pod: {routes:?}");
    assert!(routes.iter().any(|r| r.starts_with(&format!("{} via {}", b.service_cidr(), b.bridge_ip()))), "{routes:?}");
}

/// What a watcher can tell about a pod, normalised so that a simulated and a real node can be
/// compared: phase, the conditions a CloneSet reads, and container `main`'s state.
#[derive(Clone, Debug, PartialEq)]
struct Shape {
    phase: String,
    conditions: Vec<String>,
    state: String,
    last_state: String,
    ready: bool,
    started: Option<bool>,
    restarts: i32,
    /// Which container runs: the first one seen (0) or a later one (1, 2, ...).
    container: usize,
    image: String,
}

fn shape(p: &Pod, containers: &mut Vec<String>) -> Shape {
    let status = p.status.clone().unwrap_or_default();
    let mut conditions: Vec<String> = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| {
            ["Ready", "ContainersReady", "InPlaceUpdateReady", "PodReadyToStartContainers", "Initialized", "PodScheduled"]
                .contains(&c.type_.as_str())
        })
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    conditions.sort();
    let c = status.container_statuses.iter().flatten().find(|c| c.name == "main").cloned().unwrap_or_default();
    let kind = |s: Option<&k8s_openapi::api::core::v1::ContainerState>| match s {
        Some(s) if s.running.is_some() => "running".to_string(),
        Some(s) if s.waiting.is_some() => format!("waiting:{}", s.waiting.as_ref().unwrap().reason.clone().unwrap_or_default()),
        Some(s) if s.terminated.is_some() => {
            let t = s.terminated.as_ref().unwrap();
            format!("terminated:{}:{}", t.reason.clone().unwrap_or_default(), t.exit_code)
        }
        _ => "none".to_string(),
    };
    let id = c.container_id.clone().unwrap_or_default();
    let container = match containers.iter().position(|x| *x == id) {
        Some(i) => i,
        None if id.is_empty() => usize::MAX,
        None => {
            containers.push(id);
            containers.len() - 1
        }
    };
    Shape {
        phase: status.phase.unwrap_or_default(),
        conditions,
        state: kind(c.state.as_ref()),
        last_state: kind(c.last_state.as_ref()),
        ready: c.ready,
        started: c.started,
        restarts: c.restart_count,
        container,
        image: c.image.rsplit(':').next().unwrap_or_default().to_string(),
    }
}

/// Runs one in-place image update of a single pod and returns the shapes a watch saw, from the
/// settled pod before the update to the settled pod after it (consecutive repeats dropped), and
/// the field names of the final status of container `main`.
async fn in_place_update_as_seen(e: Env, on_real_node: bool) -> (Vec<Shape>, Vec<String>) {
    let mut spec = json!({"updateStrategy": {"type": "InPlaceIfPossible"}});
    if on_real_node {
        spec = on_the_real_node(spec);
    }
    e.create(&manifest("cmp", 1, "nginx:1.27", spec)).await;
    e.wait_status("cmp", "settled", |cs| rolled_out(cs, 1)).await;
    let name = e.active_pods("cmp").await.remove(0).name_any();
    let (pods, recorder) = e2e::testenv::record(&e.pods, &name, Pod::clone).await.unwrap();
    e.patch("cmp", json!({"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.28"}]}}})).await;
    e.wait_status("cmp", "updated in place", |cs| rolled_out(cs, 1)).await;
    // The kubelet's last status write may land after the CloneSet's: wait for the pod to settle.
    watch_until(&e.pods, &name, T, |p| {
        condition(p, "Ready").as_deref() == Some("True") && main_status(p).image.ends_with("1.28") && main_status(p).ready
    })
    .await
    .unwrap();
    recorder.abort();
    let pods = pods.lock().unwrap().clone();
    let last = serde_json::to_value(main_status(pods.last().unwrap())).unwrap();
    let fields = last.as_object().unwrap().keys().cloned().collect();
    (shapes_of(&pods), fields)
}

/// Runs `scenario` on a simulated node and on the real node at once, each in a namespace (and
/// with an operator) of its own: (simulated, real).
async fn on_both<R, Fut: Future<Output = R>>(prefix: &str, scenario: impl Fn(Env, bool) -> Fut) -> (R, R) {
    let side = |on_real_node: bool| {
        let scenario = &scenario;
        async move { scenario(env(&format!("{prefix}-{}", if on_real_node { "real" } else { "sim" })).await, on_real_node).await }
    };
    tokio::join!(side(false), side(true))
}

fn assert_same_shapes(scenario: &str, sim: &[Shape], real: &[Shape]) {
    let show = |shapes: &[Shape]| shapes.iter().map(|s| format!("  {s:?}")).collect::<Vec<_>>().join("\n");
    assert_eq!(sim, real, "{scenario}: the watch saw different sequences:\nsimulated:\n{}\nreal:\n{}", show(sim), show(real));
}

/// The shapes of one pod's observations, consecutive repeats dropped.
fn shapes_of(pods: &[Pod]) -> Vec<Shape> {
    let mut containers = Vec::new();
    let mut shapes: Vec<Shape> = Vec::new();
    for p in pods {
        let s = shape(p, &mut containers);
        if shapes.last() != Some(&s) {
            shapes.push(s);
        }
    }
    shapes
}

/// A container whose process exits 1 after a second, from the pod's creation until it has been
/// started a third time, as a watch sees it: the shapes up to that start, and for each restart
/// the time from the exit to the new container's start (the kubelet's crash-loop back-off).
async fn crash_loop_as_seen(e: Env, on_real_node: bool) -> (Vec<Shape>, Vec<std::time::Duration>) {
    let spec = if on_real_node { on_the_real_node(json!({})) } else { json!({}) };
    let (seen, recorder) = e2e::testenv::record_selected(&e.pods, watcher::Config::default().labels("app=loop"), Pod::clone).await.unwrap();
    e.create(&manifest("loop", 1, "cloneset-e2e-exits:1", spec)).await;
    let deadline = std::time::Instant::now() + T;
    let third_start = |p: &Pod| {
        let statuses = p.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
        statuses.iter().any(|c| c.restart_count == 3)
    };
    while !seen.lock().unwrap().iter().any(third_start) {
        assert!(std::time::Instant::now() < deadline, "no third restart within {T:?}: {:#?}", seen.lock().unwrap().last());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    recorder.abort();
    let mut pods = seen.lock().unwrap().clone();
    pods.truncate(pods.iter().position(third_start).expect("seen") + 1);
    // Ready only for moments at a time: the CloneSet counts it neither ready nor available.
    e.wait_status("loop", "1 replica, not ready", |cs| {
        cs.status.as_ref().is_some_and(|s| (s.replicas, s.ready_replicas, s.available_replicas, s.updated_replicas) == (1, 0, 0, 1))
    })
    .await;
    let mut backoffs = Vec::new();
    for p in pods.iter().filter(|p| p.status.as_ref().is_some_and(|s| s.container_statuses.is_some())) {
        let c = main_status(p);
        let (Some(last), Some(run)) = (c.last_state.and_then(|l| l.terminated), c.state.and_then(|s| s.running)) else { continue };
        let (Some(exited), Some(started)) = (last.finished_at, run.started_at) else { continue };
        let gap = std::time::Duration::try_from(started.0.duration_since(exited.0)).unwrap_or_default();
        if backoffs.len() < c.restart_count as usize {
            backoffs.push(gap);
        }
    }
    (without_coalesced_first_write(shapes_of(&kubelets_own(pods))), backoffs)
}

/// The pods without InPlaceUpdateReady, which is the operator's, not the kubelet's, and Ready,
/// which waits for it (a readiness gate): whether it lands before or after the kubelet's first
/// writes is a race, not a difference between the kubelets. ContainersReady is the kubelet's own
/// readiness.
fn kubelets_own(pods: Vec<Pod>) -> Vec<Pod> {
    pods.into_iter()
        .map(|mut p| {
            let conditions = p.status.iter_mut().flat_map(|s| s.conditions.iter_mut());
            conditions.for_each(|cs| cs.retain(|c| !["InPlaceUpdateReady", "Ready"].contains(&c.type_.as_str())));
            p
        })
        .collect()
}

/// Drops what only the real kubelet's status manager may leave out: a pod's first status write
/// (sandbox not ready, `PodReadyToStartContainers=False`) is queued while the pod worker goes on
/// creating the sandbox, and the manager sends only a pod's latest status, so when the sandbox is
/// ready before the write is sent, the watch sees the second write (`True`, still creating)
/// without the first. Seen once in four runs here and once in a CI run; the simulated kubelet
/// always writes both (its unit test pins the three steps), so the shape is dropped on both sides
/// where the next one differs from it in that condition only.
fn without_coalesced_first_write(shapes: Vec<Shape>) -> Vec<Shape> {
    let sandbox_not_ready = "PodReadyToStartContainers=False".to_string();
    let mut out = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        let coalescible = s.conditions.contains(&sandbox_not_ready)
            && shapes.get(i + 1).is_some_and(|next| {
                let mut back = next.clone();
                back.conditions = next.conditions.iter().map(|c| c.replace("PodReadyToStartContainers=True", &sandbox_not_ready)).collect();
                back == *s
            });
        if !coalescible {
            out.push(s.clone());
        }
    }
    out
}

/// How long the probe comparison watches a container whose probe never passes.
const NEVER_READY_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);

/// Two pods with a readiness probe (2 s initial delay, every second), from creation: `probe-ok`
/// probes port 80, which its image serves, until it is ready; `probe-bad` probes 6379, which it
/// does not, for [`NEVER_READY_WINDOW`] after its container started. Returns each one's shapes
/// (the kubelet's own conditions) and the time from `probe-ok`'s start to its ContainersReady.
async fn probes_as_seen(e: Env, on_real_node: bool) -> (Vec<Shape>, Vec<Shape>, std::time::Duration) {
    let probing = |port: u16| {
        let spec = json!({"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27", "imagePullPolicy": "Always",
            "readinessProbe": {"httpGet": {"path": "/", "port": port}, "initialDelaySeconds": 2, "periodSeconds": 1}}]}}});
        if on_real_node { on_the_real_node(spec) } else { spec }
    };
    let selector = watcher::Config::default().labels("app in (probe-ok,probe-bad)");
    let (seen, recorder) = e2e::testenv::record_selected(&e.pods, selector, Pod::clone).await.unwrap();
    e.create(&manifest("probe-ok", 1, "nginx:1.27", probing(80))).await;
    e.create(&manifest("probe-bad", 1, "nginx:1.27", probing(6379))).await;
    let of =
        |app: &str| -> Vec<Pod> { seen.lock().unwrap().iter().filter(|p| e2e::workload::label(p, "app") == Some(app)).cloned().collect() };
    let started = |p: &Pod| reported_main(p)?.state?.running?.started_at.map(|t| t.0);
    let ready = |p: &&Pod| reported_main(p).is_some_and(|c| c.ready);
    let deadline = std::time::Instant::now() + T;
    loop {
        let ok_ready = of("probe-ok").iter().any(|p| ready(&p));
        let bad_started = of("probe-bad").iter().find_map(started);
        let watched = bad_started.is_some_and(|t| k8s_openapi::jiff::Timestamp::now() >= t + NEVER_READY_WINDOW);
        if ok_ready && watched {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "probe-ok not ready, or probe-bad not started, within {T:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    recorder.abort();
    let ok = of("probe-ok");
    let ready = ok.iter().find(ready).expect("seen ready");
    let ready_at = ready.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().find(|c| c.type_ == "ContainersReady");
    let ready_at = ready_at.and_then(|c| c.last_transition_time.clone()).expect("ContainersReady has a transition time").0;
    let took = std::time::Duration::try_from(ready_at.duration_since(started(ready).expect("running"))).unwrap_or_default();
    let shapes = |pods: Vec<Pod>| without_coalesced_first_write(shapes_of(&kubelets_own(pods)));
    (shapes(ok), shapes(of("probe-bad")), took)
}

/// The same two probing pods on a simulated node and on the real one: the watch sees the same
/// sequences (running unready until the first pass, then ready; never ready for a port the image
/// does not serve, and never restarted for it), and the first pass comes after the initial delay,
/// the real one within a period more (and a second either way: time stamps are whole seconds).
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn the_simulated_kubelet_runs_readiness_probes_as_the_real_one_does() {
    let _cluster = real_cluster().await;
    let (sim, real) = on_both("probe", probes_as_seen).await;
    eprintln!("start to ready: simulated {:?}, real {:?}", sim.2, real.2);
    assert_same_shapes("passing probe", &sim.0, &real.0);
    assert_same_shapes("failing probe", &sim.1, &real.1);
    let last = real.1.last().expect("probe-bad seen");
    assert!(last.state == "running" && !last.ready && last.restarts == 0, "the failing probe: running, unready, never restarted: {last:?}");
    let second = std::time::Duration::from_secs(1);
    assert!(sim.2 + second >= 2 * second && sim.2 <= 3 * second, "simulated: ready {:?} after the start", sim.2);
    assert!(real.2 + second >= 2 * second && real.2 <= 4 * second, "real: ready {:?} after the start (2 s delay, 1 s period)", real.2);
}

/// Drops what only a race inside the real kubelet produces: after the operator writes Ready=False
/// (with InPlaceUpdateReady=False), the kubelet's status manager may write back the Ready=True it
/// computed earlier before it recomputes Ready=False; seen as one shape with Ready=True between
/// two that are otherwise equal. (Seen once in four runs; the simulated kubelet recomputes on
/// every change and never shows it; see the README.)
fn without_stale_ready(shapes: Vec<Shape>) -> Vec<Shape> {
    let mut out: Vec<Shape> = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        let stale = i > 0 && i + 1 < shapes.len() && shapes[i - 1] == shapes[i + 1] && {
            let mut back = s.clone();
            back.conditions = shapes[i - 1].conditions.clone();
            back == shapes[i - 1] && s.conditions.contains(&"Ready=True".to_string())
        };
        if !stale && out.last() != Some(s) {
            out.push(s.clone());
        }
    }
    out
}

/// The simulated kubelet checked against the real one: the same in-place update, once on a
/// simulated node and once on the real node, seen by a watch the same way: the same sequence of
/// pod conditions and container states, and the same fields in the container's status.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn the_simulated_kubelet_shows_an_in_place_update_as_the_real_one_does() {
    let _cluster = real_cluster().await;
    let (sim, real) = on_both("cmp", in_place_update_as_seen).await;
    let (sim, real) = ((without_stale_ready(sim.0), sim.1), (without_stale_ready(real.0), real.1));
    assert_same_shapes("in-place update", &sim.0, &real.0);
    assert_eq!(sim.1, real.1, "container status fields differ");
}

/// The simulated kubelet checked against the real one on a container that keeps exiting, from
/// the pod's creation: the same states in the same order (three steps to running, less a first
/// write the real one may coalesce; after each exit `terminated` until the restart, which a
/// moment of `CrashLoopBackOff` precedes once a back-off applies), and the same time from an
/// exit to the next start: the simulated kubelet takes the least the real one can (a second to
/// notice, then the back-off); the real one may take up to half the back-off longer (its pod
/// worker retries a backed-off pod every 10–15 s), a second less (time stamps are whole
/// seconds), and a second more (it notices the exit at its next 1 s relist, later on a busy
/// machine).
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn the_simulated_kubelet_runs_a_crash_loop_as_the_real_one_does() {
    let _cluster = real_cluster().await;
    let (sim, real) = on_both("loop", crash_loop_as_seen).await;
    eprintln!("back-offs: simulated {:?}, real {:?}", sim.1, real.1);
    assert_same_shapes("crash loop", &sim.0, &real.0);
    assert_eq!(sim.1.len(), real.1.len(), "restarts: simulated {:?}, real {:?}", sim.1, real.1);
    let second = std::time::Duration::from_secs(1);
    for (s, r) in sim.1.iter().zip(&real.1) {
        let back_off = s.saturating_sub(second);
        assert!(*r + second >= *s && *r <= *s + back_off / 2 + 2 * second, "exit to restart: simulated {:?}, real {:?}", sim.1, real.1);
    }
}

#[test]
fn a_stale_ready_between_two_equal_shapes_is_dropped_and_nothing_else() {
    let base = Shape {
        phase: "Running".into(),
        conditions: vec!["InPlaceUpdateReady=False".into(), "Ready=False".into()],
        state: "running".into(),
        last_state: "none".into(),
        ready: true,
        started: Some(true),
        restarts: 0,
        container: 0,
        image: "1.27".into(),
    };
    let flipped = Shape { conditions: vec!["InPlaceUpdateReady=False".into(), "Ready=True".into()], ..base.clone() };
    let restarted = Shape { container: 1, restarts: 1, ..base.clone() };
    assert_eq!(
        without_stale_ready(vec![base.clone(), flipped.clone(), base.clone(), restarted.clone()]),
        [base.clone(), restarted.clone()]
    );
    // A Ready=True that is not followed by the same shape again is real, and kept.
    assert_eq!(without_stale_ready(vec![base.clone(), flipped.clone(), restarted.clone()]).len(), 3);
}

#[test]
fn a_first_write_the_status_manager_may_coalesce_is_dropped_and_nothing_else() {
    let creating = |sandbox: &str| Shape {
        phase: "Pending".into(),
        conditions: vec!["ContainersReady=False".into(), "Initialized=True".into(), format!("PodReadyToStartContainers={sandbox}")],
        state: "waiting:ContainerCreating".into(),
        last_state: "none".into(),
        ready: false,
        started: Some(false),
        restarts: 0,
        container: usize::MAX,
        image: "1".into(),
    };
    let running = Shape {
        phase: "Running".into(),
        conditions: vec!["ContainersReady=True".into(), "Initialized=True".into(), "PodReadyToStartContainers=True".into()],
        state: "running".into(),
        started: Some(true),
        ready: true,
        container: 0,
        ..creating("True")
    };
    let simulated = vec![creating("False"), creating("True"), running.clone()];
    let real = vec![creating("True"), running.clone()];
    assert_eq!(without_coalesced_first_write(simulated), real);
    assert_eq!(without_coalesced_first_write(real.clone()), real);
    // A sandbox that never turns ready, or a pod that goes on in any other way, is kept.
    assert_eq!(without_coalesced_first_write(vec![creating("False"), running.clone()]).len(), 2);
    let pulling = Shape { state: "waiting:ErrImagePull".into(), ..creating("True") };
    assert_eq!(without_coalesced_first_write(vec![creating("False"), pulling]).len(), 2);
}

/// Two tags of one image (`nginx:alpine` and `nginx:mainline-alpine`, one digest in the local
/// registry, as on Docker Hub): containerd 1.6 (Debian's, on the real node) reports a
/// container's `image` as the first tag it holds for the image, so once `nginx:alpine` is
/// pulled, a pod asking for `nginx:mainline-alpine` shows `nginx:alpine`, a tag it did not ask
/// for, with the one imageID. Kruise's in-place completion check (same imageID, so the status
/// image must equal the spec's) then never completes such an update, for Kruise as for this
/// operator (README: known differences). A runtime that reports the image as the pod named it
/// (CRI `userSpecifiedImage`, which containerd 1.6 does not fill) behaves as the simulated
/// kubelet does. The pods start one after the other: started together, each may report its
/// own tag while it is the only one pulled.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn the_real_runtime_reports_one_name_for_two_tags_of_one_image() {
    let cluster = real_cluster().await;
    let e = env("real-tags").await;
    let node = cluster.real.nodes[0].name.clone();
    let mut seen = Vec::new();
    for tag in ["alpine", "mainline-alpine"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("tag-{tag}"), "labels": {"app": "tags"}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "main", "image": format!("nginx:{tag}")}]},
        }))
        .unwrap();
        e.pods.create(&Default::default(), &pod).await.unwrap();
        let p = watch_until(&e.pods, &format!("tag-{tag}"), T, |p| {
            p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|c| c.iter().any(|c| !c.image_id.is_empty()))
        })
        .await
        .unwrap();
        seen.push((main_status(&p).image, main_status(&p).image_id));
    }
    let want_id = image_id(&cluster.digests, "docker.io/library/nginx:alpine");
    assert_eq!((&seen[0].1, &seen[1].1), (&want_id, &want_id), "one image, one imageID: {seen:?}");
    assert_eq!(
        (seen[0].0.as_str(), seen[1].0.as_str()),
        ("docker.io/library/nginx:alpine", "docker.io/library/nginx:alpine"),
        "containerd 1.6 names the image by the tag it pulled first, whichever tag a pod asked for: {seen:?}"
    );
}
