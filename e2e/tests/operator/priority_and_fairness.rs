//! The chart gives the operator its own share of the apiserver: its FlowSchema sends every
//! request of the operator's ServiceAccount to its own PriorityLevelConfiguration.

use std::time::Duration;

use cloneset_operator::api::CloneSet;
use e2e::bench::{metric_sum, metric_sum_where};
use e2e::chart;
use e2e::testenv::{Operator, TestNamespace, client, install_api, watch_until};
use e2e::workload::manifest;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use serde_json::json;

#[tokio::test]
async fn every_request_of_the_operator_is_dispatched_in_the_charts_priority_level() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("apf").await.unwrap();
    let admin = client().await.unwrap();
    let installed = chart::install_flowcontrol(&admin, &ns.name).await.unwrap();
    let name = format!("{}-cloneset-operator", chart::release_for(&ns.name));
    let mut applied: Vec<(String, String)> = installed.iter().map(|(ar, n)| (ar.kind.clone(), n.clone())).collect();
    applied.sort();
    assert_eq!(applied, [("FlowSchema".to_string(), name.clone()), ("PriorityLevelConfiguration".to_string(), name.clone())]);

    let op = Operator::start(&ns.name, &[]).await.unwrap();
    let clonesets: Api<CloneSet> = ns.api();
    clonesets.create(&PostParams::default(), &manifest("web", 3, "nginx:1.27", json!({}))).await.unwrap();
    watch_until(&clonesets, "web", Duration::from_secs(120), |cs| cs.status.as_ref().is_some_and(|s| s.replicas == 3))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(30)));

    // Read in this order: a request the operator counts (on its answer) was dispatched before.
    let made = metric_sum(&op.metrics().await.unwrap(), "rest_client_requests_total");
    let apiserver = admin.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    let dispatched = metric_sum_where(
        &apiserver,
        "apiserver_flowcontrol_dispatched_requests_total",
        &[("flow_schema", &name), ("priority_level", &name)],
    );
    println!("priority and fairness: {made} requests made by the operator, {dispatched} dispatched in priority level {name}");
    assert!(made >= 5.0, "the operator made its lists, watches and pod creations: {made}");
    assert!(dispatched >= made, "every request of the operator went through {name}: {dispatched} dispatched, {made} made");

    for (ar, name) in installed {
        let _ = Api::<DynamicObject>::all_with(admin.clone(), &ar).delete(&name, &DeleteParams::default()).await;
    }
}
