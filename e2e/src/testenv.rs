//! Helpers for e2e tests: the cluster to test against, a temporary namespace per test, and
//! waiting on conditions with a deadline (never a bare sleep).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use crate::cluster::{self, UpOptions};

/// Environment variable naming the kubeconfig of an already running test cluster. When unset,
/// the tests bring up their own in `target/test-cluster` (and leave it for `make test` to stop).
pub const KUBECONFIG_VAR: &str = "CLONESET_E2E_KUBECONFIG";

/// The simulated kubelet's settings for tests: short enough to keep tests fast, long enough to
/// observe the state in between.
pub const TEST_RESTART_DELAY: Duration = Duration::from_secs(1);
pub const TEST_MAX_GRACE_PERIOD: Duration = Duration::from_secs(3);

/// Options for the test cluster in `dir`: the simulated kubelet's test settings; an audit log of
/// the operator's requests, for the check of its permissions (`local-cluster rbac-audit`); and
/// the OwnerReferencesPermissionEnforcement admission plugin, as hardened clusters run it, so an
/// owner reference the operator may not set is refused here too.
pub fn test_up_options(dir: impl Into<PathBuf>) -> UpOptions {
    let mut opts = UpOptions::new(dir);
    opts.sim_kubelet_args = vec![
        format!("--restart-delay={}ms", TEST_RESTART_DELAY.as_millis()),
        format!("--max-grace-period={}ms", TEST_MAX_GRACE_PERIOD.as_millis()),
    ];
    opts.apiserver_args = vec!["--enable-admission-plugins=OwnerReferencesPermissionEnforcement".into()];
    opts.audit = true;
    opts
}

/// The workspace's `target/test-cluster`.
pub fn default_test_cluster_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-cluster")
}

static KUBECONFIG: OnceCell<PathBuf> = OnceCell::const_new();

/// The kubeconfig of the test cluster, starting it on first use when needed.
pub async fn kubeconfig() -> anyhow::Result<PathBuf> {
    KUBECONFIG
        .get_or_try_init(|| async {
            if let Ok(p) = std::env::var(KUBECONFIG_VAR) {
                return Ok(PathBuf::from(p));
            }
            let (state, _) = cluster::up(&test_up_options(default_test_cluster_dir())).await?;
            Ok::<_, anyhow::Error>(state.kubeconfig)
        })
        .await
        .cloned()
}

/// The test cluster's recorded state (`state.json` beside its kubeconfig).
pub async fn cluster_state() -> anyhow::Result<cluster::ClusterState> {
    let kubeconfig = kubeconfig().await?;
    let dir = kubeconfig.parent().context("the kubeconfig has no directory")?;
    cluster::read_state(dir)?.with_context(|| format!("no cluster state in {}", dir.display()))
}

/// A client for the test cluster (one per test: a client belongs to its test's runtime).
pub async fn client() -> anyhow::Result<Client> {
    cluster::client_for(&kubeconfig().await?).await
}

static API_INSTALLED: OnceCell<()> = OnceCell::const_new();

/// Installs the CloneSet CRD and admission policy (the same objects `make crds` writes to
/// `crds/`) once per test binary, and waits until both are enforced: the CRD Established and a
/// dry-run of a CloneSet that only the policy rejects being rejected.
pub async fn install_api() -> anyhow::Result<()> {
    API_INSTALLED.get_or_try_init(|| async { install_api_on(&client().await?).await }).await.copied()
}

