//! A simulated kubelet: it registers Nodes, renews their Leases, and drives the status of pods
//! bound to them the way a kubelet would, in every way a CloneSet controller can observe.
//!
//! Why not kwok: its stock stages set readiness-gate conditions True once and never recompute
//! `Ready`, report no `imageID`, and do not react to an image change on a running pod. All three
//! are central to in-place updates, so we keep this behaviour in plain, tested Rust.
//!
//! The status it writes is a pure function of the pod, the simulated runtime's memory (pending
//! restarts, crash loops), the config and `now` ([`desired_status`]); the controller loop around
//! it only reads and patches.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, Node, Pod,
    PodCondition, PodIP, PodStatus, Probe, ResourceRequirements, VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;
use sha2::{Digest as _, Sha256};

/// Pod annotation: how long this pod's containers take to start (e.g. `2s`, `500ms`).
pub const ANNOTATION_STARTUP_DELAY: &str = "sim.cloneset-operator.dev/startup-delay";
/// Pod annotation: `"true"` keeps every container running but never ready.
pub const ANNOTATION_NEVER_READY: &str = "sim.cloneset-operator.dev/never-ready";
/// Label on every simulated node.
pub const NODE_LABEL: &str = "sim.cloneset-operator.dev/node";

/// Knobs of the simulated kubelet.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub node_names: Vec<String>,
    /// Default time from scheduling until containers run (a pod annotation overrides it).
    pub startup_delay: Duration,
    /// Time from an image change in the spec until the container has restarted with it.
    pub restart_delay: Duration,
    /// Upper bound on any pod's termination grace period, so tests do not wait 30 s.
    pub max_grace_period: Duration,
    /// An image reference containing this string cannot be pulled.
    pub unpullable_marker: String,
    /// Tags the simulated registry resolves to the digest of another tag (normalized reference →
    /// normalized reference), as two tags of one image can share a digest in a real registry.
    pub same_digest: BTreeMap<String, String>,
    /// Images whose own process ends (normalized reference → how): a container of one that does
    /// not set `command` exits, and the kubelet restarts it with its crash-loop back-off.
    pub exits: BTreeMap<String, Exit>,
    /// Images whose own process listens (normalized reference → on which ports, from when): a
    /// readiness probe of another port of such an image never passes. Images not listed pass
    /// every probe.
    pub serves: BTreeMap<String, Serves>,
    pub pods_per_node: u32,
    pub workers: u16,
    /// The version the nodes report as their kubelet's: the control plane's, as a real node
    /// of that cluster would.
    pub kubelet_version: String,
}

impl SimConfig {
    /// Whether the kubelet reports each running container's resources in its status: a
    /// kubelet does while its InPlacePodVerticalScaling gate is on, by default from 1.33 (the
    /// apiserver of 1.32, whose gate is off, drops the field again at the pod's next update).
    pub fn reports_container_resources(&self) -> bool {
        crate::versions::minor_of(&self.kubelet_version).is_none_or(|minor| minor >= (1, 33))
    }

    /// Whether the kubelet reports the sandbox ready (`PodReadyToStartContainers=True`) in a
    /// status write of its own while the containers are still being created, as it does from 1.36
    /// (its `OnPodSandboxReady` callback, kubernetes/kubernetes#134660); an older one's next write
    /// after the sandbox's shows the containers started.
    pub fn reports_sandbox_ready_alone(&self) -> bool {
        crate::versions::minor_of(&self.kubelet_version).is_none_or(|minor| minor >= (1, 36))
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            node_names: (0..3).map(|i| format!("sim-node-{i}")).collect(),
            startup_delay: Duration::ZERO,
            restart_delay: Duration::from_millis(500),
            max_grace_period: Duration::from_secs(5),
            unpullable_marker: "unpullable".into(),
            same_digest: BTreeMap::new(),
            exits: BTreeMap::new(),
            serves: BTreeMap::new(),
            pods_per_node: 2000,
            workers: 16,
            kubelet_version: crate::versions::newest().kubernetes,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pure part: what the status should be.

/// How a container of an image that ends on its own ends: `after` its start, with `code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    pub after: Duration,
    pub code: i32,
}

/// Where and from when an image's own process answers: on `ports`, `after` its start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serves {
    pub ports: Vec<i32>,
    pub after: Duration,
}

