//! No state a single failed write can strand: every multi-write sequence the planner asks for
//! (an in-place update, lifecycle moves with not-ready keys, hooks) is re-derived from what is
//! stored. These tests run passes the way the controller does (`sync::next_step`), against pods
//! held in memory with a tiny kubelet stand-in, and fail the pass at every write in turn: the
//! passes after it must still reach the same end state.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::api::CloneSet;
use crate::api::keys;
use crate::core::gates::FeatureGates;
use crate::core::sync::{self, PodWrite, Step, StepOutcome, SyncInput};
use crate::core::{lifecycle, revision};

const HOOK_LABEL: &str = "example.com/hooked";

fn template(image: &str) -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "main", "image": image}]}})
}

fn cloneset(lifecycle: Value) -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "u"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template("nginx:2"),
                 "lifecycle": lifecycle,
                 "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1}},
    }))
    .unwrap()
}

/// A Ready pod of revision `web-r1`, as the operator leaves it.
fn ready_pod(hooked: bool) -> Pod {
    let mut labels = json!({"app": "web", keys::CONTROLLER_REVISION_HASH: "web-r1", keys::POD_TEMPLATE_HASH: "r1",
                            keys::LIFECYCLE_STATE: "Normal", keys::CLONESET_INSTANCE_ID: "a"});
    if hooked {
        labels[HOOK_LABEL] = json!("true");
    }
    serde_json::from_value(json!({
        "metadata": {"name": "web-a", "namespace": "ns", "labels": labels, "annotations": {}},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "nginx:1"}],
                 "readinessGates": [{"conditionType": "InPlaceUpdateReady"}, {"conditionType": "KruisePodReady"}]},
        "status": {"phase": "Running",
                   "conditions": [
                       {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                       {"type": "ContainersReady", "status": "True"},
                       {"type": "InPlaceUpdateReady", "status": "True"},
                       {"type": "KruisePodReady", "status": "True"}],
                   "containerStatuses": [{"name": "main", "image": "nginx:1", "imageID": "id-nginx:1", "ready": true,
                                          "restartCount": 0}]},
    }))
    .unwrap()
}

/// Merges `from` into `into` as a strategic-merge patch of maps: `null` removes a key.
fn merge(into: &mut Value, from: &Value) {
    match (into.as_object_mut(), from.as_object()) {
        (Some(a), Some(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(k);
                } else if v.is_object() && a.get(k).is_some_and(Value::is_object) {
                    merge(a.get_mut(k).unwrap(), v);
                } else {
                    a.insert(k.clone(), v.clone());
                }
            }
        }
        _ => *into = from.clone(),
    }
}

/// What the apiserver does with one write.
fn apply(pod: &mut Pod, write: &PodWrite) {
    let mut p = serde_json::to_value(&*pod).unwrap();
    match write {
        PodWrite::Conditions(conditions) => {
            for c in conditions {
                let list = p["status"]["conditions"].as_array_mut().unwrap();
                match list.iter_mut().find(|e| e["type"] == c["type"]) {
                    Some(existing) => merge(existing, c),
                    None => {
                        let mut fresh = json!({});
                        merge(&mut fresh, c);
                        list.push(fresh);
                    }
                }
            }
        }
        PodWrite::Patch(patch) | PodWrite::Resize(patch) => {
            let mut patch = patch.clone();
            // Containers merge by name; finalizers are sent whole.
            if let Some(containers) = patch.get_mut("spec").and_then(|s| s.as_object_mut()).and_then(|s| s.remove("containers")) {
                for c in containers.as_array().unwrap() {
                    let target = p["spec"]["containers"].as_array_mut().unwrap().iter_mut().find(|e| e["name"] == c["name"]).unwrap();
                    merge(target, c);
                }
            }
            merge(&mut p, &patch);
        }
    }
    *pod = serde_json::from_value(p).unwrap();
}

