//! `make bench`: the operator at scale on the project's own local control plane, next to a plain
//! client doing the same pod writes. Prints one table and writes the same figures as JSON (see
//! `e2e::bench::Report`); every row names the client-side rate limit it ran with (`client`:
//! `none` or `30/50`) and whose controller it measured (`controller`: `operator` or `external`).
//!
//! Scenarios, in this order, each skipped when its knob is empty:
//!
//! * `BENCH_DECISIONS` (default `1000,3000,10000,30000,100000`): one pass's pure decisions timed over
//!   one CloneSet of each pod count, with no cluster (see `decisions.rs`); a decision growing
//!   faster than n log n fails the run. With no other scenario the bench starts no cluster.
//! * `BENCH_SIZES` (default `100x3,1000x1`: pods × repetitions): the scale-up 0 → N and one
//!   rollout per window of `BENCH_WINDOWS` (default `100%,20%`: maxUnavailable) for each of
//!   `BENCH_TYPES` (default `ReCreate,InPlaceIfPossible`), the operator at its defaults (no
//!   client-side limit), against the **raw baseline**: a plain client with no client-side limit
//!   and at most `BENCH_BASELINE_CONCURRENCY` (default 16) requests in flight, making the same
//!   pod writes as the operator, pod by pod (see `baseline.rs`).
//! * `BENCH_SCALE_UP_SIZES` (default `5000x1`): the scale-up alone, the same way.
//! * `BENCH_LIMITED_SIZES` (default `100x1`): the flow of `BENCH_SIZES` with operator and
//!   baseline both at Kruise's `--rest-config-qps=30 --rest-config-burst=50` (the baseline doing,
//!   in maxUnavailable batches, as many pod writes per pod as the operator made).
//! * `BENCH_RESOURCES` (default `10x50,50x50`: CloneSets × pods each, in that order in one
//!   namespace): memory and CPU, then a restart of the operator over the last step (startup).
//!   The operator runs at its defaults, or with a bucket of `BENCH_RESOURCES_QPS` (default
//!   empty) and twice that burst.
//! * `BENCH_FAIRNESS` (default `1000`: pods): another client's request latency (p50, p99, max)
//!   while the operator, running as the chart's ServiceAccount, rolls one CloneSet of that many
//!   pods in place, first in APF's `workload-low` and then in the priority level the chart
//!   installs for it (see `fairness.rs`); one row each.
//! * `BENCH_ONE_SET` (default empty: skipped; e.g. `1000,3000,10000`): one CloneSet of each
//!   size scaled up, rolled in place and recreating through the partitions of
//!   `BENCH_ONE_SET_STEPS` (default `80%,60%,40%,20%,0%`) at maxUnavailable
//!   `BENCH_ONE_SET_WINDOW` (default `20%`), then scaled to half with pods named for deletion,
//!   against the raw baseline (see `one_set.rs`).
//! * `BENCH_REAL_NODE` (default empty: skipped; e.g. `20`): that many pods on a real node
//!   (the bench's cluster starts one; needs root) rolled in place once per maxUnavailable of
//!   `BENCH_REAL_NODE_WINDOWS` (default `1,25%`), the time split into the kubelet's and the
//!   operator's (see `real_node.rs`).
//! * `BENCH_LARGE` (default empty: skipped; e.g. `500x40` = 500 CloneSets × 40 pods): one
//!   operator at its defaults over C×P pods in one namespace. First one CloneSet of
//!   `BENCH_LARGE_ROLLOUT` (default 1000) pods, created and rolled in place `BENCH_LARGE_ROLLOUTS`
//!   (default 3) times on the empty cluster (the rollout row's `empty_rollout_s`, their median, and
//!   `idle_over_empty`, its median among the idle over that), and the raw baseline's scale-up and
//!   as many rollouts of as many pods there too (`baseline_empty_s`, `baseline_idle_over_empty`).
//!   Then the C×P: create all (time, steady and peak RSS, bytes per cached pod: RSS growth since
//!   before the first CloneSet over all pods, CPU seconds per 1,000 pod events); then one
//!   annotation of the bench's own patched on every pod, then one label (which of the two run:
//!   `BENCH_LARGE_OBSERVE`, default `annotation,label`, empty for neither; each writes every pod
//!   once). `BENCH_LARGE_REQUESTS=<cpu>,<memory>` (default empty: none) gives the C×P pods'
//!   container those requests, which a kubelet then reports in each pod's status. Each reports
//!   the controller's CPU per 1,000 of these
//!   events and its reconciles, each step a row: they ask for no write, and a write to pods,
//!   CloneSets or events meanwhile fails the run; the operator reconciles for the label, not
//!   for the annotation, which no decision reads. Then the first CloneSet rolled in place
//!   again at maxUnavailable 100% while
//!   `BENCH_LARGE_PROBES` (default 20) idle CloneSets are each scaled P → P+1, one a second: the
//!   probes' latency must stay within `e2e::bench::probe_bound_s` (the larger of 30 s and half
//!   the rollout) or the run fails, and the other rollouts without probes (the row's time is the
//!   median of them all; `rollout_first_s`, `rollout_min_s`, `rollout_max_s`; kube-apiserver's
//!   CPU per rollout, `apiserver_cpu_s_per_rollout` and `empty_apiserver_cpu_s_per_rollout`, and
//!   the controller's, `cpu_s_per_rollout` and `empty_cpu_s_per_rollout`); then the raw
//!   baseline's scale-up and as many in-place rollouts of as many pods in a namespace of its own
//!   among the idle ones (the rollout row's `base(s)` is their median, and its ratio;
//!   `baseline_min_s`, `baseline_max_s`, `baseline_create_big_s`), unless the controller is
//!   external without `BENCH_EXTERNAL_BASELINE=1`; then a restart (time to observe every CloneSet, and zero
//!   writes, or the run fails). Runs last; its namespace is left to the cluster's shutdown.
//! * `BENCH_SOAK` (default empty: skipped; e.g. `100x40`): C CloneSets × P pods under one
//!   controller for `BENCH_SOAK_MINUTES` (default 120) of churn, one change set a minute (see
//!   `e2e::bench::soak_tick`): a tenth of the CloneSets scaled up by 2, the tenth scaled up five
//!   minutes earlier back down, one CloneSet's image flipped in place, and every
//!   `BENCH_SOAK_RELIST_MINUTES` (default 30; 0 = never) a kube-apiserver restart so every
//!   watch relists. Each minute's changes must converge; the controller's RSS, file
//!   descriptors, sockets, threads, async tasks and queue depth are sampled at each minute's
//!   start, written to `soak-samples.csv` beside `BENCH_OUT`, and their slopes after the first
//!   relist reported; an RSS slope above 1 MiB per hour (over an hour or more) fails the run.
//!
//! Timed rows record the controller's and the baseline's 429 responses (`operator_429`,
//! `baseline_429`; the table's `429 op/bs` column) and the controller's RSS 15 s after its last
//! rollout (`rss_after_mib`; `peak_rss_mib` is VmHWM).
//!
//! Where: the bench starts its own control plane in `BENCH_CLUSTER_DIR` (default
//! `target/bench-cluster`) and stops it at the end, also after a failure or Ctrl-C, unless
//! `BENCH_KEEP_CLUSTER=1` (`BENCH_KEEP_NAMESPACE=1` also keeps the large scenario's and the
//! soak's namespace and pods). The simulated kubelet gets 3 nodes of room for 4,000 pods when
//! that holds the largest scenario and a quarter more, otherwise as many nodes of 1,000 as it
//! needs (`BENCH_PODS_PER_NODE=<n>` sets the room per node). kube-scheduler binds at most 50
//! pods a second (its client's default QPS, as in a default cluster), which bounds every
//! scale-up, the baseline's too; `BENCH_SCHEDULER_QPS=<n>` raises it (burst 2n).
//! `BENCH_APISERVER_PROFILING=1` starts kube-apiserver with `--profiling=true`, so its CPU can be
//! profiled during a run (`kubectl get --raw '/debug/pprof/profile?seconds=25'`). `BENCH_KUBECONFIG=<file>` uses that cluster instead (never started or
//! stopped).
//!
//! Another controller: `BENCH_EXTERNAL_PID=<pid>` measures a CloneSet controller that is already
//! running with that pid and reconciles CloneSets in every namespace (CRD installed by whoever
//! started it; this bench installs nothing and starts no operator). The `BENCH_SIZES`,
//! `BENCH_SCALE_UP_SIZES` and `BENCH_LARGE` scenarios run, without baselines unless
//! `BENCH_EXTERNAL_BASELINE=1`; the large scenario's restart runs only with
//! `BENCH_EXTERNAL_RESTART=<shell command>`, which must stop the controller, start it again in
//! the background and print the new pid as its last line (the restart is timed from the
//! command's start to the controller's CloneSet queue going idle, from its metrics);
//! its RSS is read from /proc/<pid>, its request counts from `BENCH_EXTERNAL_METRICS` (optional,
//! `http://host:port/metrics`; client-go's metric has no resource label, so its writes are
//! given per method: `writes_post_per_pod`, …). Its rows name its client-side limit as
//! `BENCH_EXTERNAL_CLIENT` says (default `?`; Kruise's manager defaults to `30/50`), the
//! baseline's being none. Run one controller per cluster at a time: an external one reconciles
//! the bench's CloneSets in every namespace, and our operator stands by while Kruise's manager
//! holds its Lease (`--kruise-manager-lease`).
//!
//! Output: `BENCH_OUT` (default `target/bench/results.json`), written also when a scenario
//! failed (with the rows measured so far). `E2E_OPERATOR_LOG` sets the operator's RUST_LOG
//! (default `info`); its logs are in `target/e2e-logs/`.

