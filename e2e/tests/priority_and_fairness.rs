//! The chart gives the operator its own share of the apiserver: its FlowSchema sends every
//! request of the operator's ServiceAccount to its own PriorityLevelConfiguration.

use std::time::Duration;

use cloneset_operator::api::CloneSet;
use e2e::bench::metric_sum_where;
use e2e::chart;
use e2e::testenv::{Operator, TestNamespace, client, install_api, wait_until, watch_until};
use e2e::workload::manifest;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

fn flowcontrol(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("flowcontrol.apiserver.k8s.io", "v1", kind))
}

#[tokio::test]
async fn every_request_of_the_operator_is_dispatched_in_the_charts_priority_level() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("apf").await.unwrap();
    let admin = client().await.unwrap();
    // The values the suite installs the operator's identity with, so the FlowSchema names its account.
    let (installed_in, values) = chart::install_for(&ns.name, &[]);
    let release = chart::release_for(&ns.name);
    let mut extra: Vec<&str> = values.iter().flat_map(|v| ["--set", v.as_str()]).collect();
    extra.extend(["--show-only", "templates/flowcontrol.yaml"]);
    let docs = chart::render(&release, &installed_in, &extra).unwrap();
    let mut applied = chart::apply_rendered(&admin, docs).await.unwrap();
    applied.sort();
    let name = format!("{release}-cloneset-operator");
    assert_eq!(applied, [("FlowSchema".to_string(), name.clone()), ("PriorityLevelConfiguration".to_string(), name.clone())]);
    let schemas: Api<DynamicObject> = Api::all_with(admin.clone(), &flowcontrol("FlowSchema"));
    let levels: Api<DynamicObject> = Api::all_with(admin.clone(), &flowcontrol("PriorityLevelConfiguration"));
    // The apiserver's flow-control configuration controller marks the schema once it uses it.
    wait_until(Duration::from_secs(30), "the FlowSchema to be in use (Dangling=False)", || async {
        let fs = schemas.get(&name).await?;
        let conditions = fs.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
        Ok(conditions.iter().any(|c| c["type"] == "Dangling" && c["status"] == "False"))
    })
    .await
    .unwrap();

    let op = Operator::start(&ns.name, &[]).await.unwrap();
    let clonesets: Api<CloneSet> = ns.api();
    clonesets.create(&PostParams::default(), &manifest("web", 3, "nginx:1.27", json!({}))).await.unwrap();
    watch_until(&clonesets, "web", Duration::from_secs(120), |cs| cs.status.as_ref().is_some_and(|s| s.replicas == 3))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(30)));

    // Read in this order: a request the operator counts (on its answer) was dispatched before.
    let made = metric_sum_where(&op.metrics().await.unwrap(), "rest_client_requests_total", &[]);
    let apiserver = admin.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    let dispatched = metric_sum_where(
        &apiserver,
        "apiserver_flowcontrol_dispatched_requests_total",
        &[("flow_schema", &name), ("priority_level", &name)],
    );
    println!("priority and fairness: {made} requests made by the operator, {dispatched} dispatched in priority level {name}");
    assert!(made >= 5.0, "the operator made its lists, watches and pod creations: {made}");
    assert!(dispatched >= made, "every request of the operator went through {name}: {dispatched} dispatched, {made} made");

    let _ = schemas.delete(&name, &DeleteParams::default()).await;
    let _ = levels.delete(&name, &DeleteParams::default()).await;
}
