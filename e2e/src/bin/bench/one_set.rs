//! `BENCH_ONE_SET`: one CloneSet of N pods through what a large set goes through, at each size:
//! the scale-up 0 → N; an in-place rollout moved through the partitions of
//! `BENCH_ONE_SET_STEPS` (each step waits for its pods to be updated and ready); a recreate
//! rollout the same way; then a scale-down to N/2 with a tenth of the pods named in
//! `scaleStrategy.podsToDelete`. Each phase is a row with the controller's time, the raw
//! baseline's for the same pod writes (see `baseline.rs`), and what the controller spent on it:
//! CPU seconds, per reconcile pass (`cpu_ms_per_reconcile`) and per 1,000 pod events the bench's
//! own watch saw (`cpu_s_per_1k_pod_events`), and its memory (`rss_after_mib`, `peak_rss_mib`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use cloneset_operator::api::CloneSet;
use e2e::bench::{self, Row};
use e2e::testenv::TestNamespace;
use e2e::workload::manifest;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

use crate::cache::Cache;
use crate::flows::{BasePhase, Bench, Ctl, LoadMeter, Phase, converged, generation, observed, since};
use crate::{TIMEOUT, image, positive_window, proc_reading, ready_with};

/// The phases, in order, as the rows name them.
pub const PHASES: [&str; 4] = ["scale-up", "in-place steps", "recreate steps", "scale-down named"];

/// Waits grow with the set: the scheduler binds about 50 pods a second.
pub fn timeout_for(n: u32) -> Duration {
    TIMEOUT.max(Duration::from_millis(300) * n)
}

/// Pods on the update revision once the partition of `step` is reached (Kruise rounds a
/// percentage partition up, and below 100 % leaves at least one pod to update).
pub fn updated_at(step: &str, n: u32) -> u32 {
    let partition = match step.strip_suffix('%') {
        Some(p) => {
            let p: f64 = p.parse().unwrap_or(0.0);
            let kept = (f64::from(n) * p / 100.0).ceil() as u32;
            if p < 100.0 && kept >= n && n > 0 { n - 1 } else { kept.min(n) }
        }
        None => step.parse::<u32>().unwrap_or(0).min(n),
    };
    n - partition
}

/// Every tenth pod by name: the ones a scale-down names.
pub fn named_for_deletion(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names.into_iter().step_by(10).collect()
}

/// One phase of the controller, with its CPU seconds and the pod events it caused.
struct Measured {
    phase: Phase,
    controller_cpu_s: Option<f64>,
    pod_events: u64,
}

impl Bench {
    /// The scenario at each of `sizes`: rows for the controller's phases against the baseline's.
    pub async fn one_set(&self, sizes: &[u32], rows: &mut Vec<Row>) -> anyhow::Result<()> {
        let client = self.knobs.external.as_ref().map_or_else(|| "none".to_string(), |e| e.client.clone());
        for &n in sizes {
            eprintln!("bench: one set of {n} pods ({})", self.controller_label());
            let (phases, rss_after, peak_rss) = self.one_set_controller(n).await?;
            let base = if self.baselines() { Some(self.one_set_baseline(n).await?) } else { None };
            for (i, (name, m)) in PHASES.iter().zip(&phases).enumerate() {
                let name: &str = name;
                let mut row = Row::operator_only(format!("one set: {name}"), &client, n, 1, m.phase.secs);
                row.controller = self.controller_label().into();
                row.per_pod = m.phase.per_pod();
                row.extra = m.phase.extra();
                if let Some(c) = &m.phase.counts {
                    row.extra.extend(c.reconcile_extra());
                    if let Some(cpu) = m.controller_cpu_s.filter(|_| c.reconciles > 0.0) {
                        row.extra.insert("cpu_ms_per_reconcile".into(), bench::round2(cpu * 1000.0 / c.reconciles));
                    }
                }
                if let Some(cpu) = m.controller_cpu_s.filter(|_| m.pod_events > 0) {
                    row.extra.insert("pod_events".into(), m.pod_events as f64);
                    row.extra.insert("cpu_s_per_1k_pod_events".into(), bench::round2(cpu * 1000.0 / m.pod_events as f64));
                }
                row.extra.insert("rss_after_mib".into(), bench::mib(rss_after));
                row.extra.insert("peak_rss_mib".into(), bench::mib(peak_rss));
                if let Some(b) = base.as_ref().and_then(|b: &Vec<BasePhase>| b.get(i)) {
                    row.add_baseline(b.secs, b.extra());
                }
                rows.push(row);
            }
            eprintln!("{}", bench::table(rows));
        }
        Ok(())
    }

