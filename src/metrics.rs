//! Prometheus metrics, named as controller-runtime and Kruise name them so existing Kruise
//! dashboards and alerts keep working. One [`Metrics`] value is created in `main` and passed
//! down (no global registry); `/metrics` serves [`Metrics::encode`].
//!
//! Every metric, its labels and what it means: docs/reference/metrics.md (a test holds that page's
//! table to what [`Metrics::encode`] serves).
//!
//! `cloneset_scale_expectation_leakage` is a counter in Kruise, exposed there without a `_total`
//! suffix. OpenMetrics requires counter samples to end in `_total`, so to keep Kruise's exact
//! name it is typed as a gauge here; its value is the same ever-growing count of scale
//! expectations that timed out, and `increase()`/`rate()` work on it unchanged.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::procfs::ProcessCollector;

/// The `controller` label value (controller-runtime uses the controller's name; Kruise's is `cloneset`).
pub(crate) const CONTROLLER: &str = "cloneset";

/// The Content-Type of [`Metrics::encode`]'s output.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub controller: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct QueueLabels {
    pub name: &'static str,
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub code: String,
    /// The apiserver's `host:port`.
    pub host: String,
    pub method: String,
    /// The API resource (`pods`, `clonesets`, `events`, …; `""` for non-resource paths).
    pub resource: String,
    /// The subresource (`status`, `scale`, …; `""` for the object itself).
    pub subresource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LatencyLabels {
    pub verb: String,
    /// The apiserver's `host:port`.
    pub host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct NameLabels {
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ObjectLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BuildLabels {
    pub version: &'static str,
    pub revision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StatusLabels {
    pub namespace: String,
    pub name: String,
    pub state: &'static str,
}

/// The status counts `cloneset_status_replicas` publishes, by its `state` label.
pub(crate) const STATUS_STATES: [&str; 6] = ["replicas", "ready", "available", "updated", "updated_ready", "expected_updated"];

/// How one reconcile ended, as controller-runtime labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    Success,
    Error,
    /// Requeued now (controller-runtime's `Requeue: true`).
    Requeue,
    /// Requeued after a delay.
    RequeueAfter,
}

impl ReconcileResult {
    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Requeue => "requeue",
            Self::RequeueAfter => "requeue_after",
        }
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// controller-runtime's reconcile-time buckets (seconds).
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0,
    3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
];

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS.iter().copied())
}

/// client-go's request-latency buckets (seconds).
const REQUEST_BUCKETS: &[f64] = &[0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0];

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS.iter().copied())
}

/// client-go's work-queue buckets: 10ns to 1000s, ×10 each.
fn queue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 12))
}

/// The metrics one work queue updates (client-go's workqueue metrics provider). Clones share
/// their values; [`QueueMetrics::default`] makes unregistered ones (for tests).
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    pub depth: Gauge,
    pub adds: Counter,
    pub retries: Counter,
    pub queue_duration: Histogram,
    pub work_duration: Histogram,
    /// Seconds of work in progress that has not been observed in `work_duration` yet.
    pub unfinished_work: SecondsGauge,
    /// How long the longest-running processor has been at its key.
    pub longest_running: SecondsGauge,
}

/// A gauge of seconds (a float).
pub(crate) type SecondsGauge = Gauge<f64, AtomicU64>;

impl Default for QueueMetrics {
    fn default() -> Self {
        Self {
            depth: Gauge::default(),
            adds: Counter::default(),
            retries: Counter::default(),
            queue_duration: queue_histogram(),
            work_duration: queue_histogram(),
            unfinished_work: SecondsGauge::default(),
            longest_running: SecondsGauge::default(),
        }
    }
}

