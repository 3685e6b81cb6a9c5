//! Readiness, availability and the pod accessors the sorts share (`IsPodAvailable` in
//! `cloneset_sync_utils.go`, Kubernetes' `podutil`).

use std::cmp::Ordering;
use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::keys;
use crate::api::shared::LifecycleState;
use crate::core::pod_read::{ConditionRef, PodRead};

/// The well-known node label `kubernetes.io/hostname` (`v1.LabelHostname`). It is a node label
/// that CloneSet never writes, so `api::keys` does not carry it.
pub(super) const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
const CONDITION_READY: &str = "Ready";
const STATUS_TRUE: &str = "True";
const PHASE_UNKNOWN: &str = "Unknown";
const PHASE_RUNNING: &str = "Running";
const RESTART_POLICY_ALWAYS: &str = "Always";
/// Go's zero `time.Time`, 0001-01-01T00:00:00Z, in Unix seconds.
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

/// Kubernetes' `podutil.IsPodReady`: the pod's first `Ready` condition has status `True`.
/// The phase is not looked at.
pub fn is_pod_ready(pod: &dyn PodRead) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == STATUS_TRUE)
}

/// Kruise's CloneSet `IsPodAvailable(coreControl, pod, minReadySeconds)`, which all of these use:
/// the scale/update arithmetic (unavailable counts), scale-down victim order, and
/// `limitUpdateIndexes`. A pod is available when all of these hold:
///
/// * its `lifecycle.apps.kruise.io/state` label is absent, empty or `Normal` (any other value,
///   including one Kruise does not know, makes it unavailable);
/// * its phase is `Running`;
/// * Kubernetes' `podutil.IsPodAvailable`: ready, and either `min_ready_seconds` is 0 or the
///   first `Ready` condition has a non-zero `lastTransitionTime` with
///   `lastTransitionTime + min_ready_seconds` strictly before `now`;
/// * its first `InPlaceUpdateReady` condition, if there is one, has status `True`.
///
/// With `min_ready_seconds == 0` this is Kruise's `isPodReady`, the test that decides whether
/// deleting a pod consumes `deleteReadyLimit`.
pub fn is_pod_available(pod: &dyn PodRead, min_ready_seconds: i32, now: Timestamp) -> bool {
    let state = lifecycle_state(pod);
    if !state.is_empty() && state != LifecycleState::Normal.as_str() {
        return false;
    }
    if pod.phase() != PHASE_RUNNING || !k8s_is_pod_available(pod, min_ready_seconds, now) {
        return false;
    }
    pod.condition(keys::INPLACE_UPDATE_READY).is_none_or(|c| c.status == STATUS_TRUE)
}

/// `podutil.IsPodAvailable` (no phase, no lifecycle, no in-place condition).
fn k8s_is_pod_available(pod: &dyn PodRead, min_ready_seconds: i32, now: Timestamp) -> bool {
    let Some(c) = ready_condition(pod).filter(|c| c.status == STATUS_TRUE) else {
        return false;
    };
    if min_ready_seconds == 0 {
        return true;
    }
    let Some(since) = non_zero(c.last_transition_time) else {
        return false;
    };
    since.checked_add(SignedDuration::from_secs(i64::from(min_ready_seconds))).is_ok_and(|t| t < now)
}

/// The value of `controller.kubernetes.io/pod-deletion-cost`, parsed as Kubernetes and Kruise
/// parse it: absent or invalid means 0. Valid values are decimal int32 strings starting with
/// `-`, a non-zero digit, or exactly `"0"`; so `"+10"`, `"008"`, `""`, `" 1"` and anything out of
/// int32 range are invalid, while `"-0"` and `"-007"` are accepted.
pub fn pod_deletion_cost(pod: &dyn PodRead) -> i32 {
    let Some(value) = pod.annotation(keys::POD_DELETION_COST) else {
        return 0;
    };
    let valid_first = match value.as_bytes().first() {
        None => false,
        Some(b'-') | Some(b'1'..=b'9') => true,
        Some(b'0') => value == "0",
        Some(_) => false,
    };
    if !valid_first {
        return 0;
    }
    value.parse::<i32>().unwrap_or(0)
}

fn ready_condition(pod: &dyn PodRead) -> Option<ConditionRef<'_>> {
    pod.condition(CONDITION_READY)
}

/// `podReadyTime`: when the pod became ready, `None` when it is not ready or the time is zero.
/// The first `Ready` condition is the one that is `True`, when the pod is ready.
pub(super) fn ready_since(pod: &dyn PodRead) -> Option<Timestamp> {
    ready_condition(pod).filter(|c| c.status == STATUS_TRUE).and_then(|c| non_zero(c.last_transition_time))
}

/// A `metav1.Time` as Go sees it: absent and Go's zero instant are both "zero" (`None`).
fn non_zero(t: Option<Timestamp>) -> Option<Timestamp> {
    t.filter(|t| t.as_second() != GO_ZERO_TIME_SECONDS || t.subsec_nanosecond() != 0)
}

