//! Updating, end to end: revisions and pods as Kruise writes them, the partition canary within
//! its budgets, paused, rollback and the history limit, the Progressing condition, a CloneSet
//! Kruise made taken over without a write, and the order pods are updated in (priority,
//! scatter). Each test in its own namespace with its own operator process.

use std::collections::BTreeSet;

use cloneset_operator::api::{CloneSet, keys};
use e2e::testenv::{Operator, TestNamespace, install_api, wait_until, watch_until};
use e2e::workload::{Env, T, condition, env, env_with, in_place, label, manifest, monitor, new_image, rolled_out, settled, st, watch_pods};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{ListParams, Patch, PatchParams};
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

/// Rolls the paused CloneSet `web` to a new image and returns its pods in the order they were updated.
async fn rollout_order(e: &Env, replicas: i32) -> Vec<String> {
    let (hist, watch) = watch_pods(e.pods.clone(), "app=web");
    e.patch("web", new_image("nginx:1.28")).await;
    e.patch("web", json!({"updateStrategy": {"paused": false}})).await;
    e.wait_status("web", "rolled out", |cs| rolled_out(cs, replicas)).await;
    watch.abort();
    hist.lock().unwrap().update_order.clone()
}

/// The pods of the operator's first update plan for `name` that updates them all, in the order
/// chosen (the `updating pods` debug line lists them before any write is sent).
fn planned_update_order(e: &Env, name: &str) -> Vec<String> {
    let log = std::fs::read_to_string(&e.operator.log).unwrap();
    let key = format!("cloneset={}/{name}", e.ns.name);
    let plans: Vec<Vec<String>> = log
        .lines()
        .filter(|l| l.contains("updating pods") && l.contains(&key))
        .filter_map(|l| l.split("pods=[").nth(1)?.split(']').next())
        .map(|list| list.split(", ").map(|s| s.trim_matches('"').to_string()).filter(|s| !s.is_empty()).collect())
        .collect();
    let most =
        plans.iter().map(Vec::len).max().unwrap_or_else(|| panic!("no 'updating pods' line for {key}:\n{}", e.operator.log_tail(40)));
    plans.into_iter().find(|p| p.len() == most).unwrap_or_default()
}

/// Labels each pod (by its creation order) so a priority or scatter strategy can tell them apart.
async fn label_pods(e: &Env, labels: &[serde_json::Value]) -> Vec<String> {
    let mut pods = e.active_pods("web").await;
    pods.sort_by_key(|p| p.name_any());
    let mut names = Vec::new();
    for (p, l) in pods.iter().zip(labels) {
        e.pods.patch(&p.name_any(), &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": l}}))).await.unwrap();
        names.push(p.name_any());
    }
    names
}

#[tokio::test]
async fn priority_strategies_choose_the_update_order() {
    let e = env("priority").await;
    let spec = in_place(json!({"updateStrategy": {"maxUnavailable": 1, "paused": true,
        "priorityStrategy": {"orderPriority": [{"orderedKey": "example.io/order"}]}}}));
    e.create(&manifest("web", 4, "nginx:1.27", spec)).await;
    e.wait_status("web", "4 ready", |cs| rolled_out(cs, 4)).await;
    let names = label_pods(
        &e,
        &[
            json!({"example.io/order": "sts-2"}),
            json!({"example.io/order": "sts-10"}),
            json!({"example.io/order": "sts-1"}),
            json!({"example.io/order": "sts-3"}),
        ],
    )
    .await;
    let order = rollout_order(&e, 4).await;
    // The higher trailing integer goes first: sts-10, sts-3, sts-2, sts-1.
    assert_eq!(order, [names[1].clone(), names[3].clone(), names[0].clone(), names[2].clone()]);
}

#[tokio::test]
async fn weight_priority_updates_matching_pods_first() {
    let e = env("weight").await;
    let spec = in_place(json!({"updateStrategy": {"maxUnavailable": 1, "paused": true,
        "priorityStrategy": {"weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"example.io/tier": "canary"}}}]}}}));
    e.create(&manifest("web", 4, "nginx:1.27", spec)).await;
    e.wait_status("web", "4 ready", |cs| rolled_out(cs, 4)).await;
    let canary = json!({"example.io/tier": "canary"});
    let names = label_pods(&e, &[json!({}), canary.clone(), json!({}), canary]).await;
    let order = rollout_order(&e, 4).await;
    let first_two: BTreeSet<String> = order[..2].iter().cloned().collect();
    assert_eq!(first_two, [names[1].clone(), names[3].clone()].into(), "the weighted pods go first: {order:?}");
}

#[tokio::test]
async fn scatter_strategy_spreads_matching_pods_across_the_rollout() {
    let e = env("scatter").await;
    // All six in one pass (maxUnavailable 100%), so the observed order is one scatter sort; with
    // a smaller budget the remaining pods are re-sorted every round, as in Kruise.
    let spec = in_place(
        json!({"updateStrategy": {"maxUnavailable": "100%", "paused": true, "scatterStrategy": [{"key": "example.io/zone", "value": "a"}]}}),
    );
    e.create(&manifest("web", 6, "nginx:1.27", spec)).await;
    e.wait_status("web", "6 ready", |cs| rolled_out(cs, 6)).await;
    let a = json!({"example.io/zone": "a"});
    let b = json!({"example.io/zone": "b"});
    // Without scatter the default order could take the three zone-a pods back to back.
    let names = label_pods(&e, &[a.clone(), a.clone(), a, b.clone(), b.clone(), b]).await;
    let zone_a: BTreeSet<String> = names[..3].iter().cloned().collect();
    // The six pods' writes are pipelined, so the order they land in is not the order chosen: read
    // the chosen order from the operator's plan (its debug line), and check the pods rolled out.
    let landed = rollout_order(&e, 6).await;
    let order = planned_update_order(&e, "web");
    assert_eq!(order.iter().collect::<BTreeSet<_>>(), landed.iter().collect::<BTreeSet<_>>(), "every pod planned once and updated");
    let is_a: Vec<bool> = order.iter().map(|n| zone_a.contains(n)).collect();
    assert!(is_a.windows(2).all(|w| !(w[0] && w[1])), "no two zone-a pods in a row: {is_a:?}");
    assert!(*is_a.last().unwrap(), "one zone-a pod is moved to the very end: {is_a:?}");
}
