//! Pods read in protobuf (`--kube-api-content-type`, the default) decode as they do from the
//! apiserver's JSON: every field the pod cache reads, in lists, paged lists and streaming lists;
//! a write's answer, its identity and resourceVersion.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cloneset_operator::controller::pod_watch::{PodWatchConfig, PodWatchError, pod_events};
use cloneset_operator::metrics::Metrics;
use cloneset_operator::pod_cache::wire::WirePod;
use e2e::testenv::{self, Operator, TestNamespace, wait_until};
use e2e::workload::{env, manifest, settled};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
/// No kubelet runs this node: the pods' status is what the test writes.
const NODE: &str = "protobuf-test-node";

async fn operator_client(protobuf_pods: bool) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(testenv::kubeconfig().await.unwrap()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    cloneset_operator::client::build(cfg, None, Arc::new(Metrics::new()), protobuf_pods).unwrap()
}

fn rich_pod(name: &str, owner_uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"app": "rich", "apps.kruise.io/cloneset-instance-id": name},
            "annotations": {"apps.kruise.io/inplace-update-state": "{\"revision\":\"r-1\"}", "note": ""},
            "finalizers": ["example.com/hold"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 30,
            "initContainers": [{"name": "sidecar", "image": "registry.local/side:1", "restartPolicy": "Always",
                                "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "5"}, {"name": "UNREAD", "value": "x"}]}],
            "containers": [
                {"name": "main", "image": "registry.local/app:1",
                 "env": [
                    {"name": "OTHER", "value": "x"},
                    {"name": "KRUISE_CONTAINER_PRIORITY", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
                    {"name": "KRUISE_CONTAINER_BARRIER", "valueFrom": {"configMapKeyRef": {"name": "barrier", "key": "main", "optional": true}}},
                 ],
                 "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "250m", "memory": "64Mi"}},
                 "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}, {"resourceName": "memory", "restartPolicy": "RestartContainer"}],
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "second", "image": "registry.local/app2:1",
                 "env": [
                    {"name": "KRUISE_CONTAINER_PRIORITY", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "KRUISE_CONTAINER_BARRIER", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                 ]},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
            "tolerations": [{"key": "example.com/t", "operator": "Exists"}],
        },
    }))
    .unwrap()
}

/// A status with every kind of field the cache reads: conditions with and without times,
/// running, waiting and terminated states, allocated resources, IPs.
fn rich_status() -> serde_json::Value {
    let t = |s: u32| format!("2026-11-26T08:00:{s:02}Z");
    json!({"status": {
        "phase": "Running", "message": "a message", "reason": "AReason",
        "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}], "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}],
        "startTime": t(0), "observedGeneration": 1,
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "main is waiting", "lastTransitionTime": t(1), "lastProbeTime": null},
            {"type": "InPlaceUpdateReady", "status": "True", "lastTransitionTime": t(2)},
            {"type": "PodScheduled", "status": "True", "lastProbeTime": t(3), "lastTransitionTime": t(3), "observedGeneration": 1},
        ],
        "initContainerStatuses": [{
            "name": "sidecar", "image": "registry.local/side:1", "imageID": "registry.local/side@sha256:aa", "containerID": "containerd://side2",
            "ready": true, "restartCount": 2, "started": true,
            "state": {"running": {"startedAt": t(4)}},
            "lastState": {"terminated": {"exitCode": 137, "signal": 9, "reason": "Error", "message": "killed", "startedAt": t(1), "finishedAt": t(2), "containerID": "containerd://side1"}},
        }],
        "containerStatuses": [
            {"name": "main", "image": "registry.local/app:1", "imageID": "registry.local/app@sha256:bb", "containerID": "containerd://main3",
             "ready": false, "restartCount": 3, "started": false,
             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
             "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": t(5), "finishedAt": t(6), "containerID": "containerd://main2"}},
             "allocatedResources": {"cpu": "250m", "memory": "64Mi"},
             "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "250m", "memory": "64Mi"}},
             "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            {"name": "second", "image": "registry.local/app2:1", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}},
        ],
    }})
}

fn by_name(pods: Vec<WirePod>) -> BTreeMap<String, WirePod> {
    pods.into_iter().map(|p| (p.0.name_any(), p)).collect()
}

