//! A real local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//! the simulated kubelet, started as plain processes on 127.0.0.1.
//!
//! Everything lives in one state directory: PKI, kubeconfigs, component logs and `state.json`
//! (the PIDs we started). `up` is idempotent: a healthy cluster in the directory is reused.
//! `down` stops exactly the processes recorded there, by PID, and keeps the logs.

use std::fs;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::addresses::{self, Plan};
use crate::host::which;
use crate::nodes::network;
use crate::nodes::real::{self, RealNode, RealNodes};

/// How the control plane should be brought up.
#[derive(Clone, Debug)]
pub struct UpOptions {
    /// The state directory (PKI, kubeconfig, logs, PIDs).
    pub dir: PathBuf,
    /// The Kubernetes release to build and run (a full version; [`crate::versions::resolve`]).
    pub k8s_version: String,
    /// Extra arguments for the simulated kubelet (node count, delays, grace cap).
    pub sim_kubelet_args: Vec<String>,
    /// Extra arguments for kube-scheduler (e.g. its client's `--kube-api-qps`).
    pub scheduler_args: Vec<String>,
    /// Extra arguments for kube-apiserver, after its own (the later of two flags wins), e.g.
    /// `--profiling=true` to serve `/debug/pprof` to the cluster's admin.
    pub apiserver_args: Vec<String>,
    /// Real nodes (kubelet, containerd, runc) to start beside the simulated ones; needs root.
    pub real_nodes: usize,
    /// Record the requests of ServiceAccounts outside kube-system in `logs/audit.log`
    /// ([`crate::rbac::AUDIT_POLICY`]), for the check of the operator's permissions.
    pub audit: bool,
}

impl UpOptions {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            k8s_version: crate::versions::under_test(),
            sim_kubelet_args: Vec::new(),
            scheduler_args: Vec::new(),
            apiserver_args: Vec::new(),
            real_nodes: 0,
            audit: false,
        }
    }
}

/// One process we started.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub name: String,
    pub pid: i32,
    /// The executable's file name, checked before signalling so a reused PID is never killed.
    pub exe_name: String,
    /// The command line it was started with, so [`start_component`] can start it again.
    #[serde(default)]
    pub exe: PathBuf,
    #[serde(default)]
    pub args: Vec<String>,
}

/// What `up` leaves behind in `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterState {
    /// The Kubernetes release running (empty in a state written before it was recorded).
    #[serde(default)]
    pub k8s_version: String,
    pub kubeconfig: PathBuf,
    pub apiserver_port: u16,
    pub etcd_data_dir: PathBuf,
    pub processes: Vec<ProcessRecord>,
    /// The real nodes, their network and registry, when `up` started any.
    #[serde(default)]
    pub real: Option<RealNodes>,
}

impl ClusterState {
    pub fn real_node_count(&self) -> usize {
        self.real.as_ref().map_or(0, |r| r.nodes.len())
    }

    /// The state directory (where the kubeconfig is).
    pub fn dir(&self) -> &Path {
        self.kubeconfig.parent().unwrap_or(Path::new("."))
    }

    /// Where `up` keeps the test images it built and pushed to the registry.
    pub fn images_dir(&self) -> PathBuf {
        self.dir().join("images")
    }

    /// The address plan the control plane runs with.
    pub fn plan(&self) -> Plan {
        self.real.as_ref().map_or(Plan::Loopback, |r| Plan::Bridged(r.network))
    }
}

/// Timings of one `up`, for the numbers the README and notes report.
#[derive(Clone, Debug, Default)]
pub struct UpReport {
    pub reused_running_cluster: bool,
    pub build: Duration,
    pub start: Duration,
}

struct Layout {
    root: PathBuf,
}

impl Layout {
    fn pki(&self) -> PathBuf {
        self.root.join("pki")
    }
    fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    fn state_file(&self) -> PathBuf {
        self.root.join("state.json")
    }
    fn kubeconfig(&self) -> PathBuf {
        self.root.join("kubeconfig")
    }
    fn component_kubeconfig(&self, user: &str) -> PathBuf {
        self.root.join(format!("{user}.kubeconfig"))
    }
    fn lock_file(&self) -> PathBuf {
        self.root.join("lock")
    }
    fn audit_policy(&self) -> PathBuf {
        self.root.join("audit-policy.yaml")
    }
}

