//! The baselines: a plain client creating and changing the same pods the controller does, with
//! no controller in between, in a namespace of its own.
//!
//! * The **raw baseline** (rows with client `none`): no client-side limit, at most
//!   `BENCH_BASELINE_CONCURRENCY` requests in flight, and per pod the writes the operator makes,
//!   in its order, pipelined pod by pod:
//!   - scale-up: create the pod (with the `InPlaceUpdateReady` readiness gate and the
//!     `PreparingNormal` lifecycle label, as the operator's pods), set `InPlaceUpdateReady=True`,
//!     move the lifecycle label to `Normal`; done when Ready.
//!   - in-place rollout, at most maxUnavailable pods in progress: (a) `InPlaceUpdateReady=False`
//!     (and Ready False, in the same status patch), (b) the new image and the revision and
//!     `Updating` labels, (c) wait until the watch shows the container running the new image,
//!     (d) `InPlaceUpdateReady=True`, (e) the `Normal` label; done when Ready on the new image.
//!   - recreate rollout, at most maxUnavailable pods in progress: the specified-delete label,
//!     delete, create the replacement, then its scale-up writes; done when it is Ready.
//! * The **limited baseline** (rows with client `30/50`): today's flow at Kruise's 30/50 — all
//!   creates at once; rollouts in maxUnavailable batches with as many pod writes per pod as the
//!   operator made in the same rollout.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use cloneset_operator::api::keys;
use cloneset_operator::client::{self as opclient, RateLimit};
use cloneset_operator::metrics::Metrics;
use e2e::bench::Snapshot;
use e2e::testenv::TestNamespace;
use e2e::workload::manifest;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::cache::Cache;
use crate::flows::{BasePhase, Bench, LoadMeter, Phase, containers_ready, timeline};
use crate::{image, one_set, ready_with, running_image, window_pods};

/// A baseline's namespace, client and view of its pods.
struct Baseline {
    ns: TestNamespace,
    api: Api<Pod>,
    pods: Cache<Pod>,
    metrics: Arc<Metrics>,
    /// Requests in flight at most (the raw baseline's bound).
    slots: Arc<Semaphore>,
    template: Value,
    /// Pods carry the operator's readiness gate and lifecycle label (the raw baseline's do).
    like_operator: bool,
}

impl Baseline {
    fn counts(&self) -> Snapshot {
        Snapshot::from_metrics(&self.metrics.encode())
    }

    /// Ends a phase that began at `t0` with `before` counts.
    fn phase(&self, t0: Instant, end: Instant, pods: u32, before: &Snapshot) -> BasePhase {
        BasePhase { secs: end.duration_since(t0).as_secs_f64(), pods, counts: self.counts().since(before), load: BTreeMap::new() }
    }

    fn pod(&self, name: &str, img: &str) -> anyhow::Result<Pod> {
        let mut v = self.template.clone();
        v["metadata"]["name"] = json!(name);
        v["spec"]["containers"][0]["image"] = json!(img);
        if self.like_operator {
            v["metadata"]["labels"][keys::LIFECYCLE_STATE] = json!("PreparingNormal");
            v["spec"]["readinessGates"] = json!([{"conditionType": keys::INPLACE_UPDATE_READY}]);
        }
        Ok(serde_json::from_value(v)?)
    }

    /// Runs `req` once a request slot is free.
    async fn req<T>(&self, req: impl Future<Output = kube::Result<T>>) -> anyhow::Result<T> {
        let _slot = self.slots.acquire().await?;
        Ok(req.await?)
    }

    async fn set_gate(&self, name: &str, ready: bool) -> anyhow::Result<()> {
        let now = Timestamp::now().to_string();
        let gate = if ready {
            json!([{"type": keys::INPLACE_UPDATE_READY, "status": "True", "lastTransitionTime": now}])
        } else {
            json!([
                {"type": keys::INPLACE_UPDATE_READY, "status": "False", "reason": keys::REASON_START_INPLACE_UPDATE, "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady", "lastTransitionTime": now},
            ])
        };
        let patch = Patch::Strategic(json!({"status": {"conditions": gate}}));
        self.req(self.api.patch_status(name, &PatchParams::default(), &patch)).await?;
        Ok(())
    }

