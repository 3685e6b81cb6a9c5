//! The cache of what CloneSets own (pods, PVCs, revisions), indexed by owner UID, so that one
//! reconcile reads its own objects instead of scanning every cached one: its cost follows the
//! size of the CloneSet, not of the cluster. Objects with no controller (revisions a CloneSet may
//! adopt) are indexed by namespace.
//!
//! kube's reflector store has no secondary index, and an index kept beside it would change under
//! another lock: a reader could find an object in one and not the other, count a pod short and
//! create its replacement twice. Here the objects and the index change together, under one lock,
//! in the watcher's order; a relist is built aside and swapped in whole when it completes, as
//! kube's store does. The event stream passes an object on only after it is applied, so a scale
//! expectation satisfied by an event is satisfied in the index too. A relist's objects are
//! passed on when it is swapped in, with those it no longer has: a reconcile they trigger sees
//! them, where one triggered during the relist would read the old store and not run again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::watcher::Event;

use crate::pod_cache::compact::CompactPod;

/// An object's namespace and name.
pub(crate) type Key = (Arc<str>, Arc<str>);

/// One owner reference, as the index reads it.
pub struct OwnerView<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub controller: bool,
}

impl OwnerView<'_> {
    /// Whether the owner is a CloneSet (`apps.kruise.io`, any version).
    pub(crate) fn is_cloneset(&self) -> bool {
        self.kind == "CloneSet" && self.api_version.split('/').next() == Some("apps.kruise.io")
    }
}

/// What an owned store holds: an API object as decoded, or a compact form of one
/// ([`crate::pod_cache::compact::CompactPod`]); the index needs its key and owners.
pub trait Held: Send + Sync + 'static {
    fn key(&self) -> Key;
    fn owners(&self) -> impl Iterator<Item = OwnerView<'_>>;
    fn resource_version(&self) -> Option<&str>;
}

impl Held for CompactPod {
    fn key(&self) -> Key {
        CompactPod::key(self)
    }

    fn owners(&self) -> impl Iterator<Item = OwnerView<'_>> {
        self.owner_refs().map(|(api_version, kind, name, uid, controller)| OwnerView { api_version, kind, name, uid, controller })
    }

    fn resource_version(&self) -> Option<&str> {
        self.stored_resource_version()
    }
}

impl<K: Resource + Send + Sync + 'static> Held for K {
    fn key(&self) -> Key {
        let meta = self.meta();
        (Arc::from(meta.namespace.as_deref().unwrap_or_default()), Arc::from(meta.name.as_deref().unwrap_or_default()))
    }

    fn owners(&self) -> impl Iterator<Item = OwnerView<'_>> {
        self.meta().owner_references.iter().flatten().map(|o| OwnerView {
            api_version: &o.api_version,
            kind: &o.kind,
            name: &o.name,
            uid: &o.uid,
            controller: o.controller == Some(true),
        })
    }

    fn resource_version(&self) -> Option<&str> {
        self.meta().resource_version.as_deref()
    }
}

/// The UIDs of the CloneSets that own `obj`, as controller or not (a reconcile counts both, as
/// Kruise lists by owner UID).
pub(crate) fn cloneset_owners<H: Held>(obj: &H) -> impl Iterator<Item = &str> {
    obj.owners().filter(OwnerView::is_cloneset).map(|o| o.uid)
}

fn has_controller<H: Held>(obj: &H) -> bool {
    obj.owners().any(|o| o.controller)
}

/// The CloneSet that controls `obj`, as a queue key.
pub(crate) fn owner_key<H: Held>(obj: &H) -> Option<String> {
    let owner = obj.owners().find(|o| o.controller)?;
    owner.is_cloneset().then(|| format!("{}/{}", obj.key().0, owner.name))
}

/// Hashed with foldhash (as the interner is): every pod event looks its key up here.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The objects by key; the same objects by CloneSet owner UID, and by namespace for those
/// without a controller. The index entries hold the objects themselves, not their keys: a
/// reconcile reads its CloneSet's 40 pods without 40 lookups in `objects`.
struct Indexed<K> {
    objects: Map<Key, Arc<K>>,
    by_owner: Map<String, Entries<K>>,
    orphans: Map<String, Entries<K>>,
}

/// One index entry's objects, in namespace/name order.
type Entries<K> = BTreeMap<Key, Arc<K>>;

