//! `BENCH_REAL_NODE`: an in-place rollout on a real node (kubelet, containerd, runc), where the
//! kubelet's restart of each container is the physical limit. One CloneSet of N pods serving
//! HTTP (readiness probe every second) is rolled to a new image in place once per maxUnavailable
//! of `BENCH_REAL_NODE_WINDOWS`. A watch records every pod change with the time it was seen, and
//! the rollout's time splits into the kubelet's and the operator's:
//!
//! * the kubelet's: from a pod's new image being patched until its containers report ready on
//!   it (stop, pull, start, first probe), and from the operator's `InPlaceUpdateReady=True` until
//!   the kubelet reports the pod Ready;
//! * the operator's: the rest of the rollout, with no pod in the kubelet's hands: from the
//!   CloneSet's change to the first patch, from a pod turning ready to the next patch
//!   (`gap_*_ms`), and from containers ready to `InPlaceUpdateReady=True`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cloneset_operator::api::{CloneSet, keys};
use e2e::bench::{self, Row};
use e2e::real_node::{on_the_real_node, served};
use e2e::testenv::TestNamespace;
use e2e::workload::manifest;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt as _};
use serde_json::json;

use crate::cache::Cache;
use crate::flows::{Bench, converged, generation, observed};

const OLD: &str = "nginx:1.27";
const NEW: &str = "nginx:1.28";

/// Pod changes with the time the watch delivered each.
type Seen = Vec<(Instant, Arc<Pod>)>;

/// When one pod passed each point of its in-place update, as the watch saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PodTimes {
    /// Its spec names the new image.
    pub patched: Option<Instant>,
    /// Its containers report ready on the new image.
    pub containers_ready: Option<Instant>,
    /// `InPlaceUpdateReady` is True again after that.
    pub gate_true: Option<Instant>,
    /// The pod is Ready on the new image.
    pub ready: Option<Instant>,
}

fn condition(p: &Pod, type_: &str) -> bool {
    p.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| c.type_ == type_ && c.status == "True")
}

fn on_new_spec(p: &Pod) -> bool {
    p.spec.as_ref().is_some_and(|s| s.containers.iter().any(|c| c.name == "main" && c.image.as_deref().is_some_and(|i| i.ends_with(NEW))))
}

fn containers_ready_on_new(p: &Pod) -> bool {
    p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()).any(|c| c.name == "main" && c.ready && c.image.ends_with(NEW))
}

/// Each pod's points, from the changes seen (in order).
pub fn pod_times(seen: &[(Instant, Arc<Pod>)]) -> BTreeMap<String, PodTimes> {
    let mut out: BTreeMap<String, PodTimes> = BTreeMap::new();
    for (at, p) in seen {
        let t = out.entry(p.name_any()).or_default();
        if t.patched.is_none() && on_new_spec(p) {
            t.patched = Some(*at);
        }
        if t.patched.is_some() && t.containers_ready.is_none() && containers_ready_on_new(p) {
            t.containers_ready = Some(*at);
        }
        if t.containers_ready.is_some() && t.gate_true.is_none() && condition(p, keys::INPLACE_UPDATE_READY) {
            t.gate_true = Some(*at);
        }
        if t.gate_true.is_some() && t.ready.is_none() && condition(p, "Ready") && containers_ready_on_new(p) {
            t.ready = Some(*at);
        }
    }
    out
}