    /// The controller's phases at `n` pods, and its RSS after them and at its peak.
    async fn one_set_controller(&self, n: u32) -> anyhow::Result<(Vec<Measured>, u64, u64)> {
        let ns = TestNamespace::create("bench-one").await?;
        let ctl = self.controller(&ns.name, None).await?;
        let pods = Cache::<Pod>::start(ns.api(), &ns.name).await?.with_timeout(timeout_for(n));
        let sets = Cache::<CloneSet>::start(ns.api(), &ns.name).await?.with_timeout(timeout_for(n));
        let cs_api: Api<CloneSet> = ns.api();
        let steps = &self.knobs.one_set_steps;
        let window = &self.knobs.one_set_window;
        let ni = n as i32;
        let mut phases = Vec::new();

        // Scale-up.
        let strategy = json!({"updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": int_or_percent(window)}});
        let cs = manifest("web", ni, &image(1), strategy);
        let m = self
            .measure(&ctl, &pods, n, async {
                let min_gen = generation(&cs_api.create(&PostParams::default(), &cs).await?);
                let (a, c) = tokio::join!(
                    pods.wait_count(n as usize, "ready", |p| ready_with(p, &image(1))),
                    sets.wait_object("web", "to report all replicas ready", move |cs| observed(cs, min_gen, |s| converged(s, ni, false)))
                );
                Ok(a?.max(c?))
            })
            .await?;
        phases.push(m);

        // Rollouts through the partition steps: in place, then recreating.
        for (v, type_) in [(2, "InPlaceIfPossible"), (3, "ReCreate")] {
            let m = self
                .measure(&ctl, &pods, n, async {
                    let started = Instant::now();
                    let mut end = started;
                    for (i, step) in steps.iter().enumerate() {
                        let mut spec = json!({"updateStrategy": {"type": type_, "maxUnavailable": int_or_percent(window), "partition": int_or_percent(step)}});
                        if i == 0 {
                            spec["template"] = json!({"spec": {"containers": [{"name": "main", "image": image(v)}]}});
                        }
                        let patch = Patch::Merge(json!({"spec": spec}));
                        let min_gen = generation(&cs_api.patch("web", &PatchParams::default(), &patch).await?);
                        let want = updated_at(step, n) as i32;
                        end = sets
                            .wait_object("web", "to report the step's pods updated and ready", move |cs| {
                                observed(cs, min_gen, |s| {
                                    converged(s, ni, false) && s.updated_ready_replicas == want && s.updated_replicas == want
                                })
                            })
                            .await?;
                        eprintln!(
                            "bench: one set of {n}, {type_} v{v}: partition {step} at {:.1}s",
                            end.duration_since(started).as_secs_f64()
                        );
                    }
                    let img = image(v);
                    let last = steps.last().map_or(0, |s| updated_at(s, n)) as usize;
                    pods.wait_count(last, "ready on the new image", move |p| ready_with(p, &img)).await?;
                    Ok(end)
                })
                .await?;
            phases.push(m);
        }

        // Scale-down to half, a tenth of the pods named.
        let names: Vec<String> =
            pods.store.state().iter().filter(|p| p.metadata.deletion_timestamp.is_none()).map(|p| p.name_any()).collect();
        let named = named_for_deletion(names);
        let half = n / 2;
        let m = self
            .measure(&ctl, &pods, n - half, async {
                let patch = Patch::Merge(json!({"spec": {"replicas": half, "scaleStrategy": {"podsToDelete": named}}}));
                let min_gen = generation(&cs_api.patch("web", &PatchParams::default(), &patch).await?);
                let gone: BTreeSet<String> = named.iter().cloned().collect();
                let (_, a) = pods
                    .wait_all("the named pods and half the pods gone", |all| {
                        let left = all.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count();
                        let named_left = all.iter().filter(|p| gone.contains(&p.name_any())).count();
                        if all.len() == half as usize && left == half as usize && named_left == 0 {
                            Ok(())
                        } else {
                            Err(format!("{left} pods, {named_left} named"))
                        }
                    })
                    .await?;
                let hi = half as i32;
                let c = sets
                    .wait_object("web", "to report half the replicas", move |cs| observed(cs, min_gen, |s| converged(s, hi, false)))
                    .await?;
                Ok(a.max(c))
            })
            .await?;
        phases.push(m);

