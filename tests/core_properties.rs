//! Properties of the pure core over generated CloneSets and pod sets: nothing panics, and the
//! plans stay within the budgets the spec sets (replicas + maxSurge for creations, maxUnavailable
//! for updates and ready deletions, the surplus plus marked pods for deletions, partition for
//! how many pods reach the update revision).
//!
//! The generators ([`Scenario`]) know nothing about the core; each property only calls the
//! core's public functions, so a change of their shape touches [`Scenario::sync_input`] and the
//! property that calls it. A failing case is shrunk and printed; `PROPTEST_CASES` runs more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cloneset_operator::api::cloneset::{CloneSetSpec, update_type};
use cloneset_operator::api::shared::{Lifecycle, LifecycleHook};
use cloneset_operator::api::{CloneSet, keys};
use cloneset_operator::core::diff::{self, DiffInput, PodView};
use cloneset_operator::core::gates::FeatureGates;
use cloneset_operator::core::pod_read::{self, PodRead};
use cloneset_operator::core::sync::{self, SyncInput};
use cloneset_operator::core::{intstr, order, status};
use cloneset_operator::pod_cache::compact::{CompactPod, Interner, ReadPod};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use proptest::sample::select;

const CURRENT: &str = "web-5d8f7c";
const UPDATE: &str = "web-7b9c4d";
const PRE_DELETE_LABEL: &str = "example.com/pre-delete-hook";
const IN_PLACE_LABEL: &str = "example.com/in-place-hook";
const ZONE: &str = "topology.kubernetes.io/zone";

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

/// One generated pod, before it becomes a `Pod`.
#[derive(Clone, Debug)]
struct PodCase {
    on_update_revision: bool,
    lifecycle: Option<&'static str>,
    running: bool,
    ready: bool,
    /// Ready for an hour (else for a second: not yet available under minReadySeconds).
    ready_long_ago: bool,
    in_place_ready_false: bool,
    specified_delete_label: bool,
    listed_in_pods_to_delete: bool,
    node: Option<&'static str>,
    pre_delete_hooked: bool,
    in_place_hooked: bool,
    deletion_cost: Option<&'static str>,
}

fn pod_case() -> impl Strategy<Value = PodCase> {
    let states = select(vec![
        None,
        Some("Normal"),
        Some("PreparingNormal"),
        Some("PreparingUpdate"),
        Some("Updating"),
        Some("Updated"),
        Some("PreparingDelete"),
        Some("NotAKruiseState"),
    ]);
    (
        (any::<bool>(), prop_oneof![3 => Just(None), 1 => states], any::<bool>(), any::<bool>(), any::<bool>(), prop::bool::weighted(0.1)),
        (
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.1),
            select(vec![None, Some("node-a"), Some("node-b"), Some("node-c"), Some("node-unknown")]),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.2),
            select(vec![None, Some("-5"), Some("0"), Some("100"), Some("+1"), Some("x")]),
        ),
    )
        .prop_map(|((on_update_revision, lifecycle, running, ready, ready_long_ago, in_place_ready_false), rest)| {
            let (specified_delete_label, listed_in_pods_to_delete, node, pre_delete_hooked, in_place_hooked, deletion_cost) = rest;
            PodCase {
                on_update_revision,
                lifecycle,
                running,
                ready,
                ready_long_ago,
                in_place_ready_false,
                specified_delete_label,
                listed_in_pods_to_delete,
                node,
                pre_delete_hooked,
                in_place_hooked,
                deletion_cost,
            }
        })
}

/// Valid ints and percentages, and a few values the CRD would refuse (the core must not panic
/// on them either).
fn int_or_percent(max: i32) -> impl Strategy<Value = Option<IntOrString>> {
    prop_oneof![
        2 => Just(None),
        3 => (0..=max).prop_map(|n| Some(IntOrString::Int(n))),
        3 => (0..=100u32).prop_map(|p| Some(IntOrString::String(format!("{p}%")))),
        1 => select(vec!["33.3%", "150%", "-10%", "abc", "5", ""]).prop_map(|s| Some(IntOrString::String(s.into()))),
        1 => select(vec![-3, i32::MAX, i32::MIN]).prop_map(|n| Some(IntOrString::Int(n))),
    ]
}

