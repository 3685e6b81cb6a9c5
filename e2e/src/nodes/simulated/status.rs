//! The pure part: the status a kubelet would write for a pod, from the pod, the runtime's memory,
//! the config and `now`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, Pod, PodCondition,
    PodIP, PodStatus, ResourceRequirements, VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;

use super::*;

/// The simulated runtime's memory that is not in the pod object, keyed by (pod UID, container
/// name): when it first saw a container's spec image differ from the running one, and how many
/// times the container has exited with its current image (the kubelet's back-off is kept per
/// container spec, so a new image starts it over).
#[derive(Debug, Default)]
pub struct RuntimeMemory {
    pub pending_restarts: HashMap<(String, String), (String, Timestamp)>,
    pub crash_loops: HashMap<(String, String), CrashLoop>,
}

/// Exits of one container with one image; `last` is the container ID last counted, so an exit
/// is counted once however often the pod is looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashLoop {
    pub image: String,
    pub exits: u32,
    pub last: String,
}

impl RuntimeMemory {
    /// The part of the memory about the pod `uid`, to decide on apart from the rest.
    pub fn of_pod(&self, uid: &str) -> RuntimeMemory {
        fn part<V: Clone>(map: &HashMap<(String, String), V>, uid: &str) -> HashMap<(String, String), V> {
            map.iter().filter(|((u, _), _)| u == uid).map(|(k, v)| (k.clone(), v.clone())).collect()
        }
        RuntimeMemory { pending_restarts: part(&self.pending_restarts, uid), crash_loops: part(&self.crash_loops, uid) }
    }

    /// Replaces what is remembered about the pod `uid` with `part` (from [`Self::of_pod`]).
    pub fn keep_pod(&mut self, uid: &str, part: RuntimeMemory) {
        self.forget_pod(uid);
        self.pending_restarts.extend(part.pending_restarts.into_iter().filter(|((u, _), _)| u == uid));
        self.crash_loops.extend(part.crash_loops.into_iter().filter(|((u, _), _)| u == uid));
    }

    pub(super) fn forget_pod(&mut self, uid: &str) {
        self.pending_restarts.retain(|(u, _), _| u != uid);
        self.crash_loops.retain(|(u, _), _| u != uid);
    }

    /// Counts the exit of `container_id` (once) and returns how many times this container has
    /// exited with `image`.
    fn count_exit(&mut self, key: &(String, String), image: &str, container_id: &str) -> u32 {
        let fresh = || CrashLoop { image: image.into(), exits: 0, last: String::new() };
        let entry = self.crash_loops.entry(key.clone()).or_insert_with(fresh);
        if entry.image != image {
            *entry = fresh();
        }
        if entry.last != container_id {
            entry.exits += 1;
            entry.last = container_id.into();
        }
        entry.exits
    }
}

/// The kubelet's crash-loop back-off before the restart that follows a container's `exits`-th
/// exit with one spec: none after the first, then 10 s doubling up to 5 minutes
/// (`doBackOff` in `kuberuntime_manager.go`: the first exit only arms the back-off).
pub fn crash_back_off(exits: u32) -> Duration {
    match exits {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(10u64.saturating_mul(1 << (n - 2).min(10))).min(Duration::from_secs(300)),
    }
}

/// What [`desired_status`] decides.
#[derive(Debug, PartialEq)]
pub struct StatusPlan {
    /// The status to write, or `None` when the current one is already right.
    pub status: Option<PodStatus>,
    /// When to look at the pod again even if nothing changes (startup delay, restart delay).
    pub recheck_after: Option<Duration>,
}

/// Inputs that identify the node a pod runs on.
pub struct NodeSlot<'a> {
    pub host_ip: &'a str,
    /// The IP to use when the pod has none yet.
    pub fresh_pod_ip: &'a str,
}

