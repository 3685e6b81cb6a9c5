use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodCondition, Probe, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::json;

use super::kubelet::*;
use super::status::*;
use super::*;

fn pod(json: serde_json::Value) -> Pod {
    serde_json::from_value(json).unwrap()
}

fn base_pod() -> Pod {
    pod(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"nodeName": "sim-node-0", "containers": [{"name": "c", "image": "nginx:1"}],
                 "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]},
    }))
}

/// The status writes of a pod's start before its containers run (two from 1.36, one before).
fn start(p: &mut Pod, cfg: &SimConfig, memory: &mut RuntimeMemory, now: Timestamp) {
    for _ in 0..if cfg.reports_sandbox_ready_alone() { 2 } else { 1 } {
        let plan = desired_status(p, cfg, &NODE, memory, now);
        assert_eq!(plan.recheck_after, Some(Duration::ZERO), "a start step is followed at once by the next");
        apply(p, &plan);
    }
}

fn apply(p: &mut Pod, plan: &StatusPlan) {
    if let Some(s) = &plan.status {
        p.status = Some(s.clone());
    }
}

fn cond<'a>(p: &'a Pod, t: &str) -> &'a PodCondition {
    p.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == t).unwrap()
}

/// Adds condition `t` = True, as the operator (or the resize subresource) would.
fn set_true(p: &mut Pod, t: &str) {
    let condition = PodCondition { type_: t.into(), status: "True".into(), ..Default::default() };
    p.status.as_mut().unwrap().conditions.as_mut().unwrap().push(condition);
}

const NODE: NodeSlot<'static> = NodeSlot { host_ip: "127.1.0.10", fresh_pod_ip: "127.128.0.2" };

/// A readiness gate flipped by the operator between the kubelet's read and its write must not
/// be written back with the value read: the patch carries the kubelet's conditions only.
#[test]
fn the_status_patch_leaves_other_writers_conditions_alone() {
    let cfg = SimConfig::default();
    let mut memory = RuntimeMemory::default();
    let mut p = base_pod();
    start(&mut p, &cfg, &mut memory, Timestamp::now());
    set_true(&mut p, "InPlaceUpdateReady");
    p.status.as_mut().unwrap().conditions.as_mut().unwrap().push(PodCondition {
        type_: "PodScheduled".into(),
        status: "True".into(),
        ..Default::default()
    });
    let status = p.status.clone().unwrap();
    let patch = status_patch(&p, status).unwrap();
    let types: Vec<&str> = patch["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert!(types.iter().all(|t| KUBELET_CONDITIONS.contains(t)), "{types:?}");
    assert!(types.contains(&"Ready"), "{types:?}");
}

/// Found by comparing with a real kubelet (e2e/tests/test_bed/kubelets.rs): it lists the volume
/// mounts in each container's status.
#[test]
fn container_statuses_list_the_volume_mounts_as_the_kubelet_does() {
    let mut p = base_pod();
    p.spec.as_mut().unwrap().containers[0].volume_mounts = serde_json::from_value(json!([
        {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
        {"name": "data", "mountPath": "/data"},
    ]))
    .unwrap();
    let plan = desired_status(&p, &SimConfig::default(), &NODE, &mut RuntimeMemory::default(), Timestamp::now());
    let status = serde_json::to_value(&plan.status.unwrap().container_statuses.unwrap()[0]).unwrap();
    assert_eq!(
        status["volumeMounts"],
        json!([
            {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true, "recursiveReadOnly": "Disabled"},
            {"name": "data", "mountPath": "/data"},
        ])
    );
}

fn main_status(p: &Pod) -> &ContainerStatus {
    &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
}

fn state_of(s: &ContainerStatus) -> String {
    let st = s.state.as_ref().unwrap();
    match (&st.running, &st.waiting, &st.terminated) {
        (Some(_), _, _) => "running".into(),
        (_, Some(w), _) => format!("waiting:{}", w.reason.as_deref().unwrap_or_default()),
        (_, _, Some(_)) => "terminated".into(),
        _ => "none".into(),
    }
}

/// Found by comparing with a real kubelet (e2e/tests/test_bed/kubelets.rs): a pod starts in three
/// status writes (sandbox not ready, sandbox ready with the containers being created, running).
#[test]
fn a_pod_starts_as_the_kubelet_reports_it_in_three_steps() {
    let want = [
        ("Pending", "False", "waiting:ContainerCreating"),
        ("Pending", "True", "waiting:ContainerCreating"),
        ("Running", "True", "running"),
    ];
    assert_start_steps(&SimConfig::default(), &want);
}

/// A kubelet before 1.36 (seen on 1.35's, 1.34's and 1.33's) writes no sandbox-ready step of its own:
/// the write after the first shows the containers running.
#[test]
fn a_kubelet_before_1_36_starts_a_pod_in_two_steps() {
    let want = [("Pending", "False", "waiting:ContainerCreating"), ("Running", "True", "running")];
    assert_start_steps(&SimConfig { kubelet_version: "v1.35.4".into(), ..SimConfig::default() }, &want);
}

/// A new pod's status writes under `cfg` show `want` (phase, `PodReadyToStartContainers`, the
/// container's state), one a write, and then no more.
fn assert_start_steps(cfg: &SimConfig, want: &[(&str, &str, &str)]) {
    let mut memory = RuntimeMemory::default();
    let now = Timestamp::now();
    let mut p = base_pod();
    let mut seen = Vec::new();
    for _ in want {
        let plan = desired_status(&p, cfg, &NODE, &mut memory, now);
        apply(&mut p, &plan);
        let status = p.status.as_ref().unwrap();
        seen.push((status.phase.clone().unwrap(), cond(&p, "PodReadyToStartContainers").status.clone(), state_of(main_status(&p))));
    }
    let want: Vec<_> = want.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())).collect();
    assert_eq!(seen, want);
    assert_eq!(desired_status(&p, cfg, &NODE, &mut memory, now).status, None, "then stable");
}

