//! The scale/update arithmetic of Kruise's `calculateDiffsWithExpectation`
//! (`pkg/controller/cloneset/sync/cloneset_sync_utils.go`): from the spec and a classification of
//! the active pods, how many pods to create or delete, of which revision, and how many to update.
//!
//! Kruise's function also takes an `isPodUpdate` callback, because Scale and Update classify
//! PreparingUpdate pods differently. Here the caller decides and passes the outcome in
//! [`PodView::updated`].

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::intstr;

/// What the arithmetic needs to know about one active pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodView {
    /// On the update revision. For Scale the caller already applied PreparingUpdateAsUpdate
    /// (`revision.IsPodUpdate`: with the gate, a PreparingUpdate pod counts as updated); for Update
    /// it is a plain revision-hash match.
    pub updated: bool,
    /// Lifecycle state PreparingDelete.
    pub preparing_delete: bool,
    /// Carries apps.kruise.io/specified-delete or is listed in podsToDelete.
    pub specified_delete: bool,
    /// Available as Kruise defines it (lifecycle Normal/empty, Ready for minReadySeconds, InPlaceUpdateReady not False).
    pub available: bool,
}

/// The CloneSet settings and controller switches the arithmetic reads.
#[derive(Clone, Copy, Debug)]
pub struct DiffInput<'a> {
    pub replicas: i32,
    pub partition: Option<&'a IntOrString>,
    pub max_surge: Option<&'a IntOrString>,
    pub max_unavailable: Option<&'a IntOrString>,
    pub scale_max_unavailable: Option<&'a IntOrString>,
    pub paused: bool,
    /// status currentRevision == updateRevision
    pub revisions_consistent: bool,
    /// Feature gate CloneSetPartitionRollback.
    pub partition_rollback: bool,
    /// The exclude-preparing-delete label on the CloneSet or the --cloneset-scaling-exclude-preparing-delete flag.
    pub exclude_preparing_delete: bool,
}

/// How far the pods are from what the spec asks for. All zero means nothing to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpectationDiffs {
    /// Pods to create (≥ 0).
    pub scale_up_num: i32,
    /// How many of the new pods should use the current revision; may exceed `scale_up_num`, which still caps creation.
    pub scale_up_num_old_revision: i32,
    /// Pods to delete beyond those already specified for deletion (≥ 0).
    pub scale_down_num: i32,
    /// How many of the deletions should hit current-revision pods; may exceed `scale_down_num`.
    pub scale_down_num_old_revision: i32,
    /// Creations allowed now, capped by `scaleStrategy.maxUnavailable`.
    pub scale_up_limit: i32,
    /// Ready pods that may be deleted now, capped by `updateStrategy.maxUnavailable`.
    pub delete_ready_limit: i32,
    /// Pods temporarily wanted above `replicas`.
    pub use_surge: i32,
    /// The part of `use_surge` that should be on the current revision.
    pub use_surge_old_revision: i32,
    /// Positive: pods to move to the update revision; negative: pods to roll back to the current one.
    pub update_num: i32,
    /// How many pods may be unavailable while updating.
    pub update_max_unavailable: i32,
}

