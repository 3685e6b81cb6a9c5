//! The cached form of a pod: only what the controller reads, in a layout that costs about a
//! tenth of a `Pod`. A decoded `Pod` is large even when almost empty (the struct alone is 2.2
//! KB, each container another 2.1 KB, each condition 160 bytes, and every label a map node and
//! two strings), so at 20,000 pods the cache, not the work, sized the operator. Here strings
//! that repeat across pods (namespace, labels, owner, image, node, condition types and
//! reasons) are shared through an [`Interner`], and so is what the pods of one revision have
//! alike (their containers, owners and readiness gates: a [`PodShape`]). The few fields that
//! are rarely set are boxed, and a reconcile reads its own CloneSet's pods through [`PodRead`]
//! ([`ReadPod`]), expanding one back into a `Pod` ([`CompactPod::expand`]) only where a
//! decision or a write needs all of it.
//!
//! What is kept is what [`keep_read_fields`](super::fields::keep_read_fields) keeps, field for
//! field: expanding a compacted pod gives exactly the stripped pod
//! (`a_compacted_pod_expands_to_the_stripped_pod`).

use std::collections::{BTreeMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{
    Container, ContainerResizePolicy, ContainerState, ContainerStateRunning, ContainerStatus, EnvVar, Pod, PodCondition, PodReadinessGate,
    PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use crate::api::keys;
use crate::core::order::is_sidecar_restart_policy;
use crate::core::pod_read::{ConditionRef, ContainerStatusRef, PodRead};
use crate::pod_cache::fields::keep_read_fields;
use crate::pod_cache::wire::WirePod;

/// Shares equal values between cached objects. Entries nobody else holds any more are dropped
/// once the set has grown by an eighth (at least 1,024) since the last sweep, so unused entries
/// stay a small share of it. Values unique to one pod version (an in-place update's state
/// annotation) are pooled too: a sweep only at doubling let 4,000 pods' churn pile up unused
/// values for hours.
///
/// Hashed with foldhash, seeded per pool: every string of every pod event is looked up here,
/// and std's SipHash made that 2.8% of the CPU creating 4,000 pods.
struct Pool<T: ?Sized> {
    set: HashSet<Arc<T>, foldhash::fast::RandomState>,
    swept_at: usize,
}

impl<T: ?Sized> Default for Pool<T> {
    fn default() -> Self {
        Self { set: HashSet::default(), swept_at: 0 }
    }
}

impl<T: ?Sized + Hash + Eq> Pool<T> {
    fn share(&mut self, value: &T, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        match self.set.get(value) {
            Some(shared) => shared.clone(),
            None => self.insert(make()),
        }
    }

    fn insert(&mut self, shared: Arc<T>) -> Arc<T> {
        if self.set.len() >= self.swept_at + (self.swept_at / 8).max(1024) {
            self.set.retain(|s| Arc::strong_count(s) > 1);
            self.swept_at = self.set.len();
        }
        self.set.insert(shared.clone());
        shared
    }
}

/// The pools compaction shares strings and small repeated structures through (owned by the
/// one task that fills the cache).
#[derive(Default)]
pub struct Interner {
    strings: Pool<str>,
    labels: Pool<(Arc<str>, Arc<str>)>,
    owners: Pool<CompactOwner>,
    conditions: Pool<ConditionSaid>,
    shapes: Pool<PodShape>,
    images: Pool<StatusImage>,
}

impl Interner {
    pub fn get(&mut self, s: &str) -> Arc<str> {
        self.strings.share(s, || Arc::from(s))
    }

    fn opt(&mut self, s: Option<String>) -> Option<Arc<str>> {
        s.map(|s| self.get(&s))
    }

    fn sized<T: Hash + Eq>(pool: &mut Pool<T>, value: T) -> Arc<T> {
        match pool.set.get(&value) {
            Some(shared) => shared.clone(),
            None => pool.insert(Arc::new(value)),
        }
    }
}

/// A time to the nanosecond, 8 bytes instead of 24 (`None` is `i64::MIN`): every time from 1677
/// to 2262. Kubernetes writes times to the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Stamp(i64);

impl Stamp {
    fn new(t: Option<Time>) -> Self {
        Self(t.map_or(i64::MIN, |t| i64::try_from(t.0.as_nanosecond()).unwrap_or(i64::MAX)))
    }

    fn expand(self) -> Option<Time> {
        (self.0 != i64::MIN)
            .then(|| Time(k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(self.0)).unwrap_or(k8s_openapi::jiff::Timestamp::MAX)))
    }
}

/// A value that is mostly absent or empty: boxed only otherwise.
#[derive(Debug, PartialEq)]
enum Sparse<T> {
    Absent,
    Empty,
    Boxed(Box<T>),
}

impl<T: Default + PartialEq + Clone> Sparse<T> {
    fn new(value: Option<T>) -> Self {
        match value {
            None => Self::Absent,
            Some(v) if v == T::default() => Self::Empty,
            Some(v) => Self::Boxed(Box::new(v)),
        }
    }

    fn expand(&self) -> Option<T> {
        match self {
            Self::Absent => None,
            Self::Empty => Some(T::default()),
            Self::Boxed(v) => Some(v.as_ref().clone()),
        }
    }
}

fn string(s: &Arc<str>) -> String {
    s.to_string()
}

fn opt_string(s: &Option<Arc<str>>) -> Option<String> {
    s.as_ref().map(string)
}

/// `items` in a block of their own, of exactly their size. Collecting a decoded `Vec`'s items
/// straight into a boxed slice reuses the decoded block in place and shrinks it: the cached
/// slice keeps the block's head, and its tail becomes a free hole behind it that only a smaller
/// block can fill. A decoded list of one container status has room for four (3,008 bytes), so
/// each pod event could leave a hole of about 2.9 KB behind a block the cache keeps.
fn fresh<T>(items: impl ExactSizeIterator<Item = T>) -> Box<[T]> {
    let mut kept = Vec::with_capacity(items.len());
    kept.extend(items);
    kept.into_boxed_slice()
}

/// Where one of a pod's own strings is in its [`CompactPod::texts`].
#[derive(Clone, Copy, Debug)]
struct Span {
    /// `u32::MAX` when the string is absent. A pod is at most a few MiB (etcd's request limit).
    start: u32,
    len: u32,
}

impl Span {
    const ABSENT: Self = Self { start: u32::MAX, len: 0 };

    fn read(self, texts: &str) -> Option<&str> {
        (self.start != u32::MAX).then(|| &texts[self.start as usize..][..self.len as usize])
    }

    fn expand(self, texts: &str) -> Option<String> {
        self.read(texts).map(str::to_string)
    }
}

/// Writes the strings unique to one pod version (UID, resourceVersion, pod IP, container IDs)
/// one after another, to be kept as one block instead of one block each (three blocks and 80
/// bytes of glibc chunks less per pod in `tests/cache_footprint.rs`).
struct Texts(String);

impl Texts {
    fn new() -> Self {
        Self(String::with_capacity(256))
    }

    fn add(&mut self, s: Option<String>) -> Span {
        let Some(s) = s else { return Span::ABSENT };
        let start = self.0.len() as u32;
        self.0.push_str(&s);
        Span { start, len: s.len() as u32 }
    }

    /// The strings in a block of exactly their size (see [`fresh`]).
    fn finish(self) -> Box<str> {
        Box::from(self.0.as_str())
    }
}

type Pairs = Box<[Arc<(Arc<str>, Arc<str>)>]>;

fn pairs(map: Option<BTreeMap<String, String>>, i: &mut Interner) -> Option<Pairs> {
    map.map(|m| {
        m.into_iter()
            .map(|(k, v)| {
                let pair = (i.get(&k), i.get(&v));
                Interner::sized(&mut i.labels, pair)
            })
            .collect()
    })
}

fn map(pairs: &Option<Pairs>) -> Option<BTreeMap<String, String>> {
    pairs.as_ref().map(|p| p.iter().map(|kv| (string(&kv.0), string(&kv.1))).collect())
}

/// A pod as the cache holds it (see the module documentation).
#[derive(Debug)]
pub struct CompactPod {
    pub name: Arc<str>,
    /// What the pod has alike with the other pods of its CloneSet's revision.
    shape: Arc<PodShape>,
    /// The strings unique to this pod version, which the spans below and in the status point into.
    texts: Box<str>,
    uid: Span,
    resource_version: Span,
    creation_timestamp: Stamp,
    labels: Option<Pairs>,
    annotations: Option<Pairs>,
    /// The rest of the metadata (deletion, finalizers), when any of it is set.
    meta_rest: Option<Box<ObjectMeta>>,
    /// `spec.nodeName` (set only with a spec): pods of one CloneSet spread over many nodes.
    node_name: Option<Arc<str>>,
    status: Option<CompactStatus>,
}

/// What the pods of one CloneSet revision in one phase have alike, shared through the interner:
/// each pod holds one pointer instead of its own blocks for its containers, owners, readiness
/// gates and the fields beside them (with the shared conditions and images below, the cached
/// pod fell from 1,314 to 818 bytes of heap in `tests/cache_footprint.rs`). Nothing here differs from node to
/// node, so pods of a CloneSet spread over many nodes still share it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PodShape {
    namespace: Arc<str>,
    generate_name: Option<Arc<str>>,
    generation: Option<i64>,
    owners: Box<[Arc<CompactOwner>]>,
    /// Whether `ownerReferences` was present at all (an empty list and none expand differently).
    has_owner_list: bool,
    spec: Option<SpecShape>,
    /// `status.phase`, `.qosClass` and `.observedGeneration` (all `None` without a status).
    phase: Option<Arc<str>>,
    qos_class: Option<Arc<str>>,
    observed_generation: Option<i64>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CompactOwner {
    pub api_version: Arc<str>,
    pub kind: Arc<str>,
    pub name: Arc<str>,
    pub uid: Arc<str>,
    pub controller: Option<bool>,
    block_owner_deletion: Option<bool>,
}

/// The spec but `nodeName`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SpecShape {
    containers: Box<[CompactContainer]>,
    init_containers: Option<Box<[CompactContainer]>>,
    readiness_gates: Option<Box<[Arc<str>]>>,
}

