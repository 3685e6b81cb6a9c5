//! The only layer that talks to the apiserver: caches, the work queue, and the reconcile loop
//! that observes, gates on expectations, asks `core` what to do, and does it.
//!
//! With leader election, every instance keeps its caches synced (and is ready once they are),
//! but only the leader queues CloneSets and runs workers. A leader that loses its Lease stops at
//! once (fail-stop: workers are aborted and `run` returns an error, so the process exits non-zero
//! and restarts as a standby), as controller-runtime does.

pub mod cached_revision;
pub mod cloneset_cache;
mod dropped_fields;
mod error;
mod execute;
pub mod owned_store;
pub mod pod_watch;
pub mod queue;
mod reconcile;
#[cfg(test)]
mod reconcile_requests;
pub mod recorder;
mod resize_support;
mod revisions;
mod watches;
mod writes;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self};
use kube::runtime::{WatchStreamExt as _, reflector::ObjectRef};
use kube::{Api, Client, Resource, ResourceExt as _};
use tracing::Instrument as _;

use crate::api::keys;
use crate::config::{ControllerConfig, InitialLists};
use crate::core::expectations::{ObjectKind, ResourceVersionExpectations, ScaleExpectations};
use crate::kruise_guard::{KruiseGuard, KruiseState};
use crate::leader::LeaderElector;
use crate::metrics::{Metrics, ReconcileResult};
use crate::pod_cache::compact::{CompactPod, Interner};
use crate::pod_cache::wire::WirePod;
use crate::server::Health;
use cloneset_cache::{CachedCloneSet, CompactCloneSet};
use owned_store::{Change, OwnedStore, owned_store};
use queue::WorkQueue;
pub use watches::without_managed_fields;
use watches::*;

/// The caches a reconcile reads. Every one has finished its first list before any reconcile.
#[derive(Clone)]
pub(crate) struct Stores {
    /// Decoded or not: one undecodable CloneSet must not fail the list of all of them.
    pub clonesets: Store<CachedCloneSet>,
    /// Indexed by owner: a reconcile reads its own pods and PVCs, not every cached one. Pods
    /// are held compact, and read compact by the reconcile (`pod_cache::compact::ReadPod`).
    pub pods: OwnedStore<CompactPod>,
    pub pvcs: OwnedStore<PersistentVolumeClaim>,
    /// By owner, and by namespace for those without a controller (to adopt).
    pub revisions: OwnedStore<cached_revision::CachedRevision>,
    pub nodes: Store<Node>,
}

impl Stores {
    /// The CloneSet `ns/name` if it is cached and decodes (the worker handles one that does not).
    pub(crate) fn cloneset(&self, ns: &str, name: &str) -> Option<Arc<CompactCloneSet>> {
        match cached(&self.clonesets, ns, name)?.as_ref() {
            CachedCloneSet::Decoded(cs) => Some(cs.clone()),
            CachedCloneSet::Undecodable(_) => None,
        }
    }
}

/// Everything a reconcile needs, passed explicitly (no globals).
pub(crate) struct Context {
    pub client: Client,
    pub config: ControllerConfig,
    pub stores: Stores,
    pub scale_expectations: Mutex<ScaleExpectations>,
    pub rv_expectations: Mutex<ResourceVersionExpectations>,
    /// Per CloneSet: its template's revision data, for the generation it was computed at.
    pub template_revisions: revisions::TemplateRevisionCache,
    /// Per CloneSet: the template fields it was last warned it drops.
    pub dropped_field_warnings: dropped_fields::DroppedFieldWarnings,
    pub queue: WorkQueue,
    pub metrics: Arc<Metrics>,
    /// The operator's events, with their correlation, spam filter and queue.
    pub events: recorder::Recorder,
    /// What the apiserver has said of in-place resizes.
    pub resize: resize_support::ResizeAnswers,
    /// Whether this instance leads (always, without leader election): only then are keys queued.
    leading: AtomicBool,
}

impl Context {
    /// A watch event of `obj`, already applied to its cache, observes its creation by CloneSet
    /// `owner` (its `owned_store::owner_key`).
    fn observe_creation<H: owned_store::Held>(&self, owner: &str, obj: &H, kind: ObjectKind) {
        self.scale_expectations.lock().unwrap_or_else(|e| e.into_inner()).observe(owner, kind, &obj.key().1);
    }