/// Found by comparing with a real kubelet (e2e/tests/test_bed/kubelets.rs): a container whose process
/// exits shows `terminated` until the kubelet starts it again, a second after the first exit,
/// then after 10 s, 20 s, ... of back-off, each time shown `CrashLoopBackOff` for a moment
/// first; every exit is counted once, however often the pod is looked at.
#[test]
fn an_exiting_container_crash_loops_with_the_kubelets_back_off() {
    let cfg = SimConfig { exits: parse_exits(&["nginx:1=1s:1".into()]).unwrap(), ..Default::default() };
    let mut memory = RuntimeMemory::default();
    let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let at = |s: i64| t0 + SignedDuration::from_secs(s);
    let mut p = base_pod();
    let step = |p: &mut Pod, memory: &mut RuntimeMemory, now: Timestamp| {
        let plan = desired_status(p, &cfg, &NODE, memory, now);
        apply(p, &plan);
        plan.recheck_after
    };
    let seen = |p: &Pod| (state_of(main_status(p)), main_status(p).restart_count);
    let secs = |s: u64| Some(Duration::from_secs(s));
    start(&mut p, &cfg, &mut memory, at(0));
    assert_eq!(step(&mut p, &mut memory, at(0)), secs(1), "look again when it exits");
    assert_eq!(seen(&p), ("running".into(), 0));
    let first = main_status(&p).container_id.clone();

    step(&mut p, &mut memory, at(1));
    assert_eq!(seen(&p), ("terminated".into(), 0));
    let exit = main_status(&p).state.as_ref().unwrap().terminated.clone().unwrap();
    assert_eq!((exit.exit_code, exit.reason.as_deref(), &exit.container_id), (1, Some("Error"), &first));
    assert_eq!((main_status(&p).ready, cond(&p, "Ready").status.as_str()), (false, "False"));
    assert_eq!(step(&mut p, &mut memory, at(1)), secs(1), "the first restart comes as the exit is noticed");
    step(&mut p, &mut memory, at(2));
    assert_eq!(seen(&p), ("running".into(), 1));
    assert_eq!(main_status(&p).last_state.as_ref().unwrap().terminated.as_ref(), Some(&exit));
    assert_ne!(main_status(&p).container_id, first);

    step(&mut p, &mut memory, at(3));
    assert_eq!(seen(&p), ("terminated".into(), 1));
    for _ in 0..3 {
        assert_eq!(step(&mut p, &mut memory, at(5)), secs(9), "one exit, one back-off: 3 + 1 + 10 = 14");
        assert_eq!(seen(&p), ("terminated".into(), 1));
    }
    assert_eq!(step(&mut p, &mut memory, at(14)), Some(Duration::ZERO));
    assert_eq!(seen(&p), ("waiting:CrashLoopBackOff".into(), 1));
    let message = main_status(&p).state.as_ref().unwrap().waiting.as_ref().unwrap().message.clone().unwrap();
    assert_eq!(message, "back-off 10s restarting failed container=c pod=p_ns(u1)");
    step(&mut p, &mut memory, at(14));
    assert_eq!(seen(&p), ("running".into(), 2));
    step(&mut p, &mut memory, at(15));
    assert_eq!(step(&mut p, &mut memory, at(16)), secs(20), "the back-off doubles: 15 + 1 + 20 = 36");
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));

    // A new image is a new spec: it starts at once, and its back-off starts over.
    p.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.1".into());
    step(&mut p, &mut memory, at(17));
    assert_eq!((seen(&p), main_status(&p).image.as_str()), (("running".into(), 3), "nginx:1.1"));
    assert_eq!(step(&mut p, &mut memory, at(30)), None, "nginx:1.1 does not exit");
}

