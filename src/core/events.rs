//! client-go's event correlation (`tools/record/events_cache.go`, v0.32), which Kruise's
//! core/v1 event broadcaster applies before writing: a repeat of an event patches the first one
//! (`count` + 1, `lastTimestamp`, `message`) instead of creating another, and once an object has
//! had [`AGGREGATE_MAX_EVENTS`] different messages for one reason within
//! [`AGGREGATE_INTERVAL`], the rest are folded into one "(combined from similar events): …" event.
//! The per-object spam filter is `controller::recorder::EventBudget`.

use std::collections::HashMap;
use std::hash::Hash;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// client-go's `defaultAggregateMaxEvents`.
pub(crate) const AGGREGATE_MAX_EVENTS: usize = 10;
/// client-go's `defaultAggregateIntervalInSeconds`.
pub(crate) const AGGREGATE_INTERVAL: SignedDuration = SignedDuration::from_secs(600);
/// client-go's `maxLruCacheEntries`, for each of its two caches.
pub(crate) const CACHE_ENTRIES: usize = 4096;
/// client-go's `EventAggregatorByReasonMessageFunc` prefix.
pub(crate) const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// An event to record, about one object.
#[derive(Clone, Debug)]
pub struct NewEvent<'a> {
    /// Identifies the involved object (and the event source): kind, namespace, name, UID, apiVersion.
    pub object_key: &'a str,
    /// The involved object's name (events are named `<name>.<hex nanos>`).
    pub object_name: &'a str,
    pub type_: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

/// What to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occurrence {
    pub name: String,
    pub message: String,
    pub count: i32,
    pub first_timestamp: Timestamp,
    pub last_timestamp: Timestamp,
    /// False for a combined event: client-go's aggregate copy carries no reporting controller.
    pub reporting: bool,
    /// Patch the existing event `name` (`count`, `lastTimestamp`, `message`); else create it.
    pub patch: bool,
}

/// The correlator's memory: two LRU caches of [`CACHE_ENTRIES`] each.
#[derive(Debug, Default)]
pub struct EventCorrelator {
    similar: Lru<Digest, SimilarRecord>,
    seen: Lru<Digest, Seen>,
    last_nanos: i64,
}

/// What the caches are keyed by, and remember messages as: 64 bits of the strings client-go
/// keys them by (object, type, reason, message). Keeping the strings would cost megabytes with
/// both caches full; two keys with one digest (vanishingly unlikely among the caches' entries)
/// would only count as one event.
type Digest = u64;

fn digest(parts: &[&str]) -> Digest {
    use std::hash::{BuildHasher, Hasher};
    let mut h = foldhash::quality::FixedState::with_seed(0x9e37_79b9_7f4a_7c15).build_hasher();
    for part in parts {
        // With its length, so ("ab", "c") and ("a", "bc") differ.
        h.write_usize(part.len());
        h.write(part.as_bytes());
    }
    h.finish()
}

/// The distinct messages of one object, type and reason (at most [`AGGREGATE_MAX_EVENTS`] - 1):
/// a list, smaller than a set for so few.
#[derive(Clone, Debug)]
struct SimilarRecord {
    messages: Vec<Digest>,
    last: Timestamp,
}

/// An event written: its name is `<object name>.<nanos in hex>` (the object is in the key).
#[derive(Clone, Debug)]
struct Seen {
    nanos: i64,
    first: Timestamp,
    count: i32,
}

impl EventCorrelator {
    /// client-go's `EventCorrelate` (aggregate, then observe) for an event recorded at `now`.
    pub fn correlate(&mut self, ev: &NewEvent<'_>, now: Timestamp) -> Occurrence {
        let similar_key = digest(&[ev.object_key, ev.type_, ev.reason]);
        let mut record = self
            .similar
            .get(&similar_key)
            .filter(|r| now.duration_since(r.last) <= AGGREGATE_INTERVAL)
            .unwrap_or_else(|| SimilarRecord { messages: Vec::new(), last: now });
        let message_digest = digest(&[ev.message]);
        if !record.messages.contains(&message_digest) {
            record.messages.push(message_digest);
        }
        record.last = now;
        let combined = record.messages.len() >= AGGREGATE_MAX_EVENTS;
        if combined {
            // Keeps the set from growing (client-go's PopAny: any one of them).
            record.messages.remove(0);
        }
        self.similar.put(similar_key, record);
        let (key, message) = if combined {
            (similar_key, format!("{COMBINED_PREFIX}{}", ev.message))
        } else {
            (digest(&[ev.object_key, ev.type_, ev.reason, ev.message]), ev.message.to_string())
        };

        // A repeat keeps the first occurrence's name and time; a new event is named now.
        let (nanos, count, first_timestamp, patch) = match self.seen.get(&key) {
            Some(seen) => (seen.nanos, seen.count + 1, seen.first, true),
            None => (self.unique_nanos(now), 1, now, false),
        };
        let occurrence = Occurrence {
            name: event_name(ev.object_name, nanos),
            message,
            count,
            first_timestamp,
            last_timestamp: now,
            reporting: !combined,
            patch,
        };
        self.seen.put(key, Seen { nanos, count, first: first_timestamp });
        occurrence
    }

