//! The reconciler end to end: the real operator binary against the real control plane, each
//! test in its own namespace with its own operator process.

use std::collections::BTreeSet;

use cloneset_operator::api::{CloneSet, keys};
use e2e::testenv::{Operator, TestNamespace, install_api, wait_until, watch_until};
use e2e::workload::{Env, T, condition, env, env_with, label, manifest, monitor, names, new_image, rolled_out, settled, st};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

/// Kruise's documentation example: CloneSet `sample`, one `nginx:alpine` container, as written.
fn sample_manifest() -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "sample"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "sample"}},
                 "template": {"metadata": {"labels": {"app": "sample"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]}}},
    }))
    .unwrap()
}

/// A revision name already held by another object is a hash collision, as in Kruise: the taken
/// name is read (its data differs), `collisionCount` goes up, and the CloneSet's revision and pods
/// take the name of the next hash. The object that held the name is left alone.
#[tokio::test]
async fn a_revision_name_taken_by_another_object_is_a_hash_collision() {
    use cloneset_operator::core::defaults::default_pod_template;
    use cloneset_operator::core::revision::{hash_revision, revision_data, revision_name};
    let e = env("collision").await;
    let revisions: Api<ControllerRevision> = e.ns.api();
    let intruder: ControllerRevision = serde_json::from_value(json!({
        "metadata": {"name": "sample-d4d4fb5bd"}, "data": {"someone": "else"}, "revision": 1,
    }))
    .unwrap();
    revisions.create(&Default::default(), &intruder).await.unwrap();
    let template = serde_json::to_value(&sample_manifest().spec.template).unwrap();
    let data = revision_data(&default_pod_template(&template));
    let next = revision_name("sample", &hash_revision(&data, 1));
    assert_ne!(next, "sample-d4d4fb5bd");

    e.create(&sample_manifest()).await;
    let cs = e.wait_status("sample", "one ready pod", |cs| rolled_out(cs, 1)).await;
    let s = st(&cs);
    assert_eq!((s.update_revision.as_str(), s.collision_count), (next.as_str(), Some(1)), "{}", e.operator.log_tail(20));
    let pods = e.active_pods("sample").await;
    assert_eq!(label(&pods[0], keys::CONTROLLER_REVISION_HASH), Some(next.as_str()));
    let kept = revisions.get("sample-d4d4fb5bd").await.unwrap();
    assert_eq!(kept.data, intruder.data, "the revision that held the name is not touched");
    assert!(kept.owner_references().is_empty());
}