/// Every metric the operator exports, and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: HistogramFamily<ControllerLabels>,
    max_concurrent_reconciles: Family<ControllerLabels, Gauge>,
    active_workers: Family<ControllerLabels, Gauge>,
    queue_depth: Family<QueueLabels, Gauge>,
    queue_adds: Family<QueueLabels, Counter>,
    queue_retries: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    unfinished_work: Family<QueueLabels, SecondsGauge>,
    longest_running: Family<QueueLabels, SecondsGauge>,
    rest_requests: Family<RequestLabels, Counter>,
    request_latency: HistogramFamily<LatencyLabels>,
    expectation_leakage: Family<ObjectLabels, Gauge>,
    status_replicas: Family<StatusLabels, Gauge>,
    is_leader: Gauge,
    master_status: Family<NameLabels, Gauge>,
    standing_by_for_kruise: Gauge,
    pod_updates_unread: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconcile_total = Family::<ResultLabels, Counter>::default();
        let reconcile_errors = Family::<ControllerLabels, Counter>::default();
        let reconcile_time: HistogramFamily<ControllerLabels> = Family::new_with_constructor(reconcile_histogram);
        let max_concurrent_reconciles = Family::<ControllerLabels, Gauge>::default();
        let active_workers = Family::<ControllerLabels, Gauge>::default();
        let queue_depth = Family::<QueueLabels, Gauge>::default();
        let queue_adds = Family::<QueueLabels, Counter>::default();
        let queue_retries = Family::<QueueLabels, Counter>::default();
        let queue_duration: HistogramFamily<QueueLabels> = Family::new_with_constructor(queue_histogram);
        let work_duration: HistogramFamily<QueueLabels> = Family::new_with_constructor(queue_histogram);
        let unfinished_work = Family::<QueueLabels, SecondsGauge>::default();
        let longest_running = Family::<QueueLabels, SecondsGauge>::default();
        let rest_requests = Family::<RequestLabels, Counter>::default();
        let request_latency: HistogramFamily<LatencyLabels> = Family::new_with_constructor(request_histogram);
        let expectation_leakage = Family::<ObjectLabels, Gauge>::default();
        let status_replicas = Family::<StatusLabels, Gauge>::default();
        let is_leader = Gauge::default();
        let master_status = Family::<NameLabels, Gauge>::default();
        let standing_by_for_kruise = Gauge::default();
        let pod_updates_unread = Counter::default();

        // Counters are registered without `_total`: the encoder appends it.
        registry.register("controller_runtime_reconcile", "Total number of reconciliations per controller", reconcile_total.clone());
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            reconcile_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            reconcile_time.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            max_concurrent_reconciles.clone(),
        );
        registry.register("controller_runtime_active_workers", "Number of currently used workers per controller", active_workers.clone());
        registry.register("workqueue_depth", "Current depth of workqueue", queue_depth.clone());
        registry.register("workqueue_adds", "Total number of adds handled by workqueue", queue_adds.clone());
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            work_duration.clone(),
        );
        registry.register("workqueue_retries", "Total number of retries handled by workqueue", queue_retries.clone());
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
            unfinished_work.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            longest_running.clone(),
        );
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            rest_requests.clone(),
        );
        registry.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds, from the request leaving the client's in-flight limit to its response's headers (watches not counted). Broken down by verb, and host.",
            request_latency.clone(),
        );
        registry.register(
            "cloneset_scale_expectation_leakage",
            "CloneSet scale expectations that timed out (a counter in Kruise; see the operator's metrics docs)",
            expectation_leakage.clone(),
        );
        registry.register(
            "cloneset_status_replicas",
            "A CloneSet's status counts as last computed, by state (replicas, ready, available, updated, updated_ready, expected_updated)",
            status_replicas.clone(),
        );
        registry.register("kruise_manager_is_leader", "Whether this manager is the leader (1) or not (0)", is_leader.clone());
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            master_status.clone(),
        );
        registry.register(
            "cloneset_operator_standing_by_for_kruise",
            "1 while a running Kruise manager (its renewed leader-election Lease) keeps this operator from reconciling",
            standing_by_for_kruise.clone(),
        );
        registry.register(
            "cloneset_operator_pod_updates_unread",
            "Pod updates that changed only the resourceVersion and annotations no decision reads, so queued no reconcile",
            pod_updates_unread.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info.get_or_create(&BuildLabels { version: crate::build_info::VERSION, revision: crate::build_info::REVISION }).set(1);
        registry.register(
            "cloneset_operator_build_info",
            "Always 1; its labels name the operator's release and the source revision it was built from",
            build_info,
        );
        registry.register_collector(Box::new(ProcessCollector));
        registry.register_collector(Box::new(RuntimeCollector));
        registry.register_collector(Box::new(HeapCollector));

        Self {
            registry,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            max_concurrent_reconciles,
            active_workers,
            queue_depth,
            queue_adds,
            queue_retries,
            queue_duration,
            work_duration,
            unfinished_work,
            longest_running,
            rest_requests,
            request_latency,
            expectation_leakage,
            status_replicas,
            is_leader,
            master_status,
            standing_by_for_kruise,
            pod_updates_unread,
        }
    }

    /// The registry in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The CloneSet work queue's metrics (labels `name` and `controller` = `cloneset`).
    pub fn queue(&self) -> QueueMetrics {
        let l = QueueLabels { name: CONTROLLER, controller: CONTROLLER };
        QueueMetrics {
            depth: self.queue_depth.get_or_create_owned(&l),
            adds: self.queue_adds.get_or_create_owned(&l),
            retries: self.queue_retries.get_or_create_owned(&l),
            queue_duration: self.queue_duration.get_or_create_owned(&l),
            work_duration: self.work_duration.get_or_create_owned(&l),
            unfinished_work: self.unfinished_work.get_or_create_owned(&l),
            longest_running: self.longest_running.get_or_create_owned(&l),
        }
    }

    fn controller() -> ControllerLabels {
        ControllerLabels { controller: CONTROLLER }
    }

    /// Publishes the worker count, and zeroes the series dashboards expect to exist.
    pub fn set_max_concurrent_reconciles(&self, workers: usize) {
        self.max_concurrent_reconciles.get_or_create(&Self::controller()).set(i64::try_from(workers).unwrap_or(i64::MAX));
        self.active_workers.get_or_create_owned(&Self::controller());
        self.reconcile_errors.get_or_create_owned(&Self::controller());
        for r in [ReconcileResult::Success, ReconcileResult::Error, ReconcileResult::Requeue, ReconcileResult::RequeueAfter] {
            self.reconcile_total.get_or_create_owned(&ResultLabels { controller: CONTROLLER, result: r.label() });
        }
    }

    /// A worker started (`+1`) or finished (`-1`) a reconcile.
    pub fn active_workers(&self, delta: i64) {
        self.active_workers.get_or_create(&Self::controller()).inc_by(delta);
    }

    /// Records one finished reconcile.
    pub fn reconciled(&self, result: ReconcileResult, took: std::time::Duration) {
        self.reconcile_total.get_or_create(&ResultLabels { controller: CONTROLLER, result: result.label() }).inc();
        if result == ReconcileResult::Error {
            self.reconcile_errors.get_or_create(&Self::controller()).inc();
        }
        self.reconcile_time.get_or_create(&Self::controller()).observe(took.as_secs_f64());
    }

    /// Counts one request to the apiserver at `host` (every attempt, retries included) by
    /// status code, method and the resource and subresource of `path` (see [`resource_of`]).
    pub fn request(&self, host: &str, method: &http::Method, path: &str, status: Option<http::StatusCode>) {
        let code = status.map_or_else(|| "<error>".to_string(), |s| s.as_u16().to_string());
        let (resource, subresource) = resource_of(path);
        let labels = RequestLabels {
            code,
            host: host.to_string(),
            method: method.as_str().to_string(),
            resource: resource.into(),
            subresource: subresource.into(),
        };
        self.rest_requests.get_or_create(&labels).inc();
    }

    /// One request's latency: `seconds` from leaving the in-flight limit to its response's
    /// headers (or its failure).
    pub fn request_latency(&self, host: &str, method: &http::Method, seconds: f64) {
        let labels = LatencyLabels { verb: method.as_str().to_string(), host: host.to_string() };
        self.request_latency.get_or_create(&labels).observe(seconds);
    }

    /// A scale expectation of CloneSet `namespace/name` timed out.
    /// Publishes a CloneSet's status counts, in the order of [`STATUS_STATES`].
    pub fn set_status(&self, namespace: &str, name: &str, counts: [i32; 6]) {
        for (state, value) in STATUS_STATES.into_iter().zip(counts) {
            let labels = StatusLabels { namespace: namespace.to_string(), name: name.to_string(), state };
            self.status_replicas.get_or_create(&labels).set(i64::from(value));
        }
    }

    /// Drops a deleted CloneSet's status series.
    pub(crate) fn forget_status(&self, namespace: &str, name: &str) {
        for state in STATUS_STATES {
            self.status_replicas.remove(&StatusLabels { namespace: namespace.to_string(), name: name.to_string(), state });
        }
    }

    pub fn expectation_leaked(&self, key: &str) {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        self.expectation_leakage.get_or_create(&ObjectLabels { namespace: namespace.to_string(), name: name.to_string() }).inc();
    }

    /// Whether this instance leads; `lease`: the leader-election Lease's name, when there is one
    /// (`leader_election_master_status` exists only with leader election, as in client-go).
    pub fn set_leader(&self, leader: bool, lease: Option<&str>) {
        self.is_leader.set(i64::from(leader));
        if let Some(name) = lease {
            self.master_status.get_or_create(&NameLabels { name: name.to_string() }).set(i64::from(leader));
        }
    }

    pub(crate) fn set_standing_by_for_kruise(&self, standing_by: bool) {
        self.standing_by_for_kruise.set(i64::from(standing_by));
    }

    pub(crate) fn pod_update_unread(&self) {
        self.pod_updates_unread.inc();
    }
}