/// The kubelet and the hook's owner between passes: containers run their spec images (Ready
/// follows the readiness gates); the owner releases a pod in PreparingUpdate and hooks it again
/// once it is Updated.
fn world_moves(pod: &mut Pod, now: Timestamp) {
    let mut p = serde_json::to_value(&*pod).unwrap();
    let image = p["spec"]["containers"][0]["image"].clone();
    if p["status"]["containerStatuses"][0]["image"] != image {
        p["status"]["containerStatuses"][0]["image"] = image.clone();
        p["status"]["containerStatuses"][0]["imageID"] = json!(format!("id-{}", image.as_str().unwrap()));
    }
    let gates_true = ["InPlaceUpdateReady", "KruisePodReady"]
        .iter()
        .all(|g| p["status"]["conditions"].as_array().unwrap().iter().any(|c| c["type"] == *g && c["status"] == "True"));
    let ready = p["status"]["conditions"].as_array_mut().unwrap().iter_mut().find(|c| c["type"] == "Ready").unwrap();
    let want = if gates_true { "True" } else { "False" };
    if ready["status"] != want {
        *ready = json!({"type": "Ready", "status": want, "lastTransitionTime": crate::core::pods::rfc3339_seconds(now)});
    }
    match p["metadata"]["labels"][keys::LIFECYCLE_STATE].as_str() {
        Some("PreparingUpdate") => {
            p["metadata"]["labels"].as_object_mut().unwrap().remove(HOOK_LABEL);
        }
        Some("Updated") => p["metadata"]["labels"][HOOK_LABEL] = json!("true"),
        _ => {}
    }
    *pod = serde_json::from_value(p).unwrap();
}

struct Sim {
    cs: CloneSet,
    revision_data: BTreeMap<String, std::sync::Arc<[u8]>>,
    pod: Pod,
    now: Timestamp,
    /// Writes made so far, over all passes.
    writes: usize,
    /// Every lifecycle state the pod was seen in.
    states: Vec<String>,
    /// Passes after which a pod held by a `markPodNotReady` hook was still counted Ready.
    ready_while_held: usize,
}

impl Sim {
    fn new(lifecycle: Value, hooked: bool) -> Self {
        let revision_data = [
            ("web-r1".to_string(), revision::revision_data(&template("nginx:1")).into()),
            ("web-r2".to_string(), revision::revision_data(&template("nginx:2")).into()),
        ]
        .into();
        let pod = ready_pod(hooked);
        let now = "2026-01-01T01:00:00Z".parse().unwrap();
        Self { cs: cloneset(lifecycle), revision_data, pod, now, writes: 0, states: vec![], ready_while_held: 0 }
    }

    /// One pass as the controller runs it; the write numbered `fail_at` (counting over all
    /// passes) fails, which ends its step as it ends the controller's.
    fn pass(&mut self, fail_at: Option<usize>) {
        let nodes = BTreeMap::new();
        let snapshot = self.pod.clone();
        let pods: [&dyn crate::core::pod_read::PodRead; 1] = [&snapshot];
        let input = SyncInput {
            cloneset: &self.cs,
            pods: &pods,
            current_revision: "web-r1",
            update_revision: "web-r2",
            gates: FeatureGates::default(),
            resize: Default::default(),
            exclude_preparing_delete_flag: false,
            node_labels: &nodes,
            revision_data: &self.revision_data,
            revision_vct_hashes: &BTreeMap::new(),
            now: self.now,
        };
        let mut step = Step::Scale;
        'pass: while step != Step::Done {
            let (batches, changed): (Vec<Vec<PodWrite>>, bool) = match step {
                Step::Scale => {
                    assert!(!sync::plan_scale(&input).changes_pods(), "one replica, one pod: nothing to scale");
                    (vec![], false)
                }
                Step::Refresh => {
                    let refresh = sync::plan_refresh(&input).0;
                    let moved = refresh.iter().any(|r| r.moves_lifecycle);
                    (refresh.into_iter().map(|r| r.writes).collect(), moved)
                }
                Step::Update | Step::Done => {
                    let plan = sync::plan_update(&input);
                    let writes = plan.pods.iter().map(|(_, a)| sync::action_writes(&self.cs, &snapshot, a, "web-r2", self.now)).collect();
                    (writes, false)
                }
            };
            for w in batches.iter().flatten() {
                self.writes += 1;
                if Some(self.writes) == fail_at {
                    step = sync::next_step(step, StepOutcome { changed: false, failed: true });
                    continue 'pass;
                }
                apply(&mut self.pod, w);
            }
            step = sync::next_step(step, StepOutcome { changed, failed: false });
        }
        let mark = self.cs.spec.lifecycle.as_ref().and_then(|l| l.in_place_update.as_ref()).is_some_and(|h| h.mark_pod_not_ready);
        let held = lifecycle::state(&self.pod) == Some(crate::api::shared::LifecycleState::PreparingUpdate);
        if mark && held && condition(&self.pod, "KruisePodReady").0 != "False" {
            self.ready_while_held += 1;
        }
        self.now += SignedDuration::from_secs(1);
        world_moves(&mut self.pod, self.now);
        let st = lifecycle::state(&self.pod).map(|s| s.as_str().to_string()).unwrap_or_default();
        if self.states.last() != Some(&st) {
            self.states.push(st);
        }
    }

    /// Passes until one writes nothing.
    fn settle(&mut self, fail_at: Option<usize>) {
        for _ in 0..30 {
            let before = self.writes;
            self.pass(fail_at);
            if self.writes == before {
                return;
            }
        }
        panic!("no fixed point after 30 passes: {:?}", self.pod);
    }
}