    async fn label(&self, name: &str, labels: Value) -> anyhow::Result<()> {
        let patch = Patch::Merge(json!({"metadata": {"labels": labels}}));
        self.req(self.api.patch(name, &PatchParams::default(), &patch)).await?;
        Ok(())
    }

    /// The operator's writes for a new pod: create, gate True, lifecycle Normal.
    async fn create(&self, name: &str, img: &str) -> anyhow::Result<()> {
        let pod = self.pod(name, img)?;
        self.req(self.api.create(&PostParams::default(), &pod)).await?;
        self.set_gate(name, true).await?;
        self.label(name, json!({keys::LIFECYCLE_STATE: "Normal"})).await
    }

    /// Steps (a)–(e) of an in-place update of `name` to revision `v`; returns when it is Ready
    /// on the new image.
    async fn in_place(&self, name: String, v: u32) -> anyhow::Result<String> {
        let img = image(v);
        self.set_gate(&name, false).await?;
        let patch = json!({
            "metadata": {"labels": {"bench/revision": format!("v{v}"), keys::LIFECYCLE_STATE: "Updating"}},
            "spec": {"containers": [{"name": "main", "image": img}]},
        });
        self.req(self.api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch))).await?;
        let want = img.clone();
        self.pods.wait_object(&name, "to run the new image", move |p| running_image(p, &want)).await?;
        self.set_gate(&name, true).await?;
        self.label(&name, json!({keys::LIFECYCLE_STATE: "Normal"})).await?;
        self.pods.wait_object(&name, "to be ready on the new image", move |p| ready_with(p, &img)).await?;
        Ok(name)
    }

    /// A recreate of `name` as revision `v`; returns the replacement's name once it is Ready.
    async fn recreate(&self, name: String, v: u32) -> anyhow::Result<String> {
        let img = image(v);
        let new_name = format!("web-{v}-{}", name.rsplit('-').next().unwrap_or_default());
        self.label(&name, json!({keys::SPECIFIED_DELETE: "true"})).await?;
        self.req(self.api.delete(&name, &DeleteParams::default())).await?;
        self.create(&new_name, &img).await?;
        self.pods.wait_object(&new_name, "to be ready", move |p| ready_with(p, &img)).await?;
        Ok(new_name)
    }
}

