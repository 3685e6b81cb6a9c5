//! The compact layout against the stripped pod it stands for, and what a pass expands.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::read::{LINEAR_PAIRS, pair_value};
use super::*;
use crate::core::pod_read::PodRead;
use crate::core::{pod_read, status, sync};

fn golden(file: &str) -> Pod {
    let path = format!("{}/tests/golden/kruise-v1.9.0-objects/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Pods with every part the controller reads set in some way: as Kruise and the kubelet
/// left them, terminating with finalizers, with sidecars and resources, restarted, waiting,
/// resizing, nominated, with empty and absent lists.
fn pods() -> Vec<Pod> {
    let terminating = json!(
        {"metadata": {"name": "terminating", "namespace": "ns", "uid": "u1", "resourceVersion": "7", "generation": 3,
                      "deletionTimestamp": "2026-11-25T10:00:00Z", "deletionGracePeriodSeconds": 30,
                      "finalizers": ["apps.kruise.io/pre-delete"], "labels": {}, "ownerReferences": [],
                      "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
         "spec": {"nodeName": "n1", "readinessGates": [],
                  "initContainers": [{"name": "proxy", "image": "envoy:1", "restartPolicy": "Always",
                                      "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "1"}, {"name": "X", "value": "y"}]},
                                     {"name": "setup", "image": "busybox"}],
                  "containers": [{"name": "main", "image": "i:1", "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}},
                                  "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                                  "ports": [{"containerPort": 80}], "command": ["sleep"]},
                                 {"name": "side", "resources": {}}],
                  "volumes": [{"name": "v", "emptyDir": {}}], "priority": 5, "hostname": "h"},
         "status": {"phase": "Running", "message": "m", "reason": "r", "nominatedNodeName": "n2", "resize": "InProgress",
                    "observedGeneration": 3, "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}],
                    "qosClass": "Burstable", "startTime": "2026-11-25T09:00:00Z",
                    "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "x",
                                    "lastTransitionTime": "2026-11-25T09:00:01Z", "lastProbeTime": "2026-11-25T09:00:02Z",
                                    "observedGeneration": 2}],
                    "initContainerStatuses": [{"name": "proxy", "image": "envoy:1", "imageID": "e@sha256:1", "ready": true,
                                               "restartCount": 4, "started": true, "state": {"running": {}}},
                                              {"name": "setup", "image": "busybox", "imageID": "b@sha256:3", "ready": false,
                                               "restartCount": 9, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                    "containerStatuses": [
                        {"name": "main", "image": "i:1", "imageID": "", "ready": false, "restartCount": 2, "started": false,
                         "containerID": "containerd://abc", "stopSignal": "SIGTERM",
                         "allocatedResources": {"cpu": "100m"}, "resources": {"requests": {"cpu": "100m"}},
                         "volumeMounts": [{"name": "v", "mountPath": "/v"}], "user": {"linux": {"uid": 0, "gid": 0}},
                         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                         "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": "2026-11-25T09:00:00Z",
                                                      "finishedAt": "2026-11-25T09:00:05Z", "containerID": "containerd://def"}}},
                        {"name": "side", "image": "s:1", "imageID": "s@sha256:2", "ready": true, "restartCount": 0,
                         "state": {"running": {"startedAt": "2026-11-25T09:00:00Z"}}, "lastState": {}}]}});
    let pending = json!(
        {"metadata": {"name": "pending", "namespace": "ns", "generateName": "pending-", "uid": "", "resourceVersion": "",
                      "annotations": {"a": "1", "b": ""}},
         "spec": {"containers": []},
         "status": {"phase": "Pending", "podIP": "", "conditions": [],
                    "containerStatuses": [{"name": "c", "image": "", "imageID": "", "containerID": "", "ready": false, "restartCount": 0}]}});
    let mut pods: Vec<Pod> =
        [terminating, json!({"metadata": {"name": "bare"}}), pending].into_iter().map(|p| serde_json::from_value(p).unwrap()).collect();
    pods.push(golden("pod-after-in-place-update.yaml"));
    pods.push(golden("pod-with-pre-delete-hook.yaml"));
    pods
}

/// The cache's contract: a reconcile that expands a cached pod reads exactly what it
/// would have read from the decoded pod, stripped of what nothing reads.
#[test]
fn a_compacted_pod_expands_to_the_stripped_pod() {
    let mut interner = Interner::default();
    for pod in pods() {
        let mut stripped = pod.clone();
        keep_read_fields(&mut stripped);
        let compact = CompactPod::new(pod, &mut interner);
        assert_eq!(compact.expand(), stripped, "{}", compact.name);
        assert_eq!(compact.is_terminating(), stripped.metadata.deletion_timestamp.is_some());
    }
}

/// A pod update reads as the version before it only when it changed the resourceVersion,
/// annotations no decision reads, or what the cache does not keep: every other change the
/// cache keeps (labels, each read annotation, owners, deletion, finalizers, spec, status)
/// queues a reconcile.
#[test]
fn a_pod_reads_as_before_only_when_nothing_a_decision_reads_changed() {
    type Mutation = (&'static str, fn(&mut Pod));
    let alike: &[Mutation] = &[
        ("resourceVersion", |p| p.metadata.resource_version = Some("999".into())),
        ("managedFields", |p| p.metadata.managed_fields = Some(vec![Default::default()])),
        ("an unread annotation", |p| {
            if let Some(a) = p.metadata.annotations.as_mut() {
                a.insert("example.com/touched".into(), "1".into());
            }
        }),
        ("an unread annotation's value", |p| {
            if let Some(a) = p.metadata.annotations.as_mut() {
                for (k, v) in a.iter_mut().filter(|(k, _)| !keys::is_read_pod_annotation(k)) {
                    *v = format!("{k}-changed");
                }
            }
        }),
        ("a spec field not cached", |p| {
            if let Some(s) = p.spec.as_mut() {
                s.priority = Some(77);
            }
        }),
    ];
    let differ: &[Mutation] = &[
        ("a label", |p| _ = p.metadata.labels.get_or_insert_with(Default::default).insert("app".into(), "other".into())),
        ("the uid", |p| p.metadata.uid = Some("another".into())),
        ("the creation time", |p| p.metadata.creation_timestamp = Some(Time("2030-01-01T00:00:00Z".parse().unwrap()))),
        ("the generation", |p| p.metadata.generation = Some(p.metadata.generation.unwrap_or(0) + 1)),
        ("the deletion", |p| p.metadata.deletion_timestamp = Some(Time("2030-01-01T00:00:00Z".parse().unwrap()))),
        ("a finalizer", |p| p.metadata.finalizers.get_or_insert_with(Vec::new).push("example.com/f".into())),
        ("the owners", |p| {
            p.metadata.owner_references.get_or_insert_with(Vec::new).push(OwnerReference {
                api_version: "apps.kruise.io/v1alpha1".into(),
                kind: "CloneSet".into(),
                name: "other".into(),
                uid: "u-other".into(),
                controller: Some(false),
                ..Default::default()
            })
        }),
        ("the node", |p| p.spec.get_or_insert_with(Default::default).node_name = Some("elsewhere".into())),
        ("an image", |p| {
            let spec = p.spec.get_or_insert_with(Default::default);
            match spec.containers.first_mut() {
                Some(c) => c.image = Some("changed:1".into()),
                None => spec.containers.push(Container { name: "added".into(), ..Default::default() }),
            }
        }),
        ("the phase", |p| p.status.get_or_insert_with(Default::default).phase = Some("Failed".into())),
        ("a condition", |p| {
            p.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new).push(PodCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                ..Default::default()
            })
        }),
        ("a container's restart count, or its first status", |p| {
            let statuses = p.status.get_or_insert_with(Default::default).container_statuses.get_or_insert_with(Vec::new);
            match statuses.first_mut() {
                Some(s) => s.restart_count += 1,
                None => statuses.push(ContainerStatus { name: "c".into(), ..Default::default() }),
            }
        }),
        ("a container ID", |p| {
            let statuses = p.status.get_or_insert_with(Default::default).container_statuses.get_or_insert_with(Vec::new);
            match statuses.first_mut() {
                Some(s) => s.container_id = Some("containerd://changed".into()),
                None => statuses.push(ContainerStatus { name: "c".into(), ..Default::default() }),
            }
        }),
        ("the pod IP", |p| p.status.get_or_insert_with(Default::default).pod_ip = Some("10.9.9.9".into())),
        ("the status message", |p| p.status.get_or_insert_with(Default::default).message = Some("changed".into())),
    ];
    let mut interner = Interner::default();
    for pod in pods() {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let before = CompactPod::new(pod.clone(), &mut interner);
        assert!(CompactPod::new(pod.clone(), &mut interner).reads_as(&before), "{name}: compacted again");
        for (what, change) in alike {
            let mut changed = pod.clone();
            change(&mut changed);
            let after = CompactPod::new(changed, &mut interner);
            assert!(after.reads_as(&before) && before.reads_as(&after), "{name}: {what} changed");
        }
        type Named = (String, Box<dyn Fn(&mut Pod)>);
        let mut changes: Vec<Named> =
            differ.iter().map(|(what, change)| (what.to_string(), Box::new(*change) as Box<dyn Fn(&mut Pod)>)).collect();
        for key in keys::READ_POD_ANNOTATIONS {
            changes.push((
                format!("annotation {key}"),
                Box::new(move |p: &mut Pod| _ = p.metadata.annotations.get_or_insert_with(Default::default).insert(key.into(), "x".into())),
            ));
        }
        for (what, change) in &changes {
            let mut changed = pod.clone();
            change(&mut changed);
            let after = CompactPod::new(changed, &mut interner);
            assert!(!after.reads_as(&before) && !before.reads_as(&after), "{name}: {what} changed, and it read as before");
        }
    }
}

/// A label or annotation reads the same whether the pod has few (scanned) or many (searched),
/// keys of the same length included.
#[test]
fn every_label_and_annotation_reads_its_value_however_many_the_pod_has() {
    let mut interner = Interner::default();
    for count in [0, 1, 3, LINEAR_PAIRS, LINEAR_PAIRS + 1, 40] {
        let labels: BTreeMap<String, String> = (0..count).map(|k| (format!("key-{k:02}"), format!("value-{k}"))).collect();
        let mut pod = Pod::default();
        pod.metadata.labels = Some(labels.clone());
        pod.metadata.annotations = Some(labels.clone());
        let read = ReadPod::new(Arc::new(CompactPod::new(pod, &mut interner)));
        // Annotations through `pair_value`, as `annotation` reads them: it asks only for
        // the keys a decision reads.
        let annotation = |k: &str| pair_value(&read.compact.annotations, k);
        for (k, v) in &labels {
            assert_eq!((read.label(k), annotation(k)), (Some(v.as_str()), Some(v.as_str())), "{k} of {count}");
        }
        for absent in ["key-99", "key-", "", "key-000"] {
            assert_eq!((read.label(absent), annotation(absent)), (None, None), "{absent} of {count}");
        }
    }
}

/// What a reconcile reads through [`PodRead`] is what it would read from the expanded pod,
/// and reading it expands nothing.
#[test]
fn compact_reads_answer_as_the_expanded_pod_does() {
    let mut interner = Interner::default();
    for pod in pods() {
        let mut stripped = pod.clone();
        keep_read_fields(&mut stripped);
        let read = ReadPod::new(Arc::new(CompactPod::new(pod, &mut interner)));
        let whole: &dyn PodRead = &stripped;
        let name = whole.name().to_string();
        assert_eq!(
            (read.name(), read.pod_uid(), read.pod_resource_version(), read.phase(), read.is_terminating()),
            (whole.name(), whole.pod_uid(), whole.pod_resource_version(), whole.phase(), whole.is_terminating()),
            "{name}"
        );
        let keys = |m: &Option<BTreeMap<String, String>>| -> Vec<String> {
            m.iter().flatten().map(|(k, _)| k.clone()).chain(["missing".to_string(), String::new()]).collect()
        };
        for k in keys(&stripped.metadata.labels) {
            assert_eq!(read.label(&k), whole.label(&k), "{name}: label {k}");
        }
        // Only the annotations a decision reads can be asked for (`keys::READ_POD_ANNOTATIONS`).
        for k in keys::READ_POD_ANNOTATIONS {
            assert_eq!(read.annotation(k), whole.annotation(k), "{name}: annotation {k}");
        }
        for k in keys(&stripped.metadata.annotations) {
            let value = stripped.metadata.annotations.as_ref().and_then(|a| a.get(&k)).map(String::as_str);
            assert_eq!(pair_value(&read.compact.annotations, &k), value, "{name}: annotation {k}");
        }
        let status = stripped.status.clone().unwrap_or_default();
        let types = status.conditions.iter().flatten().map(|c| c.type_.clone());
        for t in types.chain(["Missing".to_string(), "InPlaceUpdateReady".to_string()]) {
            assert_eq!(read.condition(&t), whole.condition(&t), "{name}: condition {t}");
            assert_eq!(read.has_readiness_gate(&t), whole.has_readiness_gate(&t), "{name}: gate {t}");
        }
        let spec = stripped.spec.clone().unwrap_or_default();
        let gates = spec.readiness_gates.iter().flatten().map(|g| g.condition_type.clone());
        for g in gates.chain(["KruisePodReady".to_string()]) {
            assert_eq!(read.has_readiness_gate(&g), whole.has_readiness_gate(&g), "{name}: gate {g}");
        }
        let containers = spec.containers.iter().map(|c| c.name.clone());
        let statuses = status.container_statuses.iter().flatten().map(|c| c.name.clone());
        for c in containers.chain(statuses).chain(["proxy".to_string(), "missing".to_string()]) {
            assert_eq!(read.container_status(&c), whole.container_status(&c), "{name}: status of {c}");
            assert_eq!(read.container_image(&c), whole.container_image(&c), "{name}: image of {c}");
        }
        assert_eq!(
            (read.node_name(), read.creation_timestamp(), read.max_restarts()),
            (whole.node_name(), whole.creation_timestamp(), whole.max_restarts()),
            "{name}"
        );
        let finalizers = stripped.metadata.finalizers.iter().flatten().cloned();
        for f in finalizers.chain(["missing".to_string(), String::new()]) {
            assert_eq!(read.has_finalizer(&f), whole.has_finalizer(&f), "{name}: finalizer {f}");
        }
        assert!(!read.was_expanded(), "{name}: a read expanded the pod");
        assert_eq!(&*read.whole(), &stripped, "{name}");
        assert!(!read.was_expanded(), "{name}: whole() kept the pod it built");
        assert_eq!(read.full(), &stripped, "{name}");
        assert!(matches!(read.whole(), std::borrow::Cow::Borrowed(_)), "{name}: whole() built the pod again");
    }
}

/// Kruise's in-place-updated golden pod as the `i`th of 40 pods of its CloneSet, on
/// `revision`, read compact.
fn golden_pods_read_compact(revisions: impl Fn(usize) -> &'static str) -> Vec<ReadPod> {
    golden_pods_labelled(revisions, |_| vec![])
}

/// [`golden_pods_read_compact`] with more labels on each pod.
fn golden_pods_labelled(revisions: impl Fn(usize) -> &'static str, labels: impl Fn(usize) -> Vec<(&'static str, String)>) -> Vec<ReadPod> {
    let mut interner = Interner::default();
    (0..40)
        .map(|i| {
            let mut p = golden("pod-after-in-place-update.yaml");
            p.metadata.name = Some(format!("inplace-{i:05}"));
            p.metadata.uid = Some(format!("uid-{i}"));
            let pod_labels = p.metadata.labels.as_mut().unwrap();
            pod_labels.insert(keys::CONTROLLER_REVISION_HASH.into(), revisions(i).into());
            pod_labels.extend(labels(i).into_iter().map(|(k, v)| (k.to_string(), v)));
            ReadPod::new(Arc::new(CompactPod::new(p, &mut interner)))
        })
        .collect()
}

/// The `now` of the test passes (and of the status they compute).
fn pass_time() -> k8s_openapi::jiff::Timestamp {
    "2026-11-22T15:00:00Z".parse().unwrap()
}

/// Kruise's golden in-place CloneSet, scaled to `replicas`.
fn golden_cloneset(replicas: i32) -> crate::api::CloneSet {
    let path = format!("{}/tests/golden/kruise-v1.9.0-objects/cloneset-in-place.yaml", env!("CARGO_MANIFEST_DIR"));
    let mut cs: crate::api::CloneSet = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    cs.spec.replicas = Some(replicas);
    cs
}

/// Runs `decide` on one pass's input over `pods` of `cs`, with `update` as its update revision.
fn with_sync_input<R>(cs: &crate::api::CloneSet, pods: &[&dyn PodRead], update: &str, decide: impl FnOnce(&sync::SyncInput<'_>) -> R) -> R {
    let (revision_data, vct_hashes, nodes) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    decide(&sync::SyncInput {
        cloneset: cs,
        pods,
        current_revision: "inplace-b55cd4488",
        update_revision: update,
        gates: Default::default(),
        resize: Default::default(),
        exclude_preparing_delete_flag: false,
        node_labels: &nodes,
        revision_data: &revision_data,
        revision_vct_hashes: &vct_hashes,
        now: pass_time(),
    })
}

/// One pass's plans and status over `pods` of `cs` (40 replicas), with `update` as its
/// update revision; the names of the pods it expanded.
fn expanded_by_a_pass_of(cs: &crate::api::CloneSet, pods: &[ReadPod], update: &str) -> (sync::UpdatePlan, Vec<String>) {
    let refs = pod_read::refs(pods);
    let update_plan = with_sync_input(cs, &refs, update, |input| {
        assert!(!sync::plan_scale(input).changes_pods());
        assert_eq!(sync::plan_refresh(input), (vec![], None));
        sync::plan_update(input)
    });
    let (st, _) = status::compute(&status::StatusInput {
        cloneset: cs,
        pods: &refs,
        update_revision: update,
        current_revision: "inplace-b55cd4488",
        collision_count: 0,
        expected_updated_replicas: 40,
        now: pass_time(),
    });
    assert_eq!((st.replicas, st.ready_replicas), (40, 40));
    assert_eq!(sync::stale_pods_to_delete(cs, &refs), None);
    (update_plan, pods.iter().filter(|p| p.was_expanded()).map(|p| p.name().to_string()).collect())
}

fn expanded_by_a_pass(pods: &[ReadPod], update: &str) -> (sync::UpdatePlan, Vec<String>) {
    expanded_by_a_pass_of(&golden_cloneset(40), pods, update)
}

/// The reason the reads exist: a pass over a CloneSet whose pods are settled (Kruise's own
/// in-place-updated pod, 40 times) decides without expanding any of them, since each
/// expansion is dozens of allocations.
#[test]
fn a_pass_over_settled_pods_expands_none_of_them() {
    let pods = golden_pods_read_compact(|_| "inplace-b55cd4488");
    let (update, expanded) = expanded_by_a_pass(&pods, "inplace-b55cd4488");
    assert!(update.pods.is_empty());
    assert_eq!(expanded, Vec::<String>::new());
}

/// A pass that chooses pods to update (no priority or scatter strategy, no inPlaceUpdate
/// hook) reads none of them whole: the update order and the lifecycle gate read them in
/// place, and each write builds its pod for itself alone ([`PodRead::whole`]), so a rollout at
/// maxUnavailable 100% does not hold every pod built while its writes run.
#[test]
fn an_update_pass_expands_none_of_the_pods_it_chooses() {
    let pods = golden_pods_read_compact(|i| if i < 38 { "inplace-new" } else { "inplace-b55cd4488" });
    let (update, expanded) = expanded_by_a_pass(&pods, "inplace-new");
    let chosen: Vec<&str> = update.pods.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(chosen, ["inplace-00038", "inplace-00039"]);
    assert_eq!(expanded, Vec::<String>::new());
}

/// The priority and scatter orders read the candidates' labels in place: with both, an update
/// pass still expands none of the pods, and chooses as the whole pods would have it.
#[test]
fn an_update_pass_with_priority_and_scatter_expands_none_of_the_pods() {
    let pods = golden_pods_labelled(
        |i| if i < 30 { "inplace-new" } else { "inplace-b55cd4488" },
        |i| vec![("zone", ["a", "b"][i % 2].to_string()), ("order", format!("o-{i}"))],
    );
    let mut cs = golden_cloneset(40);
    let strategy = &mut cs.spec.update_strategy;
    strategy.priority_strategy = Some(crate::api::shared::UpdatePriorityStrategy {
        order_priority: vec![crate::api::shared::UpdatePriorityOrderTerm { ordered_key: "order".into() }],
        ..Default::default()
    });
    strategy.scatter_strategy = vec![crate::api::shared::UpdateScatterTerm { key: "zone".into(), value: "a".into() }];
    strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(10));
    let (update, expanded) = expanded_by_a_pass_of(&cs, &pods, "inplace-new");
    assert_eq!(expanded, Vec::<String>::new());
    let chosen: Vec<&str> = update.pods.iter().map(|(n, _)| n.as_str()).collect();
    let whole: Vec<Pod> = pods.iter().map(|p| p.whole().into_owned()).collect();
    let whole_refs = pod_read::refs(&whole);
    let whole_plan = with_sync_input(&cs, &whole_refs, "inplace-new", sync::plan_update);
    let whole_chosen: Vec<&str> = whole_plan.pods.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(chosen, whole_chosen);
    // Higher order suffix first, so the scatter had pods of both zones to interleave.
    assert_eq!(
        chosen,
        [
            "inplace-00039",
            "inplace-00038",
            "inplace-00037",
            "inplace-00036",
            "inplace-00035",
            "inplace-00034",
            "inplace-00033",
            "inplace-00032",
            "inplace-00031",
            "inplace-00030"
        ]
    );
}

/// A scale-down pass sorts its victims (node, phase, readiness, deletion cost, restarts,
/// creation) and splits off the ones its preDelete hook holds (labels and finalizers) reading
/// the pods in place, rather than building every pod of the CloneSet to sort them and keeping
/// them built until the pass ends.
#[test]
fn a_scale_down_pass_expands_none_of_the_pods_it_considers() {
    let pods = golden_pods_labelled(
        |i| if i < 20 { "inplace-new" } else { "inplace-b55cd4488" },
        |i| if i % 3 == 0 { vec![("hold", "true".to_string())] } else { vec![] },
    );
    let mut cs = golden_cloneset(30);
    cs.spec.lifecycle = Some(crate::api::shared::Lifecycle {
        pre_delete: Some(crate::api::shared::LifecycleHook {
            labels_handler: [("hold".to_string(), "true".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let refs = pod_read::refs(&pods);
    let plan = with_sync_input(&cs, &refs, "inplace-new", sync::plan_scale);
    let expanded: Vec<&str> = pods.iter().filter(|p| p.was_expanded()).map(|p| p.name()).collect();
    assert_eq!(expanded, Vec::<&str>::new());
    let whole: Vec<Pod> = pods.iter().map(|p| p.whole().into_owned()).collect();
    let whole_refs = pod_read::refs(&whole);
    let whole_plan = with_sync_input(&cs, &whole_refs, "inplace-new", sync::plan_scale);
    assert_eq!((&plan.delete, &plan.prepare_delete), (&whole_plan.delete, &whole_plan.prepare_delete));
    assert_eq!(plan.delete.len() + plan.prepare_delete.len(), 10, "{plan:?}");
    assert!(!plan.delete.is_empty() && !plan.prepare_delete.is_empty(), "{plan:?}");
}

/// Every new pod passes through PreparingNormal, and the pass that moves it to Normal once it
/// is scheduled reads its node in place: during a creation it built each pod it moved, while
/// the cache was storing the pods around it.
#[test]
fn the_move_to_normal_expands_none_of_the_new_pods() {
    let pods = golden_pods_labelled(|_| "inplace-b55cd4488", |_| vec![(keys::LIFECYCLE_STATE, "PreparingNormal".to_string())]);
    let refs = pod_read::refs(&pods);
    let (refresh, _) = with_sync_input(&golden_cloneset(40), &refs, "inplace-b55cd4488", sync::plan_refresh);
    let moved = refresh.iter().filter(|r| r.writes.iter().any(|w| format!("{w:?}").contains(r#"String("Normal")"#))).count();
    assert_eq!(moved, 40, "{refresh:?}");
    let expanded: Vec<&str> = pods.iter().filter(|p| p.was_expanded()).map(|p| p.name()).collect();
    assert_eq!(expanded, Vec::<&str>::new());
}

/// The pod watch empties managedFields and leaves the list (`Some([])`): the compact pod
/// must not keep the rest of the metadata boxed for it, as it did for every watched pod.
#[test]
fn a_watched_pod_with_an_emptied_managed_fields_list_boxes_no_metadata() {
    let mut interner = Interner::default();
    let mut pod = golden("pod-after-in-place-update.yaml");
    keep_read_fields(&mut pod);
    let stripped = pod.clone();
    pod.metadata.managed_fields = Some(Vec::new());
    let compact = CompactPod::from_wire(WirePod(pod), &mut interner);
    assert!(compact.meta_rest.is_none(), "{:?}", compact.meta_rest);
    assert_eq!(compact.expand(), stripped);
}

#[test]
fn stripping_keeps_what_is_read_and_drops_what_is_not() {
    let mut pod = pods().remove(0);
    keep_read_fields(&mut pod);
    let spec = pod.spec.as_ref().unwrap();
    let init = &spec.init_containers.as_ref().unwrap()[0];
    let env: Vec<&str> = init.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert_eq!((init.restart_policy.as_deref(), env), (Some("Always"), vec!["KRUISE_CONTAINER_PRIORITY"]));
    assert!(spec.containers[0].resize_policy.is_some() && spec.containers[0].resources.is_some());
    assert!(spec.containers[0].ports.is_none() && spec.volumes.is_none() && spec.priority.is_none() && spec.hostname.is_none());
    assert!(pod.metadata.managed_fields.is_none() && pod.metadata.finalizers.is_some());
    let status = pod.status.as_ref().unwrap();
    assert!(status.pod_ips.is_none() && status.pod_ip.is_some() && status.resize.is_some());
    let main = &status.container_statuses.as_ref().unwrap()[0];
    assert!(main.volume_mounts.is_none() && main.user.is_none());
    assert!(main.resources.is_some() && main.allocated_resources.is_some() && main.last_state.is_some());
}

#[test]
fn stripped_pods_keep_what_the_controller_reads() {
    let mut pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "labels": {"a": "b"}, "annotations": {"x": "y"}},
        "spec": {
            "nodeName": "n1",
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "containers": [{"name": "main", "image": "i:1", "env": [{"name": "E", "value": "1"}, {"name": "KRUISE_CONTAINER_PRIORITY", "value": "10"}],
                            "resources": {"limits": {"cpu": "1"}}, "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
        },
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}],
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "main", "image": "i:1", "imageID": "sha", "ready": true, "restartCount": 0}]},
    }))
    .unwrap();
    let before = pod.clone();
    keep_read_fields(&mut pod);
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("n1"));
    assert_eq!(spec.readiness_gates, before.spec.as_ref().unwrap().readiness_gates);
    assert_eq!(spec.containers[0].name, "main");
    assert_eq!(spec.containers[0].image.as_deref(), Some("i:1"));
    assert_eq!(spec.containers[0].resources, before.spec.as_ref().unwrap().containers[0].resources);
    let env: Vec<&str> = spec.containers[0].env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert_eq!(env, ["KRUISE_CONTAINER_PRIORITY"], "only the launch priority is read from env");
    assert!(spec.containers[0].volume_mounts.is_none());
    assert!(spec.volumes.is_none() && spec.tolerations.is_none());
    let status = pod.status.as_ref().unwrap();
    assert_eq!(status.conditions, before.status.as_ref().unwrap().conditions);
    assert_eq!(status.container_statuses, before.status.as_ref().unwrap().container_statuses);
    assert_eq!(pod.metadata, before.metadata);
}

/// k8s 1.32's `ActivePods` (Kruise's update order) breaks ties on sidecar restarts, and a
/// sidecar is an init container with `restartPolicy: Always`.
#[test]
fn stripped_pods_keep_sidecar_restarts_for_the_update_order_tie_break() {
    let pod = |restarts: i32| -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("p{restarts}")},
            "spec": {"initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}],
                     "containers": [{"name": "main", "image": "i:1"}]},
            "status": {"initContainerStatuses": [{"name": "proxy", "image": "envoy", "imageID": "", "ready": true, "restartCount": restarts}]},
        }))
        .unwrap();
        keep_read_fields(&mut p);
        p
    };
    assert_eq!(pod(0).spec.unwrap().init_containers.unwrap()[0].restart_policy.as_deref(), Some("Always"));
    assert_eq!(crate::core::order::max_sidecar_restarts(&pod(3)), 3);
}

