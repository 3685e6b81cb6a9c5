//! Scaling, end to end: the real operator binary against the real control plane, each test in
//! its own namespace with its own operator process. Names and instance ids, podsToDelete,
//! scaleStrategy.maxUnavailable, minReadySeconds, pods released and adopted, and scale
//! expectations across a restart.

use std::collections::BTreeSet;

use cloneset_operator::api::{CloneSet, keys};
use e2e::testenv::{Operator, wait_until, watch_until};
use e2e::workload::{T, env, label, manifest, monitor, names, new_image, rolled_out, settled, st};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;

#[tokio::test]
async fn scales_0_10_3_8() {
    let e = env("scale").await;
    e.create(&manifest("web", 0, "nginx:1.27", json!({}))).await;
    e.wait_status("web", "0 replicas observed", |cs| settled(cs, 0)).await;
    assert!(e.active_pods("web").await.is_empty());
    for replicas in [10, 3, 8] {
        e.patch("web", json!({"replicas": replicas})).await;
        e.wait_status("web", &format!("{replicas} ready"), |cs| settled(cs, replicas)).await;
        let pods = e.active_pods("web").await;
        assert_eq!(pods.len(), replicas as usize, "exactly {replicas} active pods");
        for p in &pods {
            let id = label(p, keys::CLONESET_INSTANCE_ID).unwrap();
            assert_eq!(p.name_any(), format!("web-{id}"));
        }
    }
}

#[tokio::test]
async fn a_deleted_pod_is_replaced_under_a_new_instance_id() {
    let e = env("replace").await;
    e.create(&manifest("web", 3, "nginx:1.27", json!({}))).await;
    e.wait_status("web", "3 ready", |cs| settled(cs, 3)).await;
    let before = names(&e.active_pods("web").await);
    let victim = before.iter().next().unwrap().clone();
    e.pods.delete(&victim, &DeleteParams::default()).await.unwrap();
    wait_until(T, "a replacement pod", || async {
        let now = names(&e.active_pods("web").await);
        Ok(now.len() == 3 && !now.contains(&victim))
    })
    .await
    .unwrap();
    e.wait_status("web", "3 ready again", |cs| settled(cs, 3)).await;
    let after = names(&e.active_pods("web").await);
    let new: Vec<&String> = after.difference(&before).collect();
    assert_eq!(new.len(), 1, "exactly one new pod: {after:?} vs {before:?}");
    assert!(before.iter().filter(|n| **n != victim).all(|n| after.contains(n)), "the others were untouched");
}

#[tokio::test]
async fn pods_to_delete_and_the_specified_delete_label_remove_exactly_those_pods() {
    let e = env("podstodelete").await;
    e.create(&manifest("web", 4, "nginx:1.27", json!({}))).await;
    e.wait_status("web", "4 ready", |cs| settled(cs, 4)).await;
    let before: Vec<String> = names(&e.active_pods("web").await).into_iter().collect();

    // As `kubectl kruise scaledown --pods` does: list the pod and lower replicas in one write.
    e.patch("web", json!({"replicas": 3, "scaleStrategy": {"podsToDelete": [before[0]]}})).await;
    let cs = e.wait_status("web", "3 ready", |cs| settled(cs, 3) && cs.spec.scale_strategy.pods_to_delete.is_empty()).await;
    assert!(cs.spec.scale_strategy.pods_to_delete.is_empty(), "podsToDelete truncated once the pod is gone");
    let after = names(&e.active_pods("web").await);
    assert_eq!(after, before[1..].iter().cloned().collect(), "exactly the listed pod was deleted");

    // The label: the pod goes and is replaced (replicas unchanged).
    let target = before[1].clone();
    e.pods
        .patch(&target, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {keys::SPECIFIED_DELETE: "true"}}})))
        .await
        .unwrap();
    wait_until(T, "the labelled pod to be replaced", || async {
        let now = names(&e.active_pods("web").await);
        Ok(now.len() == 3 && !now.contains(&target))
    })
    .await
    .unwrap();
    let now = names(&e.active_pods("web").await);
    assert!(now.contains(&before[2]) && now.contains(&before[3]), "the unlabelled pods stayed");
}