mod baseline;
mod cache;
mod decisions;
mod fairness;
mod flows;
mod one_set;
mod real_node;
mod scale;
mod soak;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use cloneset_operator::client::RateLimit;
use e2e::bench::{self, Report, Requests, Row, mib};
use e2e::cluster::{self, UpOptions};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::flows::{BasePhase, Bench, Phase};

/// Kruise's client-side limit, for the `BENCH_LIMITED_SIZES` rows.
const LIMIT: RateLimit = RateLimit { qps: 30.0, burst: 50 };
/// The longest any single wait may take (the large scenario scales it with its pod count).
const TIMEOUT: Duration = Duration::from_secs(900);
const POLL: Duration = Duration::from_millis(20);
/// Simulated nodes of the default scenarios: pods are spread over them; the scheduler's work per
/// pod it places grows with their number.
const SIM_NODES: u32 = 3;
/// Room per node in those default scenarios (3 × 4,000, as their reference results were taken).
const SIM_DEFAULT_PODS_PER_NODE: u32 = 4000;
/// Room per node above that (the large scenario, a large soak): kube-scheduler's cache finds a
/// pod in its node's list by a linear scan on every update of it, so 7,000 pods on each of 3
/// nodes cost it 0.8 ms per pod event at 21,000 pods against 0.24 ms on the empty cluster (one
/// run, 2026-11-28). Real nodes hold at most 110 pods by default; 1,000 keeps the node count
/// (leases, node status) small while each list stays short.
const SIM_PODS_PER_NODE_AT_SCALE: u32 = 1000;

