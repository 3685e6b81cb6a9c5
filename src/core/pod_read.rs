//! What the decisions read of a pod, borrowed. The cache holds pods compact
//! (`pod_cache::compact`), and turning one back into a `Pod` costs dozens of allocations:
//! a reconcile that expanded all of its CloneSet's pods spent most of its time doing that. The
//! per-pod checks every pass makes (revision, lifecycle state, readiness, availability, the
//! in-place state) read through this trait instead; a decision or a write that needs the whole
//! pod asks for [`PodRead::full`], which the cache's reader builds once, for that pod only.
//!
//! Each accessor answers as the same question asked of the stripped `Pod` would
//! (`pod_cache::compact::tests::compact_reads_answer_as_the_expanded_pod_does`).

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::api::keys;

/// A pod condition's fields the decisions compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConditionRef<'a> {
    pub status: &'a str,
    pub reason: Option<&'a str>,
    pub message: Option<&'a str>,
    pub last_transition_time: Option<Timestamp>,
}

/// A container status's fields the in-place checks compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerStatusRef<'a> {
    pub image: &'a str,
    pub image_id: &'a str,
}

pub trait PodRead: Send + Sync {
    /// `metadata.name`, empty when absent.
    fn name(&self) -> &str;
    /// `metadata.uid`, empty when absent.
    fn pod_uid(&self) -> &str;
    fn pod_resource_version(&self) -> Option<&str>;
    fn label(&self, key: &str) -> Option<&str>;
    /// One of [`keys::READ_POD_ANNOTATIONS`]: a change to any other queues no reconcile.
    fn annotation(&self, key: &str) -> Option<&str>;
    /// `status.phase`, empty when absent.
    fn phase(&self) -> &str;
    fn is_terminating(&self) -> bool;
    /// The first condition of this type, as Kubernetes' `GetPodCondition` finds it.
    fn condition(&self, type_: &str) -> Option<ConditionRef<'_>>;
    fn has_readiness_gate(&self, type_: &str) -> bool;
    /// The first status of the (regular) container of this name.
    fn container_status(&self, name: &str) -> Option<ContainerStatusRef<'_>>;
    /// The spec image of the (regular) container of this name.
    fn container_image(&self, name: &str) -> Option<&str>;
    /// `spec.nodeName`, empty when absent.
    fn node_name(&self) -> &str;
    fn creation_timestamp(&self) -> Option<Timestamp>;
    /// The highest restart count among regular containers, and among sidecars (init containers
    /// with `restartPolicy: Always`); 0 without any.
    fn max_restarts(&self) -> (i32, i32);
    /// Whether `metadata.finalizers` holds this one (lifecycle hooks are labels or finalizers).
    fn has_finalizer(&self, finalizer: &str) -> bool;
    /// The whole (stripped) pod.
    fn full(&self) -> &Pod;
    /// The whole pod for one use: [`PodRead::full`] if it was built already, else built and not
    /// kept. A write reads its pod whole once; kept, the pods a pass writes would stay built until
    /// it ends, which in a large rollout holds megabytes while its writes run.
    fn whole(&self) -> Cow<'_, Pod> {
        Cow::Borrowed(self.full())
    }
}

impl PodRead for Pod {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    fn pod_uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or_default()
    }

    fn pod_resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        debug_assert!(keys::is_read_pod_annotation(key), "{key} is read: add it to keys::READ_POD_ANNOTATIONS");
        self.metadata.annotations.as_ref()?.get(key).map(String::as_str)
    }

    fn phase(&self) -> &str {
        self.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
    }

    fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    fn condition(&self, type_: &str) -> Option<ConditionRef<'_>> {
        let c = self.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
        Some(ConditionRef {
            status: &c.status,
            reason: c.reason.as_deref(),
            message: c.message.as_deref(),
            last_transition_time: c.last_transition_time.as_ref().map(|t| t.0),
        })
    }

    fn has_readiness_gate(&self, type_: &str) -> bool {
        self.spec.as_ref().and_then(|s| s.readiness_gates.as_ref()).is_some_and(|g| g.iter().any(|g| g.condition_type == type_))
    }

    fn container_status(&self, name: &str) -> Option<ContainerStatusRef<'_>> {
        let s = self.status.as_ref()?.container_statuses.as_ref()?.iter().find(|s| s.name == name)?;
        Some(ContainerStatusRef { image: &s.image, image_id: &s.image_id })
    }

    fn container_image(&self, name: &str) -> Option<&str> {
        self.spec.as_ref()?.containers.iter().find(|c| c.name == name)?.image.as_deref()
    }

    fn node_name(&self) -> &str {
        self.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()
    }

    fn creation_timestamp(&self) -> Option<Timestamp> {
        self.metadata.creation_timestamp.as_ref().map(|t| t.0)
    }

    fn max_restarts(&self) -> (i32, i32) {
        (crate::core::order::max_container_restarts(self), crate::core::order::max_sidecar_restarts(self))
    }

    fn has_finalizer(&self, finalizer: &str) -> bool {
        self.metadata.finalizers.iter().flatten().any(|f| f == finalizer)
    }

    fn full(&self) -> &Pod {
        self
    }
}

/// So that `&&Pod` and `&&dyn PodRead` coerce to `&dyn PodRead` where pods are iterated.
impl<T: PodRead + ?Sized> PodRead for &T {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn pod_uid(&self) -> &str {
        (**self).pod_uid()
    }

    fn pod_resource_version(&self) -> Option<&str> {
        (**self).pod_resource_version()
    }

    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        (**self).annotation(key)
    }

    fn phase(&self) -> &str {
        (**self).phase()
    }

    fn is_terminating(&self) -> bool {
        (**self).is_terminating()
    }

    fn condition(&self, type_: &str) -> Option<ConditionRef<'_>> {
        (**self).condition(type_)
    }

    fn has_readiness_gate(&self, type_: &str) -> bool {
        (**self).has_readiness_gate(type_)
    }

    fn container_status(&self, name: &str) -> Option<ContainerStatusRef<'_>> {
        (**self).container_status(name)
    }

    fn container_image(&self, name: &str) -> Option<&str> {
        (**self).container_image(name)
    }

    fn node_name(&self) -> &str {
        (**self).node_name()
    }

    fn creation_timestamp(&self) -> Option<Timestamp> {
        (**self).creation_timestamp()
    }

    fn max_restarts(&self) -> (i32, i32) {
        (**self).max_restarts()
    }

    fn has_finalizer(&self, finalizer: &str) -> bool {
        (**self).has_finalizer(finalizer)
    }

    fn full(&self) -> &Pod {
        (**self).full()
    }

    fn whole(&self) -> Cow<'_, Pod> {
        (**self).whole()
    }
}

/// Pods as the decisions take them.
pub fn refs<P: PodRead>(pods: &[P]) -> Vec<&dyn PodRead> {
    pods.iter().map(|p| p as &dyn PodRead).collect()
}