/// Kruise lists a CloneSet's pods by owner UID: a pod it controls still counts after its
/// instance-id label is removed (no replacement is made for it; scaling down counts it).
#[tokio::test]
async fn a_controlled_pod_whose_instance_id_label_is_removed_still_counts() {
    let e = env("nolabel").await;
    e.create(&manifest("web", 2, "nginx:1.27", json!({}))).await;
    let cs = e.wait_status("web", "2 ready", |cs| settled(cs, 2)).await;
    let pod = e.active_pods("web").await.remove(0);
    let unlabel = json!({"metadata": {"labels": {keys::CLONESET_INSTANCE_ID: null}}});
    e.pods.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(unlabel)).await.unwrap();
    e.patch("web", json!({"replicas": 1})).await;
    e.wait_status("web", "1 ready", |cs| settled(cs, 1)).await;
    let uid = cs.metadata.uid.clone();
    let owned = || async {
        let pods = e.pods.list(&ListParams::default()).await.unwrap().items;
        pods.into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && p.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref()))
            .count()
    };
    assert_eq!(owned().await, 1, "the unlabelled pod was counted, not replaced");
}

/// Kruise's RefManager releases a pod whose labels stop matching the selector: its owner
/// reference is removed (the pod itself is left running) and a new pod takes its place.
#[tokio::test]
async fn a_pod_whose_labels_stop_matching_is_released_and_replaced() {
    let e = env("release").await;
    e.create(&manifest("web", 2, "nginx:1.27", json!({}))).await;
    e.wait_status("web", "2 ready", |cs| settled(cs, 2)).await;
    let pod = e.active_pods("web").await.remove(0);
    assert_eq!(pod.owner_references().len(), 1);
    e.pods.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}}))).await.unwrap();
    watch_until(&e.pods, &pod.name_any(), T, |p| p.owner_references().is_empty()).await.expect("the relabelled pod is released");
    e.wait_status("web", "2 ready again", |cs| settled(cs, 2)).await;
    let now = e.active_pods("web").await;
    assert_eq!(now.len(), 2, "a new pod replaces it");
    let owner = &pod.owner_references()[0];
    assert!(now.iter().all(|p| p.owner_references() == std::slice::from_ref(owner)), "both are the CloneSet's: {now:?}");
    let released = e.pods.get(&pod.name_any()).await.unwrap();
    assert!(released.metadata.deletion_timestamp.is_none(), "the released pod is left running");
}

/// Kruise's RefManager releases no pod while its CloneSet is being deleted: a pod whose labels
/// stop matching then is left out (and garbage collected with the CloneSet), not orphaned.
#[tokio::test]
async fn no_pod_is_released_while_the_cloneset_is_being_deleted() {
    let e = env("norelease").await;
    let mut cs = manifest("web", 2, "nginx:1.27", json!({}));
    // A finalizer of the test's keeps the CloneSet in deletion while we look.
    cs.metadata.finalizers = Some(vec!["e2e.test/hold".into()]);
    e.create(&cs).await;
    e.wait_status("web", "2 ready", |cs| settled(cs, 2)).await;
    e.clonesets.delete("web", &DeleteParams::default()).await.unwrap();
    let pod = e.active_pods("web").await.remove(0);
    e.pods.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}}))).await.unwrap();
    watch_until(&e.clonesets, "web", T, |cs| st(cs).replicas == 1).await.expect("the mismatched pod is left out of the status");
    let now = e.pods.get(&pod.name_any()).await.unwrap();
    assert_eq!(now.owner_references(), pod.owner_references(), "the pod keeps its owner, so it goes with the CloneSet");
    let release = json!({"metadata": {"finalizers": null}});
    e.clonesets.patch("web", &PatchParams::default(), &Patch::Merge(release)).await.unwrap();
}