#[tokio::test]
async fn pods_read_in_protobuf_decode_as_they_do_from_json() {
    let ns = TestNamespace::create("protobuf").await.unwrap();
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = ns.api::<ConfigMap>().create(&PostParams::default(), &owner).await.unwrap();
    let pods: Api<Pod> = ns.api();
    let uid = owner.uid().unwrap();
    for name in ["rich", "deleting", "pending"] {
        pods.create(&PostParams::default(), &rich_pod(name, &uid)).await.unwrap();
    }
    for name in ["rich", "deleting"] {
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(rich_status())).await.unwrap();
    }
    // A pod being deleted (held by its finalizer): deletionTimestamp and grace period.
    pods.delete("deleting", &Default::default()).await.unwrap();

    let json_pods: Api<WirePod> = Api::namespaced(operator_client(false).await, &ns.name);
    let protobuf_client = operator_client(true).await;
    let from_json = by_name(json_pods.list(&ListParams::default()).await.unwrap().items);
    assert_eq!(from_json.len(), 3);
    assert!(from_json["deleting"].0.metadata.deletion_timestamp.is_some());
    let main = &from_json["rich"].0.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert!(main.last_state.as_ref().unwrap().terminated.is_some(), "the status was written: {main:?}");
    // What the core reads of the apiserver's complete pods (k8s-openapi's whole type, stripped).
    for mut whole in pods.list(&ListParams::default()).await.unwrap().items {
        cloneset_operator::pod_cache::fields::keep_read_fields(&mut whole);
        assert_eq!(from_json[&whole.name_any()].0, whole, "the JSON decoder against the stripped whole pod");
    }

    // The pod cache's own watcher, which decodes protobuf straight into the cached pod: a
    // streaming list and a paged one (a pod a page), each then watching the next change; and
    // the same through a client that asks for JSON.
    // Where the apiserver does not serve streaming lists, asking for one is refused (422).
    let streaming_served = e2e::versions::serves_streaming_lists(&e2e::versions::under_test());
    let mut change = 0;
    for (protobuf, streaming) in [(true, true), (true, false), (false, true), (false, false)] {
        let config = PodWatchConfig { namespace: Some(ns.name.clone()), streaming, page_size: 1 };
        let mut events = pod_events(operator_client(protobuf).await, config).boxed();
        if streaming && !streaming_served {
            let refused = tokio::time::timeout(T, events.next()).await.unwrap().unwrap();
            assert!(matches!(&refused, Err(PodWatchError::Api { code: 422, .. })), "a streaming list where none is served: {refused:?}");
            continue;
        }
        let mut listed = Vec::new();
        tokio::time::timeout(T, async {
            loop {
                match events.next().await.unwrap().unwrap() {
                    watcher::Event::Init => listed.clear(),
                    watcher::Event::InitApply(p) => listed.push(p),
                    watcher::Event::InitDone => break,
                    other => panic!("{other:?} before the list ended"),
                }
            }
        })
        .await
        .expect("the pod watch lists");
        let how = format!("protobuf {protobuf}, streaming {streaming}");
        assert_eq!(by_name(listed), by_name(json_pods.list(&ListParams::default()).await.unwrap().items), "{how}");
        change += 1;
        let label = json!({"metadata": {"labels": {"change": change.to_string()}}});
        pods.patch("pending", &PatchParams::default(), &Patch::Merge(label)).await.unwrap();
        let changed = tokio::time::timeout(T, async {
            loop {
                if let watcher::Event::Apply(p) = events.next().await.unwrap().unwrap()
                    && p.0.labels().get("change") == Some(&change.to_string())
                {
                    return p;
                }
            }
        })
        .await
        .expect("the change is watched");
        assert_eq!(changed, json_pods.get("pending").await.unwrap(), "{how}");
    }

    // A pod list through kube's `Api` on the operator's protobuf client is not the cache's: it
    // is the apiserver's whole JSON (managedFields included), never a trimmed pod.
    let whole: Api<Pod> = Api::namespaced(protobuf_client, &ns.name);
    let listed = whole.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 3);
    assert!(listed.items.iter().all(|p| p.metadata.managed_fields.is_some() && p.spec.as_ref().is_some_and(|s| s.volumes.is_some())));

    // No kubelet confirms their deletion: released from the finalizer and deleted at once.
    for name in ["rich", "deleting", "pending"] {
        // Cleanup only: the pod garbage collector may have deleted an orphaned pod first.
        let _ = pods.patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await;
        let _ = pods.delete(name, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await;
    }
}

