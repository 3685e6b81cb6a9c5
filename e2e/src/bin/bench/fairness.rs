//! `BENCH_FAIRNESS`: what another client of the apiserver feels while the operator rolls out a
//! large CloneSet, with the operator in APF's `workload-low` (no FlowSchema of its own, where the
//! other client is too) and then in the priority level the chart installs for it.
//!
//! The operator runs as the chart's ServiceAccount here, not as the admin the other scenarios
//! use: an admin (`system:masters`) is exempt from APF, so its requests would never queue. The
//! other client is a ServiceAccount of its own that reads one ConfigMap and lists the ConfigMaps
//! of the namespace, [`PROBE_WORKERS`] requests at a time, each worker pacing itself to one
//! request per [`PROBE_PERIOD`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use cloneset_operator::api::CloneSet;
use e2e::bench::{self, Row};
use e2e::chart;
use e2e::testenv::{Operator, OperatorOptions, TestNamespace, wait_until};
use e2e::workload::manifest;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::cache::Cache;
use crate::flows::{Bench, converged, generation, observed};
use crate::{POLL, image, ready_with, strategy};

/// Requests of the other client in flight at most.
const PROBE_WORKERS: usize = 4;
/// How often each worker sends one.
const PROBE_PERIOD: Duration = Duration::from_millis(100);
/// How long the other client is measured with the operator idle.
const IDLE_WINDOW: Duration = Duration::from_secs(10);
const OTHER: &str = "bench-other-client";

impl Bench {
    pub async fn fairness(&self, n: u32, rows: &mut Vec<Row>) -> anyhow::Result<()> {
        let ns = TestNamespace::create("bench-apf").await?;
        let op = Operator::start_with(&ns.name, OperatorOptions::default()).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while op.probe("/readyz").await.ok() != Some(200) {
            if Instant::now() > deadline {
                bail!("operator not ready: {}", op.log_tail(20));
            }
            tokio::time::sleep(POLL).await;
        }
        let other = self.other_client(&ns.name).await?;

        let pods = Cache::<Pod>::start(ns.api(), &ns.name).await?;
        let sets = Cache::<CloneSet>::start(ns.api(), &ns.name).await?;
        let cs_api: Api<CloneSet> = ns.api();
        let ni = n as i32;
        let min_gen = generation(
            &cs_api.create(&PostParams::default(), &manifest("web", ni, &image(1), strategy("InPlaceIfPossible", "100%"))).await?,
        );
        sets.wait_object("web", "to report all replicas ready", move |cs| observed(cs, min_gen, |s| converged(s, ni, false))).await?;
        pods.wait_count(n as usize, "ready", |p| ready_with(p, &image(1))).await?;

        let idle = probe_while(&other, &ns.name, tokio::time::sleep(IDLE_WINDOW)).await?;
        let (idle_p50, idle_p99) = (percentile_ms(&idle, 0.5), percentile_ms(&idle, 0.99));
        eprintln!("bench: fairness: the other client with the operator idle: p50 {idle_p50:.1} ms, p99 {idle_p99:.1} ms");

        let levels = ["workload-low", "its own level"];
        let mut installed = Vec::new();
        for (i, level) in levels.iter().enumerate() {
            if i == 1 {
                installed = chart::install_flowcontrol(&self.admin, &ns.name).await?;
            }
            let v = i as u32 + 2;
            let mut spec = strategy("InPlaceIfPossible", "100%");
            spec["template"] = json!({"spec": {"containers": [{"name": "main", "image": image(v)}]}});
            let t0 = Instant::now();
            let min_gen = generation(&cs_api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": spec}))).await?);
            let rollout = async {
                sets.wait_object("web", "to report the rollout done", move |cs| observed(cs, min_gen, |s| converged(s, ni, true))).await
            };
            let (latencies, end) = probe_during(&other, &ns.name, rollout).await?;
            let secs = end.duration_since(t0).as_secs_f64();
            pods.wait_count(n as usize, "ready on the new image", |p| ready_with(p, &image(v))).await?;
            let (p50, p99, max) = (percentile_ms(&latencies, 0.5), percentile_ms(&latencies, 0.99), percentile_ms(&latencies, 1.0));
            eprintln!(
                "bench: fairness: rollout of {n} pods in {secs:.1}s with the operator in {level}: the other client's p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms ({} requests)",
                latencies.len()
            );
            let extra = [
                ("probe_p50_ms", p50),
                ("probe_p99_ms", p99),
                ("probe_max_ms", max),
                ("probes", latencies.len() as f64),
                ("idle_probe_p50_ms", idle_p50),
                ("idle_probe_p99_ms", idle_p99),
            ];
            rows.push(Row {
                scenario: format!("fairness: rollout, operator in {level}"),
                client: bench::client_label(None),
                controller: self.controller_label().into(),
                pods: n,
                clonesets: 1,
                runs: 1,
                operator_s: Some(bench::round2(secs)),
                baseline_s: None,
                per_pod: None,
                extra: extra.into_iter().map(|(k, v)| (k.to_string(), bench::round2(v))).collect(),
            });
        }
        drop(op);
        drop((pods, sets));
        for (ar, name) in installed {
            let _ = Api::<DynamicObject>::all_with(self.admin.clone(), &ar).delete(&name, &DeleteParams::default()).await;
        }
        chart::remove_cluster_identity(&self.admin, &ns.name).await;
        self.delete_namespace(ns).await
    }

    /// A client authenticated as a ServiceAccount of its own in `ns`, allowed to read ConfigMaps
    /// there, with one ConfigMap to read.
    async fn other_client(&self, ns: &str) -> anyhow::Result<Client> {
        let meta = json!({"name": OTHER, "namespace": ns});
        let objects = vec![
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": OTHER},
                "subjects": [{"kind": "ServiceAccount", "name": OTHER, "namespace": ns}]}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": "b"}}),
        ];
        chart::apply_rendered(&self.admin, objects).await?;
        let user = format!("system:serviceaccount:{ns}:{OTHER}");
        wait_until(Duration::from_secs(30), "the other client's Role to be in effect", || async {
            chart::may(&self.admin, &user, "get", "", "configmaps", Some(ns)).await
        })
        .await?;
        let admin_kubeconfig = e2e::testenv::kubeconfig().await?;
        let path = std::env::temp_dir().join(format!("{ns}-{OTHER}.kubeconfig"));
        chart::account_kubeconfig(&admin_kubeconfig, &self.admin, ns, OTHER, &path).await?;
        e2e::cluster::client_for(&path).await
    }
}