/// The least time from a container's start until the kubelet reports its first passing readiness
/// probe: the result comes in a status write of its own, after the one that reports the start.
const FIRST_PROBE: Duration = Duration::from_millis(100);

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

    fn forget_pod(&mut self, uid: &str) {
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

fn is_running(s: &ContainerStatus) -> bool {
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

/// A deterministic, digest-shaped image ID: equal images give equal IDs, different images differ.
impl SimConfig {
    /// How a container of `image` ends on its own: only when the image's own process runs (a
    /// `command` replaces it).
    pub fn exit_of(&self, c: &Container, image: &str) -> Option<Exit> {
        if c.command.as_ref().is_some_and(|cmd| !cmd.is_empty()) {
            return None;
        }
        self.exits.get(&normalize_image(image)).copied()
    }

    /// How long after its start a container of `image` first passes its readiness `probe`, or
    /// `None` when it never does: the probe asks a port the image's own process (which a
    /// `command` replaces) does not serve. Images `serves` does not list, and exec and gRPC
    /// probes, pass.
    pub fn first_readiness_pass(&self, c: &Container, image: &str, probe: &Probe) -> Option<Duration> {
        let delay = Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64).max(FIRST_PROBE);
        let port = probe.http_get.as_ref().map(|h| &h.port).or(probe.tcp_socket.as_ref().map(|t| &t.port));
        let serves = self.serves.get(&normalize_image(image)).filter(|_| c.command.as_ref().is_none_or(|cmd| cmd.is_empty()));
        let (Some(port), Some(serves)) = (port, serves) else { return Some(delay) };
        let port = match port {
            IntOrString::Int(p) => *p,
            IntOrString::String(name) => c.ports.iter().flatten().find(|p| p.name.as_deref() == Some(name))?.container_port,
        };
        serves.ports.contains(&port).then(|| delay.max(serves.after))
    }

    /// The imageID a pulled `image` reports, through the registry's shared digests.
    pub fn image_id(&self, image: &str) -> String {
        match self.same_digest.get(&normalize_image(image)) {
            Some(target) => image_id(target),
            None => image_id(image),
        }
    }
}

/// Parses `--same-digest` values `TAG=OTHER` (e.g. `nginx:mainline-alpine=nginx:alpine`).
pub fn parse_same_digest(pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    pairs
        .iter()
        .map(|p| {
            let (a, b) = p.split_once('=').ok_or_else(|| format!("--same-digest {p:?}: expected IMAGE=IMAGE"))?;
            Ok((normalize_image(a), normalize_image(b)))
        })
        .collect()
}

/// Parses `--exits` values `IMAGE=AFTER:CODE` (e.g. `cloneset-e2e-exits:1=1s:1`).
pub fn parse_exits(values: &[String]) -> Result<BTreeMap<String, Exit>, String> {
    values
        .iter()
        .map(|v| {
            let bad = || format!("--exits {v:?}: expected IMAGE=AFTER:CODE, e.g. busybox:1.36=0s:0");
            let (image, how) = v.split_once('=').ok_or_else(bad)?;
            let (after, code) = how.rsplit_once(':').ok_or_else(bad)?;
            Ok((normalize_image(image), Exit { after: parse_duration(after)?, code: code.parse().map_err(|_| bad())? }))
        })
        .collect()
}

/// Parses `--serves` values `IMAGE=PORT[,PORT...][@AFTER]` (e.g. `nginx:1.27=80`,
/// `slow-start:1=80@5s`).
pub fn parse_serves(values: &[String]) -> Result<BTreeMap<String, Serves>, String> {
    values
        .iter()
        .map(|v| {
            let bad = || format!("--serves {v:?}: expected IMAGE=PORT[,PORT...][@AFTER], e.g. nginx:1.27=80 or slow:1=80@5s");
            let (image, how) = v.split_once('=').ok_or_else(bad)?;
            let (ports, after) = match how.split_once('@') {
                Some((ports, after)) => (ports, parse_duration(after)?),
                None => (how, Duration::ZERO),
            };
            let ports = ports.split(',').map(|p| p.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
            Ok((normalize_image(image), Serves { ports, after }))
        })
        .collect()
}

/// A reference as the runtime names it: registry and `library/` filled in, `:latest` for no tag.
pub fn normalize_image(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let (repo, tag) = match name.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, Some(t)),
        _ => (name, None),
    };
    let repo = if repo.contains('/') { repo.to_string() } else { format!("library/{repo}") };
    let repo = if repo.split('/').next().is_some_and(|h| h.contains('.') || h.contains(':')) { repo } else { format!("docker.io/{repo}") };
    match (tag, digest) {
        (_, Some(d)) => format!("{repo}@{d}"),
        (Some(t), None) => format!("{repo}:{t}"),
        (None, None) => format!("{repo}:latest"),
    }
}