#[test]
fn a_command_replaces_the_exiting_process() {
    let cfg = SimConfig { exits: parse_exits(&["nginx:1=0s:0".into()]).unwrap(), ..Default::default() };
    let mut p = base_pod();
    p.spec.as_mut().unwrap().containers[0].command = Some(vec!["sleep".into(), "999".into()]);
    let mut memory = RuntimeMemory::default();
    let now = Timestamp::now();
    start(&mut p, &cfg, &mut memory, now);
    let plan = desired_status(&p, &cfg, &NODE, &mut memory, now);
    apply(&mut p, &plan);
    assert_eq!(desired_status(&p, &cfg, &NODE, &mut memory, now + SignedDuration::from_secs(60)).status, None);
    assert_eq!(state_of(main_status(&p)), "running");
    assert!(parse_exits(&["nginx:1=1s".into()]).is_err() && parse_exits(&["nginx:1=soon:1".into()]).is_err());
    assert_eq!(crash_back_off(9), Duration::from_secs(300), "capped at five minutes");
}

#[test]
fn ready_follows_containers_and_readiness_gates() {
    let cfg = SimConfig::default();
    let mut pending = RuntimeMemory::default();
    let now = Timestamp::now();
    let mut p = base_pod();
    start(&mut p, &cfg, &mut pending, now);
    let plan = desired_status(&p, &cfg, &NODE, &mut pending, now);
    apply(&mut p, &plan);
    assert_eq!(cond(&p, "ContainersReady").status, "True");
    assert_eq!(cond(&p, "Ready").status, "False", "gate condition missing");
    assert_eq!(cond(&p, "Ready").reason.as_deref(), Some("ReadinessGatesNotReady"));

    set_true(&mut p, "InPlaceUpdateReady");
    let plan = desired_status(&p, &cfg, &NODE, &mut pending, now);
    apply(&mut p, &plan);
    assert_eq!(cond(&p, "Ready").status, "True");
    assert_eq!(desired_status(&p, &cfg, &NODE, &mut pending, now).status, None, "stable once converged");
}

/// A pod running `nginx:1` whose spec now asks for `nginx:2`, the change not yet noticed.
fn running_then_new_image(cfg: &SimConfig, memory: &mut RuntimeMemory, t0: Timestamp) -> Pod {
    let mut p = base_pod();
    start(&mut p, cfg, memory, t0);
    let plan = desired_status(&p, cfg, &NODE, memory, t0);
    apply(&mut p, &plan);
    p.spec.as_mut().unwrap().containers[0].image = Some("nginx:2".into());
    p
}

