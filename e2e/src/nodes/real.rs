//! Real nodes: a kubelet of the pinned Kubernetes with its own containerd (Debian's, with runc
//! and the CNI bridge plugin), running real containers, and one kube-proxy for the host. They
//! join the local control plane beside the simulated nodes, tainted so that only pods meant for
//! them (tolerating [`TAINT`] and selecting [`LABEL`]) land there.
//!
//! Everything is confined to what the run creates: containerd's state, sockets and network
//! namespaces under `/run/cso<slot>/n<i>`, its images and the kubelet's root under the control
//! plane's directory, cgroups under `/cso<slot>n<i>` in each hierarchy, pods on the bridge of
//! [`crate::nodes::network`]. Images come only from the local registry ([`crate::registry`]):
//! containerd resolves every registry host to it. [`teardown`] removes all of it.
//!
//! The configuration texts are pure functions, tested below; the rest starts and stops processes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::addresses::Bridged;
use crate::host::{run, run_quietly, unmount_below};

/// Taint on every real node: pods land there only when they say so.
pub const TAINT: &str = "cloneset-operator.dev/real-node";
/// Label on every real node (`"true"`), for a nodeSelector.
pub const LABEL: &str = "cloneset-operator.dev/real-node";
/// The pause image containerd runs each pod sandbox with; built and pushed by `up`.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Registries with a hosts.toml of their own; every other one is covered by `_default`.
const MIRRORED_HOSTS: &[&str] = &["docker.io", "registry.k8s.io", "_default"];

/// One real node as `up` laid it out.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RealNode {
    pub name: String,
    pub index: usize,
    /// Persistent files: containerd's root (images, snapshots), the kubelet's root, configs.
    pub dir: PathBuf,
    /// containerd's socket, state and the pods' network namespaces (a short path: sockets are
    /// limited to 107 bytes).
    pub run_dir: PathBuf,
    pub kubelet_port: u16,
}

impl RealNode {
    pub fn new(cluster_dir: &Path, b: Bridged, index: usize, kubelet_port: u16) -> Self {
        let name = format!("real-node-{index}");
        Self {
            dir: cluster_dir.join("nodes").join(&name),
            run_dir: PathBuf::from(format!("/run/cso{}/n{index}", b.slot)),
            name,
            index,
            kubelet_port,
        }
    }

    pub fn containerd_socket(&self) -> PathBuf {
        self.run_dir.join("containerd.sock")
    }

    /// The kubelet's cgroup root, a top-level cgroup in every v1 hierarchy.
    pub fn cgroup_root(&self, b: Bridged) -> String {
        format!("/cso{}n{}", b.slot, self.index)
    }

    fn kubelet_root(&self) -> PathBuf {
        self.dir.join("kubelet")
    }
}

/// What `up` started for real nodes, kept in the cluster's state for `down`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RealNodes {
    pub network: Bridged,
    pub registry: SocketAddr,
    pub nodes: Vec<RealNode>,
}

/// containerd's configuration for one node: CRI with runc, the sandbox image from the local
/// registry, network namespaces under its state directory (so `down` finds them), and no
/// `oom_score_adj` below its own (this machine's sandbox refuses the pause container's -998).
pub fn containerd_config(node: &RealNode) -> String {
    let d = |p: &str| node.dir.join(p).display().to_string();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{hosts}"
"#,
        root = d("containerd"),
        state = node.run_dir.join("state").display(),
        socket = node.containerd_socket().display(),
        cni = d("cni"),
        hosts = d("registry-hosts"),
    )
}

/// A registry host's `hosts.toml`: the local registry is its only server, so containerd never
/// resolves or dials the real one.
pub fn hosts_toml(registry: SocketAddr) -> String {
    format!("server = \"http://{registry}\"\n\n[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\"]\n")
}

