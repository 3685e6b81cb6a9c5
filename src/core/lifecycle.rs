//! Lifecycle hook predicates and the state a pod's lifecycle label should move to (§6).

use k8s_openapi::api::core::v1::Pod;

use crate::api::keys;
use crate::api::shared::{LifecycleHook, LifecycleState};

/// The pod's lifecycle state; an absent or unknown label reads as `None` (behaves like Normal).
pub fn state(pod: &Pod) -> Option<LifecycleState> {
    pod.metadata.labels.as_ref()?.get(keys::LIFECYCLE_STATE).and_then(|s| LifecycleState::parse(s))
}

/// Hooked: any handler label has its value, or any handler finalizer is present.
pub fn is_hooked(hook: Option<&LifecycleHook>, pod: &Pod) -> bool {
    let Some(hook) = hook else { return false };
    let labels = pod.metadata.labels.as_ref();
    let finalizers = pod.metadata.finalizers.as_deref().unwrap_or_default();
    hook.labels_handler.iter().any(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        || hook.finalizers_handler.iter().any(|f| finalizers.contains(f))
}

/// All hooked: every handler label has its value and every handler finalizer is present.
pub fn is_all_hooked(hook: Option<&LifecycleHook>, pod: &Pod) -> bool {
    let Some(hook) = hook else { return false };
    let labels = pod.metadata.labels.as_ref();
    let finalizers = pod.metadata.finalizers.as_deref().unwrap_or_default();
    hook.labels_handler.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        && hook.finalizers_handler.iter().all(|f| finalizers.contains(f))
}

/// PreparingNormal → Normal: without a preNormal hook once the pod is scheduled (Kruise v1.9.0
/// waits for `spec.nodeName`), with one once the pod is all hooked.
pub fn ready_for_normal(pod: &Pod, pre_normal: Option<&LifecycleHook>) -> bool {
    match pre_normal {
        None => pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()),
        Some(_) => is_all_hooked(pre_normal, pod),
    }
}

#[cfg(test)]
mod tests {
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
    fn preparing_normal_waits_for_scheduling_or_the_pre_normal_hook() {
        // Kruise TestUpdate lifecycle cases: →Normal without hook once nodeName is set; stays when not scheduled.
        assert!(!ready_for_normal(&pod(json!({}), json!([]), None), None));
        assert!(ready_for_normal(&pod(json!({}), json!([]), Some("n1")), None));
        let h = hook(json!({"ready": "true"}), json!([]));
        assert!(!ready_for_normal(&pod(json!({}), json!([]), Some("n1")), Some(&h)), "preNormal not hooked");
        assert!(ready_for_normal(&pod(json!({"ready": "true"}), json!([]), None), Some(&h)), "preNormal all hooked");
    }
}