pub fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    let repo = match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    };
    let repo = if repo.contains('/') { repo.to_string() } else { format!("library/{repo}") };
    let repo = if repo.split('/').next().is_some_and(|h| h.contains('.') || h.contains(':')) { repo } else { format!("docker.io/{repo}") };
    // One digest per normalized reference: `nginx:alpine` and `docker.io/library/nginx:alpine`
    // are the same image.
    format!("{repo}@sha256:{}", hex_sha256(&normalize_image(image)))
}

fn container_id(uid: &str, name: &str, restart_count: i32) -> String {
    format!("containerd://{}", hex_sha256(&format!("{uid}/{name}/{restart_count}")))
}

fn hex_sha256(s: &str) -> String {
    Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

fn duration_between(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// When a terminating pod may be removed: its deletion started at `deletionTimestamp − grace`,
/// and containers take the grace period, capped at `max_grace`.
pub fn deletion_due(pod: &Pod, max_grace: Duration) -> Option<Timestamp> {
    let ts = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = Duration::from_secs(pod.metadata.deletion_grace_period_seconds.unwrap_or(30).max(0) as u64);
    Some(ts - signed(grace) + signed(grace.min(max_grace)))
}

/// Parses `1.5s`, `500ms`, `2m`, `0`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.find(|c: char| c.is_ascii_alphabetic()).map_or((s, "s"), |i| s.split_at(i));
    let value: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}: expected e.g. 500ms, 2s, 1m"))?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    if !(secs >= 0.0 && secs.is_finite()) {
        return Err(format!("invalid duration {s:?}: must be non-negative"));
    }
    Ok(Duration::from_secs_f64(secs))
}

// ---------------------------------------------------------------------------------------------
// I/O part.

struct Ctx {
    client: Client,
    cfg: SimConfig,
    nodes: HashMap<String, usize>,
    next_ip: Mutex<HashMap<usize, u32>>,
    memory: Mutex<RuntimeMemory>,
}

impl Ctx {
    fn allocate_pod_ip(&self, node: usize) -> String {
        let mut next = self.next_ip.lock().expect("ip lock");
        let n = next.entry(node).or_insert(0);
        let ip = crate::addresses::pod_ip(node, *n);
        *n += 1;
        ip.to_string()
    }
}

#[derive(Debug, thiserror::Error)]
enum SimError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

/// Registers the nodes, then serves until the process ends.
pub async fn run(client: Client, cfg: SimConfig) -> anyhow::Result<()> {
    register_nodes(&client, &cfg).await?;
    start_heartbeats(&client, &cfg);
    tokio::spawn(provision_volumes(client.clone()));

    let nodes = cfg.node_names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
    let ctx =
        Arc::new(Ctx { client: client.clone(), cfg: cfg.clone(), nodes, next_ip: Mutex::new(HashMap::new()), memory: Default::default() });
    let pods: Api<Pod> = Api::all(client);
    // A kubelet's pod cache holds whole pods; ours drops managedFields, which nothing here reads,
    // so 100,000 simulated pods leave more of the machine to the control plane under test.
    let (store, writer) = reflector::store();
    // No backoff here: the controller backs off its trigger stream itself, as with Controller::new.
    let bound_pods = watcher::watcher(pods, watcher::Config::default().fields("spec.nodeName!="))
        .modify(|pod| pod.metadata.managed_fields = None)
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(bound_pods, store)
        .with_config(kube::runtime::controller::Config::default().concurrency(cfg.workers))
        .run(reconcile_pod, on_error, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "pod reconcile failed");
            }
        })
        .await;
    Ok(())
}

