//! Pod conditions Kruise writes: the readiness-gate conditions, the `KruisePodReady` not-ready
//! keys of lifecycle hooks (`pkg/util/podreadiness`), and the pod `Ready=False` that Kruise
//! sets in the same status write (`util.SetPodReadyCondition`), so endpoints drop the pod before
//! anything restarts.
//!
//! Every function returns the conditions to write as strategic-merge items (merged by `type`).
//! Kruise replaces a condition whole, so fields it would leave empty are sent as `null`.

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::api::keys;
use crate::core::pod_read::PodRead;
use crate::core::pods::rfc3339_seconds;

/// One holder of a pod's not-ready state, in Kruise's JSON field order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct NotReadyKey {
    #[serde(rename = "userAgent")]
    pub user_agent: String,
    pub key: String,
}

/// The key of the preDelete hook's not-ready mark.
pub(crate) const PRE_DELETE_HOOK: &str = "preDeleteHook";
/// The key of the inPlaceUpdate hook's not-ready mark.
pub(crate) const PRE_UPDATE_HOOK: &str = "preUpdateHook";
const LIFECYCLE_USER_AGENT: &str = "Lifecycle";

pub(crate) fn find<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// A whole condition (absent reason and message are cleared, as Kruise's replacement does).
pub(crate) fn condition(type_: &str, status: bool, reason: &str, message: &str, now: Timestamp) -> Value {
    let text = |s: &str| if s.is_empty() { Value::Null } else { json!(s) };
    json!({"type": type_, "status": if status { "True" } else { "False" }, "reason": text(reason), "message": text(message),
           "lastTransitionTime": rfc3339_seconds(now)})
}

/// Kruise's `hasEqualCondition`: same status, reason and message.
pub(crate) fn has_equal(pod: &dyn PodRead, type_: &str, status: bool, reason: &str, message: &str) -> bool {
    pod.condition(type_).is_some_and(|c| {
        c.status == if status { "True" } else { "False" }
            && c.reason.unwrap_or_default() == reason
            && c.message.unwrap_or_default() == message
    })
}

fn keys_of(message: &str) -> Vec<NotReadyKey> {
    serde_json::from_str(message).unwrap_or_default()
}

fn dump(mut list: Vec<NotReadyKey>) -> String {
    list.sort();
    serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
}

fn lifecycle_key(key: &str) -> NotReadyKey {
    NotReadyKey { user_agent: LIFECYCLE_USER_AGENT.into(), key: key.into() }
}

/// `markPodNotReady`: appends `key` to `KruisePodReady`'s list (other holders' keys stay) and
/// sets it False, with pod Ready=False in the same write. `None`: already marked, or the pod
/// lacks the gate.
pub(crate) fn add_not_ready_key(pod: &Pod, key: &str, now: Timestamp) -> Option<Vec<Value>> {
    if !pod.has_readiness_gate(keys::KRUISE_POD_READY) {
        return None;
    }
    let entry = lifecycle_key(key);
    let existing = find(pod, keys::KRUISE_POD_READY);
    let mut list = existing.map(|c| keys_of(c.message.as_deref().unwrap_or_default())).unwrap_or_default();
    let already = existing.is_some_and(|c| c.status != "True") && list.contains(&entry);
    if already {
        return None;
    }
    if !list.contains(&entry) {
        list.push(entry);
    }
    let reason = existing.and_then(|c| c.reason.clone()).unwrap_or_default();
    let gate = condition(keys::KRUISE_POD_READY, false, &reason, &dump(list), now);
    Some(with_ready_after(pod, gate))
}

/// Takes `key` off `KruisePodReady`'s list; the condition is True again once the list is empty.
/// `None`: the key is not there.
pub(crate) fn remove_not_ready_key(pod: &Pod, key: &str, now: Timestamp) -> Option<Vec<Value>> {
    if !pod.has_readiness_gate(keys::KRUISE_POD_READY) {
        return None;
    }
    let existing = find(pod, keys::KRUISE_POD_READY)?;
    let entry = lifecycle_key(key);
    let mut list = keys_of(existing.message.as_deref().unwrap_or_default());
    let before = list.len();
    list.retain(|k| *k != entry);
    if list.len() == before {
        return None;
    }
    let status = if list.is_empty() { true } else { existing.status == "True" };
    let reason = existing.reason.clone().unwrap_or_default();
    Some(vec![condition(keys::KRUISE_POD_READY, status, &reason, &dump(list), now)])
}

/// The write that starts an in-place update: `InPlaceUpdateReady=False` (reason
/// `StartInPlaceUpdate`) and, in the same write, pod Ready=False.
pub(crate) fn start_in_place_update(pod: &Pod, now: Timestamp) -> Vec<Value> {
    let gate = condition(keys::INPLACE_UPDATE_READY, false, keys::REASON_START_INPLACE_UPDATE, "", now);
    with_ready_after(pod, gate)
}