#[test]
fn image_change_restarts_after_delay_keeping_ip() {
    let cfg = SimConfig { restart_delay: Duration::from_secs(1), ..Default::default() };
    let mut pending = RuntimeMemory::default();
    let t0 = Timestamp::now();
    let mut p = running_then_new_image(&cfg, &mut pending, t0);
    let first = p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].clone();

    let plan = desired_status(&p, &cfg, &NODE, &mut pending, t0);
    assert_eq!(plan.status, None, "no restart before the delay");
    assert_eq!(plan.recheck_after, Some(Duration::from_secs(1)));

    let later = t0 + SignedDuration::from_secs(1);
    let plan = desired_status(&p, &cfg, &NODE, &mut pending, later);
    apply(&mut p, &plan);
    let s = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert_eq!(s.image, "nginx:2");
    assert_eq!(s.restart_count, 1);
    assert_ne!(s.image_id, first.image_id);
    assert_ne!(s.container_id, first.container_id);
    assert_eq!(p.status.as_ref().unwrap().pod_ip.as_deref(), Some("127.128.0.2"));
}

/// The simulated kubelet decides on the pod's part of the memory and keeps it only once the
/// decision is written: a due restart decided from a view the fresh read replaced must
/// still be due when decided again from that read, not wait out the delay once more.
#[test]
fn a_restart_decided_but_not_written_is_still_due_when_decided_again() {
    let cfg = SimConfig { restart_delay: Duration::from_secs(1), ..Default::default() };
    let mut memory = RuntimeMemory::default();
    let t0 = Timestamp::now();
    let p = running_then_new_image(&cfg, &mut memory, t0);
    assert_eq!(desired_status(&p, &cfg, &NODE, &mut memory, t0).status, None, "the change is noticed, the restart waits");

    let later = t0 + SignedDuration::from_secs(1);
    let restarted = |plan: &StatusPlan| plan.status.as_ref().is_some_and(|s| s.container_statuses.as_ref().unwrap()[0].image == "nginx:2");
    let mut dropped = memory.of_pod("u1");
    assert!(restarted(&desired_status(&p, &cfg, &NODE, &mut dropped, later)), "due after the delay");
    drop(dropped); // the pod changed meanwhile: decided again from the fresh read
    let mut part = memory.of_pod("u1");
    assert!(restarted(&desired_status(&p, &cfg, &NODE, &mut part, later)), "still due: the dropped decision left no trace");
    memory.keep_pod("u1", part);
    assert!(memory.pending_restarts.is_empty(), "the written restart is no longer pending");

    // Deciding twice on the whole memory would have forgotten the due restart.
    let mut whole = RuntimeMemory::default();
    let q = running_then_new_image(&cfg, &mut whole, t0);
    desired_status(&q, &cfg, &NODE, &mut whole, t0);
    assert!(restarted(&desired_status(&q, &cfg, &NODE, &mut whole, later)));
    assert!(!restarted(&desired_status(&q, &cfg, &NODE, &mut whole, later)), "noticed anew, so not due");
}

#[test]
fn keeping_a_pods_part_of_the_memory_leaves_the_other_pods_alone() {
    let t = Timestamp::now();
    let key = |u: &str| (u.to_string(), "c".to_string());
    let mut memory = RuntimeMemory::default();
    memory.pending_restarts.insert(key("u1"), ("nginx:2".into(), t));
    memory.pending_restarts.insert(key("u2"), ("nginx:3".into(), t));
    memory.crash_loops.insert(key("u2"), CrashLoop { image: "nginx:3".into(), exits: 2, last: "id".into() });
    let part = memory.of_pod("u2");
    assert_eq!(part.pending_restarts.keys().collect::<Vec<_>>(), vec![&key("u2")]);
    assert_eq!(part.crash_loops.len(), 1);

    memory.keep_pod("u2", RuntimeMemory::default());
    assert_eq!(memory.pending_restarts.keys().collect::<Vec<_>>(), vec![&key("u1")], "u1's pending restart stays");
    assert!(memory.crash_loops.is_empty(), "u2's exits are forgotten with its part");
}