async fn reconcile_pod(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).and_then(|n| ctx.nodes.get(n)).copied() else {
        return Ok(Action::await_change());
    };
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let now = Timestamp::now();

    if let Some(due) = deletion_due(&pod, ctx.cfg.max_grace_period) {
        if pod.metadata.deletion_grace_period_seconds == Some(0) {
            return Ok(Action::await_change()); // already force-deleted; only finalizers hold it
        }
        if now < due {
            return Ok(Action::requeue(duration_between(now, due)));
        }
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        ctx.memory.lock().expect("runtime memory lock").forget_pod(pod.metadata.uid.as_deref().unwrap_or_default());
        return Ok(Action::await_change());
    }

    // A kubelet never takes a pod out of a terminal phase.
    if is_terminal(&pod) {
        return Ok(Action::await_change());
    }

    let host_ip = crate::addresses::node_ip(node).to_string();
    let fresh_ip = if pod.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some() { String::new() } else { ctx.allocate_pod_ip(node) };
    let slot = NodeSlot { host_ip: &host_ip, fresh_pod_ip: &fresh_ip };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    // Decided on this pod's part of the runtime memory, kept only once the decision needs no
    // write or its write is made: a decision dropped unwritten must not leave a restart counted.
    let decide = |view: &Pod| {
        let mut part = ctx.memory.lock().expect("runtime memory lock").of_pod(&uid);
        let plan = desired_status(view, &ctx.cfg, &slot, &mut part, now);
        (plan, part)
    };
    let (mut plan, mut part) = decide(&pod);
    if plan.status.is_some() {
        // As the real kubelet's status manager does (syncPod): read the pod, then patch its
        // status with the UID as the only precondition. Its status is decided again from the
        // read when the watch's view was behind, so no write is computed from a stale view and
        // none is refused as a conflict (a resourceVersion precondition had a fifth of them
        // answered 409 on a loaded apiserver, each a whole patch's work for nothing).
        let fresh = match api.get(&pod.name_any()).await {
            Ok(fresh) => fresh,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        };
        if fresh.metadata.uid != pod.metadata.uid || fresh.metadata.deletion_timestamp.is_some() || is_terminal(&fresh) {
            return Ok(Action::await_change()); // recreated, deleting or ended: the watch brings it
        }
        if fresh.resource_version() != pod.resource_version() {
            (plan, part) = decide(&fresh);
        }
        if let Some(status) = plan.status.take() {
            let patch = json!({ "metadata": { "uid": uid }, "status": status_patch(&fresh, status)? });
            match api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(patch)).await {
                Ok(_) => {}
                // Gone, or another pod of the name (its UID differs): the watch brings that.
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => return Ok(Action::await_change()),
                Err(e) => return Err(e.into()),
            }
        }
    }
    ctx.memory.lock().expect("runtime memory lock").keep_pod(&uid, part);
    Ok(plan.recheck_after.map_or_else(Action::await_change, Action::requeue))
}

/// A pod a kubelet no longer runs: tests set a terminal phase to simulate an eviction.
fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Failed" | "Succeeded"))
}

/// The pod conditions the kubelet owns; the others (a readiness gate's, PodScheduled) belong to
/// other writers.
const KUBELET_CONDITIONS: [&str; 4] = ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"];

