//! The caches' watches: what each keeps of an object, when a change is passed on to the queue,
//! and the start-up check for streaming lists. Stream combinators over kube's watcher, no
//! decisions.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};

use super::owned_store::{self, Change, Held, OwnedStoreWriter};
use crate::pod_cache::compact::CompactPod;

/// The API of kind `K` in `namespace`, or in every namespace.
pub(super) fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Objects per page when a cache lists (or relists) pods, PVCs and revisions. Each page arrives
/// whole, managedFields included, before it is stripped, so the page size sets the restart's
/// memory peak above the steady state: client-go's 500 raised it well above, 100 hardly (figures:
/// e2e/bench/HISTORY.md). The cost is one list request per 100 objects instead of per 500.
pub(super) const LIST_PAGE_SIZE: u32 = 100;

/// How long the start-up check for streaming lists waits for the apiserver's first answer.
pub(super) const STREAMING_LIST_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the apiserver serves streaming lists (a watch with `sendInitialEvents`, KEP-3157;
/// on by default in Kubernetes 1.32 and from 1.34, off in 1.33, given an etcd with progress
/// notifications): a watch of pods with a label no pod has must end its initial events with the
/// bookmark that says so.
/// An apiserver without them rejects the watch or answers otherwise, and the caches list in
/// pages instead.
pub(super) async fn serves_streaming_lists(client: &Client, namespace: Option<&str>) -> bool {
    let pods = api::<Pod>(client, namespace);
    let params = kube::api::WatchParams::streaming_lists().labels("cloneset-operator.dev/streaming-list-probe");
    let answer = async {
        let stream = pods.watch(&params, "0").await?;
        futures::pin_mut!(stream);
        Ok::<_, kube::Error>(match stream.next().await.transpose()? {
            Some(kube::core::WatchEvent::Bookmark(b)) => b.metadata.annotations.get("k8s.io/initial-events-end").map(|v| v == "true"),
            // v1.36 over an etcd without progress notifications: "... the required storage
            // feature RequestWatchProgress is disabled".
            Some(kube::core::WatchEvent::Error(status)) => {
                tracing::info!(message = %status.message, "the apiserver does not serve streaming lists; caches list in pages");
                Some(false)
            }
            _ => None,
        })
    };
    match tokio::time::timeout(STREAMING_LIST_PROBE_TIMEOUT, answer).await {
        Ok(Ok(Some(served))) => served,
        Ok(Ok(None)) => {
            tracing::info!("the apiserver's answer to a streaming list was not its initial-events bookmark; caches list in pages");
            false
        }
        Ok(Err(e)) => {
            tracing::info!(error = %e, "the apiserver does not serve streaming lists; caches list in pages");
            false
        }
        Err(_) => {
            tracing::info!("no answer to a streaming list within {STREAMING_LIST_PROBE_TIMEOUT:?}; caches list in pages");
            false
        }
    }
}

/// Watches `api` with backoff, yielding the events of the objects `keep` accepts, stripped of
/// managedFields (which nothing reads) and of whatever else `strip` removes. An object `keep`
/// stops accepting is yielded as deleted. Watch errors are logged (the watcher retries).
pub(super) fn kept_events<K>(
    api: Api<K>,
    cfg: watcher::Config,
    strip: fn(&mut K),
    keep: fn(&K) -> bool,
) -> impl Stream<Item = Event<K>> + Send
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let modify = move |obj: &mut K| {
        without_managed_fields(obj);
        strip(obj);
    };
    kept(watcher::watcher(api, cfg).default_backoff().modify(modify), keep)
}

/// The events of the objects `keep` accepts; an object `keep` stops accepting is yielded as
/// deleted. Errors are logged (the watcher retries, after its backoff).
pub(super) fn kept<K: Send, E: std::fmt::Display + Send>(
    events: impl Stream<Item = Result<Event<K>, E>> + Send,
    keep: fn(&K) -> bool,
) -> impl Stream<Item = Event<K>> + Send {
    events.filter_map(move |ev| {
        std::future::ready(match ev {
            Ok(Event::InitApply(o)) if !keep(&o) => None,
            Ok(Event::Apply(o)) if !keep(&o) => Some(Event::Delete(o)),
            Ok(ev) => Some(ev),
            Err(e) => {
                tracing::warn!(error = %e, "watch error; retrying");
                None
            }
        })
    })
}

/// Drops an object's managedFields, leaving none rather than an empty list (kube's
/// `managed_fields_mut` inserts one): a cached object keeps nothing it need not.
pub fn without_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Runs a reflector: keeps `writer`'s cache current with [`kept_events`] and yields the objects
/// that changed.
pub(super) fn cache<K>(
    api: Api<K>,
    cfg: watcher::Config,
    writer: reflector::store::Writer<K>,
    strip: fn(&mut K),
    keep: fn(&K) -> bool,
) -> impl Stream<Item = Arc<K>> + Send
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    passed_on_once_stored(kept_events(api, cfg, strip, keep).map(Ok::<_, watcher::Error>).reflect(writer))
}