impl<K> Default for Indexed<K> {
    fn default() -> Self {
        Self { objects: Map::default(), by_owner: Map::default(), orphans: Map::default() }
    }
}

/// Puts `obj` under `index`'s entry `at`, replacing an earlier version of it.
fn add<K>(index: &mut Map<String, Entries<K>>, at: &str, key: &Key, obj: &Arc<K>) {
    match index.get_mut(at) {
        Some(entries) => {
            entries.insert(key.clone(), obj.clone());
        }
        None => {
            index.insert(at.to_string(), BTreeMap::from([(key.clone(), obj.clone())]));
        }
    }
}

/// Whether `a` and `b` are indexed under the same entries: the same CloneSet owners, and both
/// with a controller or both without.
fn indexed_alike<H: Held>(a: &H, b: &H) -> bool {
    cloneset_owners(a).eq(cloneset_owners(b)) && has_controller(a) == has_controller(b)
}

/// Removes `key` from `index`'s entry `at`, and the entry once it is empty.
fn drop_from<K>(index: &mut Map<String, Entries<K>>, at: &str, key: &Key) {
    if let Some(entries) = index.get_mut(at) {
        entries.remove(key);
        if entries.is_empty() {
            index.remove(at);
        }
    }
}

impl<K: Held> Indexed<K> {
    /// Stores `obj`, returning the version it replaced.
    fn insert(&mut self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = obj.key();
        // Unindex the old version before indexing the new: its owners may have changed. Most
        // changes (status, labels, annotations) leave them as they were, and the new version
        // only takes the old one's place in its entries.
        let old = self.objects.insert(key.clone(), obj.clone());
        if let Some(old) = &old
            && !indexed_alike(old.as_ref(), obj.as_ref())
        {
            self.unindex(&key, old);
        }
        for uid in cloneset_owners(obj.as_ref()) {
            add(&mut self.by_owner, uid, &key, &obj);
        }
        if !has_controller(obj.as_ref()) {
            add(&mut self.orphans, &key.0, &key, &obj);
        }
        old
    }

    fn remove(&mut self, key: &Key) {
        if let Some(old) = self.objects.remove(key) {
            self.unindex(key, &old);
        }
    }

    fn unindex(&mut self, key: &Key, old: &K) {
        for uid in cloneset_owners(old) {
            drop_from(&mut self.by_owner, uid, key);
        }
        if !has_controller(old) {
            drop_from(&mut self.orphans, &key.0, key);
        }
    }
}

struct Shared<K> {
    state: RwLock<Indexed<K>>,
    /// True once the first list has been applied.
    ready: tokio::sync::watch::Sender<bool>,
}

/// The read side, shared by every reconcile.
pub struct OwnedStore<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for OwnedStore<K> {
    fn clone(&self) -> Self {
        Self { shared: self.shared.clone() }
    }
}

/// An object the store now shows (or, deleted, no longer shows), to pass on.
pub struct Change<K> {
    pub object: Arc<K>,
    /// The version an update replaced, when the store held one: what the update changed is
    /// `object` against it. `None` for a new object, a deletion and a relist.
    pub replaced: Option<Arc<K>>,
}

impl<K> Change<K> {
    fn whole(object: Arc<K>) -> Self {
        Self { object, replaced: None }
    }
}

/// The write side: applies the watcher's events in order (one task owns it).
pub struct OwnedStoreWriter<K> {
    shared: Arc<Shared<K>>,
    /// The relist in progress, swapped in at its `InitDone`.
    relist: Option<Indexed<K>>,
}

/// An empty store and its writer.
pub fn owned_store<K>() -> (OwnedStore<K>, OwnedStoreWriter<K>) {
    let shared = Arc::new(Shared { state: RwLock::new(Indexed::default()), ready: tokio::sync::watch::Sender::new(false) });
    (OwnedStore { shared: shared.clone() }, OwnedStoreWriter { shared, relist: None })
}

