//! A work queue with client-go's guarantees: a key is queued at most once, never processed by two
//! workers at once, re-queued if it changed while being processed, and can be added after a
//! delay. Failed keys back off exponentially per key.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Counters the metrics endpoint reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub depth: usize,
    pub adds: u64,
    pub retries: u64,
    pub processing: usize,
}

#[derive(Default)]
struct State {
    ready: VecDeque<String>,
    queued: HashSet<String>,
    /// When each key entered `ready`, for queue-latency metrics.
    queued_at: HashMap<String, Instant>,
    processing: HashSet<String>,
    /// Added while processing: goes back to `ready` when processing ends.
    dirty: HashSet<String>,
    /// Keys to add at a later time (the earliest time wins).
    delayed: HashMap<String, Instant>,
    failures: HashMap<String, u32>,
    adds: u64,
    retries: u64,
    shut_down: bool,
}

pub struct WorkQueue {
    state: Mutex<State>,
    wake: Notify,
}

/// A key handed to a worker, with how long it waited in the queue.
pub struct Item {
    pub key: String,
    pub waited: Duration,
}

const BASE_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Default for WorkQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkQueue {
    pub fn new() -> Self {
        Self { state: Mutex::new(State::default()), wake: Notify::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` now.
    pub fn add(&self, key: &str) {
        let mut s = self.lock();
        if s.shut_down {
            return;
        }
        s.adds += 1;
        s.delayed.remove(key);
        if s.processing.contains(key) {
            s.dirty.insert(key.to_string());
        } else if s.queued.insert(key.to_string()) {
            s.ready.push_back(key.to_string());
            s.queued_at.insert(key.to_string(), Instant::now());
        }
        drop(s);
        self.wake.notify_one();
    }

    /// Queues `key` after `delay` (keeping an earlier pending time if there is one).
    pub fn add_after(&self, key: &str, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = Instant::now() + delay;
        let mut s = self.lock();
        if s.shut_down {
            return;
        }
        let e = s.delayed.entry(key.to_string()).or_insert(at);
        *e = (*e).min(at);
        drop(s);
        self.wake.notify_one();
    }

    /// Queues `key` after its next exponential backoff step.
    pub fn add_rate_limited(&self, key: &str) {
        let delay = {
            let mut s = self.lock();
            s.retries += 1;
            let n = s.failures.entry(key.to_string()).or_insert(0);
            *n += 1;
            backoff(*n)
        };
        self.add_after(key, delay);
    }

    /// Clears a key's failure history after a success.
    pub fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
    }

    /// Waits for the next key; `None` once shut down.
    pub async fn get(&self) -> Option<Item> {
        loop {
            let notified = self.wake.notified();
            let next_due = {
                let mut s = self.lock();
                if s.shut_down {
                    return None;
                }
                let now = Instant::now();
                let due: Vec<String> = s.delayed.iter().filter(|(_, at)| **at <= now).map(|(k, _)| k.clone()).collect();
                for k in due {
                    s.delayed.remove(&k);
                    if s.processing.contains(&k) {
                        s.dirty.insert(k);
                    } else if s.queued.insert(k.clone()) {
                        s.ready.push_back(k.clone());
                        s.queued_at.insert(k, now);
                    }
                }
                if let Some(key) = s.ready.pop_front() {
                    s.queued.remove(&key);
                    s.processing.insert(key.clone());
                    let waited = s.queued_at.remove(&key).map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
                    return Some(Item { key, waited });
                }
                s.delayed.values().min().copied()
            };
            match next_due {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` processed; if it was added meanwhile it is queued again.
    pub fn done(&self, key: &str) {
        let mut s = self.lock();
        s.processing.remove(key);
        if s.dirty.remove(key) && s.queued.insert(key.to_string()) {
            s.ready.push_back(key.to_string());
            s.queued_at.insert(key.to_string(), Instant::now());
            drop(s);
            self.wake.notify_one();
        }
    }

    /// Stops handing out keys; waiting workers return `None`.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        self.wake.notify_waiters();
    }

    pub fn stats(&self) -> QueueStats {
        let s = self.lock();
        QueueStats { depth: s.ready.len(), adds: s.adds, retries: s.retries, processing: s.processing.len() }
    }
}

/// 5 ms doubling per failure, capped at 5 minutes.
fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(20);
    (BASE_BACKOFF * 2u32.pow(exp)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_queued_once_and_not_handed_out_twice() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.stats().depth, 2);
        let a = q.get().await.unwrap();
        assert_eq!(a.key, "a");
        q.add("a"); // changed while processing: dirty, not queued
        assert_eq!(q.get().await.unwrap().key, "b");
        assert_eq!(q.stats().depth, 0);
        q.done("a");
        assert_eq!(q.get().await.unwrap().key, "a", "re-queued after done");
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_arrive_after_the_delay() {
        let q = WorkQueue::new();
        q.add_after("late", Duration::from_secs(5));
        q.add_after("late", Duration::from_secs(10)); // the earlier time wins
        let start = Instant::now();
        let item = q.get().await.unwrap();
        assert_eq!(item.key, "late");
        assert_eq!(Instant::now() - start, Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_and_forget_resets() {
        assert_eq!(backoff(1), Duration::from_millis(5));
        assert_eq!(backoff(4), Duration::from_millis(40));
        assert_eq!(backoff(40), MAX_BACKOFF);
        let q = WorkQueue::new();
        q.add_rate_limited("k");
        q.add_rate_limited("k");
        q.forget("k");
        assert_eq!(q.stats().retries, 2);
        let start = Instant::now();
        q.get().await.unwrap();
        assert_eq!(Instant::now() - start, Duration::from_millis(5), "the earlier pending retry wins");
    }

    #[tokio::test]
    async fn shut_down_releases_waiting_workers() {
        let q = std::sync::Arc::new(WorkQueue::new());
        let q2 = q.clone();
        let worker = tokio::spawn(async move { q2.get().await.is_none() });
        tokio::task::yield_now().await;
        q.shut_down();
        assert!(worker.await.unwrap());
    }
}
