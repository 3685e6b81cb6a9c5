//! Operating the operator: metrics, health probes, JSON logs, leader election and the client-side
//! rate limit, each against the real control plane with real operator processes.
//!
//! Run with `--nocapture` to see the measured take-over time and request rate.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cloneset_operator::api::{CloneSet, keys};
use cloneset_operator::config;
use e2e::testenv::{
    Credentials, FAKE_KRUISE_LEASE_SECONDS, FakeKruise, Operator, OperatorOptions, TestNamespace, install_api, is_leader,
    leader_and_standby, wait_until, watch_until,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(120);

// ---- reading /metrics ----

/// One sample of the OpenMetrics text: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    out
}

fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, parse_labels(l.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            Some(Sample { name: name.to_string(), labels, value: value.parse().ok()? })
        })
        .collect()
}

/// The sum of every series of `name` whose labels include `with`; `None` if there is none.
fn metric(text: &str, name: &str, with: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = samples(text)
        .into_iter()
        .filter(|s| s.name == name && with.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|s| s.value)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

fn reconciles(text: &str) -> f64 {
    metric(text, "controller_runtime_reconcile_total", &[("controller", "cloneset")]).unwrap_or(0.0)
}

fn requests(text: &str) -> f64 {
    metric(text, "rest_client_requests_total", &[]).unwrap_or(0.0)
}

// ---- helpers ----

fn cloneset(name: &str, replicas: i32, image: &str, extra_template_meta: Value) -> CloneSet {
    let mut meta = json!({"labels": {"app": name}});
    json_patch::merge(&mut meta, &extra_template_meta);
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": meta,
                         "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": image}]}},
        },
    }))
    .unwrap()
}

fn status(cs: &CloneSet) -> cloneset_operator::api::CloneSetStatus {
    cs.status.clone().unwrap_or_default()
}

fn observed(cs: &CloneSet) -> bool {
    cs.status.as_ref().is_some_and(|s| s.observed_generation == cs.metadata.generation.unwrap_or(0))
}

fn all_ready(cs: &CloneSet, replicas: i32) -> bool {
    let s = status(cs);
    observed(cs) && s.replicas == replicas && s.ready_replicas == replicas
}

fn rolled_out(cs: &CloneSet, replicas: i32) -> bool {
    let s = status(cs);
    all_ready(cs, replicas) && s.updated_ready_replicas == replicas && s.current_revision == s.update_revision
}

async fn wait_ready(op: &Operator) {
    wait_until(Duration::from_secs(60), "the operator's /readyz to answer 200", || async { Ok(op.probe("/readyz").await? == 200) })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n--- operator log ---\n{}", op.log_tail(30)));
}

/// A reference making `ns` the owner of a cluster-scoped test object, so the garbage collector
/// deletes the object with the namespace even if the test fails half-way.
async fn owned_by_namespace(ns: &TestNamespace) -> Value {
    let namespace = Api::<Namespace>::all(ns.client.clone()).get(&ns.name).await.unwrap();
    json!([{"apiVersion": "v1", "kind": "Namespace", "name": ns.name, "uid": namespace.uid().unwrap()}])
}

fn cluster_api(ns: &TestNamespace, group: &str, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    Api::all_with(ns.client.clone(), &kube::api::ApiResource::from_gvk_with_plural(&gvk, plural))
}

/// The operator's /metrics once it is quiet: its queue empty, no worker busy, and the reconcile
/// count unchanged for a second of scrapes (a poll with a deadline, not a sleep).
async fn quiet_metrics(op: &Operator) -> String {
    let last = std::sync::Mutex::new((String::new(), 0u32));
    wait_until(T, "the operator to be quiet", || async {
        let m = op.metrics().await?;
        let idle = e2e::bench::reconciled_and_idle(&m, 0.0);
        let mut last = last.lock().unwrap();
        let same = idle && !last.0.is_empty() && reconciles(&last.0) == reconciles(&m);
        *last = (m, if same { last.1 + 1 } else { 0 });
        Ok(last.1 >= 10)
    })
    .await
    .unwrap();
    last.into_inner().unwrap().0
}

/// Every line of a JSON-format log parses as a JSON object.
fn json_log_lines(op: &Operator) -> Vec<Value> {
    let text = std::fs::read_to_string(&op.log).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("log line is not JSON ({e}): {l}")))
        .inspect(|v| assert!(v.is_object(), "log line is not a JSON object: {v}"))
        .collect()
}

/// A metric, the labels its series must have, and what its value must satisfy.
type Expectation<'a> = (&'a str, &'a [(&'a str, &'a str)], fn(f64) -> bool);

// ---- tests ----