/// Installs the CloneSet CRD and admission policies on the cluster `client` talks to, and waits
/// until they are enforced (see [`install_api`]); for a test's own private control plane.
pub async fn install_api_on(client: &Client) -> anyhow::Result<()> {
    use cloneset_operator::api::crd;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    let client = client.clone();
    let ssa = PatchParams::apply("cloneset-e2e").force();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let def = crd::crd();
    let name = def.metadata.name.clone().unwrap_or_default();
    apply_crd(&client, &def).await?;
    let policies: Api<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    for (policy, binding) in crd::admission_policies() {
        let name = policy.metadata.name.clone().unwrap_or_default();
        policies.patch(&name, &ssa, &Patch::Apply(&policy)).await?;
        bindings.patch(&name, &ssa, &Patch::Apply(&binding)).await?;
    }

    wait_until(Duration::from_secs(30), "the CloneSet CRD to be Established", || async {
        let c = crds.get(&name).await?;
        Ok(c.status.and_then(|s| s.conditions).unwrap_or_default().iter().any(|c| c.type_ == "Established" && c.status == "True"))
    })
    .await?;
    let probe: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "policy-probe", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "a"}},
                 "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }))?;
    let dyn_api = clonesets_dynamic(&client, "default");
    let dry = PostParams { dry_run: true, ..Default::default() };
    wait_until(Duration::from_secs(60), "the admission policy to be enforced", || async {
        match dyn_api.create(&dry, &probe).await {
            Err(kube::Error::Api(e)) if e.message.contains(crd::POLICY_NAME) => Ok(true),
            _ => Ok(false),
        }
    })
    .await?;
    let newer_field = serde_json::json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "warning-probe", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "a"}},
                 "template": {"metadata": {"labels": {"app": "a"}},
                              "spec": {"hostnameOverride": "h", "containers": [{"name": "c", "image": "i"}]}}},
    });
    wait_until(Duration::from_secs(60), "the template-fields policy to warn", || async {
        let warnings = dry_run_create_warnings(&client, "default", &newer_field).await?;
        Ok(warnings.iter().any(|w| w.contains(crd::TEMPLATE_FIELDS_POLICY_NAME)))
    })
    .await
}

/// The `Warning` headers of the apiserver's answer to a dry-run create of the CloneSet `object`
/// in `namespace` (kube's typed calls do not return them).
pub async fn dry_run_create_warnings(client: &Client, namespace: &str, object: &serde_json::Value) -> anyhow::Result<Vec<String>> {
    let request = http::Request::post(format!("/apis/apps.kruise.io/v1alpha1/namespaces/{namespace}/clonesets?dryRun=All"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(serde_json::to_vec(object)?))?;
    let response = client.send(request).await?;
    let status = response.status();
    anyhow::ensure!(status.is_success(), "dry-run create answered {status}");
    Ok(response.headers().get_all(http::header::WARNING).iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect())
}

/// Installs (or replaces) the CloneSet CRD `def`, as the e2e suite's own field manager. A CRD
/// converting through a webhook (a test serving v1beta1) is first put back to no conversion
/// when `def` has none: the caBundle an operator wrote would otherwise outlive the strategy.
pub async fn apply_crd(
    client: &Client,
    def: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = def.metadata.name.clone().unwrap_or_default();
    let converting = |c: &CustomResourceDefinition| c.spec.conversion.as_ref().is_some_and(|c| c.strategy == "Webhook");
    if !converting(def) && crds.get_opt(&name).await?.as_ref().is_some_and(converting) {
        let none = serde_json::json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
        crds.patch(&name, &PatchParams::default(), &Patch::Merge(&none)).await?;
    }
    crds.patch(&name, &PatchParams::apply("cloneset-e2e").force(), &Patch::Apply(def)).await?;
    Ok(())
}

/// An untyped CloneSet API, for manifests the typed struct cannot express (invalid ones).
pub fn clonesets_dynamic(client: &Client, namespace: &str) -> Api<kube::api::DynamicObject> {
    clonesets_as(client, namespace, "v1alpha1")
}

/// An untyped CloneSet API through one version (`v1alpha1`, `v1beta1`): what a client of that
/// version reads and writes, conversions included.
pub fn clonesets_as(client: &Client, namespace: &str, version: &str) -> Api<kube::api::DynamicObject> {
    let ar = kube::api::ApiResource {
        group: "apps.kruise.io".into(),
        version: version.into(),
        api_version: format!("apps.kruise.io/{version}"),
        kind: "CloneSet".into(),
        plural: "clonesets".into(),
    };
    Api::namespaced_with(client.clone(), namespace, &ar)
}

/// A namespace that exists for one test and is deleted when dropped.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl TestNamespace {
    /// Creates `e2e-<prefix>-<unique>` and waits for its `default` ServiceAccount, without which
    /// pods cannot be created.
    pub async fn create(prefix: &str) -> anyhow::Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let client = client().await?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.subsec_nanos();
        let name = format!("e2e-{prefix}-{:x}{:x}", nanos % 0xfffff, N.fetch_add(1, Ordering::Relaxed));
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        wait_until(Duration::from_secs(30), "default ServiceAccount", || async { Ok(sas.get_opt("default").await?.is_some()) }).await?;
        Ok(Self { name, client })
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop cannot await; a short-lived runtime on its own thread deletes the namespace.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async {
                let c = client().await.ok()?;
                crate::chart::remove_cluster_identity(&c, &name).await;
                Api::<Namespace>::all(c).delete(&name, &DeleteParams::background()).await.ok()
            })
        })
        .join();
    }
}

