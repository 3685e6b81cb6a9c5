//! In-place updates, end to end: the real operator against the real control plane, with the
//! simulated kubelet restarting containers in place.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use cloneset_operator::api::keys;
use e2e::testenv::{record, record_selected, wait_until, watch_until};
use e2e::workload::{T, condition, env, in_place, label, manifest, new_image, rolled_out, settled, st, watch_pods};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};
use serde_json::json;

/// A template change that cannot be made in place (an env var).
fn env_change() -> serde_json::Value {
    json!({"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27", "env": [{"name": "A", "value": "1"}]}]}}})
}

fn restart_count(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "main"))
        .map_or(-1, |c| c.restart_count)
}

fn ip(p: &Pod) -> Option<String> {
    p.status.as_ref().and_then(|s| s.pod_ip.clone())
}

#[tokio::test]
async fn in_place_rollout_keeps_pods_and_passes_through_not_ready() {
    let e = env("inplace").await;
    e.create(&manifest("web", 10, "nginx:1.27", in_place(json!({"updateStrategy": {"partition": 6}})))).await;
    e.wait_status("web", "10 ready", |cs| rolled_out(cs, 10)).await;
    let before: BTreeMap<String, (String, Option<String>, i32)> =
        e.active_pods("web").await.iter().map(|p| (p.metadata.uid.clone().unwrap(), (p.name_any(), ip(p), restart_count(p)))).collect();
    let (hist, watch) = watch_pods(e.pods.clone(), "app=web");
    e.patch("web", new_image("nginx:1.28")).await;
    let cs = e
        .wait_status("web", "partition 6", |cs| settled(cs, 10) && st(cs).updated_replicas == 4 && st(cs).updated_ready_replicas == 4)
        .await;
    let first_wave = st(&cs).update_revision;
    e.patch("web", json!({"updateStrategy": {"partition": 0}})).await;
    e.wait_status("web", "all updated in place", |cs| rolled_out(cs, 10)).await;
    watch.abort();

    let after = e.active_pods("web").await;
    assert_eq!(after.len(), 10);
    for p in &after {
        let uid = p.metadata.uid.clone().unwrap();
        let (name, old_ip, old_restarts) = before.get(&uid).unwrap_or_else(|| panic!("pod {} is new: not updated in place", p.name_any()));
        assert_eq!(&p.name_any(), name, "same name");
        assert_eq!(&ip(p), old_ip, "same IP");
        assert_eq!(restart_count(p), old_restarts + 1, "{name}: the container restarted exactly once");
        assert_eq!(label(p, keys::CONTROLLER_REVISION_HASH), Some(first_wave.as_str()));
        assert_eq!(label(p, keys::LIFECYCLE_STATE), Some("Normal"));
        assert_eq!(condition(p, "InPlaceUpdateReady").as_deref(), Some("True"));
        let state: serde_json::Value = serde_json::from_str(&p.annotations()[keys::INPLACE_UPDATE_STATE]).unwrap();
        assert_eq!(state["revision"], json!(first_wave));
        assert!(state["lastContainerStatuses"]["main"]["imageID"].as_str().is_some_and(|s| s.contains("@sha256:")));
    }
    let h = hist.lock().unwrap();
    assert_eq!(
        h.seen_not_ready_during_update.len(),
        10,
        "every pod was seen not Ready (InPlaceUpdateReady False) during its update: {h:?}"
    );
}