/// The total length of the union of `spans`.
pub fn union_s(mut spans: Vec<(Instant, Instant)>) -> f64 {
    spans.sort();
    let mut total = Duration::ZERO;
    let mut current: Option<(Instant, Instant)> = None;
    for (a, b) in spans {
        current = match current {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((s, e)) = current {
        total += e - s;
    }
    total.as_secs_f64()
}

/// The rollout's split (see the module documentation): figures for a row's `extra`.
pub fn split(t0: Instant, end: Instant, times: &BTreeMap<String, PodTimes>) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut spans = Vec::new();
    let mut restarts = Vec::new();
    let mut pods: Vec<PodTimes> = Vec::new();
    for (name, t) in times {
        let (Some(patched), Some(containers), Some(gate), Some(ready)) = (t.patched, t.containers_ready, t.gate_true, t.ready) else {
            anyhow::bail!("pod {name} was not seen through its whole in-place update: {t:?}");
        };
        spans.push((patched, containers));
        spans.push((gate, ready));
        restarts.push((containers - patched).as_secs_f64());
        pods.push(*t);
    }
    pods.sort_by_key(|t| t.patched);
    // From each pod turning ready to the first patch after it: the operator's reaction.
    let mut gaps: Vec<f64> = pods
        .iter()
        .filter_map(|t| {
            let ready = t.ready?;
            pods.iter().filter_map(|u| u.patched).filter(|&p| p >= ready).min().map(|p| (p - ready).as_secs_f64() * 1000.0)
        })
        .collect();
    gaps.sort_by(f64::total_cmp);
    restarts.sort_by(f64::total_cmp);
    let rollout_s = (end - t0).as_secs_f64();
    let kubelet_s = union_s(spans);
    let mut out: BTreeMap<String, f64> = [
        ("kubelet_s".to_string(), bench::round2(kubelet_s)),
        ("operator_only_s".to_string(), bench::round2(rollout_s - kubelet_s)),
        ("operator_share_pct".to_string(), bench::round2(100.0 * (rollout_s - kubelet_s) / rollout_s)),
        ("restart_median_s".to_string(), bench::round2(bench::median(&restarts).unwrap_or_default())),
        ("restart_max_s".to_string(), bench::round2(restarts.last().copied().unwrap_or_default())),
    ]
    .into();
    if let Some(first) = pods.first().and_then(|t| t.patched) {
        out.insert("first_patch_ms".into(), bench::round2((first - t0).as_secs_f64() * 1000.0));
    }
    if !gaps.is_empty() {
        out.insert("gap_median_ms".into(), bench::round2(bench::median(&gaps).unwrap_or_default()));
        out.insert("gap_max_ms".into(), bench::round2(gaps.last().copied().unwrap_or_default()));
    }
    Ok(out)
}

impl Bench {
    /// One row per window: the rollout's time and its split.
    pub async fn real_node(&self, n: u32, windows: &[String], rows: &mut Vec<Row>) -> anyhow::Result<()> {
        for w in windows {
            eprintln!("bench: real node, {n} pods in place at maxUnavailable {w}");
            let ns = TestNamespace::create("bench-real").await?;
            let ctl = self.controller(&ns.name, None).await?;
            let api: Api<Pod> = ns.api();
            let sets = Cache::<CloneSet>::start(ns.api(), &ns.name).await?;
            let cs_api: Api<CloneSet> = ns.api();
            let mut spec = on_the_real_node(
                json!({"updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": crate::one_set::int_or_percent(w)}}),
            );
            json_patch::merge(&mut spec, &served(OLD));
            let mut cs = manifest("web", n as i32, OLD, json!({}));
            cs.spec = serde_json::from_value({
                let mut v = serde_json::to_value(&cs.spec)?;
                json_patch::merge(&mut v, &spec);
                v
            })?;
            let ni = n as i32;
            let min_gen = generation(&cs_api.create(&PostParams::default(), &cs).await?);
            sets.wait_object("web", "to report all replicas ready", move |cs| observed(cs, min_gen, |s| converged(s, ni, false))).await?;

            let seen: Arc<Mutex<Seen>> = Arc::default();
            let record = {
                let seen = seen.clone();
                let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                tokio::spawn(async move {
                    while let Some(ev) = stream.next().await {
                        let at = Instant::now();
                        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                        match ev {
                            Ok(Event::Apply(p) | Event::InitApply(p)) => s.push((at, Arc::new(p))),
                            Ok(_) => {}
                            Err(e) => eprintln!("bench: real node watch: {e}"),
                        }
                    }
                })
            };
            // The watch's initial list is in before the change.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let before = ctl.snapshot().await?;
            let t0 = Instant::now();
            let patch = Patch::Merge(json!({"spec": served(NEW)}));
            let min_gen = generation(&cs_api.patch("web", &PatchParams::default(), &patch).await?);
            let end =
                sets.wait_object("web", "to report the rollout done", move |cs| observed(cs, min_gen, |s| converged(s, ni, true))).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            record.abort();
            let times = pod_times(&seen.lock().unwrap_or_else(|e| e.into_inner()));
            let mut row = Row::operator_only(format!("real node: in-place {w}"), "none", n, 1, (end - t0).as_secs_f64());
            row.controller = self.controller_label().into();
            row.extra = split(t0, end, &times)?;
            if let Some(c) = crate::flows::since(ctl.snapshot().await?, before) {
                row.per_pod = c.per_pod(f64::from(n));
                row.extra.extend(c.reconcile_extra());
            }
            eprintln!("bench: real node rollout at {w}: {:.2}s, {:?}", (end - t0).as_secs_f64(), row.extra);
            rows.push(row);
            drop(ctl);
            drop(sets);
            self.delete_namespace(ns).await?;
        }
        eprintln!("{}", bench::table(rows));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_counts_overlapping_kubelet_time_once() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(union_s(vec![(at(0), at(1000)), (at(500), at(1500)), (at(2000), at(2500))]), 2.0);
        let times: BTreeMap<String, PodTimes> = [
            (
                "a".to_string(),
                PodTimes { patched: Some(at(100)), containers_ready: Some(at(1100)), gate_true: Some(at(1150)), ready: Some(at(1200)) },
            ),
            (
                "b".to_string(),
                PodTimes { patched: Some(at(1300)), containers_ready: Some(at(2300)), gate_true: Some(at(2350)), ready: Some(at(2400)) },
            ),
        ]
        .into();
        let s = split(t0, at(2500), &times).unwrap();
        // Kubelet: 1.0 + 0.05 per pod; the operator: 0.1 first, 0.05 gate each, 0.1 gap, 0.1 tail.
        assert_eq!(s["kubelet_s"], 2.1);
        assert_eq!(s["operator_only_s"], 0.4);
        assert_eq!(s["operator_share_pct"], 16.0);
        assert_eq!((s["first_patch_ms"], s["gap_median_ms"], s["restart_median_s"]), (100.0, 100.0, 1.0));
        let unfinished: BTreeMap<String, PodTimes> = [("a".to_string(), PodTimes { patched: Some(at(1)), ..Default::default() })].into();
        assert!(split(t0, at(2), &unfinished).is_err());
    }
}