/// /metrics carries controller-runtime's and Kruise's names, and the reconcile count rises when a
/// CloneSet is applied. Logs are JSON lines.
#[tokio::test]
async fn metrics_use_controller_runtime_names_and_count_reconciles() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-metrics").await.unwrap();
    let op = Operator::start(&ns.name, &["--logging-format=json"]).await.unwrap();
    wait_ready(&op).await;

    let before = op.metrics().await.unwrap();
    assert_eq!(reconciles(&before), 0.0, "nothing to reconcile yet:\n{before}");
    let clonesets: Api<CloneSet> = ns.api();
    clonesets.create(&PostParams::default(), &cloneset("web", 4, "nginx:1.27", json!({}))).await.unwrap();
    watch_until(&clonesets, "web", T, |cs| all_ready(cs, 4)).await.unwrap();

    let after = op.metrics().await.unwrap();
    let total = reconciles(&after);
    assert!(total > 0.0, "controller_runtime_reconcile_total did not rise:\n{after}");
    let ok = metric(&after, "controller_runtime_reconcile_total", &[("result", "success")]).unwrap()
        + metric(&after, "controller_runtime_reconcile_total", &[("result", "requeue_after")]).unwrap();
    assert!(ok > 0.0, "successful reconciles:\n{after}");
    let q = [("name", "cloneset")];
    let expectations: &[Expectation] = &[
        ("controller_runtime_reconcile_errors_total", &[("controller", "cloneset")], |v| v >= 0.0),
        ("controller_runtime_reconcile_time_seconds_count", &[("controller", "cloneset")], |v| v >= 1.0),
        ("controller_runtime_max_concurrent_reconciles", &[("controller", "cloneset")], |v| v == 3.0),
        ("controller_runtime_active_workers", &[("controller", "cloneset")], |v| v >= 0.0),
        ("workqueue_depth", &q, |v| v >= 0.0),
        ("workqueue_adds_total", &q, |v| v >= 1.0),
        ("workqueue_queue_duration_seconds_count", &q, |v| v >= 1.0),
        ("workqueue_work_duration_seconds_count", &q, |v| v >= 1.0),
        ("workqueue_retries_total", &q, |v| v >= 0.0),
        // 4 pods (and their events) created.
        ("rest_client_requests_total", &[("code", "201"), ("method", "POST")], |v| v >= 4.0),
        ("rest_client_requests_total", &[("code", "200"), ("method", "GET")], |v| v >= 1.0),
        // Leader election is off: this instance leads.
        ("kruise_manager_is_leader", &[], |v| v == 1.0),
        ("cloneset_operator_standing_by_for_kruise", &[], |v| v == 0.0),
        ("workqueue_unfinished_work_seconds", &q, |v| v >= 0.0),
        ("workqueue_longest_running_processor_seconds", &q, |v| v >= 0.0),
        // The Prometheus process collector's set, for this process.
        ("process_cpu_seconds_total", &[], |v| v > 0.0),
        ("process_resident_memory_bytes", &[], |v| v > 1e6),
        ("process_virtual_memory_bytes", &[], |v| v > 1e6),
        ("process_open_fds", &[], |v| v >= 5.0),
        ("process_max_fds", &[], |v| v >= 5.0),
        ("process_start_time_seconds", &[], |v| v > 1.6e9),
        // Watchers, workers, the server and leader election each hold a task.
        ("tokio_alive_tasks", &[], |v| v >= 3.0),
        ("heap_in_use_bytes", &[], |v| v > 1e6),
        ("heap_free_bytes", &[], |v| v >= 0.0),
    ];
    for (name, labels, ok) in expectations {
        let v = metric(&after, name, labels).unwrap_or_else(|| panic!("{name}{labels:?} missing from /metrics:\n{after}"));
        assert!(ok(v), "{name}{labels:?} = {v}");
    }
    // One duration per reconcile (a reconcile finishing during the scrape may be in one and not yet the other).
    let timed = metric(&after, "controller_runtime_reconcile_time_seconds_count", &[]).unwrap();
    assert!((timed - total).abs() <= 3.0, "{timed} durations for {total} reconciles");
    assert!(after.ends_with("# EOF\n"), "OpenMetrics text ends with # EOF");
    assert_eq!(op.probe("/healthz").await.unwrap(), 200);
    assert_eq!(op.probe("/nope").await.unwrap(), 404);

    // client-go's `host` label: the apiserver's host:port, on every series.
    let apiserver = kubeconfig_host().await;
    let series: Vec<Sample> = samples(&after).into_iter().filter(|s| s.name == "rest_client_requests_total").collect();
    assert!(
        !series.is_empty() && series.iter().all(|s| s.labels.get("host") == Some(&apiserver)),
        "host={apiserver} on every series:\n{after}"
    );
    // Started within the last hour (the test's own clock).
    let started = metric(&after, "process_start_time_seconds", &[]).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(started <= now + 1.0 && started > now - 3600.0, "process_start_time_seconds {started}, now {now}");

    let logs = json_log_lines(&op);
    assert!(logs.iter().any(|l| l["message"] == "caches synced"), "JSON log lines carry the message field");
}