/// `status` as a strategic merge patch onto `view`'s: `conditions` merge by type and only the
/// kubelet's own are sent, so a condition another writer changed since `view` was read (a
/// readiness gate flipped by the operator) is never written back with its old value, as the
/// real kubelet's status manager leaves them alone; a resize condition `view` has and `status`
/// drops is deleted by name.
fn status_patch(view: &Pod, mut status: PodStatus) -> Result<serde_json::Value, serde_json::Error> {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| KUBELET_CONDITIONS.contains(&c.type_.as_str()));
    }
    let mut status = with_cleared_condition_fields(serde_json::to_value(&status)?);
    let had: Vec<&str> = view.status.iter().flat_map(|s| s.conditions.iter().flatten()).map(|c| c.type_.as_str()).collect();
    for gone in RESIZE_CONDITIONS.iter().filter(|t| had.contains(t)) {
        status["conditions"].as_array_mut().into_iter().for_each(|l| l.push(json!({"type": gone, "$patch": "delete"})));
    }
    Ok(status)
}

/// The kubelet writes each of its conditions whole (its status patch is a diff, so a reason it no
/// longer sets is removed); in a strategic merge an absent field would keep another writer's.
fn with_cleared_condition_fields(mut status: serde_json::Value) -> serde_json::Value {
    for c in status.get_mut("conditions").and_then(|c| c.as_array_mut()).into_iter().flatten() {
        for field in ["reason", "message"] {
            if let Some(obj) = c.as_object_mut() {
                obj.entry(field).or_insert(serde_json::Value::Null);
            }
        }
    }
    status
}

fn on_error(_pod: Arc<Pod>, _err: &SimError, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(500))
}

async fn register_nodes(client: &Client, cfg: &SimConfig) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for (i, name) in cfg.node_names.iter().enumerate() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
                    NODE_LABEL: "true",
                },
            },
        }))?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        patch_node_status(&nodes, name, i, cfg).await?;
    }
    Ok(())
}

async fn patch_node_status(nodes: &Api<Node>, name: &str, index: usize, cfg: &SimConfig) -> anyhow::Result<()> {
    let now = Time(Timestamp::now());
    let cond = |type_: &str, status: &str, reason: &str, message: &str| json!({"type": type_, "status": status, "reason": reason, "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now});
    let resources = json!({"cpu": "64", "memory": "256Gi", "pods": cfg.pods_per_node.to_string(), "ephemeral-storage": "1Ti"});
    let status = json!({
        "status": {
            "conditions": [
                cond("Ready", "True", "KubeletReady", "simulated kubelet is posting ready status"),
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "simulated"),
            ],
            "addresses": [{"type": "InternalIP", "address": crate::addresses::node_ip(index).to_string()}, {"type": "Hostname", "address": name}],
            "capacity": resources,
            "allocatable": resources,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": hex_sha256(name)[..32].to_string(),
                "systemUUID": hex_sha256(name)[32..].to_string(),
                "bootID": "sim",
                "kernelVersion": "6.1.0-sim",
                "osImage": "Simulated Linux",
                "containerRuntimeVersion": "containerd://1.7.0-sim",
                "kubeletVersion": cfg.kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
    });
    nodes.patch_status(name, &PatchParams::default(), &Patch::Strategic(status)).await?;
    Ok(())
}

/// Renews each node's Lease every 10 s (as a kubelet does), and re-posts node status each minute
/// so a node marked Unknown while we were stopped comes back. Each node keeps its own clock, as
/// separate kubelets do, their starts spread over the period: renewed one after another, 128
/// nodes on a busy apiserver took 33 s a round, close to the Lease's 40 s.
fn start_heartbeats(client: &Client, cfg: &SimConfig) {
    let count = cfg.node_names.len().max(1) as u32;
    for (i, name) in cfg.node_names.iter().enumerate() {
        let offset = LEASE_RENEW_PERIOD * i as u32 / count;
        tokio::spawn(node_heartbeat(client.clone(), cfg.clone(), i, name.clone(), offset));
    }
}

const LEASE_RENEW_PERIOD: Duration = Duration::from_secs(10);

async fn node_heartbeat(client: Client, cfg: SimConfig, index: usize, name: String, offset: Duration) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    // The Node's UID for the Lease's owner reference, read once (a kubelet does not read its Node
    // to renew its Lease; at 128 nodes a read per renewal was 13 GETs a second), and read again
    // after a failed renewal in case the Node was replaced.
    let mut node_uid: Option<String> = None;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + offset, LEASE_RENEW_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tick.tick().await;
        if let Err(e) = renew_lease(&leases, &nodes, &mut node_uid, &name).await {
            node_uid = None;
            tracing::warn!(node = %name, error = %e, "lease renewal failed");
        }
        if n % 6 == 5
            && let Err(e) = patch_node_status(&nodes, &name, index, &cfg).await
        {
            tracing::warn!(node = %name, error = %e, "node status update failed");
        }
    }
}

