//! Many CloneSets in one namespace under one operator: the resources/startup scenario
//! (`BENCH_RESOURCES`) and the large one (`BENCH_LARGE`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use cloneset_operator::api::CloneSet;
use cloneset_operator::client::RateLimit;
use e2e::bench::{self, Row, Snapshot};
use e2e::testenv::{Operator, TestNamespace};
use e2e::workload::manifest;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

use crate::cache::Cache;
use crate::flows::{Bench, Ctl, LoadMeter, converged, generation, observed};
use crate::{External, POLL, TIMEOUT, image, mib, proc_reading, ready_with, strategy, ticks_to_s};

/// The time between two probes of the large scenario (the first one this long after the
/// rollout starts).
const PROBE_SPACING: Duration = Duration::from_secs(1);

/// The annotation, then the label, the large scenario's observe steps give every pod: read by no
/// controller. The annotation changes nothing the operator's cache reads, so it queues no
/// reconcile there (Kruise's manager reconciles for it); a label can be in a selector or a
/// lifecycle hook, so a label change is reconciled by both (and asks for no write).
const OBSERVED: &str = "bench.cloneset-operator.dev/observed";

/// How long a controller's reconcile count must stay still, with its queue empty and no worker
/// busy, for it to count as settled after the observe step.
const SETTLED: Duration = Duration::from_secs(2);

/// One namespace's CloneSets and pods, watched.
pub(crate) struct Watched {
    pub namespace: String,
    pub api: Api<CloneSet>,
    pub pods: Cache<Pod>,
    pub sets: Cache<CloneSet>,
}

/// An operator's memory, CPU and the pod events seen, at one moment.
struct Reading {
    rss: u64,
    hwm: u64,
    cpu: u64,
    events: u64,
}

impl Reading {
    fn take(pid: u32, w: &Watched) -> anyhow::Result<Self> {
        let (rss, hwm, cpu) = proc_reading(pid)?;
        Ok(Self { rss, hwm, cpu, events: w.pods.events() })
    }

    /// CPU used and pod events seen since `from`, and CPU seconds per 1,000 of those events.
    fn usage_since(&self, from: &Reading) -> BTreeMap<String, f64> {
        let cpu_s = ticks_to_s(self.cpu.saturating_sub(from.cpu));
        let events = self.events.saturating_sub(from.events);
        let mut extra: BTreeMap<String, f64> = [("cpu_s".to_string(), cpu_s), ("pod_events".to_string(), events as f64)].into();
        if events > 0 {
            extra.insert("cpu_s_per_1k_pod_events".into(), (cpu_s / (events as f64 / 1000.0) * 1000.0).round() / 1000.0);
        }
        extra
    }

    fn memory(&self, rss_key: &str) -> BTreeMap<String, f64> {
        [(rss_key.to_string(), mib(self.rss)), ("peak_rss_mib".to_string(), mib(self.hwm))].into()
    }
}

async fn snapshot(op: &Operator) -> anyhow::Result<Snapshot> {
    Ok(Snapshot::from_metrics(&op.metrics().await?))
}