/// Strings of pods long gone (names, instance ids) do not stay in the pools for ever.
#[test]
fn the_pools_forget_what_no_cached_pod_holds() {
    let mut interner = Interner::default();
    let pod = |i: usize| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": format!("p{i}"), "labels": {"id": format!("{i}")}}})).unwrap()
    };
    let kept: Vec<CompactPod> = (0..100).map(|i| CompactPod::new(pod(i), &mut interner)).collect();
    for i in 100..50_000 {
        drop(CompactPod::new(pod(i), &mut interner));
    }
    // A string held only by a stale label pair goes at the sweep after the pair's.
    assert!(interner.strings.len() <= 4 * 1024 + 2 * kept.len(), "{} strings pooled", interner.strings.len());
    assert!(interner.labels.len() <= 2 * 1024 + kept.len(), "{} labels pooled", interner.labels.len());
    let shared = CompactPod::new(pod(7), &mut interner);
    let (a, b) = (&kept[7].labels.as_ref().unwrap()[0], &shared.labels.as_ref().unwrap()[0]);
    assert!(Arc::ptr_eq(a, b), "equal labels share one allocation");
}

/// Pods of one CloneSet revision hold one shared shape (containers, owners, readiness gates,
/// phase) and one shared block per condition text and container image, whatever their
/// names, nodes, IPs and times; a pod of another revision holds its own.
#[test]
fn the_pods_of_one_revision_share_their_shape() {
    let mut interner = Interner::default();
    let pod = |i: usize, image: &str| -> Pod {
        let mut p = golden("pod-after-in-place-update.yaml");
        p.metadata.name = Some(format!("p-{i}"));
        p.metadata.uid = Some(format!("uid-{i}"));
        let spec = p.spec.as_mut().unwrap();
        spec.node_name = Some(format!("node-{i}"));
        spec.containers[0].image = Some(image.to_string());
        let status = p.status.as_mut().unwrap();
        status.host_ip = Some(format!("10.0.0.{i}"));
        status.pod_ip = Some(format!("10.1.0.{i}"));
        for c in status.conditions.iter_mut().flatten() {
            c.last_transition_time = Some(Time(k8s_openapi::jiff::Timestamp::from_second(1_795_636_149 + i as i64).unwrap()));
        }
        status.container_statuses.as_mut().unwrap()[0].container_id = Some(format!("containerd://{i}"));
        p
    };
    let pods: Vec<Pod> = vec![pod(1, "app:v2"), pod(2, "app:v2"), pod(3, "app:v3")];
    let cached: Vec<CompactPod> = pods.iter().map(|p| CompactPod::new(p.clone(), &mut interner)).collect();
    let (a, b, other) = (&cached[0], &cached[1], &cached[2]);
    assert!(Arc::ptr_eq(&a.shape, &b.shape), "two pods of a revision hold two shapes");
    assert!(!Arc::ptr_eq(&a.shape, &other.shape), "pods of two revisions share a shape");
    let (sa, sb) = (a.status.as_ref().unwrap(), b.status.as_ref().unwrap());
    for (ca, cb) in sa.conditions.as_ref().unwrap().iter().zip(sb.conditions.as_ref().unwrap().iter()) {
        assert!(Arc::ptr_eq(&ca.said, &cb.said), "condition {} held twice", ca.said.type_);
    }
    let image = |s: &CompactStatus| s.container_statuses.as_ref().unwrap()[0].shape.clone();
    assert!(Arc::ptr_eq(&image(sa), &image(sb)), "a revision's container image held twice");
    for (p, c) in pods.into_iter().zip(&cached) {
        let mut stripped = p;
        keep_read_fields(&mut stripped);
        assert_eq!(c.expand(), stripped, "{}", c.name);
    }
}

