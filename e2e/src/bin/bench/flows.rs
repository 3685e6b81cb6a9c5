//! The controller side of the timed scenarios: our operator (started here, at its defaults or
//! with a client-side limit) or an external controller (`BENCH_EXTERNAL_PID`), one CloneSet
//! scaled up and rolled out, and the namespace cleanup every scenario ends with.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use cloneset_operator::api::{CloneSet, CloneSetStatus};
use cloneset_operator::client::RateLimit;
use e2e::bench::{self, Requests, Snapshot};
use e2e::testenv::{Credentials, Operator, OperatorOptions, TestNamespace};
use e2e::workload::manifest;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::cache::Cache;
use crate::{External, Knobs, POLL, image, mib, proc_reading, ready_with, strategy, ticks_to_s};

/// How long after its last rollout a controller's RSS is read (`rss_after_mib`).
const RSS_SETTLE: Duration = Duration::from_secs(15);
pub struct Bench {
    pub knobs: Knobs,
    pub admin: Client,
    /// Where the cluster's state is recorded (`local-cluster`'s directory): kube-apiserver's
    /// pid for its memory, and its command line for the soak's restarts.
    pub state_dir: std::path::PathBuf,
}

/// The controller under measurement.
pub enum Ctl {
    Ours(Operator),
    External(External),
}

impl Ctl {
    pub fn pid(&self) -> u32 {
        match self {
            Ctl::Ours(op) => op.pid(),
            Ctl::External(e) => e.pid,
        }
    }

    /// Its Prometheus text, if it exposes one.
    pub async fn metrics(&self) -> anyhow::Result<Option<String>> {
        Ok(Some(match self {
            Ctl::Ours(op) => op.metrics().await?,
            Ctl::External(External { metrics: None, .. }) => return Ok(None),
            Ctl::External(External { metrics: Some((host, path)), .. }) => {
                let addr = tokio::net::lookup_host(host.as_str()).await?.next().with_context(|| format!("cannot resolve {host}"))?;
                match e2e::testenv::http_get(addr, path).await? {
                    (200, body) => body,
                    (code, _) => bail!("http://{host}{path} answered {code}"),
                }
            }
        }))
    }

    /// Its request counts, if it exposes them.
    pub async fn snapshot(&self) -> anyhow::Result<Option<Snapshot>> {
        Ok(self.metrics().await?.map(|text| Snapshot::from_metrics(&text)))
    }
}

/// Whether every container of `p` reports ready (the kubelet's part of a pod's readiness).
pub fn containers_ready(p: &Pod) -> bool {
    p.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| c.type_ == "ContainersReady" && c.status == "True")
}

/// Prints when a scale-up reached each milestone, seconds after `t0`: where its time went.
pub fn timeline<const N: usize>(who: &str, t0: Instant, milestones: [(&str, Instant); N], done_s: f64) {
    let at: Vec<String> = milestones.iter().map(|(what, t)| format!("{what} {:.2}s", t.duration_since(t0).as_secs_f64())).collect();
    eprintln!("bench: scale-up timeline ({who}): {}, done {done_s:.2}s", at.join(", "));
}

/// CPU readings at the start of a phase: the machine's, kube-apiserver's and the controller's.
pub struct LoadMeter {
    machine: Option<(u64, u64)>,
    apiserver: Option<(u32, u64)>,
    controller: Option<(u32, u64)>,
}

impl LoadMeter {
    pub fn start(apiserver: Option<u32>, controller: Option<u32>) -> Self {
        let ticks = |pid: Option<u32>| pid.and_then(|p| Some((p, proc_reading(p).ok()?.2)));
        Self { machine: machine_reading(), apiserver: ticks(apiserver), controller: ticks(controller) }
    }

    /// CPU seconds kube-apiserver and the controller spent since the start (none where the
    /// process could not be read).
    pub fn cpu_s(&self) -> (Option<f64>, Option<f64>) {
        let spent = |reading: Option<(u32, u64)>| {
            let (pid, before) = reading?;
            Some(ticks_to_s(proc_reading(pid).ok()?.2.saturating_sub(before)))
        };
        (spent(self.apiserver), spent(self.controller))
    }

