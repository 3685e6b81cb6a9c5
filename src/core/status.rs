//! CloneSet status: counts, current revision, the Progressing condition, and whether the
//! new status is worth a write.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::cloneset::condition;
use crate::api::{CloneSet, CloneSetCondition, CloneSetStatus, keys};
use crate::core::order;
use crate::core::pod_read::PodRead;
use crate::core::pods::hash_matches;

pub(crate) const REASON_AVAILABLE: &str = "CloneSetAvailable";
pub(crate) const REASON_PAUSED: &str = "CloneSetPaused";
pub(crate) const REASON_PARTITION_AVAILABLE: &str = "ProgressPartitionAvailable";
pub(crate) const REASON_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
pub(crate) const REASON_UPDATED: &str = "CloneSetUpdated";
const NO_DEADLINE: i32 = i32::MAX;

/// Ready for status purposes: Running, PodReady, and InPlaceUpdateReady not False. Lifecycle
/// state does not matter here.
pub(crate) fn is_ready(pod: &dyn PodRead) -> bool {
    pod.phase() == "Running" && order::is_pod_ready(pod) && pod.condition(keys::INPLACE_UPDATE_READY).is_none_or(|c| c.status == "True")
}

/// Available: ready, Ready for `minReadySeconds`, and lifecycle state empty or Normal.
pub fn is_available(pod: &dyn PodRead, min_ready_seconds: i32, now: Timestamp) -> bool {
    is_ready(pod) && order::is_pod_available(pod, min_ready_seconds, now)
}

/// The revision hash label of a pod.
pub fn pod_revision(pod: &dyn PodRead) -> Option<&str> {
    pod.label(keys::CONTROLLER_REVISION_HASH)
}