#[tokio::test]
async fn min_ready_seconds_paces_a_limited_scale_up_and_delays_available() {
    const MIN_READY: i64 = 3;
    let e = env("minready").await;
    e.create(&manifest("web", 0, "nginx:1.27", json!({"minReadySeconds": MIN_READY, "scaleStrategy": {"maxUnavailable": 1}}))).await;
    e.wait_status("web", "0 replicas", |cs| settled(cs, 0)).await;
    let (statuses, record) =
        e2e::testenv::record(&e.clonesets, "web", |cs: &CloneSet| (st(cs).ready_replicas, st(cs).available_replicas)).await.unwrap();
    e.patch("web", json!({"replicas": 3})).await;
    e.wait_status("web", "3 available", |cs| settled(cs, 3)).await;
    record.abort();

    let mut pods = e.active_pods("web").await;
    assert_eq!(pods.len(), 3);
    pods.sort_by_key(|p| p.creation_timestamp());
    let secs = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| t.0.as_second();
    let ready_since = |p: &k8s_openapi::api::core::v1::Pod| {
        let conds = p.status.as_ref().and_then(|s| s.conditions.as_ref()).unwrap();
        secs(conds.iter().find(|c| c.type_ == "Ready" && c.status == "True").unwrap().last_transition_time.as_ref().unwrap())
    };
    for pair in pods.windows(2) {
        let gap = secs(pair[1].metadata.creation_timestamp.as_ref().unwrap()) - ready_since(&pair[0]);
        // Timestamps have whole seconds; the requeue after minReadySeconds keeps the gap short.
        assert!(
            (MIN_READY..=MIN_READY + 5).contains(&gap),
            "{} was created {gap}s after {} became Ready (minReadySeconds {MIN_READY})",
            pair[1].name_any(),
            pair[0].name_any()
        );
    }
    let statuses = statuses.lock().unwrap().clone();
    assert!(statuses.iter().any(|(ready, available)| ready > available), "available lagged ready: {statuses:?}");
    assert!(statuses.iter().all(|(ready, available)| available <= ready), "{statuses:?}");
}

#[tokio::test]
async fn kubectl_scale_drives_pods_through_the_scale_subresource() {
    let e = env("kscale").await;
    e.create(&manifest("web", 1, "nginx:1.27", json!({}))).await;
    e.wait_status("web", "1 ready", |cs| settled(cs, 1)).await;
    let kubeconfig = e2e::testenv::kubeconfig().await.unwrap();
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["-n", &e.ns.name, "scale", "clone/web", "--replicas=4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    e.wait_status("web", "4 ready", |cs| settled(cs, 4)).await;
    let scale = e.clonesets.get_scale("web").await.unwrap();
    assert_eq!(scale.status.unwrap().replicas, 4);
}

#[tokio::test]
async fn restarting_the_operator_mid_rollout_creates_no_extra_pod() {
    let mut e = env("restart").await;
    e.create(&manifest("web", 6, "nginx:1.27", json!({"updateStrategy": {"maxUnavailable": 1}}))).await;
    e.wait_status("web", "6 ready", |cs| rolled_out(cs, 6)).await;
    let (extremes, watch) = monitor(e.pods.clone(), "app=web".into());
    e.patch("web", new_image("nginx:1.28")).await;
    e.wait_status("web", "rollout under way", |cs| (1..6).contains(&st(cs).updated_replicas)).await;
    e.operator.kill();
    let ns = e.ns.name.clone();
    e.operator = Operator::start(&ns, &[]).await.unwrap();
    e.wait_status("web", "rollout finished by the new operator", |cs| rolled_out(cs, 6)).await;
    watch.abort();
    let x = extremes.lock().unwrap();
    assert!(x.max_active <= 6, "never more than 6 active pods: saw {}", x.max_active);
    assert_eq!(x.uids.len(), 12, "each of the 6 old pods replaced exactly once: {} pods existed", x.uids.len());
}

#[tokio::test]
async fn pods_to_delete_naming_a_pod_this_cloneset_does_not_own_is_ignored_and_dropped() {
    let e = env("notmine").await;
    e.create(&manifest("a", 1, "nginx:1.27", json!({}))).await;
    e.create(&manifest("b", 1, "nginx:1.27", json!({}))).await;
    e.wait_status("a", "a ready", |cs| settled(cs, 1)).await;
    e.wait_status("b", "b ready", |cs| settled(cs, 1)).await;
    let b_pod = e.active_pods("b").await[0].name_any();
    e.patch("a", json!({"scaleStrategy": {"podsToDelete": [b_pod.clone(), "no-such-pod"]}})).await;
    let a = e.wait_status("a", "the list truncated", |cs| cs.spec.scale_strategy.pods_to_delete.is_empty()).await;
    assert!(settled(&a, 1));
    let b_now = e.active_pods("b").await;
    assert_eq!(b_now.len(), 1);
    assert_eq!(b_now[0].name_any(), b_pod, "another CloneSet's pod is never deleted");
}

#[tokio::test]
async fn scale_strategy_max_unavailable_limits_each_scale_up() {
    let e = env("scalelimit").await;
    let mut cs = manifest("web", 0, "nginx:1.27", json!({"scaleStrategy": {"maxUnavailable": 1}}));
    let annotations = cs.spec.template.metadata.as_mut().unwrap().annotations.get_or_insert_with(Default::default);
    annotations.insert(e2e::nodes::simulated::ANNOTATION_STARTUP_DELAY.into(), "1s".into());
    e.create(&cs).await;
    e.wait_status("web", "0 replicas", |cs| settled(cs, 0)).await;
    let (extremes, watch) = monitor(e.pods.clone(), "app=web".into());
    e.patch("web", json!({"replicas": 3})).await;
    e.wait_status("web", "3 ready", |cs| settled(cs, 3)).await;
    watch.abort();
    {
        let x = extremes.lock().unwrap();
        assert_eq!(x.uids.len(), 3);
        assert_eq!(x.max_unready, 1, "pods were created one at a time, each after the previous became Ready");
    }
    let events: Api<k8s_openapi::api::core::v1::Event> = e.ns.api();
    let limited: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|ev| ev.reason.as_deref() == Some("ScaleUpLimited"))
        .collect();
    let messages: Vec<&str> = limited.iter().filter_map(|ev| ev.message.as_deref()).collect();
    assert!(messages.contains(&"scaleUp is limited because of scaleStrategy.maxUnavailable, limit: 1"), "{messages:?}");
    assert_eq!(messages.len(), messages.iter().collect::<BTreeSet<_>>().len(), "a repeat is counted on the first event: {messages:?}");
    assert!(limited.iter().any(|ev| ev.count > Some(1)), "some ScaleUpLimited repeated: {limited:#?}");
    for ev in &limited {
        // What Kruise's core/v1 broadcaster (client-go's recorder) writes.
        assert_eq!(ev.source.as_ref().and_then(|s| s.component.as_deref()), Some("cloneset-controller"));
        assert_eq!(ev.reporting_component.as_deref(), Some("cloneset-controller"));
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        let o = &ev.involved_object;
        assert_eq!(
            (o.kind.as_deref(), o.api_version.as_deref(), o.name.as_deref()),
            (Some("CloneSet"), Some("apps.kruise.io/v1alpha1"), Some("web"))
        );
        assert!(ev.event_time.is_none() && ev.first_timestamp.is_some() && ev.last_timestamp >= ev.first_timestamp, "{ev:?}");
        assert!(ev.metadata.name.as_deref().is_some_and(|n| n.starts_with("web.")), "named <object>.<hex nanos>: {ev:?}");
    }
}

