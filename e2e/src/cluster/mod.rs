//! A real local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//! the simulated kubelet, started as plain processes on 127.0.0.1.
//!
//! Everything lives in one state directory: PKI, kubeconfigs, component logs and `state.json`
//! (the PIDs we started). `up` is idempotent: a healthy cluster in the directory is reused.
//! `down` stops exactly the processes recorded there, by PID, and keeps the logs.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::addresses::{self, Plan};
use crate::host::which;
use crate::nodes::network;
use crate::nodes::real::{self, RealNode, RealNodes};

mod binaries;
mod pki;
mod process;
mod ready;

use binaries::*;
pub use binaries::{Binaries, prepare, sibling_binary};
use pki::*;
pub use process::FileLock;
use process::*;
use ready::*;
pub use ready::{client_for, wait_ready};

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