#[tokio::test]
async fn grace_period_delays_the_image_change() {
    let e = env("grace").await;
    e.create(&manifest("web", 1, "nginx:1.27", in_place(json!({"updateStrategy": {"inPlaceUpdateStrategy": {"gracePeriodSeconds": 5}}}))))
        .await;
    e.wait_status("web", "1 ready", |cs| rolled_out(cs, 1)).await;
    let name = e.active_pods("web").await[0].name_any();
    e.patch("web", new_image("nginx:1.28")).await;
    // Kruise's order: the condition turns False first, then the grace annotation is written.
    let not_ready = watch_until(&e.pods, &name, T, |p| {
        condition(p, "InPlaceUpdateReady").as_deref() == Some("False") && p.annotations().contains_key(keys::INPLACE_UPDATE_GRACE)
    })
    .await
    .unwrap();
    let since = not_ready
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "InPlaceUpdateReady"))
        .and_then(|c| c.last_transition_time.clone())
        .unwrap()
        .0;
    let grace: serde_json::Value = serde_json::from_str(&not_ready.annotations()[keys::INPLACE_UPDATE_GRACE]).unwrap();
    assert_eq!(grace["containerImages"], json!({"main": "nginx:1.28"}), "the grace annotation holds the new images");
    assert_eq!(grace["graceSeconds"], json!(5));
    assert_eq!(not_ready.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("nginx:1.27"), "image unchanged at first");
    let changed =
        watch_until(&e.pods, &name, T, |p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("nginx:1.28")).await.unwrap();
    let seen_at: k8s_openapi::jiff::Timestamp = SystemTime::now().try_into().unwrap();
    let waited = seen_at.duration_since(since);
    assert!(waited >= k8s_openapi::jiff::SignedDuration::from_secs(5), "the image changed {waited:?} after the condition turned False");
    assert!(!changed.annotations().contains_key(keys::INPLACE_UPDATE_GRACE), "grace annotation removed with the patch");
    e.wait_status("web", "rolled out", |cs| rolled_out(cs, 1)).await;
}

#[tokio::test]
async fn a_change_that_is_not_in_place_able_recreates_under_in_place_if_possible() {
    let e = env("fallback").await;
    e.create(&manifest("web", 2, "nginx:1.27", in_place(json!({})))).await;
    e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    let old: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    e.patch("web", env_change()).await;
    e.wait_status("web", "rolled out", |cs| rolled_out(cs, 2)).await;
    let new: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert!(old.is_disjoint(&new), "every pod was recreated");
}

#[tokio::test]
async fn in_place_only_reports_failed_update_for_a_change_it_cannot_make() {
    let e = env("inplaceonly").await;
    e.create(&manifest("web", 2, "nginx:1.27", json!({"updateStrategy": {"partition": 2}}))).await;
    e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    let old: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    // An env change under ReCreate with partition 2 updates nothing; switching to InPlaceOnly
    // (template untouched, so admission allows it) then asks for an impossible in-place update.
    e.patch("web", env_change()).await;
    e.patch("web", json!({"updateStrategy": {"type": "InPlaceOnly", "partition": 0}})).await;
    let cs =
        e.wait_status("web", "FailedUpdate", |cs| st(cs).conditions.iter().any(|c| c.type_ == "FailedUpdate" && c.status == "True")).await;
    let cond = st(&cs).conditions.into_iter().find(|c| c.type_ == "FailedUpdate").unwrap();
    assert!(cond.message.contains("update strategy is InPlaceOnly but can not update in-place"), "{}", cond.message);
    let now: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert_eq!(old, now, "no pod was recreated");
    assert_eq!(st(&cs).updated_replicas, 0);
}

/// Container `main` reading template label `ver` into its env `X` (downward API).
fn env_from_ver(ver: &str) -> serde_json::Value {
    json!({"template": {"metadata": {"labels": {"ver": ver}}, "spec": {"containers": [{"name": "main", "image": "nginx:1.27",
        "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ver']"}}}]}]}}})
}