/// A pod update that changes only an annotation no decision reads (another controller's, a
/// user's) queues no reconcile and is counted as unread; the changes after it that a decision
/// reads (a read annotation, then `specified-delete`) are acted on as before.
#[tokio::test]
async fn a_pod_update_no_decision_reads_queues_no_reconcile_and_hides_nothing_after_it() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-unread").await.unwrap();
    let op = Operator::start(&ns.name, &[]).await.unwrap();
    wait_ready(&op).await;
    let clonesets: Api<CloneSet> = ns.api();
    clonesets.create(&PostParams::default(), &cloneset("web", 2, "nginx:1.27", json!({}))).await.unwrap();
    watch_until(&clonesets, "web", T, |cs| all_ready(cs, 2)).await.unwrap();
    let unread = |m: &str| metric(m, "cloneset_operator_pod_updates_unread_total", &[]).unwrap_or(0.0);

    let quiet = quiet_metrics(&op).await;
    let pods: Api<Pod> = ns.api();
    let before: Vec<String> = pods.list(&Default::default()).await.unwrap().items.iter().map(|p| p.name_any()).collect();
    let annotate = |key: &str, value: &str| Patch::Merge(json!({"metadata": {"annotations": {key: value}}}));
    pods.patch(&before[0], &PatchParams::default(), &annotate("example.com/seen-by", "another-controller")).await.unwrap();
    wait_until(T, "the update to be counted as unread", || async { Ok(unread(&op.metrics().await?) > unread(&quiet)) }).await.unwrap();
    let after_unread = quiet_metrics(&op).await;
    assert_eq!(unread(&after_unread), unread(&quiet) + 1.0, "one unread update:\n{after_unread}");
    assert_eq!(reconciles(&after_unread), reconciles(&quiet), "a reconcile was queued for an annotation no decision reads");

    pods.patch(&before[0], &PatchParams::default(), &annotate(keys::POD_DELETION_COST, "100")).await.unwrap();
    wait_until(T, "a reconcile for a read annotation", || async { Ok(reconciles(&op.metrics().await?) > reconciles(&after_unread)) })
        .await
        .unwrap();
    assert_eq!(unread(&op.metrics().await.unwrap()), unread(&after_unread), "a read annotation counted as unread");

    let delete = Patch::Merge(json!({"metadata": {"labels": {keys::SPECIFIED_DELETE: "true"}}}));
    pods.patch(&before[0], &PatchParams::default(), &delete).await.unwrap();
    wait_until(T, "the specified pod to be replaced", || async {
        let names: Vec<String> = pods.list(&Default::default()).await?.items.iter().map(|p| p.name_any()).collect();
        Ok(names.len() == 2 && !names.contains(&before[0]) && names.contains(&before[1]))
    })
    .await
    .unwrap();
    watch_until(&clonesets, "web", T, |cs| all_ready(cs, 2)).await.unwrap();
}

/// The apiserver's `host:port` in the test kubeconfig.
async fn kubeconfig_host() -> String {
    let path = e2e::testenv::kubeconfig().await.unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::read_from(path).unwrap(), &Default::default()).await.unwrap();
    cloneset_operator::client::apiserver_host(&config.cluster_url)
}