impl Bench {
    async fn baseline(&self, limit: Option<RateLimit>, slots: usize) -> anyhow::Result<Baseline> {
        let ns = TestNamespace::create("bench-base").await?;
        let cfg = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(e2e::testenv::kubeconfig().await?)?,
            &Default::default(),
        )
        .await?;
        let metrics = Arc::new(Metrics::new());
        let api = Api::namespaced(opclient::build(cfg, limit, metrics.clone(), false)?, &ns.name);
        let pods = Cache::start(ns.api(), &ns.name).await?;
        let template = serde_json::to_value(manifest("web", 1, &image(1), json!({})).spec.template)?;
        Ok(Baseline { ns, api, pods, metrics, slots: Arc::new(Semaphore::new(slots)), template, like_operator: limit.is_none() })
    }

    /// The raw baseline: scale-up, then one rollout per window (see the module documentation).
    pub async fn raw_baseline(&self, n: u32, t: &str, windows: &[String]) -> anyhow::Result<(BasePhase, Vec<BasePhase>)> {
        let b = self.baseline(None, self.knobs.concurrency).await?;
        let img = image(1);
        let before = b.counts();
        let load = LoadMeter::start(self.apiserver_pid(), None);
        let t0 = Instant::now();
        let mut names: Vec<String> = (0..n).map(|i| format!("web-{i}")).collect();
        // Pod sequences (and so requests) in flight: at most the bound.
        let creates = names.iter().map(|name| b.create(name, &img));
        let (sent, created, containers) = tokio::join!(
            futures::stream::iter(creates).buffer_unordered(self.knobs.concurrency).try_collect::<Vec<_>>(),
            b.pods.wait_count(n as usize, "created", |_| true),
            b.pods.wait_count(n as usize, "with their containers ready", containers_ready),
        );
        sent?;
        let end = b.pods.wait_count(n as usize, "ready", |p| ready_with(p, &img)).await?;
        let mut up = b.phase(t0, end, n, &before);
        up.load = load.extra("baseline_");
        timeline("raw baseline", t0, [("created", created?), ("containers ready", containers?)], up.secs);
        let in_place = t.starts_with("InPlace");
        let mut rolls = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let v = i as u32 + 2;
            let before = b.counts();
            let t0 = Instant::now();
            let window = window_pods(w, n) as usize;
            let sequences = names.into_iter().map(|name| {
                let b = &b;
                async move { if in_place { b.in_place(name, v).await } else { b.recreate(name, v).await } }
            });
            names = futures::stream::iter(sequences).buffer_unordered(window).try_collect().await?;
            rolls.push(b.phase(t0, Instant::now(), n, &before));
        }
        let Baseline { ns, pods, .. } = b;
        drop(pods);
        self.delete_namespace(ns).await?;
        Ok((up, rolls))
    }

    /// The limited baseline, as the bench measured before the raw one existed: the client at
    /// `limit`, all creates at once, and per rollout maxUnavailable batches of as many pod writes
    /// per pod as the operator made (`op_rolls`).
    pub async fn limited_baseline(
        &self,
        n: u32,
        t: &str,
        windows: &[String],
        op_rolls: &[Phase],
        limit: Option<RateLimit>,
    ) -> anyhow::Result<(BasePhase, Vec<BasePhase>)> {
        let b = self.baseline(limit, n.max(1) as usize).await?;
        let before = b.counts();
        let t0 = Instant::now();
        let new: Vec<Pod> = (0..n).map(|i| b.pod(&format!("web-{i}"), &image(1))).collect::<anyhow::Result<_>>()?;
        let pp = PostParams::default();
        futures::stream::iter(new.iter().map(|p| b.api.create(&pp, p))).buffer_unordered(n as usize).try_collect::<Vec<_>>().await?;
        let end = b.pods.wait_count(n as usize, "ready", |p| ready_with(p, &image(1))).await?;
        let up = b.phase(t0, end, n, &before);
        let in_place = t.starts_with("InPlace");
        let mut names: Vec<String> = (0..n).map(|i| format!("web-{i}")).collect();
        let mut rolls = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let v = i as u32 + 2;
            let img = image(v);
            // The same number of pod writes per pod as the operator made (rounded), at least the essential ones.
            let per_pod = op_rolls.get(i).and_then(Phase::per_pod).map_or(0, |r| r.pod_writes().round() as u32);
            let chunk = window_pods(w, n) as usize;
            let before = b.counts();
            let t0 = Instant::now();
            let mut next = Vec::with_capacity(names.len());
            for batch in names.chunks(chunk) {
                let writes = batch.iter().map(|name| {
                    let (api, img, name) = (b.api.clone(), img.clone(), name.clone());
                    let new_name = if in_place { name.clone() } else { format!("web-{v}-{}", name.rsplit('-').next().unwrap_or_default()) };
                    let pod = b.pod(&new_name, &img);
                    async move {
                        let pod = pod?;
                        let pp = PatchParams::default();
                        if in_place {
                            for _ in 2..per_pod.max(1) + 1 {
                                let cond = json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "True"}]}});
                                api.patch_status(&name, &pp, &Patch::Strategic(cond)).await?;
                            }
                            let patch = json!({"spec": {"containers": [{"name": "main", "image": img}]}});
                            api.patch(&name, &pp, &Patch::Strategic(patch)).await?;
                        } else {
                            for _ in 3..per_pod.max(2) + 1 {
                                api.patch(&name, &pp, &Patch::Merge(json!({"metadata": {"labels": {"bench/delete": "true"}}}))).await?;
                            }
                            api.delete(&name, &DeleteParams::default()).await?;
                            api.create(&PostParams::default(), &pod).await?;
                        }
                        anyhow::Ok(new_name)
                    }
                });
                let done: Vec<String> = futures::stream::iter(writes).buffer_unordered(chunk).try_collect().await?;
                let set: BTreeSet<String> = done.iter().cloned().collect();
                let imgc = img.clone();
                b.pods
                    .wait_count(set.len(), "ready on the new image", move |p| set.contains(&p.name_any()) && ready_with(p, &imgc))
                    .await?;
                next.extend(done);
            }
            rolls.push(b.phase(t0, Instant::now(), n, &before));
            names = next;
        }
        let Baseline { ns, pods, .. } = b;
        drop(pods);
        self.delete_namespace(ns).await?;
        Ok((up, rolls))
    }
}