#[derive(Debug, PartialEq)]
struct CompactContainer {
    name: Arc<str>,
    image: Option<Arc<str>>,
    resources: Sparse<ResourceRequirements>,
    resize_policy: Option<Box<[ContainerResizePolicy]>>,
    restart_policy: Option<Arc<str>>,
    env: Option<Box<[EnvVar]>>,
}

// Every field is strings, maps and lists of them, whose equality is an equivalence.
impl Eq for CompactContainer {}

impl Hash for CompactContainer {
    /// By name and image: equal containers hash alike, and the rest seldom tells them apart.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.name, &self.image).hash(state);
    }
}

/// The status but what [`PodShape`] holds.
#[derive(Debug)]
struct CompactStatus {
    conditions: Option<Box<[CompactCondition]>>,
    container_statuses: Option<Box<[CompactContainerStatus]>>,
    init_container_statuses: Option<Box<[CompactContainerStatus]>>,
    host_ip: Option<Arc<str>>,
    pod_ip: Span,
    start_time: Stamp,
    /// Every other status field (message, reason, resize, ...), when any is set.
    rest: Option<Box<PodStatus>>,
}

/// A condition: what it says is shared, when it last changed is the pod's own.
#[derive(Debug, PartialEq)]
struct CompactCondition {
    said: Arc<ConditionSaid>,
    last_transition_time: Stamp,
}

/// What a condition says, the same for many pods; with the fields that seldom differ between
/// them (a probe time is rarely set, the observed generation is the pod's).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ConditionSaid {
    type_: Arc<str>,
    status: Arc<str>,
    reason: Option<Arc<str>>,
    message: Option<Arc<str>>,
    last_probe_time: Stamp,
    observed_generation: Option<i64>,
}

/// A container state: most are absent, empty or running since a time.
#[derive(Debug, PartialEq)]
enum CompactState {
    Absent,
    Empty,
    Running(Stamp),
    Other(Box<ContainerState>),
}

#[derive(Debug)]
struct CompactContainerStatus {
    image: Arc<StatusImage>,
    container_id: Span,
    ready: bool,
    started: Option<bool>,
    restart_count: i32,
    state: CompactState,
    last_state: CompactState,
    resources: Sparse<ResourceRequirements>,
    /// Every other field (allocated resources, stop signal, ...), when any is set.
    rest: Option<Box<ContainerStatus>>,
}

/// A container status's name, image and image ID: the same in every pod of a revision.
#[derive(Debug, PartialEq, Eq, Hash)]
struct StatusImage {
    name: Arc<str>,
    image: Arc<str>,
    image_id: Arc<str>,
}

impl CompactState {
    fn new(state: Option<ContainerState>) -> Self {
        match state {
            None => Self::Absent,
            Some(ContainerState { running: None, terminated: None, waiting: None }) => Self::Empty,
            Some(ContainerState { running: Some(ContainerStateRunning { started_at }), terminated: None, waiting: None }) => {
                Self::Running(Stamp::new(started_at))
            }
            Some(other) => Self::Other(Box::new(other)),
        }
    }

    fn expand(&self) -> Option<ContainerState> {
        match self {
            Self::Absent => None,
            Self::Empty => Some(ContainerState::default()),
            Self::Running(at) => {
                Some(ContainerState { running: Some(ContainerStateRunning { started_at: at.expand() }), ..Default::default() })
            }
            Self::Other(s) => Some(s.as_ref().clone()),
        }
    }
}

/// `Some(boxed)` unless `value` is its type's default.
fn rest<T: Default + PartialEq>(value: T) -> Option<Box<T>> {
    (value != T::default()).then(|| Box::new(value))
}

impl CompactContainer {
    fn new(c: Container, i: &mut Interner) -> Self {
        let Container { name, image, resources, resize_policy, restart_policy, env, .. } = c;
        Self {
            name: i.get(&name),
            image: i.opt(image),
            resources: Sparse::new(resources),
            resize_policy: resize_policy.map(|p| fresh(p.into_iter())),
            restart_policy: i.opt(restart_policy),
            env: env.map(|e| fresh(e.into_iter())),
        }
    }

    fn expand(&self) -> Container {
        Container {
            name: string(&self.name),
            image: opt_string(&self.image),
            resources: self.resources.expand(),
            resize_policy: self.resize_policy.as_ref().map(|r| r.to_vec()),
            restart_policy: opt_string(&self.restart_policy),
            env: self.env.as_ref().map(|e| e.to_vec()),
            ..Default::default()
        }
    }
}

impl CompactCondition {
    fn new(c: PodCondition, i: &mut Interner) -> Self {
        // Every field, by name: a field added to PodCondition must be added here.
        let PodCondition { type_, status, reason, message, last_probe_time, last_transition_time, observed_generation } = c;
        let said = ConditionSaid {
            type_: i.get(&type_),
            status: i.get(&status),
            reason: i.opt(reason),
            message: i.opt(message),
            last_probe_time: Stamp::new(last_probe_time),
            observed_generation,
        };
        Self { said: Interner::sized(&mut i.conditions, said), last_transition_time: Stamp::new(last_transition_time) }
    }

    fn expand(&self) -> PodCondition {
        let said = &self.said;
        PodCondition {
            type_: string(&said.type_),
            status: string(&said.status),
            reason: opt_string(&said.reason),
            message: opt_string(&said.message),
            last_probe_time: said.last_probe_time.expand(),
            last_transition_time: self.last_transition_time.expand(),
            observed_generation: said.observed_generation,
        }
    }
}

impl CompactContainerStatus {
    fn new(mut s: ContainerStatus, i: &mut Interner, texts: &mut Texts) -> Self {
        let image = StatusImage {
            name: i.get(&std::mem::take(&mut s.name)),
            image: i.get(&std::mem::take(&mut s.image)),
            image_id: i.get(&std::mem::take(&mut s.image_id)),
        };
        Self {
            image: Interner::sized(&mut i.images, image),
            container_id: texts.add(s.container_id.take()),
            ready: std::mem::take(&mut s.ready),
            started: s.started.take(),
            restart_count: std::mem::take(&mut s.restart_count),
            state: CompactState::new(s.state.take()),
            last_state: CompactState::new(s.last_state.take()),
            resources: Sparse::new(s.resources.take()),
            rest: rest(s),
        }
    }

    fn expand(&self, texts: &str) -> ContainerStatus {
        ContainerStatus {
            name: string(&self.image.name),
            image: string(&self.image.image),
            image_id: string(&self.image.image_id),
            container_id: self.container_id.expand(texts),
            ready: self.ready,
            started: self.started,
            restart_count: self.restart_count,
            state: self.state.expand(),
            last_state: self.last_state.expand(),
            resources: self.resources.expand(),
            ..self.rest.as_deref().cloned().unwrap_or_default()
        }
    }
}

impl CompactContainerStatus {
    /// Equal, its own strings read from `texts` and the other's from `other_texts`.
    fn reads_as(&self, texts: &str, other: &Self, other_texts: &str) -> bool {
        self.image == other.image
            && self.container_id.read(texts) == other.container_id.read(other_texts)
            && self.ready == other.ready
            && self.started == other.started
            && self.restart_count == other.restart_count
            && self.state == other.state
            && self.last_state == other.last_state
            && self.resources == other.resources
            && self.rest == other.rest
    }
}

/// [`CompactContainerStatus::reads_as`] for lists of them.
fn statuses_read_alike(
    a: &Option<Box<[CompactContainerStatus]>>,
    texts: &str,
    b: &Option<Box<[CompactContainerStatus]>>,
    b_texts: &str,
) -> bool {
    both_alike(a.as_deref(), b.as_deref(), |a, b| a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.reads_as(texts, b, b_texts)))
}

