//! Pure parts of `make bench` (the driver is `src/bin/bench/`): knob parsing, medians, request
//! counts by verb and status code from a `/metrics` text, /proc readings, the fairness bound of
//! the large scenario, and the table and JSON the bench prints and writes.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// Version of the JSON layout of [`Report`]. 2: per-row `client` and `controller`; `qps` and
/// `burst` left the top level (each row names its client limit); `baseline_concurrency`,
/// `sim_kubelet_args` and `scheduler_args` joined it.
pub const FORMAT_VERSION: u32 = 2;

/// `100x3,1000x1` → [(100, 3), (1000, 1)]; empty → none.
pub fn pairs(spec: &str) -> anyhow::Result<Vec<(u32, u32)>> {
    spec.split(',').filter(|s| !s.trim().is_empty()).map(pair).collect()
}

/// `500x40` → (500, 40).
pub fn pair(spec: &str) -> anyhow::Result<(u32, u32)> {
    let (a, b) = spec.trim().split_once('x').with_context(|| format!("{spec}: expected AxB"))?;
    Ok((
        a.trim().parse().with_context(|| format!("{spec}: {a} is not a count"))?,
        b.trim().parse().with_context(|| format!("{spec}: {b} is not a count"))?,
    ))
}

/// The large scenario's fairness bound: a small change to an idle CloneSet, made while a large
/// rollout runs, must be reflected in its status within this long, or within
/// [`PROBE_ROLLOUT_FRACTION`] of the rollout's duration, whichever is longer.
pub const PROBE_LATENCY_FLOOR: Duration = Duration::from_secs(30);
/// See [`PROBE_LATENCY_FLOOR`].
pub const PROBE_ROLLOUT_FRACTION: f64 = 0.5;

/// The longest a probe may take while a rollout of `rollout_s` seconds runs (seconds).
pub fn probe_bound_s(rollout_s: f64) -> f64 {
    PROBE_LATENCY_FLOOR.as_secs_f64().max(rollout_s * PROBE_ROLLOUT_FRACTION)
}

/// The median (mean of the middle two for an even count); `None` for no samples.
pub fn median(samples: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) { (v[mid - 1] + v[mid]) / 2.0 } else { v[mid] })
}

/// Writes the operator made, by kind, summed over codes (every attempt counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Requests {
    /// POST pods.
    pub pod_create: f64,
    /// PATCH pods (metadata: labels, annotations, image for in-place).
    pub pod_patch: f64,
    /// PUT pods.
    pub pod_update: f64,
    /// DELETE pods.
    pub pod_delete: f64,
    /// PATCH/PUT pods/status.
    pub pod_status: f64,
    /// PATCH/PUT clonesets/status.
    pub cs_status: f64,
    /// POST/PATCH events.
    pub events: f64,
    /// Every other write (revisions, PVCs, CloneSet spec, …).
    pub other_writes: f64,
    /// GET (lists, watches, gets).
    pub reads: f64,
}

impl Requests {
    /// Counts from `rest_client_requests_total{code,method,resource,subresource}` samples.
    pub fn from_metrics(text: &str) -> Self {
        let mut r = Self::default();
        for (labels, value) in samples(text, "rest_client_requests_total") {
            let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or_default();
            let (method, resource, sub) = (get("method"), get("resource"), get("subresource"));
            let slot = match (method, resource, sub) {
                ("GET", _, _) => &mut r.reads,
                ("POST", "pods", "") => &mut r.pod_create,
                ("PATCH", "pods", "") => &mut r.pod_patch,
                ("PUT", "pods", "") => &mut r.pod_update,
                ("DELETE", "pods", "") => &mut r.pod_delete,
                ("PATCH" | "PUT", "pods", "status") => &mut r.pod_status,
                ("PATCH" | "PUT", "clonesets", "status") => &mut r.cs_status,
                (_, "events", _) => &mut r.events,
                _ => &mut r.other_writes,
            };
            *slot += value;
        }
        r
    }

    /// `self - before` (counters only grow).
    pub fn since(&self, before: &Self) -> Self {
        Self {
            pod_create: self.pod_create - before.pod_create,
            pod_patch: self.pod_patch - before.pod_patch,
            pod_update: self.pod_update - before.pod_update,
            pod_delete: self.pod_delete - before.pod_delete,
            pod_status: self.pod_status - before.pod_status,
            cs_status: self.cs_status - before.cs_status,
            events: self.events - before.events,
            other_writes: self.other_writes - before.other_writes,
            reads: self.reads - before.reads,
        }
    }

    pub fn per(&self, n: f64) -> Self {
        let d = if n > 0.0 { n } else { 1.0 };
        Self {
            pod_create: self.pod_create / d,
            pod_patch: self.pod_patch / d,
            pod_update: self.pod_update / d,
            pod_delete: self.pod_delete / d,
            pod_status: self.pod_status / d,
            cs_status: self.cs_status / d,
            events: self.events / d,
            other_writes: self.other_writes / d,
            reads: self.reads / d,
        }
    }

