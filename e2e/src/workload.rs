//! Helpers for e2e tests of CloneSets: a namespace with its own operator, manifests, waiting on
//! status, and a monitor of what happened to the pods in between.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cloneset_operator::api::{CloneSet, CloneSetStatus, keys};
use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

use crate::testenv::{Operator, TestNamespace, install_api, watch_until};

pub const T: Duration = Duration::from_secs(120);

pub struct Env {
    pub ns: TestNamespace,
    pub operator: Operator,
    pub clonesets: Api<CloneSet>,
    pub pods: Api<Pod>,
}

pub async fn env(prefix: &str) -> Env {
    env_with(prefix, &[]).await
}

pub async fn env_with(prefix: &str, flags: &[&str]) -> Env {
    install_api().await.unwrap();
    let ns = TestNamespace::create(prefix).await.unwrap();
    let operator = Operator::start(&ns.name, flags).await.unwrap();
    let clonesets = ns.api();
    let pods = ns.api();
    Env { ns, operator, clonesets, pods }
}

pub fn manifest(name: &str, replicas: i32, image: &str, extra_spec: Value) -> CloneSet {
    let mut v = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": image}]}},
        },
    });
    json_patch::merge(&mut v["spec"], &extra_spec);
    serde_json::from_value(v).unwrap()
}

/// The CloneSet spec change that moves container `main` (as in [`manifest`]) to `image`.
pub fn new_image(image: &str) -> Value {
    json!({"template": {"spec": {"containers": [{"name": "main", "image": image}]}}})
}

impl Env {
    pub async fn create(&self, cs: &CloneSet) {
        self.clonesets.create(&PostParams::default(), cs).await.unwrap();
    }

    pub async fn patch(&self, name: &str, spec: Value) {
        self.clonesets.patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec}))).await.unwrap();
    }

    /// Waits until the CloneSet's status (for the current generation) satisfies `cond`.
    pub async fn wait_status(&self, name: &str, what: &str, cond: impl Fn(&CloneSet) -> bool) -> CloneSet {
        let res = watch_until(&self.clonesets, name, T, |cs| {
            let observed = cs.status.as_ref().is_some_and(|s| s.observed_generation == cs.metadata.generation.unwrap_or(0));
            observed && cond(cs)
        })
        .await;
        res.unwrap_or_else(|e| panic!("{what}: {e:#}\n--- operator log ---\n{}", self.operator.log_tail(40)))
    }

    /// Active (not terminating) pods of a CloneSet.
    pub async fn active_pods(&self, name: &str) -> Vec<Pod> {
        let list = self.pods.list(&ListParams::default().labels(&format!("app={name}"))).await.unwrap();
        list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
    }
}

pub fn st(cs: &CloneSet) -> CloneSetStatus {
    cs.status.clone().unwrap_or_default()
}

pub fn settled(cs: &CloneSet, replicas: i32) -> bool {
    let s = st(cs);
    s.replicas == replicas && s.ready_replicas == replicas && s.available_replicas == replicas
}

pub fn rolled_out(cs: &CloneSet, replicas: i32) -> bool {
    let s = st(cs);
    settled(cs, replicas)
        && s.updated_replicas == replicas
        && s.updated_ready_replicas == replicas
        && s.current_revision == s.update_revision
}

pub fn label<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn condition(p: &Pod, type_: &str) -> Option<String> {
    p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

pub fn names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().map(|p| p.name_any()).collect()
}

/// Watches every pod of a namespace and records the extremes a rollout must respect.
#[derive(Default, Debug)]
pub struct Extremes {
    pub max_active: usize,
    pub min_available: Option<usize>,
    /// The most active pods that were not Ready at one moment.
    pub max_unready: usize,
    pub uids: BTreeSet<String>,
}

pub fn monitor(pods: Api<Pod>, selector: String) -> (Arc<Mutex<Extremes>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Extremes::default()));
    let out = seen.clone();
    let handle = tokio::spawn(async move {
        let mut current: BTreeMap<String, Pod> = BTreeMap::new();
        let mut listed = false;
        let stream = watcher::watcher(pods, watcher::Config::default().labels(&selector));
        futures::pin_mut!(stream);
        while let Ok(Some(ev)) = stream.try_next().await {
            match ev {
                Event::Apply(p) | Event::InitApply(p) => {
                    current.insert(p.name_any(), p);
                }
                Event::Delete(p) => {
                    current.remove(&p.name_any());
                }
                // The initial list arrives pod by pod: judge only complete states.
                Event::Init => {
                    current.clear();
                    listed = false;
                }
                Event::InitDone => listed = true,
            }
            if !listed {
                continue;
            }
            let active: Vec<&Pod> = current.values().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
            let available = active.iter().filter(|p| condition(p, "Ready").as_deref() == Some("True")).count();
            let mut s = out.lock().unwrap();
            s.max_active = s.max_active.max(active.len());
            s.min_available = Some(s.min_available.map_or(available, |m| m.min(available)));
            s.max_unready = s.max_unready.max(active.len() - available);
            s.uids.extend(current.values().filter_map(|p| p.metadata.uid.clone()));
        }
    });
    (seen, handle)
}

/// `extra` over an InPlaceIfPossible update strategy.
pub fn in_place(extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({"updateStrategy": {"type": "InPlaceIfPossible"}});
    json_patch::merge(&mut spec, &extra);
    spec
}