/// Both absent, or both present and `alike`.
fn both_alike<T: ?Sized>(a: Option<&T>, b: Option<&T>, alike: impl FnOnce(&T, &T) -> bool) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => alike(a, b),
        _ => false,
    }
}

fn statuses(s: Option<Vec<ContainerStatus>>, i: &mut Interner, texts: &mut Texts) -> Option<Box<[CompactContainerStatus]>> {
    s.map(|s| fresh(s.into_iter().map(|s| CompactContainerStatus::new(s, i, texts))))
}

fn expand_statuses(s: &Option<Box<[CompactContainerStatus]>>, texts: &str) -> Option<Vec<ContainerStatus>> {
    s.as_ref().map(|s| s.iter().map(|s| s.expand(texts)).collect())
}

impl CompactStatus {
    /// Compacts `s` once [`PodShape`]'s fields are taken out of it.
    fn new(mut s: PodStatus, i: &mut Interner, texts: &mut Texts) -> Self {
        Self {
            conditions: s.conditions.take().map(|cs| fresh(cs.into_iter().map(|c| CompactCondition::new(c, i)))),
            container_statuses: statuses(s.container_statuses.take(), i, texts),
            init_container_statuses: statuses(s.init_container_statuses.take(), i, texts),
            host_ip: i.opt(s.host_ip.take()),
            pod_ip: texts.add(s.pod_ip.take()),
            start_time: Stamp::new(s.start_time.take()),
            rest: rest(s),
        }
    }

    /// Equal, its own strings read from `texts` and the other's from `other_texts`.
    fn reads_as(&self, texts: &str, other: &Self, other_texts: &str) -> bool {
        self.conditions == other.conditions
            && statuses_read_alike(&self.container_statuses, texts, &other.container_statuses, other_texts)
            && statuses_read_alike(&self.init_container_statuses, texts, &other.init_container_statuses, other_texts)
            && self.host_ip == other.host_ip
            && self.pod_ip.read(texts) == other.pod_ip.read(other_texts)
            && self.start_time == other.start_time
            && self.rest == other.rest
    }

    fn expand(&self, shape: &PodShape, texts: &str) -> PodStatus {
        PodStatus {
            phase: opt_string(&shape.phase),
            conditions: self.conditions.as_ref().map(|cs| cs.iter().map(CompactCondition::expand).collect()),
            container_statuses: expand_statuses(&self.container_statuses, texts),
            init_container_statuses: expand_statuses(&self.init_container_statuses, texts),
            host_ip: opt_string(&self.host_ip),
            pod_ip: self.pod_ip.expand(texts),
            qos_class: opt_string(&shape.qos_class),
            start_time: self.start_time.expand(),
            observed_generation: shape.observed_generation,
            ..self.rest.as_deref().cloned().unwrap_or_default()
        }
    }
}

impl CompactPod {
    /// Compacts `pod`, dropping what [`keep_read_fields`] drops.
    pub fn new(mut pod: Pod, i: &mut Interner) -> Self {
        keep_read_fields(&mut pod);
        Self::stripped(pod, i)
    }

    /// Compacts a pod event: decoded as a [`WirePod`], it already is what [`keep_read_fields`]
    /// leaves (`recorded_pods_decode_as_they_are_stripped`), so it is not stripped again.
    pub fn from_wire(WirePod(pod): WirePod, i: &mut Interner) -> Self {
        Self::stripped(pod, i)
    }

    fn stripped(pod: Pod, i: &mut Interner) -> Self {
        let Pod { metadata: mut m, spec, status } = pod;
        // Never kept. The watch leaves an empty list where the apiserver sent entries: kept, it
        // would box the whole rest of the metadata for every pod (about 360 bytes each).
        m.managed_fields = None;
        let owner_list = m.owner_references.take();
        let has_owner_list = owner_list.is_some();
        let owners = owner_list.map_or_else(Box::default, |list| {
            fresh(list.into_iter().map(|o| {
                let OwnerReference { api_version, kind, name, uid, controller, block_owner_deletion } = o;
                let owner = CompactOwner {
                    api_version: i.get(&api_version),
                    kind: i.get(&kind),
                    name: i.get(&name),
                    uid: i.get(&uid),
                    controller,
                    block_owner_deletion,
                };
                Interner::sized(&mut i.owners, owner)
            }))
        });
        let mut node_name = None;
        let spec = spec.map(|s| {
            let PodSpec { containers, init_containers, readiness_gates, node_name: node, .. } = s;
            node_name = i.opt(node);
            SpecShape {
                containers: fresh(containers.into_iter().map(|c| CompactContainer::new(c, i))),
                init_containers: init_containers.map(|cs| fresh(cs.into_iter().map(|c| CompactContainer::new(c, i)))),
                readiness_gates: readiness_gates.map(|gs| fresh(gs.into_iter().map(|g| i.get(&g.condition_type)))),
            }
        });
        let mut texts = Texts::new();
        let uid = texts.add(m.uid.take());
        let resource_version = texts.add(m.resource_version.take());
        let (mut phase, mut qos_class, mut observed_generation) = (None, None, None);
        let status = status.map(|mut s| {
            (phase, qos_class, observed_generation) = (i.opt(s.phase.take()), i.opt(s.qos_class.take()), s.observed_generation.take());
            CompactStatus::new(s, i, &mut texts)
        });
        let shape = PodShape {
            namespace: i.get(&m.namespace.take().unwrap_or_default()),
            generate_name: i.opt(m.generate_name.take()),
            generation: m.generation.take(),
            owners,
            has_owner_list,
            spec,
            phase,
            qos_class,
            observed_generation,
        };
        Self {
            // Unique to the pod: not worth a pool entry.
            name: Arc::from(m.name.take().unwrap_or_default()),
            shape: Interner::sized(&mut i.shapes, shape),
            texts: texts.finish(),
            uid,
            resource_version,
            creation_timestamp: Stamp::new(m.creation_timestamp.take()),
            labels: pairs(m.labels.take(), i),
            annotations: pairs(m.annotations.take(), i),
            meta_rest: rest(m),
            node_name,
            status,
        }
    }

    /// The pod as [`keep_read_fields`] leaves it.
    pub fn expand(&self) -> Pod {
        let shape = &*self.shape;
        let owners = shape.owners.iter().map(|o| OwnerReference {
            api_version: string(&o.api_version),
            kind: string(&o.kind),
            name: string(&o.name),
            uid: string(&o.uid),
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        });
        let name = (!self.name.is_empty()).then(|| string(&self.name));
        let namespace = (!shape.namespace.is_empty()).then(|| string(&shape.namespace));
        Pod {
            metadata: ObjectMeta {
                name,
                namespace,
                uid: self.uid.expand(&self.texts),
                resource_version: self.resource_version.expand(&self.texts),
                generate_name: opt_string(&shape.generate_name),
                creation_timestamp: self.creation_timestamp.expand(),
                generation: shape.generation,
                labels: map(&self.labels),
                annotations: map(&self.annotations),
                owner_references: shape.has_owner_list.then(|| owners.collect()),
                ..self.meta_rest.as_deref().cloned().unwrap_or_default()
            },
            spec: shape.spec.as_ref().map(|s| PodSpec {
                containers: s.containers.iter().map(CompactContainer::expand).collect(),
                init_containers: s.init_containers.as_ref().map(|cs| cs.iter().map(CompactContainer::expand).collect()),
                readiness_gates: s
                    .readiness_gates
                    .as_ref()
                    .map(|gs| gs.iter().map(|g| PodReadinessGate { condition_type: string(g) }).collect()),
                node_name: opt_string(&self.node_name),
                ..Default::default()
            }),
            status: self.status.as_ref().map(|s| s.expand(shape, &self.texts)),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.shape.namespace
    }

    /// `metadata.uid`, empty when absent.
    pub fn uid(&self) -> &str {
        self.uid.read(&self.texts).unwrap_or_default()
    }

    /// Whether this version of the pod reads as `older` does to every decision: all that is
    /// kept is equal but the resourceVersion and the annotations no decision reads (those not in
    /// [`keys::READ_POD_ANNOTATIONS`]). Labels are all compared: a selector or a lifecycle hook
    /// can name any. Shared parts are compared by pointer first, so an update that changed one
    /// annotation costs a few comparisons.
    pub fn reads_as(&self, older: &Self) -> bool {
        let (texts, older_texts) = (&*self.texts, &*older.texts);
        self.name == older.name
            && self.shape == older.shape
            && self.uid.read(texts) == older.uid.read(older_texts)
            && self.creation_timestamp == older.creation_timestamp
            && self.labels == older.labels
            && self.annotations.is_some() == older.annotations.is_some()
            && read_annotations(&self.annotations).eq(read_annotations(&older.annotations))
            && self.meta_rest == older.meta_rest
            && self.node_name == older.node_name
            && both_alike(self.status.as_ref(), older.status.as_ref(), |a, b| a.reads_as(texts, b, older_texts))
    }

    /// Whether the pod is being deleted.
    pub fn is_terminating(&self) -> bool {
        self.meta_rest.as_ref().is_some_and(|m| m.deletion_timestamp.is_some())
    }

    fn container(&self, name: &str) -> Option<&CompactContainer> {
        self.shape.spec.as_ref()?.containers.iter().find(|c| &*c.name == name)
    }
}

/// The annotations of `pairs` a decision reads, in key order.
fn read_annotations(pairs: &Option<Pairs>) -> impl Iterator<Item = &Arc<(Arc<str>, Arc<str>)>> {
    pairs.as_deref().unwrap_or_default().iter().filter(|kv| keys::is_read_pod_annotation(&kv.0))
}

/// A value of `pairs` (sorted by key, as they came from a `BTreeMap`).
fn pair_value<'a>(pairs: &'a Option<Pairs>, key: &str) -> Option<&'a str> {
    let pairs = pairs.as_deref()?;
    // A pod's few labels are read by a scan that compares lengths first (held beside each key's
    // pointer), so most keys are passed without reading their text; a binary search reads the
    // text of every key it visits. Every reconcile reads several labels of each of its pods.
    if pairs.len() <= LINEAR_PAIRS {
        return pairs.iter().find(|kv| kv.0.len() == key.len() && *kv.0 == *key).map(|kv| &*kv.1);
    }
    pairs.binary_search_by(|kv| (*kv.0).cmp(key)).ok().map(|i| &*pairs[i].1)
}