/// The resource and subresource a Kubernetes API path addresses:
/// `/api/v1/namespaces/ns/pods/p/status` → (`pods`, `status`), `/apis/g/v/clonesets` →
/// (`clonesets`, `""`), `/api/v1/namespaces/ns` → (`namespaces`, `""`). Other paths → (`""`, `""`).
pub(crate) fn resource_of(path: &str) -> (&str, &str) {
    let path = path.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return ("", ""),
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    match rest {
        [resource] | [resource, _] => (resource, ""),
        [resource, _, sub, ..] => (resource, sub),
        [] => ("", ""),
    }
}

/// `tokio_alive_tasks`, read at each scrape from the runtime the scrape runs on (left out when
/// encoded outside one). A task count that only grows is a leak that RSS shows late.
#[derive(Debug)]
struct RuntimeCollector;

impl prometheus_client::collector::Collector for RuntimeCollector {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return Ok(()) };
        let tasks = prometheus_client::metrics::gauge::ConstGauge::new(handle.metrics().num_alive_tasks() as i64);
        tasks.encode(encoder.encode_descriptor(
            "tokio_alive_tasks",
            "Number of alive tasks in the async runtime (the counterpart of go_goroutines).",
            None,
            tasks.metric_type(),
        )?)
    }
}

/// `heap_in_use_bytes` and `heap_free_bytes`, read from the allocator at each scrape (left out
/// if it cannot tell).
#[derive(Debug)]
struct HeapCollector;

