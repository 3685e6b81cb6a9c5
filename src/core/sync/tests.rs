//! Unit tests of the steps and of how a pass goes from one to the next.

use super::refresh::{refresh_in_place, refresh_in_place_by_state};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::api::cloneset::update_type;

fn cloneset(replicas: i32, mrs: i32, pods_to_delete: &[&str]) -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "foo", "namespace": "ns", "uid": "u"},
        "spec": {"replicas": replicas, "minReadySeconds": mrs, "selector": {"matchLabels": {"app": "foo"}},
                 "template": {"metadata": {"labels": {"app": "foo"}}},
                 "scaleStrategy": {"podsToDelete": pods_to_delete},
                 "updateStrategy": {"maxUnavailable": "20%", "partition": 0, "maxSurge": 0}},
    }))
    .unwrap()
}

fn ready_pod(name: &str, revision: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "foo", keys::CONTROLLER_REVISION_HASH: revision, keys::LIFECYCLE_STATE: "Normal"},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "InPlaceUpdateReady", "status": "True"}]},
    }))
    .unwrap()
}

/// Refresh skips parsing the in-place state of a pod whose `InPlaceUpdateReady` is settled and
/// whose state names no next batch; what it decides must be what the parsed state decides,
/// for every mix of gate, condition, state (none, done, pending, a batch left, an empty batch
/// map, unreadable, under the legacy key) and container status.
#[test]
fn refresh_without_parsing_the_state_decides_as_refresh_with_it() {
    let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
    let last = json!({"main": {"imageID": "old@sha256:1"}});
    let states = [
        None,
        Some((keys::INPLACE_UPDATE_STATE, json!({"revision": "r2", "lastContainerStatuses": last}).to_string())),
        Some((keys::INPLACE_UPDATE_STATE_LEGACY, json!({"revision": "r2", "lastContainerStatuses": last}).to_string())),
        Some((
            keys::INPLACE_UPDATE_STATE,
            json!({"revision": "r2", "lastContainerStatuses": last, "nextContainerImages": {"side": "s:2"}}).to_string(),
        )),
        Some((keys::INPLACE_UPDATE_STATE, json!({"revision": "r2", "lastContainerStatuses": last, "nextContainerImages": {}}).to_string())),
        Some((keys::INPLACE_UPDATE_STATE, "{not json".to_string())),
    ];
    let conditions = [
        json!([]),
        json!([{"type": "InPlaceUpdateReady", "status": "True"}]),
        json!([{"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate"}]),
    ];
    let mut batches_started = 0;
    for state in &states {
        for gate in [false, true] {
            for conditions in &conditions {
                for image_id in ["old@sha256:1", "new@sha256:2"] {
                    let annotations: BTreeMap<&str, &str> = state.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    let pod: Pod = serde_json::from_value(json!({
                        "metadata": {"name": "p", "labels": {keys::CONTROLLER_REVISION_HASH: "r2"}, "annotations": annotations},
                        "spec": {"readinessGates": if gate { json!([{"conditionType": "InPlaceUpdateReady"}]) } else { json!([]) },
                                 "containers": [{"name": "main", "image": "i:2"}, {"name": "side", "image": "s:1"}]},
                        "status": {"phase": "Running", "conditions": conditions,
                                   "containerStatuses": [{"name": "main", "image": "i:2", "imageID": image_id, "ready": true, "restartCount": 0},
                                                         {"name": "side", "image": "s:1", "imageID": "s@sha256:1", "ready": true, "restartCount": 0}]},
                    }))
                    .unwrap();
                    let (writes, requeue) = refresh_in_place(&pod, now);
                    assert_eq!((&writes, requeue), (&refresh_in_place_by_state(&pod, now).0, None), "{pod:?}");
                    batches_started += usize::from(writes.iter().any(|w| matches!(w, PodWrite::Patch(_))));
                }
            }
        }
    }
    assert!(batches_started > 0, "some case starts the next batch, so skipping the parse for it would show");
}