/// A CloneSet's spec and controller switches, and its pods.
#[derive(Clone, Debug)]
struct Scenario {
    replicas: Option<i32>,
    partition: Option<IntOrString>,
    max_surge: Option<IntOrString>,
    max_unavailable: Option<IntOrString>,
    scale_max_unavailable: Option<IntOrString>,
    paused: bool,
    update_type: &'static str,
    /// `Some(mark_pod_not_ready)`: the hook is set.
    pre_delete_hook: Option<bool>,
    in_place_hook: Option<bool>,
    min_ready_seconds: i32,
    spread_by_zone: bool,
    revisions_differ: bool,
    exclude_preparing_delete: bool,
    gates: FeatureGates,
    pods: Vec<PodCase>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let spec = (
        prop_oneof![1 => Just(None), 8 => (0..12i32).prop_map(Some)],
        int_or_percent(12),
        int_or_percent(4),
        int_or_percent(4),
        prop_oneof![3 => Just(None), 1 => int_or_percent(4)],
        prop::bool::weighted(0.15),
        select(vec![update_type::RECREATE, update_type::IN_PLACE_IF_POSSIBLE, update_type::IN_PLACE_ONLY, ""]),
        prop::option::of(any::<bool>()),
        prop::option::of(any::<bool>()),
        select(vec![0, 30]),
    );
    let switches = (any::<bool>(), prop::bool::weighted(0.8), any::<bool>(), any::<bool>(), any::<bool>());
    (spec, switches, prop::collection::vec(pod_case(), 0..14)).prop_map(|(spec, switches, pods)| {
        let (
            replicas,
            partition,
            max_surge,
            max_unavailable,
            scale_max_unavailable,
            paused,
            update_type,
            pre_delete_hook,
            in_place_hook,
            mrs,
        ) = spec;
        let (spread_by_zone, revisions_differ, exclude_preparing_delete, partition_rollback, preparing_update_as_update) = switches;
        Scenario {
            replicas,
            partition,
            max_surge,
            max_unavailable,
            scale_max_unavailable,
            paused,
            update_type,
            pre_delete_hook,
            in_place_hook,
            min_ready_seconds: mrs,
            spread_by_zone,
            revisions_differ,
            exclude_preparing_delete,
            gates: FeatureGates { cloneset_partition_rollback: partition_rollback, preparing_update_as_update, ..FeatureGates::default() },
            pods,
        }
    })
}

fn pod_name(i: usize) -> String {
    format!("web-{i:02}")
}