/// A scale expectation that can never be satisfied shows in `cloneset_scale_expectation_leakage`.
/// A MutatingAdmissionPolicy (scoped to this test's namespace) strips the owner reference from
/// the CloneSet's pods, so the operator's pod cache (which keeps only pods a CloneSet controls)
/// never sees the pods it created — the same leak a webhook that rewrites pods causes in real
/// clusters.
#[tokio::test]
async fn leaked_scale_expectations_are_counted_per_cloneset() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-leak").await.unwrap();
    let owner = owned_by_namespace(&ns).await;
    let policy_name = format!("{}-strip-owner", ns.name);
    let policies = cluster_api(&ns, "admissionregistration.k8s.io", "v1", "MutatingAdmissionPolicy", "mutatingadmissionpolicies");
    let bindings =
        cluster_api(&ns, "admissionregistration.k8s.io", "v1", "MutatingAdmissionPolicyBinding", "mutatingadmissionpolicybindings");
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": policy_name, "ownerReferences": owner},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchConditions": [{"name": "leak-test-pods", "expression": "has(object.metadata.labels) && 'e2e-leak' in object.metadata.labels"}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: \"remove\", path: \"/metadata/ownerReferences\"}]"}}],
        },
    }))
    .unwrap();
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name, "ownerReferences": owner},
        "spec": {"policyName": policy_name,
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}}}},
    }))
    .unwrap();
    policies.create(&PostParams::default(), &policy).await.unwrap();
    bindings.create(&PostParams::default(), &binding).await.unwrap();
    // Policies take effect asynchronously: dry-run an owned pod until it comes back without its owner.
    let pods: Api<Pod> = ns.api();
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe", "labels": {"e2e-leak": "true"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "00000000-0000-0000-0000-000000000000"}]},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }))
    .unwrap();
    wait_until(Duration::from_secs(30), "the mutating policy to be enforced", || async {
        let p = pods.create(&PostParams { dry_run: true, ..Default::default() }, &probe).await?;
        Ok(p.owner_references().is_empty())
    })
    .await
    .unwrap();

    let op = Operator::start(&ns.name, &["--logging-format=json", "--expectation-timeout=2s"]).await.unwrap();
    wait_ready(&op).await;
    let clonesets: Api<CloneSet> = ns.api();
    clonesets.create(&PostParams::default(), &cloneset("leaky", 2, "nginx:1.27", json!({"labels": {"e2e-leak": "true"}}))).await.unwrap();
    let series = [("namespace", ns.name.as_str()), ("name", "leaky")];
    wait_until(T, "cloneset_scale_expectation_leakage for the CloneSet", || async {
        Ok(metric(&op.metrics().await?, "cloneset_scale_expectation_leakage", &series).is_some_and(|v| v >= 1.0))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n--- operator log ---\n{}", op.log_tail(30)));
    // The leak froze the CloneSet instead of creating pods again and again (it cannot see them).
    let created = pods.list(&Default::default()).await.unwrap().items.len();
    assert_eq!(created, 2, "exactly the 2 pods of the first pass");

    // Structured logs: the leak warning names the CloneSet, and so does the reconcile span around it.
    let key = format!("{}/leaky", ns.name);
    let logs = json_log_lines(&op);
    let leak_lines: Vec<&Value> =
        logs.iter().filter(|l| l["message"].as_str().is_some_and(|m| m.contains("--expectation-timeout"))).collect();
    assert!(!leak_lines.is_empty(), "a leak warning in the log:\n{}", op.log_tail(30));
    for l in leak_lines {
        assert_eq!(l["cloneset"], key.as_str(), "{l}");
        assert_eq!(l["span"]["cloneset"], key.as_str(), "{l}");
        assert_eq!(l["span"]["name"], "reconcile", "{l}");
    }
    let _ = bindings.delete(&policy_name, &DeleteParams::default()).await;
    let _ = policies.delete(&policy_name, &DeleteParams::default()).await;
}

/// /healthz answers at once, /readyz only once every cache has listed. The operator runs as a
/// ServiceAccount without any RBAC first, so every list is refused (403) and the caches cannot
/// sync; binding a role lets them sync, and /readyz turns 200.
#[tokio::test]
async fn readyz_waits_for_the_caches_to_sync() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-ready").await.unwrap();
    let sa_name = "operator";
    let sas: Api<ServiceAccount> = ns.api();
    sas.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": sa_name}})).unwrap()).await.unwrap();
    // The test cluster, authenticating as the ServiceAccount instead of the admin.
    let path = std::env::temp_dir().join(format!("{}-sa.kubeconfig", ns.name));
    let admin = e2e::testenv::kubeconfig().await.unwrap();
    e2e::chart::account_kubeconfig(&admin, &ns.client, &ns.name, sa_name, &path).await.unwrap();

    let started = Instant::now();
    let op = Operator::start_with(&ns.name, OperatorOptions { credentials: Credentials::Kubeconfig(path.clone()), ..Default::default() })
        .await
        .unwrap();
    wait_until(Duration::from_secs(30), "/healthz", || async { Ok(op.probe("/healthz").await? == 200) }).await.unwrap();
    let alive_after = started.elapsed();
    // Three seconds of refused lists: never ready meanwhile.
    let until = Instant::now() + Duration::from_secs(3);
    let mut polls = 0;
    while Instant::now() < until {
        assert_eq!(op.probe("/readyz").await.unwrap(), 503, "ready without synced caches\n{}", op.log_tail(20));
        assert_eq!(op.probe("/healthz").await.unwrap(), 200);
        polls += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = op.metrics().await.unwrap();
    assert!(metric(&m, "rest_client_requests_total", &[("code", "403"), ("method", "GET")]).is_some_and(|v| v > 0.0), "403s counted:\n{m}");
    assert_eq!(is_leader(&m), Some(0.0), "not acting before the caches sync");

    let bindings = cluster_api(&ns, "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings");
    let binding_name = format!("{}-operator", ns.name);
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": binding_name, "ownerReferences": owned_by_namespace(&ns).await},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": ns.name}],
    }))
    .unwrap();
    bindings.create(&PostParams::default(), &binding).await.unwrap();
    let granted = Instant::now();
    wait_ready(&op).await;
    println!(
        "readyz: /healthz 200 after {alive_after:?}; /readyz 503 on {polls} polls without RBAC; 200 {:?} after the role was bound",
        granted.elapsed()
    );
    wait_until(Duration::from_secs(10), "is_leader 1 once synced", || async { Ok(is_leader(&op.metrics().await?) == Some(1.0)) })
        .await
        .unwrap();
    let _ = bindings.delete(&binding_name, &DeleteParams::default()).await;
    let _ = std::fs::remove_file(path);
}