/// Polls `check` until it returns true or the deadline passes.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() > deadline {
            match last_err {
                Some(e) => bail!("timed out after {timeout:?} waiting for {what} (last error: {e:#})"),
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Watches the object `name` until `cond` holds, returning the matching version. Every version
/// seen on the way is passed to `cond`, so a test can also record what happened in between.
pub async fn watch_until<K, F>(api: &Api<K>, name: &str, timeout: Duration, mut cond: F) -> anyhow::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: FnMut(&K) -> bool,
{
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher::watcher(api.clone(), cfg);
    let fut = async {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.try_next().await? {
            match ev {
                Event::Apply(obj) | Event::InitApply(obj) if cond(&obj) => return Ok(obj),
                _ => {}
            }
        }
        bail!("watch on {name} ended")
    };
    tokio::time::timeout(timeout, fut).await.with_context(|| format!("timed out after {timeout:?} watching {name}"))?
}

/// Records `view` of every version of `name` that a watch delivers (in order), from its state
/// when this returns until the returned task is aborted: what happened in between, not just the
/// end state.
pub async fn record<K, T, F>(api: &Api<K>, name: &str, view: F) -> anyhow::Result<(Arc<Mutex<Vec<T>>>, tokio::task::JoinHandle<()>)>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
    F: Fn(&K) -> T + Send + 'static,
{
    record_selected(api, watcher::Config::default().fields(&format!("metadata.name={name}")), view)
        .await
        .with_context(|| format!("listing {name}"))
}

/// [`record`] for every object the watch `config` selects (by label, say), interleaved in the
/// order the watch delivers them.
pub async fn record_selected<K, T, F>(
    api: &Api<K>,
    config: watcher::Config,
    view: F,
) -> anyhow::Result<(Arc<Mutex<Vec<T>>>, tokio::task::JoinHandle<()>)>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
    F: Fn(&K) -> T + Send + 'static,
{
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let stream = watcher::watcher(api.clone(), config);
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut listed_tx = Some(listed_tx);
        futures::pin_mut!(stream);
        while let Ok(Some(ev)) = stream.try_next().await {
            match ev {
                Event::Apply(obj) | Event::InitApply(obj) => out.lock().unwrap().push(view(&obj)),
                Event::InitDone => drop(listed_tx.take().map(|tx| tx.send(()))),
                _ => {}
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(30), listed).await.context("the watch did not list within 30 s")??;
    Ok((seen, task))
}

/// Waits until `name` no longer exists, returning when its deletion was observed.
pub async fn wait_deleted<K>(api: &Api<K>, name: &str, timeout: Duration) -> anyhow::Result<Instant>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let fut = async {
        let mut stream = watcher::watcher(api.clone(), cfg).boxed();
        let mut seen_in_init = false;
        while let Some(ev) = stream.try_next().await? {
            match ev {
                Event::Delete(_) => return Ok(Instant::now()),
                Event::Init => seen_in_init = false,
                Event::InitApply(_) => seen_in_init = true,
                Event::InitDone if !seen_in_init => return Ok(Instant::now()),
                _ => {}
            }
        }
        bail!("watch on {name} ended")
    };
    tokio::time::timeout(timeout, fut).await.with_context(|| format!("timed out after {timeout:?} waiting for {name} to be deleted"))?
}

/// Whose credentials an operator process runs with ([`OperatorOptions::credentials`]).
#[derive(Clone, Debug, Default)]
pub enum Credentials {
    /// The chart's own: its ServiceAccount and RBAC, rendered by `helm template` for an operator
    /// installed in and watching the test's namespace, installed on the cluster, and a token of
    /// that account. A call the chart does not grant is refused, as it would be in a real install.
    #[default]
    Chart,
    /// A kubeconfig the test made itself (an account without RBAC, say).
    Kubeconfig(PathBuf),
    /// The cluster's admin, for a test that must not depend on the chart's RBAC; says why.
    Admin { why: &'static str },
}

/// How to start an operator process ([`Operator::start_with`]).
#[derive(Clone, Debug, Default)]
pub struct OperatorOptions {
    /// Extra flags. A flag given here replaces the default [`Operator::start_with`] would add for
    /// it: `--enable-leader-election=false`, `--metrics-addr` / `--health-probe-addr` on free
    /// local ports, and `--webhook-addr=0`.
    pub args: Vec<String>,
    /// The admin kubeconfig of the cluster to run against, instead of the test cluster's.
    pub cluster: Option<PathBuf>,
    pub credentials: Credentials,
}

impl OperatorOptions {
    pub fn args(args: &[&str]) -> Self {
        Self { args: args.iter().map(|a| a.to_string()).collect(), ..Self::default() }
    }
}

/// The operator binary running against the test cluster, scoped to one namespace. Killed on drop
/// (and by the kernel if the test process dies first).
pub struct Operator {
    child: std::process::Child,
    pub log: PathBuf,
    /// Where its `/metrics` is served (`None` if disabled by a flag).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Where its `/healthz` and `/readyz` are served (`None` if disabled by a flag).
    pub health_addr: Option<std::net::SocketAddr>,
}

/// A local port nobody in this test process was given before (the kernel picks it; the port is
/// released again for the operator to bind).
pub fn free_local_addr() -> anyhow::Result<std::net::SocketAddr> {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    for _ in 0..50 {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&addr.port()) {
            given.push(addr.port());
            return Ok(addr);
        }
    }
    bail!("no free local port")
}

/// The address a `host:port` flag value points at, as a client reaches it.
fn flag_addr(value: &str) -> Option<std::net::SocketAddr> {
    if value == "0" {
        return None;
    }
    let value = if value.starts_with(':') { format!("127.0.0.1{value}") } else { value.to_string() };
    value.parse().ok()
}

/// `GET path` over plain HTTP/1.1, returning the status code and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let path = path.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").with_context(|| format!("no HTTP response from {addr}{path}"))?;
        let code: u16 = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).with_context(|| format!("bad status line: {head}"))?;
        Ok((code, body.to_string()))
    })
    .await?
}