        let (rss_after, peak_rss, _) = proc_reading(ctl.pid())?;
        drop(ctl);
        drop((pods, sets));
        self.delete_namespace(ns).await?;
        Ok((phases, rss_after, peak_rss))
    }

    /// Runs `phase` (which returns when it ended) and measures it, letting trailing writes
    /// (status, lifecycle labels) land in it; its requests are per each of `changed` pods.
    async fn measure(
        &self,
        ctl: &Ctl,
        pods: &Cache<Pod>,
        changed: u32,
        phase: impl Future<Output = anyhow::Result<Instant>>,
    ) -> anyhow::Result<Measured> {
        let before = ctl.snapshot().await?;
        let events0 = pods.events();
        let load = LoadMeter::start(self.apiserver_pid(), Some(ctl.pid()));
        let t0 = Instant::now();
        let end = phase.await?;
        let secs = end.duration_since(t0).as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let controller_cpu_s = load.cpu_s().1;
        let counts = since(ctl.snapshot().await?, before);
        Ok(Measured {
            phase: Phase { secs, pods: changed, counts, load: load.extra("") },
            controller_cpu_s,
            pod_events: pods.events() - events0,
        })
    }
}

/// A partition or maxUnavailable as the CloneSet takes it: a percentage stays a string, a count
/// is a number (the CRD refuses `"1"`).
pub fn int_or_percent(step: &str) -> Value {
    step.parse::<u32>().map_or_else(|_| json!(step), |n| json!(n))
}

/// `BENCH_ONE_SET_STEPS` and `BENCH_ONE_SET_WINDOW` checked: partitions that only go down, and
/// a positive maxUnavailable.
pub fn check_steps(steps: &[String], window: &str) -> anyhow::Result<()> {
    let at_1000: Vec<u32> = steps.iter().map(|s| updated_at(s, 1000)).collect();
    for s in steps {
        let n = s.strip_suffix('%').unwrap_or(s);
        n.parse::<u32>()
            .ok()
            .filter(|&v| !s.ends_with('%') || v <= 100)
            .with_context(|| format!("BENCH_ONE_SET_STEPS: {s} is not a partition"))?;
    }
    if steps.is_empty() || at_1000.windows(2).any(|w| w[1] < w[0]) {
        anyhow::bail!("BENCH_ONE_SET_STEPS: give partitions that only go down, e.g. 80%,60%,40%,20%,0%");
    }
    if !positive_window(window) {
        anyhow::bail!("BENCH_ONE_SET_WINDOW: {window} is not a positive count or percentage");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_read_as_kruise_counts_partitions() {
        assert_eq!(updated_at("80%", 1000), 200);
        assert_eq!(updated_at("0%", 1000), 1000);
        assert_eq!(updated_at("0", 1000), 1000);
        assert_eq!(updated_at("99%", 10), 1, "a partition below 100% leaves a pod to update");
        assert_eq!(updated_at("100%", 10), 0);
        assert_eq!(updated_at("250", 100), 0);
        assert_eq!(int_or_percent("20%"), json!("20%"));
        assert_eq!(int_or_percent("20"), json!(20));
        let steps = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
        assert!(check_steps(&steps("80%,60%,40%,20%,0%"), "20%").is_ok());
        assert!(check_steps(&steps("20%,80%"), "20%").is_err());
        assert!(check_steps(&steps("half"), "20%").is_err());
        assert!(check_steps(&steps("0%"), "0").is_err());
        assert_eq!(named_for_deletion((0..25).map(|i| format!("p{i:02}")).collect()), ["p00", "p10", "p20"]);
    }
}