/// Everything the environment can set (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
struct Knobs {
    /// `BENCH_DECISIONS`: the pod counts one pass's decisions are timed at, ascending.
    decisions: Vec<u32>,
    sizes: Vec<(u32, u32)>,
    scale_up_sizes: Vec<(u32, u32)>,
    limited_sizes: Vec<(u32, u32)>,
    windows: Vec<String>,
    types: Vec<String>,
    resources: Vec<(u32, u32)>,
    resources_limit: Option<RateLimit>,
    concurrency: usize,
    /// `BENCH_ONE_SET`: the pod counts of the one-CloneSet scenario, its partition steps
    /// (`BENCH_ONE_SET_STEPS`) and maxUnavailable (`BENCH_ONE_SET_WINDOW`).
    one_set: Vec<u32>,
    one_set_steps: Vec<String>,
    one_set_window: String,
    /// `BENCH_REAL_NODE`: pods of the in-place rollout on a real node, and its maxUnavailable
    /// values (`BENCH_REAL_NODE_WINDOWS`).
    real_node: Option<u32>,
    real_node_windows: Vec<String>,
    /// `BENCH_FAIRNESS`: pods of the fairness scenario's CloneSet.
    fairness: Option<u32>,
    large: Option<(u32, u32)>,
    large_rollout: u32,
    large_probes: u32,
    /// `BENCH_LARGE_ROLLOUTS`: how many times each side of the rollout comparison runs.
    large_rollouts: u32,
    /// `BENCH_LARGE_OBSERVE`: which observe steps run (`annotation`, `label`), in that order.
    large_observe: Vec<String>,
    /// `BENCH_LARGE_REQUESTS`: the C×P pods' container requests (cpu, memory), if any.
    large_requests: Option<(String, String)>,
    /// `BENCH_SOAK` (C×P), `BENCH_SOAK_MINUTES`, `BENCH_SOAK_RELIST_MINUTES`.
    soak: Option<(u32, u32)>,
    soak_minutes: u32,
    soak_relist_minutes: u32,
    scheduler_qps: Option<u32>,
    /// `BENCH_PODS_PER_NODE`: the simulated nodes' room, instead of the sizes above.
    pods_per_node: Option<u32>,
    kubeconfig: Option<PathBuf>,
    external: Option<External>,
    external_baseline: bool,
    /// `BENCH_EXTERNAL_RESTART`: a shell command that restarts the external controller and
    /// prints its new pid (the large scenario's restart).
    external_restart: Option<String>,
    out: PathBuf,
    cluster_dir: PathBuf,
    keep_cluster: bool,
    /// `BENCH_KEEP_NAMESPACE`: the large scenario and the soak leave their namespace in place.
    keep_namespace: bool,
    /// `BENCH_APISERVER_PROFILING`: kube-apiserver serves `/debug/pprof` (our control plane only).
    apiserver_profiling: bool,
}

/// The controller of `BENCH_EXTERNAL_PID`.
#[derive(Clone, Debug, PartialEq)]
struct External {
    pid: u32,
    /// `host:port` and path of its Prometheus endpoint.
    metrics: Option<(String, String)>,
    /// Its client-side limit as the rows should name it (`BENCH_EXTERNAL_CLIENT`, default `?`:
    /// the bench cannot see it; Kruise's manager defaults to `30/50`).
    client: String,
}