impl Operator {
    /// Starts `cloneset-operator --namespace=<ns>` with extra flags, leader election off and
    /// metrics/probes on free local ports; logs go to `target/e2e-logs/<ns>-<n>.log`.
    pub async fn start(namespace: &str, extra_args: &[&str]) -> anyhow::Result<Self> {
        Self::start_with(namespace, OperatorOptions::args(extra_args)).await
    }

    /// Starts `cloneset-operator --namespace=<ns>` as `opts` say: by default with the chart's
    /// ServiceAccount and RBAC for that namespace ([`Credentials::Chart`]).
    pub async fn start_with(namespace: &str, opts: OperatorOptions) -> anyhow::Result<Self> {
        use std::os::unix::process::CommandExt as _;
        static STARTS: AtomicU32 = AtomicU32::new(0);
        let cluster = match opts.cluster {
            Some(k) => k,
            None => kubeconfig().await?,
        };
        // As the chart's pods have it: the installation namespace, where the Lease lives unless a
        // flag says otherwise.
        let (kubeconfig, pod_namespace) = match opts.credentials {
            Credentials::Chart => {
                let id = crate::chart::operator_identity(&cluster, namespace, &opts.args).await?;
                (id.kubeconfig, Some(id.installed_in))
            }
            Credentials::Kubeconfig(path) => (path, None),
            Credentials::Admin { why } => {
                eprintln!("the operator in {namespace} runs with the cluster's admin credentials: {why}");
                (cluster, None)
            }
        };
        // The last occurrence of a flag is the one the operator uses (Go's rule).
        let given = |flag: &str| opts.args.iter().rev().find(|a| *a == flag || a.starts_with(&format!("{flag}="))).cloned();
        let mut args = vec![format!("--namespace={namespace}")];
        if given("--enable-leader-election").is_none() {
            args.push("--enable-leader-election=false".into());
        }
        let mut addr_flag = |flag: &str| -> anyhow::Result<Option<std::net::SocketAddr>> {
            Ok(match given(flag) {
                Some(arg) => arg.split_once('=').and_then(|(_, v)| flag_addr(v)),
                None => {
                    let addr = free_local_addr()?;
                    args.push(format!("{flag}={addr}"));
                    Some(addr)
                }
            })
        };
        let metrics_addr = addr_flag("--metrics-addr")?;
        let health_addr = addr_flag("--health-probe-addr")?;
        // The conversion webhook writes the shared CRD's caBundle: only where a test asks for it.
        if given("--webhook-addr").is_none() {
            args.push("--webhook-addr=0".into());
        }
        args.extend(opts.args.iter().cloned());

        let bin = crate::cluster::sibling_binary("cloneset-operator")?;
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/e2e-logs");
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("{namespace}-{}.log", STARTS.fetch_add(1, Ordering::Relaxed)));
        let file = std::fs::File::create(&log)?;
        let mut cmd = std::process::Command::new(bin);
        cmd.env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", std::env::var("E2E_OPERATOR_LOG").unwrap_or_else(|_| "info,cloneset_operator=debug".into()))
            // An error's exit is not held up resolving a backtrace (panics keep theirs).
            .env("RUST_LIB_BACKTRACE", "0")
            .env_remove("POD_NAMESPACE")
            .env_remove("POD_NAME")
            .envs(pod_namespace.map(|ns| ("POD_NAMESPACE", ns)))
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        // The operator must not outlive a test process that panicked or was killed.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        Ok(Self { child, log, metrics_addr, health_addr })
    }

    /// The operator's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the operator has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Its `/metrics` text.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let addr = self.metrics_addr.context("the metrics server is disabled")?;
        match http_get(addr, "/metrics").await? {
            (200, body) => Ok(body),
            (code, body) => bail!("/metrics answered {code}: {body}"),
        }
    }

    /// The status code of `path` (`/healthz`, `/readyz`) on its health-probe server.
    pub async fn probe(&self, path: &str) -> anyhow::Result<u16> {
        let addr = self.health_addr.context("the health-probe server is disabled")?;
        Ok(http_get(addr, path).await?.0)
    }

    /// Stops the operator like Kubernetes would (SIGTERM), waiting for it to exit.
    pub fn stop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the operator without warning (SIGKILL), as a crashed or evicted pod would be.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The operator's log so far (for failure messages).
    pub fn log_tail(&self, lines: usize) -> String {
        last_lines(&std::fs::read_to_string(&self.log).unwrap_or_default(), lines)
    }
}