/// The highest RSS of process `pid`, read every 50 ms until `stop`.
async fn peak_rss(pid: u32, mut stop: tokio::sync::oneshot::Receiver<()>) -> Option<u64> {
    let mut peak = None;
    loop {
        if let Ok((rss, _, _)) = proc_reading(pid) {
            peak = peak.max(Some(rss));
        }
        tokio::select! {
            _ = &mut stop => return peak,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

/// Requests over a phase, if the controller exposes its counts.
fn since(now: Option<Snapshot>, before: &Option<Snapshot>) -> Option<Snapshot> {
    Some(now?.since(before.as_ref()?))
}

/// Restarts an external controller with `command` (`BENCH_EXTERNAL_RESTART`), which stops it,
/// starts it again in the background and prints the new process's pid as its last line.
async fn restart_external(command: &str, old: &External) -> anyhow::Result<External> {
    let out = tokio::process::Command::new("sh").args(["-c", command]).output().await?;
    anyhow::ensure!(out.status.success(), "BENCH_EXTERNAL_RESTART failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pid = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default().trim();
    let pid: u32 = pid.parse().with_context(|| format!("BENCH_EXTERNAL_RESTART printed {pid:?}, not a pid"))?;
    anyhow::ensure!(pid != old.pid, "BENCH_EXTERNAL_RESTART printed the old pid {pid}");
    Ok(External { pid, ..old.clone() })
}

impl Bench {
    pub(crate) async fn watched(&self, ns: &TestNamespace, timeout: Duration) -> anyhow::Result<Watched> {
        Ok(Watched {
            namespace: ns.name.clone(),
            api: ns.api(),
            pods: Cache::start(ns.api(), &ns.name).await?.with_timeout(timeout),
            sets: Cache::start(ns.api(), &ns.name).await?.with_timeout(timeout),
        })
    }

    /// Creates `names` with `per` pods each and `spec` (at most the baseline's concurrency of
    /// creates in flight), then waits until `total` pods of the namespace are Ready and every
    /// CloneSet reports all its replicas ready.
    pub(crate) async fn create_and_converge(
        &self,
        w: &Watched,
        names: Vec<String>,
        per: u32,
        spec: Value,
        total: u32,
    ) -> anyhow::Result<Instant> {
        let creates = names.iter().map(|name| {
            let (api, cs) = (w.api.clone(), manifest(name, per as i32, &image(1), spec.clone()));
            async move { api.create(&PostParams::default(), &cs).await }
        });
        futures::stream::iter(creates).buffer_unordered(self.knobs.concurrency).try_collect::<Vec<_>>().await?;
        let ready = w.pods.wait_count(total as usize, "ready", |p| ready_with(p, &image(1))).await?;
        let (_, all) = w
            .sets
            .wait_all("every CloneSet to report its replicas ready", |all| {
                let pending = all.iter().filter(|cs| !observed(cs, 0, |s| converged(s, cs.spec.replicas.unwrap_or(1), false))).count();
                if pending == 0 { Ok(()) } else { Err(format!("{pending} of {} not yet", all.len())) }
            })
            .await?;
        Ok(ready.max(all))
    }

    /// Stops the controller and starts a fresh one (ours with `flags`) over `count` converged
    /// CloneSets: the time until it has reconciled them all and is idle, and what it did on the
    /// way (`extra`): its writes, reads, memory and CPU, and kube-apiserver's memory before and
    /// at its peak and its CPU while it served the caches' lists.
    async fn restart(
        &self,
        ns: &str,
        ctl: Ctl,
        count: u32,
        w: &Watched,
        limit: Option<RateLimit>,
        flags: &[&str],
    ) -> anyhow::Result<(f64, BTreeMap<String, f64>, Ctl)> {
        let apiserver_pid = self.apiserver_pid();
        let sent_before = self.apiserver_bytes_sent().await.ok();
        let apiserver_before = apiserver_pid.and_then(|pid| proc_reading(pid).ok());
        let (stop_sampling, sampled) = tokio::sync::oneshot::channel::<()>();
        let sampler = apiserver_pid.map(|pid| tokio::spawn(peak_rss(pid, sampled)));
        let t0 = Instant::now();
        let ctl = match ctl {
            Ctl::Ours(mut op) => {
                op.stop();
                Ctl::Ours(self.start_operator_with(ns, limit, flags).await?)
            }
            Ctl::External(e) => {
                let command =
                    self.knobs.external_restart.as_deref().context("restarting an external controller needs BENCH_EXTERNAL_RESTART")?;
                Ctl::External(restart_external(command, &e).await?)
            }
        };
        let deadline = Instant::now() + TIMEOUT;
        let end = loop {
            // A restarted controller answers only once it listens: an error is "not yet".
            let m = match ctl.metrics().await {
                Ok(m) => m.context("the restart is timed from the controller's metrics (BENCH_EXTERNAL_METRICS)")?,
                Err(_) => String::new(),
            };
            if bench::reconciled_and_idle(&m, f64::from(count)) {
                break Instant::now();
            }
            if Instant::now() > deadline {
                anyhow::bail!("startup: not all {count} CloneSets reconciled after {TIMEOUT:?}");
            }
            tokio::time::sleep(POLL).await;
        };
        let sent = self.apiserver_bytes_sent().await.ok().zip(sent_before).map(|(after, before)| after - before);
        let apiserver_cpu = apiserver_pid
            .and_then(|pid| proc_reading(pid).ok())
            .zip(apiserver_before)
            .map(|((_, _, after), (_, _, before))| after - before);
        let converged = w.sets.store.state().iter().all(|cs| observed(cs, 0, |s| converged(s, cs.spec.replicas.unwrap_or(1), false)));
        let _ = stop_sampling.send(());
        let apiserver_peak = match sampler {
            Some(task) => task.await?,
            None => None,
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        let m = ctl.metrics().await?.unwrap_or_default();
        let reqs = Snapshot::from_metrics(&m).requests;
        let (rss, hwm, cpu) = proc_reading(ctl.pid())?;
        let mut extra: BTreeMap<String, f64> = [
            ("writes_after_restart", reqs.writes()),
            ("reads_after_restart", reqs.reads),
            ("reconciles", bench::metric_sum(&m, "controller_runtime_reconcile_total")),
            ("all_observed", if converged { 1.0 } else { 0.0 }),
            ("peak_rss_mib", mib(hwm)),
            ("steady_rss_mib", mib(rss)),
            ("cpu_s", ticks_to_s(cpu)),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .into();
        extra.extend(bench::heap_extra(&m));
        extra.extend(apiserver_before.map(|(rss, _, _)| ("apiserver_rss_before_mib".to_string(), mib(rss))));
        // Its CPU until the controller was idle: mostly encoding the caches' lists.
        extra.extend(apiserver_cpu.map(|ticks| ("apiserver_cpu_s".to_string(), ticks_to_s(ticks))));
        extra.extend(apiserver_peak.map(|p| ("apiserver_peak_rss_mib".to_string(), mib(p))));
        // Everything the apiserver sent until the controller was idle: mostly the caches' lists.
        extra.extend(sent.map(|b| ("apiserver_sent_mib".to_string(), mib(b as u64))));
        Ok((end.duration_since(t0).as_secs_f64(), extra, ctl))
    }

    /// Memory and CPU at each (clonesets × pods) step in one namespace, then a restart of the
    /// operator with everything converged.
    pub async fn resources(&self, steps: &[(u32, u32)]) -> anyhow::Result<Vec<Row>> {
        let limit = self.knobs.resources_limit;
        let client = bench::client_label(limit.map(|l| (l.qps, l.burst)));
        let row = |scenario: &str, pods, clonesets, secs, per_pod, extra| Row {
            per_pod,
            extra,
            ..Row::operator_only(scenario, &client, pods, clonesets, secs)
        };
        let ns = TestNamespace::create("bench-mem").await?;
        let w = self.watched(&ns, TIMEOUT).await?;
        let op = self.start_operator(&ns.name, limit).await?;
        let mut rows = Vec::new();
        let mut made = 0u32;
        let mut prev = (Reading::take(op.pid(), &w)?, 0u32);
        for &(count, per) in steps {
            eprintln!("bench: resources {count} CloneSets x {per} pods");
            let before = snapshot(&op).await?;
            let t0 = Instant::now();
            let end =
                self.create_and_converge(&w, (made..count).map(|i| format!("cs-{i:03}")).collect(), per, json!({}), count * per).await?;
            made = made.max(count);
            let secs = end.duration_since(t0).as_secs_f64();
            tokio::time::sleep(Duration::from_secs(10)).await;
            let now = Reading::take(op.pid(), &w)?;
            let counts = snapshot(&op).await?.since(&before);
            let total = count * per;
            let new_pods = f64::from((total - prev.1).max(1));
            let mut extra = now.memory("steady_rss_mib");
            extra.insert("cpu_s".into(), ticks_to_s(now.cpu - prev.0.cpu));
            extra.insert("bytes_per_pod".into(), ((now.rss as f64 - prev.0.rss as f64) / new_pods).round());
            extra.insert("operator_429".into(), counts.throttled);
            rows.push(row("resources (create all)", total, count, secs, Some(counts.requests.per(new_pods)), extra));
            prev = (now, total);
        }
        // Startup: a fresh process over converged CloneSets.
        let (count, per) = *steps.last().unwrap_or(&(0, 0));
        let (startup_s, extra, op) = self.restart(&ns.name, Ctl::Ours(op), count, &w, limit, &[]).await?;
        rows.push(row("startup (restart)", count * per, count, startup_s, None, extra));
        drop(op);
        drop(w);
        self.delete_namespace(ns).await?;
        Ok(rows)
    }

    /// The large scenario (see the binary's documentation): `c` CloneSets of `p` pods, a rollout
    /// of one more large CloneSet with probes on idle ones, and a restart. Fairness and restart
    /// checks that fail are added to `failures`; the rows are pushed as each step ends.
    pub async fn large(&self, c: u32, p: u32, rows: &mut Vec<Row>, failures: &mut Vec<String>) -> anyhow::Result<()> {
        let big = self.knobs.large_rollout;
        // Each side's rollouts (ours and the raw baseline's, empty and among the idle) run this
        // many times and the rows give medians: a single baseline rollout took 19.8 s in one run
        // and 30.0 s in another of the same day, too noisy for a ratio judged against 1.1.
        let rollouts_each = self.knobs.large_rollouts;
        let probes = self.knobs.large_probes.min(c);
        let total = c * p;
        let client = self.knobs.external.as_ref().map_or_else(|| bench::client_label(None), |e| e.client.clone());
        let row = |scenario: String, pods, clonesets, secs, per_pod, extra| Row {
            per_pod,
            extra,
            controller: self.controller_label().into(),
            ..Row::operator_only(scenario, &client, pods, clonesets, secs)
        };
        // Waits scale with the pods: 20,000 take minutes to create on 2 cores, and Kruise's
        // manager at its 30 QPS needs 2,000-2,200 s to report them all ready (four writes and
        // more per pod), so allow 4 pods a second.
        let timeout = TIMEOUT.max(Duration::from_secs(u64::from(total + big) / 4));
        let ns = TestNamespace::create("bench-large").await?;
        let w = self.watched(&ns, timeout).await?;
        let ctl = self.controller(&ns.name, None).await?;

        // The yardstick for the rollout among the idle: the same rollouts of the same
        // CloneSet, by the same controller, before the idle pods exist.
        eprintln!("bench: large: one CloneSet of {big} pods, rolled out in place on the empty cluster");
        // Bytes per cached pod are counted from here: the operator holding no pod yet.
        let podless = Reading::take(ctl.pid(), &w)?;
        let conflicts_before_empty = self.apiserver_pod_conflicts().await.ok();
        let t0 = Instant::now();
        let end = self.create_and_converge(&w, vec!["big".into()], big, strategy("InPlaceIfPossible", "100%"), big).await?;
        let create_big_s = end.duration_since(t0).as_secs_f64();
        let mut empty_costs = Vec::new();
        for v in 2..rollouts_each + 2 {
            empty_costs.push(self.roll_out_measured(&w, big, v, ctl.pid()).await?);
        }
        let empty_rollouts: Vec<f64> = empty_costs.iter().map(|c| c.secs).collect();
        let first_idle_image = rollouts_each + 2;
        let empty_conflicts = self.conflicts_since(conflicts_before_empty).await;
        // And the raw baseline's, so the loaded control plane's share of the slowdown shows.
        let windows = vec!["100%".to_string(); rollouts_each as usize];
        let mut empty_baseline = Vec::new();
        if self.baselines() {
            eprintln!("bench: large: the raw baseline's {big} pods, scaled up and rolled in place on the empty cluster");
            let (_, rolls) = self.raw_baseline(big, "InPlaceIfPossible", &windows).await?;
            empty_baseline = rolls.iter().map(|r| r.secs).collect();
        }

        eprintln!("bench: large: {c} CloneSets x {p} pods");
        let start = Reading::take(ctl.pid(), &w)?;
        let before = ctl.snapshot().await?;
        let conflicts_before = self.apiserver_pod_conflicts().await.ok();
        let t0 = Instant::now();
        let spec = match &self.knobs.large_requests {
            Some((cpu, memory)) => json!({"template": {"spec": {"containers": [
                {"name": "main", "image": image(1), "resources": {"requests": {"cpu": cpu, "memory": memory}}},
            ]}}}),
            None => json!({}),
        };
        let end = self.create_and_converge(&w, (0..c).map(|i| format!("cs-{i:04}")).collect(), p, spec, total).await?;
        let secs = end.duration_since(t0).as_secs_f64();
        let busy = Reading::take(ctl.pid(), &w)?;
        let counts = since(ctl.snapshot().await?, &before);
        let create_conflicts = self.conflicts_since(conflicts_before).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let idle = Reading::take(ctl.pid(), &w)?;
        let mut extra = busy.usage_since(&start);
        extra.extend(idle.memory("steady_rss_mib"));
        extra.extend(bench::heap_extra(&ctl.metrics().await?.unwrap_or_default()));
        // Over every cached pod (the big CloneSet's too), from before the first was cached.
        extra.insert("bytes_per_pod".into(), ((idle.rss as f64 - podless.rss as f64) / f64::from((total + big).max(1))).round());
        extra.extend(counts.as_ref().map(|c| c.method_extra(f64::from(total))).unwrap_or_default());
        extra.extend(counts.as_ref().map(|c| ("operator_429".to_string(), c.throttled)));
        extra.extend(counts.as_ref().map(Snapshot::reconcile_extra).unwrap_or_default());
        extra.extend(create_conflicts.map(|n| ("apiserver_pod_conflicts".to_string(), n)));
        rows.push(row(format!("large: create {c}x{p}"), total, c, secs, counts.and_then(|c| c.per_pod(f64::from(total))), extra));
        eprintln!("{}", bench::table(rows));

        if ctl.metrics().await?.is_some() {
            for field in self.knobs.large_observe.iter().map(String::as_str) {
                eprintln!(
                    "bench: large: one {field} set on each of the {} pods, that the controller observes and need not act on",
                    total + big
                );
                let (observe_s, extra, wrote) = self.observe_only(&ctl, &w, field).await?;
                if wrote > 0.0 {
                    failures.push(format!(
                        "large: observe ({field}): the {} wrote {wrote} times for changes that ask for no write",
                        self.controller_label()
                    ));
                }
                rows.push(row(format!("large: observe {} pod changes ({field})", total + big), total + big, c + 1, observe_s, None, extra));
            }
        } else {
            eprintln!("bench: large: no observe step: it is judged from the controller's metrics (BENCH_EXTERNAL_METRICS is not set)");
        }

        eprintln!("bench: large: rolling out {big} pods in place with {probes} probes on idle CloneSets");
        let start = Reading::take(ctl.pid(), &w)?;
        let before = ctl.snapshot().await?;
        let conflicts_before = self.apiserver_pod_conflicts().await.ok();
        let t0 = Instant::now();
        let rollout = self.roll_out_measured(&w, big, first_idle_image, ctl.pid());
        let probe_runs = (0..probes).map(|k| {
            let name = format!("cs-{:04}", u64::from(k) * u64::from(c) / u64::from(probes.max(1)));
            let (api, sets) = (w.api.clone(), &w.sets);
            async move {
                tokio::time::sleep_until((t0 + PROBE_SPACING * (k + 1)).into()).await;
                let sent = Instant::now();
                let scale = Patch::Merge(json!({"spec": {"replicas": p + 1}}));
                let min_gen = generation(&api.patch(&name, &PatchParams::default(), &scale).await?);
                let pi = (p + 1) as i32;
                let end = sets
                    .wait_object(&name, "to report the new replica ready", move |cs| observed(cs, min_gen, |s| converged(s, pi, false)))
                    .await?;
                anyhow::Ok((name, end.duration_since(sent).as_secs_f64()))
            }
        });
        let (done, latencies) = tokio::join!(rollout, futures::future::try_join_all(probe_runs));
        let first = done?;
        let rollout_s = first.secs;
        let latencies = latencies?;
        let rolled = image(first_idle_image);
        w.pods.wait_count((total + big + probes) as usize, "ready", move |p| ready_with(p, &image(1)) || ready_with(p, &rolled)).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = Reading::take(ctl.pid(), &w)?;
        let counts = since(ctl.snapshot().await?, &before);
        let bound = bench::probe_bound_s(rollout_s);
        for (name, s) in latencies.iter().filter(|(_, s)| *s > bound) {
            failures.push(format!(
                "large: {name} took {s:.1}s to report a scale-up while {big} pods rolled out in {rollout_s:.1}s \
                 (bound {bound:.1}s: the larger of {}s and {} of the rollout)",
                bench::PROBE_LATENCY_FLOOR.as_secs(),
                bench::PROBE_ROLLOUT_FRACTION
            ));
        }
        let secs: Vec<f64> = latencies.iter().map(|(_, s)| *s).collect();
        let mut extra = after.usage_since(&start);
        // The same rollout again (no probes), each to a new image, for the median.
        let mut costs = vec![first];
        for v in first_idle_image + 1..first_idle_image + rollouts_each {
            eprintln!("bench: large: rolling out {big} pods in place again among the idle");
            costs.push(self.roll_out_measured(&w, big, v, ctl.pid()).await?);
        }
        let rollouts: Vec<f64> = costs.iter().map(|c| c.secs).collect();
        // Over the rollouts among the idle (the probes' pods too), and those on the
        // empty cluster with the big CloneSet's creation.
        extra.extend(self.conflicts_since(conflicts_before).await.map(|n| ("apiserver_pod_conflicts".to_string(), n)));
        extra.extend(empty_conflicts.map(|n| ("empty_apiserver_pod_conflicts".to_string(), n)));
        extra.insert("rollout_first_s".into(), bench::round2(rollout_s));
        extra.extend(spread("rollout", &rollouts));
        if let (Some(idle), Some(empty)) = (bench::median(&rollouts), bench::median(&empty_rollouts)) {
            extra.insert("empty_rollout_s".into(), bench::round2(empty));
            extra.insert("idle_over_empty".into(), bench::round2(idle / empty));
        }
        extra.extend(spread("empty_rollout", &empty_rollouts));
        // What a rollout cost kube-apiserver, whose CPU sets its pace on a small machine, and the
        // controller: the same on both sides means the idle pods made neither work harder.
        extra.extend(rollout_cpu_extra(&costs, &empty_costs));
        extra.extend(after.memory("rss_after_mib"));
        extra.extend(bench::heap_extra(&ctl.metrics().await?.unwrap_or_default()));
        extra.extend(counts.as_ref().map(|c| c.method_extra(f64::from(big))).unwrap_or_default());
        extra.extend(counts.as_ref().map(|c| ("operator_429".to_string(), c.throttled)));
        extra.extend(counts.as_ref().map(Snapshot::reconcile_extra).unwrap_or_default());
        extra.insert("create_big_s".into(), bench::round2(create_big_s));
        extra.insert("probes".into(), secs.len() as f64);
        extra.insert("probe_bound_s".into(), bench::round2(bound));
        if let Some(max) = secs.iter().copied().reduce(f64::max) {
            extra.insert("probe_max_s".into(), bench::round2(max));
            extra.insert("probe_median_s".into(), bench::round2(bench::median(&secs).unwrap_or(max)));
        }
        let mut rollout_row = row(
            format!("large: rollout {big} with {c} idle"),
            big,
            c + 1,
            bench::median(&rollouts).unwrap_or(rollout_s),
            counts.and_then(|c| c.per_pod(f64::from(big))),
            extra,
        );
        rollout_row.runs = rollouts_each;
        // The raw baseline's same scale-up and rollout, on the same loaded control plane (in a
        // namespace of its own, beside the idle pods): the row's ratio then says how much of
        // the rollout's time among the idle is the operator's and how much the apiserver's.
        if self.baselines() {
            eprintln!("bench: large: the raw baseline's {big} pods, scaled up and rolled in place among the idle");
            let (up, rolls) = self.raw_baseline(big, "InPlaceIfPossible", &windows).await?;
            let times: Vec<f64> = rolls.iter().map(|r| r.secs).collect();
            if let (Some(first), Some(median)) = (rolls.first(), bench::median(&times)) {
                rollout_row.add_baseline(median, first.extra());
                rollout_row.extra.extend(spread("baseline", &times));
                if let Some(empty) = bench::median(&empty_baseline) {
                    rollout_row.extra.insert("baseline_empty_s".into(), bench::round2(empty));
                    rollout_row.extra.insert("baseline_idle_over_empty".into(), bench::round2(median / empty));
                }
            }
            rollout_row.extra.extend(spread("baseline_empty", &empty_baseline));
            rollout_row.extra.insert("baseline_create_big_s".into(), bench::round2(up.secs));
        }
        rows.push(rollout_row);
        eprintln!("{}", bench::table(rows));

        let ctl = if matches!(ctl, Ctl::External(_)) && self.knobs.external_restart.is_none() {
            eprintln!("bench: large: no restart of the external controller (BENCH_EXTERNAL_RESTART is not set)");
            ctl
        } else {
            // Ours three times: with paged lists, with pods read as JSON, then as it starts by
            // default (streaming lists where the apiserver serves them, pods in protobuf), so the
            // cold starts are measured side by side.
            let restarts: &[(&str, &[&str])] = match ctl {
                Ctl::Ours(_) => &[
                    ("large: restart, paged lists", &["--streaming-lists=false"]),
                    ("large: restart, pods as JSON", &["--kube-api-content-type=application/json"]),
                    ("large: restart", &[]),
                ],
                Ctl::External(_) => &[("large: restart", &[])],
            };
            let mut ctl = ctl;
            for (scenario, flags) in restarts {
                eprintln!("bench: {scenario} over {} CloneSets", c + 1);
                let (startup_s, extra, next) = self.restart(&ns.name, ctl, c + 1, &w, None, flags).await?;
                ctl = next;
                if extra["writes_after_restart"] != 0.0 || extra["all_observed"] != 1.0 {
                    failures.push(format!(
                        "{scenario}: the {} made {} writes (expected none) and found every CloneSet converged: {}",
                        self.controller_label(),
                        extra["writes_after_restart"],
                        extra["all_observed"] == 1.0
                    ));
                }
                rows.push(row(scenario.to_string(), total + big + probes, c + 1, startup_s, None, extra));
            }
            ctl
        };
        drop(ctl);
        drop(w);
        self.leave_namespace(ns).await
    }

    /// Gives every pod of the namespace one change that no controller acts on (the bench's own
    /// [`OBSERVED`] as an annotation or a label, by `field`; at most the baseline's concurrency
    /// of patches in flight), and waits until the bench has seen them all and the controller
    /// has gone idle (queue empty, no worker busy, no reconcile for [`SETTLED`]). What holding a
    /// large cluster costs apart from the controller's own writes: the seconds, the controller's
    /// CPU per 1,000 of these pod events and its reconciles (`extra`), and how many writes it
    /// made to pods, CloneSets and events meanwhile (which should be none; 0 when its metrics do
    /// not name resources).
    async fn observe_only(&self, ctl: &Ctl, w: &Watched, field: &str) -> anyhow::Result<(f64, BTreeMap<String, f64>, f64)> {
        let names: Vec<String> = w.pods.store.state().iter().map(|p| p.name_any()).collect();
        let total = names.len();
        let pods: Api<Pod> = Api::namespaced(w.api.clone().into_client(), &w.namespace);
        let start = Reading::take(ctl.pid(), w)?;
        let before = ctl.snapshot().await?;
        let t0 = Instant::now();
        let touch = Patch::Merge(json!({"metadata": {format!("{field}s"): {OBSERVED: "1"}}}));
        let patches = names.iter().map(|name| {
            let (pods, touch) = (&pods, &touch);
            async move { pods.patch(name, &PatchParams::default(), touch).await }
        });
        futures::stream::iter(patches).buffer_unordered(self.knobs.concurrency).try_for_each(|_| async { Ok(()) }).await?;
        let seen: fn(&Pod) -> bool =
            if field == "label" { |p: &Pod| p.labels().contains_key(OBSERVED) } else { |p: &Pod| p.annotations().contains_key(OBSERVED) };
        w.pods.wait_count(total, "changed", seen).await?;
        let end = self.until_settled(ctl).await?;
        let after = Reading::take(ctl.pid(), w)?;
        let counts = since(ctl.snapshot().await?, &before);
        let mut extra = after.usage_since(&start);
        extra.extend(counts.as_ref().map(Snapshot::reconcile_extra).unwrap_or_default());
        extra.extend(counts.as_ref().map(|c| c.method_extra(total as f64)).unwrap_or_default());
        let r = counts.filter(|c| c.per_resource).map(|c| c.requests).unwrap_or_default();
        Ok((end.duration_since(t0).as_secs_f64(), extra, r.pod_writes() + r.cs_status + r.events))
    }

    /// Waits until the controller's CloneSet queue is empty, no worker is busy and its reconcile
    /// count has not moved for [`SETTLED`]; returns when that quiet began.
    async fn until_settled(&self, ctl: &Ctl) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + TIMEOUT;
        let mut quiet: Option<(f64, Instant)> = None;
        loop {
            let m = ctl.metrics().await?.context("settling is judged from the controller's metrics")?;
            let reconciles = Snapshot::from_metrics(&m).reconciles;
            quiet = match quiet {
                Some((n, since)) if n == reconciles && bench::reconciled_and_idle(&m, 0.0) => Some((n, since)),
                _ => bench::reconciled_and_idle(&m, 0.0).then(|| (reconciles, Instant::now())),
            };
            if let Some((_, since)) = quiet.filter(|(_, since)| since.elapsed() >= SETTLED) {
                return Ok(since);
            }
            anyhow::ensure!(Instant::now() < deadline, "the controller did not settle within {TIMEOUT:?}");
            tokio::time::sleep(POLL * 10).await;
        }
    }

    /// Deletes a large scenario's namespace, unless the cluster goes away anyway (deleting
    /// 20,000 pods takes long, and the control plane and its etcd are removed at the end) or
    /// `BENCH_KEEP_NAMESPACE=1` keeps it for experiments on the loaded cluster.
    pub(crate) async fn leave_namespace(&self, ns: TestNamespace) -> anyhow::Result<()> {
        if self.knobs.keep_namespace {
            eprintln!("bench: leaving namespace {} and its pods in place (BENCH_KEEP_NAMESPACE)", ns.name);
        } else if !self.knobs.cluster_is_temporary() {
            return self.delete_namespace(ns).await;
        }
        std::mem::forget(ns);
        Ok(())
    }
}

/// Rolls the large scenario's CloneSet `big` (of `pods` pods) in place to `image(version)`;
/// the seconds until it reports the rollout done.
async fn roll_out(w: &Watched, pods: u32, version: u32) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let patch = Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image(version)}]}}}}));
    let min_gen = generation(&w.api.patch("big", &PatchParams::default(), &patch).await?);
    let pods = pods as i32;
    let end =
        w.sets.wait_object("big", "to report the rollout done", move |cs| observed(cs, min_gen, |s| converged(s, pods, true))).await?;
    Ok(end.duration_since(t0).as_secs_f64())
}