/// Each slice the cache keeps is a block of its own, never a decoded `Vec`'s block reused in
/// place and shrunk (which leaves the rest of that block a hole behind the cached slice).
#[test]
fn a_compacted_pod_keeps_none_of_the_decoded_pod_s_blocks() {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "cs", "uid": "u"}]},
        "spec": {"containers": [{"name": "main", "image": "i", "env": [{"name": keys::CONTAINER_PRIORITY_ENV, "value": "1"}],
            "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]}],
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [{"name": "main", "image": "i", "imageID": "d", "ready": true, "restartCount": 0}]},
    }))
    .unwrap();
    // Decoded vectors have room to spare, as serde's growth leaves them.
    let spec = pod.spec.as_mut().unwrap();
    let status = pod.status.as_mut().unwrap();
    spec.containers.reserve(3);
    spec.readiness_gates.as_mut().unwrap().reserve(3);
    spec.containers[0].env.as_mut().unwrap().reserve(3);
    spec.containers[0].resize_policy.as_mut().unwrap().reserve(3);
    status.conditions.as_mut().unwrap().reserve(3);
    status.container_statuses.as_mut().unwrap().reserve(3);
    pod.metadata.owner_references.as_mut().unwrap().reserve(3);
    let spec = pod.spec.as_ref().unwrap();
    let status = pod.status.as_ref().unwrap();
    let decoded: Vec<usize> = vec![
        spec.containers.as_ptr() as usize,
        spec.readiness_gates.as_ref().unwrap().as_ptr() as usize,
        spec.containers[0].env.as_ref().unwrap().as_ptr() as usize,
        spec.containers[0].resize_policy.as_ref().unwrap().as_ptr() as usize,
        status.conditions.as_ref().unwrap().as_ptr() as usize,
        status.container_statuses.as_ref().unwrap().as_ptr() as usize,
        pod.metadata.owner_references.as_ref().unwrap().as_ptr() as usize,
    ];
    let compact = CompactPod::from_wire(WirePod(pod), &mut Interner::default());
    let spec = compact.shape.spec.as_ref().unwrap();
    let status = compact.status.as_ref().unwrap();
    let container = &spec.containers[0];
    let kept: Vec<usize> = vec![
        spec.containers.as_ptr() as usize,
        spec.readiness_gates.as_ref().unwrap().as_ptr() as usize,
        container.env.as_ref().unwrap().as_ptr() as usize,
        container.resize_policy.as_ref().unwrap().as_ptr() as usize,
        status.conditions.as_ref().unwrap().as_ptr() as usize,
        status.container_statuses.as_ref().unwrap().as_ptr() as usize,
        compact.shape.owners.as_ptr() as usize,
    ];
    for (what, (d, k)) in ["containers", "readiness gates", "env", "resize policy", "conditions", "container statuses", "owners"]
        .iter()
        .zip(decoded.iter().zip(&kept))
    {
        assert_ne!(d, k, "the cached {what} reuse the decoded block");
    }
    assert_eq!(compact.expand().spec.unwrap().containers[0].env.as_ref().unwrap()[0].name, keys::CONTAINER_PRIORITY_ENV);
}

/// Every in-place update gives a pod a new state annotation: with 4,000 cached pods, the
/// values their earlier versions held must not pile up until the pools double.
#[test]
fn updates_of_many_cached_pods_leave_few_unused_values_pooled() {
    const PODS: usize = 4000;
    let mut interner = Interner::default();
    let pod = |i: usize, update: usize| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": format!("p{i}"), "annotations": {"state": format!("{i}-{update}")}}})).unwrap()
    };
    let mut kept: Vec<CompactPod> = (0..PODS).map(|i| CompactPod::new(pod(i, 0), &mut interner)).collect();
    let bound = PODS + PODS / 8 + 1024 + 1;
    for update in 1..=3 {
        for (i, cached) in kept.iter_mut().enumerate() {
            *cached = CompactPod::new(pod(i, update), &mut interner);
            assert!(interner.labels.len() <= bound, "{} annotation pairs pooled for {PODS} pods", interner.labels.len());
            // A string goes at the sweep after its pair's: one more step of slack.
            let strings_bound = bound + PODS / 8 + 1024 + 2;
            assert!(interner.strings.len() <= strings_bound, "{} strings pooled for {PODS} pods", interner.strings.len());
        }
    }
}