impl Scenario {
    fn update_revision(&self) -> &'static str {
        UPDATE
    }

    fn current_revision(&self) -> &'static str {
        if self.revisions_differ { CURRENT } else { UPDATE }
    }

    fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(1)
    }

    fn cloneset(&self) -> CloneSet {
        let hook = |label: &str, mark: bool| LifecycleHook {
            labels_handler: BTreeMap::from([(label.to_string(), "true".to_string())]),
            mark_pod_not_ready: mark,
            ..Default::default()
        };
        let mut spec = CloneSetSpec {
            replicas: self.replicas,
            selector: LabelSelector { match_labels: Some(BTreeMap::from([("app".into(), "web".into())])), ..Default::default() },
            template: PodTemplateSpec {
                spec: Some(PodSpec {
                    topology_spread_constraints: self.spread_by_zone.then(|| {
                        vec![TopologySpreadConstraint {
                            topology_key: ZONE.into(),
                            max_skew: 1,
                            when_unsatisfiable: "ScheduleAnyway".into(),
                            ..Default::default()
                        }]
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            min_ready_seconds: self.min_ready_seconds,
            lifecycle: (self.pre_delete_hook.is_some() || self.in_place_hook.is_some()).then(|| Lifecycle {
                pre_delete: self.pre_delete_hook.map(|m| hook(PRE_DELETE_LABEL, m)),
                in_place_update: self.in_place_hook.map(|m| hook(IN_PLACE_LABEL, m)),
                pre_normal: None,
            }),
            ..Default::default()
        };
        spec.update_strategy.type_ = self.update_type.into();
        spec.update_strategy.partition = self.partition.clone();
        spec.update_strategy.max_surge = self.max_surge.clone();
        spec.update_strategy.max_unavailable = self.max_unavailable.clone();
        spec.update_strategy.paused = self.paused;
        spec.scale_strategy.max_unavailable = self.scale_max_unavailable.clone();
        spec.scale_strategy.pods_to_delete =
            self.pods.iter().enumerate().filter(|(_, p)| p.listed_in_pods_to_delete).map(|(i, _)| pod_name(i)).collect();
        let mut cs = CloneSet::new("web", spec);
        cs.metadata.namespace = Some("default".into());
        cs.metadata.uid = Some("uid-web".into());
        cs
    }

    fn pods(&self) -> Vec<Pod> {
        self.pods.iter().enumerate().map(|(i, p)| self.pod(i, p)).collect()
    }

    fn pod(&self, i: usize, p: &PodCase) -> Pod {
        let revision = if p.on_update_revision { self.update_revision() } else { self.current_revision() };
        let mut labels = BTreeMap::from([
            ("app".to_string(), "web".to_string()),
            (keys::CONTROLLER_REVISION_HASH.to_string(), revision.to_string()),
            (keys::CLONESET_INSTANCE_ID.to_string(), format!("id{i:02}")),
        ]);
        if let Some(state) = p.lifecycle {
            labels.insert(keys::LIFECYCLE_STATE.into(), state.into());
        }
        if p.specified_delete_label {
            labels.insert(keys::SPECIFIED_DELETE.into(), "true".into());
        }
        if p.pre_delete_hooked {
            labels.insert(PRE_DELETE_LABEL.into(), "true".into());
        }
        if p.in_place_hooked {
            labels.insert(IN_PLACE_LABEL.into(), "true".into());
        }
        let annotations = p.deletion_cost.map(|c| BTreeMap::from([(keys::POD_DELETION_COST.to_string(), c.to_string())]));
        let ready_since = now() - SignedDuration::from_secs(if p.ready_long_ago { 3600 } else { 1 });
        let mut conditions = vec![PodCondition {
            type_: "Ready".into(),
            status: if p.ready { "True" } else { "False" }.into(),
            last_transition_time: Some(Time(ready_since)),
            ..Default::default()
        }];
        if p.in_place_ready_false {
            conditions.push(PodCondition { type_: keys::INPLACE_UPDATE_READY.into(), status: "False".into(), ..Default::default() });
        }
        Pod {
            metadata: ObjectMeta {
                name: Some(pod_name(i)),
                namespace: Some("default".into()),
                uid: Some(format!("pod-uid-{i}")),
                labels: Some(labels),
                annotations,
                creation_timestamp: Some(Time(now() - SignedDuration::from_secs(7200 - i as i64))),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: p.node.map(str::to_string), ..Default::default() }),
            status: Some(PodStatus {
                phase: Some(if p.running { "Running" } else { "Pending" }.into()),
                conditions: Some(conditions),
                ..Default::default()
            }),
        }
    }

    /// The input every plan function takes; the one place to adapt when its shape changes.
    fn sync_input<'a>(&'a self, cs: &'a CloneSet, pods: &'a [&'a dyn PodRead], env: &'a Env) -> SyncInput<'a> {
        SyncInput {
            cloneset: cs,
            pods,
            current_revision: self.current_revision(),
            update_revision: self.update_revision(),
            gates: self.gates,
            resize: Default::default(),
            exclude_preparing_delete_flag: self.exclude_preparing_delete,
            node_labels: &env.node_labels,
            revision_data: &env.revision_data,
            revision_vct_hashes: &env.revision_vct_hashes,
            now: now(),
        }
    }

    /// maxSurge and maxUnavailable as the controller reads them (percentages of replicas).
    fn surge_and_unavailable(&self) -> (i32, i32) {
        let surge = intstr::max_surge(self.max_surge.as_ref(), self.replicas(), self.paused);
        (surge, intstr::max_unavailable(self.max_unavailable.as_ref(), self.replicas(), surge))
    }

    fn is_specified_delete(&self, i: usize) -> bool {
        self.pods[i].specified_delete_label || self.pods[i].listed_in_pods_to_delete
    }

    fn is_preparing_delete(&self, i: usize) -> bool {
        self.pods[i].lifecycle == Some("PreparingDelete")
    }
}

/// What the cluster looks like around the CloneSet.
struct Env {
    node_labels: BTreeMap<String, BTreeMap<String, String>>,
    revision_data: BTreeMap<String, std::sync::Arc<[u8]>>,
    revision_vct_hashes: BTreeMap<String, String>,
}

fn env() -> Env {
    let zone = |z: &str| BTreeMap::from([(ZONE.to_string(), z.to_string())]);
    Env {
        node_labels: BTreeMap::from([("node-a".into(), zone("z1")), ("node-b".into(), zone("z1")), ("node-c".into(), zone("z2"))]),
        revision_data: BTreeMap::new(),
        revision_vct_hashes: BTreeMap::new(),
    }
}

fn names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().filter_map(|p| p.metadata.name.clone()).collect()
}

fn config() -> ProptestConfig {
    // Debug builds: ~1,000 cases per property take a few seconds in all.
    ProptestConfig { cases: 1000, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    /// Creations never take the pod count (not counting pods on their way out) above
    /// replicas + maxSurge.
    #[test]
    fn scale_creates_stay_within_replicas_plus_max_surge(s in scenario()) {
        let (cs, pods, env) = (s.cloneset(), s.pods(), env());
        let refs: Vec<&dyn PodRead> = pod_read::refs(&pods);
        let plan = sync::plan_scale(&s.sync_input(&cs, &refs, &env));

        let (surge, _) = s.surge_and_unavailable();
        let counted = (0..pods.len()).filter(|&i| !(s.exclude_preparing_delete && s.is_preparing_delete(i))).count() as i64;
        let room = (i64::from(s.replicas()) + i64::from(surge.max(0)) - counted).max(0);
        let creates = (plan.create_current + plan.create_update) as i64;
        prop_assert!(creates <= room, "{creates} creations with room for {room}: {plan:?}");
        if !s.revisions_differ {
            prop_assert_eq!(plan.create_current, 0, "nothing is created from the current revision when it is the update revision");
        }
    }

    /// Deletions pick distinct existing pods; beyond pods already marked (specified for deletion,
    /// or PreparingDelete), never more than the surplus over replicas; and ready pods are
    /// deleted only within maxUnavailable (plus the surplus), unless they already were
    /// PreparingDelete.
    #[test]
    fn scale_deletions_stay_within_the_surplus_and_max_unavailable(s in scenario()) {
        let (cs, pods, env) = (s.cloneset(), s.pods(), env());
        let refs: Vec<&dyn PodRead> = pod_read::refs(&pods);
        let plan = sync::plan_scale(&s.sync_input(&cs, &refs, &env));

        let existing = names(&pods);
        let removed: Vec<&String> = plan.delete.iter().chain(&plan.prepare_delete).collect();
        let distinct: BTreeSet<&String> = removed.iter().copied().collect();
        prop_assert_eq!(distinct.len(), removed.len(), "a pod chosen twice: {:?}", plan);
        prop_assert!(distinct.iter().all(|n| existing.contains(*n)), "an unknown pod: {:?}", plan);
        let index = |name: &str| pods.iter().position(|p| p.metadata.name.as_deref() == Some(name)).unwrap();

        let marked = (0..pods.len()).filter(|&i| s.is_specified_delete(i) || s.is_preparing_delete(i)).count() as i64;
        let surplus = (pods.len() as i64 - i64::from(s.replicas())).max(0);
        let unmarked_removed = removed.iter().filter(|n| { let i = index(n); !s.is_specified_delete(i) && !s.is_preparing_delete(i) }).count() as i64;
        prop_assert!(unmarked_removed <= surplus, "{unmarked_removed} unmarked pods removed with a surplus of {surplus}: {plan:?}");
        prop_assert!(removed.len() as i64 <= surplus + marked);

        // Ready deletions: the budget is maxUnavailable plus pods above replicas, minus what is
        // already unavailable (PreparingDelete pods, and unavailable pods not specified for deletion).
        let releasing = removed.iter().all(|n| s.is_preparing_delete(index(n)));
        if !releasing {
            let (_, max_unavailable) = s.surge_and_unavailable();
            let unavailable = (0..pods.len())
                .filter(|&i| s.is_preparing_delete(i) || (!s.is_specified_delete(i) && !status::is_available(&pods[i], s.min_ready_seconds, now())))
                .count() as i64;
            let budget = (i64::from(max_unavailable) + pods.len() as i64 - i64::from(s.replicas()) - unavailable).max(0);
            let ready_removed = removed.iter().filter(|n| status::is_available(&pods[index(n)], 0, now())).count() as i64;
            prop_assert!(ready_removed <= budget, "{ready_removed} ready pods removed with a budget of {budget}: {plan:?}");
        }
    }

    /// The pods chosen for update never take the unavailable count above
    /// max(what it already is, maxUnavailable + pods above replicas); and never put more than
    /// replicas − partition pods on the update revision.
    #[test]
    fn update_choices_stay_within_max_unavailable_and_partition(s in scenario()) {
        let (cs, pods, env) = (s.cloneset(), s.pods(), env());
        let refs: Vec<&dyn PodRead> = pod_read::refs(&pods);
        let plan = sync::plan_update(&s.sync_input(&cs, &refs, &env));

        let existing = names(&pods);
        let chosen: BTreeSet<&String> = plan.pods.iter().map(|(n, _)| n).collect();
        prop_assert_eq!(chosen.len(), plan.pods.len(), "a pod chosen twice: {:?}", plan);
        prop_assert!(chosen.iter().all(|n| existing.contains(*n)), "an unknown pod: {:?}", plan);
        if s.paused {
            prop_assert!(plan.pods.is_empty(), "a paused CloneSet updates nothing: {:?}", plan);
        }

        let available = |p: &Pod| status::is_available(p, s.min_ready_seconds, now());
        let unavailable_before = pods.iter().filter(|p| !available(p)).count() as i64;
        let newly_unavailable = pods.iter().filter(|p| available(p) && chosen.contains(p.metadata.name.as_ref().unwrap())).count() as i64;
        let (_, max_unavailable) = s.surge_and_unavailable();
        let allowed = i64::from(max_unavailable) + pods.len() as i64 - i64::from(s.replicas());
        prop_assert!(
            unavailable_before + newly_unavailable <= unavailable_before.max(allowed),
            "{unavailable_before} unavailable + {newly_unavailable} chosen > {allowed} allowed: {plan:?}"
        );

        // With CloneSetPartitionRollback the arithmetic may move pods either way in states a
        // scale pass would settle first (more pods than replicas), so only the forward-only
        // controller is held to the partition here.
        if !s.gates.cloneset_partition_rollback && !plan.pods.is_empty() {
            let partition = i64::from(intstr::partition_replicas(s.replicas(), s.partition.as_ref()).unwrap_or(0));
            let on_update = |i: usize| s.pods[i].on_update_revision || !s.revisions_differ;
            let updated_before = (0..pods.len()).filter(|&i| on_update(i) && !s.is_preparing_delete(i)).count() as i64;
            let moving = (0..pods.len()).filter(|&i| !on_update(i) && chosen.contains(&pod_name(i))).count() as i64;
            let cap = (i64::from(s.replicas()) - partition).max(updated_before);
            prop_assert!(updated_before + moving <= cap, "{updated_before} updated + {moving} moving > {cap}: {plan:?}");
        }
    }

    /// Refresh and status never panic; refresh writes only to existing pods, once each; the
    /// status counts are consistent with each other and with the pods.
    #[test]
    fn refresh_and_status_are_consistent(s in scenario()) {
        let (cs, pods, env) = (s.cloneset(), s.pods(), env());
        let refs: Vec<&dyn PodRead> = pod_read::refs(&pods);
        let (refreshes, _) = sync::plan_refresh(&s.sync_input(&cs, &refs, &env));
        let existing = names(&pods);
        let refreshed: BTreeSet<&String> = refreshes.iter().map(|r| &r.pod).collect();
        prop_assert_eq!(refreshed.len(), refreshes.len());
        prop_assert!(refreshed.iter().all(|n| existing.contains(*n)));

        let partition = intstr::partition_replicas(s.replicas(), s.partition.as_ref()).unwrap_or(0);
        let (st, _) = status::compute(&status::StatusInput {
            cloneset: &cs,
            pods: &refs,
            update_revision: s.update_revision(),
            current_revision: s.current_revision(),
            collision_count: 0,
            expected_updated_replicas: s.replicas() - partition,
            now: now(),
        });
        prop_assert_eq!(st.replicas as usize, pods.len());
        prop_assert!(st.available_replicas <= st.ready_replicas && st.ready_replicas <= st.replicas, "{:?}", st);
        prop_assert!(st.updated_available_replicas <= st.updated_ready_replicas, "{:?}", st);
        prop_assert!(st.updated_ready_replicas <= st.updated_replicas && st.updated_replicas <= st.replicas, "{:?}", st);
        prop_assert!(st.updated_ready_replicas <= st.ready_replicas, "{:?}", st);
    }

    /// The cache's pods are read compact (`PodRead` on a `ReadPod`): every decision of a pass
    /// over them is the one the whole pods give.
    #[test]
    fn compact_pods_decide_as_whole_pods_do(s in scenario()) {
        let (cs, pods, env) = (s.cloneset(), s.pods(), env());
        let mut interner = Interner::default();
        let read: Vec<ReadPod> = pods.iter().map(|p| ReadPod::new(Arc::new(CompactPod::new(p.clone(), &mut interner)))).collect();
        let (whole, compact) = (pod_read::refs(&pods), pod_read::refs(&read));
        let (a, b) = (s.sync_input(&cs, &whole, &env), s.sync_input(&cs, &compact, &env));
        prop_assert_eq!(sync::plan_scale(&a), sync::plan_scale(&b));
        prop_assert_eq!(sync::plan_refresh(&a), sync::plan_refresh(&b));
        prop_assert_eq!(sync::plan_update(&a), sync::plan_update(&b));
        prop_assert_eq!(sync::next_availability(&a), sync::next_availability(&b));
        prop_assert_eq!(sync::stale_pods_to_delete(&cs, &whole), sync::stale_pods_to_delete(&cs, &compact));
        let status_of = |refs: &[&dyn PodRead]| status::compute(&status::StatusInput {
            cloneset: &cs,
            pods: refs,
            update_revision: s.update_revision(),
            current_revision: s.current_revision(),
            collision_count: 0,
            expected_updated_replicas: s.replicas(),
            now: now(),
        });
        prop_assert_eq!(status_of(&whole), status_of(&compact));
    }

    /// The orderings return what they were given: victims are distinct pods, no more than asked
    /// for; the update order is a permutation of the candidates.
    #[test]
    fn orderings_are_selections_and_permutations(s in scenario(), want in 0usize..16, want_old in 0usize..16, skip in 0usize..4) {
        let (cs, pods, env) = (s.cloneset(), s.pods(), env());
        let spread = order::pod_spread_constraints(cs.spec.template.spec.as_ref());
        let ctx = order::VictimContext { min_ready_seconds: s.min_ready_seconds, now: now(), spread_constraints: &spread, node_labels: &env.node_labels };
        let victims = order::choose_pods_to_delete(want, want_old, &pods, |p: &dyn PodRead| status::pod_revision(p) == Some(UPDATE), &ctx);
        let distinct: BTreeSet<usize> = victims.iter().copied().collect();
        prop_assert_eq!(distinct.len(), victims.len());
        prop_assert!(victims.len() <= want && victims.iter().all(|&i| i < pods.len()));

        let candidates: Vec<usize> = (0..pods.len()).filter(|i| i % 4 != skip).collect();
        let sorted = order::sort_update_indexes(&pods, candidates.clone(), None, &cs.spec.update_strategy.scatter_strategy);
        let mut back = sorted.clone();
        back.sort_unstable();
        prop_assert_eq!(back, candidates);
    }

    /// The arithmetic on its own, over any pod classification and any int-or-string values:
    /// never both a scale-up and a scale-down, and the scale-up limit never exceeds the need.
    #[test]
    fn diffs_never_scale_both_ways(
        s in scenario(),
        views in prop::collection::vec((any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()), 0..14),
    ) {
        let views: Vec<PodView> = views
            .into_iter()
            .map(|(updated, preparing_delete, specified_delete, available)| PodView { updated, preparing_delete, specified_delete, available })
            .collect();
        let input = DiffInput {
            replicas: s.replicas(),
            partition: s.partition.as_ref(),
            max_surge: s.max_surge.as_ref(),
            max_unavailable: s.max_unavailable.as_ref(),
            scale_max_unavailable: s.scale_max_unavailable.as_ref(),
            paused: s.paused,
            revisions_consistent: !s.revisions_differ,
            partition_rollback: s.gates.cloneset_partition_rollback,
            exclude_preparing_delete: s.exclude_preparing_delete,
        };
        let d = diff::calculate_diffs(&input, &views);
        prop_assert!(d.scale_up_num >= 0 && d.scale_down_num >= 0, "{:?}", d);
        prop_assert!(d.scale_up_num == 0 || d.scale_down_num == 0, "{:?}", d);
        prop_assert!(d.scale_up_limit <= d.scale_up_num, "{:?}", d);
        let (surge, _) = s.surge_and_unavailable();
        prop_assert!(d.use_surge <= surge.max(0), "{:?}", d);
    }
}