async fn renew_lease(leases: &Api<Lease>, nodes: &Api<Node>, node_uid: &mut Option<String>, name: &str) -> anyhow::Result<()> {
    let uid = match node_uid {
        Some(uid) => uid.clone(),
        None => node_uid.insert(nodes.get(name).await?.metadata.uid.unwrap_or_default()).clone(),
    };
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": MicroTime(Timestamp::now())},
    });
    leases.patch(name, &PatchParams::apply("sim-kubelet").force(), &Patch::Apply(lease)).await?;
    Ok(())
}

/// Label on the PersistentVolumes the simulated provisioner creates.
pub const PV_LABEL: &str = "sim.cloneset-operator.dev/provisioned";

/// A stand-in for a storage provisioner: every pending PVC without a volume gets a matching
/// PersistentVolume pre-bound to it (the controller-manager's PV binder completes the binding,
/// and the scheduler can then place the pod); released volumes are deleted.
async fn provision_volumes(client: Client) {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let pvcs: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let claims = watcher::watcher(pvcs, watcher::Config::default()).default_backoff();
    let volumes = watcher::watcher(pvs.clone(), watcher::Config::default().labels(PV_LABEL)).default_backoff();
    use kube::runtime::WatchStreamExt as _;
    let claims = claims.applied_objects().filter_map(|r| async move { r.ok() }).map(either::Either::Left);
    let volumes = volumes.applied_objects().filter_map(|r| async move { r.ok() }).map(either::Either::Right);
    let mut events = futures::stream::select(claims, volumes).boxed();
    while let Some(ev) = events.next().await {
        let result = match ev {
            either::Either::Left(pvc) => {
                let pending = pvc.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|p| p == "Pending");
                let unbound = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_none_or(str::is_empty);
                if !(pending && unbound) || pvc.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let spec = pvc.spec.clone().unwrap_or_default();
                let storage = spec.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage").cloned());
                let uid = pvc.metadata.uid.clone().unwrap_or_default();
                let pv = json!({
                    "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": format!("sim-pv-{uid}"), "labels": {PV_LABEL: "true"}},
                    "spec": {
                        "capacity": {"storage": storage.map_or_else(|| "1Gi".to_string(), |q| q.0)},
                        "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": spec.storage_class_name.clone().unwrap_or_default(),
                        "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
                        "hostPath": {"path": format!("/tmp/sim-volumes/{uid}")},
                        "claimRef": {"namespace": pvc.namespace(), "name": pvc.name_any(), "uid": uid},
                    },
                });
                match serde_json::from_value::<PersistentVolume>(pv) {
                    Ok(pv) => pvs.create(&PostParams::default(), &pv).await.map(|_| ()),
                    Err(e) => Err(kube::Error::SerdeError(e)),
                }
            }
            either::Either::Right(pv) => {
                if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Released") {
                    continue;
                }
                pvs.delete(&pv.name_any(), &DeleteParams::default()).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
            Err(e) => tracing::warn!(error = %e, "volume provisioning step failed"),
        }
    }
}

#[cfg(test)]
mod tests {
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
        let restarted =
            |plan: &StatusPlan| plan.status.as_ref().is_some_and(|s| s.container_statuses.as_ref().unwrap()[0].image == "nginx:2");
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
            serde_json::from_value::<Container>(json!({"name": "c", "image": image, "ports": [{"name": "web", "containerPort": 80}]}))
                .unwrap()
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
        assert_eq!(
            cfg.first_readiness_pass(&container("other:1"), "other:1", &probe(json!(6379))),
            Some(FIRST_PROBE),
            "an image not named"
        );
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
}
