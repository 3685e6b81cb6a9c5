//! Every label, annotation, condition and finalizer key the controller reads or writes, with
//! Kruise v1.9.0's exact spelling. Nothing else in the code spells these strings.

// ---- Pod labels
/// Revision of the pod: the full revision name `<cloneset>-<hash>` (short hash with `CloneSetShortHash`).
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";
/// The short hash of the pod's revision, always.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// 5-character instance id shared by a pod and its PVCs; also the pod-name suffix.
pub const CLONESET_INSTANCE_ID: &str = "apps.kruise.io/cloneset-instance-id";
/// Presence marks a pod for deletion (value ignored).
pub const SPECIFIED_DELETE: &str = "apps.kruise.io/specified-delete";
/// Lifecycle state label.
pub const LIFECYCLE_STATE: &str = "lifecycle.apps.kruise.io/state";

// ---- Pod annotations
/// RFC 3339 time of the last lifecycle state write.
pub const LIFECYCLE_TIMESTAMP: &str = "lifecycle.apps.kruise.io/timestamp";
/// JSON `InPlaceUpdateState`.
pub const INPLACE_UPDATE_STATE: &str = "apps.kruise.io/inplace-update-state";
/// Legacy key of the same, read as a fallback and removed on write.
pub(crate) const INPLACE_UPDATE_STATE_LEGACY: &str = "inplace-update-state";
/// JSON `UpdateSpec` held during an in-place grace period.
pub const INPLACE_UPDATE_GRACE: &str = "apps.kruise.io/inplace-update-grace";
/// Legacy key of the same.
pub(crate) const INPLACE_UPDATE_GRACE_LEGACY: &str = "inplace-update-grace";
/// Written by kruise-daemon; read to detect in-place completion.
pub const RUNTIME_CONTAINERS_META: &str = "apps.kruise.io/runtime-containers-meta";
/// Lower cost is deleted first on scale-down (user-set, int32).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// Pod annotation that orders in-place container updates.
pub(crate) const CONTAINER_LAUNCH_PRIORITY: &str = "apps.kruise.io/container-launch-priority";
/// Container env var carrying a container's launch priority.
pub const CONTAINER_PRIORITY_ENV: &str = "KRUISE_CONTAINER_PRIORITY";
/// The env Kruise's pod webhook injects into every container of a prioritised pod: a
/// ConfigMap key reference whose key is `p_<priority>`.
pub(crate) const CONTAINER_BARRIER_ENV: &str = "KRUISE_CONTAINER_BARRIER";

/// Every pod annotation above: the only ones a decision reads (`PodRead::annotation` checks this
/// in debug builds). A pod update that changes other annotations, its resourceVersion, and
/// nothing else the cache keeps queues no reconcile (`CompactPod::reads_as`).
pub(crate) const READ_POD_ANNOTATIONS: [&str; 8] = [
    LIFECYCLE_TIMESTAMP,
    INPLACE_UPDATE_STATE,
    INPLACE_UPDATE_STATE_LEGACY,
    INPLACE_UPDATE_GRACE,
    INPLACE_UPDATE_GRACE_LEGACY,
    RUNTIME_CONTAINERS_META,
    POD_DELETION_COST,
    CONTAINER_LAUNCH_PRIORITY,
];

/// Whether a decision can read the pod annotation `key` ([`READ_POD_ANNOTATIONS`]).
pub(crate) fn is_read_pod_annotation(key: &str) -> bool {
    READ_POD_ANNOTATIONS.contains(&key)
}

// ---- Pod readiness gates / conditions
/// Readiness gate on every CloneSet pod; False while an in-place update runs.
pub const INPLACE_UPDATE_READY: &str = "InPlaceUpdateReady";
/// Readiness gate used by lifecycle hooks with `markPodNotReady`.
pub const KRUISE_POD_READY: &str = "KruisePodReady";
/// Reason set on `InPlaceUpdateReady=False` when an in-place update starts.
pub const REASON_START_INPLACE_UPDATE: &str = "StartInPlaceUpdate";

// ---- CloneSet labels and annotations
/// `"true"`: PreparingDelete pods do not count as replicas for this CloneSet.
pub(crate) const SCALING_EXCLUDE_PREPARING_DELETE: &str = "apps.kruise.io/cloneset-scaling-exclude-preparing-delete";
pub(crate) const IMAGE_PREDOWNLOAD_PARALLELISM: &str = "apps.kruise.io/image-predownload-parallelism";
pub(crate) const IMAGE_PREDOWNLOAD_TIMEOUT_SECONDS: &str = "apps.kruise.io/image-predownload-timeout-seconds";
pub(crate) const IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS: &str = "apps.kruise.io/image-predownload-min-updated-ready-pods";
/// `Always` or `Cascading` deletion protection.
pub const DELETE_PROTECTION: &str = "policy.kruise.io/delete-protection";
/// Template annotation written by `kubectl kruise rollout restart`.
pub const RESTARTED_AT: &str = "kubectl.kruise.io/restartedAt";

// ---- ControllerRevision labels and annotations
/// The revision's hash (before collision handling changes the name).
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";
/// Decimal hash of the volumeClaimTemplates at revision creation (`""` without VCTs).
pub const VOLUME_CLAIM_TEMPLATE_HASH: &str = "kruise.io/cloneset-volumeclaimtemplate-hash";
/// Change cause shown by `kubectl kruise rollout history`, copied from the CloneSet.
pub const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";