/// Kubernetes' `selector.String()`: requirements sorted by key; `k=v`, `k in (a,b)`,
/// `k notin (a,b)`, `k`, `!k`; values sorted.
pub fn selector_string(selector: &LabelSelector) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        reqs.push((k.clone(), format!("{k}={v}")));
    }
    for e in selector.match_expressions.iter().flatten() {
        let mut values = e.values.clone().unwrap_or_default();
        values.sort();
        let k = &e.key;
        let text = match e.operator.as_str() {
            "In" => format!("{k} in ({})", values.join(",")),
            "NotIn" => format!("{k} notin ({})", values.join(",")),
            "Exists" => k.clone(),
            "DoesNotExist" => format!("!{k}"),
            other => format!("{k} {other} ({})", values.join(",")),
        };
        reqs.push((k.clone(), text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

/// Inputs of a status computation.
pub struct StatusInput<'a> {
    pub cloneset: &'a CloneSet,
    /// Active pods (not terminating, not Succeeded/Failed).
    pub pods: &'a [&'a dyn PodRead],
    pub update_revision: &'a str,
    /// The current revision chosen at the start of the reconcile.
    pub current_revision: &'a str,
    pub collision_count: i32,
    /// `replicas − partition`.
    pub expected_updated_replicas: i32,
    pub now: Timestamp,
}

/// The new status and, when the Progressing condition has a running deadline, when to look again.
pub fn compute(input: &StatusInput<'_>) -> (CloneSetStatus, Option<Duration>) {
    let cs = input.cloneset;
    let old = cs.status.clone().unwrap_or_default();
    let spec_replicas = cs.spec.replicas.unwrap_or(1);
    let mrs = cs.spec.min_ready_seconds;
    let mut s = CloneSetStatus {
        observed_generation: cs.metadata.generation.unwrap_or(0),
        update_revision: input.update_revision.to_string(),
        current_revision: input.current_revision.to_string(),
        collision_count: Some(input.collision_count),
        label_selector: selector_string(&cs.spec.selector),
        conditions: old.conditions.clone(),
        expected_updated_replicas: input.expected_updated_replicas,
        ..Default::default()
    };
    for pod in input.pods {
        let updated = pod_revision(pod).is_some_and(|h| hash_matches(h, input.update_revision));
        let ready = is_ready(pod);
        let available = ready && order::is_pod_available(pod, mrs, input.now);
        s.replicas += 1;
        s.ready_replicas += i32::from(ready);
        s.available_replicas += i32::from(available);
        s.updated_replicas += i32::from(updated);
        s.updated_ready_replicas += i32::from(updated && ready);
        s.updated_available_replicas += i32::from(updated && available);
    }
    if s.updated_replicas == s.replicas && s.replicas == spec_replicas {
        s.current_revision = input.update_revision.to_string();
    }
    let requeue = apply_progressing(cs, &mut s, input.now);
    (s, requeue)
}

/// Sets, replaces or removes the Progressing condition; returns when the deadline passes.
fn apply_progressing(cs: &CloneSet, s: &mut CloneSetStatus, now: Timestamp) -> Option<Duration> {
    let pds = match cs.spec.progress_deadline_seconds {
        Some(p) if p != NO_DEADLINE => p,
        _ => {
            s.conditions.retain(|c| c.type_ != condition::PROGRESSING);
            return None;
        }
    };
    let spec_replicas = cs.spec.replicas.unwrap_or(1);
    let existing = s.conditions.iter().find(|c| c.type_ == condition::PROGRESSING).cloned();
    let deadline_of = |c: &CloneSetCondition| c.last_update_time.as_ref().map(|t| t.0 + SignedDuration::from_secs(i64::from(pds)));
    let (status, reason, message) = if s.current_revision == s.update_revision
        && s.replicas == spec_replicas
        && s.updated_replicas == spec_replicas
        && s.updated_available_replicas == spec_replicas
    {
        ("True", REASON_AVAILABLE, "CloneSet is available".to_string())
    } else if cs.spec.update_strategy.paused {
        ("True", REASON_PAUSED, "CloneSet is paused".to_string())
    } else if s.expected_updated_replicas < spec_replicas && s.expected_updated_replicas <= s.updated_available_replicas {
        ("True", REASON_PARTITION_AVAILABLE, "CloneSet has been paused due to partition ready".to_string())
    } else if existing
        .as_ref()
        .is_some_and(|c| c.reason == REASON_DEADLINE_EXCEEDED || (c.reason == REASON_UPDATED && deadline_of(c).is_some_and(|d| d < now)))
    {
        ("False", REASON_DEADLINE_EXCEEDED, format!("CloneSet revision {} has timed out progressing", s.update_revision))
    } else {
        ("True", REASON_UPDATED, "CloneSet is progressing".to_string())
    };
    let new = CloneSetCondition {
        type_: condition::PROGRESSING.into(),
        status: status.into(),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        reason: reason.into(),
        message,
    };
    let kept = set_condition(&mut s.conditions, new);
    if kept.reason != REASON_UPDATED {
        return None;
    }
    let remaining = deadline_of(&kept)?.duration_since(now);
    let remaining = Duration::try_from(remaining).unwrap_or(Duration::ZERO);
    // Look again just after the deadline passes.
    Some(if remaining >= Duration::from_secs(1) { remaining + Duration::from_secs(1) } else { remaining })
}

/// Kruise's condition update rule: same type, status and reason keeps the existing entry (its
/// times keep running); a new reason with the same status keeps lastTransitionTime; anything else
/// replaces the entry. Returns the entry now in place.
pub(crate) fn set_condition(conditions: &mut Vec<CloneSetCondition>, mut new: CloneSetCondition) -> CloneSetCondition {
    match conditions.iter().position(|c| c.type_ == new.type_) {
        Some(i) => {
            let old = &conditions[i];
            if old.status == new.status && old.reason == new.reason {
                return old.clone();
            }
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            conditions[i] = new.clone();
        }
        None => conditions.push(new.clone()),
    }
    new
}

/// A status is written only when one of these changed — Kruise's list, plus a new or
/// changed FailedScale/FailedUpdate condition (see [`failures`]).
pub(crate) fn needs_write(old: &CloneSetStatus, new: &CloneSetStatus) -> bool {
    let progressing =
        |s: &CloneSetStatus| s.conditions.iter().find(|c| c.type_ == condition::PROGRESSING).map(|c| (c.status.clone(), c.reason.clone()));
    new.observed_generation > old.observed_generation
        || new.replicas != old.replicas
        || new.ready_replicas != old.ready_replicas
        || new.available_replicas != old.available_replicas
        || new.updated_replicas != old.updated_replicas
        || new.updated_ready_replicas != old.updated_ready_replicas
        || new.updated_available_replicas != old.updated_available_replicas
        || new.expected_updated_replicas != old.expected_updated_replicas
        || new.update_revision != old.update_revision
        || new.current_revision != old.current_revision
        || new.label_selector != old.label_selector
        || new.collision_count != old.collision_count
        || progressing(new) != progressing(old)
        || failures(new) != failures(old)
}

/// FailedScale / FailedUpdate as (type, status, message). Kruise writes them only along with
/// another change, so a CloneSet stuck on a denied write can show nothing; we write a new or
/// changed failure too (once: a repeated failure has the same message).
fn failures(s: &CloneSetStatus) -> Vec<(&str, &str, &str)> {
    s.conditions
        .iter()
        .filter(|c| c.type_ == condition::FAILED_SCALE || c.type_ == condition::FAILED_UPDATE)
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.message.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn selector_strings_match_kubernetes() {
        assert_eq!(selector_string(&selector(json!({"matchLabels": {"b": "2", "a": "1"}}))), "a=1,b=2");
        let s = selector(json!({"matchLabels": {"app": "x"}, "matchExpressions": [
            {"key": "zone", "operator": "NotIn", "values": ["z2", "z1"]},
            {"key": "tier", "operator": "In", "values": ["web", "api"]},
            {"key": "canary", "operator": "DoesNotExist"},
            {"key": "env", "operator": "Exists"}]}));
        assert_eq!(selector_string(&s), "app=x,!canary,env,tier in (api,web),zone notin (z1,z2)");
    }

    fn cs(pds: Option<i32>, replicas: i32, paused: bool) -> CloneSet {
        let mut v = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "c", "generation": 3},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"a": "b"}}, "template": {},
                     "updateStrategy": {"paused": paused}}});
        if let Some(p) = pds {
            v["spec"]["progressDeadlineSeconds"] = json!(p);
        }
        serde_json::from_value(v).unwrap()
    }

    fn status(current: &str, update: &str, replicas: i32, updated: i32, updated_available: i32, expected: i32) -> CloneSetStatus {
        CloneSetStatus {
            current_revision: current.into(),
            update_revision: update.into(),
            replicas,
            updated_replicas: updated,
            updated_available_replicas: updated_available,
            expected_updated_replicas: expected,
            ..Default::default()
        }
    }

    fn progressing(s: &CloneSetStatus) -> Option<&CloneSetCondition> {
        s.conditions.iter().find(|c| c.type_ == "Progressing")
    }

    #[test]
    fn no_deadline_removes_the_condition() {
        let now = Timestamp::UNIX_EPOCH;
        for pds in [None, Some(i32::MAX)] {
            let mut s = status("r1", "r1", 2, 2, 2, 2);
            s.conditions.push(CloneSetCondition { type_: "Progressing".into(), status: "True".into(), ..Default::default() });
            assert_eq!(apply_progressing(&cs(pds, 2, false), &mut s, now), None);
            assert!(progressing(&s).is_none());
        }
    }

    #[test]
    fn available_then_updated_then_deadline_exceeded_and_sticky() {
        let c = cs(Some(60), 2, false);
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut s = status("r1", "r1", 2, 2, 2, 2);
        assert_eq!(apply_progressing(&c, &mut s, t0), None);
        assert_eq!(progressing(&s).unwrap().reason, REASON_AVAILABLE);

        // A new revision: Updated, requeue after pds + 1 s.
        let t1 = t0 + SignedDuration::from_secs(10);
        s.update_revision = "r2".into();
        s.updated_replicas = 0;
        s.updated_available_replicas = 0;
        assert_eq!(apply_progressing(&c, &mut s, t1), Some(Duration::from_secs(61)));
        let cond = progressing(&s).unwrap().clone();
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_str(), cond.message.as_str()),
            ("True", REASON_UPDATED, "CloneSet is progressing")
        );
        assert_eq!(cond.last_transition_time, Some(Time(t0)), "same status keeps the transition time");

        // Partial progress does not reset the clock.
        s.updated_replicas = 1;
        assert_eq!(apply_progressing(&c, &mut s, t1 + SignedDuration::from_secs(30)), Some(Duration::from_secs(31)));
        // Past the deadline: False/ProgressDeadlineExceeded.
        apply_progressing(&c, &mut s, t1 + SignedDuration::from_secs(61));
        let cond = progressing(&s).unwrap();
        assert_eq!((cond.status.as_str(), cond.reason.as_str()), ("False", REASON_DEADLINE_EXCEEDED));
        assert_eq!(cond.message, "CloneSet revision r2 has timed out progressing");
        // Sticky until the rollout completes.
        apply_progressing(&c, &mut s, t1 + SignedDuration::from_secs(62));
        assert_eq!(progressing(&s).unwrap().reason, REASON_DEADLINE_EXCEEDED);
        s.current_revision = "r2".into();
        s.updated_replicas = 2;
        s.updated_available_replicas = 2;
        apply_progressing(&c, &mut s, t1 + SignedDuration::from_secs(63));
        assert_eq!(progressing(&s).unwrap().reason, REASON_AVAILABLE);
    }

    #[test]
    fn paused_and_partition_available() {
        let now = Timestamp::UNIX_EPOCH;
        let mut s = status("r1", "r2", 4, 1, 1, 1);
        apply_progressing(&cs(Some(60), 4, true), &mut s, now);
        assert_eq!(progressing(&s).unwrap().reason, REASON_PAUSED);
        apply_progressing(&cs(Some(60), 4, false), &mut s, now);
        assert_eq!(progressing(&s).unwrap().reason, REASON_PARTITION_AVAILABLE);
        assert_eq!(progressing(&s).unwrap().message, "CloneSet has been paused due to partition ready");
    }

    #[test]
    fn writes_only_when_something_that_matters_changed() {
        let a = status("r1", "r1", 2, 2, 2, 2);
        let mut b = a.clone();
        assert!(!needs_write(&a, &b));
        b.ready_replicas = 1;
        assert!(needs_write(&a, &b));
    }

    #[test]
    fn a_new_or_changed_failure_is_written_once() {
        let a = status("r1", "r1", 2, 2, 2, 2);
        let failed =
            |msg: &str| CloneSetCondition { type_: "FailedScale".into(), status: "True".into(), message: msg.into(), ..Default::default() };
        let mut b = a.clone();
        b.conditions.push(failed("exceeded quota"));
        assert!(needs_write(&a, &b), "a stuck CloneSet must say why (Kruise would wait for another change)");
        let mut c = b.clone();
        c.conditions[0].last_update_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH));
        assert!(!needs_write(&b, &c), "the same failure again is not rewritten");
        c.conditions[0].message = "denied by policy".into();
        assert!(needs_write(&b, &c));
    }

    // ---- Port of Kruise's TestSyncProgressingStatus (pds = 10 s throughout). Each case hands
    // the Progressing logic the new counts plus the condition the CloneSet carried in (a
    // reconcile copies the old conditions into the new status), at the case's clock.

    const PDS: Option<i32> = Some(10);
    const OLD: &str = "2025-07-20T11:00:00Z";

    fn at(secs: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(secs)
    }

    fn at_nanos(nanos: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_nanos(nanos)
    }

    /// `[replicas, ready, available, updated, updatedReady, updatedAvailable, expectedUpdated]`.
    fn counts(n: [i32; 7], current: &str, update: &str) -> CloneSetStatus {
        CloneSetStatus {
            replicas: n[0],
            ready_replicas: n[1],
            available_replicas: n[2],
            updated_replicas: n[3],
            updated_ready_replicas: n[4],
            updated_available_replicas: n[5],
            expected_updated_replicas: n[6],
            current_revision: current.into(),
            update_revision: update.into(),
            ..Default::default()
        }
    }

    fn cond(status: &str, reason: &str, message: &str, updated: Timestamp, transitioned: Timestamp) -> CloneSetCondition {
        CloneSetCondition {
            type_: "Progressing".into(),
            status: status.into(),
            last_update_time: Some(Time(updated)),
            last_transition_time: Some(Time(transitioned)),
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// The Progressing condition and requeue after one evaluation with `prev` carried in.
    fn progress(
        c: &CloneSet,
        prev: Option<CloneSetCondition>,
        mut s: CloneSetStatus,
        now: Timestamp,
    ) -> (Option<CloneSetCondition>, Option<Duration>) {
        s.conditions.extend(prev);
        let requeue = apply_progressing(c, &mut s, now);
        (progressing(&s).cloned(), requeue)
    }

    /// Without a deadline (nil or MaxInt32) the condition goes, whatever state it was in.
    #[test]
    fn no_deadline_removes_the_condition_from_any_state() {
        let deadline_exceeded =
            cond("False", REASON_DEADLINE_EXCEEDED, "CloneSet revision 2 has timed out progressing", at_nanos(8), at_nanos(8));
        let rows = [
            ("no condition yet", 10, false, None, counts([5, 4, 3, 2, 1, 1, 2], "1", "2")),
            (
                "Available",
                10,
                false,
                Some(cond("True", REASON_AVAILABLE, "CloneSet is available", at_nanos(10), at_nanos(10))),
                counts([5, 0, 0, 0, 0, 0, 0], "1", "1"),
            ),
            (
                "Updated",
                10,
                false,
                Some(cond("", REASON_UPDATED, "", at_nanos(10), at_nanos(10))),
                counts([10, 10, 10, 5, 5, 5, 5], "1", "2"),
            ),
            (
                "Paused",
                20,
                true,
                Some(cond("True", REASON_PAUSED, "CloneSet is paused", at_nanos(8), at_nanos(8))),
                counts([15, 14, 14, 10, 10, 9, 10], "1", "2"),
            ),
            ("DeadlineExceeded", 20, false, Some(deadline_exceeded), counts([15, 14, 14, 10, 10, 9, 10], "1", "2")),
            (
                "PartitionAvailable",
                10,
                true,
                Some(cond("True", REASON_PARTITION_AVAILABLE, "CloneSet has been paused due to partition ready", at(0), at(0))),
                counts([10, 10, 10, 5, 5, 5, 5], "1", "2"),
            ),
        ];
        for (from, replicas, paused, prev, s) in rows {
            for pds in [None, Some(i32::MAX)] {
                let got = progress(&cs(pds, replicas, paused), prev.clone(), s.clone(), at(40));
                assert_eq!(got, (None, None), "from {from} with pds {pds:?}");
            }
        }
    }

    /// A first rollout with no condition yet starts the clock: Updated, requeue at pds + 1 s.
    #[test]
    fn first_rollout_without_a_condition_is_updated_and_requeues_after_the_deadline() {
        let got = progress(&cs(PDS, 10, false), None, counts([5, 4, 3, 2, 1, 1, 2], "1", "2"), at(0));
        assert_eq!(got, (Some(cond("True", REASON_UPDATED, "CloneSet is progressing", at(0), at(0))), Some(Duration::from_secs(11))));
    }

    /// Paused is reported even when nothing is left to roll out.
    #[test]
    fn paused_without_a_condition_is_paused() {
        let got = progress(&cs(PDS, 10, true), None, counts([5, 4, 3, 2, 1, 1, 2], "1", "1"), at(0));
        assert_eq!(got, (Some(cond("True", REASON_PAUSED, "CloneSet is paused", at(0), at(0))), None));
    }

    /// Every pod updated and available at spec.replicas: Available, nothing to wait for.
    #[test]
    fn fully_rolled_out_without_a_condition_is_available() {
        let got = progress(&cs(PDS, 10, false), None, counts([10; 7], "1", "1"), at(0));
        assert_eq!(got, (Some(cond("True", REASON_AVAILABLE, "CloneSet is available", at(0), at(0))), None));
    }

    /// Available needs status.replicas == spec.replicas: ten pods for a spec of one are still progressing.
    #[test]
    fn more_pods_than_spec_is_not_available_but_updated() {
        let got = progress(&cs(PDS, 1, false), None, counts([10, 9, 8, 10, 9, 8, 10], "2", "2"), at(0));
        assert_eq!(got, (Some(cond("True", REASON_UPDATED, "CloneSet is progressing", at(0), at(0))), Some(Duration::from_secs(11))));
    }

    /// Not in Kruise's table: every wanted pod updated and available, but an extra pod still
    /// around (status.replicas 11 for a spec of 10) is not Available yet.
    #[test]
    fn an_extra_pod_beyond_spec_is_not_available() {
        let got = progress(&cs(PDS, 10, false), None, counts([11, 11, 11, 10, 10, 10, 10], "1", "1"), at(0));
        assert_eq!(got, (Some(cond("True", REASON_UPDATED, "CloneSet is progressing", at(0), at(0))), Some(Duration::from_secs(11))));
    }

    /// Paused is checked before partition and progress.
    #[test]
    fn paused_mid_rollout_is_paused() {
        let got = progress(&cs(PDS, 1, true), None, counts([10, 8, 7, 6, 5, 5, 6], "1", "2"), at(0));
        assert_eq!(got, (Some(cond("True", REASON_PAUSED, "CloneSet is paused", at(0), at(0))), None));
    }

    /// expectedUpdated < replicas and all of them available: the partition is reached.
    #[test]
    fn partition_reached_without_a_condition_is_partition_available() {
        let got = progress(&cs(PDS, 10, false), None, counts([10, 10, 10, 1, 1, 1, 1], "1", "2"), at(0));
        let want = cond("True", REASON_PARTITION_AVAILABLE, "CloneSet has been paused due to partition ready", at(0), at(0));
        assert_eq!(got, (Some(want), None));
    }

    /// Scaling up from Available is progress; the status stays True so lastTransitionTime is kept.
    /// (Kruise's table lists the old times and no requeue here but never asserts them; its code sets
    /// lastUpdateTime to now and the deadline requeue applies.)
    #[test]
    fn available_then_scale_up_is_updated_keeping_the_transition_time() {
        let prev = cond("True", REASON_AVAILABLE, "CloneSet is available", at_nanos(10), at_nanos(10));
        let got = progress(&cs(PDS, 10, false), Some(prev), counts([5, 5, 5, 5, 5, 5, 10], "1", "1"), at(0));
        let want = cond("True", REASON_UPDATED, "CloneSet is progressing", at(0), at_nanos(10));
        assert_eq!(got, (Some(want), Some(Duration::from_secs(11))));
    }

    /// An Updated condition long past its deadline times out, naming the update revision.
    #[test]
    fn updated_long_past_the_deadline_during_scale_up_times_out() {
        let old: Timestamp = OLD.parse().unwrap();
        let now = old + SignedDuration::from_secs(60);
        let prev = cond("True", REASON_UPDATED, "CloneSet is progressing", old, old);
        let got = progress(&cs(PDS, 10, false), Some(prev), counts([10, 8, 8, 10, 8, 8, 10], "1", "1"), now);
        let want = cond("False", REASON_DEADLINE_EXCEEDED, "CloneSet revision 1 has timed out progressing", now, now);
        assert_eq!(got, (Some(want), None));
    }

    /// A new revision after Available is Updated; the old entry had no status, so the times are
    /// fresh. An unset spec.replicas counts as 1.
    #[test]
    fn available_then_new_revision_is_updated_with_fresh_times() {
        let mut c = cs(PDS, 1, false);
        c.spec.replicas = None;
        let prev = cond("", REASON_AVAILABLE, "", at_nanos(10), at_nanos(10));
        let got = progress(&c, Some(prev), counts([1, 0, 0, 0, 0, 0, 1], "1", "2"), at(5));
        assert_eq!(got, (Some(cond("True", REASON_UPDATED, "CloneSet is progressing", at(5), at(5))), Some(Duration::from_secs(11))));
    }

    /// Updated, then the partition's share becomes available: PartitionAvailable, no requeue.
    #[test]
    fn updated_then_partition_reached_is_partition_available() {
        let prev = cond("", REASON_UPDATED, "", at_nanos(10), at_nanos(10));
        let got = progress(&cs(PDS, 10, false), Some(prev), counts([10, 10, 10, 5, 5, 5, 5], "1", "2"), at(5));
        let want = cond("True", REASON_PARTITION_AVAILABLE, "CloneSet has been paused due to partition ready", at(5), at(5));
        assert_eq!(got, (Some(want), None));
    }

    /// Scaling down so that expectedUpdated drops under updatedAvailable reaches the partition.
    #[test]
    fn updated_then_scale_down_under_the_partition_is_partition_available() {
        let prev = cond("", REASON_UPDATED, "", at_nanos(10), at_nanos(10));
        let got = progress(&cs(PDS, 6, false), Some(prev), counts([10, 9, 9, 8, 8, 8, 5], "1", "2"), at(5));
        let want = cond("True", REASON_PARTITION_AVAILABLE, "CloneSet has been paused due to partition ready", at(5), at(5));
        assert_eq!(got, (Some(want), None));
    }

    /// Still Updated inside the deadline: the entry and its clock are kept; requeue for the rest + 1 s.
    #[test]
    fn updated_within_the_deadline_keeps_its_clock_and_requeues_for_the_rest() {
        let prev = cond("True", REASON_UPDATED, "CloneSet is progressing", at(9), at(9));
        let got = progress(&cs(PDS, 6, false), Some(prev.clone()), counts([10, 9, 9, 8, 6, 6, 8], "1", "2"), at(15));
        assert_eq!(got, (Some(prev), Some(Duration::from_secs(5))));
    }

    /// Still short of the partition and long past the deadline: timed out.
    #[test]
    fn updated_long_past_the_deadline_after_scale_down_times_out() {
        let old: Timestamp = OLD.parse().unwrap();
        let now = old + SignedDuration::from_secs(60);
        let prev = cond("", REASON_UPDATED, "", old, old);
        let got = progress(&cs(PDS, 6, false), Some(prev), counts([6, 6, 6, 4, 4, 4, 6], "1", "2"), now);
        let want = cond("False", REASON_DEADLINE_EXCEEDED, "CloneSet revision 2 has timed out progressing", now, now);
        assert_eq!(got, (Some(want), None));
    }

    /// Scaling up while Updated stays Updated; the old entry had no status, so it is replaced and
    /// the clock starts now.
    #[test]
    fn updated_then_scale_up_restarts_the_clock_when_the_old_entry_had_no_status() {
        let prev = cond("", REASON_UPDATED, "", at_nanos(10), at_nanos(10));
        let got = progress(&cs(PDS, 20, false), Some(prev), counts([15, 14, 14, 10, 10, 9, 10], "1", "2"), at(5));
        assert_eq!(got, (Some(cond("True", REASON_UPDATED, "CloneSet is progressing", at(5), at(5))), Some(Duration::from_secs(11))));
    }

    /// Updated at 10 s with pds 10 s is past due at 30 s: False, fresh times, no requeue.
    #[test]
    fn updated_past_the_deadline_times_out_naming_the_revision() {
        let prev = cond("True", REASON_UPDATED, "", at(10), at(10));
        let got = progress(&cs(PDS, 20, false), Some(prev), counts([10, 5, 5, 5, 3, 1, 10], "1", "2"), at(30));
        let want = cond("False", REASON_DEADLINE_EXCEEDED, "CloneSet revision 2 has timed out progressing", at(30), at(30));
        assert_eq!(got, (Some(want), None));
    }

    /// Updated then fully rolled out: Available. Same status, so lastTransitionTime is kept
    /// (Kruise's table shows it reset but does not assert times).
    #[test]
    fn updated_then_fully_rolled_out_is_available() {
        let prev = cond("True", REASON_UPDATED, "", at_nanos(10), at_nanos(10));
        let got = progress(&cs(PDS, 20, false), Some(prev), counts([20; 7], "2", "2"), at(9));
        assert_eq!(got, (Some(cond("True", REASON_AVAILABLE, "CloneSet is available", at(9), at_nanos(10))), None));
    }

    /// Pausing mid-rollout: Paused, keeping lastTransitionTime (same status), and the deadline
    /// requeue stops.
    #[test]
    fn updated_then_paused_is_paused() {
        let prev = cond("True", REASON_UPDATED, "", at(5), at(5));
        let got = progress(&cs(PDS, 20, true), Some(prev), counts([15, 14, 14, 10, 10, 9, 10], "1", "2"), at(8));
        assert_eq!(got, (Some(cond("True", REASON_PAUSED, "CloneSet is paused", at(8), at(5))), None));
    }

    /// Still paused: the existing entry is kept as it is, times included.
    #[test]
    fn paused_again_keeps_the_paused_entry_untouched() {
        let prev = cond("True", REASON_PAUSED, "CloneSet is paused", at_nanos(8), at_nanos(8));
        let got = progress(&cs(PDS, 20, true), Some(prev.clone()), counts([15, 14, 14, 10, 10, 9, 10], "1", "2"), at(8));
        assert_eq!(got, (Some(prev), None));
    }

    /// Resuming starts the deadline clock now. The message is the plain "is progressing" of Kruise's code
    /// (Kruise's table says "CloneSet is resumed" but does not assert messages; its code has no
    /// such message).
    #[test]
    fn resumed_from_paused_is_updated_and_starts_the_deadline() {
        let prev = cond("True", REASON_PAUSED, "", at_nanos(8), at_nanos(8));
        let got = progress(&cs(PDS, 20, false), Some(prev), counts([15, 14, 14, 10, 10, 9, 10], "1", "2"), at(10));
        let want = cond("True", REASON_UPDATED, "CloneSet is progressing", at(10), at_nanos(8));
        assert_eq!(got, (Some(want), Some(Duration::from_secs(11))));
    }

    /// Pausing ends DeadlineExceeded; False → True, so both times are new.
    #[test]
    fn deadline_exceeded_then_paused_is_paused() {
        let prev = cond("False", REASON_DEADLINE_EXCEEDED, "CloneSet revision 2 has timed out progressing", at_nanos(8), at_nanos(8));
        let got = progress(&cs(PDS, 20, true), Some(prev), counts([15, 14, 14, 10, 10, 9, 10], "1", "2"), at(40));
        assert_eq!(got, (Some(cond("True", REASON_PAUSED, "CloneSet is paused", at(40), at(40))), None));
    }

    /// Kruise's "DeadlineExceeded, then a new revision" case hands the function a new status that
    /// does not carry the old condition; with nothing to stick to, the new revision is Updated.
    #[test]
    fn new_revision_without_a_carried_condition_is_updated() {
        let got = progress(&cs(PDS, 20, false), None, counts([20, 10, 10, 2, 2, 2, 4], "1", "3"), at(40));
        assert_eq!(got, (Some(cond("True", REASON_UPDATED, "CloneSet is progressing", at(40), at(40))), Some(Duration::from_secs(11))));
    }

    /// With the old condition carried (as a reconcile does), DeadlineExceeded is sticky even
    /// across a new revision until Available, Paused or PartitionAvailable applies, as in Kruise's code;
    /// the entry is kept as it is, old message included.
    #[test]
    fn deadline_exceeded_stays_sticky_across_a_new_revision() {
        let prev = cond("False", REASON_DEADLINE_EXCEEDED, "CloneSet revision 2 has timed out progressing", at_nanos(8), at_nanos(8));
        let got = progress(&cs(PDS, 20, false), Some(prev.clone()), counts([20, 10, 10, 2, 2, 2, 4], "1", "3"), at(40));
        assert_eq!(got, (Some(prev), None));
    }

    /// Pausing at the partition: Paused wins; the status stays True so lastTransitionTime is kept.
    #[test]
    fn partition_available_then_paused_is_paused() {
        let prev = cond("True", REASON_PARTITION_AVAILABLE, "CloneSet has been paused due to partition ready", at(0), at(0));
        let got = progress(&cs(PDS, 10, true), Some(prev), counts([10, 10, 10, 5, 5, 5, 5], "1", "2"), at(8));
        assert_eq!(got, (Some(cond("True", REASON_PAUSED, "CloneSet is paused", at(8), at(0))), None));
    }

    /// Scaling up past the partition's available share is progress again: Updated, transition
    /// time kept, deadline measured from now.
    #[test]
    fn partition_available_then_scale_up_is_updated_keeping_the_transition_time() {
        let prev = cond("True", REASON_PARTITION_AVAILABLE, "CloneSet has been paused due to partition ready", at(0), at(0));
        let got = progress(&cs(PDS, 20, false), Some(prev), counts([15, 15, 15, 6, 6, 6, 10], "1", "2"), at(8));
        let want = cond("True", REASON_UPDATED, "CloneSet is progressing", at(8), at(0));
        assert_eq!(got, (Some(want), Some(Duration::from_secs(11))));
    }

    /// Partition reached again after scaling: same status and reason, so the entry is kept as it
    /// is (Kruise's table shows new times but does not assert them).
    #[test]
    fn partition_available_again_after_scale_up_keeps_the_entry() {
        let prev = cond("True", REASON_PARTITION_AVAILABLE, "CloneSet has been paused due to partition ready", at(0), at(0));
        let got = progress(&cs(PDS, 20, false), Some(prev.clone()), counts([20, 20, 20, 10, 10, 10, 10], "1", "2"), at(8));
        assert_eq!(got, (Some(prev), None));
    }

    /// Updated at 1 s, still progressing at 8 s: entry kept, requeue 3 s + 1 s.
    #[test]
    fn updated_still_progressing_keeps_the_entry_and_requeues_at_the_deadline() {
        let prev = cond("True", REASON_UPDATED, "", at(1), at(1));
        let got = progress(&cs(PDS, 10, false), Some(prev.clone()), counts([10, 5, 5, 5, 3, 1, 10], "1", "2"), at(8));
        assert_eq!(got, (Some(prev), Some(Duration::from_secs(4))));
    }
}