/// Two instances with leader election: exactly one acts; SIGKILL the leader in the middle of a
/// rollout and the standby takes over after the Lease expires and finishes the rollout.
#[tokio::test]
async fn one_leader_acts_and_a_standby_finishes_the_rollout_after_a_crash() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-leader").await.unwrap();
    let (mut a, b) = leader_and_standby(&ns.name).await.unwrap();
    // The standby syncs its caches and reports ready, but does not lead.
    wait_ready(&b).await;
    wait_until(Duration::from_secs(30), "the standby to try the lease", || async {
        Ok(std::fs::read_to_string(&b.log)?.contains("standing by"))
    })
    .await
    .unwrap();
    assert_eq!(is_leader(&b.metrics().await.unwrap()), Some(0.0));

    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = ns.api();
    let lease = leases.get(cloneset_operator::leader::LEASE_NAME).await.unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.lease_duration_seconds, Some(15));
    let first_holder = spec.holder_identity.unwrap();

    // Slow pods (2 s to become ready) make a rollout long enough to crash in the middle of.
    let clonesets: Api<CloneSet> = ns.api();
    let slow = json!({"annotations": {"sim.cloneset-operator.dev/startup-delay": "2s"}});
    clonesets.create(&PostParams::default(), &cloneset("web", 5, "nginx:1.27", slow)).await.unwrap();
    watch_until(&clonesets, "web", T, |cs| rolled_out(cs, 5)).await.unwrap();
    let (ma, mb) = (a.metrics().await.unwrap(), b.metrics().await.unwrap());
    assert!(reconciles(&ma) > 0.0, "the leader reconciles");
    assert_eq!(reconciles(&mb), 0.0, "the standby does not reconcile:\n{mb}");
    assert_eq!(metric(&mb, "workqueue_adds_total", &[]), Some(0.0), "the standby queues nothing");

    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": e2e::workload::new_image("nginx:1.28")}))).await.unwrap();
    watch_until(&clonesets, "web", T, |cs| {
        let s = status(cs);
        observed(cs) && s.updated_replicas >= 1 && s.updated_ready_replicas < 5
    })
    .await
    .unwrap();
    a.kill();
    let killed = Instant::now();
    let updated_at_kill = status(&clonesets.get("web").await.unwrap()).updated_replicas;
    wait_until(Duration::from_secs(40), "the standby to take over", || async { Ok(is_leader(&b.metrics().await?) == Some(1.0)) })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", b.log_tail(20)));
    let takeover = killed.elapsed();
    println!("leader election: SIGKILL of the leader with {updated_at_kill}/5 pods updated; the standby led {takeover:?} later");
    // A standby may only take the Lease after 15 s without renewals (the last renewal came at
    // most one retry period, 2 s, before the kill), and tries every 2-2.4 s.
    assert!(takeover >= Duration::from_secs(10), "took over before the lease could expire: {takeover:?}");
    assert!(takeover <= Duration::from_secs(25), "take-over too slow: {takeover:?}");

    let cs = watch_until(&clonesets, "web", T, |cs| rolled_out(cs, 5))
        .await
        .unwrap_or_else(|e| panic!("rollout after take-over: {e:#}\n{}", b.log_tail(30)));
    assert_eq!(status(&cs).updated_replicas, 5);
    assert!(reconciles(&b.metrics().await.unwrap()) > 0.0, "the new leader reconciles");
    let holder = leases.get(cloneset_operator::leader::LEASE_NAME).await.unwrap().spec.unwrap().holder_identity.unwrap();
    assert_ne!(holder, first_holder, "the Lease changed hands");
    let active = Api::<Pod>::namespaced(ns.client.clone(), &ns.name)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count();
    assert_eq!(active, 5, "no extra pods after the take-over");
}

