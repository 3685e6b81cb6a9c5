//! STAND-IN for the real `kubectl-kruise` (openkruise/kruise-tools). The Go module proxy this
//! project can reach refuses every `github.com/openkruise/*` module (403), so the binary cannot
//! be built here. These tests send the requests kubectl-kruise sends for each CloneSet command
//! (spec §10) and assert the resulting CloneSet, revisions and pods. Replace them with tests that
//! drive the real binary once it can be installed.

use std::collections::BTreeSet;

use cloneset_operator::api::{CloneSet, keys};
use e2e::workload::{env, label, manifest, rolled_out, settled, st};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;

/// `rollout history`: the revisions controlled by the CloneSet, found by its selector.
async fn history(revs: &Api<ControllerRevision>, cs: &CloneSet) -> Vec<ControllerRevision> {
    let selector = cloneset_operator::core::status::selector_string(&cs.spec.selector);
    let mut list: Vec<ControllerRevision> = revs
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.owner_references().iter().any(|o| o.controller == Some(true) && Some(&o.uid) == cs.metadata.uid.as_ref()))
        .collect();
    list.sort_by_key(|r| r.revision);
    list
}

/// `rollout undo [--to-revision=N]`: the revision's data, sent as a JSON merge patch.
async fn undo(api: &Api<CloneSet>, name: &str, revision: &ControllerRevision) {
    let data = revision.data.as_ref().unwrap().0.clone();
    assert_eq!(data["spec"]["template"]["$patch"], json!("replace"), "kubectl-kruise sends the directive as stored");
    api.patch(name, &PatchParams::default(), &Patch::Merge(&data)).await.unwrap();
}

fn set_image(image: &str) -> serde_json::Value {
    json!({"spec": e2e::workload::new_image(image)})
}

#[tokio::test]
async fn history_lists_revisions_with_change_cause_and_undo_restores_the_previous_revision() {
    let e = env("undo").await;
    let mut cs = manifest("web", 2, "nginx:1.26", json!({}));
    cs.metadata.annotations = Some([(keys::CHANGE_CAUSE.to_string(), "first".to_string())].into());
    e.create(&cs).await;
    let first = st(&e.wait_status("web", "v1", |cs| rolled_out(cs, 2)).await).update_revision;
    // `set image` with a change cause, as users annotate before a change.
    e.clonesets
        .patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {keys::CHANGE_CAUSE: "second"}}})))
        .await
        .unwrap();
    e.clonesets.patch("web", &PatchParams::default(), &Patch::Merge(set_image("nginx:1.27"))).await.unwrap();
    let cs = e.wait_status("web", "v2", |cs| rolled_out(cs, 2) && st(cs).update_revision != first).await;
    let second = st(&cs).update_revision;

    let revs: Api<ControllerRevision> = e.ns.api();
    let hist = history(&revs, &cs).await;
    let rows: Vec<(i64, String)> =
        hist.iter().map(|r| (r.revision, r.annotations().get(keys::CHANGE_CAUSE).cloned().unwrap_or_default())).collect();
    assert_eq!(rows, [(1, "first".to_string()), (2, "second".to_string())], "REVISION / CHANGE-CAUSE");
    assert_eq!(
        hist[0].data.as_ref().unwrap().0["spec"]["template"]["spec"]["containers"][0]["image"],
        json!("nginx:1.26"),
        "--revision=1 shows the template"
    );

    // undo: back to revision 1, same revision name, and no "$patch" reaches the pods.
    undo(&e.clonesets, "web", &hist[0]).await;
    let cs = e.wait_status("web", "undone", |cs| rolled_out(cs, 2) && st(cs).update_revision == first).await;
    assert_eq!(cs.spec.template.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("nginx:1.26"));
    for p in e.active_pods("web").await {
        assert_eq!(label(&p, keys::CONTROLLER_REVISION_HASH), Some(first.as_str()));
        assert!(!serde_json::to_string(&p).unwrap().contains("$patch"));
    }
    // --to-revision: the newest revision number is now 3 (the reused first one).
    let hist = history(&revs, &cs).await;
    let to = hist.iter().find(|r| r.name_any() == second).unwrap().clone();
    undo(&e.clonesets, "web", &to).await;
    e.wait_status("web", "undone to the second", |cs| rolled_out(cs, 2) && st(cs).update_revision == second).await;
}

#[tokio::test]
async fn pause_resume_restart_scaledown_and_rollout_status() {
    let e = env("tools").await;
    e.create(&manifest("web", 3, "nginx:1.27", json!({}))).await;
    e.wait_status("web", "3 ready", |cs| rolled_out(cs, 3)).await;

    // pause, change, nothing rolls; resume, it rolls.
    e.clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"updateStrategy": {"paused": true}}}))).await.unwrap();
    e.clonesets.patch("web", &PatchParams::default(), &Patch::Merge(set_image("nginx:1.28"))).await.unwrap();
    let paused = e.wait_status("web", "paused observed", |cs| cs.spec.update_strategy.paused).await;
    assert_eq!(st(&paused).updated_replicas, 0);
    e.clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"updateStrategy": {"paused": false}}}))).await.unwrap();
    // `rollout status` returns once observedGeneration caught up and every replica is updated and ready.
    let done = e.wait_status("web", "rollout status complete", |cs| rolled_out(cs, 3)).await;
    let s = st(&done);
    assert!(s.observed_generation >= done.metadata.generation.unwrap() && s.updated_replicas == 3 && s.ready_replicas == 3);

    // restart: a new template annotation, so every pod is recreated on a new revision.
    let before: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {keys::RESTARTED_AT: "2026-11-21T08:00:00Z"}}}}});
    e.clonesets.patch("web", &PatchParams::default(), &Patch::Merge(restart)).await.unwrap();
    e.wait_status("web", "restarted", |cs| rolled_out(cs, 3) && st(cs).update_revision != s.update_revision).await;
    let after: Vec<_> = e.active_pods("web").await;
    assert!(after.iter().all(|p| !before.contains(p.metadata.uid.as_ref().unwrap())), "every pod recreated");
    assert!(after.iter().all(|p| p.annotations().get(keys::RESTARTED_AT).map(String::as_str) == Some("2026-11-21T08:00:00Z")));

    // scaledown --pods a,b: one Replace with the pods listed and replicas lowered by 2.
    let victims: Vec<String> = after.iter().take(2).map(|p| p.name_any()).collect();
    let mut cs = e.clonesets.get("web").await.unwrap();
    cs.spec.scale_strategy.pods_to_delete.extend(victims.iter().cloned());
    cs.spec.replicas = Some(1);
    e.clonesets.replace("web", &PostParams::default(), &cs).await.unwrap();
    e.wait_status("web", "scaled down", |cs| settled(cs, 1) && cs.spec.scale_strategy.pods_to_delete.is_empty()).await;
    let left: Vec<String> = e.active_pods("web").await.iter().map(|p| p.name_any()).collect();
    assert_eq!(left.len(), 1);
    assert!(!victims.contains(&left[0]), "exactly the listed pods went");
}