    /// `now` in nanoseconds, made unique so two events of one instant get distinct names.
    fn unique_nanos(&mut self, now: Timestamp) -> i64 {
        self.last_nanos = i64::try_from(now.as_nanosecond()).unwrap_or(i64::MAX).max(self.last_nanos.saturating_add(1));
        self.last_nanos
    }
}

/// client-go's event name: the object's name and the first occurrence's time in hex nanoseconds.
fn event_name(object_name: &str, nanos: i64) -> String {
    format!("{object_name}.{nanos:x}")
}

/// A least-recently-used map of at most [`CACHE_ENTRIES`] entries.
#[derive(Debug)]
struct Lru<K, V> {
    entries: HashMap<K, (V, u64)>,
    tick: u64,
    /// Whether the table was given, once full, the room it keeps from then on.
    sized_for_eviction: bool,
}

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Self { entries: HashMap::new(), tick: 0, sized_for_eviction: false }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Lru<K, V> {
    fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(v, used)| {
            *used = tick;
            v.clone()
        })
    }

    fn put(&mut self, key: K, value: V) {
        self.tick += 1;
        // Evictions leave tombstones, and the std map then keeps its entries within half its
        // buckets: a full cache doubles its table once, at a moment that depends on the random
        // hash seed. Doing it when the cache first fills makes its memory the same in every run.
        if !self.sized_for_eviction && self.entries.len() == CACHE_ENTRIES {
            self.entries.reserve(CACHE_ENTRIES + 1);
            self.sized_for_eviction = true;
        }
        self.entries.insert(key, (value, self.tick));
        if self.entries.len() > CACHE_ENTRIES
            && let Some(oldest) = self.entries.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone())
        {
            self.entries.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev<'a>(reason: &'a str, message: &'a str) -> NewEvent<'a> {
        NewEvent { object_key: "CloneSet/ns/web/uid-1", object_name: "web", type_: "Normal", reason, message }
    }

    #[test]
    fn a_repeated_event_patches_the_first_one_with_count_and_last_timestamp() {
        let mut c = EventCorrelator::default();
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let first = c.correlate(&ev("SuccessfulDelete", "succeed to delete pod web-a"), t0);
        assert_eq!((first.count, first.patch, first.reporting), (1, false, true));
        assert_eq!(first.name, format!("web.{:x}", t0.as_nanosecond()));
        let t1 = t0 + SignedDuration::from_secs(7);
        let again = c.correlate(&ev("SuccessfulDelete", "succeed to delete pod web-a"), t1);
        assert_eq!(again, Occurrence { count: 2, last_timestamp: t1, patch: true, ..first.clone() });
        let other = c.correlate(&ev("SuccessfulDelete", "succeed to delete pod web-b"), t1);
        assert_eq!((other.count, other.patch), (1, false));
        assert_ne!(other.name, first.name, "a different message is a new event, named apart even in the same instant");
    }

    #[test]
    fn the_tenth_different_message_for_a_reason_is_combined_from_similar_events() {
        let mut c = EventCorrelator::default();
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let messages: Vec<String> = (0..12).map(|i| format!("succeed to create pod web-{i}")).collect();
        let out: Vec<Occurrence> = messages.iter().map(|m| c.correlate(&ev("SuccessfulCreate", m), t0)).collect();
        assert!(out[..9].iter().all(|o| o.count == 1 && !o.patch && !o.message.starts_with(COMBINED_PREFIX)));
        assert_eq!(out[9].message, "(combined from similar events): succeed to create pod web-9");
        assert_eq!((out[9].count, out[9].patch, out[9].reporting), (1, false, false));
        assert_eq!((out[11].name.as_str(), out[11].count, out[11].patch), (out[9].name.as_str(), 3, true));
        // Another reason is aggregated apart; after the interval, a reason starts afresh.
        assert_eq!(c.correlate(&ev("SuccessfulDelete", "x"), t0).message, "x");
        let later = t0 + AGGREGATE_INTERVAL + SignedDuration::from_secs(1);
        assert_eq!(c.correlate(&ev("SuccessfulCreate", "succeed to create pod web-99"), later).message, "succeed to create pod web-99");
    }

    #[test]
    fn a_key_s_parts_are_digested_apart() {
        assert_ne!(digest(&["ab", "c"]), digest(&["a", "bc"]));
        assert_ne!(digest(&["CloneSet/ns/web", "Normal", "R"]), digest(&["CloneSet/ns/web", "Normal", "R", ""]));
        assert_eq!(digest(&["CloneSet/ns/web", "Normal"]), digest(&["CloneSet/ns/web", "Normal"]));
    }

    #[test]
    fn the_caches_keep_at_most_their_size() {
        let mut c = EventCorrelator::default();
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        for i in 0..CACHE_ENTRIES + 10 {
            let key = format!("CloneSet/ns/web-{i}");
            c.correlate(&NewEvent { object_key: &key, object_name: "web", type_: "Normal", reason: "R", message: "m" }, t0);
        }
        assert_eq!((c.similar.entries.len(), c.seen.entries.len()), (CACHE_ENTRIES, CACHE_ENTRIES));
    }
}
