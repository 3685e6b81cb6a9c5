//! The soak (`BENCH_SOAK`): hours of churn over many CloneSets under one controller, sampled
//! once a minute, to show that nothing it holds grows with time: RSS, file descriptors, sockets,
//! threads, async tasks and its queue. What each minute changes is `e2e::bench::soak_tick`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use e2e::bench::{self, Row, SOAK_SCALE_STEP, soak_tick};
use e2e::cluster;
use e2e::testenv::TestNamespace;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::flows::{Bench, Ctl, converged, generation, observed};
use crate::{TIMEOUT, image, mib, proc_reading, strategy, ticks_to_s};

const MINUTE: Duration = Duration::from_secs(60);
/// The RSS slope the soak may show after its first relist (the target).
const MAX_RSS_SLOPE_MIB_PER_HOUR: f64 = 1.0;

/// The controller at one minute's start, before that minute's changes.
#[derive(Clone, Debug)]
struct Sample {
    /// Seconds since the soak's start.
    t: f64,
    rss: u64,
    cpu: u64,
    fds: usize,
    sockets: usize,
    threads: u64,
    /// `tokio_alive_tasks` (ours only).
    tasks: Option<f64>,
    /// `workqueue_depth`, summed over the CloneSet controller's queues.
    queue: Option<f64>,
    /// `heap_in_use_bytes` and `heap_free_bytes` (ours only): a leak grows the first,
    /// fragmentation only RSS.
    heap_in_use: Option<f64>,
    heap_free: Option<f64>,
    pod_events: u64,
    apiserver_rss: Option<u64>,
}

impl Sample {
    const CSV_HEADER: &str =
        "t_s,rss_mib,cpu_s,fds,sockets,threads,tasks,queue_depth,pod_events,apiserver_rss_mib,heap_in_use_mib,heap_free_mib";

    fn csv(&self) -> String {
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
        format!(
            "{:.0},{},{},{},{},{},{},{},{},{},{},{}",
            self.t,
            mib(self.rss),
            ticks_to_s(self.cpu),
            self.fds,
            self.sockets,
            self.threads,
            opt(self.tasks),
            opt(self.queue),
            self.pod_events,
            opt(self.apiserver_rss.map(mib)),
            opt(self.heap_in_use.map(|b| mib(b as u64))),
            opt(self.heap_free.map(|b| mib(b as u64))),
        )
    }
}