/// A label a container's env reads through the downward API: changed under InPlaceIfPossible,
/// every pod is replaced by a new one and none is ever patched to the new value in place (its
/// container would keep the old one); under InPlaceOnly the pods are held, with a FailedUpdate
/// condition and a Warning event that name the variable.
#[tokio::test]
async fn a_label_read_into_env_changes_by_new_pods_never_in_place() {
    let e = env("envmeta").await;
    e.create(&manifest("web", 2, "nginx:1.27", in_place(env_from_ver("1")))).await;
    e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    let old: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    // Every (UID, `ver`) the pods were seen with, from a watch.
    let (seen, watch) = record_selected(&e.pods, watcher::Config::default().labels("app=web"), |p: &Pod| {
        (p.metadata.uid.clone().unwrap_or_default(), label(p, "ver").unwrap_or_default().to_string())
    })
    .await
    .unwrap();
    e.patch("web", json!({"template": {"metadata": {"labels": {"ver": "2"}}}})).await;
    e.wait_status("web", "rolled out with ver 2", |cs| rolled_out(cs, 2)).await;
    watch.abort();
    let pods = e.active_pods("web").await;
    let new: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert!(old.is_disjoint(&new), "every pod was recreated: {old:?} / {new:?}");
    assert!(pods.iter().all(|p| label(p, "ver") == Some("2")));
    let seen = seen.lock().unwrap().clone();
    for uid in &old {
        assert!(!seen.contains(&(uid.clone(), "2".to_string())), "pod {uid} was patched to ver=2 in place: {seen:?}");
    }

    let kept = new;
    e.patch("web", json!({"updateStrategy": {"type": "InPlaceOnly"}, "template": {"metadata": {"labels": {"ver": "3"}}}})).await;
    let cs =
        e.wait_status("web", "FailedUpdate", |cs| st(cs).conditions.iter().any(|c| c.type_ == "FailedUpdate" && c.status == "True")).await;
    let cond = st(&cs).conditions.into_iter().find(|c| c.type_ == "FailedUpdate").unwrap();
    assert!(cond.message.contains("container main env X (metadata.labels['ver'])"), "{}", cond.message);
    let events: Api<k8s_openapi::api::core::v1::Event> = e.ns.api();
    wait_until(T, "a Warning event naming the variable", || async {
        let list = events.list(&Default::default()).await?;
        Ok(list.items.iter().any(|ev| ev.type_.as_deref() == Some("Warning") && ev.message.as_deref().is_some_and(|m| m.contains("env X"))))
    })
    .await
    .unwrap();
    let pods = e.active_pods("web").await;
    assert_eq!(pods.iter().filter_map(|p| p.metadata.uid.clone()).collect::<BTreeSet<_>>(), kept, "no pod was recreated");
    assert!(pods.iter().all(|p| label(p, "ver") == Some("2")), "no pod was patched to ver=3");
    assert_eq!(st(&cs).updated_replicas, 0);
}

/// What kruise-daemon reports on a pod (`apps.kruise.io/runtime-containers-meta`): each
/// container's running ID and the hash of the values its env read from the pod's metadata, here
/// the values `ver` has when the report is made.
fn daemon_report(p: &Pod, ver: &str) -> String {
    let labels: BTreeMap<String, String> = [("ver".to_string(), ver.to_string())].into();
    let containers: Vec<serde_json::Value> = p
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| {
            let id = p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()).find(|s| s.name == c.name);
            let hash = cloneset_operator::core::env_metadata::expected_hash(c, Some(&labels), None);
            json!({"name": c.name, "containerID": id.and_then(|s| s.container_id.clone()).unwrap_or_default(), "restartCount": 0,
                   "hashes": {"plainHash": 1, "extractedEnvFromMetadataHash": hash}})
        })
        .collect();
    json!({"containers": containers}).to_string()
}

