//! How a reconcile reads a cached pod: [`ReadPod`] answers the core's [`PodRead`] from the
//! compact form, and expands the whole pod only when a decision or a write needs all of it.

use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::Pod;

use crate::api::keys;
use crate::core::order::is_sidecar_restart_policy;
use crate::core::pod_read::{ConditionRef, ContainerStatusRef, PodRead};
use crate::pod_cache::compact::{CompactContainerStatus, CompactPod, Pairs};

/// A value of `pairs` (sorted by key, as they came from a `BTreeMap`).
pub(super) fn pair_value<'a>(pairs: &'a Option<Pairs>, key: &str) -> Option<&'a str> {
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
pub(super) const LINEAR_PAIRS: usize = 12;

/// A cached pod as one reconcile reads it: through its compact form, expanded into a `Pod`
/// only when a decision or a write needs the whole of it, and then once.
pub struct ReadPod {
    pub(super) compact: Arc<CompactPod>,
    /// Boxed: a `Pod` is kilobytes, and a pass moves its `ReadPod`s around (partitioned,
    /// filtered), almost none of them ever expanded.
    full: OnceLock<Box<Pod>>,
}

impl ReadPod {
    pub fn new(compact: Arc<CompactPod>) -> Self {
        Self { compact, full: OnceLock::new() }
    }

    /// Whether the whole pod was built (for tests of what a pass expands).
    #[cfg(test)]
    pub(crate) fn was_expanded(&self) -> bool {
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
        let s = self.compact.status.as_ref()?.container_statuses.as_ref()?.iter().find(|s| &*s.shape.name == name)?;
        Some(ContainerStatusRef { image: &s.shape.image, image_id: &s.shape.image_id })
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
            statuses.unwrap_or_default().iter().filter(|s| counted(&s.shape.name)).map(|s| s.restart_count).fold(0, i32::max)
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