/// Up to this many labels (or annotations), [`pair_value`] scans instead of searching.
const LINEAR_PAIRS: usize = 12;

/// A cached pod as one reconcile reads it: through its compact form, expanded into a `Pod`
/// only when a decision or a write needs the whole of it, and then once.
pub struct ReadPod {
    compact: Arc<CompactPod>,
    /// Boxed: a `Pod` is about 2 KB, and a pass moves its `ReadPod`s around (partitioned,
    /// filtered), almost none of them ever expanded.
    full: OnceLock<Box<Pod>>,
}

impl ReadPod {
    pub fn new(compact: Arc<CompactPod>) -> Self {
        Self { compact, full: OnceLock::new() }
    }

    /// Whether the whole pod was built (for tests of what a pass expands).
    pub fn was_expanded(&self) -> bool {
        self.full.get().is_some()
    }
}

impl PodRead for ReadPod {
    fn name(&self) -> &str {
        &self.compact.name
    }

    fn pod_uid(&self) -> &str {
        self.compact.uid.read(&self.compact.texts).unwrap_or_default()
    }

    fn pod_resource_version(&self) -> Option<&str> {
        self.compact.resource_version.read(&self.compact.texts)
    }

    fn label(&self, key: &str) -> Option<&str> {
        pair_value(&self.compact.labels, key)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        debug_assert!(keys::is_read_pod_annotation(key), "{key} is read: add it to keys::READ_POD_ANNOTATIONS");
        pair_value(&self.compact.annotations, key)
    }

    fn phase(&self) -> &str {
        self.compact.shape.phase.as_deref().unwrap_or_default()
    }

    fn is_terminating(&self) -> bool {
        self.compact.is_terminating()
    }

    fn condition(&self, type_: &str) -> Option<ConditionRef<'_>> {
        let c = self.compact.status.as_ref()?.conditions.as_ref()?.iter().find(|c| &*c.said.type_ == type_)?;
        Some(ConditionRef {
            status: &c.said.status,
            reason: c.said.reason.as_deref(),
            message: c.said.message.as_deref(),
            last_transition_time: c.last_transition_time.expand().map(|t| t.0),
        })
    }

    fn has_readiness_gate(&self, type_: &str) -> bool {
        self.compact.shape.spec.as_ref().and_then(|s| s.readiness_gates.as_ref()).is_some_and(|g| g.iter().any(|g| &**g == type_))
    }

    fn container_status(&self, name: &str) -> Option<ContainerStatusRef<'_>> {
        let s = self.compact.status.as_ref()?.container_statuses.as_ref()?.iter().find(|s| &*s.image.name == name)?;
        Some(ContainerStatusRef { image: &s.image.image, image_id: &s.image.image_id })
    }

    fn container_image(&self, name: &str) -> Option<&str> {
        self.compact.container(name)?.image.as_deref()
    }

    fn node_name(&self) -> &str {
        self.compact.node_name.as_deref().unwrap_or_default()
    }

    fn creation_timestamp(&self) -> Option<k8s_openapi::jiff::Timestamp> {
        self.compact.creation_timestamp.expand().map(|t| t.0)
    }

    fn max_restarts(&self) -> (i32, i32) {
        let Some(status) = self.compact.status.as_ref() else { return (0, 0) };
        let most = |statuses: Option<&[CompactContainerStatus]>, counted: &dyn Fn(&str) -> bool| {
            statuses.unwrap_or_default().iter().filter(|s| counted(&s.image.name)).map(|s| s.restart_count).fold(0, i32::max)
        };
        let sidecars = self.compact.shape.spec.as_ref().and_then(|s| s.init_containers.as_deref()).unwrap_or_default();
        let is_sidecar = |name: &str| sidecars.iter().any(|c| &*c.name == name && is_sidecar_restart_policy(c.restart_policy.as_deref()));
        (most(status.container_statuses.as_deref(), &|_| true), most(status.init_container_statuses.as_deref(), &is_sidecar))
    }

    fn has_finalizer(&self, finalizer: &str) -> bool {
        self.compact.meta_rest.as_ref().and_then(|m| m.finalizers.as_ref()).is_some_and(|f| f.iter().any(|x| x == finalizer))
    }

    fn full(&self) -> &Pod {
        self.full.get_or_init(|| Box::new(self.compact.expand()))
    }

    fn whole(&self) -> std::borrow::Cow<'_, Pod> {
        match self.full.get() {
            Some(full) => std::borrow::Cow::Borrowed(full),
            None => std::borrow::Cow::Owned(self.compact.expand()),
        }
    }
}

impl CompactPod {
    /// The store's key: namespace and name.
    pub fn key(&self) -> (Arc<str>, Arc<str>) {
        (self.shape.namespace.clone(), self.name.clone())
    }

    /// Each owner reference: apiVersion, kind, name, uid and whether it is the controller.
    pub fn owner_refs(&self) -> impl Iterator<Item = (&str, &str, &str, &str, bool)> {
        self.shape.owners.iter().map(|o| (&*o.api_version, &*o.kind, &*o.name, &*o.uid, o.controller == Some(true)))
    }