#[tokio::test]
async fn pods_and_revisions_look_exactly_like_kruise_ones() {
    let e = env("shape").await;
    // The known answer: Kruise's webhook defaults this template of CloneSet `sample` (imagePullPolicy
    // Always, dnsPolicy, …) and Kruise names the result revision `sample-d4d4fb5bd`.
    e.create(&sample_manifest()).await;
    let cs = e.wait_status("sample", "one ready pod", |cs| rolled_out(cs, 1)).await;
    let s = st(&cs);
    assert_eq!(s.update_revision, "sample-d4d4fb5bd");
    assert_eq!(s.current_revision, "sample-d4d4fb5bd");
    assert_eq!(s.label_selector, "app=sample");
    assert_eq!(s.collision_count, Some(0));
    assert_eq!(s.expected_updated_replicas, 1);

    let pods = e.active_pods("sample").await;
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    let id = label(pod, keys::CLONESET_INSTANCE_ID).unwrap();
    assert_eq!(id.len(), 5);
    assert!(id.bytes().all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)), "instance id alphabet: {id}");
    assert_eq!(pod.name_any(), format!("sample-{id}"));
    assert_eq!(pod.metadata.generate_name.as_deref(), Some("sample-"));
    assert_eq!(label(pod, keys::CONTROLLER_REVISION_HASH), Some("sample-d4d4fb5bd"));
    assert_eq!(label(pod, keys::POD_TEMPLATE_HASH), Some("d4d4fb5bd"));
    // Pods are built from the defaulted template: Kruise pulls `Always` even for a tagged image.
    let container = &pod.spec.as_ref().unwrap().containers[0];
    assert_eq!(container.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(container.termination_message_path.as_deref(), Some("/dev/termination-log"));
    assert_eq!(label(pod, keys::LIFECYCLE_STATE), Some("Normal"));
    assert!(pod.annotations().contains_key(keys::LIFECYCLE_TIMESTAMP));
    let owner = &pod.owner_references()[0];
    assert_eq!((owner.api_version.as_str(), owner.kind.as_str(), owner.name.as_str()), ("apps.kruise.io/v1alpha1", "CloneSet", "sample"));
    assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
    let gates = pod.spec.as_ref().unwrap().readiness_gates.clone().unwrap();
    assert_eq!(gates[0].condition_type, "InPlaceUpdateReady");
    assert_eq!(condition(pod, "InPlaceUpdateReady").as_deref(), Some("True"));
    assert_eq!(condition(pod, "Ready").as_deref(), Some("True"));

    let revs: Api<ControllerRevision> = e.ns.api();
    let rev = revs.get("sample-d4d4fb5bd").await.unwrap();
    assert_eq!(rev.revision, 1);
    assert_eq!(rev.labels().get("app").map(String::as_str), Some("sample"));
    assert_eq!(rev.labels().get(keys::CONTROLLER_REVISION_HASH_LABEL).map(String::as_str), Some("d4d4fb5bd"));
    assert_eq!(
        serde_json::to_value(&rev.data.clone().unwrap().0).unwrap(),
        json!({"spec": {"template": {"$patch": "replace", "metadata": {"creationTimestamp": null, "labels": {"app": "sample"}},
            "spec": {"containers": [{"image": "nginx:alpine", "imagePullPolicy": "Always", "name": "nginx", "resources": {},
                                     "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
                     "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                     "securityContext": {}, "terminationGracePeriodSeconds": 30}}}})
    );
    assert_eq!(rev.owner_references()[0].name, "sample");
}

/// Kruise's `TemplateNoDefaults` gate: the template is hashed as written (`sample-597d4cb8fd`) and
/// pods get only what the apiserver fills in (`IfNotPresent` for a tagged image).
#[tokio::test]
async fn template_no_defaults_hashes_the_template_as_written() {
    let e = env_with("nodefaults", &["--feature-gates=TemplateNoDefaults=true"]).await;
    e.create(&sample_manifest()).await;
    let cs = e.wait_status("sample", "one ready pod", |cs| rolled_out(cs, 1)).await;
    assert_eq!(st(&cs).update_revision, "sample-597d4cb8fd");
    let pods = e.active_pods("sample").await;
    assert_eq!(pods[0].spec.as_ref().unwrap().containers[0].image_pull_policy.as_deref(), Some("IfNotPresent"));

    // Turning defaulting on (an upgrade from a version without it) changes nothing until the
    // template changes: Kruise's webhook defaults a template only when it is written.
    let mut e = e;
    e.operator.stop();
    let op = Operator::start(&e.ns.name, &[]).await.unwrap();
    wait_until(T, "the CloneSet reconciled and the queue empty", || async {
        Ok(e2e::bench::reconciled_and_idle(&op.metrics().await?, 1.0))
    })
    .await
    .unwrap();
    let writes = e2e::bench::Requests::from_metrics(&op.metrics().await.unwrap());
    assert_eq!(writes.writes(), 0.0, "defaulting on wrote something: {writes:?}\n{}", op.log_tail(30));
    assert_eq!(st(&e.clonesets.get("sample").await.unwrap()).update_revision, "sample-597d4cb8fd");
    e.operator = op;
    e.patch("sample", json!({"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}})).await;
    let cs = e.wait_status("sample", "rolled out to the changed template", |cs| rolled_out(cs, 1)).await;
    let revs: Api<ControllerRevision> = e.ns.api();
    let data = serde_json::to_value(&revs.get(&st(&cs).update_revision).await.unwrap().data.unwrap().0).unwrap();
    assert_eq!(data["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "Always", "the changed template is defaulted");
}

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

#[tokio::test]
async fn partition_canary_updates_replicas_minus_partition_within_budgets() {
    let e = env("canary").await;
    let spec = json!({"updateStrategy": {"partition": 8, "maxUnavailable": 2}});
    e.create(&manifest("web", 10, "nginx:1.27", spec)).await;
    e.wait_status("web", "10 ready", |cs| rolled_out(cs, 10)).await;
    let (extremes, watch) = monitor(e.pods.clone(), "app=web".into());
    e.patch("web", new_image("nginx:1.28")).await;
    for partition in [8, 5, 0] {
        e.patch("web", json!({"updateStrategy": {"partition": partition}})).await;
        let cs = e
            .wait_status("web", &format!("partition {partition}"), |cs| {
                let s = st(cs);
                settled(cs, 10) && s.updated_replicas == 10 - partition && s.updated_ready_replicas == 10 - partition
            })
            .await;
        let s = st(&cs);
        assert_eq!(s.expected_updated_replicas, 10 - partition);
        let new = e
            .active_pods("web")
            .await
            .iter()
            .filter(|p| label(p, keys::CONTROLLER_REVISION_HASH) == Some(s.update_revision.as_str()))
            .count();
        assert_eq!(new, (10 - partition) as usize, "pods on the new revision at partition {partition}");
    }
    let cs = e.wait_status("web", "rollout complete", |cs| rolled_out(cs, 10)).await;
    assert_eq!(st(&cs).current_revision, st(&cs).update_revision);
    watch.abort();
    let x = extremes.lock().unwrap();
    assert!(x.max_active <= 10, "never more than replicas + maxSurge (0) active pods: saw {}", x.max_active);
    assert!(x.min_available.unwrap() >= 8, "never fewer than replicas − maxUnavailable ready pods: saw {:?}", x.min_available);
    assert_eq!(x.uids.len(), 20, "recreate: each of the 10 old pods replaced exactly once");
}

#[tokio::test]
async fn paused_stops_updates_but_not_scaling() {
    let e = env("paused").await;
    e.create(&manifest("web", 3, "nginx:1.27", json!({}))).await;
    e.wait_status("web", "3 ready", |cs| rolled_out(cs, 3)).await;
    let old: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    e.patch(
        "web",
        json!({"updateStrategy": {"paused": true}, "template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.28"}]}}}),
    )
    .await;
    e.patch("web", json!({"replicas": 5})).await;
    let cs = e.wait_status("web", "5 ready while paused", |cs| settled(cs, 5)).await;
    // Partition 0: scale-up pods get the new revision; the 3 old pods are untouched.
    assert_eq!(st(&cs).updated_replicas, 2);
    let now: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert!(old.is_subset(&now), "no old pod was replaced while paused");
    e.patch("web", json!({"updateStrategy": {"paused": false}})).await;
    e.wait_status("web", "rollout after resume", |cs| rolled_out(cs, 5)).await;
}

async fn roll_to(e: &Env, image: &str, replicas: i32) -> String {
    e.patch("web", new_image(image)).await;
    let cs = e
        .wait_status("web", &format!("rolled out {image}"), |cs| {
            rolled_out(cs, replicas) && cs.spec.template.spec.as_ref().unwrap().containers[0].image.as_deref() == Some(image)
        })
        .await;
    st(&cs).update_revision
}

#[tokio::test]
async fn rollback_reuses_the_previous_revision_and_history_is_truncated() {
    let e = env("history").await;
    e.create(&manifest("web", 2, "nginx:1.20", json!({"revisionHistoryLimit": 2}))).await;
    let cs = e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    let first = st(&cs).update_revision;
    let second = roll_to(&e, "nginx:1.21", 2).await;
    assert_ne!(first, second);
    let back = roll_to(&e, "nginx:1.20", 2).await;
    assert_eq!(back, first, "rolling back reuses the old revision's name");
    let revs: Api<ControllerRevision> = e.ns.api();
    assert_eq!(revs.get(&first).await.unwrap().revision, 3, "the reused revision moved to the head of history");

    for v in 22..=26 {
        roll_to(&e, &format!("nginx:1.{v}"), 2).await;
    }
    let current = st(&e.clonesets.get("web").await.unwrap()).update_revision;
    wait_until(T, "history truncated to the limit", || async {
        let list = revs.list(&ListParams::default()).await?;
        Ok(list.items.len() == 3)
    })
    .await
    .unwrap();
    let mut kept: Vec<ControllerRevision> = revs.list(&ListParams::default()).await.unwrap().items;
    kept.sort_by_key(|r| r.revision);
    let numbers: Vec<i64> = kept.iter().map(|r| r.revision).collect();
    assert_eq!(numbers, [6, 7, 8], "the live revision and the 2 newest others");
    assert_eq!(kept[2].name_any(), current);
}

/// A pod the kubelet evicted (phase Failed, reason Evicted; the object stays) with PVCs it may
/// reuse: the operator deletes it, as the StatefulSet controller deletes a failed pod, and its
/// replacement takes its instance id and so its PVC, which is kept. Never a create into the name
/// the evicted pod still holds (Kruise v1.9.0 retries that `already exists` forever).
#[tokio::test]
async fn an_evicted_pod_is_replaced_under_its_id_with_its_pvc() {
    let e = env("evicted").await;
    let vct = json!({"volumeClaimTemplates": [{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]});
    e.create(&manifest("db", 2, "nginx:1.27", vct)).await;
    e.wait_status("db", "2 ready", |cs| settled(cs, 2)).await;
    let pvcs: Api<PersistentVolumeClaim> = e.ns.api();
    let victim = e.active_pods("db").await.remove(0);
    let id = label(&victim, keys::CLONESET_INSTANCE_ID).unwrap().to_string();
    let pvc_uid = pvcs.get(&format!("data-db-{id}")).await.unwrap().metadata.uid;
    let events: Api<k8s_openapi::api::core::v1::Event> = e.ns.api();
    let (seen, watch) = e2e::testenv::record_selected(&events, Default::default(), |ev: &k8s_openapi::api::core::v1::Event| {
        (ev.reason.clone().unwrap_or_default(), ev.message.clone().unwrap_or_default())
    })
    .await
    .unwrap();

    evict(&e.pods, &victim.name_any()).await;
    let victim_uid = victim.metadata.uid.clone();
    let replaced = wait_until(T, "the evicted pod replaced under its instance id", || async {
        Ok(e.pods.get_opt(&victim.name_any()).await?.is_some_and(|p| p.metadata.uid != victim_uid))
    })
    .await;
    watch.abort();
    replaced.unwrap_or_else(|err| panic!("{err:#}\n{}", e.operator.log_tail(30)));
    e.wait_status("db", "2 ready again", |cs| settled(cs, 2)).await;
    assert_eq!(pvcs.get(&format!("data-db-{id}")).await.unwrap().metadata.uid, pvc_uid, "the evicted pod's PVC was kept and reused");
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.iter().any(|(reason, _)| reason == "FailedCreate"), "a create into a name still taken: {seen:?}");
    assert!(seen.iter().any(|(reason, msg)| reason == "SuccessfulDelete" && msg.contains(&victim.name_any())), "{seen:?}");
}

/// What the kubelet's eviction leaves: the pod object, in phase Failed with reason Evicted.
async fn evict(pods: &Api<k8s_openapi::api::core::v1::Pod>, name: &str) {
    let status = json!({"status": {"phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi."}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}

#[tokio::test]
async fn pvcs_are_created_per_instance_and_reused() {
    let e = env("pvc").await;
    let vct = json!({"volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"kind": "data"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]});
    e.create(&manifest("db", 2, "nginx:1.27", vct)).await;
    e.wait_status("db", "2 ready", |cs| settled(cs, 2)).await;
    let pvcs: Api<PersistentVolumeClaim> = e.ns.api();
    let pods = e.active_pods("db").await;
    for p in &pods {
        let id = label(p, keys::CLONESET_INSTANCE_ID).unwrap();
        let pvc = pvcs.get(&format!("data-db-{id}")).await.unwrap();
        assert_eq!(pvc.labels().get("kind").map(String::as_str), Some("data"));
        assert_eq!(pvc.labels().get("app").map(String::as_str), Some("db"));
        assert_eq!(pvc.labels().get(keys::CLONESET_INSTANCE_ID).map(String::as_str), Some(id));
        let vol = p.spec.as_ref().unwrap().volumes.as_ref().unwrap().iter().find(|v| v.name == "data").unwrap();
        assert_eq!(vol.persistent_volume_claim.as_ref().unwrap().claim_name, format!("data-db-{id}"));
    }
    // A pod deleted by someone else leaves its PVC; the replacement takes over its id and PVC.
    let victim = &pods[0];
    let id = label(victim, keys::CLONESET_INSTANCE_ID).unwrap().to_string();
    let pvc_uid = pvcs.get(&format!("data-db-{id}")).await.unwrap().metadata.uid;
    // A grace period keeps the old pod terminating while its name is reused (Kruise #1099): the
    // replacement must still arrive once it is gone.
    e.pods.delete(&victim.name_any(), &DeleteParams { grace_period_seconds: Some(2), ..Default::default() }).await.unwrap();
    let victim_uid = victim.metadata.uid.clone();
    wait_until(T, "the replacement on the same instance id", || async {
        let pods = e.active_pods("db").await;
        Ok(pods.iter().any(|p| label(p, keys::CLONESET_INSTANCE_ID) == Some(id.as_str()) && p.metadata.uid != victim_uid))
    })
    .await
    .unwrap();
    assert_eq!(pvcs.get(&format!("data-db-{id}")).await.unwrap().metadata.uid, pvc_uid, "the same PVC was reused");
    e.wait_status("db", "2 ready again", |cs| settled(cs, 2)).await;
    // Scaling down deletes the pod's PVC with it.
    e.patch("db", json!({"replicas": 1})).await;
    e.wait_status("db", "1 ready", |cs| settled(cs, 1)).await;
    let remaining: BTreeSet<String> =
        e.active_pods("db").await.iter().map(|p| format!("data-db-{}", label(p, keys::CLONESET_INSTANCE_ID).unwrap())).collect();
    wait_until(T, "only the remaining pod's PVC", || async {
        let names: BTreeSet<String> = pvcs
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| p.name_any())
            .collect();
        Ok(names == remaining)
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn disable_pvc_reuse_gives_the_replacement_fresh_pvcs_and_hands_the_old_ones_to_the_dead_pod() {
    let e = env("noreuse").await;
    let spec = json!({"scaleStrategy": {"disablePVCReuse": true},
        "volumeClaimTemplates": [{"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]});
    e.create(&manifest("db", 2, "nginx:1.27", spec)).await;
    e.wait_status("db", "2 ready", |cs| settled(cs, 2)).await;
    let pvcs: Api<PersistentVolumeClaim> = e.ns.api();
    let before = e.active_pods("db").await;
    let victim = &before[0];
    let old_id = label(victim, keys::CLONESET_INSTANCE_ID).unwrap().to_string();
    let old_pvc = format!("data-db-{old_id}");
    // (kind, uid, controller, blockOwnerDeletion) of each owner.
    let owners_of = |pvc: &PersistentVolumeClaim| -> Vec<(String, String, Option<bool>, Option<bool>)> {
        pvc.owner_references().iter().map(|o| (o.kind.clone(), o.uid.clone(), o.controller, o.block_owner_deletion)).collect()
    };
    let (owners, record) = e2e::testenv::record(&pvcs, &old_pvc, owners_of).await.unwrap();
    // A grace period keeps the deleted pod terminating long enough to be seen inactive.
    e.pods.delete(&victim.name_any(), &DeleteParams { grace_period_seconds: Some(3), ..Default::default() }).await.unwrap();
    e2e::testenv::wait_deleted(&pvcs, &old_pvc, T).await.unwrap();
    record.abort();
    e.wait_status("db", "2 ready again", |cs| settled(cs, 2)).await;

    let after = e.active_pods("db").await;
    let replacement = after.iter().find(|p| p.metadata.uid != victim.metadata.uid && p.metadata.uid != before[1].metadata.uid).unwrap();
    let new_id = label(replacement, keys::CLONESET_INSTANCE_ID).unwrap();
    assert_ne!(new_id, old_id, "with reuse disabled the replacement never takes the dead pod's id");
    let new_pvc = pvcs.get(&format!("data-db-{new_id}")).await.expect("the replacement got its own PVC");
    assert_eq!(new_pvc.owner_references()[0].kind, "CloneSet");
    let owners = owners.lock().unwrap().clone();
    let victim_uid = victim.metadata.uid.clone().unwrap();
    assert_eq!(owners.first().map(|o| o[0].0.as_str()), Some("CloneSet"), "{owners:?}");
    // Kruise's updateClaimOwnerRefToPod: the CloneSet's ref removed, NewControllerRef(pod) appended.
    assert!(
        owners.iter().any(|o| o == &[("Pod".to_string(), victim_uid.clone(), Some(true), Some(true))]),
        "the old PVC was handed to the terminating pod (its only owner, as its controller) and went away with it: {owners:?}"
    );
}

/// Whether the CloneSet `cs` has a Warning event `reason` whose message satisfies `what` (read
/// through core/v1, which shows the events of both event APIs).
async fn has_warning(e: &Env, cs: &str, reason: &str, what: impl Fn(&str) -> bool) -> anyhow::Result<bool> {
    let events: Api<k8s_openapi::api::core::v1::Event> = e.ns.api();
    Ok(events.list(&ListParams::default()).await?.items.iter().any(|ev| {
        ev.type_.as_deref() == Some("Warning")
            && ev.reason.as_deref() == Some(reason)
            && ev.involved_object.name.as_deref() == Some(cs)
            && ev.message.as_deref().is_some_and(&what)
    }))
}

fn failed_scale(cs: &CloneSet) -> Option<String> {
    st(cs).conditions.into_iter().find(|c| c.type_ == "FailedScale" && c.status == "True").map(|c| c.message)
}

/// Kruise's `createOnePod`: a PVC it has to create whose name is taken (here by a PVC released
/// from the CloneSet) fails the pod: FailedCreate "failed to create pvc: …", FailedScale, no pod.
#[tokio::test]
async fn a_pvc_create_conflict_fails_the_pod_create_with_failed_create() {
    let mut e = env("pvcconflict").await;
    let claim = |name: &str| json!({"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    e.create(&manifest("db", 1, "nginx:1.27", json!({"volumeClaimTemplates": [claim("data"), claim("logs")]}))).await;
    e.wait_status("db", "1 ready", |cs| settled(cs, 1)).await;
    let pod = e.active_pods("db").await.remove(0);
    let id = label(&pod, keys::CLONESET_INSTANCE_ID).unwrap().to_string();
    // `logs-db-<id>` stops being the CloneSet's; `data-db-<id>` keeps the id free for reuse. The
    // operator is away meanwhile: a running one may see the pod go before the PVC change (two
    // watches, no order between them) and rightly reuse the PVC it still takes for its own.
    e.operator.stop();
    let pvcs: Api<PersistentVolumeClaim> = e.ns.api();
    pvcs.patch(&format!("logs-db-{id}"), &PatchParams::default(), &Patch::Merge(json!({"metadata": {"ownerReferences": null}})))
        .await
        .unwrap();
    e.pods.delete(&pod.name_any(), &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    e.operator = Operator::start(&e.ns.name, &[]).await.unwrap();
    let cs = e.wait_status("db", "a FailedScale condition", |cs| failed_scale(cs).is_some()).await;
    let taken = format!("persistentvolumeclaims \"logs-db-{id}\" already exists");
    assert!(failed_scale(&cs).unwrap().contains(&taken), "{:?}", failed_scale(&cs));
    wait_until(T, "a FailedCreate event for the PVC", || async {
        has_warning(&e, "db", "FailedCreate", |m| m.starts_with("failed to create pvc: ") && m.contains(&taken)).await
    })
    .await
    .unwrap();
    assert!(e.active_pods("db").await.is_empty(), "no pod is created without its PVCs");
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

fn progressing(cs: &CloneSet) -> Option<(String, String)> {
    st(cs).conditions.into_iter().find(|c| c.type_ == "Progressing").map(|c| (c.status, c.reason))
}

#[tokio::test]
async fn progressing_condition_follows_the_rollout_and_its_deadline() {
    let e = env("progress").await;
    e.create(&manifest("web", 2, "nginx:1.27", json!({"progressDeadlineSeconds": 3, "updateStrategy": {"partition": 1}}))).await;
    let cs = e.wait_status("web", "available", |cs| rolled_out(cs, 2)).await;
    assert_eq!(progressing(&cs), Some(("True".into(), "CloneSetAvailable".into())));
    // Partition 1 of 2 with the canary ready: partition available.
    e.patch("web", new_image("nginx:1.28")).await;
    e.wait_status("web", "partition available", |cs| progressing(cs) == Some(("True".into(), "ProgressPartitionAvailable".into()))).await;
    e.patch("web", json!({"updateStrategy": {"paused": true}})).await;
    e.wait_status("web", "paused", |cs| progressing(cs) == Some(("True".into(), "CloneSetPaused".into()))).await;
    // An image that never pulls cannot progress: after the 3 s deadline, False.
    e.patch(
        "web",
        json!({"updateStrategy": {"paused": false, "partition": 0},
        "template": {"spec": {"containers": [{"name": "main", "image": "registry.example/unpullable:1"}]}}}),
    )
    .await;
    let cs =
        e.wait_status("web", "deadline exceeded", |cs| progressing(cs) == Some(("False".into(), "ProgressDeadlineExceeded".into()))).await;
    let cond = st(&cs).conditions.into_iter().find(|c| c.type_ == "Progressing").unwrap();
    assert_eq!(cond.message, format!("CloneSet revision {} has timed out progressing", st(&cs).update_revision));
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

/// The swap the project promises: a CloneSet with its revision and pods exactly as Kruise's
/// manager left them (webhook-defaulted template, Kruise's labels, gates and conditions) is
/// taken over by this operator without a single write, then keeps rolling.
#[tokio::test]
async fn a_cloneset_kruise_made_is_taken_over_without_a_write() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::PostParams;
    install_api().await.unwrap();
    let ns = TestNamespace::create("takeover").await.unwrap();
    let (clonesets, pods, revs): (Api<CloneSet>, Api<Pod>, Api<ControllerRevision>) = (ns.api(), ns.api(), ns.api());
    // The template exactly as Kruise v1.9.0 stored it for CloneSet `inplace`
    // (tests/golden/kruise-v1.9.0-objects/cloneset-in-place.yaml, golden vector `defaulted-template`
    // in e2e/revision-golden), and the hash Kruise named its revision after.
    let (name, hash) = ("inplace", "b55cd4488");
    let revision = format!("{name}-{hash}");
    let template = json!({"metadata": {"labels": {"app": "inplace"}}, "spec": {
        "containers": [{"image": "nginx:1.26", "imagePullPolicy": "Always", "name": "main",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}], "resources": {},
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
        "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler", "securityContext": {},
        "terminationGracePeriodSeconds": 30}});
    let cs: CloneSet =
        serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": name},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "inplace"}}, "template": template,
                 "updateStrategy": {"type": "InPlaceIfPossible"}}}))
        .unwrap();
    let cs = clonesets.create(&PostParams::default(), &cs).await.unwrap();
    let owner = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": name, "uid": cs.metadata.uid,
                       "controller": true, "blockOwnerDeletion": true});
    let mut data = json!({"spec": {"template": template}});
    data["spec"]["template"]["$patch"] = json!("replace");
    data["spec"]["template"]["metadata"]["creationTimestamp"] = Value::Null;
    let rev: ControllerRevision = serde_json::from_value(json!({"metadata": {"name": revision,
        "labels": {"app": "inplace", keys::CONTROLLER_REVISION_HASH_LABEL: hash}, "ownerReferences": [owner]},
        "data": data, "revision": 1}))
    .unwrap();
    let rev_uid = revs.create(&PostParams::default(), &rev).await.unwrap().metadata.uid;
    for id in ["bb2xk", "dq45z", "hv8m7"] {
        let mut pod = json!({"metadata": {"name": format!("{name}-{id}"), "generateName": format!("{name}-"),
            "labels": {"app": "inplace", keys::CONTROLLER_REVISION_HASH: revision, keys::POD_TEMPLATE_HASH: hash,
                       keys::CLONESET_INSTANCE_ID: id, keys::LIFECYCLE_STATE: "Normal"},
            "annotations": {keys::LIFECYCLE_TIMESTAMP: "2026-01-01T00:00:00Z"}, "ownerReferences": [owner]},
            "spec": template["spec"].clone()});
        pod["spec"]["readinessGates"] = json!([{"conditionType": keys::INPLACE_UPDATE_READY}, {"conditionType": keys::KRUISE_POD_READY}]);
        let pod: Pod = serde_json::from_value(pod).unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let conds = json!({"status": {"conditions": [{"type": keys::INPLACE_UPDATE_READY, "status": "True"}, {"type": keys::KRUISE_POD_READY, "status": "True"}]}});
        pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(conds)).await.unwrap();
    }
    let status = json!({"status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
        "updatedReplicas": 3, "updatedReadyReplicas": 3, "updatedAvailableReplicas": 3, "expectedUpdatedReplicas": 3,
        "currentRevision": revision, "updateRevision": revision, "collisionCount": 0, "labelSelector": "app=inplace"}});
    clonesets.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    wait_until(T, "Kruise's pods Ready", || async {
        let list = pods.list(&ListParams::default()).await?.items;
        Ok(list.len() == 3 && list.iter().all(|p| condition(p, "Ready").as_deref() == Some("True")))
    })
    .await
    .unwrap();
    let before: BTreeSet<(String, String)> =
        pods.list(&ListParams::default()).await.unwrap().items.iter().map(|p| (p.name_any(), p.resource_version().unwrap())).collect();

    // Swap in this operator.
    let op = Operator::start(&ns.name, &[]).await.unwrap();
    wait_until(T, "every CloneSet reconciled and the queue empty", || async {
        Ok(e2e::bench::reconciled_and_idle(&op.metrics().await?, 1.0))
    })
    .await
    .unwrap();
    let writes = e2e::bench::Requests::from_metrics(&op.metrics().await.unwrap());
    assert_eq!(writes.writes(), 0.0, "the takeover wrote something: {writes:?}\n{}", op.log_tail(30));
    let after: BTreeSet<(String, String)> =
        pods.list(&ListParams::default()).await.unwrap().items.iter().map(|p| (p.name_any(), p.resource_version().unwrap())).collect();
    assert_eq!(before, after, "no pod was touched");
    let all_revs = revs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all_revs.len(), 1, "Kruise's revision was recognised, not duplicated");
    assert_eq!(all_revs[0].metadata.uid, rev_uid);

    // And it keeps working: the bare manifest re-applied with a new image (the merge patch replaces
    // the defaulted container with the one the user wrote) is an in-place rollout of the
    // taken-over pods, to the revision Kruise's webhook would have produced.
    clonesets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}}}})),
        )
        .await
        .unwrap();
    let e_cs = watch_until(&clonesets, name, T, |cs: &CloneSet| {
        cs.status.as_ref().is_some_and(|s| s.observed_generation == 2) && rolled_out(cs, 3)
    })
    .await
    .unwrap();
    let mut kruise_stored = template.clone();
    kruise_stored["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    let data = cloneset_operator::core::revision::revision_data(&kruise_stored);
    let kruise_revision =
        cloneset_operator::core::revision::revision_name(name, &cloneset_operator::core::revision::hash_revision(&data, 0));
    assert_eq!(st(&e_cs).update_revision, kruise_revision);
    let names_after: BTreeSet<String> = pods.list(&ListParams::default()).await.unwrap().items.iter().map(|p| p.name_any()).collect();
    assert_eq!(names_after, before.iter().map(|(n, _)| n.clone()).collect(), "updated in place: the same pods");
    drop(op);
}

/// Kruise's `RecreatePodWhenChangeVCTInCloneSetGate` (its e2e spec "CloneSet Update with
/// VolumeClaimTemplate changes"): an image change that comes with a volumeClaimTemplates change
/// recreates the pods under InPlaceIfPossible, with new instance ids and new PVCs of the new size;
/// an image change alone afterwards is in place again. Revisions carry the
/// `kruise.io/cloneset-volumeclaimtemplate-hash` Kruise v1.9.0 writes (from the Go reference), and
/// a revision an earlier version of this operator hashed its own way still counts as unchanged
/// templates, so an upgrade alone recreates nothing.
#[tokio::test]
async fn a_volume_claim_template_change_recreates_pods_under_the_vct_gate() {
    const GATE: &str = "--feature-gates=RecreatePodWhenChangeVCTInCloneSetGate=true";
    let mut e = env_with("vctgate", &[GATE]).await;
    let claim = |size: &str| json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}});
    let spec = json!({"updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": "100%"}, "volumeClaimTemplates": [claim("1Gi")]});
    e.create(&manifest("db", 2, "nginx:1.27", spec)).await;
    e.wait_status("db", "2 ready", |cs| rolled_out(cs, 2)).await;
    let uids =
        |pods: &[k8s_openapi::api::core::v1::Pod]| -> BTreeSet<String> { pods.iter().filter_map(|p| p.metadata.uid.clone()).collect() };
    let ids = |pods: &[k8s_openapi::api::core::v1::Pod]| -> BTreeSet<String> {
        pods.iter().filter_map(|p| label(p, keys::CLONESET_INSTANCE_ID).map(str::to_string)).collect()
    };
    let first = e.active_pods("db").await;
    // The claim is the Go reference's "one-data" (e2e/revision-golden/vct-corpus.jsonl).
    let kruise_hash = kruise_vct_hash("one-data");
    assert_eq!(update_revision_vct_hash(&e, "db").await, Some(kruise_hash.clone()), "the hash Kruise v1.9.0 writes for these claims");

    e.patch(
        "db",
        json!({"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.28"}]}}, "volumeClaimTemplates": [claim("2Gi")]}),
    )
    .await;
    e.wait_status("db", "rolled out with the new claims", |cs| rolled_out(cs, 2)).await;
    let second = e.active_pods("db").await;
    assert!(uids(&first).is_disjoint(&uids(&second)), "every pod was recreated");
    assert!(ids(&first).is_disjoint(&ids(&second)), "with new instance ids");
    let pvcs: Api<PersistentVolumeClaim> = e.ns.api();
    wait_until(T, "only the new instances' PVCs, of the new size", || async {
        let list = pvcs.list(&ListParams::default()).await?.items;
        let live: Vec<_> = list.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        Ok(live.len() == 2
            && live.iter().all(|p| {
                ids(&second).contains(p.labels().get(keys::CLONESET_INSTANCE_ID).map(String::as_str).unwrap_or_default())
                    && p.spec.as_ref().and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage").cloned())
                        == Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".into()))
            }))
    })
    .await
    .unwrap();

    e.patch("db", new_image("nginx:1.29")).await;
    e.wait_status("db", "rolled out in place", |cs| rolled_out(cs, 2)).await;
    assert_eq!(uids(&e.active_pods("db").await), uids(&second), "an image change alone is in place");

    // The pods' revision as an earlier version of this operator recorded it: its own hash of the
    // same claims. A restart makes sure the caches hold it before the next update.
    let cs = e.clonesets.get("db").await.unwrap();
    let claims = serde_json::to_value(&cs.spec.volume_claim_templates).unwrap();
    let legacy = cloneset_operator::core::revision::legacy_volume_claim_templates_hash(&claims);
    assert_ne!(Some(legacy.clone()), update_revision_vct_hash(&e, "db").await);
    let revs: Api<ControllerRevision> = e.ns.api();
    let update_revision = cs.status.as_ref().map(|s| s.update_revision.clone()).unwrap();
    revs.patch(
        &update_revision,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {keys::VOLUME_CLAIM_TEMPLATE_HASH: legacy}}})),
    )
    .await
    .unwrap();
    e.operator.stop();
    e.operator = Operator::start(&e.ns.name, &[GATE]).await.unwrap();
    e.patch("db", new_image("nginx:1.30")).await;
    e.wait_status("db", "rolled out in place after the upgrade", |cs| rolled_out(cs, 2)).await;
    assert_eq!(uids(&e.active_pods("db").await), uids(&second), "a revision with the earlier hash of the same claims: still in place");
}