impl Bench {
    /// The raw baseline of the one-set scenario (`one_set.rs`), phase by phase: the scale-up;
    /// the in-place and the recreate rollouts step by step, each step's pods at most
    /// maxUnavailable at a time; then the scale-down to half, labelling the named pods
    /// specified-delete before deleting them as the operator does.
    pub async fn one_set_baseline(&self, n: u32) -> anyhow::Result<Vec<BasePhase>> {
        let mut b = self.baseline(None, self.knobs.concurrency).await?;
        b.pods = b.pods.with_timeout(one_set::timeout_for(n));
        let concurrency = self.knobs.concurrency;
        let mut phases = Vec::new();
        let start = |b: &Baseline| (b.counts(), LoadMeter::start(self.apiserver_pid(), None), Instant::now());
        let end = |b: &Baseline, (before, load, t0): (Snapshot, LoadMeter, Instant), at: Instant, pods: u32| {
            let mut phase = b.phase(t0, at, pods, &before);
            phase.load = load.extra("baseline_");
            phase
        };

        let img = image(1);
        let names: Vec<String> = (0..n).map(|i| format!("web-{i}")).collect();
        let s = start(&b);
        futures::stream::iter(names.iter().map(|name| b.create(name, &img))).buffer_unordered(concurrency).try_collect::<Vec<_>>().await?;
        let at = b.pods.wait_count(n as usize, "ready", |p| ready_with(p, &img)).await?;
        phases.push(end(&b, s, at, n));

        let window = window_pods(&self.knobs.one_set_window, n) as usize;
        let mut names = names;
        for (v, in_place) in [(2, true), (3, false)] {
            let s = start(&b);
            let mut pending: std::collections::VecDeque<String> = names.into();
            let mut rolled = Vec::new();
            for step in &self.knobs.one_set_steps {
                let count = (one_set::updated_at(step, n) as usize).saturating_sub(rolled.len()).min(pending.len());
                let sequences = pending.drain(..count).map(|name| {
                    let b = &b;
                    async move { if in_place { b.in_place(name, v).await } else { b.recreate(name, v).await } }
                });
                rolled.extend(futures::stream::iter(sequences).buffer_unordered(window).try_collect::<Vec<String>>().await?);
            }
            phases.push(end(&b, s, Instant::now(), n));
            names = rolled.into_iter().chain(pending).collect();
        }

        let half = n / 2;
        let named: BTreeSet<String> = one_set::named_for_deletion(names.clone()).into_iter().collect();
        let others = names.iter().filter(|name| !named.contains(*name)).take((n - half) as usize - named.len().min((n - half) as usize));
        let victims: Vec<(String, bool)> =
            named.iter().map(|name| (name.clone(), true)).chain(others.map(|name| (name.clone(), false))).collect();
        let s = start(&b);
        let deletes = victims.into_iter().map(|(name, specified)| {
            let b = &b;
            async move {
                if specified {
                    b.label(&name, json!({keys::SPECIFIED_DELETE: "true"})).await?;
                }
                b.req(b.api.delete(&name, &DeleteParams::default())).await?;
                anyhow::Ok(())
            }
        });
        futures::stream::iter(deletes).buffer_unordered(concurrency).try_collect::<Vec<()>>().await?;
        let (_, at) = b
            .pods
            .wait_all("half the pods left", |all| {
                let left = all.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count();
                if all.len() == half as usize && left == half as usize {
                    Ok(())
                } else {
                    Err(format!("{} pods, {left} not terminating", all.len()))
                }
            })
            .await?;
        phases.push(end(&b, s, at, n - half));

        let Baseline { ns, pods, .. } = b;
        drop(pods);
        self.delete_namespace(ns).await?;
        Ok(phases)
    }
}