    /// `metadata.resourceVersion`.
    pub fn stored_resource_version(&self) -> Option<&str> {
        self.resource_version.read(&self.texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{pod_read, status, sync};
    use serde_json::json;

    fn golden(file: &str) -> Pod {
        let path = format!("{}/tests/golden/kruise-v1.9.0-objects/{file}", env!("CARGO_MANIFEST_DIR"));
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// Pods with every part the controller reads set in some way: as Kruise and the kubelet
    /// left them, terminating with finalizers, with sidecars and resources, restarted, waiting,
    /// resizing, nominated, with empty and absent lists.
    fn pods() -> Vec<Pod> {
        let terminating = json!(
            {"metadata": {"name": "terminating", "namespace": "ns", "uid": "u1", "resourceVersion": "7", "generation": 3,
                          "deletionTimestamp": "2026-11-25T10:00:00Z", "deletionGracePeriodSeconds": 30,
                          "finalizers": ["apps.kruise.io/pre-delete"], "labels": {}, "ownerReferences": [],
                          "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
             "spec": {"nodeName": "n1", "readinessGates": [],
                      "initContainers": [{"name": "proxy", "image": "envoy:1", "restartPolicy": "Always",
                                          "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "1"}, {"name": "X", "value": "y"}]},
                                         {"name": "setup", "image": "busybox"}],
                      "containers": [{"name": "main", "image": "i:1", "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}},
                                      "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                                      "ports": [{"containerPort": 80}], "command": ["sleep"]},
                                     {"name": "side", "resources": {}}],
                      "volumes": [{"name": "v", "emptyDir": {}}], "priority": 5, "hostname": "h"},
             "status": {"phase": "Running", "message": "m", "reason": "r", "nominatedNodeName": "n2", "resize": "InProgress",
                        "observedGeneration": 3, "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}],
                        "qosClass": "Burstable", "startTime": "2026-11-25T09:00:00Z",
                        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "x",
                                        "lastTransitionTime": "2026-11-25T09:00:01Z", "lastProbeTime": "2026-11-25T09:00:02Z",
                                        "observedGeneration": 2}],
                        "initContainerStatuses": [{"name": "proxy", "image": "envoy:1", "imageID": "e@sha256:1", "ready": true,
                                                   "restartCount": 4, "started": true, "state": {"running": {}}},
                                                  {"name": "setup", "image": "busybox", "imageID": "b@sha256:3", "ready": false,
                                                   "restartCount": 9, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                        "containerStatuses": [
                            {"name": "main", "image": "i:1", "imageID": "", "ready": false, "restartCount": 2, "started": false,
                             "containerID": "containerd://abc", "stopSignal": "SIGTERM",
                             "allocatedResources": {"cpu": "100m"}, "resources": {"requests": {"cpu": "100m"}},
                             "volumeMounts": [{"name": "v", "mountPath": "/v"}], "user": {"linux": {"uid": 0, "gid": 0}},
                             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                             "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": "2026-11-25T09:00:00Z",
                                                          "finishedAt": "2026-11-25T09:00:05Z", "containerID": "containerd://def"}}},
                            {"name": "side", "image": "s:1", "imageID": "s@sha256:2", "ready": true, "restartCount": 0,
                             "state": {"running": {"startedAt": "2026-11-25T09:00:00Z"}}, "lastState": {}}]}});
        let pending = json!(
            {"metadata": {"name": "pending", "namespace": "ns", "generateName": "pending-", "uid": "", "resourceVersion": "",
                          "annotations": {"a": "1", "b": ""}},
             "spec": {"containers": []},
             "status": {"phase": "Pending", "podIP": "", "conditions": [],
                        "containerStatuses": [{"name": "c", "image": "", "imageID": "", "containerID": "", "ready": false, "restartCount": 0}]}});
        let mut pods: Vec<Pod> =
            [terminating, json!({"metadata": {"name": "bare"}}), pending].into_iter().map(|p| serde_json::from_value(p).unwrap()).collect();
        pods.push(golden("pod-after-in-place-update.yaml"));
        pods.push(golden("pod-with-pre-delete-hook.yaml"));
        pods
    }

    /// The cache's contract: a reconcile that expands a cached pod reads exactly what it
    /// would have read from the decoded pod, stripped of what nothing reads.
    #[test]
    fn a_compacted_pod_expands_to_the_stripped_pod() {
        let mut interner = Interner::default();
        for pod in pods() {
            let mut stripped = pod.clone();
            keep_read_fields(&mut stripped);
            let compact = CompactPod::new(pod, &mut interner);
            assert_eq!(compact.expand(), stripped, "{}", compact.name);
            assert_eq!(compact.is_terminating(), stripped.metadata.deletion_timestamp.is_some());
        }
    }

    /// A pod update reads as the version before it only when it changed the resourceVersion,
    /// annotations no decision reads, or what the cache does not keep: every other change the
    /// cache keeps (labels, each read annotation, owners, deletion, finalizers, spec, status)
    /// queues a reconcile.
    #[test]
    fn a_pod_reads_as_before_only_when_nothing_a_decision_reads_changed() {
        type Mutation = (&'static str, fn(&mut Pod));
        let alike: &[Mutation] = &[
            ("resourceVersion", |p| p.metadata.resource_version = Some("999".into())),
            ("managedFields", |p| p.metadata.managed_fields = Some(vec![Default::default()])),
            ("an unread annotation", |p| {
                if let Some(a) = p.metadata.annotations.as_mut() {
                    a.insert("example.com/touched".into(), "1".into());
                }
            }),
            ("an unread annotation's value", |p| {
                if let Some(a) = p.metadata.annotations.as_mut() {
                    for (k, v) in a.iter_mut().filter(|(k, _)| !keys::is_read_pod_annotation(k)) {
                        *v = format!("{k}-changed");
                    }
                }
            }),
            ("a spec field not cached", |p| {
                if let Some(s) = p.spec.as_mut() {
                    s.priority = Some(77);
                }
            }),
        ];
        let differ: &[Mutation] = &[
            ("a label", |p| _ = p.metadata.labels.get_or_insert_with(Default::default).insert("app".into(), "other".into())),
            ("the uid", |p| p.metadata.uid = Some("another".into())),
            ("the creation time", |p| p.metadata.creation_timestamp = Some(Time("2030-01-01T00:00:00Z".parse().unwrap()))),
            ("the generation", |p| p.metadata.generation = Some(p.metadata.generation.unwrap_or(0) + 1)),
            ("the deletion", |p| p.metadata.deletion_timestamp = Some(Time("2030-01-01T00:00:00Z".parse().unwrap()))),
            ("a finalizer", |p| p.metadata.finalizers.get_or_insert_with(Vec::new).push("example.com/f".into())),
            ("the owners", |p| {
                p.metadata.owner_references.get_or_insert_with(Vec::new).push(OwnerReference {
                    api_version: "apps.kruise.io/v1alpha1".into(),
                    kind: "CloneSet".into(),
                    name: "other".into(),
                    uid: "u-other".into(),
                    controller: Some(false),
                    ..Default::default()
                })
            }),
            ("the node", |p| p.spec.get_or_insert_with(Default::default).node_name = Some("elsewhere".into())),
            ("an image", |p| {
                let spec = p.spec.get_or_insert_with(Default::default);
                match spec.containers.first_mut() {
                    Some(c) => c.image = Some("changed:1".into()),
                    None => spec.containers.push(Container { name: "added".into(), ..Default::default() }),
                }
            }),
            ("the phase", |p| p.status.get_or_insert_with(Default::default).phase = Some("Failed".into())),
            ("a condition", |p| {
                p.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new).push(PodCondition {
                    type_: "Ready".into(),
                    status: "Unknown".into(),
                    ..Default::default()
                })
            }),
            ("a container's restart count, or its first status", |p| {
                let statuses = p.status.get_or_insert_with(Default::default).container_statuses.get_or_insert_with(Vec::new);
                match statuses.first_mut() {
                    Some(s) => s.restart_count += 1,
                    None => statuses.push(ContainerStatus { name: "c".into(), ..Default::default() }),
                }
            }),
            ("a container ID", |p| {
                let statuses = p.status.get_or_insert_with(Default::default).container_statuses.get_or_insert_with(Vec::new);
                match statuses.first_mut() {
                    Some(s) => s.container_id = Some("containerd://changed".into()),
                    None => statuses.push(ContainerStatus { name: "c".into(), ..Default::default() }),
                }
            }),
            ("the pod IP", |p| p.status.get_or_insert_with(Default::default).pod_ip = Some("10.9.9.9".into())),
            ("the status message", |p| p.status.get_or_insert_with(Default::default).message = Some("changed".into())),
        ];
        let mut interner = Interner::default();
        for pod in pods() {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let before = CompactPod::new(pod.clone(), &mut interner);
            assert!(CompactPod::new(pod.clone(), &mut interner).reads_as(&before), "{name}: compacted again");
            for (what, change) in alike {
                let mut changed = pod.clone();
                change(&mut changed);
                let after = CompactPod::new(changed, &mut interner);
                assert!(after.reads_as(&before) && before.reads_as(&after), "{name}: {what} changed");
            }
            type Named = (String, Box<dyn Fn(&mut Pod)>);
            let mut changes: Vec<Named> =
                differ.iter().map(|(what, change)| (what.to_string(), Box::new(*change) as Box<dyn Fn(&mut Pod)>)).collect();
            for key in keys::READ_POD_ANNOTATIONS {
                changes.push((
                    format!("annotation {key}"),
                    Box::new(move |p: &mut Pod| {
                        _ = p.metadata.annotations.get_or_insert_with(Default::default).insert(key.into(), "x".into())
                    }),
                ));
            }
            for (what, change) in &changes {
                let mut changed = pod.clone();
                change(&mut changed);
                let after = CompactPod::new(changed, &mut interner);
                assert!(!after.reads_as(&before) && !before.reads_as(&after), "{name}: {what} changed, and it read as before");
            }
        }
    }

    /// A label or annotation reads the same whether the pod has few (scanned) or many (searched),
    /// keys of the same length included.
    #[test]
    fn every_label_and_annotation_reads_its_value_however_many_the_pod_has() {
        let mut interner = Interner::default();
        for count in [0, 1, 3, LINEAR_PAIRS, LINEAR_PAIRS + 1, 40] {
            let labels: BTreeMap<String, String> = (0..count).map(|k| (format!("key-{k:02}"), format!("value-{k}"))).collect();
            let mut pod = Pod::default();
            pod.metadata.labels = Some(labels.clone());
            pod.metadata.annotations = Some(labels.clone());
            let read = ReadPod::new(Arc::new(CompactPod::new(pod, &mut interner)));
            // Annotations through `pair_value`, as `annotation` reads them: it asks only for
            // the keys a decision reads.
            let annotation = |k: &str| pair_value(&read.compact.annotations, k);
            for (k, v) in &labels {
                assert_eq!((read.label(k), annotation(k)), (Some(v.as_str()), Some(v.as_str())), "{k} of {count}");
            }
            for absent in ["key-99", "key-", "", "key-000"] {
                assert_eq!((read.label(absent), annotation(absent)), (None, None), "{absent} of {count}");
            }
        }
    }

    /// What a reconcile reads through [`PodRead`] is what it would read from the expanded pod,
    /// and reading it expands nothing.
    #[test]
    fn compact_reads_answer_as_the_expanded_pod_does() {
        let mut interner = Interner::default();
        for pod in pods() {
            let mut stripped = pod.clone();
            keep_read_fields(&mut stripped);
            let read = ReadPod::new(Arc::new(CompactPod::new(pod, &mut interner)));
            let whole: &dyn PodRead = &stripped;
            let name = whole.name().to_string();
            assert_eq!(
                (read.name(), read.pod_uid(), read.pod_resource_version(), read.phase(), read.is_terminating()),
                (whole.name(), whole.pod_uid(), whole.pod_resource_version(), whole.phase(), whole.is_terminating()),
                "{name}"
            );
            let keys = |m: &Option<BTreeMap<String, String>>| -> Vec<String> {
                m.iter().flatten().map(|(k, _)| k.clone()).chain(["missing".to_string(), String::new()]).collect()
            };
            for k in keys(&stripped.metadata.labels) {
                assert_eq!(read.label(&k), whole.label(&k), "{name}: label {k}");
            }
            // Only the annotations a decision reads can be asked for (`keys::READ_POD_ANNOTATIONS`).
            for k in keys::READ_POD_ANNOTATIONS {
                assert_eq!(read.annotation(k), whole.annotation(k), "{name}: annotation {k}");
            }
            for k in keys(&stripped.metadata.annotations) {
                let value = stripped.metadata.annotations.as_ref().and_then(|a| a.get(&k)).map(String::as_str);
                assert_eq!(pair_value(&read.compact.annotations, &k), value, "{name}: annotation {k}");
            }
            let status = stripped.status.clone().unwrap_or_default();
            let types = status.conditions.iter().flatten().map(|c| c.type_.clone());
            for t in types.chain(["Missing".to_string(), "InPlaceUpdateReady".to_string()]) {
                assert_eq!(read.condition(&t), whole.condition(&t), "{name}: condition {t}");
                assert_eq!(read.has_readiness_gate(&t), whole.has_readiness_gate(&t), "{name}: gate {t}");
            }
            let spec = stripped.spec.clone().unwrap_or_default();
            let gates = spec.readiness_gates.iter().flatten().map(|g| g.condition_type.clone());
            for g in gates.chain(["KruisePodReady".to_string()]) {
                assert_eq!(read.has_readiness_gate(&g), whole.has_readiness_gate(&g), "{name}: gate {g}");
            }
            let containers = spec.containers.iter().map(|c| c.name.clone());
            let statuses = status.container_statuses.iter().flatten().map(|c| c.name.clone());
            for c in containers.chain(statuses).chain(["proxy".to_string(), "missing".to_string()]) {
                assert_eq!(read.container_status(&c), whole.container_status(&c), "{name}: status of {c}");
                assert_eq!(read.container_image(&c), whole.container_image(&c), "{name}: image of {c}");
            }
            assert_eq!(
                (read.node_name(), read.creation_timestamp(), read.max_restarts()),
                (whole.node_name(), whole.creation_timestamp(), whole.max_restarts()),
                "{name}"
            );
            let finalizers = stripped.metadata.finalizers.iter().flatten().cloned();
            for f in finalizers.chain(["missing".to_string(), String::new()]) {
                assert_eq!(read.has_finalizer(&f), whole.has_finalizer(&f), "{name}: finalizer {f}");
            }
            assert!(!read.was_expanded(), "{name}: a read expanded the pod");
            assert_eq!(&*read.whole(), &stripped, "{name}");
            assert!(!read.was_expanded(), "{name}: whole() kept the pod it built");
            assert_eq!(read.full(), &stripped, "{name}");
            assert!(matches!(read.whole(), std::borrow::Cow::Borrowed(_)), "{name}: whole() built the pod again");
        }
    }

    /// Kruise's in-place-updated golden pod as the `i`th of 40 pods of its CloneSet, on
    /// `revision`, read compact.
    fn golden_pods_read_compact(revisions: impl Fn(usize) -> &'static str) -> Vec<ReadPod> {
        golden_pods_labelled(revisions, |_| vec![])
    }

    /// [`golden_pods_read_compact`] with more labels on each pod.
    fn golden_pods_labelled(
        revisions: impl Fn(usize) -> &'static str,
        labels: impl Fn(usize) -> Vec<(&'static str, String)>,
    ) -> Vec<ReadPod> {
        let mut interner = Interner::default();
        (0..40)
            .map(|i| {
                let mut p = golden("pod-after-in-place-update.yaml");
                p.metadata.name = Some(format!("inplace-{i:05}"));
                p.metadata.uid = Some(format!("uid-{i}"));
                let pod_labels = p.metadata.labels.as_mut().unwrap();
                pod_labels.insert(keys::CONTROLLER_REVISION_HASH.into(), revisions(i).into());
                pod_labels.extend(labels(i).into_iter().map(|(k, v)| (k.to_string(), v)));
                ReadPod::new(Arc::new(CompactPod::new(p, &mut interner)))
            })
            .collect()
    }

    /// The `now` of the test passes (and of the status they compute).
    fn pass_time() -> k8s_openapi::jiff::Timestamp {
        "2026-11-22T15:00:00Z".parse().unwrap()
    }

    /// Kruise's golden in-place CloneSet, scaled to `replicas`.
    fn golden_cloneset(replicas: i32) -> crate::api::CloneSet {
        let path = format!("{}/tests/golden/kruise-v1.9.0-objects/cloneset-in-place.yaml", env!("CARGO_MANIFEST_DIR"));
        let mut cs: crate::api::CloneSet = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        cs.spec.replicas = Some(replicas);
        cs
    }

    /// Runs `decide` on one pass's input over `pods` of `cs`, with `update` as its update revision.
    fn with_sync_input<R>(
        cs: &crate::api::CloneSet,
        pods: &[&dyn PodRead],
        update: &str,
        decide: impl FnOnce(&sync::SyncInput<'_>) -> R,
    ) -> R {
        let (revision_data, vct_hashes, nodes) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        decide(&sync::SyncInput {
            cloneset: cs,
            pods,
            current_revision: "inplace-b55cd4488",
            update_revision: update,
            gates: Default::default(),
            exclude_preparing_delete_flag: false,
            node_labels: &nodes,
            revision_data: &revision_data,
            revision_vct_hashes: &vct_hashes,
            now: pass_time(),
        })
    }

    /// One pass's plans and status over `pods` of `cs` (40 replicas), with `update` as its
    /// update revision; the names of the pods it expanded.
    fn expanded_by_a_pass_of(cs: &crate::api::CloneSet, pods: &[ReadPod], update: &str) -> (sync::UpdatePlan, Vec<String>) {
        let refs = pod_read::refs(pods);
        let update_plan = with_sync_input(cs, &refs, update, |input| {
            assert!(!sync::plan_scale(input).changes_pods());
            assert_eq!(sync::plan_refresh(input), (vec![], None));
            sync::plan_update(input)
        });
        let (st, _) = status::compute(&status::StatusInput {
            cloneset: cs,
            pods: &refs,
            update_revision: update,
            current_revision: "inplace-b55cd4488",
            collision_count: 0,
            expected_updated_replicas: 40,
            now: pass_time(),
        });
        assert_eq!((st.replicas, st.ready_replicas), (40, 40));
        assert_eq!(sync::stale_pods_to_delete(cs, &refs), None);
        (update_plan, pods.iter().filter(|p| p.was_expanded()).map(|p| p.name().to_string()).collect())
    }

    fn expanded_by_a_pass(pods: &[ReadPod], update: &str) -> (sync::UpdatePlan, Vec<String>) {
        expanded_by_a_pass_of(&golden_cloneset(40), pods, update)
    }

    /// The reason the reads exist: a pass over a CloneSet whose pods are settled (Kruise's own
    /// in-place-updated pod, 40 times) decides without expanding any of them. Each expansion
    /// is about 65 allocations; this pass used to make 40.
    #[test]
    fn a_pass_over_settled_pods_expands_none_of_them() {
        let pods = golden_pods_read_compact(|_| "inplace-b55cd4488");
        let (update, expanded) = expanded_by_a_pass(&pods, "inplace-b55cd4488");
        assert!(update.pods.is_empty());
        assert_eq!(expanded, Vec::<String>::new());
    }

    /// A pass that chooses pods to update (no priority or scatter strategy, no inPlaceUpdate
    /// hook) reads none of them whole: the update order and the lifecycle gate read them in
    /// place, and each write builds its pod for itself alone ([`PodRead::whole`]). A rollout of
    /// 1,000 pods at maxUnavailable 100% held all 1,000 built while its writes ran.
    #[test]
    fn an_update_pass_expands_none_of_the_pods_it_chooses() {
        let pods = golden_pods_read_compact(|i| if i < 38 { "inplace-new" } else { "inplace-b55cd4488" });
        let (update, expanded) = expanded_by_a_pass(&pods, "inplace-new");
        let chosen: Vec<&str> = update.pods.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(chosen, ["inplace-00038", "inplace-00039"]);
        assert_eq!(expanded, Vec::<String>::new());
    }

    /// The priority and scatter orders read the candidates' labels in place: with both, an update
    /// pass still expands none of the pods, and chooses as the whole pods would have it.
    #[test]
    fn an_update_pass_with_priority_and_scatter_expands_none_of_the_pods() {
        let pods = golden_pods_labelled(
            |i| if i < 30 { "inplace-new" } else { "inplace-b55cd4488" },
            |i| vec![("zone", ["a", "b"][i % 2].to_string()), ("order", format!("o-{i}"))],
        );
        let mut cs = golden_cloneset(40);
        let strategy = &mut cs.spec.update_strategy;
        strategy.priority_strategy = Some(crate::api::shared::UpdatePriorityStrategy {
            order_priority: vec![crate::api::shared::UpdatePriorityOrderTerm { ordered_key: "order".into() }],
            ..Default::default()
        });
        strategy.scatter_strategy = vec![crate::api::shared::UpdateScatterTerm { key: "zone".into(), value: "a".into() }];
        strategy.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(10));
        let (update, expanded) = expanded_by_a_pass_of(&cs, &pods, "inplace-new");
        assert_eq!(expanded, Vec::<String>::new());
        let chosen: Vec<&str> = update.pods.iter().map(|(n, _)| n.as_str()).collect();
        let whole: Vec<Pod> = pods.iter().map(|p| p.whole().into_owned()).collect();
        let whole_refs = pod_read::refs(&whole);
        let whole_plan = with_sync_input(&cs, &whole_refs, "inplace-new", sync::plan_update);
        let whole_chosen: Vec<&str> = whole_plan.pods.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(chosen, whole_chosen);
        // Higher order suffix first, so the scatter had pods of both zones to interleave.
        assert_eq!(
            chosen,
            [
                "inplace-00039",
                "inplace-00038",
                "inplace-00037",
                "inplace-00036",
                "inplace-00035",
                "inplace-00034",
                "inplace-00033",
                "inplace-00032",
                "inplace-00031",
                "inplace-00030"
            ]
        );
    }

    /// A scale-down pass sorts its victims (node, phase, readiness, deletion cost, restarts,
    /// creation) and splits off the ones its preDelete hook holds (labels and finalizers) reading
    /// the pods in place; it used to build every pod of the CloneSet to sort them, and keep them
    /// built until the pass ended.
    #[test]
    fn a_scale_down_pass_expands_none_of_the_pods_it_considers() {
        let pods = golden_pods_labelled(
            |i| if i < 20 { "inplace-new" } else { "inplace-b55cd4488" },
            |i| if i % 3 == 0 { vec![("hold", "true".to_string())] } else { vec![] },
        );
        let mut cs = golden_cloneset(30);
        cs.spec.lifecycle = Some(crate::api::shared::Lifecycle {
            pre_delete: Some(crate::api::shared::LifecycleHook {
                labels_handler: [("hold".to_string(), "true".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        let refs = pod_read::refs(&pods);
        let plan = with_sync_input(&cs, &refs, "inplace-new", sync::plan_scale);
        let expanded: Vec<&str> = pods.iter().filter(|p| p.was_expanded()).map(|p| p.name()).collect();
        assert_eq!(expanded, Vec::<&str>::new());
        let whole: Vec<Pod> = pods.iter().map(|p| p.whole().into_owned()).collect();
        let whole_refs = pod_read::refs(&whole);
        let whole_plan = with_sync_input(&cs, &whole_refs, "inplace-new", sync::plan_scale);
        assert_eq!((&plan.delete, &plan.prepare_delete), (&whole_plan.delete, &whole_plan.prepare_delete));
        assert_eq!(plan.delete.len() + plan.prepare_delete.len(), 10, "{plan:?}");
        assert!(!plan.delete.is_empty() && !plan.prepare_delete.is_empty(), "{plan:?}");
    }

    /// Every new pod passes through PreparingNormal, and the pass that moves it to Normal once it
    /// is scheduled reads its node in place: during a creation it built each pod it moved, while
    /// the cache was storing the pods around it.
    #[test]
    fn the_move_to_normal_expands_none_of_the_new_pods() {
        let pods = golden_pods_labelled(|_| "inplace-b55cd4488", |_| vec![(keys::LIFECYCLE_STATE, "PreparingNormal".to_string())]);
        let refs = pod_read::refs(&pods);
        let (refresh, _) = with_sync_input(&golden_cloneset(40), &refs, "inplace-b55cd4488", sync::plan_refresh);
        let moved = refresh.iter().filter(|r| r.writes.iter().any(|w| format!("{w:?}").contains(r#"String("Normal")"#))).count();
        assert_eq!(moved, 40, "{refresh:?}");
        let expanded: Vec<&str> = pods.iter().filter(|p| p.was_expanded()).map(|p| p.name()).collect();
        assert_eq!(expanded, Vec::<&str>::new());
    }

    /// The pod watch empties managedFields and leaves the list (`Some([])`): the compact pod
    /// must not keep the rest of the metadata boxed for it, as it did for every watched pod.
    #[test]
    fn a_watched_pod_with_an_emptied_managed_fields_list_boxes_no_metadata() {
        let mut interner = Interner::default();
        let mut pod = golden("pod-after-in-place-update.yaml");
        keep_read_fields(&mut pod);
        let stripped = pod.clone();
        pod.metadata.managed_fields = Some(Vec::new());
        let compact = CompactPod::from_wire(WirePod(pod), &mut interner);
        assert!(compact.meta_rest.is_none(), "{:?}", compact.meta_rest);
        assert_eq!(compact.expand(), stripped);
    }

    #[test]
    fn stripping_keeps_what_is_read_and_drops_what_is_not() {
        let mut pod = pods().remove(0);
        keep_read_fields(&mut pod);
        let spec = pod.spec.as_ref().unwrap();
        let init = &spec.init_containers.as_ref().unwrap()[0];
        let env: Vec<&str> = init.env.iter().flatten().map(|e| e.name.as_str()).collect();
        assert_eq!((init.restart_policy.as_deref(), env), (Some("Always"), vec!["KRUISE_CONTAINER_PRIORITY"]));
        assert!(spec.containers[0].resize_policy.is_some() && spec.containers[0].resources.is_some());
        assert!(spec.containers[0].ports.is_none() && spec.volumes.is_none() && spec.priority.is_none() && spec.hostname.is_none());
        assert!(pod.metadata.managed_fields.is_none() && pod.metadata.finalizers.is_some());
        let status = pod.status.as_ref().unwrap();
        assert!(status.pod_ips.is_none() && status.pod_ip.is_some() && status.resize.is_some());
        let main = &status.container_statuses.as_ref().unwrap()[0];
        assert!(main.volume_mounts.is_none() && main.user.is_none());
        assert!(main.resources.is_some() && main.allocated_resources.is_some() && main.last_state.is_some());
    }

    #[test]
    fn stripped_pods_keep_what_the_controller_reads() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"a": "b"}, "annotations": {"x": "y"}},
            "spec": {
                "nodeName": "n1",
                "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "containers": [{"name": "main", "image": "i:1", "env": [{"name": "E", "value": "1"}, {"name": "KRUISE_CONTAINER_PRIORITY", "value": "10"}],
                                "resources": {"limits": {"cpu": "1"}}, "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
            },
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}],
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "main", "image": "i:1", "imageID": "sha", "ready": true, "restartCount": 0}]},
        }))
        .unwrap();
        let before = pod.clone();
        keep_read_fields(&mut pod);
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.readiness_gates, before.spec.as_ref().unwrap().readiness_gates);
        assert_eq!(spec.containers[0].name, "main");
        assert_eq!(spec.containers[0].image.as_deref(), Some("i:1"));
        assert_eq!(spec.containers[0].resources, before.spec.as_ref().unwrap().containers[0].resources);
        let env: Vec<&str> = spec.containers[0].env.iter().flatten().map(|e| e.name.as_str()).collect();
        assert_eq!(env, ["KRUISE_CONTAINER_PRIORITY"], "only the launch priority is read from env");
        assert!(spec.containers[0].volume_mounts.is_none());
        assert!(spec.volumes.is_none() && spec.tolerations.is_none());
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.conditions, before.status.as_ref().unwrap().conditions);
        assert_eq!(status.container_statuses, before.status.as_ref().unwrap().container_statuses);
        assert_eq!(pod.metadata, before.metadata);
    }

    /// k8s 1.32's `ActivePods` (Kruise's update order) breaks ties on sidecar restarts, and a
    /// sidecar is an init container with `restartPolicy: Always`.
    #[test]
    fn stripped_pods_keep_sidecar_restarts_for_the_update_order_tie_break() {
        let pod = |restarts: i32| -> Pod {
            let mut p: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("p{restarts}")},
                "spec": {"initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}],
                         "containers": [{"name": "main", "image": "i:1"}]},
                "status": {"initContainerStatuses": [{"name": "proxy", "image": "envoy", "imageID": "", "ready": true, "restartCount": restarts}]},
            }))
            .unwrap();
            keep_read_fields(&mut p);
            p
        };
        assert_eq!(pod(0).spec.unwrap().init_containers.unwrap()[0].restart_policy.as_deref(), Some("Always"));
        assert_eq!(crate::core::order::max_sidecar_restarts(&pod(3)), 3);
    }

    /// Strings of pods long gone (names, instance ids) do not stay in the pools for ever.
    #[test]
    fn the_pools_forget_what_no_cached_pod_holds() {
        let mut interner = Interner::default();
        let pod = |i: usize| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": format!("p{i}"), "labels": {"id": format!("{i}")}}})).unwrap()
        };
        let kept: Vec<CompactPod> = (0..100).map(|i| CompactPod::new(pod(i), &mut interner)).collect();
        for i in 100..50_000 {
            drop(CompactPod::new(pod(i), &mut interner));
        }
        // A string held only by a stale label pair goes at the sweep after the pair's.
        assert!(interner.strings.set.len() <= 4 * 1024 + 2 * kept.len(), "{} strings pooled", interner.strings.set.len());
        assert!(interner.labels.set.len() <= 2 * 1024 + kept.len(), "{} labels pooled", interner.labels.set.len());
        let shared = CompactPod::new(pod(7), &mut interner);
        let (a, b) = (&kept[7].labels.as_ref().unwrap()[0], &shared.labels.as_ref().unwrap()[0]);
        assert!(Arc::ptr_eq(a, b), "equal labels share one allocation");
    }

    /// Pods of one CloneSet revision hold one shared shape (containers, owners, readiness gates,
    /// phase) and one shared block per condition text and container image, whatever their
    /// names, nodes, IPs and times; a pod of another revision holds its own.
    #[test]
    fn the_pods_of_one_revision_share_their_shape() {
        let mut interner = Interner::default();
        let pod = |i: usize, image: &str| -> Pod {
            let mut p = golden("pod-after-in-place-update.yaml");
            p.metadata.name = Some(format!("p-{i}"));
            p.metadata.uid = Some(format!("uid-{i}"));
            let spec = p.spec.as_mut().unwrap();
            spec.node_name = Some(format!("node-{i}"));
            spec.containers[0].image = Some(image.to_string());
            let status = p.status.as_mut().unwrap();
            status.host_ip = Some(format!("10.0.0.{i}"));
            status.pod_ip = Some(format!("10.1.0.{i}"));
            for c in status.conditions.iter_mut().flatten() {
                c.last_transition_time = Some(Time(k8s_openapi::jiff::Timestamp::from_second(1_795_636_149 + i as i64).unwrap()));
            }
            status.container_statuses.as_mut().unwrap()[0].container_id = Some(format!("containerd://{i}"));
            p
        };
        let pods: Vec<Pod> = vec![pod(1, "app:v2"), pod(2, "app:v2"), pod(3, "app:v3")];
        let cached: Vec<CompactPod> = pods.iter().map(|p| CompactPod::new(p.clone(), &mut interner)).collect();
        let (a, b, other) = (&cached[0], &cached[1], &cached[2]);
        assert!(Arc::ptr_eq(&a.shape, &b.shape), "two pods of a revision hold two shapes");
        assert!(!Arc::ptr_eq(&a.shape, &other.shape), "pods of two revisions share a shape");
        let (sa, sb) = (a.status.as_ref().unwrap(), b.status.as_ref().unwrap());
        for (ca, cb) in sa.conditions.as_ref().unwrap().iter().zip(sb.conditions.as_ref().unwrap().iter()) {
            assert!(Arc::ptr_eq(&ca.said, &cb.said), "condition {} held twice", ca.said.type_);
        }
        let image = |s: &CompactStatus| s.container_statuses.as_ref().unwrap()[0].image.clone();
        assert!(Arc::ptr_eq(&image(sa), &image(sb)), "a revision's container image held twice");
        for (p, c) in pods.into_iter().zip(&cached) {
            let mut stripped = p;
            keep_read_fields(&mut stripped);
            assert_eq!(c.expand(), stripped, "{}", c.name);
        }
    }

    /// Each slice the cache keeps is a block of its own, never a decoded `Vec`'s block reused in
    /// place and shrunk (which leaves the rest of that block a hole behind the cached slice).
    #[test]
    fn a_compacted_pod_keeps_none_of_the_decoded_pod_s_blocks() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "cs", "uid": "u"}]},
            "spec": {"containers": [{"name": "main", "image": "i", "env": [{"name": keys::CONTAINER_PRIORITY_ENV, "value": "1"}],
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]}],
                "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [{"name": "main", "image": "i", "imageID": "d", "ready": true, "restartCount": 0}]},
        }))
        .unwrap();
        // Decoded vectors have room to spare, as serde's growth leaves them.
        let spec = pod.spec.as_mut().unwrap();
        let status = pod.status.as_mut().unwrap();
        spec.containers.reserve(3);
        spec.readiness_gates.as_mut().unwrap().reserve(3);
        spec.containers[0].env.as_mut().unwrap().reserve(3);
        spec.containers[0].resize_policy.as_mut().unwrap().reserve(3);
        status.conditions.as_mut().unwrap().reserve(3);
        status.container_statuses.as_mut().unwrap().reserve(3);
        pod.metadata.owner_references.as_mut().unwrap().reserve(3);
        let spec = pod.spec.as_ref().unwrap();
        let status = pod.status.as_ref().unwrap();
        let decoded: Vec<usize> = vec![
            spec.containers.as_ptr() as usize,
            spec.readiness_gates.as_ref().unwrap().as_ptr() as usize,
            spec.containers[0].env.as_ref().unwrap().as_ptr() as usize,
            spec.containers[0].resize_policy.as_ref().unwrap().as_ptr() as usize,
            status.conditions.as_ref().unwrap().as_ptr() as usize,
            status.container_statuses.as_ref().unwrap().as_ptr() as usize,
            pod.metadata.owner_references.as_ref().unwrap().as_ptr() as usize,
        ];
        let compact = CompactPod::from_wire(WirePod(pod), &mut Interner::default());
        let spec = compact.shape.spec.as_ref().unwrap();
        let status = compact.status.as_ref().unwrap();
        let container = &spec.containers[0];
        let kept: Vec<usize> = vec![
            spec.containers.as_ptr() as usize,
            spec.readiness_gates.as_ref().unwrap().as_ptr() as usize,
            container.env.as_ref().unwrap().as_ptr() as usize,
            container.resize_policy.as_ref().unwrap().as_ptr() as usize,
            status.conditions.as_ref().unwrap().as_ptr() as usize,
            status.container_statuses.as_ref().unwrap().as_ptr() as usize,
            compact.shape.owners.as_ptr() as usize,
        ];
        for (what, (d, k)) in ["containers", "readiness gates", "env", "resize policy", "conditions", "container statuses", "owners"]
            .iter()
            .zip(decoded.iter().zip(&kept))
        {
            assert_ne!(d, k, "the cached {what} reuse the decoded block");
        }
        assert_eq!(compact.expand().spec.unwrap().containers[0].env.as_ref().unwrap()[0].name, keys::CONTAINER_PRIORITY_ENV);
    }

    /// Every in-place update gives a pod a new state annotation: with 4,000 cached pods, the
    /// values their earlier versions held must not pile up until the pools double.
    #[test]
    fn updates_of_many_cached_pods_leave_few_unused_values_pooled() {
        const PODS: usize = 4000;
        let mut interner = Interner::default();
        let pod = |i: usize, update: usize| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": format!("p{i}"), "annotations": {"state": format!("{i}-{update}")}}}))
                .unwrap()
        };
        let mut kept: Vec<CompactPod> = (0..PODS).map(|i| CompactPod::new(pod(i, 0), &mut interner)).collect();
        let bound = PODS + PODS / 8 + 1024 + 1;
        for update in 1..=3 {
            for (i, cached) in kept.iter_mut().enumerate() {
                *cached = CompactPod::new(pod(i, update), &mut interner);
                assert!(interner.labels.set.len() <= bound, "{} annotation pairs pooled for {PODS} pods", interner.labels.set.len());
                // A string goes at the sweep after its pair's: one more step of slack.
                let strings_bound = bound + PODS / 8 + 1024 + 2;
                assert!(interner.strings.set.len() <= strings_bound, "{} strings pooled for {PODS} pods", interner.strings.set.len());
            }
        }
    }
}
