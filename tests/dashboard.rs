//! The chart's Grafana dashboard queries only metrics the operator exports.

use std::collections::BTreeSet;

use cloneset_operator::metrics::{Metrics, ReconcileResult};

/// Every sample name the operator can export: from each family's `# TYPE` line, with the
/// suffixes its type adds in the OpenMetrics text format.
fn exported_names() -> BTreeSet<String> {
    let metrics = Metrics::new();
    // Create one series of each family that starts empty, so every `# TYPE` line is there.
    metrics.set_max_concurrent_reconciles(1);
    metrics.reconciled(ReconcileResult::Success, std::time::Duration::from_millis(1));
    metrics.set_status("ns", "cs", [1; 6]);
    metrics.expectation_leaked("ns/cs");
    let _queue = metrics.queue();
    metrics.request("127.0.0.1:6443", &http::Method::GET, "/api/v1/pods", Some(http::StatusCode::OK));
    let text = metrics.encode();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else { continue };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

/// Metric names in a PromQL expression: identifiers outside label matchers, ranges and
/// grouping clauses, minus PromQL's own words.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const PROMQL: &[&str] =
        &["sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile", "by", "without", "ignoring", "on"];
    let mut cleaned = String::new();
    let mut depth_braces = 0;
    let mut depth_brackets = 0;
    for c in expr.chars() {
        match c {
            '{' => depth_braces += 1,
            '}' => depth_braces -= 1,
            '[' => depth_brackets += 1,
            ']' => depth_brackets -= 1,
            _ if depth_braces == 0 && depth_brackets == 0 => cleaned.push(c),
            _ => {}
        }
    }
    // Drop grouping label lists: `by (a, b)`, `ignoring(state)`.
    let mut out = String::new();
    let mut rest = cleaned.as_str();
    while let Some(i) = ["by", "without", "ignoring", "on"]
        .iter()
        .filter_map(|k| rest.find(&format!("{k} (")).or_else(|| rest.find(&format!("{k}("))))
        .min()
    {
        out.push_str(&rest[..i]);
        let close = rest[i..].find(')').map_or(rest.len(), |j| i + j + 1);
        rest = &rest[close..];
    }
    out.push_str(rest);
    out.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| !w.is_empty() && !w.chars().next().unwrap().is_ascii_digit() && !PROMQL.contains(w))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_dashboard_queries_only_exported_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/cloneset-operator/dashboards/cloneset-operator.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exported = exported_names();
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            used.extend(metric_names(target["expr"].as_str().unwrap()));
        }
    }
    assert!(used.len() >= 10, "the dashboard queries the operator's main series: {used:?}");
    let missing: Vec<&String> = used.iter().filter(|m| !exported.contains(*m)).collect();
    assert!(missing.is_empty(), "the dashboard queries metrics the operator does not export: {missing:?}\nexported: {exported:?}");
    for needed in [
        "controller_runtime_reconcile_total",
        "workqueue_depth",
        "cloneset_status_replicas",
        "rest_client_requests_total",
        "process_resident_memory_bytes",
    ] {
        assert!(used.contains(needed), "a panel for {needed}");
    }
}

#[test]
fn metric_names_skip_labels_ranges_and_promql_words() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le) (rate(foo_seconds_bucket{controller="x"}[5m]))) / ignoring(state) bar{state="y"}"#,
    );
    assert_eq!(names, BTreeSet::from(["foo_seconds_bucket".to_string(), "bar".to_string()]));
}
