//! `BENCH_DECISIONS`: what each decision of one reconcile pass costs on one CloneSet as its pods
//! grow, with no cluster: the pure functions the operator calls every pass (`core::sync`'s
//! plans, `core::status::compute`, …), over pods read through the cache's compact form as the
//! operator reads them, in the states a large CloneSet goes through. Each row is one function in
//! one state at one size: `ms_per_call` (the fastest of repeated calls, each over freshly read
//! pods, as a pass reads them) and `growth`, the exponent k in cost ∝ nᵏ from the size before
//! (1 is linear, 2 quadratic; n log n reads about 1.1 between 30,000 and 100,000 pods). A
//! function whose growth between the two largest sizes exceeds [`GROWTH_LIMIT`] fails the run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloneset_operator::api::{CloneSet, keys};
use cloneset_operator::core::pod_read::{self, PodRead};
use cloneset_operator::core::sync::{self, SyncInput};
use cloneset_operator::core::{defaults, intstr, revision, status};
use cloneset_operator::pod_cache::compact::{CompactPod, Interner, ReadPod};
use e2e::bench::{self, Row};
use e2e::workload::manifest;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::image;

/// Above this growth exponent between the two largest sizes a decision is taken to grow faster
/// than n log n (about 1.1 there): halfway to quadratic, since pods that no longer fit the
/// processor's caches make even a linear scan read up to about 1.4 between sizes that straddle
/// that point.
pub const GROWTH_LIMIT: f64 = 1.5;
/// Below this cost at the largest size a growth figure is noise, not a finding.
const NOISE_FLOOR: Duration = Duration::from_micros(500);
/// Each function is called until this much time went by (at least [`MIN_CALLS`] times).
const BUDGET: Duration = Duration::from_millis(300);
const MIN_CALLS: u32 = 3;
const NAME: &str = "web";
const NAMESPACE: &str = "bench";
const UID: &str = "0c1e7a5e-0000-4000-8000-000000000001";

/// The states of one CloneSet of `n` pods a pass is timed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// All pods ready on the update revision.
    Steady,
    /// The template changed, partition 50 %, maxUnavailable 20 %, in place.
    InPlaceRollout,
    /// The same, recreating.
    RecreateRollout,
    /// Replicas halved, a tenth of the pods named in `scaleStrategy.podsToDelete`.
    ScaleDownSpecified,
    /// Replicas doubled.
    ScaleUp,
}

impl State {
    pub const ALL: [State; 5] = [State::Steady, State::InPlaceRollout, State::RecreateRollout, State::ScaleDownSpecified, State::ScaleUp];

    fn label(self) -> &'static str {
        match self {
            State::Steady => "steady",
            State::InPlaceRollout => "in-place 50%",
            State::RecreateRollout => "recreate 50%",
            State::ScaleDownSpecified => "scale-down named",
            State::ScaleUp => "scale-up",
        }
    }
}

/// One CloneSet in one state, and what a pass reads with it.
struct Fixture {
    cs: CloneSet,
    pods: Vec<Arc<CompactPod>>,
    current: String,
    update: String,
    revision_data: BTreeMap<String, Arc<[u8]>>,
    now: Timestamp,
}

/// The revision name and data of the template with `image`.
fn revision_of(cs: &CloneSet, image: &str) -> (String, Vec<u8>) {
    let mut template = serde_json::to_value(&cs.spec.template).expect("a template serialises");
    template["spec"]["containers"][0]["image"] = json!(image);
    let data = revision::revision_data(&defaults::default_pod_template(&template));
    (revision::revision_name(NAME, &revision::hash_revision(&data, 0)), data)
}

/// Pod `i` of the CloneSet as the operator created it and the kubelet made it ready, on
/// `revision_name` running `image`.
fn pod(i: usize, revision_name: &str, image: &str, started: Timestamp) -> Pod {
    let id = format!("{i:05x}");
    let at = (started + Duration::from_secs((i / 50) as u64)).to_string();
    let hash = revision_name.rsplit('-').next().unwrap_or_default();
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{NAME}-{id}"), "namespace": NAMESPACE, "uid": format!("pod-{i}"), "resourceVersion": format!("{}", 1000 + i),
            "creationTimestamp": at,
            "labels": {"app": NAME, keys::CONTROLLER_REVISION_HASH: revision_name, keys::POD_TEMPLATE_HASH: hash,
                       keys::CLONESET_INSTANCE_ID: id, keys::LIFECYCLE_STATE: "Normal"},
            "annotations": {keys::LIFECYCLE_TIMESTAMP: at},
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": NAME, "uid": UID,
                                 "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": format!("node-{}", i % 20),
            "terminationGracePeriodSeconds": 1,
            "readinessGates": [{"conditionType": keys::INPLACE_UPDATE_READY}, {"conditionType": keys::KRUISE_POD_READY}],
            "containers": [{"name": "main", "image": image}],
        },
        "status": {
            "phase": "Running", "podIP": format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255), "startTime": at,
            "conditions": [
                {"type": keys::INPLACE_UPDATE_READY, "status": "True", "lastTransitionTime": at},
                {"type": keys::KRUISE_POD_READY, "status": "True", "lastTransitionTime": at},
                {"type": "Initialized", "status": "True", "lastTransitionTime": at},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": at},
                {"type": "Ready", "status": "True", "lastTransitionTime": at},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": at},
            ],
            "containerStatuses": [{"name": "main", "image": image, "imageID": format!("{image}@sha256:00"), "ready": true,
                                   "started": true, "restartCount": 0, "containerID": format!("containerd://{i:064x}"),
                                   "state": {"running": {"startedAt": at}}}],
        },
    }))
    .expect("a valid pod")
}