/// The objects of a reflector's `events`, each passed on once its store shows it (see
/// [`changed_once_stored`]).
pub(super) fn passed_on_once_stored<K>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
) -> impl Stream<Item = Arc<K>> + Send
where
    K: Send + Sync + 'static,
{
    events.scan(Vec::new(), |relisted, ev| std::future::ready(Some(futures::stream::iter(changed_once_stored(relisted, ev))))).flatten()
}

/// The objects of `event` to pass on once the reflector has stored it: an applied or deleted
/// one at once, a relist's (gathered in `relisted`) at its end, when the store swaps them in.
/// Passed on earlier, a relisted object would trigger a reconcile that reads the old store and,
/// finding nothing to do, is not run again.
pub(super) fn changed_once_stored<K>(relisted: &mut Vec<Arc<K>>, event: Result<Event<K>, watcher::Error>) -> Vec<Arc<K>> {
    match event {
        Ok(Event::Apply(o)) | Ok(Event::Delete(o)) => vec![Arc::new(o)],
        Ok(Event::Init) => {
            relisted.clear();
            Vec::new()
        }
        Ok(Event::InitApply(o)) => {
            relisted.push(Arc::new(o));
            Vec::new()
        }
        Ok(Event::InitDone) => std::mem::take(relisted),
        Err(_) => Vec::new(),
    }
}

/// Drops a `fraction` of the Apply and Delete events of `events` (fault injection for the chaos
/// tests: a lost watch event), chosen by a fixed-seed generator; each drop is logged.
pub(super) fn dropping<K: Resource + Send>(
    events: impl Stream<Item = Event<K>> + Send,
    fraction: f64,
) -> impl Stream<Item = Event<K>> + Send {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    events.filter(move |ev| {
        let keep = match ev {
            Event::Apply(obj) | Event::Delete(obj) if fraction > 0.0 => {
                // xorshift64: reproducible, and no crate for a test-only coin.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let drop = ((state >> 11) as f64 / (1u64 << 53) as f64) < fraction;
                if drop {
                    tracing::warn!(object = obj.meta().name.as_deref().unwrap_or_default(), "fault injection: dropped a watch event");
                }
                !drop
            }
            _ => true,
        };
        std::future::ready(keep)
    })
}

/// Keeps an owner-indexed cache current with [`kept_events`], holding each object as `hold`
/// makes it, and yields each changed object once it is applied.
pub(super) fn owned_cache<K, H>(
    api: Api<K>,
    cfg: watcher::Config,
    writer: OwnedStoreWriter<H>,
    keep: fn(&K) -> bool,
    hold: impl FnMut(K) -> H + Send + 'static,
    drop_fraction: f64,
) -> impl Stream<Item = Arc<H>> + Send
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    H: Held,
{
    applied(dropping(kept_events(api, cfg, |_| {}, keep), drop_fraction), writer, hold).map(|change| change.object)
}

/// Applies `events` to an owner-indexed cache, holding each object as `hold` makes it, and
/// yields each change once it is applied.
pub(super) fn applied<K: Resource, H: Held>(
    events: impl Stream<Item = Event<K>> + Send,
    mut writer: OwnedStoreWriter<H>,
    mut hold: impl FnMut(K) -> H + Send + 'static,
) -> impl Stream<Item = Change<H>> + Send {
    events.flat_map(move |ev| futures::stream::iter(writer.apply_as(ev, &mut hold)))
}

/// Whether a pod change can change what a reconcile of its CloneSet decides: all but an update
/// that changed only what no decision reads ([`CompactPod::reads_as`]: the resourceVersion,
/// annotations of other controllers and users). Kruise queues a reconcile for every pod update;
/// one that reads the pods as the last did writes nothing, and on a large idle cluster such
/// updates would be most of the reconciles. One is still queued when a write of ours `awaits`
/// the pod's new version (read-your-writes holds a reconcile back until the cache shows it).
pub(super) fn queues_a_reconcile(change: &Change<CompactPod>, awaits: impl FnOnce(&str) -> bool) -> bool {
    match &change.replaced {
        Some(older) if change.object.reads_as(older) => awaits(change.object.uid()),
        _ => true,
    }
}

/// Nodes are read for their labels only (topology spread): the status (images, conditions,
/// capacity) is dropped.
pub(super) fn strip_node(node: &mut Node) {
    node.status = None;
    node.spec = None;
}

/// Whether a CloneSet owns `obj` (as controller or not): pods and PVCs are cached by owner, as
/// Kruise lists them by owner UID, so a pod whose instance-id label was removed still counts.
pub(super) fn owned_by_a_cloneset<K: Held>(obj: &K) -> bool {
    owned_store::cloneset_owners(obj).next().is_some()
}

