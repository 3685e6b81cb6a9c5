//! Expectations: what this controller wrote and has not yet seen in its cache.
//!
//! A reconcile never acts on a cache that has not caught up with its own writes: after creating
//! or deleting pods and PVCs it waits until the informer shows them (scale expectations), and
//! after patching an object it waits until the cache holds that resourceVersion or newer
//! (resourceVersion expectations). Both time out (`--expectation-timeout`, default 5 min) so a
//! lost event cannot freeze a CloneSet for days (Kruise issue #1765); a timeout is a "leak",
//! counted in a metric.
//!
//! Unlike Kruise's, these are plain values owned by the controller's context, checked against a
//! snapshot of the cache, with time passed in.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// The kinds of objects a scale step creates and deletes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ObjectKind {
    Pod,
    Pvc,
}

/// What the cache says about a named object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cached {
    Absent,
    Present,
    /// Present with a deletionTimestamp: a delete has been observed.
    Terminating,
}

/// The verdict for one CloneSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Nothing pending: act.
    Proceed,
    /// Writes not yet observed: look again after this long (the remaining timeout).
    Wait(Duration),
    /// Pending past the timeout. The caller counts the leak and decides (Kruise's
    /// `ForceDeleteTimeoutExpectationGate` drops the expectations; without it, it waits).
    Leaked,
}

#[derive(Debug, Default)]
struct Pending {
    creations: BTreeSet<(ObjectKind, String)>,
    deletions: BTreeSet<(ObjectKind, String)>,
    /// When a check first found this entry unsatisfied; the timeout runs from here.
    unsatisfied_since: Option<Instant>,
}

/// Scale expectations, keyed by CloneSet `namespace/name`.
#[derive(Debug, Default)]
pub(crate) struct ScaleExpectations {
    by_cloneset: HashMap<String, Pending>,
}

impl ScaleExpectations {
    /// Record before the create call, so the resulting watch event can never be missed.
    pub(crate) fn expect_creation(&mut self, cloneset: &str, kind: ObjectKind, name: &str) {
        self.by_cloneset.entry(cloneset.to_string()).or_default().creations.insert((kind, name.to_string()));
    }

    pub(crate) fn expect_deletion(&mut self, cloneset: &str, kind: ObjectKind, name: &str) {
        self.by_cloneset.entry(cloneset.to_string()).or_default().deletions.insert((kind, name.to_string()));
    }

    /// A watch event of a held object `name` owned by `cloneset` arrived (applied to the cache
    /// already): a creation expected of it is observed, whatever the cache shows by the next
    /// check. Kruise observes creations the same way, by its watch's events. Checking a snapshot
    /// alone left a pod created and then deleted before a check (a mass eviction while reconciles
    /// waited long in the queue) pending for good: a leak that froze CloneSets short of their
    /// pods. A pod the cache never holds (a
    /// webhook stripped its owner) is never observed, and still leaks rather than being created
    /// again and again.
    pub(crate) fn observe(&mut self, cloneset: &str, kind: ObjectKind, name: &str) {
        if let Some(p) = self.by_cloneset.get_mut(cloneset) {
            p.creations.remove(&(kind, name.to_string()));
        }
    }

    /// Withdraw an expectation whose write failed (nothing will ever be observed).
    pub(crate) fn withdraw(&mut self, cloneset: &str, kind: ObjectKind, name: &str) {
        if let Some(p) = self.by_cloneset.get_mut(cloneset) {
            let key = (kind, name.to_string());
            p.creations.remove(&key);
            p.deletions.remove(&key);
        }
    }

    /// Drops everything about a CloneSet (it was deleted, or its expectations leaked and the
    /// force-delete gate is on).
    pub(crate) fn forget(&mut self, cloneset: &str) {
        self.by_cloneset.remove(cloneset);
    }

    /// Settles what the cache now shows, then says whether the CloneSet may act.
    pub(crate) fn check(&mut self, cloneset: &str, cache: impl Fn(ObjectKind, &str) -> Cached, now: Instant, timeout: Duration) -> Gate {
        let Some(p) = self.by_cloneset.get_mut(cloneset) else { return Gate::Proceed };
        p.creations.retain(|(kind, name)| cache(*kind, name) == Cached::Absent);
        p.deletions.retain(|(kind, name)| cache(*kind, name) == Cached::Present);
        if p.creations.is_empty() && p.deletions.is_empty() {
            self.by_cloneset.remove(cloneset);
            return Gate::Proceed;
        }
        let since = *p.unsatisfied_since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        if waited >= timeout { Gate::Leaked } else { Gate::Wait(timeout - waited) }
    }

    /// Names still pending for a CloneSet (for logs and tests).
    #[cfg(test)]
    pub(crate) fn pending(&self, cloneset: &str) -> (usize, usize) {
        self.by_cloneset.get(cloneset).map_or((0, 0), |p| (p.creations.len(), p.deletions.len()))
    }
}