const NO_NODES: &BTreeMap<String, BTreeMap<String, String>> = &BTreeMap::new();
const NO_REVISIONS: &BTreeMap<String, Arc<[u8]>> = &BTreeMap::new();
const NO_VCT_HASHES: &BTreeMap<String, String> = &BTreeMap::new();

/// A pass over `pods` with current revision `foo-r1` and the given update revision.
fn input<'a>(cs: &'a CloneSet, pods: &'a [&'a dyn PodRead], update_revision: &'a str, now: Timestamp) -> SyncInput<'a> {
    SyncInput {
        cloneset: cs,
        pods,
        current_revision: "foo-r1",
        update_revision,
        gates: FeatureGates::default(),
        resize: Default::default(),
        exclude_preparing_delete_flag: false,
        node_labels: NO_NODES,
        revision_data: NO_REVISIONS,
        revision_vct_hashes: NO_VCT_HASHES,
        now,
    }
}

fn plan(cs: &CloneSet, pods: &[Pod]) -> ScalePlan {
    let refs: Vec<&dyn PodRead> = crate::core::pod_read::refs(pods);
    plan_scale(&input(cs, &refs, "foo-r1", "2026-01-01T01:00:00Z".parse().unwrap()))
}

fn five_pods() -> Vec<Pod> {
    (1..=5).map(|i| ready_pod(&format!("foo-{i}"), "foo-r1")).collect()
}

#[test]
fn scale_a_huge_min_ready_seconds_blocks_scale_down() {
    // Kruise TestScale case 1 (issue #1478): every pod counts as unavailable.
    let p = plan(&cloneset(3, 9999, &[]), &five_pods());
    assert_eq!(p.diffs.scale_down_num, 2);
    assert!(p.delete.is_empty(), "deleteReadyLimit is 0: {p:?}");
}

#[test]
fn scale_specified_delete_takes_precedence_over_scale_down() {
    let p = plan(&cloneset(3, 0, &["foo-4"]), &five_pods());
    assert_eq!(p.delete, ["foo-4"]);
}

#[test]
fn scale_normal_scale_down_five_to_three() {
    let p = plan(&cloneset(3, 0, &[]), &five_pods());
    assert_eq!(p.delete.len(), 2);
    assert_eq!(p.create_current + p.create_update, 0);
}

#[test]
fn scale_up_creates_the_missing_pods_from_the_update_revision() {
    let p = plan(&cloneset(8, 0, &[]), &five_pods());
    assert_eq!((p.create_current, p.create_update), (0, 3));
    assert!(p.delete.is_empty());
}

#[test]
fn on_delete_updates_no_pod_and_scale_up_creates_from_the_update_revision() {
    let mut cs = cloneset(4, 0, &[]);
    cs.spec.update_strategy.type_ = update_type::ON_DELETE.into();
    cs.spec.update_strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("100%".into()));
    let pods: Vec<Pod> = (1..=3).map(|i| ready_pod(&format!("foo-{i}"), "foo-r1")).collect();
    let refs: Vec<&dyn PodRead> = crate::core::pod_read::refs(&pods);
    let input = input(&cs, &refs, "foo-r2", "2026-01-01T01:00:00Z".parse().unwrap());
    assert_eq!(plan_update(&input), UpdatePlan::default());
    let scale = plan_scale(&input);
    assert_eq!((scale.create_current, scale.create_update), (0, 1), "{scale:?}");
}

#[test]
fn update_takes_as_many_pods_as_max_unavailable_allows() {
    let mut cs = cloneset(6, 0, &[]);
    cs.spec.update_strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("100%".into()));
    let pods: Vec<Pod> = (1..=6).map(|i| ready_pod(&format!("foo-{i}"), "foo-r1")).collect();
    let refs: Vec<&dyn PodRead> = crate::core::pod_read::refs(&pods);
    let plan = plan_update(&input(&cs, &refs, "foo-r2", "2026-01-01T01:00:00Z".parse().unwrap()));
    assert_eq!(plan.diffs.update_num, 6, "{:?}", plan.diffs);
    assert_eq!(plan.pods.len(), 6, "{plan:?}");
}