    /// Every write (non-GET request), events included.
    pub fn writes(&self) -> f64 {
        self.pod_create
            + self.pod_patch
            + self.pod_update
            + self.pod_delete
            + self.pod_status
            + self.cs_status
            + self.events
            + self.other_writes
    }

    /// Writes to pods (create, patch, update, delete, status).
    pub fn pod_writes(&self) -> f64 {
        self.pod_create + self.pod_patch + self.pod_update + self.pod_delete + self.pod_status
    }
}

/// One reading of a client's `rest_client_requests_total`: writes by kind (when the samples
/// carry `resource`/`subresource` labels, as ours do), writes by method (always), and the 429s.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub requests: Requests,
    /// Non-GET requests by method (`POST`, `PATCH`, `PUT`, `DELETE`), every code.
    pub writes_by_method: BTreeMap<String, f64>,
    /// Responses with code 429 (Too Many Requests), every method.
    pub throttled: f64,
    /// Whether every sample names its resource: client-go's metric has only `code`, `host` and
    /// `method`, so for such a controller [`Snapshot::requests`] cannot tell pods from the rest.
    pub per_resource: bool,
    /// The CloneSet controller's reconciles (`controller_runtime_reconcile_total`, every
    /// result) and the seconds they took (`controller_runtime_reconcile_time_seconds_sum`):
    /// controller-runtime's metrics, which Kruise's manager has too ([`cloneset_sum`]).
    pub reconciles: f64,
    pub reconcile_s: f64,
    /// Seconds spent and requests answered by verb (`rest_client_request_duration_seconds`'s
    /// sum and count: the operator's client, the raw baseline's too), for their mean latency.
    pub latency: BTreeMap<String, (f64, f64)>,
}

impl Snapshot {
    pub fn from_metrics(text: &str) -> Self {
        let mut s = Self { requests: Requests::from_metrics(text), per_resource: true, ..Self::default() };
        for (labels, value) in samples(text, "rest_client_requests_total") {
            s.per_resource &= labels.contains_key("resource");
            if labels.get("code").is_some_and(|c| c == "429") {
                s.throttled += value;
            }
            match labels.get("method").map(String::as_str) {
                Some("GET") | None => {}
                Some(m) => *s.writes_by_method.entry(m.to_string()).or_default() += value,
            }
        }
        for (part, index) in [("sum", 0), ("count", 1)] {
            for (labels, value) in samples(text, &format!("rest_client_request_duration_seconds_{part}")) {
                let slot = s.latency.entry(labels.get("verb").cloned().unwrap_or_default()).or_default();
                if index == 0 { slot.0 += value } else { slot.1 += value }
            }
        }
        s.reconciles = cloneset_sum(text, "controller_runtime_reconcile_total");
        s.reconcile_s = cloneset_sum(text, "controller_runtime_reconcile_time_seconds_sum");
        s
    }

    /// `reconciles` and `reconcile_s` of a phase (see [`Snapshot::since`]), and the mean pass in
    /// milliseconds.
    pub fn reconcile_extra(&self) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> =
            [("reconciles".to_string(), self.reconciles), ("reconcile_s".to_string(), round2(self.reconcile_s))].into();
        if self.reconciles > 0.0 {
            out.insert("reconcile_mean_ms".into(), round2(self.reconcile_s / self.reconciles * 1000.0));
        }
        out
    }

    /// `self - before` (counters only grow).
    pub fn since(&self, before: &Self) -> Self {
        let mut writes_by_method = self.writes_by_method.clone();
        for (m, v) in &before.writes_by_method {
            *writes_by_method.entry(m.clone()).or_default() -= v;
        }
        Self {
            requests: self.requests.since(&before.requests),
            writes_by_method,
            throttled: self.throttled - before.throttled,
            per_resource: self.per_resource && before.per_resource,
            reconciles: self.reconciles - before.reconciles,
            reconcile_s: self.reconcile_s - before.reconcile_s,
            latency: self
                .latency
                .iter()
                .map(|(verb, (sum, count))| {
                    let (s0, c0) = before.latency.get(verb).copied().unwrap_or_default();
                    (verb.clone(), (sum - s0, count - c0))
                })
                .collect(),
        }
    }

    /// `<prefix>latency_<verb>_ms`: each verb's mean request latency over the phase, in ms.
    pub fn latency_extra(&self, prefix: &str) -> BTreeMap<String, f64> {
        self.latency
            .iter()
            .filter(|(_, (_, count))| *count > 0.0)
            .map(|(verb, (sum, count))| (format!("{prefix}latency_{}_ms", verb.to_lowercase()), round2(sum / count * 1000.0)))
            .collect()
    }

    /// Requests per pod when the samples name resources; otherwise `None`, the writes going to
    /// [`Snapshot::method_extra`] instead.
    pub fn per_pod(&self, pods: f64) -> Option<Requests> {
        self.per_resource.then(|| self.requests.per(pods))
    }

    /// `writes_<method>_per_pod` figures for a controller whose metric has no resource labels
    /// (nothing when it has them: the table's columns show those).
    pub fn method_extra(&self, pods: f64) -> BTreeMap<String, f64> {
        if self.per_resource {
            return BTreeMap::new();
        }
        let d = if pods > 0.0 { pods } else { 1.0 };
        self.writes_by_method.iter().map(|(m, v)| (format!("writes_{}_per_pod", m.to_lowercase()), round2(v / d))).collect()
    }
}