/// The CNI network: the slot's bridge, a block of its subnet per node, no masquerade, and in each
/// pod one route besides its subnet's: the service range, through the bridge (no default route).
pub fn cni_conflist(node: &RealNode, b: Bridged) -> String {
    let (first, last) = b.pod_range(node.index);
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "cloneset-local",
        "plugins": [
            {"type": "bridge", "bridge": b.bridge_name(), "isGateway": true, "ipMasq": false, "hairpinMode": true,
             "ipam": {"type": "host-local", "dataDir": node.dir.join("cni-ipam"),
                      "ranges": [[{"subnet": b.pod_subnet(), "rangeStart": first, "rangeEnd": last, "gateway": b.bridge_ip()}]],
                      "routes": [{"dst": b.service_cidr(), "gw": b.bridge_ip()}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    })
    .to_string()
}

/// Paths of the PKI files a node's kubelet uses.
pub struct KubeletPki {
    pub ca: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
}

/// The kubelet's configuration: cgroup v1 through cgroupfs under the node's own cgroup root,
/// authenticated and authorised by the apiserver, no DNS for pods (nothing to resolve here),
/// no image garbage collection or eviction thresholds to surprise a test.
pub fn kubelet_config(node: &RealNode, b: Bridged, pki: &KubeletPki) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
containerRuntimeEndpoint: unix://{socket}
failSwapOn: false
address: {node_ip}
port: {port}
readOnlyPort: 0
healthzPort: 0
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
resolvConf: ""
podLogsDir: {pod_logs}
clusterDomain: cluster.local
evictionHard: {{}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#,
        cgroup_root = node.cgroup_root(b),
        socket = node.containerd_socket().display(),
        node_ip = b.node_ip(node.index),
        port = node.kubelet_port,
        cert = pki.serving_cert.display(),
        key = pki.serving_key.display(),
        ca = pki.ca.display(),
        pod_logs = node.dir.join("pod-logs").display(),
    )
}

/// The kubelet's command line (after `--config`).
pub fn kubelet_args(node: &RealNode, b: Bridged, config: &Path, kubeconfig: &Path) -> Vec<String> {
    vec![
        format!("--config={}", config.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--node-ip={}", b.node_ip(node.index)),
        format!("--hostname-override={}", node.name),
        format!("--root-dir={}", node.kubelet_root().display()),
        format!("--node-labels={LABEL}=true"),
        format!("--register-with-taints={TAINT}=true:NoSchedule"),
        "--v=1".into(),
    ]
}

/// kube-proxy's configuration for the host: iptables mode, node ports on the bridge only, no
/// change to the host's conntrack or `route_localnet` settings, servers on loopback.
pub fn kube_proxy_config(b: Bridged, hostname: &str, kubeconfig: &Path, metrics_port: u16) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {hostname}
mode: iptables
clusterCIDR: {pods}
nodePortAddresses: ["{bridge_ip}/32"]
healthzBindAddress: ""
metricsBindAddress: "127.0.0.1:{metrics_port}"
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
"#,
        kubeconfig = kubeconfig.display(),
        pods = b.pod_subnet(),
        bridge_ip = b.bridge_ip(),
    )
}

/// Whether kube-proxy has programmed the `kubernetes` Service: its rules are in place.
pub fn kube_proxy_synced(b: Bridged) -> bool {
    run("iptables", &["-w", "-t", "nat", "-S", "KUBE-SERVICES"])
        .is_ok_and(|rules| rules.contains(&format!("{}/32", b.kubernetes_service_ip())))
}

/// Writes a node's containerd configuration, registry hosts and CNI network, starting from an
/// empty directory (a previous run's pods and images are not carried over).
pub fn write_node_files(node: &RealNode, b: Bridged, registry: SocketAddr) -> anyhow::Result<PathBuf> {
    let _ = std::fs::remove_dir_all(&node.dir);
    std::fs::create_dir_all(node.dir.join("cni"))?;
    std::fs::create_dir_all(&node.run_dir)?;
    for host in MIRRORED_HOSTS {
        let d = node.dir.join("registry-hosts").join(host);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("hosts.toml"), hosts_toml(registry))?;
    }
    std::fs::write(node.dir.join("cni/10-cloneset-local.conflist"), cni_conflist(node, b))?;
    let config = node.dir.join("containerd.toml");
    std::fs::write(&config, containerd_config(node))?;
    for hierarchy in cgroup_hierarchies() {
        std::fs::create_dir_all(hierarchy.join(node.cgroup_root(b).trim_start_matches('/')))?;
    }
    Ok(config)
}

/// The mounted cgroup v1 hierarchies (and the v2 one, if any).
fn cgroup_hierarchies() -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect()
}

