//! Lifecycle hook predicates and the state a pod's lifecycle label should move to.

use crate::api::keys;
use crate::api::shared::{Lifecycle, LifecycleHook, LifecycleState};
use crate::core::pod_read::PodRead;

/// The pod's lifecycle state; an absent or unknown label reads as `None` (behaves like Normal).
pub(crate) fn state(pod: &dyn PodRead) -> Option<LifecycleState> {
    pod.label(keys::LIFECYCLE_STATE).and_then(LifecycleState::parse)
}

/// Hooked: any handler label has its value, or any handler finalizer is present.
pub(crate) fn is_hooked(hook: Option<&LifecycleHook>, pod: &dyn PodRead) -> bool {
    let Some(hook) = hook else { return false };
    hook.labels_handler.iter().any(|(k, v)| pod.label(k) == Some(v.as_str()))
        || hook.finalizers_handler.iter().any(|f| pod.has_finalizer(f))
}

/// All hooked: every handler label has its value and every handler finalizer is present.
pub(crate) fn is_all_hooked(hook: Option<&LifecycleHook>, pod: &dyn PodRead) -> bool {
    let Some(hook) = hook else { return false };
    hook.labels_handler.iter().all(|(k, v)| pod.label(k) == Some(v.as_str()))
        && hook.finalizers_handler.iter().all(|f| pod.has_finalizer(f))
}

/// PreparingNormal → Normal: without a preNormal hook once the pod is scheduled (Kruise v1.9.0
/// waits for `spec.nodeName`), with one once the pod is all hooked.
pub(crate) fn ready_for_normal(pod: &dyn PodRead, pre_normal: Option<&LifecycleHook>) -> bool {
    match pre_normal {
        None => !pod.node_name().is_empty(),
        Some(_) => is_all_hooked(pre_normal, pod),
    }
}

/// What the lifecycle allows when a pod is chosen for an in-place update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum InPlaceGate {
    /// Update now.
    Proceed,
    /// Move to PreparingUpdate first (and, from Updated, re-add the hook's handlers).
    PrepareUpdate,
    /// PreparingUpdate and still hooked: the hook's owner has not released the pod yet.
    Wait,
    /// A state that must not be updated in place.
    NotAllowed(String),
}

pub(crate) fn in_place_gate(pod: &dyn PodRead, hook: Option<&LifecycleHook>) -> InPlaceGate {
    let name = pod.name();
    let hooked = || is_hooked(hook, pod);
    match state(pod) {
        None | Some(LifecycleState::PreparingNormal) | Some(LifecycleState::Normal) => {
            if hooked() {
                InPlaceGate::PrepareUpdate
            } else {
                InPlaceGate::Proceed
            }
        }
        // Kruise's `UpdatePodLifecycleWithHandler` does nothing without an inPlaceUpdate hook: the
        // pod waits for refresh to move it from Updated to Normal first.
        Some(LifecycleState::Updated) if hook.is_some() => InPlaceGate::PrepareUpdate,
        Some(LifecycleState::Updated) => InPlaceGate::Wait,
        Some(LifecycleState::Updating) => InPlaceGate::Proceed,
        Some(LifecycleState::PreparingUpdate) => {
            if hooked() {
                InPlaceGate::Wait
            } else {
                InPlaceGate::Proceed
            }
        }
        Some(other) => InPlaceGate::NotAllowed(format!("not allowed to in-place update pod {name} in state {}", other.as_str())),
    }
}

/// After an in-place update (or a rollback while waiting): Kruise's
/// `cs.Spec.Lifecycle != nil && !IsPodAllHooked(inPlaceUpdate, pod)` — so with any lifecycle
/// but no inPlaceUpdate hook (e.g. only preDelete) the pod passes through Updated too.
pub(crate) fn state_after_update(pod: &dyn PodRead, lifecycle: Option<&Lifecycle>) -> LifecycleState {
    let hook = lifecycle.and_then(|l| l.in_place_update.as_ref());
    if lifecycle.is_some() && !is_all_hooked(hook, pod) { LifecycleState::Updated } else { LifecycleState::Normal }
}

/// Updated → Normal once there is no inPlaceUpdate hook or the hook's owner has re-added all of
/// its handlers.
pub(crate) fn updated_may_become_normal(pod: &dyn PodRead, lifecycle: Option<&Lifecycle>) -> bool {
    match lifecycle.and_then(|l| l.in_place_update.as_ref()) {
        None => true,
        hook => is_all_hooked(hook, pod),
    }
}