#[tokio::test]
async fn what_admission_cannot_check_is_reported_on_that_cloneset_only() {
    let e = env("slip").await;
    // Accepted by the CRD and the admission policy, rejected by Kubernetes' pod validation.
    let bad = json!({"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27", "ports": [{"containerPort": 70000}]}]}}});
    e.create(&manifest("bad", 2, "nginx:1.27", bad)).await;
    e.create(&manifest("good", 2, "nginx:1.27", json!({}))).await;
    e.wait_status("good", "the valid neighbour converges", |cs| rolled_out(cs, 2)).await;
    let cs = e
        .wait_status("bad", "a FailedScale condition", |cs| {
            st(cs).conditions.iter().any(|c| c.type_ == "FailedScale" && c.status == "True")
        })
        .await;
    let cond = st(&cs).conditions.into_iter().find(|c| c.type_ == "FailedScale").unwrap();
    assert!(cond.message.contains("containerPort"), "the condition names the field: {}", cond.message);
    assert!(e.active_pods("bad").await.is_empty());
    let events: Api<k8s_openapi::api::events::v1::Event> = e.ns.api();
    wait_until(T, "a FailedCreate Warning event on the CloneSet", || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list.items.iter().any(|ev| {
            ev.reason.as_deref() == Some("FailedCreate")
                && ev.type_.as_deref() == Some("Warning")
                && ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad")
                && ev.note.as_deref().is_some_and(|n| n.contains("containerPort"))
        }))
    })
    .await
    .unwrap();
    // Fixing the template lets it converge.
    e.patch(
        "bad",
        json!({"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27", "ports": [{"containerPort": 8080}]}]}}}),
    )
    .await;
    e.wait_status("bad", "converges after the fix", |cs| rolled_out(cs, 2)).await;
}