    /// Counts a scale-expectation timeout of CloneSet `key` (`cloneset_scale_expectation_leakage`).
    pub(crate) fn record_leak(&self, key: &str) {
        self.metrics.expectation_leaked(key);
    }

    /// Queues `key` if this instance leads; a standby only keeps its caches warm.
    fn enqueue(&self, key: &str) {
        if self.leading.load(Ordering::Acquire) {
            self.queue.add(key);
        }
    }

    /// Queues every cached CloneSet (on becoming leader, and every `--sync-period`).
    fn enqueue_all(&self) {
        for cs in self.stores.clonesets.state() {
            self.enqueue(&format!("{}/{}", cs.namespace().unwrap_or_default(), cs.name_any()));
        }
    }
}

/// What the process shell hands the controller besides the client and flags.
pub struct Runtime {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    /// `None`: leader election is off and this instance always leads.
    pub elector: Option<LeaderElector>,
    /// `None`: do not check for a running Kruise manager.
    pub guard: Option<KruiseGuard>,
}

/// Runs the controller until `shutdown` resolves (`Ok`), or until this instance loses its
/// leadership (`Err`: the caller must exit).
pub async fn run(client: Client, config: ControllerConfig, runtime: Runtime, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let Runtime { metrics, health, mut elector, mut guard } = runtime;
    let lease_name = elector.as_ref().map(|e| e.config().lease_name.clone());
    let lease_name = lease_name.as_deref();
    let ns = config.namespace.clone();
    let ns = ns.as_deref();
    let (cs_reader, cs_writer) = reflector::store::<CachedCloneSet>();
    let (pod_reader, pod_writer) = owned_store::<CompactPod>();
    let (pvc_reader, pvc_writer) = owned_store::<PersistentVolumeClaim>();
    let (rev_reader, rev_writer) = owned_store::<cached_revision::CachedRevision>();
    let (node_reader, node_writer) = reflector::store::<Node>();
    let streaming = match config.initial_lists {
        InitialLists::Auto => serves_streaming_lists(&client, ns).await,
        InitialLists::Streaming => true,
        InitialLists::Paged => false,
    };
    tracing::info!(streaming, "caches list with {}", if streaming { "streaming lists" } else { "paged lists" });
    let lists = if streaming { watcher::Config::default().streaming_lists() } else { watcher::Config::default() };
    // Only what a CloneSet can own: pods and PVCs with a CloneSet owner reference (others are
    // read a page (or an event) at a time and never cached), revisions with the hash label.
    let paged = lists.clone().page_size(LIST_PAGE_SIZE);
    let cs_events = cache(api::<CachedCloneSet>(&client, ns), lists.clone(), cs_writer, |_| {}, everything);
    let mut interner = Interner::default();
    let compact = move |pod| CompactPod::from_wire(pod, &mut interner);
    let drop_pods = config.drop_pod_events;
    // Pods through their own watcher, which decodes protobuf without JSON in between.
    let pod_watch = pod_watch::PodWatchConfig { namespace: config.namespace.clone(), streaming, page_size: LIST_PAGE_SIZE };
    let pod_events = pod_watch::pod_events(client.clone(), pod_watch).default_backoff();
    let pod_events = applied(dropping(kept(pod_events, owned_by_a_cloneset::<WirePod>), drop_pods), pod_writer, compact);
    let pvc_events = owned_cache(api::<PersistentVolumeClaim>(&client, ns), paged.clone(), pvc_writer, owned_by_a_cloneset, |p| p, 0.0);
    let revisions = paged.labels(keys::CONTROLLER_REVISION_HASH_LABEL);
    let rev_events =
        owned_cache(api::<ControllerRevision>(&client, ns), revisions, rev_writer, everything, cached_revision::CachedRevision::new, 0.0);
    let node_events = cache(Api::<Node>::all(client.clone()), lists, node_writer, strip_node, everything);

    let resize = resize_support::ResizeAnswers::discover(&client, config.gates.in_place_workload_vertical_scaling)
        .await
        .map_err(|e| anyhow::anyhow!("asking the apiserver's discovery whether it serves pods/resize: {e}"))?;
    metrics.set_max_concurrent_reconciles(config.workers.max(1));
    metrics.set_leader(false, lease_name);
    let retry_limits = config.retry;
    let ctx = Arc::new(Context {
        client: client.clone(),
        stores: Stores { clonesets: cs_reader, pods: pod_reader, pvcs: pvc_reader, revisions: rev_reader, nodes: node_reader },
        config,
        scale_expectations: Mutex::new(ScaleExpectations::default()),
        rv_expectations: Mutex::new(ResourceVersionExpectations::default()),
        template_revisions: Default::default(),
        dropped_field_warnings: Default::default(),
        queue: WorkQueue::with_limits(retry_limits, metrics.queue()),
        metrics: metrics.clone(),
        events: recorder::Recorder::new(client.clone()),
        resize,
        leading: AtomicBool::new(elector.is_none()),
    });

    let mut tasks =
        feed_queue(&ctx, Events { clonesets: cs_events, pods: pod_events, pvcs: pvc_events, revisions: rev_events, nodes: node_events });
    let mut shutdown = std::pin::pin!(shutdown);
    let ready = caches_synced(&ctx, &health, shutdown.as_mut()).await?
        && elected(guard.as_mut(), elector.as_mut(), &health, &metrics, shutdown.as_mut()).await;
    if !ready {
        tasks.abort_all();
        return Ok(());
    }
    lead(&ctx, tasks, guard.as_mut(), elector.as_mut(), &metrics, lease_name, shutdown).await
}

