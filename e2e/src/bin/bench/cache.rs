//! A watch-fed cache of one kind in one namespace: what the bench judges readiness and status
//! from, the same way for every controller and baseline. It counts the watch events it sees
//! (the large scenario's CPU per 1,000 pod events) and wakes waiters on change instead of
//! polling the apiserver.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt as _;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use crate::TIMEOUT;

/// A predicate on one object, with the channel to tell its waiter when it first holds.
type Waiter<K> = (Box<dyn Fn(&K) -> bool + Send>, oneshot::Sender<Instant>);

pub struct Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    pub store: Store<K>,
    namespace: String,
    /// The longest one wait may take.
    timeout: Duration,
    /// Apply and Delete events seen since the start (the initial list not counted).
    events: Arc<AtomicU64>,
    /// Bumped on every event, so aggregate waits re-check only after a change.
    changed: tokio::sync::watch::Receiver<()>,
    waiters: Arc<Mutex<HashMap<String, Vec<Waiter<K>>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default + Send + Sync,
{
    pub async fn start(api: Api<K>, namespace: &str) -> anyhow::Result<Self> {
        let (store, writer) = reflector::store();
        let events = Arc::new(AtomicU64::new(0));
        let (tx, changed) = tokio::sync::watch::channel(());
        let waiters: Arc<Mutex<HashMap<String, Vec<Waiter<K>>>>> = Arc::default();
        let stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            // Nothing the bench judges reads managedFields; dropped, 100,000 cached pods take
            // gigabytes less of the machine the control plane under test runs on.
            .modify(|obj| obj.meta_mut().managed_fields = None)
            .reflect(writer);
        let (count, wake, reader) = (events.clone(), waiters.clone(), store.clone());
        let ns = namespace.to_string();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                // The reflector has stored the object before it yields the event (a relisted one
                // at InitDone), so a waiter registering after this point finds it in the store.
                match ev {
                    Ok(Event::Apply(obj)) => {
                        count.fetch_add(1, Ordering::Relaxed);
                        wake_waiters(&wake, &obj.name_any(), &obj);
                    }
                    Ok(Event::Delete(_)) => {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Event::InitDone) => {
                        let names: Vec<String> = wake.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
                        for name in names {
                            if let Some(obj) = reader.get(&ObjectRef::new(&name).within(&ns)) {
                                wake_waiters(&wake, &name, &obj);
                            }
                        }
                    }
                    _ => {}
                }
                tx.send_replace(());
            }
        });
        store.wait_until_ready().await?;
        Ok(Self { store, namespace: namespace.to_string(), timeout: TIMEOUT, events, changed, waiters, task })
    }

    /// The same cache with waits of up to `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Apply and Delete events seen so far.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// The cached object `name`.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name).within(&self.namespace))
    }

    /// Waits until the object `name` satisfies `pred`, returning when that was first seen.
    pub async fn wait_object(&self, name: &str, what: &str, pred: impl Fn(&K) -> bool + Send + 'static) -> anyhow::Result<Instant> {
        let rx = {
            let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            if self.get(name).is_some_and(|o| pred(&o)) {
                return Ok(Instant::now());
            }
            let (tx, rx) = oneshot::channel();
            w.entry(name.to_string()).or_default().push((Box::new(pred), tx));
            rx
        };
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(at)) => Ok(at),
            Ok(Err(_)) => bail!("the watch of {name} ended"),
            Err(_) => bail!("timed out after {:?} waiting for {name} {what}", self.timeout),
        }
    }

    /// Waits until `check` over all cached objects returns `Ok`; `Err(progress)` means not yet
    /// (named in the timeout message). Checks after each change, but at most every 20 ms (every
    /// 10 µs per cached object for large caches, so scanning stays a small share of a core).
    pub async fn wait_all<T>(&self, what: &str, mut check: impl FnMut(&[Arc<K>]) -> Result<T, String>) -> anyhow::Result<(T, Instant)> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut changed = self.changed.clone();
        loop {
            changed.borrow_and_update();
            let all = self.store.state();
            let progress = match check(&all) {
                Ok(t) => return Ok((t, Instant::now())),
                Err(p) => p,
            };
            let gap = Duration::from_millis(20).max(Duration::from_micros(10 * all.len() as u64));
            drop(all);
            tokio::time::sleep(gap).await;
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => bail!("the watch ended while waiting for {what} ({progress})"),
                Err(_) => bail!("timed out after {:?} waiting for {what} ({progress})", self.timeout),
            }
        }
    }

    /// Waits until at least `n` objects satisfy `pred`.
    pub async fn wait_count(&self, n: usize, what: &str, pred: impl Fn(&K) -> bool) -> anyhow::Result<Instant> {
        let (_, at) = self
            .wait_all(what, |all| {
                let count = all.iter().filter(|o| pred(o)).count();
                if count >= n { Ok(()) } else { Err(format!("{count} of {n}")) }
            })
            .await?;
        Ok(at)
    }
}

/// Tells the waiters on `name` whose predicate `obj` satisfies, keeping the others.
fn wake_waiters<K>(waiters: &Mutex<HashMap<String, Vec<Waiter<K>>>>, name: &str, obj: &K) {
    let mut w = waiters.lock().unwrap_or_else(|e| e.into_inner());
    let Some(list) = w.get_mut(name) else { return };
    let now = Instant::now();
    for (pred, tx) in std::mem::take(list) {
        if pred(obj) {
            let _ = tx.send(now);
        } else if !tx.is_closed() {
            list.push((pred, tx));
        }
    }
    if list.is_empty() {
        w.remove(name);
    }
}

impl<K> Drop for Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}
