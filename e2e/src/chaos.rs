//! Helpers for chaos tests: a ledger of every pod event that survives watch errors, killing and
//! restarting the operator on a schedule, denying pod writes with an admission policy for a
//! while, and a private control plane a test may restart parts of.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;

use cloneset_operator::api::CloneSet;

use crate::cluster::{self, ClusterState};
use crate::testenv::{self, wait_until};
use crate::workload::condition;

/// What a watch of every pod event showed: each version of each pod is applied in order, and
/// the counts are judged on every complete state in between (not just the end state).
#[derive(Clone, Debug, Default)]
pub struct PodLedger {
    /// Pod versions delivered (ADDED, MODIFIED, DELETED, and each pod of a relist).
    pub events: usize,
    /// Every pod ever seen: UID → name. One UID is one create.
    pub pods: BTreeMap<String, String>,
    /// Pods seen terminating or deleted (or gone at a relist), by UID.
    pub deleted: BTreeSet<String>,
    /// The most live (not terminating) pods at one moment.
    pub max_live: usize,
    /// The fewest / most Ready live pods at one moment (`None` before the first complete state).
    pub min_ready: Option<usize>,
    pub max_ready: usize,
    /// The most live pods that were not Ready at one moment.
    pub max_unready: usize,
    /// Pods that were Ready and later seen not Ready, terminating or gone, by name.
    pub lost_ready: BTreeSet<String>,
    /// Watch errors and the relists after them (e.g. while the apiserver was down).
    pub watch_errors: usize,
    pub relists: usize,
}

impl PodLedger {
    /// How many pods (UIDs) were seen per pod name; a name created twice shows 2.
    pub fn creates_per_name(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for name in self.pods.values() {
            *out.entry(name.clone()).or_insert(0) += 1;
        }
        out
    }

    /// Pods seen that are not in `before` (UIDs): the creates since `before` was taken.
    pub fn created_since(&self, before: &BTreeSet<String>) -> BTreeSet<String> {
        self.pods.keys().filter(|u| !before.contains(*u)).cloned().collect()
    }

    /// Records one event of pod `p` (from a list or a watch): its name, and whether it is being
    /// deleted. Returns its UID.
    fn saw(&mut self, p: &Pod) -> String {
        self.events += 1;
        let uid = p.uid().unwrap_or_default();
        self.pods.entry(uid.clone()).or_insert_with(|| p.name_any());
        if p.metadata.deletion_timestamp.is_some() {
            self.deleted.insert(uid.clone());
        }
        uid
    }

    /// A one-line summary for reports.
    pub fn summary(&self) -> String {
        let per_name = self.creates_per_name();
        let most = per_name.values().copied().max().unwrap_or(0);
        format!(
            "{} pod events, {} pods (UIDs) watched, {} deleted; max live {}, min/max Ready {}/{}, max not Ready {}; max creates per pod name {}; {} watch errors, {} relists",
            self.events,
            self.pods.len(),
            self.deleted.len(),
            self.max_live,
            self.min_ready.map_or("-".into(), |m| m.to_string()),
            self.max_ready,
            self.max_unready,
            most,
            self.watch_errors,
            self.relists
        )
    }
}

/// Live, and its Ready condition True.
pub fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && condition(p, "Ready").as_deref() == Some("True")
}