impl Knobs {
    /// From `get` (the environment, or a map in tests); paths default under `root`.
    fn parse(get: impl Fn(&str) -> Option<String>, root: &Path) -> anyhow::Result<Self> {
        let var = |k: &str, default: &str| get(k).unwrap_or_else(|| default.to_string());
        let list = |k: &str, default: &str| -> Vec<String> {
            var(k, default).split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
        };
        let pairs = |k: &str, default: &str| bench::pairs(&var(k, default)).with_context(|| k.to_string());
        let number = |k: &str, default: u32| -> anyhow::Result<u32> {
            let v = var(k, &default.to_string());
            v.trim().parse().with_context(|| format!("{k}={v}: expected a whole number"))
        };
        // A list whose every item must be one of `allowed`.
        let choices = |k: &str, default: &str, allowed: &[&str]| -> anyhow::Result<Vec<String>> {
            let items = list(k, default);
            if let Some(item) = items.iter().find(|i| !allowed.contains(&i.as_str())) {
                bail!("{k}: {item} is not one of {}", allowed.join(", "));
            }
            Ok(items)
        };
        let flag = |k: &str| get(k).is_some_and(|v| !v.is_empty() && v != "0" && v != "false");
        let resources_limit = match var("BENCH_RESOURCES_QPS", "").trim() {
            "" => None,
            q => {
                let qps: f64 = q.parse().with_context(|| format!("BENCH_RESOURCES_QPS={q}"))?;
                Some(RateLimit { qps, burst: (qps * 2.0) as u32 })
            }
        };
        let fairness = match var("BENCH_FAIRNESS", "1000").trim() {
            "" => None,
            n => Some(
                n.parse::<u32>()
                    .ok()
                    .filter(|&n| n > 0)
                    .with_context(|| format!("BENCH_FAIRNESS={n}: expected a positive whole number"))?,
            ),
        };
        let large = match var("BENCH_LARGE", "").trim() {
            "" => None,
            spec => Some(bench::pair(spec).context("BENCH_LARGE")?),
        };
        let soak = match var("BENCH_SOAK", "").trim() {
            "" => None,
            spec => Some(bench::pair(spec).context("BENCH_SOAK")?),
        };
        let external = match get("BENCH_EXTERNAL_PID").filter(|p| !p.trim().is_empty()) {
            None => None,
            Some(pid) => Some(External {
                pid: pid.trim().parse().with_context(|| format!("BENCH_EXTERNAL_PID={pid}"))?,
                metrics: get("BENCH_EXTERNAL_METRICS").filter(|u| !u.is_empty()).map(|u| http_url(&u)).transpose()?,
                client: var("BENCH_EXTERNAL_CLIENT", "?"),
            }),
        };
        let types = choices("BENCH_TYPES", "ReCreate,InPlaceIfPossible", &["ReCreate", "InPlaceIfPossible", "InPlaceOnly"])?;
        let windows = list("BENCH_WINDOWS", "100%,20%");
        if let Some(w) = windows.iter().find(|w| !positive_window(w)) {
            bail!("BENCH_WINDOWS: {w} is not a positive count or percentage");
        }
        let concurrency = number("BENCH_BASELINE_CONCURRENCY", 16)?;
        let large_rollouts = number("BENCH_LARGE_ROLLOUTS", 3)?;
        if large_rollouts == 0 {
            bail!("BENCH_LARGE_ROLLOUTS must be at least 1");
        }
        if concurrency == 0 {
            bail!("BENCH_BASELINE_CONCURRENCY must be at least 1");
        }
        let large_observe = choices("BENCH_LARGE_OBSERVE", "annotation,label", &["annotation", "label"])?;
        let large_requests = match var("BENCH_LARGE_REQUESTS", "").trim() {
            "" => None,
            r => {
                let (cpu, memory) = r.split_once(',').with_context(|| format!("BENCH_LARGE_REQUESTS={r}: expected <cpu>,<memory>"))?;
                Some((cpu.trim().to_string(), memory.trim().to_string()))
            }
        };
        let counts = |k: &str, default: &str| -> anyhow::Result<Vec<u32>> {
            list(k, default)
                .iter()
                .map(|n| n.parse::<u32>().ok().filter(|&n| n > 0).with_context(|| format!("{k}: {n} is not a positive count")))
                .collect()
        };
        let decisions = counts("BENCH_DECISIONS", "1000,3000,10000,30000,100000")?;
        let real_node = match var("BENCH_REAL_NODE", "").trim() {
            "" => None,
            n => Some(n.parse::<u32>().ok().filter(|&n| n > 0).with_context(|| format!("BENCH_REAL_NODE={n}: expected a positive count"))?),
        };
        let real_node_windows = list("BENCH_REAL_NODE_WINDOWS", "1,25%");
        if let Some(w) = real_node_windows.iter().find(|w| !positive_window(w)) {
            bail!("BENCH_REAL_NODE_WINDOWS: {w} is not a positive count or percentage");
        }
        let one_set_steps = list("BENCH_ONE_SET_STEPS", "80%,60%,40%,20%,0%");
        let one_set_window = var("BENCH_ONE_SET_WINDOW", "20%").trim().to_string();
        one_set::check_steps(&one_set_steps, &one_set_window)?;
        if decisions.len() == 1 {
            bail!("BENCH_DECISIONS: give at least two sizes (growth is read between them)");
        }
        Ok(Self {
            decisions,
            one_set: counts("BENCH_ONE_SET", "")?,
            one_set_steps,
            one_set_window,
            real_node,
            real_node_windows,
            sizes: pairs("BENCH_SIZES", "100x3,1000x1")?,
            scale_up_sizes: pairs("BENCH_SCALE_UP_SIZES", "5000x1")?,
            limited_sizes: pairs("BENCH_LIMITED_SIZES", "100x1")?,
            windows,
            types,
            resources: pairs("BENCH_RESOURCES", "10x50,50x50")?,
            resources_limit,
            concurrency: concurrency as usize,
            fairness,
            large,
            large_rollout: number("BENCH_LARGE_ROLLOUT", 1000)?,
            large_probes: number("BENCH_LARGE_PROBES", 20)?,
            large_rollouts,
            large_observe,
            large_requests,
            soak,
            soak_minutes: number("BENCH_SOAK_MINUTES", 120)?,
            soak_relist_minutes: number("BENCH_SOAK_RELIST_MINUTES", 30)?,
            scheduler_qps: match var("BENCH_SCHEDULER_QPS", "").trim() {
                "" => None,
                q => Some(q.parse().with_context(|| format!("BENCH_SCHEDULER_QPS={q}: expected a whole number"))?),
            },
            pods_per_node: match var("BENCH_PODS_PER_NODE", "").trim() {
                "" => None,
                n => Some(
                    n.parse()
                        .ok()
                        .filter(|&n: &u32| n > 0)
                        .with_context(|| format!("BENCH_PODS_PER_NODE={n}: expected a positive whole number"))?,
                ),
            },
            kubeconfig: get("BENCH_KUBECONFIG").filter(|k| !k.is_empty()).map(PathBuf::from),
            external,
            external_baseline: flag("BENCH_EXTERNAL_BASELINE"),
            external_restart: get("BENCH_EXTERNAL_RESTART").filter(|c| !c.trim().is_empty()),
            out: PathBuf::from(var("BENCH_OUT", &root.join("target/bench/results.json").display().to_string())),
            cluster_dir: PathBuf::from(var("BENCH_CLUSTER_DIR", &root.join("target/bench-cluster").display().to_string())),
            keep_cluster: flag("BENCH_KEEP_CLUSTER"),
            keep_namespace: flag("BENCH_KEEP_NAMESPACE"),
            apiserver_profiling: flag("BENCH_APISERVER_PROFILING"),
        })
    }

    /// The most pods that exist at once in any scenario.
    fn most_pods(&self) -> u32 {
        let timed =
            self.sizes.iter().chain(&self.scale_up_sizes).chain(&self.limited_sizes).map(|&(n, _)| n).chain(self.one_set.iter().copied());
        let resources = self.resources.iter().map(|&(c, p)| c * p).chain(self.fairness);
        // The large scenario's pods, its big CloneSet, the probes' new pods and, beside them,
        // the raw baseline's copy of the big CloneSet's pods.
        let large = self.large.map(|(c, p)| c * p + 2 * self.large_rollout + self.large_probes);
        let soak = self.soak.map(|(c, p)| c * (p + bench::SOAK_SCALE_STEP));
        timed.chain(resources).chain(large).chain(soak).max().unwrap_or(0)
    }

    /// The simulated kubelet's nodes and the room on each: a quarter more room than the largest
    /// scenario needs; 3 × 4,000 where that is enough (the default scenarios), otherwise nodes of
    /// 1,000 pods, or of `BENCH_PODS_PER_NODE` (at least 3 nodes).
    fn sim_nodes(&self) -> (u32, u32) {
        let room = u64::from(self.most_pods()) * 5 / 4;
        let per_node = match self.pods_per_node {
            Some(n) => n,
            None if room <= u64::from(SIM_NODES * SIM_DEFAULT_PODS_PER_NODE) => return (SIM_NODES, SIM_DEFAULT_PODS_PER_NODE),
            None => SIM_PODS_PER_NODE_AT_SCALE,
        };
        let nodes = room.div_ceil(u64::from(per_node)).max(u64::from(SIM_NODES));
        (u32::try_from(nodes).unwrap_or(u32::MAX), per_node)
    }