/// `Pending < Unknown < Running`; every other phase (including none) ranks with Pending,
/// as a missing key in Go's map reads as 0.
pub(super) fn phase_ordinal(pod: &dyn PodRead) -> u8 {
    match pod.phase() {
        PHASE_UNKNOWN => 1,
        PHASE_RUNNING => 2,
        _ => 0,
    }
}

/// A label value, `""` when absent (Go's map read).
pub(super) fn label_value<'a>(pod: &'a dyn PodRead, key: &str) -> &'a str {
    pod.label(key).unwrap_or_default()
}

pub(super) fn lifecycle_state(pod: &dyn PodRead) -> &str {
    label_value(pod, keys::LIFECYCLE_STATE)
}

pub(super) fn creation_time(pod: &dyn PodRead) -> Option<Timestamp> {
    non_zero(pod.creation_timestamp())
}

/// The highest restart count among regular containers.
pub fn max_container_restarts(pod: &Pod) -> i32 {
    pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or(&[]).iter().map(|c| c.restart_count).fold(0, i32::max)
}

/// Whether an init container with this `restartPolicy` is a sidecar (it keeps running).
pub fn is_sidecar_restart_policy(policy: Option<&str>) -> bool {
    policy == Some(RESTART_POLICY_ALWAYS)
}

/// The highest restart count among sidecars (init containers with `restartPolicy: Always`).
pub fn max_sidecar_restarts(pod: &Pod) -> i32 {
    let sidecars: BTreeSet<&str> = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|c| is_sidecar_restart_policy(c.restart_policy.as_deref()))
        .map(|c| c.name.as_str())
        .collect();
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|c| sidecars.contains(c.name.as_str()))
        .map(|c| c.restart_count)
        .fold(0, i32::max)
}

/// Go's `afterOrZero` as an ordering of "zero first, then later first": `Less` means `a` sorts
/// before `b`.
pub(super) fn cmp_zero_then_later(a: Option<Timestamp>, b: Option<Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

/// Positions `0..keys.len()` sorted stably by `cmp`.
pub(super) fn sorted_positions<K>(keys: &[K], cmp: impl Fn(&K, &K) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| cmp(&keys[a], &keys[b]));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::order::fixtures::*;

    // ---- availability

    #[test]
    fn ready_ignores_phase_and_uses_first_ready_condition() {
        assert!(is_pod_ready(&pod_with(Some("Pending"), vec![cond("Ready", "True", None)])));
        assert!(!is_pod_ready(&pod_with(Some("Running"), vec![])));
        assert!(!is_pod_ready(&pod_with(Some("Running"), vec![cond("Ready", "False", None), cond("Ready", "True", None)])));
    }

    #[test]
    fn available_needs_running_normal_state_and_inplace_ready() {
        let n = now();
        assert!(is_pod_available(&ready_pod(), 0, n));
        assert!(!is_pod_available(&pod_with(Some("Pending"), vec![cond("Ready", "True", None)]), 0, n));
        for (state, ok) in [("", true), ("Normal", true), ("PreparingNormal", false), ("Updating", false), ("Bogus", false)] {
            assert_eq!(is_pod_available(&with_labels(ready_pod(), &[(keys::LIFECYCLE_STATE, state)]), 0, n), ok, "{state}");
        }
        let mut p = ready_pod();
        p.status.as_mut().unwrap().conditions.as_mut().unwrap().push(cond(keys::INPLACE_UPDATE_READY, "False", None));
        assert!(!is_pod_available(&p, 0, n));
        p.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].status = "True".into();
        assert!(is_pod_available(&p, 0, n));
    }

    #[test]
    fn available_waits_min_ready_seconds_strictly() {
        let n = now();
        let since = |secs: i64| pod_with(Some("Running"), vec![cond("Ready", "True", Some(n - SignedDuration::from_secs(secs)))]);
        assert!(!is_pod_available(&since(10), 10, n), "exactly minReadySeconds is not enough (Before is strict)");
        assert!(is_pod_available(&since(11), 10, n));
        assert!(!is_pod_available(&since(5), 10, n));
        // A zero transition time never satisfies a positive minReadySeconds.
        assert!(!is_pod_available(&ready_pod(), 1, n));
        let go_zero = pod_with(Some("Running"), vec![cond("Ready", "True", Some(ts("0001-01-01T00:00:00Z")))]);
        assert!(!is_pod_available(&go_zero, 1, n));
    }

    #[test]
    fn deletion_cost_parses_like_kubernetes() {
        let cost = |v: &str| {
            let mut p = Pod::default();
            p.metadata.annotations = Some(label_map(&[(keys::POD_DELETION_COST, v)]));
            pod_deletion_cost(&p)
        };
        assert_eq!(pod_deletion_cost(&Pod::default()), 0);
        for (v, want) in [
            ("10", 10),
            ("-5", -5),
            ("0", 0),
            ("-0", 0),
            ("-007", -7),
            ("+10", 0),
            ("008", 0),
            ("", 0),
            ("abc", 0),
            ("1a", 0),
            (" 1", 0),
            ("-", 0),
            ("2147483647", i32::MAX),
            ("2147483648", 0),
            ("-2147483648", i32::MIN),
        ] {
            assert_eq!(cost(v), want, "{v:?}");
        }
    }
}