/// (open file descriptors, of them sockets, threads) of `pid`.
fn descriptors(pid: u32) -> anyhow::Result<(usize, usize, u64)> {
    let mut fds = 0;
    let mut sockets = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        fds += 1;
        if std::fs::read_link(entry?.path()).is_ok_and(|target| target.to_string_lossy().starts_with("socket:")) {
            sockets += 1;
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let threads = status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    Ok((fds, sockets, threads))
}

/// The slope per hour of `value` over `samples` (their `t` in seconds).
fn per_hour(samples: &[Sample], value: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let points: Vec<(f64, f64)> = samples.iter().filter_map(|s| Some((s.t / 3600.0, value(s)?))).collect();
    bench::slope(&points).map(|v| (v * 100.0).round() / 100.0)
}

impl Bench {
    async fn soak_sample(&self, ctl: &Ctl, t0: Instant, pod_events: u64) -> anyhow::Result<Sample> {
        let pid = ctl.pid();
        let (rss, _, cpu) = proc_reading(pid)?;
        let (fds, sockets, threads) = descriptors(pid)?;
        let metrics = ctl.metrics().await.ok().flatten();
        let gauge = |name: &str| metrics.as_deref().and_then(|m| bench::gauge(m, name));
        Ok(Sample {
            t: t0.elapsed().as_secs_f64(),
            rss,
            cpu,
            fds,
            sockets,
            threads,
            tasks: gauge("tokio_alive_tasks"),
            queue: gauge("workqueue_depth"),
            heap_in_use: gauge("heap_in_use_bytes"),
            heap_free: gauge("heap_free_bytes"),
            pod_events,
            apiserver_rss: self.apiserver_pid().and_then(|pid| proc_reading(pid).ok()).map(|(rss, _, _)| rss),
        })
    }

    /// Stops kube-apiserver and starts it again with the same command line: every watch breaks,
    /// and the resource versions they resume from are older than the new apiserver's watch
    /// cache, so every watcher relists. Returns how long the apiserver was away.
    async fn restart_apiserver(&self) -> anyhow::Result<Duration> {
        let t = Instant::now();
        let dir = self.state_dir.clone();
        let kubeconfig = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let state = cluster::read_state(&dir)?.with_context(|| format!("no cluster recorded in {}", dir.display()))?;
            cluster::stop_component(&dir, "kube-apiserver")?;
            cluster::start_component(&dir, "kube-apiserver")?;
            Ok(state.kubeconfig)
        })
        .await??;
        cluster::wait_ready(&kubeconfig, Duration::from_secs(180)).await?;
        Ok(t.elapsed())
    }

    /// The soak (see the binary's documentation): `c` CloneSets of `p` pods, `BENCH_SOAK_MINUTES`
    /// of churn. A minute whose changes do not converge ends the run with an error; an RSS
    /// slope above [`MAX_RSS_SLOPE_MIB_PER_HOUR`] after the first relist, over an hour or more, is
    /// added to `failures`.
    pub async fn soak(&self, c: u32, p: u32, rows: &mut Vec<Row>, failures: &mut Vec<String>) -> anyhow::Result<()> {
        let (minutes, relist_every) = (self.knobs.soak_minutes, self.knobs.soak_relist_minutes);
        let client = self.knobs.external.as_ref().map_or_else(|| bench::client_label(None), |e| e.client.clone());
        let timeout = TIMEOUT.max(Duration::from_secs(u64::from(c * p) / 10));
        let ns = TestNamespace::create("bench-soak").await?;
        let w = self.watched(&ns, timeout).await?;
        let ctl = self.controller(&ns.name, None).await?;
        let name = |i: u32| format!("cs-{i:04}");

        eprintln!("bench: soak: {c} CloneSets x {p} pods");
        let t_create = Instant::now();
        self.create_and_converge(&w, (0..c).map(name).collect(), p, strategy("InPlaceIfPossible", "50%"), c * p).await?;
        eprintln!("bench: soak: created in {:.0}s; {minutes} minutes of churn", t_create.elapsed().as_secs_f64());
        let mut replicas = vec![p; c as usize];
        let mut version = vec![1u32; c as usize];
        let (mut relists, mut outages, mut late, mut slowest) = (0u32, Vec::new(), 0u32, 0f64);
        let mut first_relist: Option<f64> = None;
        let mut samples = Vec::new();
        let t0 = Instant::now();
        for k in 0..minutes {
            tokio::time::sleep_until((t0 + MINUTE * k).into()).await;
            samples.push(self.soak_sample(&ctl, t0, w.pods.events()).await?);
            let tick = soak_tick(k, c, relist_every);
            let started = Instant::now();
            if tick.relist {
                let away = self.restart_apiserver().await.context("soak: restarting kube-apiserver")?;
                first_relist.get_or_insert(t0.elapsed().as_secs_f64());
                relists += 1;
                outages.push(away.as_secs_f64());
                eprintln!("bench: soak: minute {k}: kube-apiserver restarted ({away:.1?} away)");
            }
            // One merge patch per CloneSet, whatever this minute changes in it.
            let mut changes: BTreeMap<u32, serde_json::Value> = BTreeMap::new();
            for (set, to) in [(&tick.scale_down, p), (&tick.scale_up, p + SOAK_SCALE_STEP)] {
                for &i in set {
                    replicas[i as usize] = to;
                    changes.insert(i, json!({"spec": {"replicas": to}}));
                }
            }
            let r = tick.rollout as usize;
            version[r] = 3 - version[r];
            let entry = changes.entry(tick.rollout).or_insert_with(|| json!({"spec": {}}));
            entry["spec"]["template"] = json!({"spec": {"containers": [{"name": "main", "image": image(version[r])}]}});
            let patches = changes.into_iter().map(|(i, patch)| {
                let api = w.api.clone();
                async move {
                    let cs = api.patch(&name(i), &PatchParams::default(), &Patch::Merge(patch)).await?;
                    anyhow::Ok((i, generation(&cs)))
                }
            });
            let patched: Vec<(u32, i64)> = futures::stream::iter(patches).buffer_unordered(16).try_collect().await?;
            let waits = patched.into_iter().map(|(i, min_gen)| {
                let (want, sets, cs_name) = (replicas[i as usize] as i32, &w.sets, name(i));
                async move { sets.wait_object(&cs_name, "to converge", move |cs| observed(cs, min_gen, |s| converged(s, want, true))).await }
            });
            futures::future::try_join_all(waits).await.with_context(|| format!("soak: minute {k}'s changes did not converge"))?;
            let took = started.elapsed().as_secs_f64();
            slowest = slowest.max(took);
            if took > MINUTE.as_secs_f64() {
                late += 1;
            }
        }
        tokio::time::sleep_until((t0 + MINUTE * minutes).into()).await;
        samples.push(self.soak_sample(&ctl, t0, w.pods.events()).await?);

        let csv = self.knobs.out.with_file_name("soak-samples.csv");
        let mut text = format!("{}\n", Sample::CSV_HEADER);
        for s in &samples {
            let _ = writeln!(text, "{}", s.csv());
        }
        if let Some(dir) = csv.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&csv, text)?;
        eprintln!("bench: soak: {} samples in {}", samples.len(), csv.display());

        // Slopes after the first relist, or after the first ten minutes when there is none.
        let from = first_relist.unwrap_or(600.0);
        let settled: Vec<Sample> = samples.iter().filter(|s| s.t > from).cloned().collect();
        let (first, last) = (&samples[0], &samples[samples.len() - 1]);
        let range = |f: fn(&Sample) -> f64| {
            let v = samples.iter().map(f);
            (v.clone().fold(f64::INFINITY, f64::min), v.fold(f64::NEG_INFINITY, f64::max))
        };
        let mut extra: BTreeMap<String, f64> = BTreeMap::new();
        let mut put = |k: &str, v: Option<f64>| {
            if let Some(v) = v {
                extra.insert(k.to_string(), v);
            }
        };
        let rss_slope = per_hour(&settled, |s| Some(mib(s.rss)));
        put("rss_slope_mib_per_h", rss_slope);
        put("rss_start_mib", Some(mib(first.rss)));
        put("rss_end_mib", Some(mib(last.rss)));
        put("rss_max_mib", Some(range(|s| mib(s.rss)).1));
        put("heap_in_use_slope_mib_per_h", per_hour(&settled, |s| s.heap_in_use.map(|b| mib(b as u64))));
        put("heap_in_use_end_mib", last.heap_in_use.map(|b| mib(b as u64)));
        put("heap_free_end_mib", last.heap_free.map(|b| mib(b as u64)));
        put("tasks_slope_per_h", per_hour(&settled, |s| s.tasks));
        put("tasks_start", first.tasks);
        put("tasks_end", last.tasks);
        put("fds_slope_per_h", per_hour(&settled, |s| Some(s.fds as f64)));
        put("fds_max", Some(range(|s| s.fds as f64).1));
        put("sockets_min", Some(range(|s| s.sockets as f64).0));
        put("sockets_max", Some(range(|s| s.sockets as f64).1));
        put("threads_max", Some(range(|s| s.threads as f64).1));
        put("queue_depth_max", samples.iter().filter_map(|s| s.queue).reduce(f64::max));
        put("apiserver_rss_end_mib", last.apiserver_rss.map(mib));
        let events = last.pod_events.saturating_sub(first.pod_events);
        let cpu_s = ticks_to_s(last.cpu.saturating_sub(first.cpu));
        put("cpu_s", Some(cpu_s));
        put("pod_events", Some(events as f64));
        put("cpu_s_per_1k_pod_events", (events > 0).then(|| (cpu_s / (events as f64 / 1000.0) * 1000.0).round() / 1000.0));
        put("relists", Some(f64::from(relists)));
        put("apiserver_away_max_s", outages.iter().copied().reduce(f64::max).map(bench::round2));
        put("late_minutes", Some(f64::from(late)));
        put("slowest_minute_s", Some(bench::round2(slowest)));
        put("slopes_from_s", Some(from.round()));
        // Judged over an hour or more: over minutes, a few hundred KiB of noise is a steep slope.
        let span_h = settled.last().zip(settled.first()).map_or(0.0, |(l, f)| (l.t - f.t) / 3600.0);
        if let Some(slope) = rss_slope.filter(|s| *s > MAX_RSS_SLOPE_MIB_PER_HOUR && span_h >= 1.0) {
            failures.push(format!(
                "soak: RSS grew {slope} MiB per hour after {from:.0}s (at most {MAX_RSS_SLOPE_MIB_PER_HOUR}); see {}",
                csv.display()
            ));
        }
        rows.push(Row {
            extra,
            controller: self.controller_label().into(),
            ..Row::operator_only(format!("soak: {minutes} min of churn over {c}x{p}"), &client, c * p, c, last.t)
        });
        drop(ctl);
        drop(w);
        self.leave_namespace(ns).await
    }
}
