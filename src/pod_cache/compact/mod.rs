//! The cached form of a pod: only what the controller reads, in a layout that costs a fraction
//! of a `Pod`. A decoded `Pod` is large even when almost empty (kilobytes for the struct and for
//! each container, a block per condition, and every label a map node and two strings), so at
//! scale the cache, not the work, sizes the operator (`tests/cache_footprint.rs`). Here strings
//! that repeat across pods (namespace, labels, owner, image, node, condition types and
//! reasons) are shared through an [`Interner`], and so is what the pods of one revision have
//! alike (their containers, owners and readiness gates: a [`PodShape`]). The few fields that
//! are rarely set are boxed, and a reconcile reads its own CloneSet's pods through the core's
//! [`PodRead`](crate::core::pod_read::PodRead) ([`ReadPod`], in `read.rs`), expanding one back
//! into a `Pod` ([`CompactPod::expand`]) only where a decision or a write needs all of it. The
//! pieces the layout is made of (the pool, 8-byte times, sparse boxes, a pod's block of its own
//! strings) are in `parts.rs`.
//!
//! What is kept is what [`keep_read_fields`](super::fields::keep_read_fields) keeps, field for
//! field: expanding a compacted pod gives exactly the stripped pod
//! (`a_compacted_pod_expands_to_the_stripped_pod`).

use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, ContainerResizePolicy, ContainerState, ContainerStateRunning, ContainerStatus, EnvVar, Pod, PodCondition, PodReadinessGate,
    PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::keys;
use crate::pod_cache::compact::parts::{Pool, Span, Sparse, Stamp, Texts, fresh, opt_string, rest, string};
use crate::pod_cache::fields::keep_read_fields;
use crate::pod_cache::wire::WirePod;

mod parts;
mod read;
#[cfg(test)]
mod tests;

pub use read::ReadPod;

/// The pools compaction shares strings and small repeated structures through (owned by the
/// one task that fills the cache).
#[derive(Default)]
pub struct Interner {
    strings: Pool<str>,
    labels: Pool<(Arc<str>, Arc<str>)>,
    owners: Pool<CompactOwner>,
    conditions: Pool<ConditionSaid>,
    shapes: Pool<PodShape>,
    statuses: Pool<StatusShape>,
}

impl Interner {
    pub(crate) fn get(&mut self, s: &str) -> Arc<str> {
        self.strings.share(s, || Arc::from(s))
    }

    fn opt(&mut self, s: Option<String>) -> Option<Arc<str>> {
        s.map(|s| self.get(&s))
    }
}

type Pairs = Box<[Arc<(Arc<str>, Arc<str>)>]>;