/// The caches' event streams, as the reflectors yield them once stored.
struct Events<C, P, V, R, N> {
    clonesets: C,
    pods: P,
    pvcs: V,
    revisions: R,
    nodes: N,
}

/// Runs the caches' streams: each change queues the CloneSet it concerns (a pod update no
/// decision reads queues nothing), and creations are observed for the scale expectations first.
/// Also publishes the queue's unfinished work. The tasks end when the returned set is aborted.
fn feed_queue<C, P, V, R, N>(ctx: &Arc<Context>, events: Events<C, P, V, R, N>) -> tokio::task::JoinSet<()>
where
    C: Stream<Item = Arc<CachedCloneSet>> + Send + 'static,
    P: Stream<Item = Change<CompactPod>> + Send + 'static,
    V: Stream<Item = Arc<PersistentVolumeClaim>> + Send + 'static,
    R: Stream<Item = Arc<cached_revision::CachedRevision>> + Send + 'static,
    N: Stream<Item = Arc<Node>> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    let c = ctx.clone();
    tasks.spawn(events.clonesets.for_each(move |cs| {
        c.enqueue(&format!("{}/{}", cs.namespace().unwrap_or_default(), cs.name_any()));
        std::future::ready(())
    }));
    let c = ctx.clone();
    tasks.spawn(events.pods.for_each(move |change| {
        let awaits = |uid: &str| c.rv_expectations.lock().unwrap_or_else(|e| e.into_inner()).awaits(uid);
        if !queues_a_reconcile(&change, awaits) {
            c.metrics.pod_update_unread();
        } else if let Some(key) = owned_store::owner_key(change.object.as_ref()) {
            // A new pod's event (or any of a pod's, a deletion and a relist included) observes
            // its creation, before the reconcile that checks it is queued.
            if change.replaced.is_none() {
                c.observe_creation(&key, change.object.as_ref(), ObjectKind::Pod);
            }
            c.enqueue(&key);
        }
        std::future::ready(())
    }));
    let c = ctx.clone();
    let pvc_owners = events.pvcs.filter_map(move |pvc| {
        let key = owned_store::owner_key(pvc.as_ref());
        if let Some(key) = &key {
            c.observe_creation(key, pvc.as_ref(), ObjectKind::Pvc);
        }
        std::future::ready(key)
    });
    for stream in [pvc_owners.boxed(), events.revisions.filter_map(|r| std::future::ready(owned_store::owner_key(r.as_ref()))).boxed()] {
        let c = ctx.clone();
        tasks.spawn(stream.for_each(move |key| {
            c.enqueue(&key);
            std::future::ready(())
        }));
    }
    tasks.spawn(events.nodes.for_each(|_| std::future::ready(())));
    let c = ctx.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tick.tick().await;
            c.queue.publish_unfinished_work();
        }
    });

    tasks
}