/// Computes the status a kubelet would report for a running (not terminating) pod.
pub fn desired_status(pod: &Pod, cfg: &SimConfig, node: &NodeSlot<'_>, memory: &mut RuntimeMemory, now: Timestamp) -> StatusPlan {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let current = pod.status.clone().unwrap_or_default();
    let mut recheck: Option<Duration> = None;
    let mut recheck_at = |d: Duration| recheck = Some(recheck.map_or(d, |r| r.min(d)));

    let start_time = current.start_time.clone().unwrap_or(Time(now));
    let startup_delay = pod.annotations().get(ANNOTATION_STARTUP_DELAY).and_then(|s| parse_duration(s).ok()).unwrap_or(cfg.startup_delay);
    let started_at = start_time.0 + signed(startup_delay);
    // As a kubelet reports a pod's start: first Pending with its sandbox not ready, then the
    // sandbox ready with the containers still being created, then the containers running; each
    // a status write of its own.
    let first_look = current.start_time.is_none();
    let sandbox_ready = !first_look && now >= started_at;
    let creating = sandbox_ready && !condition_is_true(&current, "PodReadyToStartContainers") && cfg.reports_sandbox_ready_alone();
    if first_look || creating {
        recheck_at(Duration::ZERO);
    } else if !sandbox_ready {
        recheck_at(duration_between(now, started_at));
    }
    let never_ready = pod.annotations().get(ANNOTATION_NEVER_READY).is_some_and(|v| v == "true");

    let old_statuses: BTreeMap<&str, &ContainerStatus> =
        current.container_statuses.iter().flatten().map(|s| (s.name.as_str(), s)).collect();
    let mut statuses = Vec::new();
    for c in &spec.containers {
        let image = c.image.clone().unwrap_or_default();
        let old = old_statuses.get(c.name.as_str()).copied();
        let key = (uid.clone(), c.name.clone());
        let restart_count = old.map_or(0, |s| s.restart_count);
        let status = if !sandbox_ready || creating {
            waiting(&c.name, &image, restart_count, "ContainerCreating", "")
        } else if image.contains(&cfg.unpullable_marker) {
            memory.pending_restarts.remove(&key);
            waiting(&c.name, &image, restart_count, "ErrImagePull", &format!("failed to pull image \"{image}\": not found"))
        } else if let Some(old) = old.filter(|s| has_exited(s)) {
            // After an exit the kubelet shows the container terminated until it starts it again:
            // a moment after the exit the first time, after the back-off from then on, at once for
            // a new image (a new spec is not held by the old one's back-off).
            let exits = memory.crash_loops.get(&key).filter(|l| l.image == image).map_or(0, |l| l.exits);
            let back_off = crash_back_off(exits);
            let due = if old.image == image { terminated_at(old).map_or(now, |t| t + signed(EXIT_NOTICED + back_off)) } else { now };
            if now < due {
                recheck_at(duration_between(now, due));
                old.clone()
            } else if back_off > Duration::ZERO && old.image == image {
                // Seen for a moment before the restart, naming the back-off it waited out.
                recheck_at(Duration::ZERO);
                back_off_waiting(old, back_off, pod)
            } else {
                started_again(cfg, &uid, old, &image, !never_ready, now)
            }
        } else if let Some(old) = old.filter(|s| in_back_off(s)) {
            started_again(cfg, &uid, old, &image, !never_ready, now)
        } else {
            match old.filter(|s| is_running(s)) {
                Some(old) if old.image == image => {
                    memory.pending_restarts.remove(&key);
                    match cfg.exit_of(c, &image).zip(started_at_of(old)) {
                        Some((exit, started)) if now >= started + signed(exit.after) => {
                            memory.count_exit(&key, &image, old.container_id.as_deref().unwrap_or_default());
                            recheck_at(EXIT_NOTICED);
                            terminated(old, exit, started + signed(exit.after))
                        }
                        _ => ContainerStatus { ready: !never_ready, ..old.clone() },
                    }
                }
                Some(old) => {
                    // The spec image changed under a running container: restart it in place
                    // after the configured delay, as a kubelet does once it has pulled the image.
                    let pending = &mut memory.pending_restarts;
                    let noticed = match pending.get(&key) {
                        Some((target, at)) if *target == image => *at,
                        _ => {
                            pending.insert(key.clone(), (image.clone(), now));
                            now
                        }
                    };
                    let due = noticed + signed(cfg.restart_delay);
                    if now >= due {
                        pending.remove(&key);
                        restarted(cfg, &uid, old, &image, !never_ready, now)
                    } else {
                        recheck_at(duration_between(now, due));
                        old.clone()
                    }
                }
                None => running(cfg, &uid, &c.name, &image, restart_count, !never_ready, now),
            }
        };
        // In-place resize (pods/resize): the kubelet applies the spec's resources to the running
        // container and reports them; it restarts the container only for a resource whose
        // resize policy says RestartContainer.
        let mut status = status;
        if is_running(&status) && cfg.reports_container_resources() {
            let wanted = reported_resources(c);
            let resized_from = old.filter(|o| is_running(o) && o.restart_count == status.restart_count).and_then(|o| o.resources.as_ref());
            if resized_from.is_some_and(|from| *from != wanted && resize_restarts(c, from, &wanted)) {
                status = restarted(cfg, &uid, old.expect("a resized container was running"), &image, !never_ready, now);
            }
            status.allocated_resources = wanted.requests.clone();
            status.resources = Some(wanted);
        }
        // A container whose process ends on its own: look again when it does.
        if let Some((exit, started)) = cfg.exit_of(c, &image).zip(Some(&status).filter(|s| is_running(s)).and_then(started_at_of)) {
            let ends = started + signed(exit.after);
            if now < ends {
                recheck_at(duration_between(now, ends));
            }
        }
        // The kubelet runs a postStart hook before it counts the container started: a hook of
        // `sleep N` keeps the container unready for N seconds after each start.
        if let (Some(hold), Some(started)) =
            (post_start_sleep(c), status.state.as_ref().and_then(|s| s.running.as_ref()?.started_at.clone()))
        {
            let until = started.0 + signed(hold);
            if now < until {
                status.ready = false;
                status.started = Some(false);
                recheck_at(duration_between(now, until));
            }
        }
        // A readiness probe: the kubelet runs it once the container has started and
        // `initialDelaySeconds` have passed (the real one within a period of that), and the
        // container is ready from the first pass; it never restarts a container for a failure.
        if let (Some(probe), Some(started)) = (c.readiness_probe.as_ref(), started_at_of(&status)) {
            match cfg.first_readiness_pass(c, &image, probe) {
                Some(after) if now >= started + signed(after) => {}
                Some(after) => {
                    status.ready = false;
                    recheck_at(duration_between(now, started + signed(after)));
                }
                None => status.ready = false,
            }
        }
        status.volume_mounts = volume_mount_statuses(c);
        statuses.push(status);
    }
    let init_statuses: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let image = c.image.clone().unwrap_or_default();
            let old = current.init_container_statuses.iter().flatten().find(|s| s.name == c.name);
            old.cloned().unwrap_or_else(|| ContainerStatus {
                name: c.name.clone(),
                image: image.clone(),
                image_id: cfg.image_id(&image),
                container_id: Some(container_id(&uid, &c.name, 0)),
                ready: true,
                started: Some(false),
                restart_count: 0,
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 0,
                        reason: Some("Completed".into()),
                        started_at: Some(Time(now)),
                        finished_at: Some(Time(now)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
        })
        .collect();

    let containers_ready = sandbox_ready && !statuses.is_empty() && statuses.iter().all(|s| s.ready);
    let any_running = statuses.iter().any(is_running);
    let phase = if any_running || current.phase.as_deref() == Some("Running") { "Running" } else { "Pending" };

    let not_ready: Vec<&str> = statuses.iter().filter(|s| !s.ready).map(|s| s.name.as_str()).collect();
    let gate_problem = readiness_gate_problem(pod);
    let (ready, ready_reason, ready_message) = if !containers_ready {
        (false, Some("ContainersNotReady"), Some(format!("containers with unready status: [{}]", not_ready.join(" "))))
    } else if let Some(msg) = gate_problem {
        (false, Some("ReadinessGatesNotReady"), Some(msg))
    } else {
        (true, None, None)
    };
    let cr_reason = (!containers_ready).then_some("ContainersNotReady");
    let cr_message = (!containers_ready).then(|| format!("containers with unready status: [{}]", not_ready.join(" ")));

    let mut conditions = current.conditions.clone().unwrap_or_default();
    // Every resize is applied at once, so none is pending or in progress.
    conditions.retain(|c| !RESIZE_CONDITIONS.contains(&c.type_.as_str()));
    set_condition(&mut conditions, "PodReadyToStartContainers", sandbox_ready, None, None, now);
    set_condition(&mut conditions, "Initialized", true, None, None, now);
    set_condition(&mut conditions, "ContainersReady", containers_ready, cr_reason, cr_message, now);
    set_condition(&mut conditions, "Ready", ready, ready_reason, ready_message, now);

    let pod_ip = current.pod_ip.clone().unwrap_or_else(|| node.fresh_pod_ip.to_string());
    let desired = PodStatus {
        phase: Some(phase.into()),
        host_ip: Some(node.host_ip.into()),
        host_ips: Some(vec![k8s_openapi::api::core::v1::HostIP { ip: node.host_ip.into() }]),
        pod_ip: Some(pod_ip.clone()),
        pod_ips: Some(vec![PodIP { ip: pod_ip }]),
        start_time: Some(start_time),
        qos_class: current.qos_class.clone().or_else(|| Some("BestEffort".into())),
        conditions: Some(conditions),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ..current.clone()
    };
    StatusPlan { status: (desired != current).then_some(desired), recheck_after: recheck }
}

/// Why the readiness gates keep a pod unready, in the kubelet's words; `None` when all are True.
fn readiness_gate_problem(pod: &Pod) -> Option<String> {
    let gates = pod.spec.as_ref()?.readiness_gates.as_ref()?;
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    for gate in gates {
        let cond = conditions.and_then(|cs| cs.iter().find(|c| c.type_ == gate.condition_type));
        match cond {
            None => return Some(format!("corresponding condition of pod readiness gate \"{}\" does not exist.", gate.condition_type)),
            Some(c) if c.status != "True" => {
                return Some(format!("the status of pod readiness gate \"{}\" is not \"True\", but {}", gate.condition_type, c.status));
            }
            Some(_) => {}
        }
    }
    None
}

fn set_condition(conds: &mut Vec<PodCondition>, type_: &str, status: bool, reason: Option<&str>, message: Option<String>, now: Timestamp) {
    let status = if status { "True" } else { "False" }.to_string();
    let existing = conds.iter().position(|c| c.type_ == type_);
    let transition = match existing.map(|i| &conds[i]) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    let cond = PodCondition {
        type_: type_.into(),
        status,
        reason: reason.map(Into::into),
        message,
        last_transition_time: transition,
        last_probe_time: None,
        observed_generation: existing.and_then(|i| conds[i].observed_generation),
    };
    match existing {
        Some(i) => conds[i] = cond,
        None => conds.push(cond),
    }
}

/// The duration of a `sleep N` postStart exec hook (`["sleep", "N"]` or `sh -c "sleep N"`).
fn post_start_sleep(c: &k8s_openapi::api::core::v1::Container) -> Option<Duration> {
    let command = c.lifecycle.as_ref()?.post_start.as_ref()?.exec.as_ref()?.command.as_ref()?;
    let words: Vec<&str> = match command.as_slice() {
        [shell, flag, script] if shell.ends_with("sh") && flag == "-c" => script.split_whitespace().collect(),
        other => other.iter().map(String::as_str).collect(),
    };
    match words.as_slice() {
        [sleep, n] if sleep.ends_with("sleep") => n.parse::<f64>().ok().map(Duration::from_secs_f64),
        _ => None,
    }
}

fn condition_is_true(status: &PodStatus, type_: &str) -> bool {
    status.conditions.iter().flatten().any(|c| c.type_ == type_ && c.status == "True")
}

pub(super) fn is_running(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

fn started_at_of(s: &ContainerStatus) -> Option<Timestamp> {
    Some(s.state.as_ref()?.running.as_ref()?.started_at.as_ref()?.0)
}

/// How long after a container's exit the kubelet notices it (its PLEG relists every second) and,
/// with no back-off, has started it again: about a second on the real node.
const EXIT_NOTICED: Duration = Duration::from_secs(1);

const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";

fn has_exited(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.terminated.is_some())
}

/// A container the kubelet holds back after it exited (`CrashLoopBackOff`).
fn in_back_off(s: &ContainerStatus) -> bool {
    s.state.as_ref().and_then(|st| st.waiting.as_ref()).is_some_and(|w| w.reason.as_deref() == Some(CRASH_LOOP_BACK_OFF))
}

fn terminated_at(s: &ContainerStatus) -> Option<Timestamp> {
    Some(s.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref()?.0)
}

/// The running container `old` after its process ended at `ended` with `exit`, as the kubelet
/// reports it: terminated, not ready, the previous exit still in `lastState`.
fn terminated(old: &ContainerStatus, exit: Exit, ended: Timestamp) -> ContainerStatus {
    ContainerStatus {
        ready: false,
        started: Some(false),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: exit.code,
                reason: Some(if exit.code == 0 { "Completed" } else { "Error" }.into()),
                container_id: old.container_id.clone(),
                started_at: started_at_of(old).map(Time),
                finished_at: Some(Time(ended)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..old.clone()
    }
}

/// The exited container `old` as the kubelet shows it just before it starts it again after
/// `back_off`: waiting in `CrashLoopBackOff`, the exit moved to `lastState`.
fn back_off_waiting(old: &ContainerStatus, back_off: Duration, pod: &Pod) -> ContainerStatus {
    let message = format!(
        "back-off {} restarting failed container={} pod={}_{}({})",
        go_duration(back_off),
        old.name,
        pod.name_any(),
        pod.namespace().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    );
    ContainerStatus {
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting { reason: Some(CRASH_LOOP_BACK_OFF.into()), message: Some(message) }),
            ..Default::default()
        }),
        last_state: old.state.clone(),
        ..old.clone()
    }
}