/// A running watch of the pods matching `selector`, feeding a [`PodLedger`]. Watch errors
/// (an apiserver restart) are counted and the watch resumes with backoff.
pub struct PodWatch {
    pub ledger: Arc<Mutex<PodLedger>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodWatch {
    /// Starts watching and returns once the initial list has been applied.
    pub async fn start(pods: Api<Pod>, selector: &str) -> anyhow::Result<Self> {
        let ledger = Arc::new(Mutex::new(PodLedger::default()));
        let out = ledger.clone();
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let cfg = watcher::Config::default().labels(selector);
        let task = tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let mut current: BTreeMap<String, Pod> = BTreeMap::new();
            // A relist arrives pod by pod: it is collected here and judged once complete.
            let mut relisting: Option<BTreeMap<String, Pod>> = None;
            let mut was_ready: BTreeSet<String> = BTreeSet::new();
            let stream = watcher::watcher(pods, cfg).default_backoff();
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                let mut l = out.lock().unwrap_or_else(|e| e.into_inner());
                match ev {
                    Err(_) => {
                        l.watch_errors += 1;
                        continue;
                    }
                    Ok(Event::Init) => {
                        relisting = Some(BTreeMap::new());
                        continue;
                    }
                    Ok(Event::InitApply(p)) => {
                        let uid = l.saw(&p);
                        relisting.get_or_insert_with(BTreeMap::new).insert(uid, p);
                        continue;
                    }
                    Ok(Event::InitDone) => {
                        let fresh = relisting.take().unwrap_or_default();
                        for gone in current.keys().filter(|u| !fresh.contains_key(*u)) {
                            l.deleted.insert(gone.clone());
                        }
                        current = fresh;
                        if listed_tx.is_none() {
                            l.relists += 1;
                        }
                        if let Some(tx) = listed_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(Event::Apply(p)) => {
                        let uid = l.saw(&p);
                        current.insert(uid, p);
                    }
                    Ok(Event::Delete(p)) => {
                        l.events += 1;
                        let uid = p.uid().unwrap_or_default();
                        l.pods.entry(uid.clone()).or_insert_with(|| p.name_any());
                        l.deleted.insert(uid.clone());
                        current.remove(&uid);
                    }
                }
                // A complete state: judge it.
                let live = current.values().filter(|p| p.metadata.deletion_timestamp.is_none()).count();
                let ready: BTreeSet<String> = current.iter().filter(|(_, p)| is_ready(p)).map(|(u, _)| u.clone()).collect();
                for lost in was_ready.difference(&ready) {
                    let name = l.pods.get(lost).cloned().unwrap_or_default();
                    l.lost_ready.insert(name);
                }
                was_ready = ready;
                l.max_live = l.max_live.max(live);
                l.max_unready = l.max_unready.max(live - was_ready.len());
                l.max_ready = l.max_ready.max(was_ready.len());
                l.min_ready = Some(l.min_ready.map_or(was_ready.len(), |m| m.min(was_ready.len())));
            }
        });
        tokio::time::timeout(Duration::from_secs(60), listed).await??;
        Ok(Self { ledger, task })
    }

    /// What was seen so far.
    pub fn snapshot(&self) -> PodLedger {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops watching and returns everything seen.
    pub fn stop(self) -> PodLedger {
        self.task.abort();
        self.snapshot()
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The next kill interval: spread over `[lo, hi)` by a fixed sequence, so runs are repeatable
/// but the kills do not fall on the same phase of the operator's work each time.
pub fn kill_interval(k: u32, lo: Duration, hi: Duration) -> Duration {
    let span = hi.saturating_sub(lo).as_millis().max(1) as u64;
    lo + Duration::from_millis((u64::from(k) * 1237 + 300) % span)
}

// ---------------------------------------------------------------------------------------------
// Denying writes with an admission policy

/// A ValidatingAdmissionPolicy and binding that deny every UPDATE (and so every patch) of a
/// pod in one namespace, until [`PodWriteDenial::lift`] or drop. Status writes (the kubelet's)
/// are a subresource and still pass.
pub struct PodWriteDenial {
    client: Client,
    /// For a client of its own on drop: a client belongs to the runtime it was made on, and that
    /// runtime is blocked while a value is being dropped.
    kubeconfig: PathBuf,
    pub name: String,
    lifted: bool,
}

/// The message every denied write carries.
pub const DENIAL_MESSAGE: &str = "chaos test: pod writes are denied for a while";

impl PodWriteDenial {
    /// Installs the denial on the cluster of `kubeconfig` and waits until the apiserver enforces
    /// it (a dry-run patch of `probe_pod` is rejected).
    pub async fn install(kubeconfig: &std::path::Path, namespace: &str, probe_pod: &str) -> anyhow::Result<Self> {
        let client = &cluster::client_for(kubeconfig).await?;
        let name = format!("chaos-deny-pod-updates-{namespace}");
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}],
                },
                "validations": [{"expression": "false", "message": DENIAL_MESSAGE}],
            },
        }))?;
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }))?;
        let denial = Self { client: client.clone(), kubeconfig: kubeconfig.to_path_buf(), name: name.clone(), lifted: false };
        Api::<ValidatingAdmissionPolicy>::all(client.clone()).create(&PostParams::default(), &policy).await?;
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).create(&PostParams::default(), &binding).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        wait_until(Duration::from_secs(60), "the pod-write denial to be enforced", || async {
            Ok(matches!(dry_run_label(&pods, probe_pod).await, Err(kube::Error::Api(e)) if e.message.contains(DENIAL_MESSAGE)))
        })
        .await?;
        Ok(denial)
    }

    /// Removes the denial and waits until pod writes pass again (a dry-run patch of
    /// `probe_pod` succeeds; dry runs change nothing anyone could watch).
    pub async fn lift(mut self, namespace: &str, probe_pod: &str) -> anyhow::Result<()> {
        self.remove().await?;
        self.lifted = true;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        wait_until(Duration::from_secs(60), "pod writes to pass again", || async { Ok(dry_run_label(&pods, probe_pod).await.is_ok()) })
            .await
    }

    async fn remove(&self) -> anyhow::Result<()> {
        let dp = DeleteParams::default();
        for r in [
            Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone()).delete(&self.name, &dp).await.map(|_| ()),
            Api::<ValidatingAdmissionPolicy>::all(self.client.clone()).delete(&self.name, &dp).await.map(|_| ()),
        ] {
            match r {
                Ok(()) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl Drop for PodWriteDenial {
    fn drop(&mut self) {
        if self.lifted {
            return;
        }
        // A failed test must not leave pod writes denied: remove it on a runtime of its own.
        let (kubeconfig, name) = (self.kubeconfig.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async {
                let client = cluster::client_for(&kubeconfig).await.ok()?;
                PodWriteDenial { client, kubeconfig, name, lifted: true }.remove().await.ok()
            })
        })
        .join();
    }
}