/// Fail-stop: a leader that finds its Lease held by someone else exits non-zero at its next
/// renewal (every 2 s), so it can never act alongside the new holder.
#[tokio::test]
async fn a_leader_whose_lease_is_taken_exits_at_once() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-failstop").await.unwrap();
    let le = OperatorOptions::args(&["--enable-leader-election=true", &format!("--leader-election-namespace={}", ns.name)]);
    let mut op = Operator::start_with(&ns.name, le).await.unwrap();
    wait_until(Duration::from_secs(60), "the instance to lead", || async { Ok(is_leader(&op.metrics().await?) == Some(1.0)) })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(20)));
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = ns.api();
    leases
        .patch(
            cloneset_operator::leader::LEASE_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "intruder"}})),
        )
        .await
        .unwrap();
    let taken = Instant::now();
    let status = loop {
        if let Some(status) = op.exited() {
            break status;
        }
        assert!(taken.elapsed() < Duration::from_secs(10), "still running after losing the lease:\n{}", op.log_tail(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("fail-stop: exited {:?} after the lease was taken ({status})", taken.elapsed());
    assert_eq!(status.code(), Some(1), "a non-zero exit, so the pod restarts as a standby");
    assert!(taken.elapsed() <= Duration::from_secs(5), "one renewal period (2 s) plus the request");
    let log = std::fs::read_to_string(&op.log).unwrap();
    assert!(log.contains("lost leadership") && log.contains("intruder"), "{log}");
}

/// `--rest-config-qps=5 --rest-config-burst=5` caps the request rate during a 50-pod scale-up.
#[tokio::test]
async fn rest_config_qps_caps_the_request_rate_of_a_scale_up() {
    const QPS: f64 = 5.0;
    const BURST: f64 = 5.0;
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-qps").await.unwrap();
    let op = Operator::start(&ns.name, &["--rest-config-qps=5", "--rest-config-burst=5"]).await.unwrap();
    wait_ready(&op).await;
    // Idle first: no request in flight at the start of the window (the bound below relies on it).
    let idle_deadline = Instant::now() + Duration::from_secs(30);
    let mut prev = -1.0;
    loop {
        let m = op.metrics().await.unwrap();
        let now = requests(&m);
        if now == prev && metric(&m, "controller_runtime_active_workers", &[]) == Some(0.0) {
            break;
        }
        assert!(Instant::now() < idle_deadline, "the operator never became idle:\n{m}");
        prev = now;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    let clonesets: Api<CloneSet> = ns.api();
    let t0 = Instant::now();
    let r0 = requests(&op.metrics().await.unwrap());
    clonesets.create(&PostParams::default(), &cloneset("many", 50, "nginx:1.27", json!({}))).await.unwrap();
    watch_until(&clonesets, "many", Duration::from_secs(180), |cs| all_ready(cs, 50))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(20)));
    let r1 = requests(&op.metrics().await.unwrap());
    let window = t0.elapsed().as_secs_f64();
    let made = r1 - r0;

    // The bound. A request is counted when its response arrives, and it took its token from the
    // bucket before it was sent. Every request counted between the two scrapes therefore took a
    // token inside [t0, t1] (t0 is read before the first scrape, t1 after the second; nothing was
    // in flight at t0 because the operator was idle and watches are counted when their stream
    // opens). The bucket holds at most BURST tokens at t0 and gains QPS tokens per second, so at
    // most BURST + QPS * (t1 - t0) tokens can be taken in the window:
    //     made <= BURST + QPS * window,   i.e.   made / window <= QPS + BURST / window.
    let bound = BURST + QPS * window;
    println!(
        "rate limit: {made} requests in {window:.1} s for a 50-pod scale-up = {:.2}/s on average (bound {bound:.1} requests = {QPS}/s + {BURST} burst)",
        made / window
    );
    assert!(made >= 50.0, "50 pod creations at least: {made}");
    assert!(made <= bound, "{made} requests in {window:.1} s exceed {QPS}/s with a burst of {BURST} (bound {bound:.1})");
    assert!(made / window <= QPS + BURST / window);
}

/// Events of one name go out in the order they were recorded. A burst of creations is
/// combined by the event correlator into one event whose count is then patched; when the
/// patch overtook the creation it met a 404, and the POST that followed met a 409 (97–165 such
/// pairs in a 4,000-pod run). Three 40-pod scale-ups must make repeats, and none of them may be
/// refused.
#[tokio::test]
async fn a_scale_up_s_combined_events_are_created_before_they_are_patched() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-events").await.unwrap();
    let op = Operator::start(&ns.name, &[]).await.unwrap();
    wait_ready(&op).await;
    let clonesets: Api<CloneSet> = ns.api();
    let names = ["burst-a", "burst-b", "burst-c"];
    for name in names {
        clonesets.create(&PostParams::default(), &cloneset(name, 40, "nginx:1.27", json!({}))).await.unwrap();
    }
    for name in names {
        watch_until(&clonesets, name, Duration::from_secs(180), |cs| all_ready(cs, 40))
            .await
            .unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(20)));
    }
    // Events are sent after the writes they report: wait until two scrapes a second apart agree.
    let event_requests = |m: &str| metric(m, "rest_client_requests_total", &[("resource", "events")]).unwrap_or(0.0);
    let deadline = Instant::now() + T;
    let mut previous = -1.0;
    let last = loop {
        let m = op.metrics().await.unwrap();
        let now = event_requests(&m);
        if now == previous && now > 0.0 {
            break m;
        }
        assert!(Instant::now() < deadline, "the operator's event requests never settled:\n{m}");
        previous = now;
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let count = |method: &str, code: &str| {
        metric(&last, "rest_client_requests_total", &[("resource", "events"), ("method", method), ("code", code)]).unwrap_or(0.0)
    };
    let (created, patched) = (count("POST", "201"), count("PATCH", "200"));
    println!("events: {created} created, {patched} patched");
    assert!(patched >= 3.0, "each burst combined its creations into one event and patched it: {patched} patches\n{last}");
    for (method, code) in [("PATCH", "404"), ("POST", "409")] {
        assert_eq!(count(method, code), 0.0, "event {method}s answered {code}:\n{last}");
    }
}