/// The exited (or backing-off) container `old` started again with `image`: restart count + 1,
/// the exit in `lastState`.
fn started_again(cfg: &SimConfig, uid: &str, old: &ContainerStatus, image: &str, ready: bool, now: Timestamp) -> ContainerStatus {
    let exit = if has_exited(old) { old.state.clone() } else { old.last_state.clone() };
    ContainerStatus { last_state: exit, ..running(cfg, uid, &old.name, image, old.restart_count + 1, ready, now) }
}

/// A duration as Go's `time.Duration.String` prints a whole number of seconds (`10s`, `5m0s`).
fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 { format!("{secs}s") } else { format!("{}m{}s", secs / 60, secs % 60) }
}

/// The pod conditions a kubelet sets while a resize waits or is under way.
pub const RESIZE_CONDITIONS: [&str; 2] = ["PodResizePending", "PodResizeInProgress"];

/// What a kubelet reports in `containerStatuses[].resources` for a running container: the
/// limits and requests it runs with, which after a resize are the spec's.
fn reported_resources(c: &k8s_openapi::api::core::v1::Container) -> ResourceRequirements {
    let spec = c.resources.clone().unwrap_or_default();
    ResourceRequirements { limits: spec.limits, requests: spec.requests, ..Default::default() }
}

/// Whether going from `from` to `to` changes a resource whose resize policy restarts the container.
fn resize_restarts(c: &k8s_openapi::api::core::v1::Container, from: &ResourceRequirements, to: &ResourceRequirements) -> bool {
    let value = |r: &ResourceRequirements, name: &str| {
        (r.limits.as_ref().and_then(|l| l.get(name).cloned()), r.requests.as_ref().and_then(|l| l.get(name).cloned()))
    };
    c.resize_policy
        .iter()
        .flatten()
        .any(|p| p.restart_policy == "RestartContainer" && value(from, &p.resource_name) != value(to, &p.resource_name))
}

