//! A work queue with client-go's guarantees: a key is queued at most once, never processed by two
//! workers at once, re-queued if it changed while being processed, and can be added after a
//! delay. Failed keys back off as controller-runtime's default rate limiter (which Kruise uses)
//! does: the larger of a per-key exponential backoff and an overall token bucket. It updates
//! client-go's workqueue metrics (depth, adds, retries, queue and work durations) as it goes.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::RetryLimits;
use crate::metrics::QueueMetrics;

/// Counters the tests read (the metrics are kept by `QueueMetrics`).
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueueStats {
    pub depth: usize,
    /// Keys that became pending (an add of a key already waiting is not counted, as in client-go).
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
    /// Keys being processed, with when their worker got them.
    processing: HashMap<String, Instant>,
    /// Added while processing: goes back to `ready` when processing ends.
    dirty: HashSet<String>,
    /// Keys to add at a later time (the earliest time wins).
    delayed: HashMap<String, Instant>,
    failures: HashMap<String, u32>,
    retry_bucket: RetryBucket,
    adds: u64,
    retries: u64,
    shut_down: bool,
}

pub(crate) struct WorkQueue {
    state: Mutex<State>,
    wake: Notify,
    metrics: QueueMetrics,
    limits: RetryLimits,
}

/// A key handed to a worker.
pub(crate) struct Item {
    pub key: String,
}

/// A token bucket that hands out reservations, as `golang.org/x/time/rate` does: a retry past
/// the burst is not refused but delayed until its token would have arrived.
#[derive(Debug)]
struct RetryBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl Default for RetryBucket {
    fn default() -> Self {
        Self::new(&RetryLimits::default())
    }
}

impl RetryBucket {
    fn new(limits: &RetryLimits) -> Self {
        let burst = f64::from(limits.burst.max(1));
        Self { qps: limits.qps.max(f64::MIN_POSITIVE), burst, tokens: burst, last: None }
    }

    /// Takes a token, returning how long the retry must wait for it.
    fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = self.last.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.qps).min(self.burst) - 1.0;
        self.last = Some(now);
        if self.tokens >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-self.tokens / self.qps) }
    }
}

impl Default for WorkQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkQueue {
    /// A queue with Kruise's default retry limits and unregistered metrics.
    pub(crate) fn new() -> Self {
        Self::with_limits(RetryLimits::default(), QueueMetrics::default())
    }

    /// A queue that retries failed keys within `limits` and reports into `metrics`.
    pub(crate) fn with_limits(limits: RetryLimits, metrics: QueueMetrics) -> Self {
        let state = State { retry_bucket: RetryBucket::new(&limits), ..State::default() };
        Self { state: Mutex::new(state), wake: Notify::new(), metrics, limits }
    }

    /// Puts `key` in `ready` unless it is already pending; a key being processed is marked dirty
    /// instead. Counts the add when the key was not pending yet.
    fn enqueue(&self, s: &mut State, key: &str, now: Instant) {
        if s.processing.contains_key(key) {
            if s.dirty.insert(key.to_string()) {
                s.adds += 1;
                self.metrics.adds.inc();
            }
        } else if s.queued.insert(key.to_string()) {
            s.adds += 1;
            self.metrics.adds.inc();
            s.ready.push_back(key.to_string());
            s.queued_at.insert(key.to_string(), now);
        }
    }

