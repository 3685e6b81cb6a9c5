//! `make bench`: the operator at scale on the project's own local control plane, next to a plain
//! client doing the same pod writes with the same QPS/burst. Prints one table and writes the same
//! figures as JSON (see `e2e::bench::Report`).
//!
//! Knobs (environment): `BENCH_SIZES` (default `100x3,1000x1`: pods × repetitions of the
//! scale-up + rollout flow), `BENCH_SCALE_UP_SIZES` (default `5000x1`: scale-up only, no
//! rollouts), `BENCH_WINDOWS` (default `100%,20%`: rollout maxUnavailable),
//! `BENCH_TYPES` (default `ReCreate,InPlaceIfPossible`), `BENCH_RESOURCES` (default
//! `10x50,100x50`: CloneSets × pods each, measured in that order in one namespace, the last one
//! also restarted for the startup figure), `BENCH_OUT` (default `target/bench/results.json`),
//! `BENCH_CLUSTER_DIR` (default `target/bench-cluster`), `BENCH_KEEP_CLUSTER=1`,
//! `BENCH_RESOURCES_QPS` (default 200: the operator's client rate in the resources/startup
//! scenarios only; the timed scenarios always use 30/50 for operator and baseline alike).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use cloneset_operator::api::CloneSet;
use cloneset_operator::client::{self as opclient, RateLimit};
use cloneset_operator::metrics::Metrics;
use e2e::bench::{self, Report, Requests, Row};
use e2e::cluster::{self, UpOptions};
use e2e::testenv::{Operator, OperatorOptions, TestNamespace, install_api};
use e2e::workload::manifest;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt as _};
use serde_json::{Value, json};

const LIMIT: RateLimit = RateLimit { qps: 30.0, burst: 50 };
const TIMEOUT: Duration = Duration::from_secs(900);
const POLL: Duration = Duration::from_millis(20);

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

/// `100x3,1000x1` → [(100, 3), (1000, 1)].
fn pairs(spec: &str) -> anyhow::Result<Vec<(u32, u32)>> {
    spec.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            let (a, b) = s.trim().split_once('x').with_context(|| format!("{s}: expected AxB"))?;
            Ok((a.parse()?, b.parse()?))
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    let started_at = k8s_openapi::jiff::Timestamp::now().to_string();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = PathBuf::from(env_or("BENCH_CLUSTER_DIR", &root.join("target/bench-cluster").display().to_string()));
    let mut opts = UpOptions::new(&dir);
    opts.sim_kubelet_args =
        ["--pods-per-node=4000", "--workers=32", "--max-grace-period=1s", "--restart-delay=200ms"].map(String::from).into();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    eprintln!("bench: starting the control plane in {}", dir.display());
    let (state, _) = rt.block_on(cluster::up(&opts))?;
    drop(rt);
    // Single-threaded so far: the helpers read these.
    unsafe {
        std::env::set_var(e2e::testenv::KUBECONFIG_VAR, &state.kubeconfig);
        if std::env::var("E2E_OPERATOR_LOG").is_err() {
            std::env::set_var("E2E_OPERATOR_LOG", "info");
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = rt.block_on(run(state.kubeconfig.clone()));
    drop(rt);
    if std::env::var("BENCH_KEEP_CLUSTER").is_err() {
        cluster::down(&dir)?;
    }
    let rows = result?;
    let total_s = started.elapsed().as_secs_f64();
    let revision = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let report = Report {
        format: bench::FORMAT_VERSION,
        started: started_at,
        total_s,
        qps: LIMIT.qps,
        burst: LIMIT.burst,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        revision,
        rows,
    };
    let out = PathBuf::from(env_or("BENCH_OUT", &root.join("target/bench/results.json").display().to_string()));
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&report)?)?;
    println!("\n{}", bench::table(&report.rows));
    println!(
        "client QPS/burst {}/{} for operator and baseline; {} CPUs; total {:.0}s; JSON: {}",
        LIMIT.qps,
        LIMIT.burst,
        report.cpus,
        total_s,
        out.display()
    );
    Ok(())
}