/// Where kruise-daemon reports on the pods (the test plays it: a simulated node runs no
/// containers to restart), the same label change is made in place: same pods, the label patched
/// with a state asking for the env to be refreshed, and a pod counted updated (InPlaceUpdateReady
/// True, so the next pod may start) only once the daemon reports the new value's hash for its
/// running container. Seen from a watch: no pod is ever ready on `ver=2` with the old report.
#[tokio::test]
async fn a_label_read_into_env_changes_in_place_where_kruise_daemon_reports() {
    let e = env("envdaemon").await;
    e.create(&manifest("web", 2, "nginx:1.27", in_place(env_from_ver("1")))).await;
    e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    let report = |p: &Pod, ver: &str| json!({"metadata": {"annotations": {keys::RUNTIME_CONTAINERS_META: daemon_report(p, ver)}}});
    let before = e.active_pods("web").await;
    for p in &before {
        e.pods.patch(&p.name_any(), &PatchParams::default(), &Patch::Merge(report(p, "1"))).await.unwrap();
    }
    let uids: BTreeSet<String> = before.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    // Every (pod, ver, InPlaceUpdateReady, reported value) seen, in order.
    let (seen, watch) = record_selected(&e.pods, watcher::Config::default().labels("app=web"), move |p: &Pod| {
        let reported_old = p.annotations().get(keys::RUNTIME_CONTAINERS_META).is_some_and(|r| *r == daemon_report(p, "1"));
        (p.name_any(), label(p, "ver").unwrap_or_default().to_string(), condition(p, keys::INPLACE_UPDATE_READY), reported_old)
    })
    .await
    .unwrap();
    e.patch("web", json!({"template": {"metadata": {"labels": {"ver": "2"}}}})).await;

    // maxUnavailable lets one pod update at a time: each is patched in place, waits for the
    // daemon, and only then does the next start.
    let mut done = BTreeSet::new();
    for _ in 0..2 {
        let waiting = |p: &Pod| {
            !done.contains(&p.name_any())
                && label(p, "ver") == Some("2")
                && p.annotations().get(keys::INPLACE_UPDATE_STATE).is_some_and(|s| s.contains(r#""updateEnvFromMetadata":true"#))
        };
        wait_until(T, "a pod patched to ver=2 in place, waiting for the daemon", || async {
            Ok(e.active_pods("web").await.iter().any(waiting))
        })
        .await
        .unwrap_or_else(|err| panic!("{err:#}\n--- operator log ---\n{}", e.operator.log_tail(40)));
        let pod = e.active_pods("web").await.into_iter().find(waiting).unwrap();
        if done.is_empty() {
            // A negative needs a window: the operator acts on a pod event within well under a
            // second here, so three seconds without InPlaceUpdateReady turning True is a wait.
            let ready = watch_until(&e.pods, &pod.name_any(), Duration::from_secs(3), |p| {
                condition(p, keys::INPLACE_UPDATE_READY).as_deref() == Some("True")
            })
            .await;
            assert!(ready.is_err(), "{} counted updated before the daemon reported", pod.name_any());
        }
        e.pods.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(report(&pod, "2"))).await.unwrap();
        done.insert(pod.name_any());
    }
    e.wait_status("web", "both updated and ready", |cs| rolled_out(cs, 2)).await;
    watch.abort();
    let after = e.active_pods("web").await;
    assert_eq!(after.iter().filter_map(|p| p.metadata.uid.clone()).collect::<BTreeSet<_>>(), uids, "no pod was recreated");
    let seen = seen.lock().unwrap().clone();
    let early: Vec<_> = seen.iter().filter(|(_, ver, ready, old)| ver == "2" && ready.as_deref() == Some("True") && *old).collect();
    assert!(early.is_empty(), "a pod counted updated while its container still had ver=1: {early:?}");
    for name in &done {
        assert!(
            seen.iter().any(|(n, ver, ready, _)| n == name && ver == "2" && ready.as_deref() == Some("False")),
            "{name} was seen waiting for the daemon"
        );
    }
}

/// CloneSet `web` (InPlaceIfPossible) whose container `main` requests `cpu` (Burstable).
fn sized(replicas: i32, cpu: &str) -> cloneset_operator::api::CloneSet {
    manifest("web", replicas, "nginx:1.27", in_place(json!({"template": {"spec": {"containers": [cpu_request(cpu)]}}})))
}

fn cpu_request(cpu: &str) -> serde_json::Value {
    json!({"name": "main", "image": "nginx:1.27", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "64Mi"}}})
}

/// The cpu request the kubelet reports container `main` running with.
fn reported_cpu(p: &Pod) -> Option<String> {
    let main = p.status.as_ref()?.container_statuses.as_ref()?.iter().find(|c| c.name == "main")?;
    Some(main.resources.as_ref()?.requests.as_ref()?.get("cpu")?.0.clone())
}