    /// Since the start: `<prefix>machine_busy` (the share of both cores in use),
    /// `<prefix>apiserver_cpu_s` and `<prefix>controller_cpu_s`.
    pub fn extra(&self, prefix: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        if let (Some((b0, t0)), Some((b1, t1))) = (self.machine, machine_reading())
            && t1 > t0
        {
            out.insert(format!("{prefix}machine_busy"), bench::round2((b1 - b0) as f64 / (t1 - t0) as f64));
        }
        let (apiserver, controller) = self.cpu_s();
        for (name, cpu_s) in [("apiserver", apiserver), ("controller", controller)] {
            if let Some(s) = cpu_s {
                out.insert(format!("{prefix}{name}_cpu_s"), bench::round2(s));
            }
        }
        out
    }
}

fn machine_reading() -> Option<(u64, u64)> {
    bench::machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// One timed phase of a controller: seconds, and its requests over the phase for `pods` pods.
pub struct Phase {
    pub secs: f64,
    pub pods: u32,
    pub counts: Option<Snapshot>,
    /// CPU over the phase ([`LoadMeter::extra`]), where measured.
    pub load: BTreeMap<String, f64>,
}

impl Phase {
    pub fn per_pod(&self) -> Option<Requests> {
        self.counts.as_ref().and_then(|c| c.per_pod(f64::from(self.pods)))
    }

    /// `operator_429`, and per-method writes for a controller whose metric has no resources.
    pub fn extra(&self) -> BTreeMap<String, f64> {
        let Some(c) = &self.counts else { return BTreeMap::new() };
        let mut extra = c.method_extra(f64::from(self.pods));
        extra.insert("operator_429".into(), c.throttled);
        extra.extend(c.latency_extra(""));
        extra.extend(self.load.clone());
        extra
    }
}

/// One timed phase of a baseline: seconds, and its client's requests over the phase.
pub struct BasePhase {
    pub secs: f64,
    pub pods: u32,
    pub counts: Snapshot,
    /// CPU over the phase ([`LoadMeter::extra`]), where measured.
    pub load: BTreeMap<String, f64>,
}

impl BasePhase {
    pub fn extra(&self) -> BTreeMap<String, f64> {
        let mut extra: BTreeMap<String, f64> = [
            ("baseline_429".to_string(), self.counts.throttled),
            ("baseline_writes_per_pod".to_string(), bench::round2(self.counts.requests.writes() / f64::from(self.pods.max(1)))),
        ]
        .into();
        extra.extend(self.counts.latency_extra("baseline_"));
        extra.extend(self.load.clone());
        extra
    }
}

/// A controller's scale-up, its rollouts, and its memory right after the last one.
pub struct Flow {
    pub up: Phase,
    pub rolls: Vec<Phase>,
    pub rss_after: u64,
    pub peak_rss: u64,
}

impl Flow {
    pub fn rss_extra(&self) -> BTreeMap<String, f64> {
        [("rss_after_mib".to_string(), mib(self.rss_after)), ("peak_rss_mib".to_string(), mib(self.peak_rss))].into()
    }
}

/// The status reports `cond` for the CloneSet's current generation, which is at least `min_gen`
/// (the generation a write returned: a cache may still hold the version before it).
pub fn observed(cs: &CloneSet, min_gen: i64, cond: impl Fn(&CloneSetStatus) -> bool) -> bool {
    let current = cs.metadata.generation.unwrap_or(0);
    current >= min_gen && cs.status.as_ref().is_some_and(|s| s.observed_generation == current && cond(s))
}

/// `replicas` pods, all ready and (with `updated`) all on the update revision.
pub fn converged(s: &CloneSetStatus, replicas: i32, updated: bool) -> bool {
    s.replicas == replicas
        && s.ready_replicas == replicas
        && (!updated || (s.updated_replicas == replicas && s.updated_ready_replicas == replicas))
}

impl Bench {
    /// kube-apiserver's pid now (a restart changes it), when the cluster's state is at hand.
    pub fn apiserver_pid(&self) -> Option<u32> {
        let state = e2e::cluster::read_state(&self.state_dir).ok().flatten()?;
        state.processes.iter().find(|p| p.name == "kube-apiserver").map(|p| p.pid as u32)
    }

    /// kube-apiserver's own `/metrics` text.
    async fn apiserver_metrics(&self) -> anyhow::Result<String> {
        Ok(self.admin.request_text(http::Request::get("/metrics").body(Vec::new())?).await?)
    }

    /// kube-apiserver's bytes sent so far ([`bench::apiserver_bytes_sent`]).
    pub async fn apiserver_bytes_sent(&self) -> anyhow::Result<f64> {
        Ok(bench::apiserver_bytes_sent(&self.apiserver_metrics().await?))
    }

    /// Pod writes kube-apiserver has answered 409 so far ([`bench::apiserver_pod_conflicts`]).
    pub async fn apiserver_pod_conflicts(&self) -> anyhow::Result<f64> {
        Ok(bench::apiserver_pod_conflicts(&self.apiserver_metrics().await?))
    }

    /// Pod conflicts since `before` (none when either reading failed, or the apiserver restarted
    /// in between and its counters began again).
    pub async fn conflicts_since(&self, before: Option<f64>) -> Option<f64> {
        let now = self.apiserver_pod_conflicts().await.ok()?;
        before.filter(|b| now >= *b).map(|b| now - b)
    }

    pub fn controller_label(&self) -> &'static str {
        if self.knobs.external.is_some() { "external" } else { "operator" }
    }

    /// Baselines run for our operator, and for an external controller only when asked.
    pub fn baselines(&self) -> bool {
        self.knobs.external.is_none() || self.knobs.external_baseline
    }

    /// Our operator in `ns`, with `limit` as its --rest-config-* flags (none: its defaults),
    /// once it answers /readyz.
    pub async fn start_operator(&self, ns: &str, limit: Option<RateLimit>) -> anyhow::Result<Operator> {
        self.start_operator_with(ns, limit, &[]).await
    }

    /// As [`Self::start_operator`], with `extra` flags.
    pub async fn start_operator_with(&self, ns: &str, limit: Option<RateLimit>, extra: &[&str]) -> anyhow::Result<Operator> {
        let mut args =
            limit.map_or_else(Vec::new, |l| vec![format!("--rest-config-qps={}", l.qps), format!("--rest-config-burst={}", l.burst)]);
        args.extend(extra.iter().map(|a| a.to_string()));
        let op = Operator::start_with(
            ns,
            OperatorOptions {
                args,
                credentials: Credentials::Admin {
                    why: "the bench measures the operator, not its permissions, on whatever cluster BENCH_KUBECONFIG names",
                },
                ..Default::default()
            },
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while op.probe("/readyz").await.ok() != Some(200) {
            if Instant::now() > deadline {
                bail!("operator not ready: {}", op.log_tail(20));
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(op)
    }

    /// The controller for a scenario in `ns`: ours, started here, or the external one.
    pub async fn controller(&self, ns: &str, limit: Option<RateLimit>) -> anyhow::Result<Ctl> {
        match &self.knobs.external {
            Some(e) => Ok(Ctl::External(e.clone())),
            None => Ok(Ctl::Ours(self.start_operator(ns, limit).await?)),
        }
    }

    /// Scale-up 0 → n, then one rollout per window, by the controller (ours with client-side
    /// `limit`, or the external one).
    pub async fn operator_flow(&self, n: u32, t: &str, windows: &[String], limit: Option<RateLimit>) -> anyhow::Result<Flow> {
        let ns = TestNamespace::create("bench-op").await?;
        let ctl = self.controller(&ns.name, limit).await?;
        let pods = Cache::<Pod>::start(ns.api(), &ns.name).await?;
        let sets = Cache::<CloneSet>::start(ns.api(), &ns.name).await?;
        let cs_api: Api<CloneSet> = ns.api();
        let ni = n as i32;
        let before = ctl.snapshot().await?;
        let load = LoadMeter::start(self.apiserver_pid(), Some(ctl.pid()));
        let t0 = Instant::now();
        let min_gen = generation(&cs_api.create(&PostParams::default(), &manifest("web", ni, &image(1), strategy(t, "100%"))).await?);
        let (created, containers, a, c) = tokio::join!(
            pods.wait_count(n as usize, "created", |_| true),
            pods.wait_count(n as usize, "with their containers ready", containers_ready),
            pods.wait_count(n as usize, "ready", |p| ready_with(p, &image(1))),
            sets.wait_object("web", "to report all replicas ready", move |cs| observed(cs, min_gen, |s| converged(s, ni, false)))
        );
        let up_s = a?.max(c?).duration_since(t0).as_secs_f64();
        let load = load.extra("");
        timeline("operator", t0, [("created", created?), ("containers ready", containers?)], up_s);
        // Trailing writes (status, lifecycle) belong to the scale-up.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let up = Phase { secs: up_s, pods: n, counts: since(ctl.snapshot().await?, before), load };
        let mut rolls = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let v = i as u32 + 2;
            let before = ctl.snapshot().await?;
            let t0 = Instant::now();
            let mut spec = strategy(t, w);
            spec["template"] = json!({"spec": {"containers": [{"name": "main", "image": image(v)}]}});
            let min_gen = generation(&cs_api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": spec}))).await?);
            let end =
                sets.wait_object("web", "to report the rollout done", move |cs| observed(cs, min_gen, |s| converged(s, ni, true))).await?;
            let secs = end.duration_since(t0).as_secs_f64();
            // Trailing writes (status, refresh) belong to this rollout: wait for the pods to settle.
            pods.wait_count(n as usize, "ready on the new image", |p| ready_with(p, &image(v))).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            rolls.push(Phase { secs, pods: n, counts: since(ctl.snapshot().await?, before), load: BTreeMap::new() });
        }
        // Settled, as a dashboard would show it between rollouts: long enough for the operator's
        // heap trim (every 10 s) and for a Go controller's scavenger to start returning memory.
        tokio::time::sleep(RSS_SETTLE).await;
        let (rss_after, peak_rss, _) = proc_reading(ctl.pid())?;
        drop(ctl);
        drop((pods, sets));
        self.delete_namespace(ns).await?;
        Ok(Flow { up, rolls, rss_after, peak_rss })
    }

    /// Deletes a scenario's namespace: its CloneSets first (so no controller replaces pods),
    /// then its pods at once (grace 0: no kubelet grace to wait out, and nothing here is timed),
    /// then the namespace. Waits until no pod is left, not for the namespace to be gone: the
    /// namespace controller takes seconds to finish an empty namespace, at no cost to the next
    /// scenario.
    pub async fn delete_namespace(&self, ns: TestNamespace) -> anyhow::Result<()> {
        let name = ns.name.clone();
        let t0 = Instant::now();
        // The namespace is deleted here, not by its Drop.
        std::mem::forget(ns);
        let sets: Api<CloneSet> = Api::namespaced(self.admin.clone(), &name);
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &name);
        let _ = sets.delete_collection(&DeleteParams::background(), &ListParams::default()).await;
        let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::background() };
        let _ = pods.delete_collection(&now, &ListParams::default()).await;
        let _ = Api::<Namespace>::all(self.admin.clone()).delete(&name, &DeleteParams::background()).await;
        let deadline = Instant::now() + Duration::from_secs(300);
        while !pods.list_metadata(&ListParams::default().limit(1)).await?.items.is_empty() {
            if Instant::now() > deadline {
                eprintln!("bench: namespace {name} still has pods; going on");
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!("bench: namespace {name} emptied in {:.1}s", t0.elapsed().as_secs_f64());
        Ok(())
    }
}

pub fn generation(cs: &CloneSet) -> i64 {
    cs.metadata.generation.unwrap_or(0)
}

/// `after - before` when both were read.
pub fn since(after: Option<Snapshot>, before: Option<Snapshot>) -> Option<Snapshot> {
    Some(after?.since(&before?))
}