fn resources(cpu: &str, memory: &str) -> ResourceRequirements {
    serde_json::from_value(json!({"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}})).unwrap()
}

/// A kubelet of 1.32, whose InPlacePodVerticalScaling gate is off, reports no container
/// resources; one of 1.33 does.
#[test]
fn container_resources_are_reported_from_1_33() {
    let now = Timestamp::now();
    for (version, reported) in [("v1.32.13", None), ("v1.33.13", Some(resources("100m", "64Mi")))] {
        let cfg = SimConfig { kubelet_version: version.into(), ..SimConfig::default() };
        let mut pending = RuntimeMemory::default();
        let mut p = base_pod();
        p.spec.as_mut().unwrap().containers[0].resources = Some(resources("100m", "64Mi"));
        start(&mut p, &cfg, &mut pending, now);
        let plan = desired_status(&p, &cfg, &NODE, &mut pending, now);
        apply(&mut p, &plan);
        let s = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        assert_eq!((s.resources.clone(), s.allocated_resources.is_some()), (reported.clone(), reported.is_some()), "{version}");
    }
}

/// A resize (pods/resize changed the spec's resources) is applied to the running container:
/// the new resources are reported without a restart, and no resize stays pending.
#[test]
fn a_resize_is_applied_without_restarting_the_container() {
    let cfg = SimConfig::default();
    let mut pending = RuntimeMemory::default();
    let now = Timestamp::now();
    let mut p = base_pod();
    p.spec.as_mut().unwrap().containers[0].resources = Some(resources("100m", "64Mi"));
    start(&mut p, &cfg, &mut pending, now);
    let plan = desired_status(&p, &cfg, &NODE, &mut pending, now);
    apply(&mut p, &plan);
    let first = p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].clone();
    assert_eq!(first.resources, Some(resources("100m", "64Mi")), "a running container reports its resources");

    p.spec.as_mut().unwrap().containers[0].resources = Some(resources("200m", "128Mi"));
    set_true(&mut p, "PodResizeInProgress");
    let plan = desired_status(&p, &cfg, &NODE, &mut pending, now);
    apply(&mut p, &plan);
    let s = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert_eq!(s.resources, Some(resources("200m", "128Mi")));
    assert_eq!(s.allocated_resources, resources("200m", "128Mi").requests);
    assert_eq!((s.restart_count, &s.container_id), (0, &first.container_id), "not restarted");
    assert!(p.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().all(|c| !RESIZE_CONDITIONS.contains(&c.type_.as_str())));

    // A memory resize policy of RestartContainer restarts the container for a memory change.
    p.spec.as_mut().unwrap().containers[0].resize_policy =
        Some(serde_json::from_value(json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}])).unwrap());
    p.spec.as_mut().unwrap().containers[0].resources = Some(resources("300m", "128Mi"));
    let plan = desired_status(&p, &cfg, &NODE, &mut pending, now);
    apply(&mut p, &plan);
    assert_eq!(p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].restart_count, 0, "cpu: no restart");
    p.spec.as_mut().unwrap().containers[0].resources = Some(resources("300m", "256Mi"));
    let plan = desired_status(&p, &cfg, &NODE, &mut pending, now);
    apply(&mut p, &plan);
    let s = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert_eq!((s.restart_count, s.resources.clone()), (1, Some(resources("300m", "256Mi"))), "memory: restarted");
}