    fn publish_depth(&self, s: &State) {
        self.metrics.depth.set(i64::try_from(s.ready.len()).unwrap_or(i64::MAX));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` now.
    pub(crate) fn add(&self, key: &str) {
        let mut s = self.lock();
        if s.shut_down {
            return;
        }
        s.delayed.remove(key);
        self.enqueue(&mut s, key, Instant::now());
        self.publish_depth(&s);
        drop(s);
        self.wake.notify_one();
    }

    /// Queues `key` after `delay` (keeping an earlier pending time if there is one).
    pub(crate) fn add_after(&self, key: &str, delay: Duration) {
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

    /// Queues `key` after its next backoff step: the larger of its own exponential backoff and
    /// the overall retry bucket's wait.
    pub(crate) fn add_rate_limited(&self, key: &str) {
        let delay = {
            let mut s = self.lock();
            s.retries += 1;
            self.metrics.retries.inc();
            let n = s.failures.entry(key.to_string()).or_insert(0);
            *n += 1;
            let per_key = backoff(&self.limits, *n);
            per_key.max(s.retry_bucket.reserve(Instant::now()))
        };
        self.add_after(key, delay);
    }

    /// Clears a key's failure history after a success.
    pub(crate) fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
    }

    /// Waits for the next key; `None` once shut down.
    pub(crate) async fn get(&self) -> Option<Item> {
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
                    self.enqueue(&mut s, &k, now);
                }
                if let Some(key) = s.ready.pop_front() {
                    s.queued.remove(&key);
                    s.processing.insert(key.clone(), now);
                    let waited = s.queued_at.remove(&key).map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
                    self.publish_depth(&s);
                    self.metrics.queue_duration.observe(waited.as_secs_f64());
                    return Some(Item { key });
                }
                self.publish_depth(&s);
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
    pub(crate) fn done(&self, key: &str) {
        let mut s = self.lock();
        let now = Instant::now();
        if let Some(started) = s.processing.remove(key) {
            self.metrics.work_duration.observe(now.saturating_duration_since(started).as_secs_f64());
        }
        if s.dirty.remove(key) && s.queued.insert(key.to_string()) {
            s.ready.push_back(key.to_string());
            s.queued_at.insert(key.to_string(), now);
            self.publish_depth(&s);
            drop(s);
            self.wake.notify_one();
        }
    }

    /// Sets client-go's unfinished-work gauges: the seconds every key being processed has spent
    /// so far, summed, and the longest of them (client-go refreshes them every 500 ms).
    pub(crate) fn publish_unfinished_work(&self) {
        let s = self.lock();
        let now = Instant::now();
        let (total, longest) = s.processing.values().fold((0.0f64, 0.0f64), |(total, longest), started| {
            let secs = now.saturating_duration_since(*started).as_secs_f64();
            (total + secs, longest.max(secs))
        });
        self.metrics.unfinished_work.set(total);
        self.metrics.longest_running.set(longest);
    }

    /// Stops handing out keys; waiting workers return `None`.
    pub(crate) fn shut_down(&self) {
        self.lock().shut_down = true;
        self.wake.notify_waiters();
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> QueueStats {
        let s = self.lock();
        QueueStats { depth: s.ready.len(), adds: s.adds, retries: s.retries, processing: s.processing.len() }
    }
}

/// The base delay doubling per failure, capped at the max delay (5 ms and 1000 s by default).
fn backoff(limits: &RetryLimits, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    limits.base_delay.saturating_mul(2u32.pow(exp)).min(limits.max_delay)
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
        assert_eq!(q.stats().adds, 2, "an add of a key already waiting is not counted");
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
        let kruise = RetryLimits::default();
        assert_eq!(backoff(&kruise, 1), Duration::from_millis(5));
        assert_eq!(backoff(&kruise, 4), Duration::from_millis(40));
        assert_eq!(backoff(&kruise, 40), kruise.max_delay);
        let q = WorkQueue::new();
        q.add_rate_limited("k");
        q.add_rate_limited("k");
        q.forget("k");
        assert_eq!(q.stats().retries, 2);
        let start = Instant::now();
        q.get().await.unwrap();
        assert_eq!(Instant::now() - start, Duration::from_millis(5), "the earlier pending retry wins");
    }

    #[test]
    fn backoff_reaches_kruise_s_1000_second_cap() {
        let kruise = RetryLimits::default();
        assert_eq!(backoff(&kruise, 18), Duration::from_millis(5 * (1 << 17)));
        assert_eq!(backoff(&kruise, 19), kruise.max_delay, "5 ms × 2^18 is past 1000 s");
        assert_eq!(kruise.max_delay, Duration::from_secs(1000));
    }

    /// `--rate-limiter-base-delay=500ms --rate-limiter-max-delay=1500ms --rate-limiter-qps=1 --rate-limiter-bucket-size=2`.
    #[tokio::test(start_paused = true)]
    async fn retries_follow_the_rate_limiter_flags() {
        let ms = Duration::from_millis;
        let limits = RetryLimits { base_delay: ms(500), max_delay: ms(1500), qps: 1.0, burst: 2 };
        assert_eq!([1, 2, 3, 4].map(|n| backoff(&limits, n)), [500, 1000, 1500, 1500].map(ms), "doubling from 500 ms, capped at 1.5 s");
        let q = WorkQueue::with_limits(limits, QueueMetrics::default());
        let start = Instant::now();
        for key in ["a", "b", "c"] {
            q.add_rate_limited(key);
        }
        let mut arrivals = Vec::new();
        for _ in 0..3 {
            let item = q.get().await.unwrap();
            arrivals.push((item.key, Instant::now() - start));
        }
        // a and b (due together, in either order) take the bucket's two tokens and wait their
        // backoff; c waits for the next token (1 s at 1/s).
        arrivals.sort_by(|x, y| (x.1, &x.0).cmp(&(y.1, &y.0)));
        let expected = [("a", 500), ("b", 500), ("c", 1000)].map(|(k, t)| (k.to_string(), ms(t)));
        assert_eq!(arrivals, expected);
        q.add_rate_limited("d");
        let item = q.get().await.unwrap();
        assert_eq!((item.key.as_str(), Instant::now() - start), ("d", ms(2000)), "d waits for a token too, past its backoff");
    }

    #[test]
    fn the_retry_bucket_allows_a_burst_of_100_then_10_a_second() {
        let t0 = Instant::now();
        let mut b = RetryBucket::default();
        assert!((0..100).all(|_| b.reserve(t0).is_zero()));
        assert_eq!(b.reserve(t0), Duration::from_millis(100));
        assert_eq!(b.reserve(t0), Duration::from_millis(200), "reservations queue up behind each other");
        let later = t0 + Duration::from_secs(10);
        assert!(b.reserve(later).is_zero(), "the bucket refills at 10 a second");
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_waits_for_the_overall_bucket_when_it_is_empty() {
        let q = WorkQueue::new();
        for i in 0..100 {
            q.add_rate_limited(&format!("k{i}"));
        }
        q.add_rate_limited("late");
        let start = Instant::now();
        for _ in 0..100 {
            assert_ne!(q.get().await.unwrap().key, "late");
        }
        assert_eq!(q.get().await.unwrap().key, "late");
        assert!(Instant::now() - start >= Duration::from_millis(100), "the 101st retry in a burst waits for a token");
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_follow_the_queue() {
        let m = QueueMetrics::default();
        let q = WorkQueue::with_limits(RetryLimits::default(), m.clone());
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!((m.depth.get(), m.adds.get()), (2, 2));
        tokio::time::advance(Duration::from_millis(100)).await;
        let item = q.get().await.unwrap();
        assert_eq!(item.key, "a");
        assert_eq!(m.depth.get(), 1);
        assert_eq!(m.queue_duration.count(), 1);
        assert!((m.queue_duration.sum() - 0.1).abs() < 1e-6);
        tokio::time::advance(Duration::from_millis(250)).await;
        q.done("a");
        assert_eq!(m.work_duration.count(), 1);
        assert!((m.work_duration.sum() - 0.25).abs() < 1e-6);
        q.add_rate_limited("c");
        assert_eq!(m.retries.get(), 1);
        q.get().await.unwrap(); // b
        q.get().await.unwrap(); // c, after its backoff
        assert_eq!((m.depth.get(), m.adds.get()), (0, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn unfinished_work_counts_keys_still_being_processed() {
        let m = QueueMetrics::default();
        let q = WorkQueue::with_limits(RetryLimits::default(), m.clone());
        q.add("slow");
        q.get().await.unwrap();
        tokio::time::advance(Duration::from_secs(3)).await;
        q.add("fast");
        q.get().await.unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        q.publish_unfinished_work();
        assert_eq!((m.unfinished_work.get(), m.longest_running.get()), (5.0, 4.0), "4 s + 1 s in progress; the longest 4 s");
        q.done("slow");
        q.done("fast");
        q.publish_unfinished_work();
        assert_eq!((m.unfinished_work.get(), m.longest_running.get()), (0.0, 0.0));
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