    /// The simulated kubelet's flags: [`Self::sim_nodes`], 32 workers, and short restart and
    /// grace delays.
    fn sim_kubelet_args(&self) -> Vec<String> {
        let (nodes, per_node) = self.sim_nodes();
        vec![
            format!("--nodes={nodes}"),
            format!("--pods-per-node={per_node}"),
            "--workers=32".into(),
            "--max-grace-period=1s".into(),
            "--restart-delay=200ms".into(),
        ]
    }

    /// kube-scheduler's flags: its client's QPS (and twice that burst) when `BENCH_SCHEDULER_QPS`
    /// is set; otherwise none, and it binds at most 50 pods a second (its default 50/100), like
    /// a default cluster's scheduler.
    fn scheduler_args(&self) -> Vec<String> {
        self.scheduler_qps.map_or_else(Vec::new, |q| vec![format!("--kube-api-qps={q}"), format!("--kube-api-burst={}", q * 2)])
    }

    /// kube-apiserver's extra flags: `--profiling=true` with `BENCH_APISERVER_PROFILING=1`, so its
    /// CPU can be profiled while a scenario runs (`kubectl get --raw /debug/pprof/profile`).
    fn apiserver_args(&self) -> Vec<String> {
        if self.apiserver_profiling { vec!["--profiling=true".into()] } else { Vec::new() }
    }

    /// Whether the cluster goes away at the end (so the large scenario's namespace need not be
    /// deleted).
    fn cluster_is_temporary(&self) -> bool {
        self.kubeconfig.is_none() && !self.keep_cluster
    }
}

/// `http://host:port/path` → (`host:port`, `/path`); only plain HTTP.
fn http_url(url: &str) -> anyhow::Result<(String, String)> {
    let rest = url.strip_prefix("http://").with_context(|| format!("{url}: only http:// metrics endpoints are supported"))?;
    let (host, path) = rest.split_once('/').map_or((rest, "/metrics".to_string()), |(h, p)| (h, format!("/{p}")));
    if !host.contains(':') {
        bail!("{url}: give the port (http://host:port/metrics)");
    }
    Ok((host.to_string(), path))
}

/// Stops the control plane the bench started when dropped, so a failure or panic does not leave
/// it running (`BENCH_KEEP_CLUSTER=1` keeps it).
struct ClusterGuard(Option<PathBuf>);

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            eprintln!("bench: stopping the control plane in {}", dir.display());
            if let Err(e) = cluster::down(&dir) {
                eprintln!("bench: stopping the control plane: {e:#}");
            }
        }
    }
}

fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    let started_at = k8s_openapi::jiff::Timestamp::now().to_string();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = root.canonicalize().unwrap_or(root);
    let knobs = Knobs::parse(|k| std::env::var(k).ok(), &root)?;
    if let Some(ext) = &knobs.external
        && !Path::new(&format!("/proc/{}", ext.pid)).exists()
    {
        bail!("BENCH_EXTERNAL_PID={}: no such process", ext.pid);
    }
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    if !knobs.decisions.is_empty() {
        // Pure CPU, before any control plane shares the machine.
        eprintln!("bench: timing one pass's decisions at {:?} pods", knobs.decisions);
        let (decided, slower) = decisions::run(&knobs.decisions);
        rows.extend(decided);
        failures.extend(slower);
        eprintln!("{}", bench::table(&rows));
    }
    let (sim_args, scheduler_args, result) = if knobs.most_pods() == 0 && knobs.real_node.is_none() {
        (Vec::new(), Vec::new(), Ok(()))
    } else {
        on_cluster(&knobs, &mut rows, &mut failures)?
    };

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
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        baseline_concurrency: knobs.concurrency as u32,
        sim_kubelet_args: sim_args,
        scheduler_args,
        revision,
        rows,
    };
    if let Some(parent) = knobs.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&knobs.out, serde_json::to_string_pretty(&report)?)?;
    println!("\n{}", bench::table(&report.rows));
    println!(
        "client: `none` = no client-side limit (the operator's default; the raw baseline keeps {} requests in flight at most); \
         `30/50` = --rest-config-qps=30 --rest-config-burst=50 for controller and baseline. 429 op/bs: 429 responses to the \
         controller / the baseline.",
        knobs.concurrency
    );
    println!("{} CPUs; total {:.0}s; JSON: {}", report.cpus, total_s, knobs.out.display());
    result?;
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("bench: FAILED: {f}");
        }
        bail!("{} check(s) failed (see above)", failures.len());
    }
    Ok(())
}