/// Per pod UID: the revision labels it went through (in order) and whether it was ever seen with
/// InPlaceUpdateReady=False and Ready=False at once.
#[derive(Default, Debug)]
pub struct History {
    pub revisions: BTreeMap<String, Vec<String>>,
    pub seen_not_ready_during_update: BTreeSet<String>,
    /// Pod names in the order their revision label first changed.
    pub update_order: Vec<String>,
}

/// Watches the pods `selector` picks and records each one's [`History`].
pub fn watch_pods(pods: Api<Pod>, selector: &str) -> (Arc<Mutex<History>>, tokio::task::JoinHandle<()>) {
    let hist = Arc::new(Mutex::new(History::default()));
    let out = hist.clone();
    let selector = selector.to_string();
    let handle = tokio::spawn(async move {
        let stream = watcher::watcher(pods, watcher::Config::default().labels(&selector));
        futures::pin_mut!(stream);
        while let Ok(Some(ev)) = stream.try_next().await {
            let (Event::Apply(p) | Event::InitApply(p)) = ev else { continue };
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let rev = label(&p, keys::CONTROLLER_REVISION_HASH).unwrap_or_default().to_string();
            let mut h = out.lock().unwrap();
            let revs = h.revisions.entry(uid.clone()).or_default();
            let changed = revs.last() != Some(&rev);
            let first_change = changed && revs.len() == 1;
            if changed {
                revs.push(rev);
            }
            if first_change {
                h.update_order.push(p.name_any());
            }
            if condition(&p, "InPlaceUpdateReady").as_deref() == Some("False") && condition(&p, "Ready").as_deref() == Some("False") {
                h.seen_not_ready_during_update.insert(uid);
            }
        }
    });
    (hist, handle)
}

/// A pod as [`Disturbances`] compares it: per container its image (spec) and its id and restart
/// count (status), and its revision label.
type Seen = (BTreeMap<String, (Option<String>, Option<String>, i32)>, Option<String>);

/// What happened to pods that should have been left alone, from a watch: each pod as first seen
/// (its uid, and per container its image, id and restart count, and its revision), then every
/// departure from that.
#[derive(Default, Debug)]
pub struct Disturbances {
    first: BTreeMap<String, (String, Seen)>,
    /// Pods already terminating when first seen: their end is no departure.
    leaving: BTreeSet<String>,
    listed: bool,
    /// One line per departure: a pod created, deleted or marked for deletion, a container
    /// restarted or replaced, a pod no longer Ready.
    pub seen: Vec<String>,
}

impl Disturbances {
    /// The pods seen when the watch began (name by uid), once it has listed them.
    pub fn pods(&self) -> Option<BTreeMap<String, String>> {
        self.listed.then(|| self.first.iter().map(|(uid, (name, _))| (uid.clone(), name.clone())).collect())
    }

    fn note(&mut self, line: String) {
        if !self.seen.contains(&line) {
            self.seen.push(line);
        }
    }

    fn observe(&mut self, p: &Pod) {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let name = p.name_any();
        let images: BTreeMap<String, Option<String>> =
            p.spec.iter().flat_map(|s| &s.containers).map(|c| (c.name.clone(), c.image.clone())).collect();
        let containers: BTreeMap<String, (Option<String>, Option<String>, i32)> = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.name.clone(), (images.get(&c.name).cloned().flatten(), c.container_id, c.restart_count)))
            .collect();
        let now: Seen = (containers, label(p, keys::CONTROLLER_REVISION_HASH).map(str::to_string));
        if self.leaving.contains(&uid) {
            return;
        }
        let Some((_, was)) = self.first.get(&uid).cloned() else {
            if !self.listed && p.metadata.deletion_timestamp.is_some() {
                self.leaving.insert(uid);
            } else if self.listed {
                self.note(format!("{name} created (uid {uid})"));
            } else {
                self.first.insert(uid, (name, now));
            }
            return;
        };
        if p.metadata.deletion_timestamp.is_some() {
            self.note(format!("{name} marked for deletion"));
        }
        for (container, then) in &was.0 {
            let is = now.0.get(container);
            if is != Some(then) {
                self.note(format!("{name}/{container}: (image, id, restarts) {then:?} became {is:?}"));
            }
        }
        if now.1 != was.1 {
            self.note(format!("{name}: revision {:?} became {:?}", was.1, now.1));
        }
        if condition(p, "Ready").as_deref() != Some("True") {
            self.note(format!("{name} not Ready"));
        }
    }
}

/// Watches the pods `selector` picks from now on and records their [`Disturbances`].
pub fn watch_disturbances(pods: Api<Pod>, selector: &str) -> (Arc<Mutex<Disturbances>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Disturbances::default()));
    let out = seen.clone();
    let selector = selector.to_string();
    let handle = tokio::spawn(async move {
        let stream = watcher::watcher(pods, watcher::Config::default().labels(&selector));
        futures::pin_mut!(stream);
        while let Ok(Some(ev)) = stream.try_next().await {
            let mut d = out.lock().unwrap();
            match ev {
                Event::InitApply(p) | Event::Apply(p) => d.observe(&p),
                Event::Delete(p) if !d.leaving.contains(p.metadata.uid.as_deref().unwrap_or_default()) => {
                    d.note(format!("{} deleted", p.name_any()))
                }
                Event::Delete(_) => {}
                Event::Init => {}
                Event::InitDone => d.listed = true,
            }
        }
    });
    (seen, handle)
}