/// Every sample of metric `name` as (labels, value).
fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (BTreeMap<String, String>, f64)> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => r.rsplit_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        Some((parse_labels(labels), value.trim().parse::<f64>().ok()?))
    })
}

pub fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let Some(end) = after.find('"') else { break };
        out.insert(key.trim_start_matches(',').to_string(), after[..end].to_string());
        rest = &after[end + 1..];
    }
    out
}

/// The sum of every sample of metric `name` (e.g. `controller_runtime_reconcile_total`).
pub fn metric_sum(text: &str, name: &str) -> f64 {
    metric_sum_where(text, name, &[])
}

/// The sum of the samples of metric `name` whose labels include every pair of `with`.
pub fn metric_sum_where(text: &str, name: &str, with: &[(&str, &str)]) -> f64 {
    samples(text, name).filter(|(labels, _)| with.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))).map(|(_, v)| v).sum()
}

/// The sum of `name`'s samples, or `None` when `text` has none (a controller without that
/// metric), where [`metric_sum`] would say 0.
pub fn gauge(text: &str, name: &str) -> Option<f64> {
    let mut values = samples(text, name).map(|(_, v)| v).peekable();
    values.peek()?;
    Some(values.sum())
}

/// Bytes as MiB, to a tenth: every `*_mib` figure of the report.
pub fn mib(bytes: u64) -> f64 {
    (bytes as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0
}

/// The controller's heap, from its own `/metrics`: `heap_in_use_mib` (what its caches and work
/// hold) and `heap_free_mib` (what the allocator keeps free inside its heap, e.g. after a burst),
/// from `heap_in_use_bytes` and `heap_free_bytes`. Empty for a controller without them (Kruise's
/// manager): the RSS alone cannot tell the caches' cost from the allocator's free space.
pub fn heap_extra(text: &str) -> BTreeMap<String, f64> {
    [("heap_in_use_mib", "heap_in_use_bytes"), ("heap_free_mib", "heap_free_bytes")]
        .into_iter()
        .filter_map(|(key, name)| Some((key.to_string(), mib(gauge(text, name)? as u64))))
        .collect()
}

/// Bytes kube-apiserver has sent so far in responses (lists, gets) and in watch events, from
/// its own `/metrics`: the sums of `apiserver_response_sizes` and `apiserver_watch_events_sizes`.
/// A streaming list's objects arrive as watch events, a paged list's as responses.
pub fn apiserver_bytes_sent(text: &str) -> f64 {
    metric_sum(text, "apiserver_response_sizes_sum") + metric_sum(text, "apiserver_watch_events_sizes_sum")
}

/// Pod writes kube-apiserver has answered 409 Conflict so far, from its `apiserver_request_total`
/// (a write made with a stale resourceVersion, or a create of a name that exists): each is a
/// whole attempt of the apiserver's; the simulated kubelet's status patches made with its watch's
/// resourceVersion were most of them, until it read each pod before writing as a kubelet does.
pub fn apiserver_pod_conflicts(text: &str) -> f64 {
    samples(text, "apiserver_request_total")
        .filter(|(l, _)| l.get("resource").is_some_and(|r| r == "pods") && l.get("code").is_some_and(|c| c == "409"))
        .map(|(_, v)| v)
        .sum()
}

/// The sum of `name`'s samples of the CloneSet controller: ours (`controller="cloneset"`) or
/// Kruise's manager, which runs many controllers (`controller="cloneset-controller"`, its queue
/// `name="cloneset-controller"`).
fn cloneset_sum(text: &str, name: &str) -> f64 {
    let of_cloneset = |labels: &BTreeMap<String, String>| {
        labels.get("controller").or_else(|| labels.get("name")).is_some_and(|c| c.starts_with("cloneset"))
    };
    samples(text, name).filter(|(labels, _)| of_cloneset(labels)).map(|(_, v)| v).sum()
}

/// From a controller's metrics: its CloneSet controller has reconciled at least `reconciles`
/// times, its queue is empty and no worker is busy — everything it was going to do about the
/// current state is done.
pub fn reconciled_and_idle(text: &str, reconciles: f64) -> bool {
    cloneset_sum(text, "controller_runtime_reconcile_total") >= reconciles
        && cloneset_sum(text, "workqueue_depth") == 0.0
        && cloneset_sum(text, "controller_runtime_active_workers") == 0.0
}

/// VmRSS and VmHWM in bytes from `/proc/<pid>/status` text.
pub fn rss_from_status(text: &str) -> (u64, u64) {
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |k| k * 1024)
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

/// utime + stime in clock ticks from `/proc/<pid>/stat` text (fields 14 and 15; the command
/// name in parentheses may contain spaces).
pub fn cpu_ticks_from_stat(text: &str) -> Option<u64> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state), so field 14 is index 11.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The whole machine's busy and total clock ticks, from `/proc/stat`'s `cpu` line (idle and
/// iowait are not busy): how saturated the machine was between two readings.
pub fn machine_ticks(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is counted in user already).
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Which client-side rate limit a row's clients had: `none` (the operator's default: the
/// apiserver's Priority and Fairness decides) or `<qps>/<burst>`.
pub fn client_label(limit: Option<(f64, u32)>) -> String {
    limit.map_or_else(|| "none".into(), |(qps, burst)| format!("{}/{burst}", trim_float(qps)))
}

/// One line of the table: a timed scenario against its baseline, or a resource reading.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `scale-up`, `rollout recreate 100%`, `resources`, `startup`, `large: …`
    pub scenario: String,
    /// The client-side limit of the controller and the baseline: `none` or `30/50` (see
    /// [`client_label`]).
    #[serde(default)]
    pub client: String,
    /// Whose controller was measured: `operator` (this one, started by the bench) or `external`
    /// (`BENCH_EXTERNAL_PID`).
    #[serde(default)]
    pub controller: String,
    /// Pods involved.
    pub pods: u32,
    /// CloneSets involved.
    pub clonesets: u32,
    /// Repetitions the times are the median of.
    pub runs: u32,
    /// Controller time in seconds (median).
    pub operator_s: Option<f64>,
    /// Direct-client baseline in seconds (median).
    pub baseline_s: Option<f64>,
    /// Controller requests per pod (the run the median came from is not tracked: per-run counts
    /// are deterministic up to status writes; this is the last run's). `None` for a controller
    /// whose metrics do not name resources (see `writes_<method>_per_pod` in `extra`).
    pub per_pod: Option<Requests>,
    /// Other figures: `operator_429`, `baseline_429` (totals over the runs), `rss_after_mib`,
    /// `peak_rss_mib` (the most over the runs), `steady_rss_mib`, `cpu_s`, `bytes_per_pod`,
    /// `cpu_s_per_1k_pod_events`, `probe_max_s`, `writes_after_restart`, …
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
}

