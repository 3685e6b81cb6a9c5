//! Pure parts of `make bench` (the driver is `src/bin/bench.rs`): medians, the operator's
//! request counts by verb from its `/metrics` text, /proc readings, and the table and JSON the
//! bench prints and writes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the JSON layout of [`Report`].
pub const FORMAT_VERSION: u32 = 1;

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
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("rest_client_requests_total{") else { continue };
            let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
            let Ok(value) = value.trim().parse::<f64>() else { continue };
            let labels = parse_labels(labels);
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
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with('{') || r.starts_with(' ')))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// From the operator's metrics: it has reconciled at least `reconciles` times, its queue is
/// empty and no worker is busy — everything it was going to do about the current state is done.
pub fn reconciled_and_idle(text: &str, reconciles: f64) -> bool {
    metric_sum(text, "controller_runtime_reconcile_total") >= reconciles
        && metric_sum(text, "workqueue_depth") == 0.0
        && metric_sum(text, "controller_runtime_active_workers") == 0.0
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

/// One line of the table: a timed scenario against its baseline, or a resource reading.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `scale-up`, `rollout recreate 100%`, `resources`, `startup`, …
    pub scenario: String,
    /// Pods involved.
    pub pods: u32,
    /// CloneSets involved.
    pub clonesets: u32,
    /// Repetitions the times are the median of.
    pub runs: u32,
    /// Operator time in seconds (median).
    pub operator_s: Option<f64>,
    /// Direct-client baseline in seconds (median).
    pub baseline_s: Option<f64>,
    /// Operator requests per pod (the run the median came from is not tracked: per-run counts
    /// are deterministic up to status writes; this is the last run's).
    pub per_pod: Option<Requests>,
    /// Other figures: `peak_rss_mib`, `steady_rss_mib`, `cpu_s`, `bytes_per_pod`,
    /// `writes_after_restart`, …
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
}

impl Row {
    pub fn ratio(&self) -> Option<f64> {
        match (self.operator_s, self.baseline_s) {
            (Some(o), Some(b)) if b > 0.0 => Some(o / b),
            _ => None,
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
    pub qps: f64,
    pub burst: u32,
    pub cpus: usize,
    /// git describe of the tree measured, if available.
    pub revision: String,
    pub rows: Vec<Row>,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"))
}

/// The table printed at the end of a run.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let header = format!(
        "{:<28} {:>5} {:>4} {:>4} {:>9} {:>9} {:>6} | {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} | {}",
        "scenario",
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
        "other"
    );
    out.push_str(&header);
    out.push('\n');
    out.push_str(&"-".repeat(header.len()));
    out.push('\n');
    for r in rows {
        let p = r.per_pod;
        let f = |x: fn(&Requests) -> f64| p.as_ref().map_or_else(|| "-".into(), |p| format!("{:.2}", x(p)));
        let extra: Vec<String> = r.extra.iter().map(|(k, v)| format!("{k}={}", trim_float(*v))).collect();
        out.push_str(&format!(
            "{:<28} {:>5} {:>4} {:>4} {:>9} {:>9} {:>6} | {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} | {}\n",
            r.scenario,
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
            extra.join(" "),
        ));
    }
    out
}

fn trim_float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{v:.0}") } else { format!("{v:.2}") }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn proc_readings() {
        let status = "Name:\tcloneset-operator\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(rss_from_status(status), (10 * 1024 * 1024, 20 * 1024 * 1024));
        let stat = "1234 (clone set) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0";
        assert_eq!(cpu_ticks_from_stat(stat), Some(300));
    }

    #[test]
    fn table_and_json_round_trip() {
        let row = Row {
            scenario: "scale-up".into(),
            pods: 100,
            clonesets: 1,
            runs: 3,
            operator_s: Some(6.0),
            baseline_s: Some(4.0),
            per_pod: Some(Requests { pod_create: 1.0, ..Default::default() }),
            extra: [("peak_rss_mib".to_string(), 12.5)].into(),
        };
        let t = table(std::slice::from_ref(&row));
        let line = t.lines().nth(2).unwrap();
        assert!(line.starts_with("scale-up"), "{t}");
        assert!(
            line.contains(" 6.00 ") && line.contains(" 4.00 ") && line.contains(" 1.50 ") && line.contains("peak_rss_mib=12.50"),
            "{t}"
        );
        let report = Report { format: FORMAT_VERSION, rows: vec![row], ..Default::default() };
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), report);
    }
}