impl Bench {
    /// One rollout of the big CloneSet ([`roll_out`]), with kube-apiserver's CPU seconds over it
    /// when its pid is known (the bench's own control plane) and the controller's.
    async fn roll_out_measured(&self, w: &Watched, pods: u32, version: u32, controller_pid: u32) -> anyhow::Result<RolloutCost> {
        // The pid is read once, as the restart's reading does: both ticks are of one process.
        let load = LoadMeter::start(self.apiserver_pid(), Some(controller_pid));
        let secs = roll_out(w, pods, version).await?;
        let (apiserver_cpu_s, controller_cpu_s) = load.cpu_s();
        Ok(RolloutCost { secs, apiserver_cpu_s, controller_cpu_s })
    }
}

/// One timed rollout: its wall-clock seconds and the CPU seconds kube-apiserver and the
/// controller spent meanwhile (none where the process could not be read).
struct RolloutCost {
    secs: f64,
    apiserver_cpu_s: Option<f64>,
    controller_cpu_s: Option<f64>,
}

/// The medians of the CPU each side's rollouts cost kube-apiserver and the controller, as
/// `[empty_]apiserver_cpu_s_per_rollout` and `[empty_]cpu_s_per_rollout`.
fn rollout_cpu_extra(among_idle: &[RolloutCost], on_empty: &[RolloutCost]) -> Vec<(String, f64)> {
    let of = |costs: &[RolloutCost], cpu: fn(&RolloutCost) -> Option<f64>| costs.iter().filter_map(cpu).collect::<Vec<f64>>();
    let apiserver = |c: &RolloutCost| c.apiserver_cpu_s;
    let controller = |c: &RolloutCost| c.controller_cpu_s;
    [
        median_extra("apiserver_cpu_s_per_rollout", &of(among_idle, apiserver)),
        median_extra("empty_apiserver_cpu_s_per_rollout", &of(on_empty, apiserver)),
        median_extra("cpu_s_per_rollout", &of(among_idle, controller)),
        median_extra("empty_cpu_s_per_rollout", &of(on_empty, controller)),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `key` and the median of `values`, rounded (none when empty).
fn median_extra(key: &str, values: &[f64]) -> Option<(String, f64)> {
    bench::median(values).map(|m| (key.to_string(), bench::round2(m)))
}

/// `<what>_min_s` and `<what>_max_s` of `times` (none when empty).
fn spread(what: &str, times: &[f64]) -> Vec<(String, f64)> {
    let min = times.iter().copied().reduce(f64::min);
    let max = times.iter().copied().reduce(f64::max);
    [("min", min), ("max", max)].into_iter().filter_map(|(k, v)| Some((format!("{what}_{k}_s"), bench::round2(v?)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_of_the_rollouts_is_each_sides_median_and_absent_when_unread() {
        let cost = |apiserver, controller| RolloutCost { secs: 20.0, apiserver_cpu_s: apiserver, controller_cpu_s: controller };
        let among_idle = [cost(Some(35.404), Some(1.2)), cost(Some(40.9), Some(0.9)), cost(Some(38.1), Some(1.0))];
        let on_empty = [cost(Some(30.0), Some(0.8)), cost(Some(31.0), Some(0.7))];
        let got: BTreeMap<String, f64> = rollout_cpu_extra(&among_idle, &on_empty).into_iter().collect();
        let want = [
            ("apiserver_cpu_s_per_rollout", 38.1),
            ("empty_apiserver_cpu_s_per_rollout", 30.5),
            ("cpu_s_per_rollout", 1.0),
            ("empty_cpu_s_per_rollout", 0.75),
        ];
        assert_eq!(got, want.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        // Another cluster's apiserver is not read: its fields are left out, the controller's stay.
        let got = rollout_cpu_extra(&[cost(None, Some(1.0))], &[cost(None, Some(0.5))]);
        assert_eq!(got, vec![("cpu_s_per_rollout".to_string(), 1.0), ("empty_cpu_s_per_rollout".to_string(), 0.5)]);
    }

    #[test]
    fn a_spread_is_the_least_and_the_most_rounded() {
        let got: BTreeMap<String, f64> = spread("rollout", &[30.004, 28.37, 32.781]).into_iter().collect();
        assert_eq!(got, BTreeMap::from([("rollout_min_s".into(), 28.37), ("rollout_max_s".into(), 32.78)]));
        assert!(spread("baseline", &[]).is_empty());
    }
}