/// Everything (nodes, CloneSets, revisions by their label selector).
pub(super) fn everything<K>(_: &K) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use kube::ResourceExt as _;
    use kube::runtime::reflector::ObjectRef;

    use super::*;
    use crate::api::keys;
    use crate::controller::owned_store::owned_store;
    use crate::pod_cache::compact::Interner;

    /// Through the pod store as the pod watch feeds it: a new pod, a deletion and a relist
    /// queue a reconcile; an update queues one when it changed what a decision reads, or when a
    /// write of ours awaits its version, and only then.
    #[test]
    fn a_pod_update_queues_a_reconcile_only_when_a_decision_can_read_it_or_a_write_awaits_it() {
        let pod = |version: &str, annotations: serde_json::Value, labels: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": version,
                "labels": labels, "annotations": annotations}}))
            .unwrap()
        };
        let (_, mut writer) = owned_store::<CompactPod>();
        let mut interner = Interner::default();
        let mut apply = |ev: Event<Pod>| -> Vec<Change<CompactPod>> { writer.apply_as(ev, |p| CompactPod::new(p, &mut interner)) };
        let awaited = |uid: &str| uid == "u";
        let nothing_awaited = |_: &str| false;
        let queued = |changes: Vec<Change<CompactPod>>, awaits: &dyn Fn(&str) -> bool| -> Vec<bool> {
            changes.iter().map(|c| queues_a_reconcile(c, awaits)).collect()
        };
        let (a, l) = (serde_json::json!({"x": "1"}), serde_json::json!({"app": "web"}));
        assert_eq!(queued(apply(Event::Apply(pod("1", a.clone(), l.clone()))), &nothing_awaited), [true], "a new pod");
        let touched = serde_json::json!({"x": "2", "example.com/seen": "yes"});
        assert_eq!(queued(apply(Event::Apply(pod("2", touched.clone(), l.clone()))), &nothing_awaited), [false], "unread annotations");
        assert_eq!(queued(apply(Event::Apply(pod("3", touched.clone(), l.clone()))), &awaited), [true], "a write awaits it");
        let cost = serde_json::json!({"x": "2", "example.com/seen": "yes", keys::POD_DELETION_COST: "5"});
        assert_eq!(queued(apply(Event::Apply(pod("4", cost.clone(), l.clone()))), &nothing_awaited), [true], "a read annotation");
        let relabelled = serde_json::json!({"app": "web", "tier": "x"});
        assert_eq!(queued(apply(Event::Apply(pod("5", cost.clone(), relabelled.clone()))), &nothing_awaited), [true], "a label");
        assert_eq!(queued(apply(Event::Apply(pod("6", cost.clone(), relabelled.clone()))), &nothing_awaited), [false], "a version");
        apply(Event::Init);
        apply(Event::InitApply(pod("7", cost.clone(), relabelled.clone())));
        assert_eq!(queued(apply(Event::InitDone), &nothing_awaited), [true], "a relist");
        assert_eq!(queued(apply(Event::Delete(pod("8", cost, relabelled))), &nothing_awaited), [true], "a deletion");
    }

    /// A CloneSet changed while the operator relists (say the apiserver restarted) arrives in the
    /// relist; a reconcile it triggers must read the store with it, or it finds nothing to do and
    /// is not run again (seen in the soak: a scale-up made during a relist was never acted on).
    #[tokio::test]
    async fn a_relisted_object_is_passed_on_only_once_the_store_shows_it() {
        let (reader, writer) = reflector::store::<Node>();
        let node = |name: &str, version: &str| -> Node {
            serde_json::from_value(serde_json::json!({"metadata": {"name": name, "resourceVersion": version, "labels": {"v": version}}}))
                .unwrap()
        };
        let events = [
            Event::Init,
            Event::InitApply(node("a", "1")),
            Event::InitDone,
            Event::Init,
            Event::InitApply(node("a", "2")),
            Event::InitApply(node("b", "2")),
            Event::InitDone,
            Event::Apply(node("a", "3")),
            Event::Delete(node("b", "4")),
        ];
        let passed_on = passed_on_once_stored(futures::stream::iter(events.map(Ok)).reflect(writer));
        futures::pin_mut!(passed_on);
        let mut seen = Vec::new();
        while let Some(obj) = passed_on.next().await {
            let stored = reader.get(&ObjectRef::from_obj(obj.as_ref())).map(|s| s.labels()["v"].clone());
            seen.push((obj.name_any(), obj.labels()["v"].clone(), stored));
        }
        let at = |n: &str, v: &str, stored: Option<&str>| (n.to_string(), v.to_string(), stored.map(str::to_string));
        assert_eq!(
            seen,
            [at("a", "1", Some("1")), at("a", "2", Some("2")), at("b", "2", Some("2")), at("a", "3", Some("3")), at("b", "4", None)]
        );
    }
}