fn in_place_cloneset(lifecycle: serde_json::Value) -> CloneSet {
    let mut cs = cloneset(2, 0, &[]);
    cs.spec.update_strategy.type_ = "InPlaceIfPossible".into();
    cs.spec.update_strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("100%".into()));
    cs.spec.lifecycle = serde_json::from_value(lifecycle).unwrap();
    cs
}

fn with_label(mut pod: Pod, key: &str, value: &str) -> Pod {
    pod.metadata.labels.as_mut().unwrap().insert(key.into(), value.into());
    pod
}

#[test]
fn kruise_update_skips_an_updated_pod_already_on_the_update_revision() {
    // Kruise's Update only considers pods not on the target revision: an Updated pod that is
    // waits for its hook's owner, and is never prepared for update again by us.
    let cs = in_place_cloneset(json!({"inPlaceUpdate": {"labelsHandler": {"hook": "true"}}}));
    let done = with_label(ready_pod("foo-1", "foo-r2"), keys::LIFECYCLE_STATE, "Updated");
    let old = with_label(ready_pod("foo-2", "foo-r1"), keys::LIFECYCLE_STATE, "Updated");
    let pods: [&dyn PodRead; 2] = [&done, &old];
    let plan = plan_update(&input(&cs, &pods, "foo-r2", "2026-01-01T01:00:00Z".parse().unwrap()));
    let chosen: Vec<&str> = plan.pods.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(chosen, ["foo-2"], "only the pod still on the old revision: {plan:?}");
}

#[test]
fn kruise_refresh_sets_a_stale_in_place_update_ready_false_back_to_true() {
    // inplaceupdate.Refresh: no update pending, condition not (True, "", "") → True, whole.
    let cs = cloneset(1, 0, &[]);
    let mut pod = with_label(ready_pod("foo-1", "foo-r1"), keys::POD_TEMPLATE_HASH, "r1");
    pod.spec.as_mut().unwrap().readiness_gates =
        Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: keys::INPLACE_UPDATE_READY.into() }]);
    for c in pod.status.as_mut().unwrap().conditions.as_mut().unwrap() {
        if c.type_ == keys::INPLACE_UPDATE_READY {
            c.status = "False".into();
            c.reason = Some("StartInPlaceUpdate".into());
        }
    }
    let refs: [&dyn PodRead; 1] = [&pod];
    let (r, _) = plan_refresh(&input(&cs, &refs, "foo-r1", Timestamp::UNIX_EPOCH));
    let [PodWrite::Conditions(c)] = r[0].writes.as_slice() else { panic!("{r:?}") };
    assert_eq!((c[0]["status"].as_str(), &c[0]["reason"]), (Some("True"), &Value::Null));
    assert!(!r[0].moves_lifecycle, "a condition write alone does not end the pass");
}

#[test]
fn kruise_a_condition_only_refresh_does_not_postpone_the_update_step() {
    assert_eq!(next_step(Step::Refresh, StepOutcome { changed: false, failed: false }), Step::Update);
    assert_eq!(next_step(Step::Refresh, StepOutcome { changed: true, failed: false }), Step::Done, "a lifecycle move ends the pass");
    assert_eq!(next_step(Step::Refresh, StepOutcome { changed: false, failed: true }), Step::Done);
}

#[test]
fn kruise_a_scale_up_that_created_nothing_goes_on_to_refresh_and_update() {
    assert_eq!(next_step(Step::Scale, StepOutcome { changed: false, failed: true }), Step::Refresh);
    assert_eq!(next_step(Step::Scale, StepOutcome { changed: true, failed: true }), Step::Done, "some pods were created");
    assert_eq!(next_step(Step::Scale, StepOutcome { changed: false, failed: false }), Step::Refresh);
    assert_eq!(next_step(Step::Update, StepOutcome::default()), Step::Done);
}