async fn run(kubeconfig: PathBuf) -> anyhow::Result<Vec<Row>> {
    install_api().await?;
    let b = Bench { kubeconfig: kubeconfig.clone(), admin: cluster::client_for(&kubeconfig).await? };
    let mut rows = Vec::new();
    let types: Vec<String> = env_or("BENCH_TYPES", "ReCreate,InPlaceIfPossible").split(',').map(String::from).collect();
    let windows: Vec<String> = env_or("BENCH_WINDOWS", "100%,20%").split(',').map(String::from).collect();
    for (n, reps) in pairs(&env_or("BENCH_SIZES", "100x3,1000x1"))? {
        let mut up = Samples::default();
        let mut rollouts: BTreeMap<String, Samples> = BTreeMap::new();
        for rep in 0..reps {
            for t in &types {
                eprintln!("bench: N={n} {t} run {}/{reps}", rep + 1);
                let (o_up, o_roll) = b.operator_flow(n, t, &windows).await?;
                let (b_up, b_roll) = b.baseline_flow(n, t, &windows, &o_roll).await?;
                up.push(o_up.0, b_up, o_up.1);
                for ((w, (secs, reqs)), base) in windows.iter().zip(o_roll).zip(b_roll) {
                    rollouts.entry(format!("rollout {} {w}", short(t))).or_default().push(secs, base, reqs);
                }
            }
        }
        rows.push(up.row("scale-up", n, 1));
        rows.extend(rollouts.into_iter().map(|(name, s)| s.row(&name, n, 1)));
        eprintln!("{}", bench::table(&rows));
    }
    // Sizes too large for the rollout matrix on this machine: scale-up only.
    for (n, reps) in pairs(&env_or("BENCH_SCALE_UP_SIZES", "5000x1"))? {
        let mut up = Samples::default();
        for rep in 0..reps {
            eprintln!("bench: N={n} scale-up only, run {}/{reps}", rep + 1);
            let (o_up, _) = b.operator_flow(n, "ReCreate", &[]).await?;
            let (b_up, _) = b.baseline_flow(n, "ReCreate", &[], &[]).await?;
            up.push(o_up.0, b_up, o_up.1);
        }
        rows.push(up.row("scale-up", n, 1));
        eprintln!("{}", bench::table(&rows));
    }
    let res = pairs(&env_or("BENCH_RESOURCES", "10x50,100x50"))?;
    if !res.is_empty() {
        rows.extend(b.resources(&res).await?);
    }
    Ok(rows)
}

fn short(t: &str) -> &str {
    if t.starts_with("InPlace") { "in-place" } else { "recreate" }
}

#[derive(Default)]
struct Samples {
    operator: Vec<f64>,
    baseline: Vec<f64>,
    requests: Option<Requests>,
}

impl Samples {
    fn push(&mut self, operator: f64, baseline: f64, reqs: Requests) {
        self.operator.push(operator);
        self.baseline.push(baseline);
        self.requests = Some(reqs);
    }

    fn row(&self, name: &str, n: u32, clonesets: u32) -> Row {
        Row {
            scenario: name.into(),
            pods: n,
            clonesets,
            runs: self.operator.len() as u32,
            operator_s: bench::median(&self.operator),
            baseline_s: bench::median(&self.baseline),
            per_pod: self.requests.map(|r| r.per(f64::from(n))),
            extra: BTreeMap::new(),
        }
    }
}

struct Bench {
    kubeconfig: PathBuf,
    admin: Client,
}

/// A watch-fed cache of the pods of one namespace (readiness is judged from it, the same way for
/// the operator and the baseline).
struct PodWatch {
    store: Store<Pod>,
    task: tokio::task::JoinHandle<()>,
}