impl<K: Held> OwnedStore<K> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Indexed<K>> {
        // A panic elsewhere while the lock was held leaves a consistent state: every change is
        // made whole before the guard is dropped.
        self.shared.state.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.read().objects.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    /// The objects a CloneSet (by UID) owns, as controller or not, in namespace/name order.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<K>> {
        let state = self.read();
        state.by_owner.get(uid).map_or_else(Vec::new, |e| e.values().cloned().collect())
    }

    /// The objects in `namespace` that no controller owns, in name order.
    pub(crate) fn orphans_in(&self, namespace: &str) -> Vec<Arc<K>> {
        let state = self.read();
        state.orphans.get(namespace).map_or_else(Vec::new, |e| e.values().cloned().collect())
    }

    /// Returns once the first list has been applied.
    pub(crate) async fn wait_until_ready(&self) {
        let mut ready = self.shared.ready.subscribe();
        // The sender lives as long as this store, so the wait ends only when ready.
        let _ = ready.wait_for(|r| *r).await;
    }
}

impl<K: Held> OwnedStoreWriter<K> {
    /// Applies one watcher event of objects held as is.
    #[cfg(test)]
    pub(crate) fn apply(&mut self, event: Event<K>) -> Vec<Arc<K>>
    where
        K: Resource,
    {
        self.apply_as(event, |obj| obj).into_iter().map(|c| c.object).collect()
    }

    /// Applies one watcher event, holding its object as `hold` makes it, and returns the changes
    /// to pass on, each already reflected in store and index: the event's own, or at the end of
    /// a relist everything it listed and every object it dropped (deleted while the watch was
    /// away). Nothing during a relist: the store shows the old state until it completes.
    ///
    /// A relisted object the store already holds at the same resource version is kept as it is
    /// rather than built again, so a relist does not hold a second copy of what did not change.
    pub fn apply_as<W: Resource>(&mut self, event: Event<W>, mut hold: impl FnMut(W) -> K) -> Vec<Change<K>> {
        match event {
            Event::Apply(obj) => {
                let obj = Arc::new(hold(obj));
                let replaced = self.write().insert(obj.clone());
                vec![Change { object: obj, replaced }]
            }
            Event::Delete(obj) => {
                let obj = Arc::new(hold(obj));
                self.write().remove(&obj.key());
                vec![Change::whole(obj)]
            }
            Event::Init => {
                self.relist = Some(Indexed::default());
                Vec::new()
            }
            Event::InitApply(obj) => {
                let obj = self.stored_unchanged(&obj).unwrap_or_else(|| Arc::new(hold(obj)));
                self.relist.get_or_insert_with(Indexed::default).insert(obj);
                Vec::new()
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let mut state = self.write();
                let gone = state.objects.iter().filter(|(key, _)| !listed.objects.contains_key(*key)).map(|(_, obj)| obj.clone());
                let changed: Vec<Change<K>> = listed.objects.values().cloned().chain(gone).map(Change::whole).collect();
                *state = listed;
                drop(state);
                self.shared.ready.send_replace(true);
                changed
            }
        }
    }