#[test]
fn kruise_specified_delete_is_not_patched_again_when_the_label_is_there() {
    let cs = cloneset(1, 0, &[]);
    let pod = ready_pod("foo-1", "foo-r1");
    let now = Timestamp::UNIX_EPOCH;
    assert_eq!(action_writes(&cs, &pod, &PodAction::Recreate, "foo-r2", now).len(), 1);
    let labelled = with_label(pod, keys::SPECIFIED_DELETE, "true");
    assert!(action_writes(&cs, &labelled, &PodAction::Recreate, "foo-r2", now).is_empty());
}

#[test]
fn kruise_mark_pod_not_ready_writes_the_key_before_the_preparing_update_label() {
    let cs = in_place_cloneset(json!({"inPlaceUpdate": {"labelsHandler": {"hook": "true"}, "markPodNotReady": true}}));
    let mut pod = with_label(ready_pod("foo-1", "foo-r1"), "hook", "true");
    pod.spec.as_mut().unwrap().readiness_gates =
        Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: keys::KRUISE_POD_READY.into() }]);
    pod.status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
        .push(serde_json::from_value(json!({"type": "KruisePodReady", "status": "True"})).unwrap());
    let writes = action_writes(&cs, &pod, &PodAction::PrepareUpdate, "foo-r2", Timestamp::UNIX_EPOCH);
    let [PodWrite::Conditions(c), PodWrite::Patch(p)] = writes.as_slice() else { panic!("{writes:?}") };
    assert_eq!(c[0]["type"], "KruisePodReady");
    assert_eq!(c[0]["message"], r#"[{"userAgent":"Lifecycle","key":"preUpdateHook"}]"#);
    assert_eq!(p["metadata"]["labels"][keys::LIFECYCLE_STATE], "PreparingUpdate");
}

#[test]
fn kruise_recreates_a_pod_when_volume_claim_templates_changed_under_the_gate() {
    let template = |image: &str| json!({"metadata": {"labels": {"app": "foo"}}, "spec": {"containers": [{"name": "c", "image": image}]}});
    let data: BTreeMap<String, Arc<[u8]>> = [
        ("foo-r1".to_string(), crate::core::revision::revision_data(&template("nginx:1")).into()),
        ("foo-r2".to_string(), crate::core::revision::revision_data(&template("nginx:2")).into()),
    ]
    .into();
    let mut cs = in_place_cloneset(serde_json::Value::Null);
    let pod = ready_pod("foo-1", "foo-r1");
    let pods: [&dyn PodRead; 1] = [&pod];
    let action = |cs: &CloneSet, gate: bool, hashes: &BTreeMap<String, String>| {
        let mut i = input(cs, &pods, "foo-r2", "2026-01-01T01:00:00Z".parse().unwrap());
        i.revision_data = &data;
        i.revision_vct_hashes = hashes;
        i.gates.recreate_pod_when_change_vct = gate;
        plan_update(&i).pods[0].1.clone()
    };
    let changed: BTreeMap<String, String> = [("foo-r1".into(), "1".into()), ("foo-r2".into(), "2".into())].into();
    let same: BTreeMap<String, String> = [("foo-r1".into(), "1".into()), ("foo-r2".into(), "1".into())].into();
    let old_without: BTreeMap<String, String> = [("foo-r2".into(), "2".into())].into();
    assert_eq!(action(&cs, true, &changed), PodAction::Recreate);
    assert!(matches!(action(&cs, false, &changed), PodAction::InPlace(_)), "gate off: in place");
    assert!(matches!(action(&cs, true, &same), PodAction::InPlace(_)));
    assert!(matches!(action(&cs, true, &old_without), PodAction::InPlace(_)), "no hash on the old revision: in place");
    cs.spec.update_strategy.type_ = "InPlaceOnly".into();
    assert!(matches!(action(&cs, true, &changed), PodAction::InPlace(_)), "InPlaceOnly ignores the hash");
}