impl Row {
    /// One run of this operator with no baseline (a resource reading, a large-scale step);
    /// `per_pod` and `extra` are the caller's to fill in.
    pub fn operator_only(scenario: impl Into<String>, client: &str, pods: u32, clonesets: u32, secs: f64) -> Self {
        Self {
            scenario: scenario.into(),
            client: client.into(),
            controller: "operator".into(),
            pods,
            clonesets,
            runs: 1,
            operator_s: Some(secs),
            ..Self::default()
        }
    }

    /// The time a baseline took for the same work, with its figures (`baseline_429`, …): the
    /// row's ratio is then the controller's time over the baseline's.
    pub fn add_baseline(&mut self, secs: f64, extra: BTreeMap<String, f64>) {
        self.baseline_s = Some(secs);
        self.extra.extend(extra);
    }

    pub fn ratio(&self) -> Option<f64> {
        match (self.operator_s, self.baseline_s) {
            (Some(o), Some(b)) if b > 0.0 => Some(o / b),
            _ => None,
        }
    }
}

/// Folds one run's `extra` figures into a row's: counts of 429s add up, memory keeps the most,
/// anything else keeps the last run's.
pub fn merge_extra(into: &mut BTreeMap<String, f64>, run: &BTreeMap<String, f64>) {
    for (k, v) in run {
        let slot = into.entry(k.clone());
        if k.ends_with("_429") {
            *slot.or_default() += v;
        } else if k.ends_with("_mib") {
            let e = slot.or_insert(*v);
            *e = e.max(*v);
        } else {
            *slot.or_default() = *v;
        }
    }
}

/// What `make bench` writes to `target/bench/results.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    /// RFC 3339 start time.
    pub started: String,
    /// Wall-clock seconds of the whole run.
    pub total_s: f64,
    pub cpus: usize,
    /// Requests (and pod sequences) the raw baseline has in flight at most.
    pub baseline_concurrency: u32,
    /// The simulated kubelet's flags (empty on a cluster the bench did not start).
    pub sim_kubelet_args: Vec<String>,
    /// kube-scheduler's extra flags (empty: its defaults, or a cluster the bench did not start).
    #[serde(default)]
    pub scheduler_args: Vec<String>,
    /// git describe of the tree measured, if available.
    pub revision: String,
    pub rows: Vec<Row>,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"))
}

/// `operator/baseline` 429 counts for the table (`-` for one not measured).
fn throttled(extra: &BTreeMap<String, f64>) -> String {
    let get = |k: &str| extra.get(k).map_or_else(|| "-".into(), |v| trim_float(*v));
    if !extra.contains_key("operator_429") && !extra.contains_key("baseline_429") {
        return "-".into();
    }
    format!("{}/{}", get("operator_429"), get("baseline_429"))
}