/// Where a control plane started with [`UpOptions::audit`] in `dir` writes its audit log.
pub fn audit_log(dir: &Path) -> PathBuf {
    Layout { root: dir.to_path_buf() }.logs().join("audit.log")
}

/// The directory of this crate, for locating the build script.
fn e2e_crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Reads the recorded state, if any.
pub fn read_state(dir: &Path) -> anyhow::Result<Option<ClusterState>> {
    let path = Layout { root: dir.to_path_buf() }.state_file();
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).with_context(|| format!("corrupt {}", path.display()))?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Whether every recorded process is still alive.
pub fn all_alive(state: &ClusterState) -> bool {
    state.processes.iter().all(process_alive)
}

/// Brings the control plane up in `opts.dir`, or reuses a healthy one already there.
pub async fn up(opts: &UpOptions) -> anyhow::Result<(ClusterState, UpReport)> {
    let layout = Layout { root: opts.dir.clone() };
    fs::create_dir_all(&layout.root).with_context(|| format!("creating {}", layout.root.display()))?;
    let _lock = FileLock::acquire(&layout.lock_file())?;

    if let Some(state) = read_state(&layout.root)? {
        if state.real_node_count() == opts.real_nodes
            && state.k8s_version == opts.k8s_version
            && all_alive(&state)
            && wait_ready(&state.kubeconfig, Duration::from_secs(20)).await.is_ok()
        {
            return Ok((state, UpReport { reused_running_cluster: true, ..Default::default() }));
        }
        if state.k8s_version != opts.k8s_version {
            eprintln!(
                "local-cluster: the cluster in {} runs Kubernetes {}; restarting it with {}",
                layout.root.display(),
                if state.k8s_version.is_empty() { "of an unrecorded version" } else { &state.k8s_version },
                opts.k8s_version
            );
        } else {
            eprintln!("local-cluster: a previous cluster in {} is not healthy; restarting it", layout.root.display());
        }
        stop_recorded(&layout)?;
    }

    let t_build = Instant::now();
    let Binaries { kubernetes: bin_dir, etcd } = prepare(&opts.k8s_version, opts.real_nodes > 0)?;
    let sim_kubelet = sibling_binary("sim-kubelet")?;
    let build = t_build.elapsed();

    let t_start = Instant::now();
    fs::create_dir_all(layout.logs())?;
    let bridged = if opts.real_nodes > 0 {
        network::check_privileges()?;
        let _host = host_lock()?;
        Some(network::create(opts.real_nodes)?)
    } else {
        None
    };
    // Until the state records the bridge (and `down` can remove it), a failure removes it here.
    let mut unrecorded = UnrecordedNetwork(bridged);
    let plan = bridged.map_or(Plan::Loopback, Plan::Bridged);
    let real = match bridged {
        Some(network) => Some(RealNodes {
            network,
            registry: SocketAddr::from(([127, 0, 0, 1], free_port()?)),
            nodes: (0..opts.real_nodes)
                .map(|i| Ok(RealNode::new(&layout.root, network, i, free_port()?)))
                .collect::<anyhow::Result<_>>()?,
        }),
        None => None,
    };
    let pki = Pki::ensure(&layout.pki(), plan)?;
    let previous_port = previous_apiserver_port(&layout);
    let apiserver_port = previous_port.filter(|p| port_is_free(*p)).map_or_else(free_port, Ok)?;
    let etcd_client_port = free_port()?;
    let etcd_peer_port = free_port()?;
    let etcd_data_dir = etcd_data_dir(&layout.root);
    let _ = fs::remove_dir_all(&etcd_data_dir);

    let server = format!("https://127.0.0.1:{apiserver_port}");
    write_kubeconfig(&layout.kubeconfig(), &server, &pki, "admin")?;
    for user in ["controller-manager", "scheduler"] {
        write_kubeconfig(&layout.component_kubeconfig(user), &server, &pki, user)?;
    }

    let kubeconfig = layout.kubeconfig();
    let mut state = ClusterState {
        k8s_version: opts.k8s_version.clone(),
        kubeconfig: kubeconfig.clone(),
        apiserver_port,
        etcd_data_dir: etcd_data_dir.clone(),
        processes: Vec::new(),
        real: real.clone(),
    };
    write_state(&layout, &state)?;
    unrecorded.0 = None;
    // Record each PID as soon as it exists, so a failure half-way still lets `down` clean up.
    let mut start = |name: &str, exe: &Path, args: Vec<String>| -> anyhow::Result<()> {
        let rec = spawn_detached(name, exe, &args, &layout.logs())?;
        state.processes.push(rec);
        write_state(&layout, &state)
    };

    let etcd_url = format!("http://127.0.0.1:{etcd_client_port}");
    let progress_notify = etcd_progress_notify_flag(&etcd)?;
    start(
        "etcd",
        &etcd,
        vec![
            format!("--data-dir={}", etcd_data_dir.display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer_port}"),
            format!("{progress_notify}=5s"),
            "--quota-backend-bytes=4294967296".into(),
            "--log-level=warn".into(),
        ],
    )?;
    wait_tcp(etcd_client_port, Duration::from_secs(30)).await.context("etcd did not start listening")?;

    let p = |f: &str| pki.dir.join(f).display().to_string();
    let mut apiserver_args = vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        format!("--advertise-address={}", plan.advertise_address()),
        format!("--secure-port={apiserver_port}"),
        // The `kubernetes` Service's endpoint: with real nodes the apiserver's address on the
        // bridge (relayed to 127.0.0.1), which pods reach through kube-proxy. Without them
        // there is no address an endpoint may hold (loopback is refused).
        format!("--endpoint-reconciler-type={}", if bridged.is_some() { "lease" } else { "none" }),
        format!("--cert-dir={}", pki.dir.display()),
        format!("--tls-cert-file={}", p("apiserver.crt")),
        format!("--tls-private-key-file={}", p("apiserver.key")),
        format!("--client-ca-file={}", p("ca.crt")),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", p("sa.pub")),
        format!("--service-account-signing-key-file={}", p("sa.key")),
        format!("--service-cluster-ip-range={}", plan.service_cidr()),
        // Webhooks and APIServices backed by a Service are called at its endpoints, never its
        // ClusterIP: one without endpoints fails here, before any connection is attempted.
        "--enable-aggregator-routing=true".into(),
        // `kubectl logs/exec/port-forward` dial a node's InternalIP (loopback or the run's bridge), never resolve
        // its Hostname through DNS.
        "--kubelet-preferred-address-types=InternalIP".into(),
        format!("--kubelet-client-certificate={}", p("apiserver-kubelet-client.crt")),
        format!("--kubelet-client-key={}", p("apiserver-kubelet-client.key")),
        "--authorization-mode=Node,RBAC".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        "--v=1".into(),
    ];
    if opts.audit {
        fs::write(layout.audit_policy(), crate::rbac::AUDIT_POLICY)?;
        let log = audit_log(&layout.root);
        let _ = fs::remove_file(&log);
        apiserver_args.extend([
            format!("--audit-policy-file={}", layout.audit_policy().display()),
            format!("--audit-log-path={}", log.display()),
            "--audit-log-format=json".into(),
            // One file for the whole run: the check reads only it (lumberjack's default rotates at 100 MB).
            "--audit-log-maxsize=100000".into(),
        ]);
    }
    apiserver_args.extend(opts.apiserver_args.iter().cloned());
    start("kube-apiserver", &bin_dir.join("kube-apiserver"), apiserver_args)?;
    wait_ready(&kubeconfig, Duration::from_secs(90)).await.context("kube-apiserver did not become ready")?;

    start(
        "kube-controller-manager",
        &bin_dir.join("kube-controller-manager"),
        vec![
            format!("--kubeconfig={}", layout.component_kubeconfig("controller-manager").display()),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--use-service-account-credentials=true".into(),
            format!("--service-account-private-key-file={}", p("sa.key")),
            format!("--root-ca-file={}", p("ca.crt")),
            format!("--cluster-cidr={}", bridged.map_or(addresses::CLUSTER_CIDR.into(), |b| b.pod_subnet())),
            format!("--service-cluster-ip-range={}", plan.service_cidr()),
            "--v=1".into(),
        ],
    )?;
    let mut scheduler_args = vec![
        format!("--kubeconfig={}", layout.component_kubeconfig("scheduler").display()),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
        "--v=1".into(),
    ];
    scheduler_args.extend(opts.scheduler_args.iter().cloned());
    start("kube-scheduler", &bin_dir.join("kube-scheduler"), scheduler_args)?;
    let mut sim_args = vec![format!("--kubeconfig={}", kubeconfig.display()), format!("--kubelet-version={}", opts.k8s_version)];
    sim_args.extend(crate::image::simulated_kubelet_args());
    sim_args.extend(opts.sim_kubelet_args.iter().cloned());
    start("sim-kubelet", &sim_kubelet, sim_args)?;
    if let Some(real) = &real {
        let real_bins = RealBinaries { kubernetes: bin_dir.clone(), forwarder: sibling_binary("local-cluster")? };
        start_real_nodes(real, &real_bins, &pki, &layout, apiserver_port, &mut start)
            .await
            .with_context(|| format!("starting real nodes; component logs are in {}", layout.logs().display()))?;
    }

    wait_nodes_and_service_accounts(&kubeconfig, opts.real_nodes, Duration::from_secs(90))
        .await
        .with_context(|| format!("the cluster did not settle; component logs are in {}", layout.logs().display()))?;
    Ok((state, UpReport { reused_running_cluster: false, build, start: t_start.elapsed() }))
}