/// Kruise v1.9.0's `kruise.io/cloneset-volumeclaimtemplate-hash` for a claim list of the Go
/// reference's corpus (webhook defaults applied, as Kruise stores them).
fn kruise_vct_hash(corpus_name: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/revision-golden/vct-vectors.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let vector: Value = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|v| v["name"] == corpus_name).unwrap();
    vector["defaultedHash"].as_str().unwrap().to_string()
}

/// The VCT hash annotation on the CloneSet's update revision.
async fn update_revision_vct_hash(e: &Env, name: &str) -> Option<String> {
    let cs = e.clonesets.get(name).await.unwrap();
    let revision = cs.status.as_ref()?.update_revision.clone();
    let revs: Api<ControllerRevision> = e.ns.api();
    revs.get(&revision).await.unwrap().annotations().get(keys::VOLUME_CLAIM_TEMPLATE_HASH).cloned()
}

/// Whether the apiserver answers a streaming list (a watch with `sendInitialEvents`) with the
/// bookmark that ends its initial events. Kubernetes v1.36 serves them only over an etcd with
/// progress notifications (3.4.31+, 3.5.13+): the local control plane's etcd 3.4.23 has none,
/// and the apiserver refuses.
async fn apiserver_serves_streaming_lists(ns: &str) -> bool {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(e2e::testenv::client().await.unwrap(), ns);
    let params = kube::api::WatchParams::streaming_lists().labels("e2e-streaming-probe");
    let stream = pods.watch(&params, "0").await.unwrap();
    futures::pin_mut!(stream);
    match futures::StreamExt::next(&mut stream).await {
        Some(Ok(kube::core::WatchEvent::Bookmark(b))) => {
            b.metadata.annotations.get("k8s.io/initial-events-end").is_some_and(|v| v == "true")
        }
        _ => false,
    }
}