/// `gate` plus Kruise's `SetPodReadyCondition` on the pod as it will be: Ready goes False with
/// reason `ReadinessGatesNotReady` when it exists, containers are ready and a gate is not True.
fn with_ready_after(pod: &Pod, gate: Value) -> Vec<Value> {
    let gate_type = gate["type"].as_str().unwrap_or_default().to_string();
    let gate_status = gate["status"].as_str().unwrap_or_default().to_string();
    let mut out = vec![gate];
    let Some(ready) = find(pod, "Ready") else { return out };
    if find(pod, "ContainersReady").is_none_or(|c| c.status != "True") {
        return out;
    }
    let status_of = |t: &str| if t == gate_type { Some(gate_status.clone()) } else { find(pod, t).map(|c| c.status.clone()) };
    let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.as_deref()).unwrap_or_default();
    let unready: Vec<String> = gates
        .iter()
        .filter_map(|g| match status_of(&g.condition_type) {
            None => Some(format!("corresponding condition of pod readiness gate {:?} does not exist.", g.condition_type)),
            Some(s) if s != "True" => Some(format!("the status of pod readiness gate {:?} is not \"True\", but {s}", g.condition_type)),
            Some(_) => None,
        })
        .collect();
    // Kruise only ever turns Ready off here; the kubelet turns it back on.
    if !unready.is_empty() && ready.status != "False" {
        out.push(json!({"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady", "message": unready.join(", "),
                        "lastTransitionTime": null, "lastProbeTime": null}));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(conditions: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "readinessGates": [{"conditionType": "InPlaceUpdateReady"}, {"conditionType": "KruisePodReady"}]},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn ready_pod() -> Pod {
        pod(json!([
            {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"},
            {"type": "InPlaceUpdateReady", "status": "True"}, {"type": "KruisePodReady", "status": "True"},
        ]))
    }

    #[test]
    fn start_in_place_update_sets_pod_ready_false_in_the_same_write() {
        let now = Timestamp::UNIX_EPOCH;
        let c = start_in_place_update(&ready_pod(), now);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(c[0]["type"], "InPlaceUpdateReady");
        assert_eq!(c[0]["status"], "False");
        assert_eq!(c[0]["reason"], "StartInPlaceUpdate");
        assert_eq!(c[1]["type"], "Ready");
        assert_eq!(c[1]["status"], "False");
        assert_eq!(c[1]["reason"], "ReadinessGatesNotReady");
        assert_eq!(c[1]["message"], "the status of pod readiness gate \"InPlaceUpdateReady\" is not \"True\", but False");
    }

    #[test]
    fn ready_is_left_to_the_kubelet_when_containers_are_not_ready() {
        let p = pod(json!([{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "False"}]));
        assert_eq!(start_in_place_update(&p, Timestamp::UNIX_EPOCH).len(), 1);
    }

    #[test]
    fn a_true_condition_replaces_the_old_reason() {
        let c = condition("InPlaceUpdateReady", true, "", "", Timestamp::UNIX_EPOCH);
        assert_eq!(c["reason"], Value::Null, "a stale StartInPlaceUpdate reason must be cleared");
        assert!(c.as_object().unwrap().contains_key("reason"));
    }

    #[test]
    fn not_ready_keys_are_appended_in_kruise_order_and_removed_to_true() {
        let now = Timestamp::UNIX_EPOCH;
        let mut p = ready_pod();
        let other = r#"[{"userAgent":"Other","key":"x"}]"#;
        for c in p.status.as_mut().unwrap().conditions.as_mut().unwrap() {
            if c.type_ == "KruisePodReady" {
                c.status = "False".into();
                c.message = Some(other.into());
            }
        }
        let added = add_not_ready_key(&p, PRE_UPDATE_HOOK, now).unwrap();
        assert_eq!(added[0]["message"], r#"[{"userAgent":"Lifecycle","key":"preUpdateHook"},{"userAgent":"Other","key":"x"}]"#);
        assert_eq!(added[0]["status"], "False");
        // As stored, adding again writes nothing; removing leaves the other holder's key, still False.
        for c in p.status.as_mut().unwrap().conditions.as_mut().unwrap() {
            if c.type_ == "KruisePodReady" {
                c.message = added[0]["message"].as_str().map(str::to_string);
            }
        }
        assert_eq!(add_not_ready_key(&p, PRE_UPDATE_HOOK, now), None);
        let removed = remove_not_ready_key(&p, PRE_UPDATE_HOOK, now).unwrap();
        assert_eq!(removed[0]["message"], other);
        assert_eq!(removed[0]["status"], "False");
        assert_eq!(remove_not_ready_key(&ready_pod(), PRE_UPDATE_HOOK, now), None, "no key, no write");
    }

    #[test]
    fn the_last_key_removed_sets_kruise_pod_ready_true() {
        let now = Timestamp::UNIX_EPOCH;
        let mut p = ready_pod();
        for c in p.status.as_mut().unwrap().conditions.as_mut().unwrap() {
            if c.type_ == "KruisePodReady" {
                c.status = "False".into();
                c.message = Some(r#"[{"userAgent":"Lifecycle","key":"preUpdateHook"}]"#.into());
            }
        }
        let removed = remove_not_ready_key(&p, PRE_UPDATE_HOOK, now).unwrap();
        assert_eq!(removed[0]["status"], "True");
        assert_eq!(removed[0]["message"], "[]");
    }
}