/// Waits until every cache has finished its first list; `false` when shutdown came first. Never
/// act on a cache that has not: an empty pod cache read as truth would mean mass creation.
async fn caches_synced(ctx: &Context, health: &Health, shutdown: Pin<&mut impl Future<Output = ()>>) -> anyhow::Result<bool> {
    let stores = ctx.stores.clone();
    let synced = async {
        stores.clonesets.wait_until_ready().await?;
        stores.pods.wait_until_ready().await;
        stores.pvcs.wait_until_ready().await;
        stores.revisions.wait_until_ready().await;
        stores.nodes.wait_until_ready().await
    };
    tokio::select! {
        res = tokio::time::timeout(ctx.config.cache_sync_timeout, synced) => match res {
            Ok(Ok(())) => {
                tracing::info!("caches synced");
                health.set_caches_synced(true);
                Ok(true)
            }
            Ok(Err(e)) => anyhow::bail!("caches failed to sync: {e}"),
            Err(_) => anyhow::bail!("caches did not sync within --controller-cache-sync-timeout ({:?})", ctx.config.cache_sync_timeout),
        },
        _ = shutdown => {
            tracing::info!("shutdown requested before the caches synced");
            Ok(false)
        }
    }
}

/// A standby waits here with warm caches until Kruise's manager is not running and this instance
/// is elected; a Kruise manager that appears during the election is waited out again. `false`
/// when shutdown came first.
async fn elected(
    mut guard: Option<&mut KruiseGuard>,
    mut elector: Option<&mut LeaderElector>,
    health: &Health,
    metrics: &Metrics,
    mut shutdown: Pin<&mut impl Future<Output = ()>>,
) -> bool {
    loop {
        if let Some(guard) = guard.as_deref_mut() {
            tokio::select! {
                () = stand_by_while_kruise_runs(guard, health, metrics) => {}
                _ = shutdown.as_mut() => {
                    tracing::info!("shutdown requested while standing by for Kruise's manager");
                    return false;
                }
            }
        }
        if let Some(elector) = elector.as_deref_mut() {
            tracing::info!(lease = %format!("{}/{}", elector.config().namespace, elector.config().lease_name), identity = %elector.config().identity, "waiting to be elected leader");
            tokio::select! {
                () = elector.acquire() => {}
                _ = shutdown.as_mut() => {
                    tracing::info!("shutdown requested while standing by");
                    // A take-over that raced with the signal must not keep the Lease until expiry.
                    elector.release().await;
                    return false;
                }
            }
        }
        let Some(guard) = guard.as_deref_mut() else { return true };
        if !matches!(guard.check().await, Ok(KruiseState::Live { .. })) {
            return true;
        }
        if let Some(elector) = elector.as_deref_mut() {
            elector.release().await;
        }
    }
}

/// Leads: reconciles from the full cache with the workers until shutdown (`Ok`), or until the
/// Lease is lost or Kruise's manager appears (an error: fail-stop).
async fn lead(
    ctx: &Arc<Context>,
    mut tasks: tokio::task::JoinSet<()>,
    mut guard: Option<&mut KruiseGuard>,
    mut elector: Option<&mut LeaderElector>,
    metrics: &Metrics,
    lease_name: Option<&str>,
    shutdown: Pin<&mut impl Future<Output = ()>>,
) -> anyhow::Result<()> {
    ctx.leading.store(true, Ordering::Release);
    metrics.set_leader(true, lease_name);
    // Everything a standby saw was not queued: start from the full cache.
    ctx.enqueue_all();
    if let Some(period) = ctx.config.sync_period.filter(|p| !p.is_zero()) {
        let c = ctx.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                tick.tick().await;
                tracing::debug!("periodic resync (--sync-period): queueing every CloneSet");
                c.enqueue_all();
            }
        });
    }

    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..ctx.config.workers.max(1) {
        let c = ctx.clone();
        workers.spawn(async move { worker(c).await });
    }
    let kruise_appeared = async {
        match guard.as_deref_mut() {
            Some(guard) => until_kruise_runs(guard).await,
            None => std::future::pending().await,
        }
    };
    let lost = match elector.as_deref_mut() {
        Some(elector) => tokio::select! {
            () = shutdown => None,
            lost = elector.hold() => Some(format!("lost leadership: {lost}")),
            why = kruise_appeared => Some(why),
        },
        None => tokio::select! {
            () = shutdown => None,
            why = kruise_appeared => Some(why),
        },
    };
    ctx.leading.store(false, Ordering::Release);
    if let Some(lost) = lost {
        // Fail-stop: nothing more may be written once another instance can be elected.
        tracing::error!(error = %lost, "stopping at once");
        metrics.set_leader(false, lease_name);
        ctx.queue.shut_down();
        workers.abort_all();
        while workers.join_next().await.is_some() {}
        tasks.abort_all();
        // A Lease we still hold is handed on at once rather than at expiry.
        if let Some(elector) = elector.as_deref_mut() {
            elector.release().await;
        }
        anyhow::bail!("{lost}");
    }
    tracing::info!("stopping workers");
    ctx.queue.shut_down();
    while workers.join_next().await.is_some() {}
    tasks.abort_all();
    metrics.set_leader(false, lease_name);
    if let Some(elector) = elector {
        elector.release().await;
    }
    Ok(())
}