fn pairs(map: Option<BTreeMap<String, String>>, i: &mut Interner) -> Option<Pairs> {
    map.map(|m| {
        m.into_iter()
            .map(|(k, v)| {
                let pair = (i.get(&k), i.get(&v));
                i.labels.intern(pair)
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
/// gates and the fields beside them, as it does for conditions and container statuses. Nothing
/// here differs from node to node, so pods of a CloneSet spread over many nodes still share it.
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
pub(crate) struct CompactOwner {
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
    shape: Arc<StatusShape>,
    container_id: Span,
    ready: bool,
    started: Option<bool>,
    restart_count: i32,
    state: CompactState,
    last_state: CompactState,
}

/// What a container's status has alike in every pod of a revision: its name, image and image
/// ID, and the resources a kubelet reports for it (`resources`, `allocatedResources`), which a
/// container with requests has in every pod: shared, not held by each.
#[derive(Debug, PartialEq)]
struct StatusShape {
    name: Arc<str>,
    image: Arc<str>,
    image_id: Arc<str>,
    resources: Sparse<ResourceRequirements>,
    /// Every other field (allocated resources, stop signal, ...), when any is set.
    rest: Option<Box<ContainerStatus>>,
}

// Strings, maps and lists of them, whose equality is an equivalence.
impl Eq for StatusShape {}

impl Hash for StatusShape {
    /// By name, image, image ID and the resources' values: equal shapes hash alike, and pods
    /// mid-resize (two sets of resources for one image) hash apart.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.name, &self.image, &self.image_id, self.rest.is_some()).hash(state);
        if let Sparse::Boxed(r) = &self.resources {
            for (name, q) in [&r.limits, &r.requests].into_iter().flatten().flatten() {
                (name, &q.0).hash(state);
            }
        }
    }
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
        Self { said: i.conditions.intern(said), last_transition_time: Stamp::new(last_transition_time) }
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
        let container_id = texts.add(s.container_id.take());
        let (ready, started, restart_count) = (std::mem::take(&mut s.ready), s.started.take(), std::mem::take(&mut s.restart_count));
        let (state, last_state) = (CompactState::new(s.state.take()), CompactState::new(s.last_state.take()));
        let shape = StatusShape {
            name: i.get(&std::mem::take(&mut s.name)),
            image: i.get(&std::mem::take(&mut s.image)),
            image_id: i.get(&std::mem::take(&mut s.image_id)),
            resources: Sparse::new(s.resources.take()),
            rest: rest(s),
        };
        Self { shape: i.statuses.intern(shape), container_id, ready, started, restart_count, state, last_state }
    }

    fn expand(&self, texts: &str) -> ContainerStatus {
        ContainerStatus {
            name: string(&self.shape.name),
            image: string(&self.shape.image),
            image_id: string(&self.shape.image_id),
            container_id: self.container_id.expand(texts),
            ready: self.ready,
            started: self.started,
            restart_count: self.restart_count,
            state: self.state.expand(),
            last_state: self.last_state.expand(),
            resources: self.shape.resources.expand(),
            ..self.shape.rest.as_deref().cloned().unwrap_or_default()
        }
    }
}

impl CompactContainerStatus {
    /// Equal, its own strings read from `texts` and the other's from `other_texts`.
    fn reads_as(&self, texts: &str, other: &Self, other_texts: &str) -> bool {
        self.shape == other.shape
            && self.container_id.read(texts) == other.container_id.read(other_texts)
            && self.ready == other.ready
            && self.started == other.started
            && self.restart_count == other.restart_count
            && self.state == other.state
            && self.last_state == other.last_state
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
                i.owners.intern(owner)
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
            shape: i.shapes.intern(shape),
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
    pub(crate) fn expand(&self) -> Pod {
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

    pub(crate) fn namespace(&self) -> &str {
        &self.shape.namespace
    }

    /// `metadata.uid`, empty when absent.
    pub(crate) fn uid(&self) -> &str {
        self.uid.read(&self.texts).unwrap_or_default()
    }

    /// Whether this version of the pod reads as `older` does to every decision: all that is
    /// kept is equal but the resourceVersion and the annotations no decision reads (those not in
    /// [`keys::READ_POD_ANNOTATIONS`]). Labels are all compared: a selector or a lifecycle hook
    /// can name any. Shared parts are compared by pointer first, so an update that changed one
    /// annotation costs a few comparisons.
    pub(crate) fn reads_as(&self, older: &Self) -> bool {
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
    pub(crate) fn is_terminating(&self) -> bool {
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

impl CompactPod {
    /// The store's key: namespace and name.
    pub(crate) fn key(&self) -> (Arc<str>, Arc<str>) {
        (self.shape.namespace.clone(), self.name.clone())
    }

    /// Each owner reference: apiVersion, kind, name, uid and whether it is the controller.
    pub(crate) fn owner_refs(&self) -> impl Iterator<Item = (&str, &str, &str, &str, bool)> {
        self.shape.owners.iter().map(|o| (&*o.api_version, &*o.kind, &*o.name, &*o.uid, o.controller == Some(true)))
    }

    /// `metadata.resourceVersion`.
    pub(crate) fn stored_resource_version(&self) -> Option<&str> {
        self.resource_version.read(&self.texts)
    }
}