/// The hook's labels and finalizers, re-added when an Updated pod is prepared for another update.
pub(crate) fn hook_handlers_patch(hook: Option<&LifecycleHook>) -> (std::collections::BTreeMap<String, String>, Vec<String>) {
    hook.map_or_else(Default::default, |h| (h.labels_handler.clone(), h.finalizers_handler.clone()))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use serde_json::json;

    fn pod(labels: serde_json::Value, finalizers: serde_json::Value, node: Option<&str>) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "labels": labels, "finalizers": finalizers}, "spec": {"containers": [], "nodeName": node}}),
        )
        .unwrap()
    }

    fn hook(labels: serde_json::Value, finalizers: serde_json::Value) -> LifecycleHook {
        serde_json::from_value(json!({"labelsHandler": labels, "finalizersHandler": finalizers})).unwrap()
    }

    #[test]
    fn hooked_is_any_and_all_hooked_is_every() {
        let h = hook(json!({"a": "1", "b": "2"}), json!(["f"]));
        let some = pod(json!({"a": "1"}), json!([]), None);
        let all = pod(json!({"a": "1", "b": "2"}), json!(["f"]), None);
        let wrong_value = pod(json!({"a": "x"}), json!([]), None);
        assert!(is_hooked(Some(&h), &some) && !is_all_hooked(Some(&h), &some));
        assert!(is_hooked(Some(&h), &all) && is_all_hooked(Some(&h), &all));
        assert!(!is_hooked(Some(&h), &wrong_value));
        assert!(!is_hooked(None, &all) && !is_all_hooked(None, &all));
    }

    #[test]
    fn in_place_gate_follows_kruise_states() {
        let h = hook(json!({"hold": "true"}), json!([]));
        let with_state = |st: &str, hooked: bool| {
            let labels = if hooked { json!({keys::LIFECYCLE_STATE: st, "hold": "true"}) } else { json!({keys::LIFECYCLE_STATE: st}) };
            pod(labels, json!([]), Some("n"))
        };
        assert_eq!(in_place_gate(&with_state("Normal", false), Some(&h)), InPlaceGate::Proceed);
        assert_eq!(in_place_gate(&with_state("Normal", true), Some(&h)), InPlaceGate::PrepareUpdate);
        assert_eq!(in_place_gate(&with_state("PreparingUpdate", true), Some(&h)), InPlaceGate::Wait);
        assert_eq!(in_place_gate(&with_state("PreparingUpdate", false), Some(&h)), InPlaceGate::Proceed);
        assert_eq!(in_place_gate(&with_state("Updated", false), Some(&h)), InPlaceGate::PrepareUpdate);
        assert_eq!(in_place_gate(&with_state("Updating", true), Some(&h)), InPlaceGate::Proceed);
        assert_eq!(in_place_gate(&with_state("Updated", false), None), InPlaceGate::Wait, "no hook: refresh moves it to Normal first");
        assert!(matches!(in_place_gate(&with_state("PreparingDelete", false), Some(&h)), InPlaceGate::NotAllowed(_)));
        let with_hook = Lifecycle { in_place_update: Some(h.clone()), ..Default::default() };
        let pre_delete_only = Lifecycle { pre_delete: Some(h.clone()), ..Default::default() };
        assert_eq!(state_after_update(&with_state("Updating", false), Some(&with_hook)), LifecycleState::Updated);
        assert_eq!(state_after_update(&with_state("Updating", true), Some(&with_hook)), LifecycleState::Normal, "all hooked");
        assert_eq!(state_after_update(&with_state("Updating", false), None), LifecycleState::Normal);
        assert_eq!(
            state_after_update(&with_state("Updating", true), Some(&pre_delete_only)),
            LifecycleState::Updated,
            "any lifecycle without an inPlaceUpdate hook passes through Updated (IsPodAllHooked(nil) is false)"
        );
        assert!(updated_may_become_normal(&with_state("Updated", false), Some(&pre_delete_only)));
        assert!(!updated_may_become_normal(&with_state("Updated", false), Some(&with_hook)));
        assert!(updated_may_become_normal(&with_state("Updated", true), Some(&with_hook)));
    }

    #[test]
    fn preparing_normal_waits_for_scheduling_or_the_pre_normal_hook() {
        // Kruise TestUpdate lifecycle cases: →Normal without hook once nodeName is set; stays when not scheduled.
        assert!(!ready_for_normal(&pod(json!({}), json!([]), None), None));
        assert!(ready_for_normal(&pod(json!({}), json!([]), Some("n1")), None));
        let h = hook(json!({"ready": "true"}), json!([]));
        assert!(!ready_for_normal(&pod(json!({}), json!([]), Some("n1")), Some(&h)), "preNormal not hooked");
        assert!(ready_for_normal(&pod(json!({"ready": "true"}), json!([]), None), Some(&h)), "preNormal all hooked");
    }
}