/// The table printed at the end of a run.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let header = format!(
        "{:<34} {:<6} {:<3} {:>5} {:>4} {:>4} {:>9} {:>9} {:>6} | {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} | {:>9} | {}",
        "scenario",
        "client",
        "ctl",
        "pods",
        "cs",
        "runs",
        "oper(s)",
        "base(s)",
        "ratio",
        "create",
        "patch",
        "update",
        "delete",
        "podst",
        "csst",
        "events",
        "429 op/bs",
        "other"
    );
    out.push_str(&header);
    out.push('\n');
    out.push_str(&"-".repeat(header.len()));
    out.push('\n');
    for r in rows {
        let p = r.per_pod;
        let f = |x: fn(&Requests) -> f64| p.as_ref().map_or_else(|| "-".into(), |p| format!("{:.2}", x(p)));
        let extra: Vec<String> =
            r.extra.iter().filter(|(k, _)| !k.ends_with("_429")).map(|(k, v)| format!("{k}={}", trim_float(*v))).collect();
        let ctl = if r.controller == "external" { "ext" } else { "op" };
        out.push_str(&format!(
            "{:<34} {:<6} {:<3} {:>5} {:>4} {:>4} {:>9} {:>9} {:>6} | {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} | {:>9} | {}\n",
            r.scenario,
            r.client,
            ctl,
            r.pods,
            r.clonesets,
            r.runs,
            opt(r.operator_s, 2),
            opt(r.baseline_s, 2),
            opt(r.ratio(), 2),
            f(|p| p.pod_create),
            f(|p| p.pod_patch),
            f(|p| p.pod_update),
            f(|p| p.pod_delete),
            f(|p| p.pod_status),
            f(|p| p.cs_status),
            f(|p| p.events),
            throttled(&r.extra),
            extra.join(" "),
        ));
    }
    out
}

/// The soak's CloneSets fall into this many groups; one group scales up and another down each
/// minute.
pub const SOAK_GROUPS: u32 = 10;
/// How many pods a soak scale-up adds to a CloneSet (and the scale-down takes away again).
pub const SOAK_SCALE_STEP: u32 = 2;

/// What minute `k` of the soak changes among `clonesets` CloneSets (by index).
#[derive(Clone, Debug, PartialEq)]
pub struct SoakTick {
    /// Scaled from P up to P + [`SOAK_SCALE_STEP`]: group `k % 10`.
    pub scale_up: Vec<u32>,
    /// Scaled back down to P: the group scaled up five minutes earlier.
    pub scale_down: Vec<u32>,
    /// The CloneSet whose image flips between two versions, in place.
    pub rollout: u32,
    /// Whether kube-apiserver restarts first, so every watch of the controller relists
    /// (every `relist_every` minutes; never when 0).
    pub relist: bool,
}

/// Minute `k` of the soak: see [`SoakTick`].
pub fn soak_tick(k: u32, clonesets: u32, relist_every: u32) -> SoakTick {
    let group = |g: u32| (0..clonesets).filter(|i| i % SOAK_GROUPS == g).collect::<Vec<_>>();
    SoakTick {
        scale_up: group(k % SOAK_GROUPS),
        scale_down: if k >= SOAK_GROUPS / 2 { group((k + SOAK_GROUPS / 2) % SOAK_GROUPS) } else { Vec::new() },
        rollout: k % clonesets.max(1),
        relist: relist_every > 0 && k > 0 && k.is_multiple_of(relist_every),
    }
}

/// The least-squares slope of `points` (x, y), in y per unit of x; `None` without two distinct x.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (points.len() >= 2 && sxx > 0.0).then(|| sxy / sxx)
}