/// Removes every container of a node through its containerd (which must still run): the
/// kubelet is stopped first, so nothing restarts them. Pods' network namespaces and mounts are
/// left to [`teardown`].
pub fn remove_containers(node: &RealNode) {
    let socket = node.containerd_socket();
    if !socket.exists() {
        return;
    }
    let ctr = |args: &[&str]| {
        let mut all = vec!["--address", socket.to_str().unwrap_or_default(), "--namespace", "k8s.io"];
        all.extend_from_slice(args);
        run("ctr", &all)
    };
    for task in ctr(&["tasks", "list", "--quiet"]).unwrap_or_default().lines().filter(|l| !l.is_empty()) {
        let _ = ctr(&["tasks", "kill", "--all", "--signal", "SIGKILL", task]);
    }
    for task in ctr(&["tasks", "list", "--quiet"]).unwrap_or_default().lines().filter(|l| !l.is_empty()) {
        let _ = ctr(&["tasks", "delete", "--force", task]);
    }
    for container in ctr(&["containers", "list", "--quiet"]).unwrap_or_default().lines().filter(|l| !l.is_empty()) {
        let _ = ctr(&["containers", "delete", container]);
    }
}

/// After every process of the nodes is stopped: kills containerd shims left behind, unmounts
/// what the kubelet and containerd mounted, removes cgroups, the kubelet's and kube-proxy's
/// iptables chains, and the network.
pub fn teardown(real: &RealNodes, kube_proxy: Option<&Path>) {
    for node in &real.nodes {
        kill_shims(&node.containerd_socket());
        unmount_below(&node.run_dir);
        unmount_below(&node.dir);
        for hierarchy in cgroup_hierarchies() {
            remove_cgroup_tree(&hierarchy.join(node.cgroup_root(real.network).trim_start_matches('/')));
        }
        let _ = std::fs::remove_dir_all(&node.run_dir);
        remove_log_links(&node.dir.join("pod-logs"));
    }
    if let Some(parent) = real.nodes.first().and_then(|n| n.run_dir.parent()) {
        let _ = std::fs::remove_dir(parent);
    }
    if let Some(kube_proxy) = kube_proxy {
        run_quietly(&kube_proxy.display().to_string(), &["--cleanup"]);
    }
    remove_kube_chains();
    crate::nodes::network::remove(real.network);
}

