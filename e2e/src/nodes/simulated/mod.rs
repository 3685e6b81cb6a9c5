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
//!
//! This file holds its knobs and the images the simulated registry knows; `status.rs` the pure
//! part, `kubelet.rs` the controller loop, the nodes, their Leases and the volume provisioner.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

mod kubelet;
mod status;
#[cfg(test)]
mod tests;

pub use kubelet::{PV_LABEL, run};
pub use status::*;

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