impl prometheus_client::collector::Collector for HeapCollector {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        let Some(usage) = crate::heap::usage() else { return Ok(()) };
        for (name, help, bytes) in [
            (
                "heap_in_use_bytes",
                "Bytes the allocator has handed out and not had back (the counterpart of go_memstats_heap_inuse_bytes).",
                usage.in_use,
            ),
            (
                "heap_free_bytes",
                "Bytes the allocator keeps resident beyond those in use: free space in its pages, pages not yet returned, its metadata (the counterpart of go_memstats_heap_idle_bytes).",
                usage.free,
            ),
        ] {
            let gauge = prometheus_client::metrics::gauge::ConstGauge::new(i64::try_from(bytes).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn names_match_controller_runtime_and_kruise() {
        let m = Metrics::new();
        m.set_max_concurrent_reconciles(3);
        m.reconciled(ReconcileResult::Success, Duration::from_millis(20));
        m.reconciled(ReconcileResult::Error, Duration::from_millis(20));
        let q = m.queue();
        q.adds.inc();
        q.depth.set(2);
        q.queue_duration.observe(0.5);
        m.request("10.0.0.1:6443", &http::Method::POST, "/api/v1/namespaces/ns/pods", Some(http::StatusCode::CREATED));
        m.request("10.0.0.1:6443", &http::Method::GET, "/apis/apps.kruise.io/v1alpha1/clonesets?watch=true", None);
        m.expectation_leaked("ns/web");
        m.set_leader(true, Some("cloneset-operator-leader"));
        m.set_standing_by_for_kruise(true);
        q.unfinished_work.set(1.5);
        q.longest_running.set(0.75);
        let text = m.encode();
        for line in [
            "controller_runtime_reconcile_total{controller=\"cloneset\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"cloneset\",result=\"requeue_after\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"cloneset\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"cloneset\"} 2",
            "controller_runtime_max_concurrent_reconciles{controller=\"cloneset\"} 3",
            "controller_runtime_active_workers{controller=\"cloneset\"} 0",
            "workqueue_depth{name=\"cloneset\",controller=\"cloneset\"} 2",
            "workqueue_adds_total{name=\"cloneset\",controller=\"cloneset\"} 1",
            "workqueue_retries_total{name=\"cloneset\",controller=\"cloneset\"} 0",
            "workqueue_queue_duration_seconds_count{name=\"cloneset\",controller=\"cloneset\"} 1",
            "workqueue_work_duration_seconds_count{name=\"cloneset\",controller=\"cloneset\"} 0",
            "workqueue_unfinished_work_seconds{name=\"cloneset\",controller=\"cloneset\"} 1.5",
            "workqueue_longest_running_processor_seconds{name=\"cloneset\",controller=\"cloneset\"} 0.75",
            "rest_client_requests_total{code=\"201\",host=\"10.0.0.1:6443\",method=\"POST\",resource=\"pods\",subresource=\"\"} 1",
            "rest_client_requests_total{code=\"<error>\",host=\"10.0.0.1:6443\",method=\"GET\",resource=\"clonesets\",subresource=\"\"} 1",
            "cloneset_scale_expectation_leakage{namespace=\"ns\",name=\"web\"} 1",
            "kruise_manager_is_leader 1",
            "leader_election_master_status{name=\"cloneset-operator-leader\"} 1",
            "cloneset_operator_standing_by_for_kruise 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        let build = format!(
            "cloneset_operator_build_info{{version=\"{}\",revision=\"{}\"}} 1",
            crate::build_info::VERSION,
            crate::build_info::REVISION
        );
        assert!(text.lines().any(|l| l == build), "missing {build:?} in\n{text}");
        assert!(text.ends_with("# EOF\n"));
    }

    #[tokio::test]
    async fn alive_tasks_are_counted_at_each_scrape() {
        let m = Metrics::new();
        let tasks = |text: &str| -> i64 {
            let line =
                text.lines().find(|l| l.starts_with("tokio_alive_tasks ")).unwrap_or_else(|| panic!("no tokio_alive_tasks in\n{text}"));
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        let before = tasks(&m.encode());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let parked = tokio::spawn(async move {
            let _ = stopped.await;
        });
        assert_eq!(tasks(&m.encode()), before + 1, "a spawned task is counted");
        stop.send(()).unwrap();
        parked.await.unwrap();
        assert_eq!(tasks(&m.encode()), before, "a finished task is not");
        // Outside a runtime there is nothing to count, and the scrape still succeeds.
        let text = std::thread::spawn(move || m.encode()).join().unwrap();
        assert!(!text.contains("tokio_alive_tasks") && text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn the_heap_is_read_at_each_scrape() {
        // This test binary allocates through the system's allocator: hold a block of the
        // operator's, so there is something in use to count.
        let layout = std::alloc::Layout::from_size_align(1 << 20, 8).unwrap();
        // SAFETY: a non-zero size; freed below with the same layout.
        let block = unsafe { std::alloc::GlobalAlloc::alloc(&crate::heap::Allocator {}, layout) };
        let text = Metrics::new().encode();
        // SAFETY: allocated above by the same allocator with the same layout.
        unsafe { std::alloc::GlobalAlloc::dealloc(&crate::heap::Allocator {}, block, layout) };
        let value =
            |name: &str| -> Option<f64> { text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')).map(|v| v.parse().unwrap()) };
        if crate::heap::usage().is_some() {
            assert!(value("heap_in_use_bytes").is_some_and(|v| v > 0.0), "{text}");
            assert!(value("heap_free_bytes").is_some(), "{text}");
        } else {
            assert!(!text.contains("heap_in_use_bytes"), "{text}");
        }
    }

    #[test]
    fn request_paths_name_their_resource_and_subresource() {
        for (path, want) in [
            ("/api/v1/namespaces/ns/pods", ("pods", "")),
            ("/api/v1/namespaces/ns/pods/web-1", ("pods", "")),
            ("/api/v1/namespaces/ns/pods/web-1/status", ("pods", "status")),
            ("/api/v1/pods?labelSelector=x&watch=true", ("pods", "")),
            ("/apis/apps.kruise.io/v1alpha1/namespaces/ns/clonesets/web/status", ("clonesets", "status")),
            ("/apis/events.k8s.io/v1/namespaces/ns/events", ("events", "")),
            ("/api/v1/nodes/n1", ("nodes", "")),
            ("/api/v1/namespaces/ns", ("namespaces", "")),
            ("/api/v1/namespaces", ("namespaces", "")),
            ("/version", ("", "")),
        ] {
            assert_eq!(resource_of(path), want, "{path}");
        }
    }
}