#[derive(Debug)]
struct Written {
    resource_version: u64,
    unsatisfied_since: Option<Instant>,
}

/// Read-your-writes expectations, keyed by object UID: after a patch returned resourceVersion
/// `rv`, the cache must show `rv` or newer before the object is used for decisions again.
#[derive(Debug, Default)]
pub(crate) struct ResourceVersionExpectations {
    by_uid: HashMap<String, Written>,
}

impl ResourceVersionExpectations {
    /// Records the resourceVersion a write returned. Non-numeric versions (not produced by etcd
    /// backed apiservers) are not tracked.
    pub(crate) fn expect(&mut self, uid: &str, resource_version: &str) {
        let Ok(rv) = resource_version.parse::<u64>() else { return };
        let e = self.by_uid.entry(uid.to_string()).or_insert(Written { resource_version: rv, unsatisfied_since: None });
        e.resource_version = e.resource_version.max(rv);
    }

    pub(crate) fn forget(&mut self, uid: &str) {
        self.by_uid.remove(uid);
        shrink_when_sparse(&mut self.by_uid);
    }

    /// Whether a write to `uid` waits for the cache to show its version.
    pub(crate) fn awaits(&self, uid: &str) -> bool {
        self.by_uid.contains_key(uid)
    }

    /// `cached` is the resourceVersion the cache holds for `uid`, or `None` when the object is
    /// gone (a gone object has nothing left to wait for).
    pub(crate) fn check(&mut self, uid: &str, cached: Option<&str>, now: Instant, timeout: Duration) -> Gate {
        let Some(w) = self.by_uid.get_mut(uid) else { return Gate::Proceed };
        let seen = match cached {
            None => true,
            Some(rv) => rv.parse::<u64>().map_or(true, |rv| rv >= w.resource_version),
        };
        if seen {
            self.by_uid.remove(uid);
            shrink_when_sparse(&mut self.by_uid);
            return Gate::Proceed;
        }
        let since = *w.unsatisfied_since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        if waited >= timeout { Gate::Leaked } else { Gate::Wait(timeout - waited) }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_uid.len()
    }

    /// Entries the map has room for without growing.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.by_uid.capacity()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

/// Gives a map's spare room back once it is mostly empty. A `HashMap` keeps the capacity of its
/// largest moment: after a bulk creation the resourceVersion expectations, empty again, would
/// keep room for every pod the operator ever wrote to at once. Shrinking to twice the entries once fewer than a quarter are used keeps inserts and
/// removals amortized O(1).
fn shrink_when_sparse<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    const SMALL: usize = 64;
    if map.capacity() > SMALL && map.len() < map.capacity() / 4 {
        map.shrink_to((map.len() * 2).max(SMALL));
    }
}

