//! A CloneSet the operator cannot decode (here `spec.replicas: "three"`, stored while a
//! schemaless CRD was installed, as another controller's schema would allow) is skipped with a
//! Warning event and a `FailedDecode` condition; every other CloneSet is still reconciled, before
//! and after an operator restart; and no log line carries a CloneSet's spec.
//!
//! The CRD is swapped for a moment, so this test lives in its own binary: test binaries run one
//! after another, and the swap is undone before anything else happens (also when it fails).

use std::time::Duration;

use cloneset_operator::api::{CloneSet, crd};
use e2e::testenv::{Operator, TestNamespace, clonesets_dynamic, install_api, wait_until, watch_until};
use e2e::workload::{manifest, rolled_out};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(120);
/// Images that appear only in the two CloneSets' specs: if a log line has one, it printed a body.
const GOOD_IMAGE: &str = "registry.example/good-marker:1.0";
const BAD_IMAGE: &str = "registry.example/bad-marker:1.0";

/// The bad CloneSet: valid but for a string where an integer belongs.
fn undecodable() -> DynamicObject {
    let mut v = serde_json::to_value(manifest("bad", 1, BAD_IMAGE, json!({}))).unwrap();
    v["spec"]["replicas"] = json!("three");
    serde_json::from_value(v).unwrap()
}

/// Replaces the CloneSet CRD's spec (a full replace: no field of the other schema survives).
async fn replace_crd_spec(crds: &Api<CustomResourceDefinition>, spec: Value) -> anyhow::Result<()> {
    let name = crd::crd().metadata.name.unwrap_or_default();
    let mut current = crds.get(&name).await?;
    current.spec = serde_json::from_value(spec)?;
    current.metadata.managed_fields = None;
    crds.replace(&name, &PostParams::default(), &current).await?;
    Ok(())
}

/// Stores [`undecodable`] in `ns`: installs a schemaless CRD of the same group and kind, creates
/// it, and puts our CRD back whatever happened.
async fn store_undecodable(client: &Client, ns: &str) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let ours = serde_json::to_value(crd::crd().spec)?;
    let mut permissive = ours.clone();
    for version in permissive["versions"].as_array_mut().into_iter().flatten() {
        version["schema"] = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
        // The scale subresource needs an integer `spec.replicas` in the schema.
        version["subresources"] = json!({"status": {}});
    }
    let api = clonesets_dynamic(client, ns);
    let bad = undecodable();
    let dry = PostParams { dry_run: true, ..Default::default() };

    let stored = async {
        replace_crd_spec(&crds, permissive).await?;
        wait_until(Duration::from_secs(30), "the schemaless CRD to accept replicas \"three\"", || async {
            Ok(api.create(&dry, &bad).await.is_ok())
        })
        .await?;
        api.create(&PostParams::default(), &bad).await?;
        anyhow::Ok(())
    }
    .await;
    let restored = async {
        replace_crd_spec(&crds, ours).await?;
        let probe =
            DynamicObject { metadata: kube::api::ObjectMeta { name: Some("bad-probe".into()), ..bad.metadata.clone() }, ..bad.clone() };
        wait_until(Duration::from_secs(30), "our CRD to refuse replicas \"three\" again", || async {
            Ok(matches!(api.create(&dry, &probe).await, Err(kube::Error::Api(e)) if e.code == 422))
        })
        .await
    }
    .await;
    stored.and(restored)
}

/// What the operator's log must and must not show: the bad CloneSet named with its decode
/// error, and no CloneSet's spec anywhere.
fn check_log(operator: &Operator, ns: &str) {
    let log = std::fs::read_to_string(&operator.log).unwrap();
    for image in [GOOD_IMAGE, BAD_IMAGE] {
        let leaked: Vec<&str> = log.lines().filter(|l| l.contains(image)).collect();
        assert!(leaked.is_empty(), "log lines carry a CloneSet's spec ({image}):\n{}", leaked.join("\n"));
    }
    assert!(
        log.lines().any(|l| l.contains("WARN") && l.contains(&format!("{ns}/bad")) && l.contains("spec.replicas")),
        "no WARN line names {ns}/bad and the field:\n{}",
        operator.log_tail(40)
    );
}

/// How many FailedDecode Warning events the bad CloneSet has had (a repeat of the same event is
/// folded into one with a count: core/v1's, which this API shows as `deprecatedCount`).
async fn decode_events(events: &Api<Event>) -> anyhow::Result<usize> {
    let list = events.list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .filter(|ev| {
            ev.reason.as_deref() == Some("FailedDecode")
                && ev.type_.as_deref() == Some("Warning")
                && ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad")
                && ev.note.as_deref().is_some_and(|n| n.contains("spec.replicas"))
        })
        .map(|ev| ev.series.as_ref().map(|s| s.count).or(ev.deprecated_count).unwrap_or(1).max(1) as usize)
        .sum())
}

/// Waits for more FailedDecode events than `before`; returns how many there are.
async fn wait_for_decode_event(events: &Api<Event>, before: usize) -> usize {
    wait_until(T, "a FailedDecode Warning event on the bad CloneSet", || async { Ok(decode_events(events).await? > before) })
        .await
        .unwrap();
    decode_events(events).await.unwrap()
}

fn failed_decode_condition(obj: &DynamicObject) -> Option<&Value> {
    obj.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "FailedDecode")
}

#[tokio::test]
async fn an_undecodable_cloneset_is_skipped_and_the_others_are_still_reconciled() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("badinput").await.unwrap();
    let clonesets: Api<CloneSet> = ns.api();
    let dynamic = clonesets_dynamic(&ns.client, &ns.name);
    let events: Api<Event> = ns.api();
    store_undecodable(&ns.client, &ns.name).await.unwrap();
    clonesets.create(&PostParams::default(), &manifest("good", 2, GOOD_IMAGE, json!({}))).await.unwrap();

    let mut operator = Operator::start(&ns.name, &[]).await.unwrap();
    let converged = |replicas| move |cs: &CloneSet| rolled_out(cs, replicas);
    watch_until(&clonesets, "good", T, converged(2))
        .await
        .unwrap_or_else(|e| panic!("the good CloneSet converges next to the bad one: {e:#}\n{}", operator.log_tail(40)));
    let first = wait_for_decode_event(&events, 0).await;
    let bad = watch_until(&dynamic, "bad", T, |o| failed_decode_condition(o).is_some()).await.unwrap();
    let condition = failed_decode_condition(&bad).unwrap();
    assert_eq!(condition["status"], "True");
    assert!(condition["message"].as_str().unwrap_or_default().contains("spec.replicas"), "{condition}");
    check_log(&operator, &ns.name);

    // After a restart the operator still syncs its caches and reconciles the good one.
    operator.stop();
    let operator = Operator::start(&ns.name, &[]).await.unwrap();
    clonesets.patch("good", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await.unwrap();
    watch_until(&clonesets, "good", T, converged(3))
        .await
        .unwrap_or_else(|e| panic!("the good CloneSet scales after a restart: {e:#}\n{}", operator.log_tail(40)));
    wait_for_decode_event(&events, first).await;
    check_log(&operator, &ns.name);

    // Fixed, the bad one is reconciled like any other, and loses its condition.
    dynamic.patch("bad", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    watch_until(&clonesets, "bad", T, |cs| {
        rolled_out(cs, 1) && cs.status.as_ref().is_some_and(|s| s.conditions.iter().all(|c| c.type_ != "FailedDecode"))
    })
    .await
    .unwrap_or_else(|e| panic!("the fixed CloneSet converges without FailedDecode: {e:#}\n{}", operator.log_tail(40)));
}