async fn dry_run_label(pods: &Api<Pod>, name: &str) -> Result<Pod, kube::Error> {
    let pp = PatchParams { dry_run: true, ..Default::default() };
    pods.patch(name, &pp, &Patch::Merge(json!({"metadata": {"labels": {"chaos-probe": "dry-run"}}}))).await
}

// ---------------------------------------------------------------------------------------------
// A private control plane

/// A control plane of one test's own in `target/<name>` (ports picked free), stopped when
/// dropped, even when the test fails. For faults that would disturb other tests (restarting the
/// apiserver).
pub struct PrivateCluster {
    pub dir: PathBuf,
    pub state: ClusterState,
}

impl PrivateCluster {
    pub async fn up(name: &str) -> anyhow::Result<Self> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target").join(name);
        let guard_dir = dir.clone();
        // Stop whatever `up` started even if it fails half-way.
        let res = cluster::up(&testenv::test_up_options(&dir)).await;
        match res {
            Ok((state, _)) => Ok(Self { dir, state }),
            Err(e) => {
                let _ = cluster::down(&guard_dir);
                Err(e)
            }
        }
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        cluster::client_for(&self.state.kubeconfig).await
    }

    /// For a failure message: each CloneSet's status and each pod's state in `ns`, as the
    /// apiserver now answers.
    pub async fn state_in(&self, client: &Client, ns: &str) -> String {
        let mut out = String::new();
        match Api::<CloneSet>::namespaced(client.clone(), ns).list(&Default::default()).await {
            Ok(list) => {
                for cs in list.items {
                    let status = serde_json::to_string(&cs.status).unwrap_or_default();
                    out += &format!("cloneset {} generation {:?} status {status}\n", cs.name_any(), cs.metadata.generation);
                }
            }
            Err(e) => out += &format!("listing CloneSets: {e}\n"),
        }
        match Api::<Pod>::namespaced(client.clone(), ns).list(&Default::default()).await {
            Ok(pods) => {
                for p in pods.items {
                    let labels = p.labels();
                    out += &format!(
                        "pod {} phase {} node {} ready {} revision {} specified-delete {} deleting {}\n",
                        p.name_any(),
                        p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("-"),
                        p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("-"),
                        condition(&p, "Ready").as_deref().unwrap_or("-"),
                        labels.get("controller-revision-hash").map_or("-", String::as_str),
                        labels.get("apps.kruise.io/specified-delete").map_or("-", String::as_str),
                        p.metadata.deletion_timestamp.is_some(),
                    );
                }
            }
            Err(e) => out += &format!("listing pods: {e}\n"),
        }
        out
    }

    /// For a failure message: the last lines of the components' logs, which go with the
    /// machine a failed CI run ran on.
    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        for (component, lines) in [("sim-kubelet", 20), ("kube-scheduler", 10), ("kube-controller-manager", 10), ("kube-apiserver", 10)] {
            let file = self.dir.join("logs").join(format!("{component}.log"));
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| format!("({}: {e})", file.display()));
            out += &format!("--- last {lines} lines of {component}.log ---\n{}\n", testenv::last_lines(&text, lines));
        }
        out
    }

    /// Stops the kube-apiserver (SIGTERM, then SIGKILL), starts it again with the same command
    /// line and waits until it is ready; returns how long it was unreachable.
    pub async fn restart_apiserver(&self) -> anyhow::Result<Duration> {
        let t = std::time::Instant::now();
        cluster::stop_component(&self.dir, "kube-apiserver")?;
        cluster::start_component(&self.dir, "kube-apiserver")?;
        cluster::wait_ready(&self.state.kubeconfig, Duration::from_secs(120)).await?;
        Ok(t.elapsed())
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        if let Err(e) = cluster::down(&self.dir) {
            eprintln!("stopping the private cluster in {}: {e:#}", self.dir.display());
        }
    }
}