/// A real nodes' network not yet in the cluster's state: removed on drop unless recorded.
struct UnrecordedNetwork(Option<addresses::Bridged>);

impl Drop for UnrecordedNetwork {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            network::remove(b);
        }
    }
}

/// Where the control plane's binaries are.
pub struct Binaries {
    /// The directory holding kube-apiserver, kube-controller-manager and kube-scheduler (and,
    /// for real nodes, kubelet and kube-proxy).
    pub kubernetes: PathBuf,
    pub etcd: PathBuf,
}

/// What real nodes need from Debian: (command or path, package).
const REAL_NODE_PACKAGES: &[(&str, &str)] = &[
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
struct RealBinaries {
    kubernetes: PathBuf,
    /// `local-cluster`, whose `forward` relays the apiserver to the bridge.
    forwarder: PathBuf,
}

/// Starts the real nodes' parts after the control plane is ready: the apiserver's relay on the
/// bridge, the registry with the test images, per node containerd and the kubelet, then the
/// host's kube-proxy.
async fn start_real_nodes(
    real: &RealNodes,
    bins: &RealBinaries,
    pki: &Pki,
    layout: &Layout,
    apiserver_port: u16,
    start: &mut impl FnMut(&str, &Path, Vec<String>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let b = real.network;
    start(
        "apiserver-forwarder",
        &bins.forwarder,
        vec!["forward".into(), format!("--listen={}:{apiserver_port}", b.bridge_ip()), format!("--to=127.0.0.1:{apiserver_port}")],
    )?;

    let registry_dir = layout.root.join("registry");
    fs::create_dir_all(&registry_dir)?;
    let registry_config = registry_dir.join("config.yml");
    fs::write(&registry_config, crate::registry::config(&registry_dir.join("data"), real.registry.port()))?;
    let docker_registry = which("docker-registry").context("docker-registry is not installed")?;
    start("registry", &docker_registry, vec!["serve".into(), registry_config.display().to_string()])?;
    wait_tcp(real.registry.port(), Duration::from_secs(30)).await.context("the registry did not start listening")?;
    crate::image::publish_test_images(&layout.root.join("images"), real.registry)?;

    let server = format!("https://127.0.0.1:{apiserver_port}");
    let containerd = which("containerd").context("containerd is not installed")?;
    for node in &real.nodes {
        let client = format!("node-{}", node.name);
        pki.certificate(&client, &format!("/O=system:nodes/CN=system:node:{}", node.name), Pki::CLIENT)?;
        let serving = format!("kubelet-{}", node.name);
        pki.certificate(&serving, &format!("/CN={}", node.name), &Pki::serving(&[format!("IP:{}", b.node_ip(node.index))]))?;
        let containerd_config = real::write_node_files(node, b, real.registry)?;
        start(&format!("containerd-{}", node.name), &containerd, vec![format!("--config={}", containerd_config.display())])?;
        wait_for_path(&node.containerd_socket(), Duration::from_secs(30)).await?;
        let kubeconfig = node.dir.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &server, pki, &client)?;
        let config = node.dir.join("kubelet.yaml");
        let files = real::KubeletPki {
            ca: pki.dir.join("ca.crt"),
            serving_cert: pki.dir.join(format!("{serving}.crt")),
            serving_key: pki.dir.join(format!("{serving}.key")),
        };
        fs::write(&config, real::kubelet_config(node, b, &files))?;
        start(&format!("kubelet-{}", node.name), &bins.kubernetes.join("kubelet"), real::kubelet_args(node, b, &config, &kubeconfig))?;
    }

    let kubeconfig = layout.component_kubeconfig("kube-proxy");
    write_kubeconfig(&kubeconfig, &server, pki, "kube-proxy")?;
    let config = layout.root.join("kube-proxy.yaml");
    fs::write(&config, real::kube_proxy_config(b, &real.nodes[0].name, &kubeconfig, free_port()?))?;
    start("kube-proxy", &bins.kubernetes.join("kube-proxy"), vec![format!("--config={}", config.display()), "--v=1".into()])?;
    // Pods reach the apiserver through the `kubernetes` Service only once kube-proxy has its rules.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !real::kube_proxy_synced(b) {
        if Instant::now() > deadline {
            bail!("kube-proxy did not program the kubernetes Service within 60 s (see kube-proxy.log)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

async fn wait_for_path(path: &Path, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !path.exists() {
        if Instant::now() > deadline {
            bail!("{} did not appear within {timeout:?}", path.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A lock for the whole host: claiming a real-node slot (its bridge) is one step per host.
pub fn host_lock() -> anyhow::Result<FileLock> {
    FileLock::acquire(Path::new("/run/cloneset-operator.lock"))
}

/// Stops every process recorded in `dir` and removes etcd's data. Logs are kept.
pub fn down(dir: &Path) -> anyhow::Result<bool> {
    let layout = Layout { root: dir.to_path_buf() };
    if !layout.root.exists() {
        return Ok(false);
    }
    let _lock = FileLock::acquire(&layout.lock_file())?;
    stop_recorded(&layout)
}

/// Stops one component (e.g. `kube-apiserver`) of the cluster in `dir` by its recorded PID,
/// leaving the others running: a fault to inject, undone by [`start_component`].
pub fn stop_component(dir: &Path, name: &str) -> anyhow::Result<()> {
    let layout = Layout { root: dir.to_path_buf() };
    let _lock = FileLock::acquire(&layout.lock_file())?;
    let state = read_state(dir)?.with_context(|| format!("no cluster recorded in {}", dir.display()))?;
    let rec = state.processes.iter().find(|p| p.name == name).with_context(|| format!("no {name} recorded in {}", dir.display()))?;
    stop_process(rec);
    if process_alive(rec) {
        bail!("{name} (pid {}) is still running", rec.pid);
    }
    Ok(())
}

/// Starts a component stopped by [`stop_component`] again, with the command line it was first
/// started with, and records its new PID. A component that is still running is left alone.
/// Readiness is the caller's to wait for (for the apiserver: [`wait_ready`]).
pub fn start_component(dir: &Path, name: &str) -> anyhow::Result<()> {
    let layout = Layout { root: dir.to_path_buf() };
    let _lock = FileLock::acquire(&layout.lock_file())?;
    let mut state = read_state(dir)?.with_context(|| format!("no cluster recorded in {}", dir.display()))?;
    let i = state.processes.iter().position(|p| p.name == name).with_context(|| format!("no {name} recorded in {}", dir.display()))?;
    let old = &state.processes[i];
    if process_alive(old) {
        return Ok(());
    }
    if old.args.is_empty() {
        bail!("{name} was recorded without its command line (started by an older local-cluster); restart the cluster");
    }
    state.processes[i] = spawn_detached(name, &old.exe, &old.args, &layout.logs())?;
    write_state(&layout, &state)
}

fn stop_recorded(layout: &Layout) -> anyhow::Result<bool> {
    let Some(state) = read_state(&layout.root)? else { return Ok(false) };
    if let Some(real) = &state.real {
        // The nodes first: kubelets and kube-proxy, then every container through containerd (so
        // nothing restarts them), then containerd, then what they left on the host.
        let named = |f: &dyn Fn(&str) -> bool| state.processes.iter().filter(|p| f(&p.name)).collect::<Vec<_>>();
        named(&|n| n == "kube-proxy" || n.starts_with("kubelet-")).into_iter().for_each(stop_process);
        real.nodes.iter().for_each(real::remove_containers);
        named(&|n| n.starts_with("containerd-")).into_iter().for_each(stop_process);
        let kube_proxy = state.processes.iter().find(|p| p.name == "kube-proxy").map(|p| p.exe.clone());
        real::teardown(real, kube_proxy.as_deref());
    }
    // Reverse start order: clients first, etcd last.
    for rec in state.processes.iter().rev() {
        stop_process(rec);
    }
    let _ = fs::remove_dir_all(&state.etcd_data_dir);
    fs::remove_file(layout.state_file()).ok();
    Ok(true)
}

fn write_state(layout: &Layout, state: &ClusterState) -> anyhow::Result<()> {
    let tmp = layout.state_file().with_extension("json.tmp");
    fs::write(&tmp, serde_json::to_vec_pretty(state)?)?;
    fs::rename(&tmp, layout.state_file())?;
    Ok(())
}

fn previous_apiserver_port(layout: &Layout) -> Option<u16> {
    let text = fs::read_to_string(layout.kubeconfig()).ok()?;
    let server = text.lines().find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))?;
    server.trim().parse().ok()
}

/// etcd's data lives in memory: fsync on a shared disk is the slowest part of a test cluster.
fn etcd_data_dir(root: &Path) -> PathBuf {
    let canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut h: u64 = 0xcbf29ce484222325;
    for b in canonical.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100000001b3);
    }
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    base.join(format!("cloneset-operator-etcd-{h:016x}"))
}

// ---------------------------------------------------------------------------------------------
// Binaries

/// Runs the build script, which builds (once) or reuses the cached Kubernetes binaries.
fn build_kubernetes(version: &str, binaries: &[&str]) -> anyhow::Result<PathBuf> {
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
fn find_or_build_etcd(k8s_version: &str) -> anyhow::Result<PathBuf> {
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
fn etcd_progress_notify_flag(etcd: &Path) -> anyhow::Result<&'static str> {
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

// ---------------------------------------------------------------------------------------------
// Processes

fn spawn_detached(name: &str, exe: &Path, args: &[String], logs: &Path) -> anyhow::Result<ProcessRecord> {
    use std::os::unix::process::CommandExt as _;
    if !exe.is_file() {
        bail!("{name}: executable {} does not exist", exe.display());
    }
    let log_path = logs.join(format!("{name}.log"));
    let log = fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
    writeln!(&log, "---- {} starting: {} {}", name, exe.display(), args.join(" "))?;
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: an interrupted `make` must not take the cluster down with it.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name} ({})", exe.display()))?;
    let exe_name = exe.file_name().and_then(|s| s.to_str()).unwrap_or(name).to_string();
    Ok(ProcessRecord { name: name.to_string(), pid: child.id() as i32, exe_name, exe: exe.to_path_buf(), args: args.to_vec() })
}

fn process_alive(rec: &ProcessRecord) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{}/stat", rec.pid)) else { return false };
    // Field 3 (after the parenthesised command) is the state; Z and X are dead.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, Some("Z") | Some("X")) {
        return false;
    }
    let cmdline = fs::read(format!("/proc/{}/cmdline", rec.pid)).unwrap_or_default();
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    Path::new(std::str::from_utf8(argv0).unwrap_or_default()).file_name().and_then(|s| s.to_str()) == Some(rec.exe_name.as_str())
}

fn stop_process(rec: &ProcessRecord) {
    signal_until_gone(rec);
    collect(rec.pid);
}

fn signal_until_gone(rec: &ProcessRecord) {
    if !process_alive(rec) {
        return;
    }
    unsafe { libc::kill(rec.pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        reap(rec.pid);
        if !process_alive(rec) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(rec.pid, libc::SIGKILL) };
    for _ in 0..100 {
        reap(rec.pid);
        if !process_alive(rec) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Collects the exit status when the process is our own child (tests call `up` in-process);
/// whether there is nothing left to collect (collected now, or not our child).
fn reap(pid: i32) -> bool {
    let mut status = 0;
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) != 0 }
}

/// Waits up to 2 s for a child that no longer counts as alive to be collected: a process reads
/// as gone while it is still exiting (a Go binary's main thread is a zombie before its other
/// threads end), and a child nobody collects stays a zombie until this process exits (a soak's
/// kube-apiserver restarts left one each).
fn collect(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !reap(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An exclusive `flock` on a file, so concurrent `up`/`down` calls on one directory serialise.
pub struct FileLock(fs::File);

impl FileLock {
    fn acquire(path: &Path) -> anyhow::Result<Self> {
        use std::os::fd::AsRawFd as _;
        let f = fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!("cannot lock {}: {}", path.display(), std::io::Error::last_os_error());
        }
        Ok(Self(f))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd as _;
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

// ---------------------------------------------------------------------------------------------
// Ports and readiness

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

async fn wait_tcp(port: u16, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("nothing listens on 127.0.0.1:{port} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A client for the kubeconfig at `path` (not the ambient KUBECONFIG).
pub async fn client_for(path: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

/// Polls `/readyz` until it answers `ok`.
pub async fn wait_ready(kubeconfig: &Path, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_err = String::from("not tried");
    while Instant::now() < deadline {
        match client_for(kubeconfig).await {
            Ok(client) => {
                let req = http_get("/readyz");
                match client.request_text(req).await {
                    Ok(body) if body.trim() == "ok" => return Ok(()),
                    Ok(body) => last_err = body,
                    Err(e) => last_err = e.to_string(),
                }
            }
            Err(e) => last_err = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("apiserver /readyz not ok after {timeout:?}: {last_err}")
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).expect("static request")
}

/// Waits for a Ready simulated node, `real_nodes` Ready real nodes, and the `default`
/// ServiceAccount (the controller-manager creates it; pods cannot be created in a namespace
/// before it exists).
async fn wait_nodes_and_service_accounts(kubeconfig: &Path, real_nodes: usize, timeout: Duration) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::{Node, ServiceAccount};
    let client = client_for(kubeconfig).await?;
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let sas: kube::Api<ServiceAccount> = kube::Api::namespaced(client, "default");
    let deadline = Instant::now() + timeout;
    loop {
        let listed = nodes.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
        let is_real = |n: &Node| n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(real::LABEL));
        let ready = |real: bool| listed.iter().filter(|n| is_real(n) == real && crate::node_is_ready(n)).count();
        let (sim, real) = (ready(false), ready(true));
        let sa = sas.get_opt("default").await.ok().flatten().is_some();
        if sim > 0 && real == real_nodes && sa {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "after {timeout:?}: {sim} Ready simulated nodes, {real} of {real_nodes} real nodes Ready, default ServiceAccount present: {sa}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// PKI and kubeconfigs

struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// Creates the CA, the service-account key and the control plane's certificates once; later
    /// calls reuse them, so a printed kubeconfig stays valid across restarts. Only the apiserver's
    /// serving certificate changes, when the address plan does.
    fn ensure(dir: &Path, plan: Plan) -> anyhow::Result<Self> {
        fs::create_dir_all(dir)?;
        let pki = Self { dir: dir.to_path_buf() };
        if !dir.join("complete").exists() {
            which("openssl").context("openssl is needed to create the local cluster's certificates")?;
            pki.openssl(&["genrsa", "-out", "ca.key", "2048"])?;
            pki.openssl(&[
                "req",
                "-x509",
                "-new",
                "-nodes",
                "-key",
                "ca.key",
                "-subj",
                "/CN=cloneset-operator-local-ca",
                "-days",
                "3650",
                "-out",
                "ca.crt",
            ])?;
            pki.openssl(&["genrsa", "-out", "sa.key", "2048"])?;
            pki.openssl(&["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"])?;
            fs::write(dir.join("complete"), b"")?;
        }
        let mut serving = vec!["IP:127.0.0.1".to_string(), "DNS:localhost".into(), format!("IP:{}", plan.kubernetes_service_ip())];
        if let Plan::Bridged(b) = plan {
            serving.push(format!("IP:{}", b.bridge_ip()));
        }
        serving.extend(["DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc"].map(String::from));
        pki.certificate("apiserver", "/CN=kube-apiserver", &Pki::serving(&serving))?;
        for (name, subject) in [
            ("admin", "/O=system:masters/CN=cloneset-admin"),
            ("controller-manager", "/CN=system:kube-controller-manager"),
            ("scheduler", "/CN=system:kube-scheduler"),
            // The apiserver's identity towards real kubelets (logs, exec, port-forward).
            ("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client"),
            ("kube-proxy", "/CN=system:kube-proxy"),
        ] {
            pki.certificate(name, subject, Pki::CLIENT)?;
        }
        Ok(pki)
    }

    const CLIENT: &str = "extendedKeyUsage=clientAuth\n";

    fn serving(alt_names: &[String]) -> String {
        format!("subjectAltName={}\nextendedKeyUsage=serverAuth\n", alt_names.join(","))
    }

    /// Signs `name.crt` unless it exists with exactly these extensions.
    fn certificate(&self, name: &str, subject: &str, extensions: &str) -> anyhow::Result<()> {
        let current = fs::read_to_string(self.dir.join(format!("{name}.ext"))).ok();
        if current.as_deref() == Some(extensions) && self.dir.join(format!("{name}.crt")).is_file() {
            return Ok(());
        }
        self.sign(name, subject, extensions)
    }

    fn sign(&self, name: &str, subject: &str, extensions: &str) -> anyhow::Result<()> {
        let (key, csr, crt, ext) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"));
        fs::write(self.dir.join(&ext), extensions)?;
        self.openssl(&["genrsa", "-out", &key, "2048"])?;
        self.openssl(&["req", "-new", "-key", &key, "-subj", subject, "-out", &csr])?;
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "3650",
            "-out",
            &crt,
            "-extfile",
            &ext,
        ])
    }

    fn openssl(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new("openssl").args(args).current_dir(&self.dir).output().context("running openssl")?;
        if !out.status.success() {
            bail!("openssl {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }
}

fn write_kubeconfig(path: &Path, server: &str, pki: &Pki, user: &str) -> anyhow::Result<()> {
    let d = pki.dir.canonicalize()?;
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cloneset-local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate: {crt}\n    client-key: {key}\ncontexts:\n- name: cloneset-local\n  context:\n    cluster: cloneset-local\n    user: {user}\ncurrent-context: cloneset-local\n",
        ca = d.join("ca.crt").display(),
        crt = d.join(format!("{user}.crt")).display(),
        key = d.join(format!("{user}.key")).display(),
    );
    fs::write(path, text)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pid: i32) -> Option<String> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).map(str::to_string)
    }

    /// A child that has already exited when it is stopped (as a process that is still exiting
    /// reads) is collected, not left a zombie until the tests end.
    #[test]
    // Collecting the child is what `stop_process` is tested for.
    #[allow(clippy::zombie_processes)]
    fn stopping_an_exited_child_leaves_no_zombie() {
        let child = Command::new("true").spawn().expect("true runs");
        let pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(10);
        while state(pid).as_deref() != Some("Z") {
            assert!(Instant::now() < deadline, "pid {pid} did not exit: {:?}", state(pid));
            std::thread::sleep(Duration::from_millis(10));
        }
        let rec = ProcessRecord { name: "true".into(), pid, exe_name: "true".into(), exe: PathBuf::from("true"), args: Vec::new() };
        stop_process(&rec);
        assert_eq!(state(pid), None, "pid {pid} is left behind");
    }
}