fn trim_float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{v:.0}") } else { format!("{v:.2}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kruise's manager runs many controllers: only its CloneSet controller's queue and
    /// reconciles say whether the CloneSets are done.
    #[test]
    fn idle_is_judged_from_the_cloneset_controller_alone() {
        let kruise = |cloneset_depth: u32, other_depth: u32| {
            format!(
                "controller_runtime_reconcile_total{{controller=\"cloneset-controller\",result=\"success\"}} 501\n\
                 controller_runtime_reconcile_total{{controller=\"sidecarset-controller\",result=\"success\"}} 9000\n\
                 controller_runtime_active_workers{{controller=\"cloneset-controller\"}} 0\n\
                 workqueue_depth{{name=\"cloneset-controller\"}} {cloneset_depth}\n\
                 workqueue_depth{{name=\"sidecarset-controller\"}} {other_depth}\n"
            )
        };
        assert!(reconciled_and_idle(&kruise(0, 7), 501.0), "another controller's queue does not count");
        assert!(!reconciled_and_idle(&kruise(1, 0), 501.0));
        assert!(!reconciled_and_idle(&kruise(0, 0), 502.0), "other controllers' reconciles do not count");
        let ours = "controller_runtime_reconcile_total{controller=\"cloneset\",result=\"success\"} 3\n\
                    controller_runtime_active_workers{controller=\"cloneset\"} 0\n\
                    workqueue_depth{name=\"cloneset\",controller=\"cloneset\"} 0\n";
        assert!(reconciled_and_idle(ours, 3.0) && !reconciled_and_idle(ours, 4.0));
    }

    /// The heap figures split the RSS of the large rows: in use against kept free.
    #[test]
    fn the_heap_is_read_from_our_metrics_and_absent_for_kruise_s() {
        let ours = "# HELP heap_in_use_bytes Bytes in use\nheap_in_use_bytes 48003312\nheap_free_bytes 9193104\n\
                    heap_in_use_bytes_total 1\n";
        let extra = heap_extra(ours);
        assert_eq!(extra.get("heap_in_use_mib"), Some(&45.8));
        assert_eq!(extra.get("heap_free_mib"), Some(&8.8));
        assert_eq!(extra.len(), 2);
        let kruise = "go_memstats_heap_inuse_bytes 5.8e+08\nprocess_resident_memory_bytes 6.1e+08\n";
        assert!(heap_extra(kruise).is_empty(), "{:?}", heap_extra(kruise));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn requests_by_kind_from_metrics() {
        let text = "\
# TYPE rest_client_requests counter
rest_client_requests_total{code=\"201\",method=\"POST\",resource=\"pods\",subresource=\"\"} 100
rest_client_requests_total{code=\"409\",method=\"POST\",resource=\"pods\",subresource=\"\"} 2
rest_client_requests_total{code=\"200\",method=\"PATCH\",resource=\"pods\",subresource=\"status\"} 7
rest_client_requests_total{code=\"200\",method=\"PATCH\",resource=\"pods\",subresource=\"\"} 9
rest_client_requests_total{code=\"200\",method=\"PATCH\",resource=\"clonesets\",subresource=\"status\"} 3
rest_client_requests_total{code=\"201\",method=\"POST\",resource=\"events\",subresource=\"\"} 50
rest_client_requests_total{code=\"201\",method=\"POST\",resource=\"controllerrevisions\",subresource=\"\"} 1
rest_client_requests_total{code=\"200\",method=\"GET\",resource=\"pods\",subresource=\"\"} 4
rest_client_requests_total{code=\"200\",method=\"DELETE\",resource=\"pods\",subresource=\"\"} 5
controller_runtime_reconcile_total{controller=\"cloneset\",result=\"success\"} 12
controller_runtime_reconcile_total{controller=\"cloneset\",result=\"requeue_after\"} 3
";
        let r = Requests::from_metrics(text);
        assert_eq!(
            r,
            Requests {
                pod_create: 102.0,
                pod_patch: 9.0,
                pod_update: 0.0,
                pod_delete: 5.0,
                pod_status: 7.0,
                cs_status: 3.0,
                events: 50.0,
                other_writes: 1.0,
                reads: 4.0
            }
        );
        assert_eq!(r.writes(), 177.0);
        assert_eq!(r.pod_writes(), 123.0);
        assert_eq!(r.since(&r).writes(), 0.0);
        assert_eq!(r.per(2.0).pod_create, 51.0);
        assert_eq!(metric_sum(text, "controller_runtime_reconcile_total"), 15.0);
    }

    #[test]
    fn a_phase_s_reconciles_are_the_cloneset_controller_s() {
        let at = |ours: f64, secs: f64, kruise_other: f64| {
            Snapshot::from_metrics(&format!(
                "controller_runtime_reconcile_total{{controller=\"cloneset\",result=\"success\"}} {ours}\n\
                 controller_runtime_reconcile_total{{controller=\"cloneset\",result=\"requeue_after\"}} 1\n\
                 controller_runtime_reconcile_total{{controller=\"sidecarset-controller\",result=\"success\"}} {kruise_other}\n\
                 controller_runtime_reconcile_time_seconds_sum{{controller=\"cloneset\"}} {secs}\n\
                 controller_runtime_reconcile_time_seconds_count{{controller=\"cloneset\"}} 99\n"
            ))
        };
        let phase = at(501.0, 2.5, 9000.0).since(&at(1.0, 0.5, 10.0));
        assert_eq!(
            phase.reconcile_extra(),
            [("reconciles".to_string(), 500.0), ("reconcile_s".to_string(), 2.0), ("reconcile_mean_ms".to_string(), 4.0)].into()
        );
    }

    #[test]
    fn proc_readings() {
        let status = "Name:\tcloneset-operator\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(rss_from_status(status), (10 * 1024 * 1024, 20 * 1024 * 1024));
        let stat = "1234 (clone set) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0";
        assert_eq!(cpu_ticks_from_stat(stat), Some(300));
    }

    #[test]
    fn a_large_rollout_s_ratio_is_against_the_baseline_among_the_same_idle_pods() {
        let mut row = Row::operator_only("large: rollout 1000 with 500 idle", "none", 1000, 501, 57.6);
        assert_eq!(row.ratio(), None, "no baseline yet");
        row.add_baseline(48.0, [("baseline_429".to_string(), 0.0)].into());
        assert_eq!(row.ratio(), Some(1.2));
        assert_eq!(row.extra.get("baseline_429"), Some(&0.0));
        let t = table(std::slice::from_ref(&row));
        assert!(t.lines().nth(2).is_some_and(|l| l.contains(" 48.00 ") && l.contains(" 1.20 ")), "{t}");
    }

    #[test]
    fn table_and_json_round_trip() {
        let row = Row {
            scenario: "scale-up".into(),
            client: client_label(Some((30.0, 50))),
            controller: "operator".into(),
            pods: 100,
            clonesets: 1,
            runs: 3,
            operator_s: Some(6.0),
            baseline_s: Some(4.0),
            per_pod: Some(Requests { pod_create: 1.0, ..Default::default() }),
            extra: [("peak_rss_mib".to_string(), 12.5), ("operator_429".to_string(), 0.0), ("baseline_429".to_string(), 7.0)].into(),
        };
        let t = table(std::slice::from_ref(&row));
        let line = t.lines().nth(2).unwrap();
        assert!(line.starts_with("scale-up"), "{t}");
        assert!(
            line.contains(" 6.00 ") && line.contains(" 4.00 ") && line.contains(" 1.50 ") && line.contains("peak_rss_mib=12.50"),
            "{t}"
        );
        assert!(line.contains(" 30/50 ") && line.contains(" op ") && line.contains(" 0/7 |"), "{t}");
        assert!(!line.contains("operator_429="), "429s have their own column: {t}");
        let report = Report { format: FORMAT_VERSION, rows: vec![row], ..Default::default() };
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), report);
        // A version 1 row (no client, no controller) still reads.
        let v1: Row =
            serde_json::from_str(r#"{"scenario":"s","pods":1,"clonesets":1,"runs":1,"operator_s":1.0,"baseline_s":null,"per_pod":null}"#)
                .unwrap();
        assert_eq!((v1.client.as_str(), v1.controller.as_str()), ("", ""));
    }

    #[test]
    fn pairs_parse() {
        assert_eq!(pairs("100x3,1000x1").unwrap(), vec![(100, 3), (1000, 1)]);
        assert_eq!(pairs("").unwrap(), vec![]);
        assert_eq!(pairs(" 5000x1 ,").unwrap(), vec![(5000, 1)]);
        assert!(pairs("100").is_err());
        assert!(pairs("ax1").is_err());
        assert_eq!(pair("500x40").unwrap(), (500, 40));
    }

    #[test]
    fn snapshots_count_429s_and_writes_by_method() {
        // client-go's metric: code, host and method only.
        let go = "\
rest_client_requests_total{code=\"201\",host=\"10.0.0.1:6443\",method=\"POST\"} 120
rest_client_requests_total{code=\"429\",host=\"10.0.0.1:6443\",method=\"POST\"} 3
rest_client_requests_total{code=\"200\",host=\"10.0.0.1:6443\",method=\"PATCH\"} 200
rest_client_requests_total{code=\"200\",host=\"10.0.0.1:6443\",method=\"GET\"} 40
";
        let s = Snapshot::from_metrics(go);
        assert!(!s.per_resource);
        assert_eq!(s.throttled, 3.0);
        assert_eq!(s.writes_by_method, [("PATCH".to_string(), 200.0), ("POST".to_string(), 123.0)].into());
        assert_eq!(s.per_pod(100.0), None);
        assert_eq!(s.method_extra(100.0), [("writes_patch_per_pod".to_string(), 2.0), ("writes_post_per_pod".to_string(), 1.23)].into());
        let zero = s.since(&s);
        assert_eq!((zero.throttled, zero.writes_by_method["POST"]), (0.0, 0.0));

        let ours = "rest_client_requests_total{code=\"429\",host=\"h\",method=\"PATCH\",resource=\"pods\",subresource=\"status\"} 2\n";
        let s = Snapshot::from_metrics(ours);
        assert!(s.per_resource);
        assert_eq!((s.throttled, s.requests.pod_status), (2.0, 2.0));
        assert!(s.method_extra(1.0).is_empty());
        assert_eq!(s.per_pod(2.0).unwrap().pod_status, 1.0);
        assert_eq!(Snapshot::from_metrics("").throttled, 0.0);
    }

    #[test]
    fn snapshots_give_each_verbs_mean_latency_over_a_phase() {
        let text = |post_sum: f64, post_count: u32| {
            format!(
                "rest_client_request_duration_seconds_sum{{verb=\"POST\",host=\"h\"}} {post_sum}\n\
                 rest_client_request_duration_seconds_count{{verb=\"POST\",host=\"h\"}} {post_count}\n\
                 rest_client_request_duration_seconds_bucket{{le=\"0.005\",verb=\"POST\",host=\"h\"}} 0\n"
            )
        };
        let before = Snapshot::from_metrics(&text(1.0, 10));
        let after = Snapshot::from_metrics(&text(4.0, 40));
        assert_eq!(after.since(&before).latency_extra("baseline_"), [("baseline_latency_post_ms".to_string(), 100.0)].into());
        assert!(Snapshot::from_metrics("").latency_extra("").is_empty());
    }

    #[test]
    fn the_machine_is_busy_but_for_idle_and_iowait() {
        let stat = "cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n";
        assert_eq!(machine_ticks(stat), Some((160, 980)));
        assert_eq!(machine_ticks("intr 1"), None);
    }

    #[test]
    fn extras_merge_over_runs() {
        let mut row = BTreeMap::new();
        for (r429, rss, w) in [(2.0, 30.0, 1.0), (3.0, 25.0, 2.0)] {
            let run: BTreeMap<String, f64> =
                [("operator_429".into(), r429), ("rss_after_mib".into(), rss), ("baseline_writes_per_pod".into(), w)].into();
            merge_extra(&mut row, &run);
        }
        assert_eq!(row["operator_429"], 5.0);
        assert_eq!(row["rss_after_mib"], 30.0);
        assert_eq!(row["baseline_writes_per_pod"], 2.0);
    }

    #[test]
    fn probe_bound_and_client_labels() {
        assert_eq!(probe_bound_s(10.0), 30.0);
        assert_eq!(probe_bound_s(100.0), 50.0);
        assert_eq!(client_label(None), "none");
        assert_eq!(client_label(Some((30.0, 50))), "30/50");
        assert_eq!(client_label(Some((7.5, 15))), "7.50/15");
    }

    #[test]
    fn every_soak_minute_scales_some_clonesets_up_and_others_down() {
        let (c, p) = (100u32, 40u32);
        let mut replicas = vec![p; c as usize];
        for k in 0..60 {
            let t = soak_tick(k, c, 30);
            assert_eq!(t.scale_up.len(), 10, "minute {k}");
            assert_eq!(t.scale_down.len(), if k < 5 { 0 } else { 10 }, "minute {k}");
            for &i in &t.scale_down {
                assert_eq!(replicas[i as usize], p + SOAK_SCALE_STEP, "minute {k}: cs {i} goes down only after it went up");
                replicas[i as usize] = p;
            }
            for &i in &t.scale_up {
                assert_eq!(replicas[i as usize], p, "minute {k}: cs {i} goes up only from P");
                replicas[i as usize] = p + SOAK_SCALE_STEP;
            }
            assert!(t.rollout < c);
            assert_eq!(t.relist, k == 30, "minute {k}");
        }
        // Half the groups are up at any minute after the first five.
        assert_eq!(replicas.iter().filter(|&&r| r > p).count(), 50);
        assert!(!soak_tick(30, c, 0).relist, "0 turns relists off");
        assert_eq!((soak_tick(0, 1, 30).scale_up, soak_tick(3, 1, 30).scale_up), (vec![0], vec![]), "one CloneSet is group 0");
    }

    #[test]
    fn slopes_fit_a_line_through_noise() {
        let line: Vec<(f64, f64)> = (0..10).map(|x| (f64::from(x), 3.0 * f64::from(x) + 1.0)).collect();
        assert!((slope(&line).unwrap() - 3.0).abs() < 1e-9);
        let noisy: Vec<(f64, f64)> = (0..100).map(|x| (f64::from(x), 5.0 + if x % 2 == 0 { 0.5 } else { -0.5 })).collect();
        assert!(slope(&noisy).unwrap().abs() < 0.01);
        assert_eq!(slope(&[(1.0, 2.0)]), None);
        assert_eq!(slope(&[(1.0, 2.0), (1.0, 3.0)]), None);
    }

    #[test]
    fn apiserver_bytes_count_list_responses_and_watch_events() {
        let text = "apiserver_response_sizes_sum{component=\"apiserver\",resource=\"pods\",verb=\"LIST\"} 1000\n\
                    apiserver_response_sizes_count{component=\"apiserver\",resource=\"pods\",verb=\"LIST\"} 2\n\
                    apiserver_response_sizes_sum{component=\"apiserver\",resource=\"nodes\",verb=\"GET\"} 50\n\
                    apiserver_watch_events_sizes_sum{group=\"\",resource=\"pods\",version=\"v1\"} 4000\n\
                    apiserver_watch_events_sizes_bucket{group=\"\",resource=\"pods\",version=\"v1\",le=\"1024\"} 3\n";
        assert_eq!(apiserver_bytes_sent(text), 5050.0);
    }

    #[test]
    fn apiserver_pod_conflicts_count_409s_on_pods_alone() {
        let text = "apiserver_request_total{code=\"409\",component=\"apiserver\",resource=\"pods\",subresource=\"status\",verb=\"PATCH\"} 30\n\
                    apiserver_request_total{code=\"409\",component=\"apiserver\",resource=\"pods\",subresource=\"\",verb=\"POST\"} 2\n\
                    apiserver_request_total{code=\"200\",component=\"apiserver\",resource=\"pods\",subresource=\"status\",verb=\"PATCH\"} 900\n\
                    apiserver_request_total{code=\"409\",component=\"apiserver\",resource=\"clonesets\",subresource=\"status\",verb=\"PUT\"} 7\n";
        assert_eq!(apiserver_pod_conflicts(text), 32.0);
    }
}
