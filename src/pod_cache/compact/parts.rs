//! What the compact layout is built from: a pool that shares equal values, a time in 8 bytes, a
//! value boxed only when set, and a pod version's own strings kept in one block.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Shares equal values between cached objects. Entries nobody else holds any more are dropped
/// once the set has grown by an eighth (at least 1,024) since the last sweep, so unused entries
/// stay a small share of it. Values unique to one pod version (an in-place update's state
/// annotation) are pooled too: a sweep only at doubling let a steady churn pile up unused
/// values for hours.
///
/// Hashed with foldhash, seeded per pool: every string of every pod event is looked up here,
/// where std's SipHash showed in the CPU profile of a large creation.
pub(super) struct Pool<T: ?Sized> {
    set: HashSet<Arc<T>, foldhash::fast::RandomState>,
    swept_at: usize,
}

impl<T: ?Sized> Default for Pool<T> {
    fn default() -> Self {
        Self { set: HashSet::default(), swept_at: 0 }
    }
}

impl<T: ?Sized + Hash + Eq> Pool<T> {
    pub(super) fn share(&mut self, value: &T, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        match self.set.get(value) {
            Some(shared) => shared.clone(),
            None => self.insert(make()),
        }
    }

    /// How many values are pooled.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.set.len()
    }

    /// The shared copy of `value`, pooled if it is new.
    pub(super) fn intern(&mut self, value: T) -> Arc<T>
    where
        T: Sized,
    {
        match self.set.get(&value) {
            Some(shared) => shared.clone(),
            None => self.insert(Arc::new(value)),
        }
    }

    pub(super) fn insert(&mut self, shared: Arc<T>) -> Arc<T> {
        if self.set.len() >= self.swept_at + (self.swept_at / 8).max(1024) {
            self.set.retain(|s| Arc::strong_count(s) > 1);
            self.swept_at = self.set.len();
        }
        self.set.insert(shared.clone());
        shared
    }
}

/// A time to the nanosecond, 8 bytes instead of 24 (`None` is `i64::MIN`): every time from 1677
/// to 2262. Kubernetes writes times to the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Stamp(i64);

impl Stamp {
    pub(super) fn new(t: Option<Time>) -> Self {
        Self(t.map_or(i64::MIN, |t| i64::try_from(t.0.as_nanosecond()).unwrap_or(i64::MAX)))
    }

    pub(super) fn expand(self) -> Option<Time> {
        (self.0 != i64::MIN)
            .then(|| Time(k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(self.0)).unwrap_or(k8s_openapi::jiff::Timestamp::MAX)))
    }
}

/// A value that is mostly absent or empty: boxed only otherwise.
#[derive(Debug, PartialEq)]
pub(super) enum Sparse<T> {
    Absent,
    Empty,
    Boxed(Box<T>),
}

impl<T: Default + PartialEq + Clone> Sparse<T> {
    pub(super) fn new(value: Option<T>) -> Self {
        match value {
            None => Self::Absent,
            Some(v) if v == T::default() => Self::Empty,
            Some(v) => Self::Boxed(Box::new(v)),
        }
    }

    pub(super) fn expand(&self) -> Option<T> {
        match self {
            Self::Absent => None,
            Self::Empty => Some(T::default()),
            Self::Boxed(v) => Some(v.as_ref().clone()),
        }
    }
}

pub(super) fn string(s: &Arc<str>) -> String {
    s.to_string()
}

pub(super) fn opt_string(s: &Option<Arc<str>>) -> Option<String> {
    s.as_ref().map(string)
}

/// `items` in a block of their own, of exactly their size. Collecting a decoded `Vec`'s items
/// straight into a boxed slice reuses the decoded block in place and shrinks it: the cached
/// slice keeps the block's head, and its tail becomes a free hole behind it that only a smaller
/// block can fill. A decoded list of one container status has room for four, so each pod event
/// could leave a hole of most of a block behind a block the cache keeps.
pub(super) fn fresh<T>(items: impl ExactSizeIterator<Item = T>) -> Box<[T]> {
    let mut kept = Vec::with_capacity(items.len());
    kept.extend(items);
    kept.into_boxed_slice()
}

/// Where one of a pod's own strings is in its block of strings (`CompactPod::texts`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    /// `u32::MAX` when the string is absent. A pod is at most a few MiB (etcd's request limit).
    start: u32,
    len: u32,
}

impl Span {
    pub(super) const ABSENT: Self = Self { start: u32::MAX, len: 0 };

    pub(super) fn read(self, texts: &str) -> Option<&str> {
        (self.start != u32::MAX).then(|| &texts[self.start as usize..][..self.len as usize])
    }

    pub(super) fn expand(self, texts: &str) -> Option<String> {
        self.read(texts).map(str::to_string)
    }
}

/// Writes the strings unique to one pod version (UID, resourceVersion, pod IP, container IDs)
/// one after another, to be kept as one block instead of one block each (fewer blocks per pod,
/// each with the allocator's overhead: `tests/cache_footprint.rs`).
pub(super) struct Texts(String);

impl Texts {
    pub(super) fn new() -> Self {
        Self(String::with_capacity(256))
    }

    pub(super) fn add(&mut self, s: Option<String>) -> Span {
        let Some(s) = s else { return Span::ABSENT };
        let start = self.0.len() as u32;
        self.0.push_str(&s);
        Span { start, len: s.len() as u32 }
    }

    /// The strings in a block of exactly their size (see [`fresh`]).
    pub(super) fn finish(self) -> Box<str> {
        Box::from(self.0.as_str())
    }
}

/// `Some(boxed)` unless `value` is its type's default.
pub(super) fn rest<T: Default + PartialEq>(value: T) -> Option<Box<T>> {
    (value != T::default()).then(|| Box::new(value))
}