/// The kubelet links each container's log into /var/log/containers (a fixed path); the links
/// into this node's pod logs go with it.
fn remove_log_links(pod_logs: &Path) {
    for entry in std::fs::read_dir("/var/log/containers").into_iter().flatten().flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|target| target.starts_with(pod_logs)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// containerd-shim processes serving this containerd (they outlive it by design).
fn kill_shims(socket: &Path) {
    let needle = socket.display().to_string();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.first().is_some_and(|a| a.contains("containerd-shim")) && args.iter().any(|a| a == &needle) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Removes a cgroup and everything below it, deepest first (a cgroup is removed with rmdir).
fn remove_cgroup_tree(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Deletes every `KUBE-*` chain the kubelet and kube-proxy made, in every table of both
/// families, with the rules that jump to them.
fn remove_kube_chains() {
    for (save, iptables) in [("iptables-save", "iptables"), ("ip6tables-save", "ip6tables")] {
        let Ok(dump) = run(save, &[]) else { continue };
        for (table, rules, chains) in kube_chains(&dump) {
            for rule in rules {
                let mut args = vec!["-w", "-t", table.as_str()];
                args.extend(rule.iter().map(String::as_str));
                run_quietly(iptables, &args);
            }
            for chain in &chains {
                run_quietly(iptables, &["-w", "-t", &table, "-F", chain]);
            }
            for chain in &chains {
                run_quietly(iptables, &["-w", "-t", &table, "-X", chain]);
            }
        }
    }
}

/// From an `iptables-save` dump: per table, the `-D` commands for rules in other chains that
/// jump to a `KUBE-*` chain, and the `KUBE-*` chains themselves.
fn kube_chains(dump: &str) -> Vec<(String, Vec<Vec<String>>, Vec<String>)> {
    let mut out: Vec<(String, Vec<Vec<String>>, Vec<String>)> = Vec::new();
    for line in dump.lines() {
        if let Some(table) = line.strip_prefix('*') {
            out.push((table.to_string(), Vec::new(), Vec::new()));
        } else if let Some(chain) = line.strip_prefix(':').and_then(|c| c.split(' ').next())
            && chain.starts_with("KUBE-")
            && let Some(t) = out.last_mut()
        {
            t.2.push(chain.to_string());
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let words = shell_words(rule);
            let jumps_to_kube = words.windows(2).any(|w| (w[0] == "-j" || w[0] == "-g") && w[1].starts_with("KUBE-"));
            if jumps_to_kube
                && !words[0].starts_with("KUBE-")
                && let Some(t) = out.last_mut()
            {
                let mut delete = vec!["-D".to_string()];
                delete.extend(words);
                t.1.push(delete);
            }
        }
    }
    out.retain(|(_, rules, chains)| !rules.is_empty() || !chains.is_empty());
    out
}

/// Splits an iptables-save rule into words, keeping double-quoted comments whole.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
            }
            _ => current.push(c),
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn node() -> RealNode {
        RealNode::new(Path::new("/work/target/test-cluster"), Bridged { slot: 3 }, 0, 10250)
    }

    #[test]
    fn every_registry_resolves_to_the_local_one_only() {
        let registry: SocketAddr = "127.0.0.1:5005".parse().unwrap();
        let toml = hosts_toml(registry);
        assert_eq!(toml.matches("http://127.0.0.1:5005").count(), 2, "{toml}");
        assert!(!toml.contains("docker.io") && !toml.contains("https"), "{toml}");
        assert!(MIRRORED_HOSTS.contains(&"_default"), "registries without their own hosts.toml must fall back to the local one");
    }

    #[test]
    fn a_node_lives_in_paths_and_cgroups_of_its_own() {
        let n = node();
        assert_eq!(n.containerd_socket(), PathBuf::from("/run/cso3/n0/containerd.sock"));
        assert!(n.containerd_socket().as_os_str().len() < 108);
        assert_eq!(n.cgroup_root(Bridged { slot: 3 }), "/cso3n0");
        let config = containerd_config(&n);
        for expected in [
            "root = \"/work/target/test-cluster/nodes/real-node-0/containerd\"",
            "state = \"/run/cso3/n0/state\"",
            "restrict_oom_score_adj = true",
            "netns_mounts_under_state_dir = true",
            "sandbox_image = \"registry.k8s.io/pause:3.10\"",
            "stream_server_address = \"127.0.0.1\"",
        ] {
            assert!(config.contains(expected), "{expected} missing in\n{config}");
        }
    }

    #[test]
    fn pods_get_addresses_on_the_bridge_without_masquerade() {
        let b = Bridged { slot: 3 };
        let cni: serde_json::Value = serde_json::from_str(&cni_conflist(&node(), b)).unwrap();
        let bridge = &cni["plugins"][0];
        assert_eq!((bridge["bridge"].as_str(), bridge["ipMasq"].as_bool()), (Some("csobr3"), Some(false)));
        let range = &bridge["ipam"]["ranges"][0][0];
        assert_eq!((range["subnet"].as_str(), range["gateway"].as_str()), (Some("198.18.3.0/24"), Some("198.18.3.1")));
        assert_eq!(bridge["isDefaultGateway"], Value::Null, "no default route out of a pod");
        assert_eq!(bridge["ipam"]["routes"], json!([{"dst": "198.19.48.0/20", "gw": "198.18.3.1"}]), "the service range is reachable");
        let kubelet = kubelet_config(&node(), b, &KubeletPki { ca: "ca".into(), serving_cert: "c".into(), serving_key: "k".into() });
        assert!(kubelet.contains("address: 198.18.3.1\n") && kubelet.contains("resolvConf: \"\"\n"), "{kubelet}");
        let proxy = kube_proxy_config(b, "real-node-0", Path::new("kp"), 10249);
        assert!(proxy.contains("localhostNodePorts: false") && proxy.contains("[\"198.18.3.1/32\"]"), "{proxy}");
    }

    #[test]
    fn kube_chains_and_the_rules_jumping_to_them_are_found() {
        let dump = "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n\
                    *filter\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:CSO-BRIDGE-0 - [0:0]\n\
                    -A INPUT -j KUBE-FIREWALL\n-A OUTPUT -j KUBE-FIREWALL\n-A FORWARD -j CSO-BRIDGE-0\n\
                    -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -j DROP\nCOMMIT\n";
        let found = kube_chains(dump);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0], ("mangle".into(), vec![], vec!["KUBE-IPTABLES-HINT".into(), "KUBE-KUBELET-CANARY".into()]));
        let (table, rules, chains) = &found[1];
        assert_eq!(table, "filter");
        assert_eq!(
            rules,
            &[["-D", "INPUT", "-j", "KUBE-FIREWALL"].map(String::from), ["-D", "OUTPUT", "-j", "KUBE-FIREWALL"].map(String::from)]
        );
        assert_eq!(chains, &["KUBE-FIREWALL"]);
        assert_eq!(shell_words("A -m comment --comment \"a b\" -j X"), ["A", "-m", "comment", "--comment", "a b", "-j", "X"]);
    }
}