/// The scenarios that need a control plane, on the bench's own (started and stopped here) or on
/// `BENCH_KUBECONFIG`'s: the simulated kubelet's and kube-scheduler's flags, and the outcome.
fn on_cluster(
    knobs: &Knobs,
    rows: &mut Vec<Row>,
    failures: &mut Vec<String>,
) -> anyhow::Result<(Vec<String>, Vec<String>, anyhow::Result<()>)> {
    let mut guard = ClusterGuard(None);
    let (kubeconfig, sim_args, scheduler_args) = match &knobs.kubeconfig {
        Some(k) => {
            eprintln!("bench: using the cluster of {} (not started or stopped here)", k.display());
            (k.clone(), Vec::new(), Vec::new())
        }
        None => {
            let mut opts = UpOptions::new(&knobs.cluster_dir);
            opts.sim_kubelet_args = knobs.sim_kubelet_args();
            opts.scheduler_args = knobs.scheduler_args();
            opts.apiserver_args = knobs.apiserver_args();
            opts.real_nodes = usize::from(knobs.real_node.is_some());
            eprintln!(
                "bench: starting the control plane in {} (sim-kubelet {}; kube-scheduler {})",
                knobs.cluster_dir.display(),
                opts.sim_kubelet_args.join(" "),
                if opts.scheduler_args.is_empty() { "at its default client QPS 50".to_string() } else { opts.scheduler_args.join(" ") }
            );
            if !knobs.keep_cluster {
                guard.0 = Some(knobs.cluster_dir.clone());
            }
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (state, up) = rt.block_on(cluster::up(&opts))?;
            if up.reused_running_cluster {
                eprintln!("bench: reusing the control plane already running there (its sim-kubelet flags may differ)");
            }
            (state.kubeconfig, opts.sim_kubelet_args, opts.scheduler_args)
        }
    };
    // Single-threaded so far: the helpers read these.
    unsafe {
        std::env::set_var(e2e::testenv::KUBECONFIG_VAR, &kubeconfig);
        if std::env::var("E2E_OPERATOR_LOG").is_err() {
            std::env::set_var("E2E_OPERATOR_LOG", "info");
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = rt.block_on(async {
        let state_dir = knobs.kubeconfig.as_ref().and_then(|k| k.parent()).unwrap_or(&knobs.cluster_dir);
        let b = Bench { admin: cluster::client_for(&kubeconfig).await?, knobs: knobs.clone(), state_dir: state_dir.to_path_buf() };
        tokio::select! {
            r = run(&b, rows, failures) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    drop(rt);
    drop(guard);
    Ok((sim_args, scheduler_args, result))
}

async fn run(b: &Bench, rows: &mut Vec<Row>, failures: &mut Vec<String>) -> anyhow::Result<()> {
    let k = &b.knobs;
    if k.external.is_none() {
        e2e::testenv::install_api().await?;
    } else {
        let skipped = [("BENCH_LIMITED_SIZES", !k.limited_sizes.is_empty()), ("BENCH_RESOURCES", !k.resources.is_empty())];
        for (knob, _) in skipped.iter().filter(|(_, set)| *set) {
            eprintln!("bench: {knob} is skipped for an external controller");
        }
    }
    for &(n, reps) in &k.sizes {
        timed(b, n, reps, &k.types, &k.windows, None, rows).await?;
    }
    // Sizes too large for the rollout matrix on this machine: scale-up only.
    for &(n, reps) in &k.scale_up_sizes {
        timed(b, n, reps, &["ReCreate".to_string()], &[], None, rows).await?;
    }
    if k.external.is_none() {
        for &(n, reps) in &k.limited_sizes {
            timed(b, n, reps, &k.types, &k.windows, Some(LIMIT), rows).await?;
        }
        if !k.resources.is_empty() {
            rows.extend(b.resources(&k.resources).await?);
            eprintln!("{}", bench::table(rows));
        }
    }
    if let (None, Some(n)) = (&k.external, k.fairness) {
        b.fairness(n, rows).await?;
        eprintln!("{}", bench::table(rows));
    }
    if !k.one_set.is_empty() {
        b.one_set(&k.one_set, rows).await?;
    }
    if let Some(n) = k.real_node {
        b.real_node(n, &k.real_node_windows, rows).await?;
    }
    if let Some((c, p)) = k.large {
        b.large(c, p, rows, failures).await?;
        eprintln!("{}", bench::table(rows));
    }
    if let Some((c, p)) = k.soak {
        b.soak(c, p, rows, failures).await?;
        eprintln!("{}", bench::table(rows));
    }
    Ok(())
}

/// `reps` × `types` runs of the scale-up 0 → n and one rollout per window, controller and
/// baseline both with client-side `limit`; one row for the scale-up, one per rollout kind.
async fn timed(
    b: &Bench,
    n: u32,
    reps: u32,
    types: &[String],
    windows: &[String],
    limit: Option<RateLimit>,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let client = match &b.knobs.external {
        Some(e) => e.client.clone(),
        None => bench::client_label(limit.map(|l| (l.qps, l.burst))),
    };
    let mut up = Samples::default();
    let mut rollouts: BTreeMap<String, Samples> = BTreeMap::new();
    for rep in 0..reps {
        for t in types {
            eprintln!("bench: N={n} {t} client {client} run {}/{reps}", rep + 1);
            let t0 = Instant::now();
            let flow = b.operator_flow(n, t, windows, limit).await?;
            let t1 = Instant::now();
            let base = if !b.baselines() {
                None
            } else if limit.is_none() {
                Some(b.raw_baseline(n, t, windows).await?)
            } else {
                Some(b.limited_baseline(n, t, windows, &flow.rolls, limit).await?)
            };
            eprintln!(
                "bench: N={n} {t}: controller flow {:.0}s, baseline flow {:.0}s",
                t1.duration_since(t0).as_secs_f64(),
                t1.elapsed().as_secs_f64()
            );
            let flow_extra = flow.rss_extra();
            up.push(&flow.up, base.as_ref().map(|(u, _)| u), &flow_extra);
            for (i, (w, roll)) in windows.iter().zip(&flow.rolls).enumerate() {
                let base = base.as_ref().and_then(|(_, r)| r.get(i));
                rollouts.entry(format!("rollout {} {w}", short(t))).or_default().push(roll, base, &flow_extra);
            }
        }
    }
    let controller = b.controller_label();
    rows.push(up.row("scale-up", n, &client, controller));
    rows.extend(rollouts.iter().map(|(name, s)| s.row(name, n, &client, controller)));
    eprintln!("{}", bench::table(rows));
    Ok(())
}

fn short(t: &str) -> &str {
    if t.starts_with("InPlace") { "in-place" } else { "recreate" }
}

/// The runs behind one row.
#[derive(Default)]
struct Samples {
    operator: Vec<f64>,
    baseline: Vec<f64>,
    per_pod: Option<Requests>,
    extra: BTreeMap<String, f64>,
}

impl Samples {
    fn push(&mut self, op: &Phase, base: Option<&BasePhase>, flow_extra: &BTreeMap<String, f64>) {
        self.operator.push(op.secs);
        self.per_pod = op.per_pod();
        bench::merge_extra(&mut self.extra, &op.extra());
        if let Some(base) = base {
            self.baseline.push(base.secs);
            bench::merge_extra(&mut self.extra, &base.extra());
        }
        bench::merge_extra(&mut self.extra, flow_extra);
    }

    fn row(&self, name: &str, n: u32, client: &str, controller: &str) -> Row {
        Row {
            scenario: name.into(),
            client: client.into(),
            controller: controller.into(),
            pods: n,
            clonesets: 1,
            runs: self.operator.len() as u32,
            operator_s: bench::median(&self.operator),
            baseline_s: bench::median(&self.baseline),
            per_pod: self.per_pod,
            extra: self.extra.clone(),
        }
    }
}

/// Ready, not terminating, and running `image` in every container (spec and status).
fn ready_with(p: &Pod, image: &str) -> bool {
    let Some(s) = p.status.as_ref() else { return false };
    p.metadata.deletion_timestamp.is_none()
        && s.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
        && s.container_statuses.iter().flatten().all(|c| c.ready && c.image == image)
        && p.spec.as_ref().is_some_and(|sp| sp.containers.iter().all(|c| c.image.as_deref() == Some(image)))
}

/// The container `main` reports running `image` (ready or not).
fn running_image(p: &Pod, image: &str) -> bool {
    p.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .any(|c| c.name == "main" && c.image == image && c.state.as_ref().is_some_and(|st| st.running.is_some()))
}

fn image(v: u32) -> String {
    format!("registry.example/bench/app:v{v}")
}

fn strategy(t: &str, window: &str) -> Value {
    json!({"updateStrategy": {"type": t, "maxUnavailable": one_set::int_or_percent(window)}})
}

/// A maxUnavailable given as a positive count or percentage.
fn positive_window(window: &str) -> bool {
    window.strip_suffix('%').unwrap_or(window).parse::<u32>().is_ok_and(|n| n > 0)
}

/// Pods rounded up from a percentage or count of `n` (at least 1).
fn window_pods(window: &str, n: u32) -> u32 {
    let w = match window.strip_suffix('%') {
        Some(p) => (f64::from(n) * p.parse::<f64>().unwrap_or(100.0) / 100.0).ceil() as u32,
        None => window.parse().unwrap_or(n),
    };
    w.clamp(1, n.max(1))
}

fn ticks_to_s(ticks: u64) -> f64 {
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    bench::round2(ticks as f64 / hz)
}

/// (VmRSS, VmHWM, utime+stime ticks) of `pid`.
fn proc_reading(pid: u32) -> anyhow::Result<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("reading /proc/{pid}/status"))?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (rss, hwm) = bench::rss_from_status(&status);
    Ok((rss, hwm, bench::cpu_ticks_from_stat(&stat).context("bad /proc stat")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(vars: &[(&str, &str)]) -> anyhow::Result<Knobs> {
        let map: BTreeMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Knobs::parse(|k| map.get(k).cloned(), Path::new("/repo"))
    }

    #[test]
    fn knobs_parse() {
        assert_eq!(window_pods("20%", 1000), 200);
        assert_eq!(window_pods("20%", 3), 1);
        assert_eq!(window_pods("100%", 100), 100);
        assert_eq!(window_pods("5", 100), 5);

        let d = knobs(&[]).unwrap();
        assert_eq!(d.decisions, [1000, 3000, 10000, 30000, 100000]);
        assert!(knobs(&[("BENCH_DECISIONS", "1000")]).is_err(), "growth needs two sizes");
        assert!(knobs(&[("BENCH_DECISIONS", "")]).unwrap().decisions.is_empty());
        assert!(d.one_set.is_empty());
        assert_eq!((d.one_set_steps.len(), d.one_set_window.as_str()), (5, "20%"));
        let one = knobs(&[("BENCH_ONE_SET", "1000,3000"), ("BENCH_ONE_SET_STEPS", "50%,0")]).unwrap();
        assert_eq!((one.one_set, one.one_set_steps), (vec![1000, 3000], vec!["50%".to_string(), "0".to_string()]));
        assert!(knobs(&[("BENCH_ONE_SET_STEPS", "0%,50%")]).is_err());
        assert!(knobs(&[("BENCH_ONE_SET", "many")]).is_err());
        assert_eq!((d.real_node, d.real_node_windows.as_slice()), (None, ["1".to_string(), "25%".to_string()].as_slice()));
        assert_eq!(knobs(&[("BENCH_REAL_NODE", "20")]).unwrap().real_node, Some(20));
        assert!(knobs(&[("BENCH_REAL_NODE", "0")]).is_err());
        assert!(knobs(&[("BENCH_REAL_NODE_WINDOWS", "0")]).is_err());
        assert_eq!(d.sizes, vec![(100, 3), (1000, 1)]);
        assert_eq!(d.scale_up_sizes, vec![(5000, 1)]);
        assert_eq!(d.limited_sizes, vec![(100, 1)]);
        assert_eq!(d.windows, ["100%", "20%"]);
        assert_eq!(d.types, ["ReCreate", "InPlaceIfPossible"]);
        assert_eq!(d.resources, vec![(10, 50), (50, 50)]);
        assert_eq!((d.resources_limit, d.concurrency, d.large), (None, 16, None));
        assert_eq!((d.large_rollout, d.large_probes, d.large_rollouts), (1000, 20, 3));
        assert_eq!(knobs(&[("BENCH_LARGE_ROLLOUTS", "5")]).unwrap().large_rollouts, 5);
        assert!(knobs(&[("BENCH_LARGE_ROLLOUTS", "0")]).is_err());
        assert_eq!(d.large_observe, ["annotation", "label"]);
        assert_eq!(knobs(&[("BENCH_LARGE_OBSERVE", "annotation")]).unwrap().large_observe, ["annotation"]);
        assert!(knobs(&[("BENCH_LARGE_OBSERVE", "")]).unwrap().large_observe.is_empty());
        assert_eq!(d.large_requests, None);
        let requests = knobs(&[("BENCH_LARGE_REQUESTS", "100m, 64Mi")]).unwrap().large_requests;
        assert_eq!(requests, Some(("100m".to_string(), "64Mi".to_string())));
        assert!(knobs(&[("BENCH_LARGE_REQUESTS", "100m")]).is_err());
        assert!(knobs(&[("BENCH_LARGE_OBSERVE", "labels")]).is_err());
        assert_eq!((d.soak, d.soak_minutes, d.soak_relist_minutes), (None, 120, 30));
        assert!(d.scheduler_args().is_empty());
        assert_eq!(knobs(&[("BENCH_SCHEDULER_QPS", "500")]).unwrap().scheduler_args(), ["--kube-api-qps=500", "--kube-api-burst=1000"]);
        assert!(knobs(&[("BENCH_SCHEDULER_QPS", "fast")]).is_err());
        assert!(d.apiserver_args().is_empty(), "kube-apiserver keeps --profiling=false unless asked");
        assert_eq!(knobs(&[("BENCH_APISERVER_PROFILING", "1")]).unwrap().apiserver_args(), ["--profiling=true"]);
        assert_eq!((d.kubeconfig.as_ref(), d.external.as_ref(), d.external_baseline, d.keep_cluster), (None, None, false, false));
        assert_eq!(d.out, Path::new("/repo/target/bench/results.json"));
        assert!(d.cluster_is_temporary());

        let k = knobs(&[
            ("BENCH_SIZES", ""),
            ("BENCH_SCALE_UP_SIZES", "1000x1"),
            ("BENCH_LIMITED_SIZES", ""),
            ("BENCH_TYPES", "InPlaceIfPossible"),
            ("BENCH_RESOURCES_QPS", "200"),
            ("BENCH_BASELINE_CONCURRENCY", "8"),
            ("BENCH_LARGE", "500x40"),
            ("BENCH_LARGE_PROBES", "5"),
            ("BENCH_KUBECONFIG", "/tmp/kc"),
            ("BENCH_EXTERNAL_PID", "4242"),
            ("BENCH_EXTERNAL_METRICS", "http://127.0.0.1:8080/metrics"),
            ("BENCH_EXTERNAL_BASELINE", "1"),
            ("BENCH_EXTERNAL_RESTART", "./restart-kruise.sh"),
            ("BENCH_KEEP_CLUSTER", "1"),
            ("BENCH_KEEP_NAMESPACE", "1"),
            ("BENCH_SOAK", "100x40"),
            ("BENCH_SOAK_MINUTES", "150"),
            ("BENCH_SOAK_RELIST_MINUTES", "0"),
        ])
        .unwrap();
        assert_eq!((k.soak, k.soak_minutes, k.soak_relist_minutes), (Some((100, 40)), 150, 0));
        assert_eq!(k.external_restart.as_deref(), Some("./restart-kruise.sh"));
        assert!(k.sizes.is_empty() && k.limited_sizes.is_empty());
        assert_eq!(k.types, ["InPlaceIfPossible"]);
        assert_eq!(k.resources_limit, Some(RateLimit { qps: 200.0, burst: 400 }));
        assert_eq!((k.concurrency, k.large, k.large_probes), (8, Some((500, 40)), 5));
        assert_eq!(
            k.external,
            Some(External { pid: 4242, metrics: Some(("127.0.0.1:8080".into(), "/metrics".into())), client: "?".into() })
        );
        assert!(k.external_baseline && !k.cluster_is_temporary() && k.keep_namespace);

        assert!(knobs(&[("BENCH_LARGE", "500")]).is_err());
        assert!(knobs(&[("BENCH_SOAK", "100")]).is_err());
        assert!(knobs(&[("BENCH_SOAK_MINUTES", "two hours")]).is_err());
        assert!(knobs(&[("BENCH_SIZES", "100")]).is_err());
        assert!(knobs(&[("BENCH_BASELINE_CONCURRENCY", "0")]).is_err());
        assert!(knobs(&[("BENCH_TYPES", "Bogus")]).is_err());
        assert!(knobs(&[("BENCH_WINDOWS", "0%")]).is_err());
        assert!(knobs(&[("BENCH_WINDOWS", "half")]).is_err());
        assert_eq!(knobs(&[("BENCH_WINDOWS", "5,50%")]).unwrap().windows, ["5", "50%"]);
        assert!(knobs(&[("BENCH_EXTERNAL_PID", "kruise")]).is_err());
        assert!(knobs(&[("BENCH_EXTERNAL_PID", "1"), ("BENCH_EXTERNAL_METRICS", "https://h:8443/metrics")]).is_err());
    }

    #[test]
    fn metrics_urls() {
        assert_eq!(http_url("http://10.0.0.5:8080/metrics").unwrap(), ("10.0.0.5:8080".into(), "/metrics".into()));
        assert_eq!(http_url("http://localhost:8080").unwrap(), ("localhost:8080".into(), "/metrics".into()));
        assert!(http_url("http://localhost/metrics").is_err());
    }

    #[test]
    fn the_simulated_kubelet_fits_the_largest_scenario() {
        let d = knobs(&[]).unwrap();
        assert_eq!(d.most_pods(), 5000);
        assert_eq!(d.sim_nodes(), (3, 4000), "the defaults keep the old 3 × 4,000");
        assert_eq!(&d.sim_kubelet_args()[..2], ["--nodes=3", "--pods-per-node=4000"]);
        let large = knobs(&[("BENCH_LARGE", "500x40")]).unwrap();
        assert_eq!(large.most_pods(), 20000 + 1000 + 20 + 1000);
        assert_eq!(large.sim_nodes(), (28, 1000), "nodes of 1,000 pods, room for a quarter more");
        let dense = knobs(&[("BENCH_LARGE", "500x40"), ("BENCH_PODS_PER_NODE", "10000")]).unwrap();
        assert_eq!(dense.sim_nodes(), (3, 10000), "the 3-node layout of the earlier runs");
        let (nodes, per_node) = knobs(&[("BENCH_LARGE", "2500x40")]).unwrap().sim_nodes();
        assert!(nodes * per_node >= 102_020 * 5 / 4 && nodes <= 128, "{nodes} nodes: pod IPs repeat after 128");
        assert!(knobs(&[("BENCH_PODS_PER_NODE", "0")]).is_err());
        assert_eq!(knobs(&[("BENCH_SOAK", "2000x40")]).unwrap().most_pods(), 2000 * 42, "a soak's CloneSets scaled up");
    }
}