/// The other client's latencies while `until` runs.
async fn probe_while(client: &Client, ns: &str, until: impl Future<Output = ()>) -> anyhow::Result<Vec<Duration>> {
    let (latencies, ()) = probe_during(client, ns, async {
        until.await;
        Ok(())
    })
    .await?;
    Ok(latencies)
}

/// Runs [`PROBE_WORKERS`] paced readers until `until` ends; their latencies and `until`'s value.
async fn probe_during<T>(client: &Client, ns: &str, until: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<(Vec<Duration>, T)> {
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..PROBE_WORKERS)
        .map(|i| {
            let (api, latencies, failures) = (Api::<ConfigMap>::namespaced(client.clone(), ns), latencies.clone(), failures.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(PROBE_PERIOD);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let t0 = Instant::now();
                    let result =
                        if i % 2 == 0 { api.get(OTHER).await.map(|_| ()) } else { api.list(&ListParams::default()).await.map(|_| ()) };
                    match result {
                        Ok(()) => latencies.lock().unwrap().push(t0.elapsed()),
                        Err(e) => failures.lock().unwrap().push(e.to_string()),
                    }
                }
            })
        })
        .collect();
    let out = until.await;
    for w in &workers {
        w.abort();
    }
    let out = out?;
    if let Some(first) = failures.lock().unwrap().first() {
        bail!("the other client's request failed: {first}");
    }
    let latencies = std::mem::take(&mut *latencies.lock().unwrap());
    Ok((latencies, out))
}

/// The `q` quantile (0..=1) of `samples` in milliseconds, nearest rank; 0 for none.
fn percentile_ms(samples: &[Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let rank = ((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len());
    ms[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&samples, 0.5), 50.0);
        assert_eq!(percentile_ms(&samples, 0.99), 99.0);
        assert_eq!(percentile_ms(&samples, 1.0), 100.0);
        assert_eq!(percentile_ms(&[], 0.5), 0.0);
    }
}