/// Combines gates: any leak wins, then the shortest wait.
pub(crate) fn combine(a: Gate, b: Gate) -> Gate {
    match (a, b) {
        (Gate::Leaked, _) | (_, Gate::Leaked) => Gate::Leaked,
        (Gate::Wait(x), Gate::Wait(y)) => Gate::Wait(x.min(y)),
        (Gate::Wait(x), Gate::Proceed) | (Gate::Proceed, Gate::Wait(x)) => Gate::Wait(x),
        (Gate::Proceed, Gate::Proceed) => Gate::Proceed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(300);

    #[test]
    fn creations_wait_until_the_cache_shows_them() {
        let mut e = ScaleExpectations::default();
        let t0 = Instant::now();
        e.expect_creation("ns/cs", ObjectKind::Pod, "cs-a");
        e.expect_creation("ns/cs", ObjectKind::Pvc, "data-cs-a");
        let nothing = |_: ObjectKind, _: &str| Cached::Absent;
        assert_eq!(e.check("ns/cs", nothing, t0, T), Gate::Wait(T));
        let pod_only = |k: ObjectKind, _: &str| if k == ObjectKind::Pod { Cached::Present } else { Cached::Absent };
        assert_eq!(e.check("ns/cs", pod_only, t0 + Duration::from_secs(10), T), Gate::Wait(T - Duration::from_secs(10)));
        assert_eq!(e.pending("ns/cs"), (1, 0));
        assert_eq!(e.check("ns/cs", |_, _| Cached::Present, t0 + Duration::from_secs(11), T), Gate::Proceed);
        assert_eq!(e.pending("ns/cs"), (0, 0));
    }

    #[test]
    fn a_creation_its_watch_event_observed_is_satisfied_though_the_pod_is_gone() {
        let mut e = ScaleExpectations::default();
        let t0 = Instant::now();
        let absent = |_: ObjectKind, _: &str| Cached::Absent;
        e.expect_creation("ns/cs", ObjectKind::Pod, "cs-a");
        e.expect_creation("ns/cs", ObjectKind::Pod, "cs-b");
        e.observe("ns/cs", ObjectKind::Pod, "cs-a");
        e.observe("ns/other", ObjectKind::Pod, "cs-b");
        e.observe("ns/cs", ObjectKind::Pvc, "cs-b");
        assert_eq!(e.check("ns/cs", absent, t0, T), Gate::Wait(T), "cs-b was observed for another CloneSet or kind only");
        assert_eq!(e.pending("ns/cs"), (1, 0), "cs-a was created, seen, and deleted before the check");
        e.observe("ns/cs", ObjectKind::Pod, "cs-b");
        assert_eq!(e.check("ns/cs", absent, t0 + T, T), Gate::Proceed, "not a leak");
    }

    #[test]
    fn deletions_are_seen_as_absent_or_terminating() {
        let mut e = ScaleExpectations::default();
        let t0 = Instant::now();
        e.expect_deletion("ns/cs", ObjectKind::Pod, "a");
        e.expect_deletion("ns/cs", ObjectKind::Pod, "b");
        let cache = |_: ObjectKind, n: &str| if n == "a" { Cached::Terminating } else { Cached::Present };
        assert!(matches!(e.check("ns/cs", cache, t0, T), Gate::Wait(_)));
        assert_eq!(e.check("ns/cs", |_, _| Cached::Absent, t0, T), Gate::Proceed);
    }

    #[test]
    fn a_failed_write_is_withdrawn() {
        let mut e = ScaleExpectations::default();
        e.expect_creation("ns/cs", ObjectKind::Pod, "a");
        e.withdraw("ns/cs", ObjectKind::Pod, "a");
        assert_eq!(e.check("ns/cs", |_, _| Cached::Absent, Instant::now(), T), Gate::Proceed);
    }

    #[test]
    fn unobserved_writes_leak_after_the_timeout_measured_from_the_first_check() {
        let mut e = ScaleExpectations::default();
        let t0 = Instant::now();
        e.expect_creation("ns/cs", ObjectKind::Pod, "a");
        let absent = |_: ObjectKind, _: &str| Cached::Absent;
        assert_eq!(e.check("ns/cs", absent, t0 + Duration::from_secs(100), T), Gate::Wait(T));
        assert_eq!(e.check("ns/cs", absent, t0 + Duration::from_secs(399), T), Gate::Wait(Duration::from_secs(1)));
        assert_eq!(e.check("ns/cs", absent, t0 + Duration::from_secs(400), T), Gate::Leaked);
        e.forget("ns/cs");
        assert_eq!(e.check("ns/cs", absent, t0 + Duration::from_secs(401), T), Gate::Proceed);
    }

    #[test]
    fn resource_versions_compare_numerically() {
        let mut e = ResourceVersionExpectations::default();
        let t0 = Instant::now();
        e.expect("uid", "100");
        assert_eq!(e.check("uid", Some("99"), t0, T), Gate::Wait(T));
        assert_eq!(e.check("uid", Some("1000"), t0, T), Gate::Proceed, "numeric, not lexical");
        e.expect("uid", "5");
        assert_eq!(e.check("uid", None, t0, T), Gate::Proceed, "a deleted object satisfies");
        e.expect("uid", "7");
        assert_eq!(e.check("uid", Some("6"), t0 + T, T), Gate::Wait(T));
        assert_eq!(e.check("uid", Some("6"), t0 + T + T, T), Gate::Leaked);
    }

    #[test]
    fn the_resource_version_expectations_give_back_the_room_of_a_burst() {
        let mut e = ResourceVersionExpectations::default();
        let t0 = Instant::now();
        let uids: Vec<String> = (0..4_000).map(|i| format!("uid-{i}")).collect();
        for uid in &uids {
            e.expect(uid, "10");
        }
        assert!(e.capacity() >= 4_000);
        for (i, uid) in uids.iter().enumerate() {
            // Half are seen by a reconcile, half go away with their pods.
            if i % 2 == 0 {
                assert_eq!(e.check(uid, Some("10"), t0, T), Gate::Proceed);
            } else {
                e.forget(uid);
            }
            assert!(e.capacity() <= (8 * e.len()).max(4 * 64), "{} entries kept room for {}", e.len(), e.capacity());
        }
        assert!(e.is_empty());
        assert!(e.capacity() <= 4 * 64, "empty, the map keeps room for {}", e.capacity());
    }

    #[test]
    fn gates_combine_to_the_most_restrictive() {
        assert_eq!(combine(Gate::Proceed, Gate::Wait(Duration::from_secs(3))), Gate::Wait(Duration::from_secs(3)));
        assert_eq!(combine(Gate::Wait(Duration::from_secs(5)), Gate::Wait(Duration::from_secs(3))), Gate::Wait(Duration::from_secs(3)));
        assert_eq!(combine(Gate::Leaked, Gate::Proceed), Gate::Leaked);
    }
}