    /// The stored object `listed` is a copy of: same namespace, name and resource version (which
    /// the apiserver changes with every write).
    fn stored_unchanged<W: Resource>(&self, listed: &W) -> Option<Arc<K>> {
        let meta = listed.meta();
        let version = meta.resource_version.as_deref()?;
        let key: Key = (Arc::from(meta.namespace.as_deref().unwrap_or_default()), Arc::from(meta.name.as_deref()?));
        let state = self.shared.state.read().unwrap_or_else(|e| e.into_inner());
        state.objects.get(&key).filter(|stored| stored.resource_version() == Some(version)).cloned()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Indexed<K>> {
        self.shared.state.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use proptest::prelude::*;

    /// A pod owned by CloneSets `owners`; the first owner, if any, is its controller.
    fn pod(name: &str, owners: &[&str]) -> Pod {
        let refs: Vec<_> = owners
            .iter()
            .enumerate()
            .map(|(i, uid)| serde_json::json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "cs", "uid": uid, "controller": i == 0}))
            .collect();
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "namespace": "ns", "ownerReferences": refs}})).unwrap()
    }

    fn names(pods: Vec<Arc<Pod>>) -> Vec<String> {
        pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
    }

    fn listed(writer: &mut OwnedStoreWriter<Pod>, pods: &[Pod]) {
        writer.apply(Event::Init);
        for p in pods {
            writer.apply(Event::InitApply(p.clone()));
        }
        writer.apply(Event::InitDone);
    }

    #[test]
    fn an_owner_change_moves_the_object_between_owners_and_a_delete_unindexes_it() {
        let (store, mut writer) = owned_store::<Pod>();
        listed(&mut writer, &[pod("a", &["u1"]), pod("b", &["u1"])]);
        assert_eq!(names(store.owned_by("u1")), ["a", "b"]);
        writer.apply(Event::Apply(pod("a", &["u2"])));
        assert_eq!((names(store.owned_by("u1")), names(store.owned_by("u2"))), (vec!["b".to_string()], vec!["a".to_string()]));
        writer.apply(Event::Delete(pod("b", &["u1"])));
        assert!(store.owned_by("u1").is_empty() && store.get("ns", "b").is_none());
        assert_eq!(store.read().objects.len(), 1);
        // Released by its controller: an orphan of its namespace, until adopted again.
        writer.apply(Event::Apply(pod("a", &[])));
        assert_eq!((names(store.orphans_in("ns")), store.owned_by("u2").len()), (vec!["a".to_string()], 0));
        writer.apply(Event::Apply(pod("a", &["u1"])));
        assert!(store.orphans_in("ns").is_empty());
    }

    /// A relist (after a watch expired, or the apiserver restarted) may miss deletes and owner
    /// changes the watch never delivered: what it lists replaces store and index whole, and only
    /// when it completes; until then readers see the state before it.
    #[test]
    fn a_relist_replaces_store_and_index_at_once_when_it_completes() {
        let (store, mut writer) = owned_store::<Pod>();
        listed(&mut writer, &[pod("a", &["u1"]), pod("b", &["u1"])]);
        assert!(writer.apply(Event::Init).is_empty());
        assert!(writer.apply(Event::InitApply(pod("a", &["u2"]))).is_empty(), "not passed on before the store shows it");
        assert_eq!(names(store.owned_by("u1")), ["a", "b"], "the relist is not seen half done");
        assert!(writer.apply(Event::InitApply(pod("c", &["u1"]))).is_empty());
        let passed_on = writer.apply(Event::InitDone);
        assert_eq!((names(store.owned_by("u1")), names(store.owned_by("u2"))), (vec!["c".to_string()], vec!["a".to_string()]));
        assert!(store.get("ns", "b").is_none(), "deleted while the watch was down");
        // Once swapped in, everything listed and everything dropped is passed on, so the owners of
        // all of them (u1 for b and c, u2 for a) reconcile against the new state.
        let mut passed_on: Vec<(String, Vec<String>)> =
            passed_on.iter().map(|p| (p.key().1.to_string(), cloneset_owners(p.as_ref()).map(str::to_string).collect())).collect();
        passed_on.sort();
        assert_eq!(passed_on, [("a".into(), vec!["u2".into()]), ("b".into(), vec!["u1".into()]), ("c".into(), vec!["u1".into()])]);
    }

    /// The index holds the objects themselves: a change that keeps the owners must replace the
    /// old version there too, or a reconcile would decide on a pod as it was before the change.
    #[test]
    fn a_reconcile_reads_the_newest_version_of_a_pod_whose_owners_did_not_change() {
        let (store, mut writer) = owned_store::<Pod>();
        listed(&mut writer, &[at_version(pod("a", &["u1"]), "1"), pod("b", &[])]);
        writer.apply(Event::Apply(at_version(pod("a", &["u1"]), "2")));
        writer.apply(Event::Apply(at_version(pod("b", &[]), "3")));
        let versions = |pods: Vec<Arc<Pod>>| pods.iter().map(|p| p.metadata.resource_version.clone()).collect::<Vec<_>>();
        assert_eq!(versions(store.owned_by("u1")), [Some("2".to_string())]);
        assert_eq!(versions(store.orphans_in("ns")), [Some("3".to_string())]);
    }

    fn at_version(mut pod: Pod, version: &str) -> Pod {
        pod.metadata.resource_version = Some(version.into());
        pod
    }

    #[test]
    fn a_relist_keeps_what_did_not_change_and_builds_only_what_did() {
        let (store, mut writer) = owned_store::<Pod>();
        listed(&mut writer, &[at_version(pod("a", &["u1"]), "10"), at_version(pod("b", &["u1"]), "11"), pod("c", &["u1"])]);
        let before = |name: &str| store.get("ns", name).unwrap();
        let (a, b, c) = (before("a"), before("b"), before("c"));
        let mut built = Vec::new();
        writer.apply_as(Event::Init, |p: Pod| p);
        for p in [at_version(pod("a", &["u1"]), "10"), at_version(pod("b", &["u2"]), "12"), pod("c", &["u1"])] {
            writer.apply_as(Event::InitApply(p), |p: Pod| {
                built.push(p.metadata.name.clone().unwrap());
                p
            });
        }
        let passed_on = writer.apply_as(Event::InitDone, |p: Pod| p);
        assert_eq!(built, ["b", "c"], "only the changed pod and the one without a version are built again");
        assert!(Arc::ptr_eq(&store.get("ns", "a").unwrap(), &a), "the unchanged pod is the one held before");
        assert!(!Arc::ptr_eq(&store.get("ns", "b").unwrap(), &b) && !Arc::ptr_eq(&store.get("ns", "c").unwrap(), &c));
        assert_eq!(
            (names(store.owned_by("u1")), names(store.owned_by("u2"))),
            (vec!["a".to_string(), "c".to_string()], vec!["b".to_string()])
        );
        // Kept or not, every listed object is passed on at the end of the relist.
        assert_eq!(passed_on.len(), 3);
    }

    #[tokio::test]
    async fn ready_only_after_the_first_list() {
        let (store, mut writer) = owned_store::<Pod>();
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(pod("a", &["u1"])));
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), store.wait_until_ready()).await;
        assert!(waiting.is_err(), "ready before the list completed");
        writer.apply(Event::InitDone);
        store.wait_until_ready().await;
    }

    #[derive(Clone, Debug)]
    enum Step {
        Apply(u8, Vec<u8>),
        Delete(u8),
        Relist(Vec<(u8, Vec<u8>)>),
    }

    fn step() -> impl Strategy<Value = Step> {
        let owners = proptest::collection::vec(0u8..4, 0..3);
        prop_oneof![
            4 => (0u8..8, owners.clone()).prop_map(|(n, o)| Step::Apply(n, o)),
            2 => (0u8..8).prop_map(Step::Delete),
            1 => proptest::collection::vec((0u8..8, owners), 0..8).prop_map(Step::Relist),
        ]
    }

    proptest! {
        /// Whatever the events (applies, owner changes, releases, deletes, relists), the indexes
        /// answer exactly what a scan of every cached object would: a reconcile never misses a
        /// pod it owns (which would make it create a replacement twice) nor counts one it does
        /// not, and never misses a revision it could adopt.
        #[test]
        fn the_owner_index_always_agrees_with_a_scan_of_the_store(steps in proptest::collection::vec(step(), 1..40)) {
            let (store, mut writer) = owned_store::<Pod>();
            writer.apply(Event::Init);
            writer.apply(Event::InitDone);
            let make = |n: u8, owners: &[u8]| {
                let uids: Vec<String> = owners.iter().map(|o| format!("u{o}")).collect();
                pod(&format!("p{n}"), &uids.iter().map(String::as_str).collect::<Vec<_>>())
            };
            for s in steps {
                match s {
                    Step::Apply(n, owners) => { writer.apply(Event::Apply(make(n, &owners))); }
                    Step::Delete(n) => { writer.apply(Event::Delete(make(n, &[]))); }
                    Step::Relist(pods) => {
                        let pods: Vec<Pod> = pods.iter().map(|(n, o)| make(*n, o)).collect();
                        listed(&mut writer, &pods);
                    }
                }
                let all: Vec<Arc<Pod>> = store.read().objects.values().cloned().collect();
                for uid in (0..4).map(|o| format!("u{o}")) {
                    let mut scanned: Vec<String> =
                        all.iter().filter(|p| cloneset_owners(p.as_ref()).any(|o| o == uid)).map(|p| p.metadata.name.clone().unwrap()).collect();
                    scanned.sort();
                    prop_assert_eq!(names(store.owned_by(&uid)), scanned);
                }
                let mut orphans: Vec<String> = all.iter().filter(|p| !has_controller(p.as_ref())).map(|p| p.metadata.name.clone().unwrap()).collect();
                orphans.sort();
                prop_assert_eq!(names(store.orphans_in("ns")), orphans);
                let state = store.read();
                prop_assert!(state.by_owner.values().chain(state.orphans.values()).all(|keys| !keys.is_empty()), "no empty index entries are kept");
                for (key, obj) in state.by_owner.values().chain(state.orphans.values()).flatten() {
                    prop_assert!(state.objects.get(key).is_some_and(|o| Arc::ptr_eq(o, obj)), "the index holds the version the store holds");
                }
            }
        }
    }
}