impl Fixture {
    fn new(n: usize, state: State) -> Self {
        let started: Timestamp = "2026-12-01T00:00:00Z".parse().expect("a timestamp");
        let now = started + Duration::from_secs(86_400);
        let type_ = if state == State::RecreateRollout { "ReCreate" } else { "InPlaceIfPossible" };
        let mut cs = manifest(NAME, n as i32, &image(1), json!({"updateStrategy": {"type": type_, "maxUnavailable": "20%"}}));
        cs.metadata.namespace = Some(NAMESPACE.into());
        cs.metadata.uid = Some(UID.into());
        cs.metadata.generation = Some(2);
        let (old, old_data) = revision_of(&cs, &image(1));
        let (new, new_data) = revision_of(&cs, &image(2));
        let rolling = matches!(state, State::InPlaceRollout | State::RecreateRollout);
        let (pod_rev, pod_image) = if rolling { (&old, image(1)) } else { (&new, image(2)) };
        let mut interner = Interner::default();
        let pods: Vec<Arc<CompactPod>> =
            (0..n).map(|i| Arc::new(CompactPod::new(pod(i, pod_rev, &pod_image, started), &mut interner))).collect();
        cs.spec.template.spec.as_mut().expect("a pod spec").containers[0].image = Some(image(2));
        match state {
            State::Steady => {}
            State::InPlaceRollout | State::RecreateRollout => {
                cs.spec.update_strategy.partition = Some(IntOrString::String("50%".into()));
            }
            State::ScaleDownSpecified => {
                cs.spec.replicas = Some((n / 2) as i32);
                cs.spec.scale_strategy.pods_to_delete = (0..n).step_by(10).map(|i| format!("{NAME}-{i:05x}")).collect();
            }
            State::ScaleUp => cs.spec.replicas = Some(2 * n as i32),
        }
        let revision_data = [(old.clone(), Arc::from(old_data)), (new.clone(), Arc::from(new_data))].into();
        let current = if rolling { old } else { new.clone() };
        Self { cs, pods, current, update: new, revision_data, now }
    }