// ---- running where Kruise ran ----

/// The arguments verbatim, then free local ports for metrics and probes (the last of a repeated
/// flag wins, as in Kruise), so parallel tests do not fight over :8080 and :8000.
fn with_local_ports(args: &[&str]) -> OperatorOptions {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    for flag in ["--metrics-addr", "--health-probe-addr"] {
        all.push(format!("{flag}={}", e2e::testenv::free_local_addr().unwrap()));
    }
    OperatorOptions { args: all, ..Default::default() }
}

/// Kruise's chart arguments and its e2e install arguments start the operator unchanged: it leads,
/// reconciles, logs what it ignores, and `AllAlpha=true` turns on the short revision hash.
/// Pods' managedFields name the operator (its User-Agent) instead of `unknown`.
#[tokio::test]
async fn kruise_s_chart_and_e2e_install_arguments_start_the_operator() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-kruise-args").await.unwrap();
    let namespaces: Api<Namespace> = Api::all(ns.client.clone());
    if namespaces.get_opt("kruise-system").await.unwrap().is_none() {
        let kruise_system = serde_json::from_value(json!({"metadata": {"name": "kruise-system"}})).unwrap();
        match namespaces.create(&PostParams::default(), &kruise_system).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("{e}"),
        }
    }
    let clonesets: Api<CloneSet> = ns.api();
    let pods: Api<Pod> = ns.api();
    for (name, args, short_hash) in [("chart", config::KRUISE_CHART_ARGS, false), ("e2e", config::KRUISE_E2E_ARGS, true)] {
        let mut op = Operator::start_with(&ns.name, with_local_ports(args)).await.unwrap();
        wait_until(Duration::from_secs(60), "the instance to lead", || async { Ok(is_leader(&op.metrics().await?) == Some(1.0)) })
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:#}\n{}", op.log_tail(30)));
        let text = op.metrics().await.unwrap();
        let master = metric(&text, "leader_election_master_status", &[("name", cloneset_operator::leader::LEASE_NAME)]);
        assert_eq!(master, Some(1.0), "{name}: client-go's leader metric:\n{text}");
        clonesets.create(&PostParams::default(), &cloneset(name, 2, "nginx:1.27", json!({}))).await.unwrap();
        let cs = watch_until(&clonesets, name, T, |cs| observed(cs) && status(cs).replicas == 2).await.unwrap();
        let update_revision = status(&cs).update_revision;
        let hash = update_revision.strip_prefix(&format!("{name}-")).unwrap();
        let list = pods.list(&kube::api::ListParams::default().labels(&format!("app={name}"))).await.unwrap();
        for pod in &list.items {
            let label = pod.labels().get(keys::CONTROLLER_REVISION_HASH).cloned().unwrap_or_default();
            let want = if short_hash { hash.to_string() } else { update_revision.clone() };
            assert_eq!(label, want, "{name}: CloneSetShortHash is {short_hash}");
            // The object's own fields are the operator's; the simulated kubelet (no User-Agent) writes only status.
            let fields = serde_json::to_string(pod.managed_fields()).unwrap();
            let by = |sub: Option<&str>| -> Vec<&str> {
                pod.managed_fields().iter().filter(|m| m.subresource.as_deref() == sub).filter_map(|m| m.manager.as_deref()).collect()
            };
            assert_eq!(by(None), ["cloneset-operator"], "{name}: the field manager is the operator's User-Agent: {fields}");
            assert!(by(Some("status")).contains(&"cloneset-operator"), "{name}: its status writes too: {fields}");
        }
        let log = std::fs::read_to_string(&op.log).unwrap();
        assert!(log.contains("--logtostderr=true") && log.contains("no effect here"), "{name}: ignored flags are logged:\n{log}");
        let ignored_gate = if short_hash { "EnableExternalCerts=false" } else { "ImagePullJobGate=true" };
        assert!(log.contains(ignored_gate) && log.contains("are ignored"), "{name}: ignored gates are logged:\n{log}");
        op.stop();
    }
}