/// Returns once Kruise's manager Lease is not live, checking every retry period; meanwhile
/// readiness, the standby metric and the log say why nothing is reconciled.
async fn stand_by_while_kruise_runs(guard: &mut KruiseGuard, health: &Health, metrics: &Metrics) {
    let mut announced = None;
    loop {
        match guard.check().await {
            Ok(KruiseState::Live { holder }) => {
                if announced.as_ref() != Some(&holder) {
                    let why = format!(
                        "standing by: Kruise's manager ({holder}) holds and renews the Lease {}; its CloneSet controller is running",
                        guard.lease_ref()
                    );
                    tracing::warn!(lease = %guard.lease_ref(), %holder, "{why}; not reconciling until it stops");
                    health.set_standing_by(Some(why));
                    metrics.set_standing_by_for_kruise(true);
                    announced = Some(holder);
                }
            }
            Ok(state) => {
                if announced.is_some() {
                    tracing::info!(lease = %guard.lease_ref(), ?state, "Kruise's manager Lease lapsed: taking over");
                }
                health.set_standing_by(None);
                metrics.set_standing_by_for_kruise(false);
                return;
            }
            // Unknown: keep the current state and look again.
            Err(e) => tracing::warn!(lease = %guard.lease_ref(), error = %e, "could not read Kruise's manager Lease; retrying"),
        }
        tokio::time::sleep(guard.retry_period).await;
    }
}

/// Returns (why) once Kruise's manager Lease becomes live while this instance reconciles.
async fn until_kruise_runs(guard: &mut KruiseGuard) -> String {
    loop {
        tokio::time::sleep(guard.retry_period).await;
        if let Ok(KruiseState::Live { holder }) = guard.check().await {
            return format!(
                "Kruise's manager ({holder}) started renewing the Lease {}: two CloneSet controllers must not run at once",
                guard.lease_ref()
            );
        }
    }
}

/// Keeps `controller_runtime_active_workers` right even if a reconcile is aborted.
struct ActiveWorker<'a>(&'a Metrics);

impl<'a> ActiveWorker<'a> {
    fn start(metrics: &'a Metrics) -> Self {
        metrics.active_workers(1);
        Self(metrics)
    }
}

impl Drop for ActiveWorker<'_> {
    fn drop(&mut self) {
        self.0.active_workers(-1);
    }
}

async fn worker(ctx: Arc<Context>) {
    while let Some(item) = ctx.queue.get().await {
        let key = item.key;
        let active = ActiveWorker::start(&ctx.metrics);
        let started = Instant::now();
        // Every log line of this reconcile (ours, kube's, the event recorder's) carries the key.
        let outcome = async {
            match cloneset_cache::before_reconcile(&ctx, &key).await {
                Some(handled) => handled,
                None => reconcile::reconcile(&ctx, &key).await,
            }
        }
        .instrument(tracing::info_span!("reconcile", cloneset = %key))
        .await;
        let result = match &outcome {
            Ok(None) => ReconcileResult::Success,
            Ok(Some(after)) if after.is_zero() => ReconcileResult::Requeue,
            Ok(Some(_)) => ReconcileResult::RequeueAfter,
            Err(_) => ReconcileResult::Error,
        };
        ctx.metrics.reconciled(result, started.elapsed());
        drop(active);
        match outcome {
            Ok(requeue) => {
                ctx.queue.forget(&key);
                if let Some(after) = requeue {
                    ctx.queue.add_after(&key, after);
                }
            }
            Err(e) => {
                if e.is_conflict() {
                    tracing::debug!(cloneset = %key, error = %e, "write conflict; retrying");
                } else {
                    tracing::warn!(cloneset = %key, error = %e, "reconcile failed; retrying with backoff");
                }
                ctx.queue.add_rate_limited(&key);
            }
        }
        ctx.queue.done(&key);
    }
}

/// A cached object by namespace and name.
fn cached<K>(store: &Store<K>, ns: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    store.get(&ObjectRef::new(name).within(ns))
}