fn condition(pod: &Pod, type_: &str) -> (String, Option<String>) {
    let c = pod.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == type_).unwrap();
    (c.status.clone(), c.reason.clone())
}

fn assert_updated(pod: &Pod, context: &str) {
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[keys::CONTROLLER_REVISION_HASH], "web-r2", "{context}");
    assert_eq!(labels[keys::LIFECYCLE_STATE], "Normal", "{context}");
    assert_eq!(pod.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("nginx:2"), "{context}");
    assert_eq!(condition(pod, "InPlaceUpdateReady"), ("True".into(), None), "{context}: True, and no stale reason");
    assert_eq!(condition(pod, "KruisePodReady").0, "True", "{context}");
    assert_eq!(condition(pod, "Ready").0, "True", "{context}");
}

/// Runs the update once without failures, then once per write with that write failing.
fn every_single_failure_converges(lifecycle: Value, hooked: bool, expected_states: &[&str]) {
    let mut clean = Sim::new(lifecycle.clone(), hooked);
    clean.settle(None);
    assert_updated(&clean.pod, "without failures");
    assert_eq!(clean.states, expected_states, "lifecycle path");
    assert!(clean.writes >= 3, "the update takes several writes: {}", clean.writes);
    for fail_at in 1..=clean.writes {
        let mut sim = Sim::new(lifecycle.clone(), hooked);
        sim.settle(Some(fail_at));
        let context = format!("write {fail_at} of {} failed", clean.writes);
        assert_updated(&sim.pod, &context);
        assert_eq!(sim.ready_while_held, 0, "{context}: a pod in PreparingUpdate under markPodNotReady must be not ready");
    }
}

#[test]
fn an_in_place_update_survives_a_failure_between_any_two_writes() {
    every_single_failure_converges(Value::Null, false, &["Updating", "Normal"]);
}

#[test]
fn a_lifecycle_without_an_in_place_hook_passes_through_updated() {
    let pre_delete_only = json!({"preDelete": {"labelsHandler": {HOOK_LABEL: "true"}}});
    every_single_failure_converges(pre_delete_only, false, &["Updating", "Updated", "Normal"]);
}

#[test]
fn a_hooked_update_with_mark_pod_not_ready_survives_any_single_failure() {
    let hook = json!({"inPlaceUpdate": {"labelsHandler": {HOOK_LABEL: "true"}, "markPodNotReady": true}});
    every_single_failure_converges(hook, true, &["PreparingUpdate", "Updating", "Updated", "Normal"]);
}

#[test]
fn a_pod_stuck_in_updating_with_its_gate_true_finishes() {
    // The Normal patch was lost after InPlaceUpdateReady=True: Kruise's CheckPodUpdateCompleted
    // ignores the condition, so refresh still moves the pod on.
    let mut sim = Sim::new(Value::Null, false);
    let spec =
        crate::core::inplace::in_place_spec(Some(&*sim.revision_data["web-r1"]), &sim.revision_data["web-r2"], "web-r2", 0, false).unwrap();
    let start = PodWrite::Patch(crate::core::inplace::start_patch(&sim.pod, &spec, "web-r2", sim.now));
    apply(&mut sim.pod, &start);
    world_moves(&mut sim.pod, sim.now);
    assert_eq!(lifecycle::state(&sim.pod), Some(crate::api::shared::LifecycleState::Updating));
    assert_eq!(condition(&sim.pod, "InPlaceUpdateReady").0, "True");
    sim.settle(None);
    assert_updated(&sim.pod, "after a lost Normal patch");
}