/// InPlaceWorkloadVerticalScaling: a cpu change is made in place, through the resize
/// subresource before the revision and state are written, and leaves the pod Ready.
#[test]
fn kruise_resizes_in_place_under_the_vertical_scaling_gate_and_recreates_without_it() {
    let sized = |cpu: &str| json!({"requests": {"cpu": cpu}});
    let template = |cpu: &str| json!({"metadata": {"labels": {"app": "foo"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1", "resources": sized(cpu)}]}});
    let data: BTreeMap<String, Arc<[u8]>> = [
        ("foo-r1".to_string(), crate::core::revision::revision_data(&template("100m")).into()),
        ("foo-r2".to_string(), crate::core::revision::revision_data(&template("200m")).into()),
    ]
    .into();
    let cs = in_place_cloneset(serde_json::Value::Null);
    let mut pod = ready_pod("foo-1", "foo-r1");
    let spec = pod.spec.as_mut().unwrap();
    spec.containers = vec![serde_json::from_value(json!({"name": "c", "image": "nginx:1", "resources": sized("100m")})).unwrap()];
    spec.readiness_gates = Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: keys::INPLACE_UPDATE_READY.into() }]);
    let pods: [&dyn PodRead; 1] = [&pod];
    let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
    let action = |gate: bool| {
        let mut i = input(&cs, &pods, "foo-r2", now);
        i.revision_data = &data;
        i.gates.in_place_workload_vertical_scaling = gate;
        plan_update(&i).pods[0].1.clone()
    };
    assert_eq!(action(false), PodAction::Recreate);
    let in_place = action(true);
    assert!(matches!(in_place, PodAction::InPlace(_)), "{in_place:?}");
    let writes = action_writes(&cs, &pod, &in_place, "foo-r2", now);
    let [PodWrite::Resize(resize), PodWrite::Patch(patch)] = writes.as_slice() else { panic!("{writes:?}") };
    assert_eq!(resize, &json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m"}}}]}}));
    assert_eq!(patch["metadata"]["labels"][keys::CONTROLLER_REVISION_HASH], "foo-r2");
    assert!(patch.get("spec").is_none(), "resources go through the resize subresource only: {patch}");

    // With a grace period the resize waits in the grace annotation, and comes once it ends.
    let spec = crate::core::inplace::in_place_spec(Some(&data["foo-r1"]), &data["foo-r2"], "foo-r2", 5, true).unwrap();
    let writes = action_writes(&cs, &pod, &PodAction::InPlace(spec), "foo-r2", now);
    let [PodWrite::Patch(start)] = writes.as_slice() else { panic!("nothing is resized during the grace period: {writes:?}") };
    let annotations: BTreeMap<String, String> = serde_json::from_value(start["metadata"]["annotations"].clone()).unwrap();
    let mut waiting = with_label(pod.clone(), keys::CONTROLLER_REVISION_HASH, "foo-r2");
    waiting.metadata.annotations = Some(annotations);
    let refs: [&dyn PodRead; 1] = [&waiting];
    let (r, requeue) = plan_refresh(&input(&cs, &refs, "foo-r2", now + SignedDuration::from_secs(2)));
    assert_eq!(requeue, Some(Duration::from_secs(3)));
    assert!(r.iter().flat_map(|r| &r.writes).all(|w| !matches!(w, PodWrite::Resize(_))), "{r:?}");
    let (r, _) = plan_refresh(&input(&cs, &refs, "foo-r2", now + SignedDuration::from_secs(5)));
    let [PodWrite::Resize(resize), PodWrite::Patch(apply), ..] = r[0].writes.as_slice() else { panic!("{r:?}") };
    assert_eq!(resize["spec"]["containers"][0]["resources"], json!({"requests": {"cpu": "200m"}}));
    assert_eq!(apply["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE], json!(null), "the grace annotation goes with it");
}

/// A resize the cluster would refuse (no `pods/resize`, a lowered memory limit where that is
/// forbidden) is never written: a new pod under InPlaceIfPossible, a hold that says why under
/// InPlaceOnly; what the cluster allows is still resized in place.
#[test]
fn a_resize_the_cluster_refuses_recreates_or_holds_the_pod() {
    let template = |memory: &str| {
        json!({"metadata": {"labels": {"app": "foo"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1",
            "resources": {"limits": {"memory": memory}}}]}})
    };
    let data: BTreeMap<String, Arc<[u8]>> = [
        ("foo-r1".to_string(), crate::core::revision::revision_data(&template("128Mi")).into()),
        ("foo-r2".to_string(), crate::core::revision::revision_data(&template("64Mi")).into()),
        ("foo-r3".to_string(), crate::core::revision::revision_data(&template("256Mi")).into()),
    ]
    .into();
    let mut pod = ready_pod("foo-1", "foo-r1");
    pod.spec.as_mut().unwrap().containers =
        vec![serde_json::from_value(json!({"name": "c", "image": "nginx:1", "resources": {"limits": {"memory": "128Mi"}}})).unwrap()];
    let pods: [&dyn PodRead; 1] = [&pod];
    let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
    let action = |type_: &str, target: &str, resize: inplace::ResizeSupport| {
        let mut cs = in_place_cloneset(serde_json::Value::Null);
        cs.spec.update_strategy.type_ = type_.into();
        let mut i = input(&cs, &pods, target, now);
        i.revision_data = &data;
        i.gates.in_place_workload_vertical_scaling = true;
        i.resize = resize;
        plan_update(&i).pods[0].1.clone()
    };
    let everything = inplace::ResizeSupport::default();
    let not_served = inplace::ResizeSupport { served: false, ..everything };
    let no_decrease = inplace::ResizeSupport { memory_limit_decrease: false, ..everything };
    let held = |why: &str| format!("find Pod foo-1 update strategy is InPlaceOnly but can not update in-place: {why}");

    for target in ["foo-r2", "foo-r3"] {
        assert!(matches!(action("InPlaceIfPossible", target, everything), PodAction::InPlace(_)));
        assert_eq!(action("InPlaceIfPossible", target, not_served), PodAction::Recreate);
        let PodAction::Hold(why) = action("InPlaceOnly", target, not_served) else { panic!("InPlaceOnly holds the pod") };
        assert!(why.starts_with(&held("the resources change needs the pods/resize subresource")), "{why}");
    }
    assert_eq!(action("InPlaceIfPossible", "foo-r2", no_decrease), PodAction::Recreate);
    let PodAction::Hold(why) = action("InPlaceOnly", "foo-r2", no_decrease) else { panic!("InPlaceOnly holds the pod") };
    assert!(why.starts_with(&held("this cluster's apiserver refuses to lower a container's memory limit")), "{why}");
    assert!(matches!(action("InPlaceOnly", "foo-r3", no_decrease), PodAction::InPlace(_)), "raising it is allowed");
}

/// A container reading `metadata.labels['ver']` into its env: changing `ver` takes a new pod
/// (or, under InPlaceOnly, a refusal that says why), unless the gate is off; changing a label
/// no env reads stays in place.
#[test]
fn a_label_an_env_reads_is_not_changed_in_place() {
    let template = |ver: &str, other: &str| {
        json!({"metadata": {"labels": {"app": "foo", "ver": ver, "other": other}}, "spec": {"containers": [{"name": "c", "image": "nginx:1",
            "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ver']"}}}]}]}})
    };
    let data: BTreeMap<String, Arc<[u8]>> = [
        ("foo-r1".to_string(), crate::core::revision::revision_data(&template("1", "a")).into()),
        ("foo-r2".to_string(), crate::core::revision::revision_data(&template("2", "a")).into()),
        ("foo-r3".to_string(), crate::core::revision::revision_data(&template("1", "b")).into()),
    ]
    .into();
    let pod = ready_pod("foo-1", "foo-r1");
    let pods: [&dyn PodRead; 1] = [&pod];
    let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
    let action = |type_: &str, target: &str, gate: bool| {
        let mut cs = in_place_cloneset(serde_json::Value::Null);
        cs.spec.update_strategy.type_ = type_.into();
        let mut i = input(&cs, &pods, target, now);
        i.revision_data = &data;
        i.gates.in_place_update_env_from_metadata = gate;
        plan_update(&i).pods[0].1.clone()
    };
    assert_eq!(action("InPlaceIfPossible", "foo-r2", true), PodAction::Recreate);
    let PodAction::Hold(why) = action("InPlaceOnly", "foo-r2", true) else { panic!("InPlaceOnly holds the pod") };
    assert!(
        why.starts_with(
            "find Pod foo-1 update strategy is InPlaceOnly but can not update in-place: container c env X (metadata.labels['ver'])"
        ),
        "{why}"
    );
    assert!(matches!(action("InPlaceIfPossible", "foo-r2", false), PodAction::InPlace(_)), "gate off: Kruise's stale env");
    assert!(matches!(action("InPlaceIfPossible", "foo-r3", true), PodAction::InPlace(_)), "no env reads `other`");
    assert!(matches!(action("InPlaceOnly", "foo-r3", true), PodAction::InPlace(_)));
}