fn writes(text: &str) -> f64 {
    ["POST", "PUT", "PATCH", "DELETE"].iter().filter_map(|m| metric(text, "rest_client_requests_total", &[("method", m)])).sum()
}

/// Never two controllers at once: while a (fake) Kruise manager renews its Lease, the operator
/// writes nothing, says so on /readyz, in a metric and in its log; once the Lease lapses it
/// takes over within one retry period of the lapse.
#[tokio::test]
async fn the_operator_stands_by_while_kruise_s_manager_renews_its_lease() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("ops-kruise-guard").await.unwrap();
    let clonesets: Api<CloneSet> = ns.api();
    let pods: Api<Pod> = ns.api();
    // Pods made earlier (by this operator, standing in for Kruise), then a change that needs writes.
    let mut first = Operator::start(&ns.name, &[]).await.unwrap();
    clonesets.create(&PostParams::default(), &cloneset("web", 2, "nginx:1.27", json!({}))).await.unwrap();
    // Ready, so the simulated kubelet has written its last status before the pods are compared.
    watch_until(&clonesets, "web", T, |cs| all_ready(cs, 2)).await.unwrap();
    first.stop();
    let kruise = FakeKruise::start(&ns).await;
    let patch = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.28"}]}}}});
    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    let rvs =
        |list: Vec<Pod>| -> BTreeMap<String, String> { list.into_iter().map(|p| (p.name_any(), p.resource_version().unwrap())).collect() };
    let pods_before = rvs(pods.list(&Default::default()).await.unwrap().items);
    let cs_before = clonesets.get("web").await.unwrap().resource_version();

    let op = Operator::start(&ns.name, &[&format!("--kruise-manager-lease={}/kruise-manager", ns.name)]).await.unwrap();
    let health = op.health_addr.unwrap();
    wait_until(Duration::from_secs(60), "/readyz to say the operator stands by", || async {
        let (code, body) = e2e::testenv::http_get(health, "/readyz").await?;
        Ok(code == 503 && body.contains("standing by") && body.contains("kruise-manager"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(30)));
    // Nothing can be shown not to happen without watching for a while: three retry periods.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let text = op.metrics().await.unwrap();
    assert_eq!(metric(&text, "cloneset_operator_standing_by_for_kruise", &[]), Some(1.0), "{text}");
    assert_eq!(writes(&text), 0.0, "no write while Kruise runs:\n{text}");
    assert_eq!(reconciles(&text), 0.0, "no reconcile while Kruise runs");
    assert_eq!(rvs(pods.list(&Default::default()).await.unwrap().items), pods_before, "pods untouched");
    assert_eq!(clonesets.get("web").await.unwrap().resource_version(), cs_before, "CloneSet untouched");
    let log = std::fs::read_to_string(&op.log).unwrap();
    assert!(log.contains("standing by") && log.contains("not reconciling"), "{log}");

    // Kruise stops: the operator takes over once the Lease has gone unrenewed for its duration.
    let last_renewal = kruise.stop().await;
    wait_until(Duration::from_secs(30), "the operator to write after the Lease lapsed", || async {
        Ok(writes(&op.metrics().await?) > 0.0)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(30)));
    let took = last_renewal.elapsed();
    println!("take-over: first write {took:?} after Kruise's last renewal (lease {FAKE_KRUISE_LEASE_SECONDS} s, retry 2 s)");
    // Lapse (4 s after the last renewal the operator saw) + one retry period (2 s) + request and scrape slack.
    assert!(took >= Duration::from_secs(FAKE_KRUISE_LEASE_SECONDS), "acted while the Lease was valid: {took:?}");
    assert!(took <= Duration::from_secs(FAKE_KRUISE_LEASE_SECONDS + 2 + 2), "slow take-over: {took:?}");
    watch_until(&clonesets, "web", T, |cs| observed(cs) && status(cs).replicas == 3).await.unwrap();
    assert_eq!(op.probe("/readyz").await.unwrap(), 200);
    assert_eq!(metric(&op.metrics().await.unwrap(), "cloneset_operator_standing_by_for_kruise", &[]), Some(0.0));
}