/// The kubelet reports a container's volume mounts in its status (RecursiveReadOnlyMounts, on by
/// default since 1.33): name, path, `readOnly` when set, and for a read-only mount whether it is
/// recursively read-only; containerd 1.6 cannot make it so, hence `Disabled`.
fn volume_mount_statuses(c: &Container) -> Option<Vec<VolumeMountStatus>> {
    let mounts = c.volume_mounts.as_ref().filter(|m| !m.is_empty())?;
    Some(
        mounts
            .iter()
            .map(|m| {
                let read_only = m.read_only == Some(true);
                VolumeMountStatus {
                    name: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    read_only: read_only.then_some(true),
                    recursive_read_only: read_only.then(|| "Disabled".into()),
                }
            })
            .collect(),
    )
}

fn waiting(name: &str, image: &str, restart_count: i32, reason: &str, message: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: image.into(),
        image_id: String::new(),
        ready: false,
        started: Some(false),
        restart_count,
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting { reason: Some(reason.into()), message: (!message.is_empty()).then(|| message.into()) }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn running(cfg: &SimConfig, uid: &str, name: &str, image: &str, restart_count: i32, ready: bool, now: Timestamp) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: image.into(),
        image_id: cfg.image_id(image),
        container_id: Some(container_id(uid, name, restart_count)),
        ready,
        started: Some(true),
        restart_count,
        state: Some(ContainerState { running: Some(ContainerStateRunning { started_at: Some(Time(now)) }), ..Default::default() }),
        ..Default::default()
    }
}

fn restarted(cfg: &SimConfig, uid: &str, old: &ContainerStatus, image: &str, ready: bool, now: Timestamp) -> ContainerStatus {
    let mut s = running(cfg, uid, &old.name, image, old.restart_count + 1, ready, now);
    s.last_state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 0,
            reason: Some("Completed".into()),
            container_id: old.container_id.clone(),
            started_at: old.state.as_ref().and_then(|st| st.running.as_ref()).and_then(|r| r.started_at.clone()),
            finished_at: Some(Time(now)),
            ..Default::default()
        }),
        ..Default::default()
    });
    s
}