/// InPlaceWorkloadVerticalScaling: a resources-only template change resizes the running pods
/// (pods/resize) instead of recreating them: same pods, no restart, the new cpu reported.
#[tokio::test]
async fn vertical_scaling_gate_resizes_pods_in_place() {
    let e = e2e::workload::env_with("resize", &["--feature-gates=InPlaceWorkloadVerticalScaling=true"]).await;
    e.create(&sized(2, "100m")).await;
    e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    let before: BTreeMap<String, i32> =
        e.active_pods("web").await.iter().map(|p| (p.metadata.uid.clone().unwrap(), restart_count(p))).collect();
    assert_eq!(before.values().copied().collect::<Vec<_>>(), [0, 0]);
    e.patch("web", json!({"template": {"spec": {"containers": [cpu_request("200m")]}}})).await;
    let cs = e.wait_status("web", "rolled out", |cs| rolled_out(cs, 2)).await;
    let update_revision = st(&cs).update_revision;
    wait_until(T, "both pods resized and Normal again", || async {
        let pods = e.active_pods("web").await;
        Ok(pods.len() == 2
            && pods.iter().all(|p| reported_cpu(p).as_deref() == Some("200m") && label(p, keys::LIFECYCLE_STATE) == Some("Normal")))
    })
    .await
    .unwrap_or_else(|err| panic!("{err:#}\n--- operator log ---\n{}", e.operator.log_tail(40)));
    for p in &e.active_pods("web").await {
        let uid = p.metadata.uid.clone().unwrap();
        assert!(before.contains_key(&uid), "pod {} is new: recreated instead of resized", p.name_any());
        assert_eq!(restart_count(p), 0, "{}: resized without a restart", p.name_any());
        assert_eq!(spec_cpu(p), "200m");
        assert_eq!(label(p, keys::CONTROLLER_REVISION_HASH), Some(update_revision.as_str()));
        let state: serde_json::Value = serde_json::from_str(&p.annotations()[keys::INPLACE_UPDATE_STATE]).unwrap();
        assert_eq!((&state["revision"], &state["updateResources"]), (&json!(update_revision), &json!(true)));
        assert_eq!(condition(p, "InPlaceUpdateReady").as_deref(), Some("True"));
    }
}

/// Without the gate the same change recreates the pods, as Kruise does.
#[tokio::test]
async fn without_the_vertical_scaling_gate_a_resources_change_recreates() {
    let e = env("noresize").await;
    e.create(&sized(2, "100m")).await;
    e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    let old: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    e.patch("web", json!({"template": {"spec": {"containers": [cpu_request("200m")]}}})).await;
    e.wait_status("web", "rolled out", |cs| rolled_out(cs, 2)).await;
    let pods = e.active_pods("web").await;
    assert!(pods.iter().all(|p| !old.contains(p.metadata.uid.as_ref().unwrap())), "every pod was recreated");
    assert!(pods.iter().all(|p| spec_cpu(p) == "200m"), "every new pod asks for the new cpu");
    // A cluster without pods/resize (its InPlacePodVerticalScaling gate off) drops the
    // container resources a kubelet reports.
    let reported = if resize_served().await { Some("200m") } else { None };
    assert!(pods.iter().all(|p| reported_cpu(p).as_deref() == reported), "reported cpu: {reported:?}");
}

/// The cpu request container `main`'s spec asks for.
fn spec_cpu(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0].resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"].0.clone()
}

/// Whether the apiserver lists `pods/resize` in its discovery.
async fn resize_served() -> bool {
    let client = e2e::testenv::client().await.unwrap();
    client.list_core_api_resources("v1").await.unwrap().resources.iter().any(|r| r.name == "pods/resize")
}

/// Container `main` with the given memory limit (requests below it, so the QoS stays Burstable).
fn memory_limit(limit: &str) -> serde_json::Value {
    json!({"name": "main", "image": "nginx:1.27", "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": limit}}})
}