#[test]
fn a_post_start_sleep_keeps_the_container_unready_that_long() {
    let cfg = SimConfig::default();
    let mut pending = RuntimeMemory::default();
    let t0 = Timestamp::now();
    let mut p = base_pod();
    p.spec.as_mut().unwrap().containers[0].lifecycle =
        serde_json::from_value(serde_json::json!({"postStart": {"exec": {"command": ["sleep", "10"]}}})).unwrap();
    start(&mut p, &cfg, &mut pending, t0);
    let plan = desired_status(&p, &cfg, &NODE, &mut pending, t0);
    assert_eq!(plan.recheck_after, Some(Duration::from_secs(10)), "look again when the hook is done");
    apply(&mut p, &plan);
    assert!(!p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].ready, "hook still running");
    let later = t0 + SignedDuration::from_secs(10);
    let plan = desired_status(&p, &cfg, &NODE, &mut pending, later);
    apply(&mut p, &plan);
    assert!(p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].ready, "ready once the hook returned");
    assert_eq!(cond(&p, "ContainersReady").status, "True");
}

fn ready_of(p: &Pod) -> bool {
    p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].ready
}

/// Found by comparing with a real kubelet (e2e/tests/test_bed/kubelets.rs): a container with a
/// readiness probe runs unready until the probe first passes, `initialDelaySeconds` after its
/// start and never in the status write that reports the start.
#[test]
fn a_readiness_probe_keeps_the_container_unready_until_it_passes() {
    let cfg = SimConfig { serves: parse_serves(&["nginx:1=80".into()]).unwrap(), ..Default::default() };
    let mut memory = RuntimeMemory::default();
    let t0 = Timestamp::now();
    for (delay, first_pass) in [(0, FIRST_PROBE), (3, Duration::from_secs(3))] {
        let mut p = base_pod();
        p.spec.as_mut().unwrap().containers[0].readiness_probe =
            serde_json::from_value(json!({"httpGet": {"path": "/", "port": 80}, "initialDelaySeconds": delay, "periodSeconds": 1}))
                .unwrap();
        start(&mut p, &cfg, &mut memory, t0);
        let plan = desired_status(&p, &cfg, &NODE, &mut memory, t0);
        assert_eq!(plan.recheck_after, Some(first_pass), "look again when the probe first passes");
        apply(&mut p, &plan);
        let s = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        assert!(is_running(s) && s.started == Some(true) && !s.ready, "running and started, not ready yet: {s:?}");
        assert_eq!(cond(&p, "ContainersReady").status, "False");
        let plan = desired_status(&p, &cfg, &NODE, &mut memory, t0 + signed(first_pass));
        apply(&mut p, &plan);
        assert!(ready_of(&p), "ready from the first pass ({delay} s initial delay)");
    }
}

/// A readiness probe of a port the image does not serve never passes, and the container is
/// not restarted for it; images `--serves` does not name, exec probes and a `command` that
/// replaces the image's process pass.
#[test]
fn a_readiness_probe_of_a_port_the_image_does_not_serve_never_passes() {
    let cfg = SimConfig { serves: parse_serves(&["nginx:1=80".into(), "slow:1=80@5s".into()]).unwrap(), ..Default::default() };
    let t0 = Timestamp::now();
    let probe = |port: serde_json::Value| serde_json::from_value::<Probe>(json!({"tcpSocket": {"port": port}})).unwrap();
    let container = |image: &str| {
        serde_json::from_value::<Container>(json!({"name": "c", "image": image, "ports": [{"name": "web", "containerPort": 80}]})).unwrap()
    };
    let nginx = container("nginx:1");
    assert_eq!(cfg.first_readiness_pass(&nginx, "nginx:1", &probe(json!(80))), Some(FIRST_PROBE));
    assert_eq!(cfg.first_readiness_pass(&nginx, "nginx:1", &probe(json!("web"))), Some(FIRST_PROBE), "a named port");
    assert_eq!(cfg.first_readiness_pass(&nginx, "nginx:1", &probe(json!(6379))), None);
    assert_eq!(
        cfg.first_readiness_pass(&container("slow:1"), "slow:1", &probe(json!(80))),
        Some(Duration::from_secs(5)),
        "serves after 5 s"
    );
    assert_eq!(cfg.first_readiness_pass(&container("other:1"), "other:1", &probe(json!(6379))), Some(FIRST_PROBE), "an image not named");
    let exec = serde_json::from_value::<Probe>(json!({"exec": {"command": ["true"]}})).unwrap();
    assert_eq!(cfg.first_readiness_pass(&nginx, "nginx:1", &exec), Some(FIRST_PROBE));
    let mut own = nginx.clone();
    own.command = Some(vec!["sleep".into(), "1d".into()]);
    assert_eq!(cfg.first_readiness_pass(&own, "nginx:1", &probe(json!(6379))), Some(FIRST_PROBE), "not the image's process");

    let mut memory = RuntimeMemory::default();
    let mut p = base_pod();
    p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(probe(json!(6379)));
    start(&mut p, &cfg, &mut memory, t0);
    let plan = desired_status(&p, &cfg, &NODE, &mut memory, t0);
    assert_eq!(plan.recheck_after, None, "nothing to wait for");
    apply(&mut p, &plan);
    let plan = desired_status(&p, &cfg, &NODE, &mut memory, t0 + SignedDuration::from_hours(1));
    apply(&mut p, &plan);
    let s = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert!(is_running(s) && !s.ready && s.restart_count == 0, "running, never ready, never restarted: {s:?}");
    assert_eq!(cond(&p, "Ready").status, "False");
}