impl ExpectationDiffs {
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Per-revision tallies of the active pods.
#[derive(Default)]
struct RevisionCounts {
    /// Every pod of the revision, PreparingDelete included.
    total: i64,
    /// Pods not in PreparingDelete.
    active: i64,
    /// PreparingDelete pods; they count as unavailable.
    preparing_delete: i64,
    /// Active pods specified for deletion.
    to_delete: i64,
    /// Active pods not specified for deletion and not available.
    unavailable: i64,
}

impl RevisionCounts {
    fn add(&mut self, pod: &PodView) {
        self.total += 1;
        if pod.preparing_delete {
            self.preparing_delete += 1;
            return;
        }
        self.active += 1;
        if pod.specified_delete {
            self.to_delete += 1;
        } else if !pod.available {
            self.unavailable += 1;
        }
    }
}

/// Port of Kruise's `calculateDiffsWithExpectation`. `pods` are the CloneSet's active pods.
///
/// The arithmetic runs in i64 as Go's `int` does, so huge limits such as the unlimited
/// `scaleStrategy.maxUnavailable` (i32::MAX) never overflow; results are saturated into i32.
pub fn calculate_diffs(input: &DiffInput, pods: &[PodView]) -> ExpectationDiffs {
    let replicas = i64::from(input.replicas);
    // Kruise logs an invalid partition and carries on as if it were 0.
    let partition = i64::from(intstr::partition_replicas(input.replicas, input.partition).unwrap_or(0));
    let max_surge_value = intstr::max_surge(input.max_surge, input.replicas, input.paused);
    let max_surge = i64::from(max_surge_value);
    let max_unavailable = i64::from(intstr::max_unavailable(input.max_unavailable, input.replicas, max_surge_value));
    let scale_max_unavailable = i64::from(intstr::scale_max_unavailable(input.scale_max_unavailable, input.replicas));

    let mut new = RevisionCounts::default();
    let mut old = RevisionCounts::default();
    for pod in pods {
        if pod.updated { new.add(pod) } else { old.add(pod) }
    }
    let pod_count = new.total + old.total;

    let mut update_old_diff = old.active - partition;
    let mut update_new_diff = new.active - (replicas - partition);
    let total_unavailable = new.preparing_delete + old.preparing_delete + new.unavailable + old.unavailable;
    // Without the rollback gate, or with nothing to roll back to, pods only ever move forward.
    if input.revisions_consistent || !input.partition_rollback {
        update_old_diff = update_old_diff.max(0);
        update_new_diff = update_new_diff.min(0);
    }

    let mut use_surge = 0;
    let mut use_surge_old_revision = 0;
    if max_surge > 0 {
        // Surge that lets specified deletes proceed without breaking maxUnavailable.
        let to_delete = new.to_delete + old.to_delete;
        let (scale_surge, scale_old_revision_surge) = if to_delete > 0 {
            let surge = (total_unavailable + to_delete - max_unavailable).max(0).min(to_delete);
            (surge, (surge - new.to_delete).max(0))
        } else {
            (0, 0)
        };

        // Surge for moving pods between revisions: only when one side has too many and the other too few.
        let (update_surge, update_old_revision_surge) = if has_opposite_signs(update_old_diff, update_new_diff) {
            if update_old_diff.abs() <= update_new_diff.abs() {
                let surge = update_old_diff.abs();
                (surge, if update_old_diff < 0 { surge } else { 0 })
            } else {
                let surge = update_new_diff.abs();
                (surge, if update_new_diff > 0 { surge } else { 0 })
            }
        } else {
            (0, 0)
        };

        // Scale and update never happen in the same reconcile, so only the larger need is served.
        if scale_surge >= update_surge {
            use_surge = max_surge.min(scale_surge);
            use_surge_old_revision = use_surge.min(scale_old_revision_surge);
        } else {
            use_surge = max_surge.min(update_surge);
            use_surge_old_revision = use_surge.min(update_old_revision_surge);
        }
    }

    let (current_total, current_total_old) = if input.exclude_preparing_delete {
        (pod_count - old.preparing_delete - new.preparing_delete, old.total - old.preparing_delete)
    } else {
        (pod_count, old.total)
    };
    let expected_total = replicas + use_surge;
    let expected_total_old = partition + use_surge_old_revision;

    let mut res = Wide { use_surge, use_surge_old_revision, ..Wide::default() };

    let missing = expected_total - current_total;
    if missing > 0 {
        res.scale_up_num = missing;
        res.scale_up_num_old_revision = (expected_total_old - current_total_old).max(0);
        res.scale_up_limit = missing.min((scale_max_unavailable - total_unavailable).max(0));
    }

    // Pods already specified for deletion are on their way out and do not count as surplus.
    let surplus = current_total - old.to_delete - new.to_delete - expected_total;
    if surplus > 0 {
        res.scale_down_num = surplus;
        res.scale_down_num_old_revision = (current_total_old - old.to_delete - expected_total_old).max(0);
    }
    if new.to_delete > 0 || old.to_delete > 0 || res.scale_down_num > 0 {
        res.delete_ready_limit = (max_unavailable + (pod_count - replicas) - total_unavailable).max(0);
    }

    res.update_num = if update_old_diff.abs() <= update_new_diff.abs() { update_old_diff } else { -update_new_diff };
    if res.update_num != 0 {
        res.update_max_unavailable = max_unavailable + pod_count - replicas;
    }

    res.narrow()
}

fn has_opposite_signs(a: i64, b: i64) -> bool {
    (a < 0 && b > 0) || (a > 0 && b < 0)
}

/// [`ExpectationDiffs`] in i64 while computing.
#[derive(Default)]
struct Wide {
    scale_up_num: i64,
    scale_up_num_old_revision: i64,
    scale_down_num: i64,
    scale_down_num_old_revision: i64,
    scale_up_limit: i64,
    delete_ready_limit: i64,
    use_surge: i64,
    use_surge_old_revision: i64,
    update_num: i64,
    update_max_unavailable: i64,
}

impl Wide {
    fn narrow(self) -> ExpectationDiffs {
        let n = |v: i64| v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        ExpectationDiffs {
            scale_up_num: n(self.scale_up_num),
            scale_up_num_old_revision: n(self.scale_up_num_old_revision),
            scale_down_num: n(self.scale_down_num),
            scale_down_num_old_revision: n(self.scale_down_num_old_revision),
            scale_up_limit: n(self.scale_up_limit),
            delete_ready_limit: n(self.delete_ready_limit),
            use_surge: n(self.use_surge),
            use_surge_old_revision: n(self.use_surge_old_revision),
            update_num: n(self.update_num),
            update_max_unavailable: n(self.update_max_unavailable),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Kruise's `TestCalculateDiffsWithExpectation`, case by case under the same names. Kruise runs
    //! the table with CloneSetPartitionRollback on (off where a case says so) and
    //! PreparingUpdateAsUpdate on; the latter only matters where a case passes
    //! `revision.IsPodUpdate`, which the fixtures model as `scale_is_pod_update`.

    use super::*;

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Rev {
        Old,
        New,
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum State {
        Normal,
        PreparingDelete,
        PreparingUpdate,
        Updating,
    }

    use Rev::{New, Old};
    use State::{Normal, PreparingDelete, PreparingUpdate, Updating};

    const R: bool = true;
    const NR: bool = false;
    const SD: bool = true;
    const NO_SD: bool = false;

    /// Kruise's `createTestPod(revision, lifecycleState, ready, specifiedDelete)`.
    #[derive(Clone, Copy)]
    struct TestPod {
        rev: Rev,
        state: State,
        ready: bool,
        specified_delete: bool,
    }

    fn p(rev: Rev, state: State, ready: bool, specified_delete: bool) -> TestPod {
        TestPod { rev, state, ready, specified_delete }
    }

    /// `count` copies of a pod, for Kruise's runs of identical `createTestPod` lines.
    fn n(count: usize, pod: TestPod) -> Vec<TestPod> {
        vec![pod; count]
    }

    /// The classification the controller would make of a Kruise test pod.
    fn view(pod: &TestPod, scale_is_pod_update: bool) -> PodView {
        PodView {
            // revision.IsPodUpdate with PreparingUpdateAsUpdate on, or a plain hash match.
            updated: pod.rev == New || (scale_is_pod_update && pod.state == PreparingUpdate),
            preparing_delete: pod.state == PreparingDelete,
            specified_delete: pod.specified_delete,
            // Lifecycle Normal, Ready, minReadySeconds 0, no InPlaceUpdateReady condition.
            available: pod.state == Normal && pod.ready,
        }
    }

    fn int(i: i32) -> IntOrString {
        IntOrString::Int(i)
    }

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.to_owned())
    }

    /// Kruise's `createTestCloneSet(replicas, partition, maxUnavailable, maxSurge)` plus the
    /// `setScaleStrategy` and `setUpdateStrategyPaused` modifiers.
    struct Set {
        replicas: i32,
        partition: IntOrString,
        max_unavailable: IntOrString,
        max_surge: IntOrString,
        scale_max_unavailable: Option<IntOrString>,
        paused: bool,
    }

    fn cs(replicas: i32, partition: IntOrString, max_unavailable: IntOrString, max_surge: IntOrString) -> Set {
        Set { replicas, partition, max_unavailable, max_surge, scale_max_unavailable: None, paused: false }
    }

    impl Set {
        fn scale_max_unavailable(mut self, v: IntOrString) -> Self {
            self.scale_max_unavailable = Some(v);
            self
        }

        fn paused(mut self) -> Self {
            self.paused = true;
            self
        }
    }

    struct Case {
        name: &'static str,
        set: Set,
        pods: Vec<TestPod>,
        revision_consistent: bool,
        disable_rollback_gate: bool,
        /// The exclude-preparing-delete label (Kruise's `setLabels`).
        exclude_preparing_delete: bool,
        /// Kruise passes `revision.IsPodUpdate` (the Scale classification).
        scale_is_pod_update: bool,
        expect: ExpectationDiffs,
    }

    fn case(name: &'static str, set: Set, pods: Vec<TestPod>, expect: ExpectationDiffs) -> Case {
        Case {
            name,
            set,
            pods,
            revision_consistent: false,
            disable_rollback_gate: false,
            exclude_preparing_delete: false,
            scale_is_pod_update: false,
            expect,
        }
    }

    impl Case {
        fn consistent(mut self) -> Self {
            self.revision_consistent = true;
            self
        }

        fn rollback_gate_off(mut self) -> Self {
            self.disable_rollback_gate = true;
            self
        }

        fn exclude_preparing_delete(mut self) -> Self {
            self.exclude_preparing_delete = true;
            self
        }

        fn scale_is_pod_update(mut self) -> Self {
            self.scale_is_pod_update = true;
            self
        }

        fn run(&self) -> ExpectationDiffs {
            let input = DiffInput {
                replicas: self.set.replicas,
                partition: Some(&self.set.partition),
                max_surge: Some(&self.set.max_surge),
                max_unavailable: Some(&self.set.max_unavailable),
                scale_max_unavailable: self.set.scale_max_unavailable.as_ref(),
                paused: self.set.paused,
                revisions_consistent: self.revision_consistent,
                partition_rollback: !self.disable_rollback_gate,
                exclude_preparing_delete: self.exclude_preparing_delete,
            };
            let pods: Vec<PodView> = self.pods.iter().map(|pod| view(pod, self.scale_is_pod_update)).collect();
            calculate_diffs(&input, &pods)
        }
    }

    type E = ExpectationDiffs;
    const NONE: E = E {
        scale_up_num: 0,
        scale_up_num_old_revision: 0,
        scale_down_num: 0,
        scale_down_num_old_revision: 0,
        scale_up_limit: 0,
        delete_ready_limit: 0,
        use_surge: 0,
        use_surge_old_revision: 0,
        update_num: 0,
        update_max_unavailable: 0,
    };

    fn kruise_cases() -> Vec<Case> {
        vec![
            case("an empty cloneset", cs(0, int(0), int(1), int(0)), vec![], NONE),
            case(
                "increase replicas to 5 (step 1/2)",
                cs(5, int(0), int(1), int(0)),
                vec![],
                E { scale_up_num: 5, scale_up_limit: 5, ..NONE },
            ),
            case("increase replicas to 5 (step 2/2)", cs(5, int(0), int(1), int(0)), n(5, p(New, Normal, R, NO_SD)), NONE),
            case(
                "specified delete 1 pod (all ready) (step 1/3)",
                cs(5, int(0), int(1), int(0)),
                [n(1, p(New, Normal, R, SD)), n(4, p(New, Normal, R, NO_SD))].concat(),
                E { delete_ready_limit: 1, ..NONE },
            ),
            case(
                "specified delete 1 pod (all ready) (step 2/3)",
                cs(5, int(0), int(1), int(0)),
                n(4, p(New, Normal, R, NO_SD)),
                E { scale_up_num: 1, scale_up_limit: 1, ..NONE },
            ),
            case("specified delete 1 pod (all ready) (step 3/3)", cs(5, int(0), int(1), int(0)), n(5, p(New, Normal, R, NO_SD)), NONE),
            case(
                "specified delete 2 pod (all ready) (step 1/6)",
                cs(5, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, SD)), n(3, p(New, Normal, R, NO_SD))].concat(),
                E { delete_ready_limit: 1, ..NONE },
            ),
            case(
                "specified delete 2 pod (all ready) (step 2/6)",
                cs(5, int(0), int(1), int(0)),
                [n(1, p(New, Normal, R, SD)), n(3, p(New, Normal, R, NO_SD))].concat(),
                E { scale_up_num: 1, scale_up_limit: 1, ..NONE },
            ),
            case(
                "specified delete 2 pod (all ready) (step 3/6)",
                cs(5, int(0), int(1), int(0)),
                [n(1, p(New, Normal, R, SD)), n(3, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            ),
            case(
                "specified delete 2 pod (all ready) (step 4/6)",
                cs(5, int(0), int(1), int(0)),
                [n(1, p(New, Normal, R, SD)), n(4, p(New, Normal, R, NO_SD))].concat(),
                E { delete_ready_limit: 1, ..NONE },
            ),
            case(
                "specified delete 2 pod (all ready) (step 5/6)",
                cs(5, int(0), int(1), int(0)),
                n(4, p(New, Normal, R, NO_SD)),
                E { scale_up_num: 1, scale_up_limit: 1, ..NONE },
            ),
            case("specified delete 2 pod (all ready) (step 6/6)", cs(5, int(0), int(1), int(0)), n(5, p(New, Normal, R, NO_SD)), NONE),
            case(
                "specified delete 2 pod and replicas to 4 (step 1/3)",
                cs(4, int(0), int(1), int(0)),
                [n(2, p(New, Normal, NR, SD)), n(3, p(New, Normal, R, NO_SD))].concat(),
                E { delete_ready_limit: 2, ..NONE },
            ),
            case(
                "specified delete 2 pod and replicas to 4 (step 2/3)",
                cs(4, int(0), int(1), int(0)),
                n(3, p(New, Normal, R, NO_SD)),
                E { scale_up_num: 1, scale_up_limit: 1, ..NONE },
            ),
            case(
                "specified delete 2 pod and replicas to 4 (step 3/3)",
                cs(4, int(0), int(1), int(0)),
                n(4, p(New, Normal, R, NO_SD)),
                NONE,
            ),
            case(
                "update partition=3 (step 1/3)",
                cs(5, int(3), int(1), int(0)),
                n(5, p(Old, Normal, R, NO_SD)),
                E { update_num: 2, update_max_unavailable: 1, ..NONE },
            ),
            case(
                "update partition=3 (step 2/3)",
                cs(5, int(3), int(1), int(0)),
                [n(1, p(New, Normal, R, NO_SD)), n(4, p(Old, Normal, R, NO_SD))].concat(),
                E { update_num: 1, update_max_unavailable: 1, ..NONE },
            ),
            case(
                "update partition=3 (step 3/3)",
                cs(5, int(3), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(3, p(Old, Normal, R, NO_SD))].concat(),
                NONE,
            ),
            case(
                "rollback partition=4 (step 1/3)",
                cs(5, int(4), int(2), int(0)),
                [n(4, p(New, Normal, R, NO_SD)), n(1, p(Old, Normal, R, NO_SD))].concat(),
                E { update_num: -3, update_max_unavailable: 2, ..NONE },
            ),
            case(
                "rollback partition=4 (step 2/3)",
                cs(5, int(4), int(2), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(3, p(Old, Normal, R, NO_SD))].concat(),
                E { update_num: -1, update_max_unavailable: 2, ..NONE },
            ),
            case(
                "rollback partition=4 (step 3/3)",
                cs(5, int(4), int(2), int(0)),
                [n(1, p(New, Normal, R, NO_SD)), n(4, p(Old, Normal, R, NO_SD))].concat(),
                NONE,
            ),
            case(
                "specified delete with maxSurge (step 1/4)",
                cs(5, int(0), int(0), int(1)),
                [n(1, p(New, Normal, R, SD)), n(4, p(New, Normal, R, NO_SD))].concat(),
                E { scale_up_num: 1, use_surge: 1, scale_up_limit: 1, ..NONE },
            ),
            case(
                "specified delete with maxSurge (step 2/4)",
                cs(5, int(0), int(0), int(1)),
                [n(1, p(New, Normal, R, SD)), n(4, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { use_surge: 1, ..NONE },
            ),
            case(
                "specified delete with maxSurge (step 3/4)",
                cs(5, int(0), int(0), int(1)),
                [n(1, p(New, Normal, R, SD)), n(5, p(New, Normal, R, NO_SD))].concat(),
                E { delete_ready_limit: 1, use_surge: 1, ..NONE },
            ),
            case("specified delete with maxSurge (step 4/4)", cs(5, int(0), int(0), int(1)), n(5, p(New, Normal, R, NO_SD)), NONE),
            case(
                "update in-place partition=3 with maxSurge (step 1/4)",
                cs(5, int(3), int(1), int(1)),
                n(5, p(Old, Normal, R, NO_SD)),
                E { scale_up_num: 1, use_surge: 1, update_num: 2, update_max_unavailable: 1, scale_up_limit: 1, ..NONE },
            ),
            case(
                // Kruise spells this step without parentheses.
                "update in-place partition=3 with maxSurge step 2/4",
                cs(5, int(3), int(1), int(1)),
                [n(5, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { use_surge: 1, update_num: 1, update_max_unavailable: 2, ..NONE },
            ),
            case(
                "update in-place partition=3 with maxSurge (step 3/4)",
                cs(5, int(3), int(1), int(1)),
                [n(4, p(Old, Normal, R, NO_SD)), n(1, p(New, Updating, NR, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 1, scale_down_num_old_revision: 1, delete_ready_limit: 0, ..NONE },
            ),
            case(
                "update in-place partition=3 with maxSurge (step 4/4)",
                cs(5, int(3), int(1), int(1)),
                [n(4, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 1, scale_down_num_old_revision: 1, delete_ready_limit: 1, ..NONE },
            ),
            case(
                "update recreate partition=3 with maxSurge (step 1/7)",
                cs(5, int(3), int(1), int(1)),
                n(5, p(Old, Normal, R, NO_SD)),
                E { scale_up_num: 1, use_surge: 1, update_num: 2, update_max_unavailable: 1, scale_up_limit: 1, ..NONE },
            ),
            case(
                "update recreate partition=3 with maxSurge (step 2/7)",
                cs(5, int(3), int(1), int(1)),
                [n(5, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { use_surge: 1, update_num: 1, update_max_unavailable: 2, ..NONE },
            ),
            case(
                "update recreate partition=3 with maxSurge (step 3/7)",
                cs(5, int(3), int(1), int(1)),
                [n(4, p(Old, Normal, R, NO_SD)), n(1, p(Old, Normal, R, SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { use_surge: 1, use_surge_old_revision: 1, delete_ready_limit: 1, update_num: 1, update_max_unavailable: 2, ..NONE },
            ),
            case(
                "update recreate partition=3 with maxSurge (step 4/7)",
                cs(5, int(3), int(1), int(1)),
                [n(4, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { use_surge: 1, scale_up_num: 1, update_num: 1, update_max_unavailable: 1, scale_up_limit: 1, ..NONE },
            ),
            case(
                "update recreate partition=3 with maxSurge (step 5/7)",
                cs(5, int(3), int(1), int(1)),
                [n(4, p(Old, Normal, R, NO_SD)), n(2, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 1, scale_down_num_old_revision: 1, delete_ready_limit: 0, ..NONE },
            ),
            case(
                "update recreate partition=3 with maxSurge (step 6/7)",
                cs(5, int(3), int(1), int(1)),
                [n(4, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 1, scale_down_num_old_revision: 1, delete_ready_limit: 1, ..NONE },
            ),
            case(
                "update recreate partition=3 with maxSurge (step 7/7)",
                cs(5, int(3), int(1), int(1)),
                [n(3, p(Old, Normal, R, NO_SD)), n(2, p(New, Normal, R, NO_SD))].concat(),
                NONE,
            ),
            case(
                "update recreate partition=99% with maxUnavailable=3, maxSurge=2 (step 1/3)",
                cs(5, pct("99%"), int(3), int(2)),
                n(5, p(Old, Normal, R, NO_SD)),
                E { scale_up_num: 1, use_surge: 1, update_num: 1, update_max_unavailable: 3, scale_up_limit: 1, ..NONE },
            ),
            case(
                "update recreate partition=99% with maxUnavailable=3, maxSurge=2 (step 2/3)",
                cs(5, pct("99%"), int(3), int(2)),
                [n(5, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 1, scale_down_num_old_revision: 1, delete_ready_limit: 3, ..NONE },
            ),
            case(
                "update recreate partition=99% with maxUnavailable=3, maxSurge=2 (step 3/3)",
                cs(5, pct("99%"), int(3), int(2)),
                [n(4, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            ),
            case(
                "update recreate partition=99% with maxUnavailable=40%, maxSurge=30% (step 1/3)",
                cs(5, pct("99%"), pct("40%"), pct("30%")),
                n(5, p(Old, Normal, R, NO_SD)),
                E { scale_up_num: 1, use_surge: 1, update_num: 1, update_max_unavailable: 2, scale_up_limit: 1, ..NONE },
            ),
            case(
                "update recreate partition=99% with maxUnavailable=40%, maxSurge=30% (step 2/3)",
                cs(5, pct("99%"), pct("40%"), pct("30%")),
                [n(5, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 1, scale_down_num_old_revision: 1, delete_ready_limit: 2, ..NONE },
            ),
            case(
                "update recreate partition=99% with maxUnavailable=40%, maxSurge=30% (step 3/3)",
                cs(5, pct("99%"), pct("40%"), pct("30%")),
                [n(4, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            ),
            case(
                "update recreate partition=99% with maxUnavailable=30%, maxSurge=30% (step 1/3)",
                cs(5, pct("99%"), pct("30%"), pct("30%")),
                n(5, p(Old, Normal, R, NO_SD)),
                E { scale_up_num: 1, use_surge: 1, update_num: 1, update_max_unavailable: 1, scale_up_limit: 1, ..NONE },
            ),
            case(
                "update recreate partition=99% with maxUnavailable=30%, maxSurge=30% (step 2/3)",
                cs(5, pct("99%"), pct("30%"), pct("30%")),
                [n(5, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 1, scale_down_num_old_revision: 1, delete_ready_limit: 1, ..NONE },
            ),
            case(
                "update recreate partition=99% with maxUnavailable=30%, maxSurge=30% (step 3/3)",
                cs(5, pct("99%"), pct("30%"), pct("30%")),
                [n(4, p(Old, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            ),
            case("revision consistent 1", cs(5, int(0), int(1), int(0)), n(5, p(New, Normal, R, NO_SD)), NONE).consistent(),
            case("revision consistent 2", cs(5, int(3), int(1), int(0)), n(5, p(New, Normal, R, NO_SD)), NONE).consistent(),
            case(
                "revision consistent 3",
                cs(5, int(3), int(1), int(0)),
                [n(2, p(Old, Normal, R, NO_SD)), n(3, p(New, Normal, R, NO_SD))].concat(),
                NONE,
            )
            .consistent(),
            case(
                "revision consistent 4",
                cs(5, int(1), int(1), int(0)),
                [n(3, p(Old, Normal, R, NO_SD)), n(2, p(New, Normal, R, NO_SD))].concat(),
                E { update_num: 2, update_max_unavailable: 1, ..NONE },
            )
            .consistent(),
            case(
                "allow to update when fail to scale out normally",
                cs(5, int(1), int(2), int(0)),
                [n(2, p(Old, Normal, R, NO_SD)), n(2, p(New, Normal, R, NO_SD))].concat(),
                E { scale_up_num: 1, update_num: 1, update_max_unavailable: 1, scale_up_limit: 1, ..NONE },
            )
            .consistent(),
            case(
                "allow to update when fail to scale in normally",
                cs(5, int(1), int(1), int(0)),
                [n(3, p(Old, Normal, R, NO_SD)), n(3, p(New, Normal, R, NO_SD))].concat(),
                E {
                    scale_down_num: 1,
                    scale_down_num_old_revision: 2,
                    delete_ready_limit: 2,
                    update_num: 1,
                    update_max_unavailable: 2,
                    ..NONE
                },
            )
            .consistent(),
            case(
                "disable rollback feature-gate",
                cs(5, int(4), int(1), int(0)),
                [n(1, p(Old, Normal, R, NO_SD)), n(4, p(New, Normal, R, NO_SD))].concat(),
                NONE,
            )
            .rollback_gate_off(),
            case(
                "increase replicas 0 to 5 with scale maxUnavailable = 2",
                cs(5, int(0), int(1), int(0)).scale_max_unavailable(int(2)),
                vec![],
                E { scale_up_num: 5, scale_up_limit: 2, ..NONE },
            ),
            case(
                "increase replicas 3 to 6 with scale maxUnavailable = 2, not ready pod = 1",
                cs(6, int(0), int(1), int(0)).scale_max_unavailable(int(2)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_up_num: 3, scale_up_limit: 1, ..NONE },
            ),
            case(
                "increase replicas 3 to 6 with scale maxUnavailable = 2, not ready pod = 2",
                cs(6, int(0), int(1), int(0)).scale_max_unavailable(int(2)),
                [n(1, p(New, Normal, R, NO_SD)), n(2, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_up_num: 3, scale_up_limit: 0, ..NONE },
            ),
            case(
                "[scalingExcludePreparingDelete=false] specific delete a pod with lifecycle hook (step 1/4)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, R, SD))].concat(),
                E { delete_ready_limit: 1, ..NONE },
            ),
            case(
                "[scalingExcludePreparingDelete=false] specific delete a pod with lifecycle hook (step 2/4)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, PreparingDelete, R, SD))].concat(),
                NONE,
            ),
            case(
                "[scalingExcludePreparingDelete=false] specific delete a pod with lifecycle hook (step 3/4)",
                cs(3, int(0), int(1), int(0)),
                n(2, p(New, Normal, R, NO_SD)),
                E { scale_up_num: 1, scale_up_limit: 1, ..NONE },
            ),
            case(
                "[scalingExcludePreparingDelete=false] specific delete a pod with lifecycle hook (step 4/4)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            ),
            case(
                "[scalingExcludePreparingDelete=true] specific delete a pod with lifecycle hook (step 1/4)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, R, SD))].concat(),
                E { delete_ready_limit: 1, ..NONE },
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific delete a pod with lifecycle hook (step 2/4)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, PreparingDelete, R, SD))].concat(),
                E { scale_up_num: 1, scale_up_limit: 1, ..NONE },
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific delete a pod with lifecycle hook (step 3/4)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, PreparingDelete, R, SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific delete a pod with lifecycle hook (step 4/4)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, PreparingDelete, R, SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific delete a pod with lifecycle hook and then cancel (step 1/5)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, R, SD))].concat(),
                E { delete_ready_limit: 1, ..NONE },
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific delete a pod with lifecycle hook and then cancel (step 2/5)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, PreparingDelete, R, SD))].concat(),
                E { scale_up_num: 1, scale_up_limit: 1, ..NONE },
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific delete a pod with lifecycle hook and then cancel (step 3/5)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, PreparingDelete, R, SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific delete a pod with lifecycle hook and then cancel (step 4/5)",
                cs(3, int(0), int(1), int(0)),
                // The third pod was moved back to Normal by managePreparingDelete.
                [n(3, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 1, delete_ready_limit: 1, ..NONE },
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific delete a pod with lifecycle hook and then cancel (step 5/5)",
                cs(3, int(0), int(1), int(0)),
                n(3, p(New, Normal, R, NO_SD)),
                NONE,
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific scale down with lifecycle hook, then scale up pods (step 1/6)",
                cs(3, int(0), int(1), int(0)),
                n(3, p(New, Normal, R, NO_SD)),
                NONE,
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific scale down with lifecycle hook, then scale up pods (step 2/6)",
                cs(2, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, R, SD))].concat(),
                E { delete_ready_limit: 2, ..NONE },
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific scale down with lifecycle hook, then scale up pods (step 3/6)",
                cs(2, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, PreparingDelete, R, SD))].concat(),
                NONE,
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific scale down with lifecycle hook, then scale up pods (step 4/6)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, PreparingDelete, R, SD))].concat(),
                E { scale_up_num: 1, scale_up_limit: 1, ..NONE },
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific scale down with lifecycle hook, then scale up pods (step 5/6)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, PreparingDelete, R, SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            )
            .exclude_preparing_delete(),
            case(
                "[scalingExcludePreparingDelete=true] specific scale down with lifecycle hook, then scale up pods (step 6/6)",
                cs(3, int(0), int(1), int(0)),
                [n(2, p(New, Normal, R, NO_SD)), n(1, p(New, Normal, NR, NO_SD))].concat(),
                NONE,
            )
            .exclude_preparing_delete(),
            case(
                "[scalingWithPreparingUpdate=true] scaling up when a preparing pod is not updated, and expected-updated is 1",
                cs(4, pct("90%"), int(1), int(0)),
                [n(1, p(Old, PreparingUpdate, R, NO_SD)), n(2, p(Old, Normal, R, NO_SD))].concat(),
                E { scale_up_num: 1, scale_up_limit: 1, scale_up_num_old_revision: 1, ..NONE },
            )
            .exclude_preparing_delete()
            .scale_is_pod_update(),
            case(
                "[scalingWithPreparingUpdate=true] scaling up when a preparing pod is not updated, and expected-updated is 2",
                cs(4, int(2), int(1), int(0)),
                [n(1, p(Old, PreparingUpdate, R, NO_SD)), n(2, p(Old, Normal, R, NO_SD))].concat(),
                E { scale_up_num: 1, scale_up_limit: 1, ..NONE },
            )
            .exclude_preparing_delete()
            .scale_is_pod_update(),
            case(
                "[UpdateStrategyPaused=true] scale up pods with maxSurge=3,maxUnavailable=0",
                cs(5, int(0), int(0), int(3)).paused(),
                n(3, p(Old, Normal, R, NO_SD)),
                E { scale_up_num: 2, scale_up_limit: 2, update_num: 3, update_max_unavailable: -2, ..NONE },
            ),
            case(
                "[UpdateStrategyPaused=true] scale down pods with maxSurge=3,maxUnavailable=0",
                cs(3, int(0), int(0), int(3)).paused(),
                n(5, p(Old, Normal, R, NO_SD)),
                E {
                    scale_down_num: 2,
                    scale_down_num_old_revision: 5,
                    delete_ready_limit: 2,
                    update_num: 3,
                    update_max_unavailable: 2,
                    ..NONE
                },
            ),
            case(
                "[UpdateStrategyPaused=true] create 0 newRevision pods with maxSurge=3,maxUnavailable=0",
                cs(5, int(0), int(0), int(3)).paused(),
                [n(5, p(Old, Normal, R, NO_SD)), n(3, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 3, scale_down_num_old_revision: 5, update_num: 2, update_max_unavailable: 3, ..NONE },
            ),
            // Kruise reuses the previous name for this partition=2 variant.
            case(
                "[UpdateStrategyPaused=true] create 0 newRevision pods with maxSurge=3,maxUnavailable=0",
                cs(5, int(2), int(0), int(3)).paused(),
                [n(5, p(Old, Normal, R, NO_SD)), n(3, p(New, Normal, NR, NO_SD))].concat(),
                E { scale_down_num: 3, scale_down_num_old_revision: 3, ..NONE },
            ),
        ]
    }

    #[test]
    fn kruise_calculate_diffs_with_expectation_table() {
        let cases = kruise_cases();
        assert_eq!(cases.len(), 80, "every case of Kruise's TestCalculateDiffsWithExpectation is ported");
        let failures: Vec<String> = cases
            .iter()
            .enumerate()
            .filter_map(|(index, case)| {
                let got = case.run();
                (got != case.expect).then(|| format!("#{index} {:?}:\n   got {got:?}\n  want {:?}", case.name, case.expect))
            })
            .collect();
        assert!(failures.is_empty(), "{} case(s) differ:\n{}", failures.len(), failures.join("\n"));
    }

    #[test]
    fn preparing_update_pods_count_as_old_without_the_scale_classification() {
        // Same pods as Kruise's "expected-updated is 1" case, classified the way Update does.
        let case = case(
            "update classification",
            cs(4, pct("90%"), int(1), int(0)),
            [n(1, p(Old, PreparingUpdate, R, NO_SD)), n(2, p(Old, Normal, R, NO_SD))].concat(),
            NONE,
        )
        .exclude_preparing_delete();
        assert_eq!(case.run(), E { scale_up_num: 1, scale_up_limit: 1, ..NONE });
    }

    #[test]
    fn invalid_partition_counts_as_zero() {
        let bare_number = pct("3");
        let input = DiffInput {
            replicas: 2,
            partition: Some(&bare_number),
            max_surge: None,
            max_unavailable: None,
            scale_max_unavailable: None,
            paused: false,
            revisions_consistent: false,
            partition_rollback: true,
            exclude_preparing_delete: false,
        };
        let old_ready = PodView { updated: false, preparing_delete: false, specified_delete: false, available: true };
        assert_eq!(calculate_diffs(&input, &[old_ready, old_ready]), E { update_num: 2, update_max_unavailable: 1, ..NONE });
    }

    #[test]
    fn is_empty_means_all_zero() {
        assert!(ExpectationDiffs::default().is_empty());
        assert!(!E { update_max_unavailable: -1, ..NONE }.is_empty());
    }
}