/// Resources changes from `from` to `to`, then to `then`, that this cluster would refuse to make
/// in place, under InPlaceWorkloadVerticalScaling: under InPlaceIfPossible every pod is replaced
/// by a new one with the new resources; under InPlaceOnly the pods are kept as they are, with a FailedUpdate
/// condition and a FailedUpdatePodInPlace Warning event that say `why`. Seen from a watch: no
/// kept pod is ever given the new resources in place.
async fn a_refused_resize_recreates_or_holds(prefix: &str, [from, to, then]: [serde_json::Value; 3], why: &str) {
    let e = e2e::workload::env_with(prefix, &["--feature-gates=InPlaceWorkloadVerticalScaling=true"]).await;
    let template = |c: &serde_json::Value| json!({"template": {"spec": {"containers": [c]}}});
    e.create(&manifest("web", 2, "nginx:1.27", in_place(template(&from)))).await;
    e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    let old: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    let resources = |p: &Pod| serde_json::to_value(&p.spec.as_ref().unwrap().containers[0].resources).unwrap();
    let (seen, watch) = record_selected(&e.pods, watcher::Config::default().labels("app=web"), move |p: &Pod| {
        (p.metadata.uid.clone().unwrap_or_default(), resources(p))
    })
    .await
    .unwrap();
    e.patch("web", template(&to)).await;
    e.wait_status("web", "rolled out by new pods", |cs| rolled_out(cs, 2)).await;
    let pods = e.active_pods("web").await;
    let new: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert!(old.is_disjoint(&new), "every pod was recreated: {old:?} / {new:?}");
    assert!(pods.iter().all(|p| resources(p) == to["resources"]), "the new pods have the new resources");

    // InPlaceOnly admits an image change only, so the change is made under a partition that
    // holds every pod, then the type switched.
    e.patch("web", json!({"updateStrategy": {"partition": 2}, "template": {"spec": {"containers": [then]}}})).await;
    e.wait_status("web", "the update revision recorded", |cs| st(cs).updated_replicas == 0).await;
    e.patch("web", json!({"updateStrategy": {"type": "InPlaceOnly", "partition": 0}})).await;
    let cs =
        e.wait_status("web", "FailedUpdate", |cs| st(cs).conditions.iter().any(|c| c.type_ == "FailedUpdate" && c.status == "True")).await;
    let cond = st(&cs).conditions.into_iter().find(|c| c.type_ == "FailedUpdate").unwrap();
    assert!(
        cond.message.contains("update strategy is InPlaceOnly but can not update in-place") && cond.message.contains(why),
        "{}",
        cond.message
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = e.ns.api();
    wait_until(T, "a FailedUpdatePodInPlace Warning event that says why", || async {
        let list = events.list(&Default::default()).await?;
        Ok(list.items.iter().any(|ev| {
            ev.type_.as_deref() == Some("Warning")
                && ev.reason.as_deref() == Some("FailedUpdatePodInPlace")
                && ev.message.as_deref().is_some_and(|m| m.contains(why))
        }))
    })
    .await
    .unwrap();
    watch.abort();
    let pods = e.active_pods("web").await;
    assert_eq!(pods.iter().filter_map(|p| p.metadata.uid.clone()).collect::<BTreeSet<_>>(), new, "no held pod was recreated");
    let seen = seen.lock().unwrap().clone();
    for uid in &new {
        assert!(!seen.contains(&(uid.clone(), then["resources"].clone())), "pod {uid} was resized in place: {seen:?}");
    }
    assert_eq!(st(&cs).updated_replicas, 0);
}

/// Where the apiserver does not serve `pods/resize` (Kubernetes 1.32, whose
/// InPlacePodVerticalScaling gate is off by default), a resources change is made by new pods, or
/// held under InPlaceOnly, instead of a resize refused write after write.
#[tokio::test]
async fn where_pods_resize_is_not_served_a_resources_change_recreates_or_holds() {
    assert!(!resize_served().await, "this test is for an apiserver without pods/resize (e2e/src/versions.rs)");
    let steps = [cpu_request("100m"), cpu_request("200m"), cpu_request("300m")];
    a_refused_resize_recreates_or_holds("noresize-served", steps, "pods/resize subresource").await;
}

/// Where the apiserver refuses to lower a memory limit in place (Kubernetes 1.33, unless the
/// container's memory resizePolicy is RestartContainer), such a change is made by new pods, or
/// held under InPlaceOnly.
#[tokio::test]
async fn where_a_memory_limit_cannot_be_lowered_in_place_the_change_recreates_or_holds() {
    assert!(resize_served().await, "this test is for an apiserver with pods/resize (e2e/src/versions.rs)");
    let steps = [memory_limit("128Mi"), memory_limit("96Mi"), memory_limit("64Mi")];
    a_refused_resize_recreates_or_holds("nomemdecrease", steps, "lower a container's memory limit in place").await;
}

/// Where the apiserver allows it, a lowered memory limit is resized in place: same pods, the new
/// limit in their spec and reported by the kubelet.
#[tokio::test]
async fn a_memory_limit_is_lowered_in_place_where_the_cluster_allows_it() {
    let e = e2e::workload::env_with("memdecrease", &["--feature-gates=InPlaceWorkloadVerticalScaling=true"]).await;
    let template = |c: serde_json::Value| json!({"template": {"spec": {"containers": [c]}}});
    e.create(&manifest("web", 2, "nginx:1.27", in_place(template(memory_limit("128Mi"))))).await;
    e.wait_status("web", "2 ready", |cs| rolled_out(cs, 2)).await;
    let before: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    e.patch("web", template(memory_limit("96Mi"))).await;
    e.wait_status("web", "rolled out", |cs| rolled_out(cs, 2)).await;
    let reported = |p: &Pod| -> Option<String> {
        let main = p.status.as_ref()?.container_statuses.as_ref()?.iter().find(|c| c.name == "main")?;
        Some(main.resources.as_ref()?.limits.as_ref()?.get("memory")?.0.clone())
    };
    wait_until(T, "both pods resized", || async {
        let pods = e.active_pods("web").await;
        Ok(pods.len() == 2 && pods.iter().all(|p| reported(p).as_deref() == Some("96Mi")))
    })
    .await
    .unwrap_or_else(|err| panic!("{err:#}\n--- operator log ---\n{}", e.operator.log_tail(40)));
    let after: BTreeSet<String> = e.active_pods("web").await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert_eq!(after, before, "resized in place, not recreated");
}

/// §5.6 launch priority: the container with the higher `KRUISE_CONTAINER_PRIORITY` gets its new
/// image first; the other only once that one runs it and is Ready.
#[tokio::test]
async fn launch_priority_updates_containers_in_batches() {
    let e = env("priority-batches").await;
    let container = |name: &str, image: &str, priority: &str| json!({"name": name, "image": image, "env": [{"name": keys::CONTAINER_PRIORITY_ENV, "value": priority}]});
    let template = |main: &str, side: &str| json!({"template": {"spec": {"containers": [container("main", main, "10"), container("side", side, "1")]}}});
    e.create(&manifest("web", 1, "unused", in_place(template("nginx:1.27", "busybox:1.36")))).await;
    e.wait_status("web", "1 ready", |cs| rolled_out(cs, 1)).await;
    let pod = e.active_pods("web").await.remove(0);
    let image_of = |p: &Pod, name: &str| -> (String, String, bool) {
        let spec = p.spec.as_ref().unwrap().containers.iter().find(|c| c.name == name).unwrap().image.clone().unwrap();
        let status = p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).and_then(|ss| ss.iter().find(|s| s.name == name));
        (spec, status.map(|s| s.image.clone()).unwrap_or_default(), status.is_some_and(|s| s.ready))
    };
    let (versions, record) = record(&e.pods, &pod.name_any(), move |p: &Pod| (image_of(p, "main"), image_of(p, "side"))).await.unwrap();
    e.patch("web", template("nginx:1.28", "busybox:1.37")).await;
    e.wait_status("web", "updated in place", |cs| rolled_out(cs, 1)).await;
    record.abort();

    let after = e.pods.get(&pod.name_any()).await.unwrap();
    assert_eq!(after.metadata.uid, pod.metadata.uid, "the same pod");
    let versions = versions.lock().unwrap().clone();
    let side_changed = versions.iter().position(|(_, side)| side.0 == "busybox:1.37").expect("side was updated");
    let main_changed = versions.iter().position(|(main, _)| main.0 == "nginx:1.28").expect("main was updated");
    assert!(main_changed < side_changed, "main (priority 10) first: {versions:?}");
    let (main_then, _) = &versions[side_changed];
    assert_eq!((main_then.1.as_str(), main_then.2), ("nginx:1.28", true), "side waited for main to run its new image, Ready: {versions:?}");
    let state: serde_json::Value = serde_json::from_str(&after.annotations()[keys::INPLACE_UPDATE_STATE]).unwrap();
    let batches: Vec<serde_json::Value> =
        state["containerBatchesRecord"].as_array().unwrap().iter().map(|b| b["containers"].clone()).collect();
    assert_eq!(batches, [json!(["main"]), json!(["side"])]);
    assert_eq!(condition(&after, "InPlaceUpdateReady").as_deref(), Some("True"));
}