#[test]
fn parse_serves_reads_ports_and_the_start_delay() {
    let serves = parse_serves(&["nginx:1=80,443@2s".into()]).unwrap();
    assert_eq!(serves["docker.io/library/nginx:1"], Serves { ports: vec![80, 443], after: Duration::from_secs(2) });
    assert!(parse_serves(&["nginx:1".into()]).is_err() && parse_serves(&["nginx:1=http".into()]).is_err());
    assert!(parse_serves(&["nginx:1=80@soon".into()]).is_err());
}

#[test]
fn unpullable_image_waits_and_never_ready() {
    let cfg = SimConfig::default();
    let mut p = base_pod();
    p.spec.as_mut().unwrap().containers[0].image = Some("registry.local/unpullable:1".into());
    let (mut memory, now) = (RuntimeMemory::default(), Timestamp::now());
    start(&mut p, &cfg, &mut memory, now);
    let plan = desired_status(&p, &cfg, &NODE, &mut memory, now);
    apply(&mut p, &plan);
    let s = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert_eq!(s.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(), Some("ErrImagePull"));
    assert!(!s.ready);
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
}

#[test]
fn image_ids_are_deterministic_and_digest_shaped() {
    assert_eq!(image_id("nginx:alpine"), image_id("nginx:alpine"));
    assert_ne!(image_id("nginx:alpine"), image_id("nginx:1.27"));
    assert!(image_id("nginx:alpine").starts_with("docker.io/library/nginx@sha256:"));
    assert!(image_id("registry.k8s.io/pause:3.9").starts_with("registry.k8s.io/pause@sha256:"));
    assert!(image_id("localhost:5000/app").starts_with("localhost:5000/app@sha256:"));
}

#[test]
fn tags_the_registry_shares_a_digest_between_report_one_image_id() {
    let cfg = SimConfig {
        same_digest: parse_same_digest(&["nginx:mainline-alpine=docker.io/library/nginx:alpine".into()]).unwrap(),
        ..SimConfig::default()
    };
    assert_eq!(cfg.image_id("docker.io/library/nginx:mainline-alpine"), cfg.image_id("nginx:alpine"));
    assert_ne!(cfg.image_id("nginx:1.27"), cfg.image_id("nginx:alpine"));
    assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
    assert!(parse_same_digest(&["nope".into()]).is_err());
}

#[test]
fn deletion_due_caps_grace() {
    let ts = Timestamp::now();
    let mut p = base_pod();
    p.metadata.deletion_timestamp = Some(Time(ts));
    p.metadata.deletion_grace_period_seconds = Some(3600);
    let due = deletion_due(&p, Duration::from_secs(2)).unwrap();
    assert_eq!(due, ts - SignedDuration::from_secs(3600) + SignedDuration::from_secs(2));
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
    assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
    assert!(parse_duration("-1s").is_err());
    assert!(parse_duration("1d").is_err());
}