    /// Runs `decide` on one pass's input over freshly read pods (a pass reads the cache anew,
    /// and a `ReadPod` keeps what it expanded).
    fn with_input<R>(&self, decide: impl FnOnce(&SyncInput<'_>) -> R) -> R {
        let read: Vec<ReadPod> = self.pods.iter().cloned().map(ReadPod::new).collect();
        let refs: Vec<&dyn PodRead> = pod_read::refs(&read);
        let (vct, nodes) = (BTreeMap::new(), BTreeMap::new());
        decide(&SyncInput {
            cloneset: &self.cs,
            pods: &refs,
            current_revision: &self.current,
            update_revision: &self.update,
            gates: Default::default(),
            resize: Default::default(),
            exclude_preparing_delete_flag: false,
            node_labels: &nodes,
            revision_data: &self.revision_data,
            revision_vct_hashes: &vct,
            now: self.now,
        })
    }

    /// One call of `decide`, timed alone.
    fn time<R>(&self, decide: &dyn Fn(&SyncInput<'_>) -> R) -> Duration {
        self.with_input(|input| {
            let t0 = Instant::now();
            std::hint::black_box(decide(input));
            t0.elapsed()
        })
    }

    /// The fastest of repeated calls.
    fn cost<R>(&self, decide: &dyn Fn(&SyncInput<'_>) -> R) -> Duration {
        let (t0, mut best, mut calls) = (Instant::now(), Duration::MAX, 0);
        while calls < MIN_CALLS || t0.elapsed() < BUDGET {
            best = best.min(self.time(decide));
            calls += 1;
        }
        best
    }
}

/// Each decision of a pass, by name: the plans, the status, the requeue hint, housekeeping.
/// A decision under time: what it returns is only kept from being optimised away.
type Decision = Box<dyn Fn(&SyncInput<'_>) -> usize>;

fn decisions() -> Vec<(&'static str, Decision)> {
    vec![
        ("plan_scale", Box::new(|i: &SyncInput<'_>| changes(&sync::plan_scale(i)))),
        ("plan_refresh", Box::new(|i: &SyncInput<'_>| sync::plan_refresh(i).0.len())),
        ("plan_update", Box::new(|i: &SyncInput<'_>| sync::plan_update(i).pods.len())),
        (
            "status",
            Box::new(|i: &SyncInput<'_>| {
                let replicas = i.cloneset.spec.replicas.unwrap_or(1);
                let partition = intstr::partition_replicas(replicas, i.cloneset.spec.update_strategy.partition.as_ref()).unwrap_or(0);
                let (s, _) = status::compute(&status::StatusInput {
                    cloneset: i.cloneset,
                    pods: i.pods,
                    update_revision: i.update_revision,
                    current_revision: i.current_revision,
                    collision_count: 0,
                    expected_updated_replicas: replicas - partition,
                    now: i.now,
                });
                s.ready_replicas as usize
            }),
        ),
        ("next_availability", Box::new(|i: &SyncInput<'_>| sync::next_availability(i).is_some() as usize)),
        ("stale_pods_to_delete", Box::new(|i: &SyncInput<'_>| sync::stale_pods_to_delete(i.cloneset, i.pods).map_or(0, |k| k.len()))),
    ]
}

/// Pods a scale plan creates, deletes or moves.
fn changes(p: &sync::ScalePlan) -> usize {
    p.create_current + p.create_update + p.delete.len() + p.prepare_delete.len() + p.cancel_delete.len()
}

/// The growth exponent from (n0, t0) to (n1, t1).
pub fn growth(n0: usize, t0: Duration, n1: usize, t1: Duration) -> f64 {
    (t1.as_secs_f64() / t0.as_secs_f64().max(1e-9)).ln() / (n1 as f64 / n0 as f64).ln()
}

/// Rows for every state and decision at each of `sizes` (ascending), and the failures: each
/// decision that grew faster than [`GROWTH_LIMIT`] between the two largest sizes.
pub fn run(sizes: &[u32]) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut sizes: Vec<usize> = sizes.iter().map(|&n| n as usize).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for state in State::ALL {
        let fixtures: Vec<Fixture> = sizes.iter().map(|&n| Fixture::new(n, state)).collect();
        for (name, decide) in decisions() {
            let mut previous: Option<(usize, Duration)> = None;
            for (&n, f) in sizes.iter().zip(&fixtures) {
                let t = f.cost(&*decide);
                let mut row = Row::operator_only(format!("decide: {} {name}", state.label()), "-", n as u32, 1, 0.0);
                row.operator_s = None;
                row.runs = 0;
                row.extra.insert("ms_per_call".into(), (t.as_secs_f64() * 1e6).round() / 1e3);
                if let Some((n0, t0)) = previous {
                    let k = growth(n0, t0, n, t);
                    row.extra.insert("growth".into(), bench::round2(k));
                    if Some(&n) == sizes.last() && k > GROWTH_LIMIT && t > NOISE_FLOOR {
                        failures.push(format!(
                            "decision {name} ({}) grows as n^{k:.2} from {n0} to {n} pods ({:?} → {:?})",
                            state.label(),
                            t0,
                            t
                        ));
                    }
                }
                eprintln!("bench: decide {} {name} at {n} pods: {:?}", state.label(), t);
                previous = Some((n, t));
                rows.push(row);
            }
        }
    }
    (rows, failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_reads_the_exponent() {
        let ms = Duration::from_millis;
        assert!((growth(1000, ms(10), 10_000, ms(100)) - 1.0).abs() < 1e-9);
        assert!((growth(1000, ms(1), 10_000, ms(100)) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn every_state_reads_as_meant() {
        let n = 40;
        for state in State::ALL {
            let (scale, update) = Fixture::new(n, state).with_input(|input| (sync::plan_scale(input), sync::plan_update(input)));
            match state {
                State::Steady => assert!(changes(&scale) == 0 && update.pods.is_empty(), "{state:?}"),
                State::InPlaceRollout | State::RecreateRollout => {
                    assert_eq!(changes(&scale), 0, "{state:?}");
                    assert_eq!(update.pods.len(), 8, "{state:?}: maxUnavailable 20% of 40");
                    let in_place = update.pods.iter().all(|(_, a)| matches!(a, sync::PodAction::InPlace(_)));
                    assert_eq!(in_place, state == State::InPlaceRollout, "{state:?}: {:?}", update.pods[0].1);
                }
                State::ScaleDownSpecified => assert_eq!(scale.delete.len(), 4, "{state:?}: the named pods go first"),
                State::ScaleUp => assert_eq!(scale.create_update, 40, "{state:?}: 40 → 80"),
            }
        }
    }
}
