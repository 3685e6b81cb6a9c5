//! The binaries a control plane runs: Kubernetes built from source for the release under test,
//! etcd, the real nodes' Debian packages, and the workspace's own tools.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

use crate::nodes::network;

use super::*;

/// Where the control plane's binaries are.
pub struct Binaries {
    /// The directory holding kube-apiserver, kube-controller-manager and kube-scheduler (and,
    /// for real nodes, kubelet and kube-proxy).
    pub kubernetes: PathBuf,
    pub etcd: PathBuf,
}

/// What real nodes need from Debian: (command or path, package).
pub(super) const REAL_NODE_PACKAGES: &[(&str, &str)] = &[
    ("containerd", "containerd"),
    ("runc", "runc"),
    ("/usr/lib/cni/bridge", "containernetworking-plugins"),
    ("/bin/busybox", "busybox-static"),
    ("docker-registry", "docker-registry"),
    ("skopeo", "skopeo"),
    ("iptables", "iptables"),
    ("gcc", "gcc"),
];

/// Builds (once) the pinned Kubernetes and etcd, and for real nodes
/// kubelet, kube-proxy and their Debian packages: everything `up` needs from the network, so it
/// can run later with the network closed.
pub fn prepare(k8s_version: &str, real_nodes: bool) -> anyhow::Result<Binaries> {
    // kubectl of the same release: the tests and scripts that run it stay within its version skew.
    let mut binaries = vec!["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"];
    if real_nodes {
        network::check_privileges()?;
        crate::host::ensure_debian_packages(REAL_NODE_PACKAGES, "real nodes")?;
        // Debian's dynamic busybox also provides /bin/busybox; the test images need the static one.
        if std::fs::read("/bin/busybox").map_or(true, |b| crate::image::check_static(&b).is_err()) {
            crate::host::install_debian_packages(&["busybox-static"], "real nodes' test images (a static busybox)")?;
        }
        binaries.extend(["kubelet", "kube-proxy"]);
    }
    Ok(Binaries { kubernetes: build_kubernetes(k8s_version, &binaries)?, etcd: find_or_build_etcd(k8s_version)? })
}

/// The binaries real nodes run besides the system's containerd.
pub(super) struct RealBinaries {
    pub(super) kubernetes: PathBuf,
    /// `local-cluster`, whose `forward` relays the apiserver to the bridge.
    pub(super) forwarder: PathBuf,
}

/// Runs the build script, which builds (once) or reuses the cached Kubernetes binaries.
pub(super) fn build_kubernetes(version: &str, binaries: &[&str]) -> anyhow::Result<PathBuf> {
    let script = e2e_crate_dir().join("scripts/build-k8s.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(binaries)
        .env("K8S_VERSION", version)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("could not build Kubernetes {version} ({}); see the messages above", binaries.join(", "));
    }
    let dir = PathBuf::from(String::from_utf8(out.stdout)?.trim());
    for b in binaries {
        if !dir.join(b).is_file() {
            bail!("the Kubernetes build reported success but {} is missing", dir.join(b).display());
        }
    }
    Ok(dir)
}

/// etcd from `ETCD_BIN`, or the release pinned for Kubernetes `k8s_version` built (once) from the
/// Go module proxy by `build-etcd.sh`: Debian's 3.4.23 lacks the progress notifications
/// kube-apiserver needs to serve streaming lists.
pub(super) fn find_or_build_etcd(k8s_version: &str) -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("ETCD_BIN") {
        return Ok(PathBuf::from(p));
    }
    let script = e2e_crate_dir().join("scripts/build-etcd.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("ETCD_VERSION", crate::versions::etcd_for(k8s_version))
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("could not build etcd; see the messages above (or set ETCD_BIN to an etcd 3.5.13+ binary)");
    }
    let etcd = PathBuf::from(String::from_utf8(out.stdout)?.trim());
    if !etcd.is_file() {
        bail!("the etcd build reported success but {} is missing", etcd.display());
    }
    Ok(etcd)
}

/// A binary built by this workspace, next to the running executable (or one level up, for test
/// binaries in `target/<profile>/deps`). `<NAME>_BIN` (upper-case, `-` → `_`) overrides.
/// etcd's flag for progress notifications (which kube-apiserver needs to serve streaming lists),
/// as this etcd spells it: `--experimental-` before etcd 3.6, which 3.7 no longer accepts.
pub(super) fn etcd_progress_notify_flag(etcd: &Path) -> anyhow::Result<&'static str> {
    let help = std::process::Command::new(etcd).arg("--help").output().with_context(|| format!("running {} --help", etcd.display()))?;
    let text = String::from_utf8_lossy(&help.stdout) + String::from_utf8_lossy(&help.stderr);
    Ok(if text.contains("\n  --watch-progress-notify-interval") {
        "--watch-progress-notify-interval"
    } else {
        "--experimental-watch-progress-notify-interval"
    })
}

pub fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let var = format!("{}_BIN", name.to_uppercase().replace('-', "_"));
    if let Ok(p) = std::env::var(&var) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent();
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let candidate = d.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
        dir = d.parent();
    }
    bail!("cannot find the `{name}` binary next to {}; build it with `cargo build --workspace --bins` or set {var}", exe.display())
}