/// What a write is answered with in protobuf: the written pod's name, namespace, uid and
/// resourceVersion, as a JSON read of it gives them, and nothing else.
fn identity(WirePod(pod): WirePod) -> WirePod {
    let m = pod.metadata;
    WirePod(Pod {
        metadata: ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// The pod every write is answered with (a create, a patch, a status patch, a deletion) reads from
/// protobuf as the identity and resourceVersion of the JSON read of the same pod, and a refused
/// write's status (conflict, invalid with its causes, not found) reads as it does from JSON.
#[tokio::test]
async fn pod_writes_answered_in_protobuf_decode_as_they_do_from_json() {
    let ns = TestNamespace::create("protobuf-writes").await.unwrap();
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = ns.api::<ConfigMap>().create(&PostParams::default(), &owner).await.unwrap();
    let uid = owner.uid().unwrap();
    let json_client = operator_client(false).await;
    let protobuf_client = operator_client(true).await;
    let json_pods: Api<WirePod> = Api::namespaced(json_client.clone(), &ns.name);
    let protobuf_pods: Api<WirePod> = Api::namespaced(protobuf_client.clone(), &ns.name);

    // Created as the operator creates pods: a Pod sent, the answer read as a WirePod.
    let body = serde_json::to_vec(&rich_pod("rich", &uid)).unwrap();
    let create = kube::core::Request::new(protobuf_pods.resource_url()).create(&PostParams::default(), body).unwrap();
    let created: WirePod = protobuf_client.request(create).await.unwrap();
    assert_eq!(created, identity(json_pods.get("rich").await.unwrap()), "the answer to a create");

    let labelled = protobuf_pods
        .patch("rich", &PatchParams::default(), &Patch::Strategic(json!({"metadata": {"labels": {"patched": "yes"}}})))
        .await
        .unwrap();
    let read = json_pods.get("rich").await.unwrap();
    assert_eq!(read.0.labels().get("patched").map(String::as_str), Some("yes"));
    assert_ne!(labelled.0.resource_version(), created.0.resource_version());
    assert_eq!(labelled, identity(read), "the answer to a patch");

    let with_status = protobuf_pods.patch_status("rich", &PatchParams::default(), &Patch::Merge(rich_status())).await.unwrap();
    let read = json_pods.get("rich").await.unwrap();
    assert!(read.0.status.as_ref().is_some_and(|s| s.container_statuses.is_some()));
    assert_eq!(with_status, identity(read), "the answer to a status patch");

    // What kube was handed for a write is the transcoded JSON: no managedFields.
    let raw_patch = |client: Client, value: &str| {
        let patch = json!({"metadata": {"annotations": {"raw": value}}});
        let req =
            kube::core::Request::new(protobuf_pods.resource_url()).patch("rich", &PatchParams::default(), &Patch::Merge(&patch)).unwrap();
        async move { client.request_text(req).await.unwrap() }
    };
    assert!(raw_patch(json_client.clone(), "json").await.contains("managedFields"));
    let answer = raw_patch(protobuf_client.clone(), "protobuf").await;
    assert!(!answer.contains("managedFields") && !answer.contains("\"spec\"") && !answer.contains("\"labels\""), "{answer}");

    // Refused writes: each client's error for the same request is the same status.
    let refused = |api: Api<WirePod>, name: &'static str, patch: serde_json::Value| async move {
        match api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Err(kube::Error::Api(status)) => *status,
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    };
    let stale = json!({"metadata": {"resourceVersion": created.0.resource_version(), "labels": {"stale": "yes"}}});
    let invalid = json!({"metadata": {"labels": {"bad label!": "x"}}});
    for (what, name, patch, code) in
        [("conflict", "rich", stale, 409), ("invalid", "rich", invalid, 422), ("missing", "nobody", json!({}), 404)]
    {
        let from_json = refused(json_pods.clone(), name, patch.clone()).await;
        let from_protobuf = refused(protobuf_pods.clone(), name, patch).await;
        assert_eq!(from_json.code, code, "{what}: {from_json:?}");
        assert_eq!(from_protobuf, from_json, "{what}: the refusal reads as from JSON");
    }

    // Deleted, held by its finalizer: the answer is the pod, at the version with its deletion timestamp.
    let deleted = protobuf_pods.delete("rich", &DeleteParams::default()).await.unwrap();
    let deleted = deleted.left().expect("a pod held by a finalizer is answered with the pod");
    let read = json_pods.get("rich").await.unwrap();
    assert!(read.0.metadata.deletion_timestamp.is_some());
    assert_eq!(deleted, identity(read), "the answer to a deletion");

    let pods: Api<Pod> = ns.api();
    let _ = pods.patch("rich", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await;
    let _ = pods.delete("rich", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await;
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
    wait_until(e2e::workload::T, "the operator to say how its caches list", || async { Ok(op.log_tail(400).contains("caches list with")) })
        .await
        .unwrap();
    assert!(op.log_tail(400).contains(&format!("caches list with {by_default}")), "{}", op.log_tail(40));
    e.create(&manifest("web", 4, "nginx:1.27", json!({}))).await;
    e.wait_status("web", "4 ready", |cs| settled(cs, 4)).await;
    for (flags, listed_with, replicas) in [(&["--streaming-lists=false"][..], "paged lists", 6), (&[][..], by_default, 3)] {
        e.operator.stop();
        let op = Operator::start(&e.ns.name, flags).await.unwrap();
        wait_until(e2e::workload::T, "the CloneSet reconciled and the queue empty", || async {
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