/// The caches fill from a streaming list by default (the local control plane serves them), and
/// from pages when told: either way a restarted operator finds every pod it owns, so it writes
/// nothing, and then scales from what it found.
#[tokio::test]
async fn caches_fill_from_a_streaming_list_and_from_pages_and_find_every_pod() {
    let mut e = env("streaming").await;
    // The local control plane's etcd (v3.6) has the progress notifications kube-apiserver needs.
    assert!(apiserver_serves_streaming_lists(&e.ns.name).await, "the local control plane serves streaming lists");
    let by_default = "streaming lists";
    let op = &e.operator;
    wait_until(T, "the operator to say how its caches list", || async { Ok(op.log_tail(400).contains("caches list with")) }).await.unwrap();
    assert!(op.log_tail(400).contains(&format!("caches list with {by_default}")), "{}", op.log_tail(40));
    e.create(&manifest("web", 4, "nginx:1.27", json!({}))).await;
    e.wait_status("web", "4 ready", |cs| settled(cs, 4)).await;
    for (flags, listed_with, replicas) in [(&["--streaming-lists=false"][..], "paged lists", 6), (&[][..], by_default, 3)] {
        e.operator.stop();
        let op = Operator::start(&e.ns.name, flags).await.unwrap();
        wait_until(T, "the CloneSet reconciled and the queue empty", || async {
            Ok(e2e::bench::reconciled_and_idle(&op.metrics().await?, 1.0))
        })
        .await
        .unwrap();
        assert!(op.log_tail(400).contains(&format!("caches list with {listed_with}")), "{}", op.log_tail(40));
        let writes = e2e::bench::Requests::from_metrics(&op.metrics().await.unwrap());
        assert_eq!(writes.writes(), 0.0, "a restart over settled pods wrote: {writes:?}\n{}", op.log_tail(30));
        e.operator = op;
        e.patch("web", json!({"replicas": replicas})).await;
        e.wait_status("web", &format!("{replicas} ready"), |cs| settled(cs, replicas)).await;
        assert_eq!(e.active_pods("web").await.len(), replicas as usize);
    }
}