impl PodWatch {
    async fn start(api: Api<Pod>) -> anyhow::Result<Self> {
        let (store, writer) = reflector::store();
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff().reflect(writer).applied_objects();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while stream.next().await.is_some() {}
        });
        store.wait_until_ready().await?;
        Ok(Self { store, task })
    }

    /// Waits until at least `n` pods satisfy `pred`; returns when that was seen.
    async fn wait(&self, n: usize, what: &str, pred: impl Fn(&Pod) -> bool) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let count = self.store.state().iter().filter(|p| pred(p)).count();
            if count >= n {
                return Ok(Instant::now());
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {n} pods {what} ({count} are)");
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn ready_with(p: &Pod, image: &str) -> bool {
    let Some(s) = p.status.as_ref() else { return false };
    p.metadata.deletion_timestamp.is_none()
        && s.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
        && s.container_statuses.iter().flatten().all(|c| c.ready && c.image == image)
        && p.spec.as_ref().is_some_and(|sp| sp.containers.iter().all(|c| c.image.as_deref() == Some(image)))
}

fn image(v: u32) -> String {
    format!("registry.example/bench/app:v{v}")
}

fn strategy(t: &str, window: &str) -> Value {
    json!({"updateStrategy": {"type": t, "maxUnavailable": window}})
}

/// Pods rounded up from a percentage or count of `n` (at least 1).
fn window_pods(window: &str, n: u32) -> u32 {
    let w = match window.strip_suffix('%') {
        Some(p) => (f64::from(n) * p.parse::<f64>().unwrap_or(100.0) / 100.0).ceil() as u32,
        None => window.parse().unwrap_or(n),
    };
    w.clamp(1, n.max(1))
}

impl Bench {
    async fn operator(&self, ns: &str, limit: RateLimit) -> anyhow::Result<Operator> {
        let args = vec![format!("--rest-config-qps={}", limit.qps), format!("--rest-config-burst={}", limit.burst)];
        let op = Operator::start_with(ns, OperatorOptions { args, kubeconfig: Some(self.kubeconfig.clone()) }).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while op.probe("/readyz").await.ok() != Some(200) {
            if Instant::now() > deadline {
                bail!("operator not ready: {}", op.log_tail(20));
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(op)
    }

    async fn requests(op: &Operator) -> anyhow::Result<Requests> {
        Ok(Requests::from_metrics(&op.metrics().await?))
    }

    /// Waits until the CloneSet reports `cond` for its current generation.
    async fn wait_cs(
        &self,
        api: &Api<CloneSet>,
        name: &str,
        cond: impl Fn(&cloneset_operator::api::CloneSetStatus) -> bool,
    ) -> anyhow::Result<Instant> {
        e2e::testenv::watch_until(api, name, TIMEOUT, |cs: &CloneSet| {
            cs.status.as_ref().is_some_and(|s| s.observed_generation == cs.metadata.generation.unwrap_or(0) && cond(s))
        })
        .await?;
        Ok(Instant::now())
    }

    /// Scale-up 0 → n, then one rollout per window. Returns (seconds, requests) for each.
    async fn operator_flow(&self, n: u32, t: &str, windows: &[String]) -> anyhow::Result<((f64, Requests), Vec<(f64, Requests)>)> {
        let ns = TestNamespace::create("bench-op").await?;
        let op = self.operator(&ns.name, LIMIT).await?;
        let pods = PodWatch::start(ns.api()).await?;
        let cs_api: Api<CloneSet> = ns.api();
        let ni = n as i32;
        let before = Self::requests(&op).await?;
        let t0 = Instant::now();
        cs_api.create(&PostParams::default(), &manifest("web", ni, &image(1), strategy(t, "100%"))).await?;
        let (a, c) = tokio::join!(
            pods.wait(n as usize, "ready", |p| ready_with(p, &image(1))),
            self.wait_cs(&cs_api, "web", |s| s.replicas == ni && s.ready_replicas == ni)
        );
        let up_s = a?.max(c?).duration_since(t0).as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = Self::requests(&op).await?;
        let up = (up_s, after.since(&before));
        let mut rolls = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let v = i as u32 + 2;
            let before = Self::requests(&op).await?;
            let t0 = Instant::now();
            let mut spec = strategy(t, w);
            spec["template"] = json!({"spec": {"containers": [{"name": "main", "image": image(v)}]}});
            cs_api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": spec}))).await?;
            let end =
                self.wait_cs(&cs_api, "web", |s| s.updated_ready_replicas == ni && s.updated_replicas == ni && s.replicas == ni).await?;
            let secs = end.duration_since(t0).as_secs_f64();
            // Trailing writes (status, refresh) belong to this rollout: wait for the pods to settle.
            pods.wait(n as usize, "ready on the new image", |p| ready_with(p, &image(v))).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            rolls.push((secs, Self::requests(&op).await?.since(&before)));
        }
        drop(op);
        drop(pods);
        self.delete_namespace(ns).await?;
        Ok((up, rolls))
    }

    /// The same pods created and rolled by a plain client with the operator's QPS/burst.
    async fn baseline_flow(&self, n: u32, t: &str, windows: &[String], op_rolls: &[(f64, Requests)]) -> anyhow::Result<(f64, Vec<f64>)> {
        let ns = TestNamespace::create("bench-base").await?;
        let cfg = kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::read_from(&self.kubeconfig)?, &Default::default()).await?;
        let client = opclient::build(cfg, Some(LIMIT), Arc::new(Metrics::new()))?;
        let api: Api<Pod> = Api::namespaced(client, &ns.name);
        let pods = PodWatch::start(ns.api()).await?;
        let template = manifest("web", 1, &image(1), json!({})).spec.template;
        let pod_of = |name: &str, img: &str| -> anyhow::Result<Pod> {
            let mut v = serde_json::to_value(&template)?;
            v["metadata"]["name"] = json!(name);
            v["spec"]["containers"][0]["image"] = json!(img);
            Ok(serde_json::from_value(v)?)
        };
        let t0 = Instant::now();
        let new: Vec<Pod> = (0..n).map(|i| pod_of(&format!("web-{i}"), &image(1))).collect::<anyhow::Result<_>>()?;
        let pp = PostParams::default();
        futures::stream::iter(new.iter().map(|p| api.create(&pp, p))).buffer_unordered(n as usize).try_collect::<Vec<_>>().await?;
        let up = pods.wait(n as usize, "ready", |p| ready_with(p, &image(1))).await?.duration_since(t0).as_secs_f64();
        let in_place = t.starts_with("InPlace");
        let mut names: Vec<String> = (0..n).map(|i| format!("web-{i}")).collect();
        let mut rolls = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let v = i as u32 + 2;
            let img = image(v);
            // The same number of pod writes per pod as the operator made (rounded), at least the essential ones.
            let per_pod = op_rolls.get(i).map_or(0, |(_, r)| r.per(f64::from(n)).pod_writes().round() as u32);
            let chunk = window_pods(w, n) as usize;
            let t0 = Instant::now();
            let mut next = Vec::with_capacity(names.len());
            for batch in names.chunks(chunk) {
                let writes = batch.iter().map(|name| {
                    let api = api.clone();
                    let img = img.clone();
                    let name = name.clone();
                    let new_name = if in_place { name.clone() } else { format!("web-{v}-{}", name.rsplit('-').next().unwrap_or_default()) };
                    let pod = pod_of(&new_name, &img);
                    async move {
                        let pod = pod?;
                        let pp = PatchParams::default();
                        if in_place {
                            for _ in 2..per_pod.max(1) + 1 {
                                let cond = json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "True"}]}});
                                api.patch_status(&name, &pp, &Patch::Strategic(cond)).await?;
                            }
                            let patch = json!({"spec": {"containers": [{"name": "main", "image": img}]}});
                            api.patch(&name, &pp, &Patch::Strategic(patch)).await?;
                        } else {
                            for _ in 3..per_pod.max(2) + 1 {
                                api.patch(&name, &pp, &Patch::Merge(json!({"metadata": {"labels": {"bench/delete": "true"}}}))).await?;
                            }
                            api.delete(&name, &DeleteParams::default()).await?;
                            api.create(&PostParams::default(), &pod).await?;
                        }
                        anyhow::Ok(new_name)
                    }
                });
                let done: Vec<String> = futures::stream::iter(writes).buffer_unordered(chunk).try_collect().await?;
                let set: std::collections::BTreeSet<String> = done.iter().cloned().collect();
                let imgc = img.clone();
                pods.wait(set.len(), "ready on the new image", move |p| set.contains(&p.name_any()) && ready_with(p, &imgc)).await?;
                next.extend(done);
            }
            rolls.push(t0.elapsed().as_secs_f64());
            names = next;
        }
        drop(pods);
        self.delete_namespace(ns).await?;
        Ok((up, rolls))
    }

    async fn delete_namespace(&self, ns: TestNamespace) -> anyhow::Result<()> {
        let name = ns.name.clone();
        let api: Api<Namespace> = Api::all(self.admin.clone());
        let _ = api.delete(&name, &DeleteParams::background()).await;
        // Keep the pods from piling up on the simulated nodes between scenarios.
        std::mem::forget(ns);
        let deadline = Instant::now() + Duration::from_secs(300);
        while api.get_opt(&name).await?.is_some() {
            if Instant::now() > deadline {
                eprintln!("bench: namespace {name} still terminating; going on");
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }

    /// Memory and CPU at each (clonesets × pods) step in one namespace, then a restart of the
    /// operator with everything converged.
    async fn resources(&self, steps: &[(u32, u32)]) -> anyhow::Result<Vec<Row>> {
        let ns = TestNamespace::create("bench-mem").await?;
        let mut op = self.operator(&ns.name, resources_limit()).await?;
        let pods = PodWatch::start(ns.api()).await?;
        let cs_api: Api<CloneSet> = ns.api();
        let mut rows = Vec::new();
        let mut made = 0u32;
        let mut steady_prev: Option<(u64, u32)> = None;
        let (_, _, base_cpu) = proc_reading(op.pid())?;
        let mut cpu_prev = base_cpu;
        let (base_rss, _, _) = proc_reading(op.pid())?;
        for &(count, per) in steps {
            eprintln!("bench: resources {count} CloneSets x {per} pods");
            let before = Self::requests(&op).await?;
            let t0 = Instant::now();
            let creates = (made..count).map(|i| {
                let api = cs_api.clone();
                async move { api.create(&PostParams::default(), &manifest(&format!("cs-{i:03}"), per as i32, &image(1), json!({}))).await }
            });
            futures::stream::iter(creates).buffer_unordered(16).try_collect::<Vec<_>>().await?;
            made = made.max(count);
            let total = count * per;
            pods.wait(total as usize, "ready", |p| ready_with(p, &image(1))).await?;
            self.wait_all_status(&cs_api, per as i32).await?;
            let secs = t0.elapsed().as_secs_f64();
            tokio::time::sleep(Duration::from_secs(10)).await;
            let (rss, hwm, cpu) = proc_reading(op.pid())?;
            let reqs = Self::requests(&op).await?.since(&before);
            let mut extra = BTreeMap::new();
            extra.insert("peak_rss_mib".into(), mib(hwm));
            extra.insert("steady_rss_mib".into(), mib(rss));
            extra.insert("cpu_s".into(), ticks_to_s(cpu - cpu_prev));
            let (rss_before, pods_before) = steady_prev.unwrap_or((base_rss, 0));
            extra.insert("bytes_per_pod".into(), ((rss as f64 - rss_before as f64) / f64::from((total - pods_before).max(1))).round());
            cpu_prev = cpu;
            steady_prev = Some((rss, total));
            rows.push(Row {
                scenario: "resources (create all)".into(),
                pods: total,
                clonesets: count,
                runs: 1,
                operator_s: Some(secs),
                baseline_s: None,
                per_pod: Some(reqs.per(f64::from((total - pods_before).max(1)))),
                extra,
            });
        }
        // Startup: a fresh process over converged CloneSets.
        let (count, per) = *steps.last().unwrap_or(&(0, 0));
        op.stop();
        let t0 = Instant::now();
        let op2 = self.operator(&ns.name, resources_limit()).await?;
        let start_pid = op2.pid();
        let deadline = Instant::now() + TIMEOUT;
        let end = loop {
            let m = op2.metrics().await.unwrap_or_default();
            if bench::reconciled_and_idle(&m, f64::from(count)) {
                break Instant::now();
            }
            if Instant::now() > deadline {
                bail!("startup: not all CloneSets reconciled");
            }
            tokio::time::sleep(POLL).await;
        };
        let startup_s = end.duration_since(t0).as_secs_f64();
        let converged = cs_api.list(&ListParams::default()).await?.items.iter().all(|cs| {
            cs.status
                .as_ref()
                .is_some_and(|s| s.observed_generation == cs.metadata.generation.unwrap_or(0) && s.ready_replicas == per as i32)
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        let m = op2.metrics().await?;
        let reqs = Requests::from_metrics(&m);
        let (rss, hwm, cpu) = proc_reading(start_pid)?;
        let mut extra = BTreeMap::new();
        extra.insert("writes_after_restart".into(), reqs.writes());
        extra.insert("reads_after_restart".into(), reqs.reads);
        extra.insert("reconciles".into(), bench::metric_sum(&m, "controller_runtime_reconcile_total"));
        extra.insert("all_observed".into(), if converged { 1.0 } else { 0.0 });
        extra.insert("peak_rss_mib".into(), mib(hwm));
        extra.insert("steady_rss_mib".into(), mib(rss));
        extra.insert("cpu_s".into(), ticks_to_s(cpu));
        rows.push(Row {
            scenario: "startup (restart)".into(),
            pods: count * per,
            clonesets: count,
            runs: 1,
            operator_s: Some(startup_s),
            baseline_s: None,
            per_pod: None,
            extra,
        });
        drop(op2);
        drop(pods);
        self.delete_namespace(ns).await?;
        Ok(rows)
    }

    async fn wait_all_status(&self, api: &Api<CloneSet>, per: i32) -> anyhow::Result<()> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let list = api.list(&ListParams::default()).await?;
            let ok = list.items.iter().all(|cs| {
                cs.status.as_ref().is_some_and(|s| {
                    s.observed_generation == cs.metadata.generation.unwrap_or(0) && s.ready_replicas == per && s.replicas == per
                })
            });
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("CloneSets did not all report {per} ready");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The memory/startup scenarios measure memory, CPU and restart behaviour, not speed against a
/// baseline, so they run with a higher client rate (`BENCH_RESOURCES_QPS`, default 200, burst
/// twice that) to create 5,000 pods in reasonable time.
fn resources_limit() -> RateLimit {
    let qps: f64 = env_or("BENCH_RESOURCES_QPS", "200").parse().unwrap_or(200.0);
    RateLimit { qps, burst: (qps * 2.0) as u32 }
}

fn mib(bytes: u64) -> f64 {
    (bytes as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0
}

fn ticks_to_s(ticks: u64) -> f64 {
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks as f64 / hz * 100.0).round() / 100.0
}

/// (VmRSS, VmHWM, utime+stime ticks) of `pid`.
fn proc_reading(pid: u32) -> anyhow::Result<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (rss, hwm) = bench::rss_from_status(&status);
    Ok((rss, hwm, bench::cpu_ticks_from_stat(&stat).context("bad /proc stat")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_parse() {
        assert_eq!(pairs("100x3,1000x1").unwrap(), vec![(100, 3), (1000, 1)]);
        assert!(pairs("100").is_err());
        assert_eq!(window_pods("20%", 1000), 200);
        assert_eq!(window_pods("20%", 3), 1);
        assert_eq!(window_pods("100%", 100), 100);
        assert_eq!(window_pods("5", 100), 5);
    }
}
