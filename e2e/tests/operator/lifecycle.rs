//! Lifecycle hooks, end to end: a preDelete hook holds a pod in PreparingDelete until it is
//! released, and scaling back up cancels the deletion instead of creating a pod.

use cloneset_operator::api::keys;
use e2e::testenv::{record, wait_until, watch_until};
use e2e::workload::{Env, T, env, label, manifest, monitor, rolled_out, settled, st};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// CloneSet `web` whose pods carry the label its preDelete hook waits on (`example.io/hold`).
fn held_by_pre_delete_hook(replicas: i32) -> cloneset_operator::api::CloneSet {
    let mut cs =
        manifest("web", replicas, "nginx:1.27", json!({"lifecycle": {"preDelete": {"labelsHandler": {"example.io/hold": "true"}}}}));
    cs.spec.template.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert("example.io/hold".into(), "true".into());
    cs
}

#[tokio::test]
async fn pre_delete_hook_keeps_a_pod_in_preparing_delete_until_released() {
    let e = env("predelete").await;
    e.create(&held_by_pre_delete_hook(2)).await;
    e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    e.patch("web", json!({"replicas": 1})).await;
    let held = wait_for_state(&e, "PreparingDelete").await;
    // Another full reconcile (a new generation observed) must leave it alone.
    e.patch("web", json!({"minReadySeconds": 1})).await;
    e.wait_status("web", "generation observed", |_| true).await;
    let still = e.pods.get(&held).await.expect("still there while hooked");
    assert_eq!(label(&still, keys::LIFECYCLE_STATE), Some("PreparingDelete"));
    assert!(still.metadata.deletion_timestamp.is_none());
    // Releasing the hook lets the deletion proceed.
    e.pods.patch(&held, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"example.io/hold": null}}}))).await.unwrap();
    e2e::testenv::wait_deleted(&e.pods, &held, T).await.unwrap();
    e.wait_status("web", "1 ready", |cs| settled(cs, 1)).await;
}

#[tokio::test]
async fn scaling_back_up_cancels_a_preparing_delete_instead_of_creating_a_pod() {
    let e = env("cancel").await;
    e.create(&held_by_pre_delete_hook(3)).await;
    e.wait_status("web", "3 ready", |cs| rolled_out(cs, 3)).await;
    let (extremes, watch) = monitor(e.pods.clone(), "app=web".into());
    e.patch("web", json!({"replicas": 2})).await;
    let held = wait_for_state(&e, "PreparingDelete").await;
    let (states, record) = record(&e.pods, &held, |p: &Pod| label(p, keys::LIFECYCLE_STATE).unwrap_or_default().to_string()).await.unwrap();
    e.patch("web", json!({"replicas": 3})).await;
    e.wait_status("web", "3 available", |cs| settled(cs, 3) && st(cs).updated_ready_replicas == 3).await;
    let back = watch_until(&e.pods, &held, T, |p| label(p, keys::LIFECYCLE_STATE) == Some("Normal")).await.unwrap();
    record.abort();
    watch.abort();
    assert!(back.metadata.deletion_timestamp.is_none());
    assert_eq!(label(&back, "example.io/hold"), Some("true"), "the hook's label is the user's: left alone");
    let states = states.lock().unwrap().clone();
    let mut path = states.clone();
    path.dedup();
    assert_eq!(path, ["PreparingDelete", "PreparingNormal", "Normal"], "the held pod went back through PreparingNormal: {states:?}");
    assert_eq!(extremes.lock().unwrap().uids.len(), 3, "no pod was created or deleted: the held one was taken back");
}

async fn wait_for_state(e: &Env, state: &str) -> String {
    wait_until(T, &format!("a pod in {state}"), || async {
        Ok(e.active_pods("web").await.iter().any(|p| label(p, keys::LIFECYCLE_STATE) == Some(state)))
    })
    .await
    .unwrap();
    e.active_pods("web").await.iter().find(|p| label(p, keys::LIFECYCLE_STATE) == Some(state)).map(|p| p.name_any()).unwrap()
}