/// The last `n` lines of `text`, for failure messages.
pub fn last_lines(text: &str, n: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(n)..].join("\n")
}

/// `kruise_manager_is_leader` from an operator's `/metrics` text.
pub fn is_leader(metrics: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix("kruise_manager_is_leader ")).and_then(|v| v.trim().parse().ok())
}

/// Two operators with leader election in `namespace` (their Lease there too): the first has
/// taken the Lease when this returns; the second is started and will stand by.
pub async fn leader_and_standby(namespace: &str) -> anyhow::Result<(Operator, Operator)> {
    let le = OperatorOptions::args(&["--enable-leader-election=true", &format!("--leader-election-namespace={namespace}")]);
    let a = Operator::start_with(namespace, le.clone()).await?;
    let leading =
        wait_until(Duration::from_secs(60), "the first instance to lead", || async { Ok(is_leader(&a.metrics().await?) == Some(1.0)) })
            .await;
    if let Err(e) = leading {
        bail!("{e:#}\n{}", a.log_tail(20));
    }
    let b = Operator::start_with(namespace, le).await?;
    Ok((a, b))
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// A fake Kruise manager: renews `<ns>/kruise-manager` (start the operator with
/// `--kruise-manager-lease=<ns>/kruise-manager`) every second until stopped.
pub struct FakeKruise {
    renewer: tokio::task::JoinHandle<()>,
    last_renewal: std::sync::Arc<std::sync::Mutex<Instant>>,
}

pub const FAKE_KRUISE_LEASE_SECONDS: u64 = 4;

impl FakeKruise {
    pub async fn start(ns: &TestNamespace) -> Self {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> = ns.api();
        let now = || k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now());
        let lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kruise-manager"},
            "spec": {"holderIdentity": "kruise-manager-5b9c7d_0f1e", "leaseDurationSeconds": FAKE_KRUISE_LEASE_SECONDS,
                     "acquireTime": now(), "renewTime": now()},
        }))
        .unwrap();
        leases.create(&PostParams::default(), &lease).await.unwrap();
        let last_renewal = std::sync::Arc::new(std::sync::Mutex::new(Instant::now()));
        let last = last_renewal.clone();
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let renew = serde_json::json!({"spec": {"renewTime": now()}});
                if leases.patch("kruise-manager", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(renew)).await.is_ok() {
                    *last.lock().unwrap() = Instant::now();
                }
            }
        });
        Self { renewer, last_renewal }
    }

    /// Stops renewing; returns when the last renewal was.
    pub async fn stop(self) -> Instant {
        self.renewer.abort();
        let _ = self.renewer.await;
        *self.last_renewal.lock().unwrap()
    }
}
