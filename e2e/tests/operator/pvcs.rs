//! PVCs, end to end: one set per instance, reused or not (disablePVCReuse), kept for an evicted
//! pod's replacement, volumeClaimTemplates changes, and a PVC create conflict.

use std::collections::BTreeSet;

use cloneset_operator::api::{CloneSet, keys};
use e2e::testenv::{Operator, wait_until};
use e2e::workload::{Env, T, env, env_with, label, manifest, new_image, rolled_out, settled, st};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

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