/// Where kruise-daemon reports on the pod, the same change is made in place: the label moves
/// to the reading container's `containerRefMetadata`, the state asks for the env to be
/// refreshed, and the pod is not updated until the daemon reports the new value's hash.
#[test]
fn a_label_an_env_reads_is_changed_in_place_where_kruise_daemon_reports() {
    let env = json!([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ver']"}}}]);
    let template = |ver: &str| json!({"metadata": {"labels": {"app": "foo", "ver": ver}}, "spec": {"containers": [{"name": "c", "image": "nginx:1", "env": env}]}});
    let data: BTreeMap<String, Arc<[u8]>> = [
        ("foo-r1".to_string(), crate::core::revision::revision_data(&template("1")).into()),
        ("foo-r2".to_string(), crate::core::revision::revision_data(&template("2")).into()),
    ]
    .into();
    let report = |id: &str, ver: &str| {
        let c: k8s_openapi::api::core::v1::Container = serde_json::from_value(json!({"name": "c", "env": env})).unwrap();
        let hash = crate::core::env_metadata::expected_hash(&c, Some(&[("ver".into(), ver.into())].into()), None);
        json!({"containers": [{"name": "c", "containerID": id, "restartCount": 0, "hashes": {"plainHash": 7, "extractedEnvFromMetadataHash": hash}}]})
            .to_string()
    };
    let mut pod = ready_pod("foo-1", "foo-r1");
    pod.metadata.labels.get_or_insert_with(Default::default).insert("ver".into(), "1".into());
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(keys::RUNTIME_CONTAINERS_META.into(), report("containerd://1", "1"));
    pod.spec.as_mut().unwrap().containers = vec![serde_json::from_value(json!({"name": "c", "image": "nginx:1", "env": env})).unwrap()];
    pod.status.as_mut().unwrap().container_statuses = Some(vec![
        serde_json::from_value(
            json!({"name": "c", "containerID": "containerd://1", "image": "nginx:1", "imageID": "i1", "ready": true, "restartCount": 0}),
        )
        .unwrap(),
    ]);
    let pods: [&dyn PodRead; 1] = [&pod];
    let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
    let cs = in_place_cloneset(serde_json::Value::Null);
    let mut i = input(&cs, &pods, "foo-r2", now);
    i.revision_data = &data;
    let PodAction::InPlace(spec) = plan_update(&i).pods[0].1.clone() else { panic!("in place, through the daemon") };
    assert!(spec.update_env_from_metadata);
    let writes = action_writes(&cs, &pod, &PodAction::InPlace(spec), "foo-r2", now);
    let Some(PodWrite::Patch(patch)) = writes.last() else { panic!("{writes:?}") };
    assert_eq!(patch["metadata"]["labels"]["ver"], json!("2"), "the label the env reads is written");
    let mut updating = pod.clone();
    updating.metadata.labels.as_mut().unwrap().extend([("ver".to_string(), "2".to_string())]);
    let state = patch["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE].as_str().unwrap().to_string();
    assert!(state.contains(r#""updateEnvFromMetadata":true"#) && state.contains(r#""containers":["c"]"#), "{state}");
    updating.metadata.annotations.as_mut().unwrap().insert(keys::INPLACE_UPDATE_STATE.into(), state);
    assert!(!in_place_update_completed(&updating), "the container still has the old value");
    let restarted =
        |p: &mut Pod| p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].container_id = Some("containerd://2".into());
    restarted(&mut updating);
    assert!(!in_place_update_completed(&updating), "restarted, not reported yet");
    updating.metadata.annotations.as_mut().unwrap().insert(keys::RUNTIME_CONTAINERS_META.into(), report("containerd://2", "2"));
    assert!(in_place_update_completed(&updating), "the daemon reports the new value");

    // Without the daemon's annotation: a new pod, as before.
    let mut plain = pod.clone();
    plain.metadata.annotations.as_mut().unwrap().remove(keys::RUNTIME_CONTAINERS_META);
    let plain_pods: [&dyn PodRead; 1] = [&plain];
    let mut i = input(&cs, &plain_pods, "foo-r2", now);
    i.revision_data = &data;
    assert_eq!(plan_update(&i).pods[0].1, PodAction::Recreate);
}

#[test]
fn combined_patches_keep_removals() {
    let mut p = json!({"metadata": {"annotations": {"a": "1"}}});
    combine_patches(&mut p, &json!({"metadata": {"annotations": {"b": null}, "labels": {"c": "2"}}}));
    assert_eq!(p, json!({"metadata": {"annotations": {"a": "1", "b": null}, "labels": {"c": "2"}}}));
}

#[test]
fn refresh_moves_scheduled_pods_to_normal_and_sets_the_gate_condition() {
    let cs = cloneset(1, 0, &[]);
    let mut pod = ready_pod("foo-1", "foo-r1");
    pod.metadata.labels.as_mut().unwrap().insert(keys::LIFECYCLE_STATE.into(), "PreparingNormal".into());
    pod.spec.as_mut().unwrap().readiness_gates =
        Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: keys::INPLACE_UPDATE_READY.into() }]);
    pod.status.as_mut().unwrap().conditions.as_mut().unwrap().retain(|c| c.type_ != keys::INPLACE_UPDATE_READY);
    let refs: [&dyn PodRead; 1] = [&pod];
    let (r, requeue) = plan_refresh(&input(&cs, &refs, "foo-r1", Timestamp::UNIX_EPOCH));
    assert_eq!(r.len(), 1);
    assert_eq!(requeue, None);
    let [PodWrite::Conditions(conditions), PodWrite::Patch(patch)] = r[0].writes.as_slice() else { panic!("{r:?}") };
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0]["type"], "InPlaceUpdateReady");
    assert_eq!(conditions[0]["status"], "True");
    assert!(r[0].moves_lifecycle);
    assert_eq!(patch["metadata"]["labels"][keys::LIFECYCLE_STATE], "Normal");
    assert_eq!(patch["metadata"]["labels"][keys::POD_TEMPLATE_HASH], "r1", "a missing pod-template-hash is added");
}
