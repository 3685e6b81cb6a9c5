//! The host the local control plane runs on: running its commands, installing Debian packages,
//! and a snapshot of what a run may leave behind (processes, mounts, interfaces, routes, iptables
//! chains, cgroups), so `make test` can check that `down` removed all of it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// A command on the PATH, or a file given by its absolute path.
pub fn which(name: &str) -> Option<PathBuf> {
    if name.starts_with('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// Runs a command to completion; its stdout, or an error carrying what it printed.
pub fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program).args(args).stdin(Stdio::null()).output().with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "`{program} {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a clean-up command whose failure only means there was nothing to clean.
pub fn run_quietly(program: &str, args: &[&str]) -> bool {
    Command::new(program).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Makes sure each `(command or absolute path, Debian package)` is installed, installing the
/// missing packages. `why` names what needs them, for the messages.
pub fn ensure_debian_packages(needed: &[(&str, &str)], why: &str) -> anyhow::Result<()> {
    let missing: Vec<&str> = needed.iter().filter(|(cmd, _)| which(cmd).is_none()).map(|(_, pkg)| *pkg).collect();
    if missing.is_empty() {
        return Ok(());
    }
    install_debian_packages(&missing, why)?;
    match needed.iter().find(|(cmd, _)| which(cmd).is_none()) {
        Some((cmd, pkg)) => bail!("{why}: {cmd} is still missing after installing {pkg}"),
        None => Ok(()),
    }
}

/// Installs Debian packages with apt-get (as root, or through `sudo -n`).
pub fn install_debian_packages(missing: &[&str], why: &str) -> anyhow::Result<()> {
    eprintln!("local-cluster: installing Debian's {} for {why}", missing.join(", "));
    let sudo: &[&str] = if is_root() { &[] } else { &["sudo", "-n"] };
    let apt = |args: &[&str]| -> bool {
        let mut all: Vec<&str> = sudo.to_vec();
        all.extend_from_slice(args);
        Command::new(all[0])
            .args(&all[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let mut install = vec!["apt-get", "install", "-y", "-qq", "--no-install-recommends"];
    install.extend(missing);
    if apt(&["apt-get", "update", "-qq"]) && apt(&install) {
        return Ok(());
    }
    bail!("{why} needs {}: install them with `apt-get install {}` as root", missing.join(", "), missing.join(" "))
}

/// Mount points at or below `root`, deepest first (the order to unmount them in).
pub fn mounts_below(root: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> =
        text.lines().filter_map(|l| l.split(' ').nth(4)).map(unescape_mount_path).filter(|p| p.starts_with(root)).collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// /proc/self/mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape_mount_path(field: &str) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("x"), 8)
        {
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(String::from_utf8_lossy(&out).into_owned())
}

/// Unmounts everything at or below `root`, deepest first (lazily, so a busy mount still goes).
pub fn unmount_below(root: &Path) {
    for m in mounts_below(root) {
        let c = std::ffi::CString::new(m.as_os_str().as_encoded_bytes()).expect("no NUL in a mount path");
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// What a run could leave on the host. Two snapshots, before `up` and after `down`, must not
/// differ in anything but [`Snapshot::leftovers`] ignores.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub processes: BTreeSet<String>,
    pub mounts: BTreeSet<String>,
    pub links: BTreeSet<String>,
    pub routes: BTreeSet<String>,
    pub iptables_chains: BTreeSet<String>,
    pub cgroups: BTreeSet<String>,
}

/// The executables of the host processes a control plane with real nodes starts.
const WATCHED_PROCESSES: &[&str] =
    &["kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "docker-registry", "etcd", "kube-apiserver", "local-cluster"];

impl Snapshot {
    pub fn take() -> Self {
        // The kernel keeps the first 15 bytes of an executable's name in `comm`.
        let watched: Vec<&str> = WATCHED_PROCESSES.iter().map(|w| &w[..w.len().min(15)]).collect();
        let running: Vec<String> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
            // A zombie has ended; only its parent has yet to collect it.
            .filter(|e| {
                std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| !s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
            })
            .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
            .map(|c| c.trim().to_string())
            .filter(|c| watched.contains(&c.as_str()))
            .collect();
        // One entry per executable with how many run: a second kubelet is a leftover too.
        let processes = running.iter().map(|name| format!("{name} ×{}", running.iter().filter(|p| *p == name).count())).collect();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(str::to_string)
            .collect();
        let links = run("ip", &["-o", "link", "show"])
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(':').nth(1))
            .map(|n| n.trim().split('@').next().unwrap_or_default().to_string())
            .collect();
        let mut routes: BTreeSet<String> = BTreeSet::new();
        for family in ["-4", "-6"] {
            routes.extend(run("ip", &[family, "route", "show", "table", "all"]).unwrap_or_default().lines().map(str::to_string));
        }
        let mut iptables_chains = BTreeSet::new();
        for (save, family) in [("iptables-save", "ipv4"), ("ip6tables-save", "ipv6")] {
            if which(save).is_none() {
                continue;
            }
            iptables_chains.extend(iptables_items(family, &run(save, &[]).unwrap_or_default()));
        }
        let cgroups = std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|hierarchy| {
                let h = hierarchy.file_name().to_string_lossy().into_owned();
                std::fs::read_dir(hierarchy.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(move |e| format!("{h}/{}", e.file_name().to_string_lossy()))
            })
            .collect();
        Self { processes, mounts, links, routes, iptables_chains, cgroups }
    }

    /// What `after` has that `self` (taken before) did not: one line per item.
    pub fn leftovers(&self, after: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        let mut diff = |kind: &str, before: &BTreeSet<String>, after: &BTreeSet<String>| {
            out.extend(after.difference(before).map(|item| format!("{kind}: {item}")));
        };
        diff("process", &self.processes, &after.processes);
        diff("mount", &self.mounts, &after.mounts);
        diff("interface", &self.links, &after.links);
        diff("route", &self.routes, &after.routes);
        diff("iptables", &self.iptables_chains, &after.iptables_chains);
        diff("cgroup", &self.cgroups, &after.cgroups);
        out
    }
}

/// The chains someone created and every rule, from `iptables-save` output. A table's built-in
/// chains (those with a policy) are left out: the kernel makes them when a table is first used,
/// so on a fresh machine they appear during a run that added nothing.
fn iptables_items(family: &str, save: &str) -> BTreeSet<String> {
    let mut items = BTreeSet::new();
    let mut table = "";
    for line in save.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t;
        } else if let Some(chain) = line.strip_prefix(':') {
            let mut words = chain.split(' ');
            let (name, policy) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
            if policy == "-" {
                items.insert(format!("{family} {table} {name}"));
            }
        } else if line.starts_with("-A ") {
            items.insert(format!("{family} {table} {line}"));
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found on a fresh machine: its first run made the mangle and nat tables exist, and their
    /// empty built-in chains are nothing a run left behind; a chain or rule it added is.
    #[test]
    fn a_tables_built_in_chains_are_not_leftovers_but_added_chains_and_rules_are() {
        let save = "*mangle\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n*filter\n:INPUT ACCEPT [1:2]\n\
                    :KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n";
        let items: Vec<String> = iptables_items("ipv4", save).into_iter().collect();
        assert_eq!(items, ["ipv4 filter -A INPUT -j KUBE-FIREWALL", "ipv4 filter KUBE-FIREWALL"]);
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path(r"/run/a\040b/c"), PathBuf::from("/run/a b/c"));
        assert_eq!(unescape_mount_path("/plain"), PathBuf::from("/plain"));
    }

    #[test]
    fn leftovers_are_what_appeared_in_between() {
        let before = Snapshot { links: ["lo", "eth0"].map(String::from).into(), ..Default::default() };
        let after = Snapshot {
            links: ["lo", "eth0", "csobr0"].map(String::from).into(),
            mounts: ["/run/x"].map(String::from).into(),
            ..Default::default()
        };
        assert_eq!(before.leftovers(&after), ["mount: /run/x", "interface: csobr0"]);
        assert!(after.leftovers(&before).is_empty(), "what went away is not a leftover");
    }
}
