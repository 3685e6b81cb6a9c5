//! Building pods and PVCs exactly as Kruise names and labels them, and choosing instance ids.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodReadinessGate, PodSpec, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use crate::api::keys;
use crate::api::shared::LifecycleState;
use crate::api::{CloneSet, cloneset::VolumeClaimTemplate};

/// Alphabet of instance ids (apimachinery's `rand.String`: no vowels, no look-alikes).
pub(crate) const INSTANCE_ID_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
pub(crate) const INSTANCE_ID_LEN: usize = 5;

/// The owner reference Kruise v1.9.0 puts on pods, PVCs and revisions.
pub(crate) fn controller_ref(cs: &CloneSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps.kruise.io/v1alpha1".into(),
        kind: "CloneSet".into(),
        name: cs.metadata.name.clone().unwrap_or_default(),
        uid: cs.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The owner references of a PVC handed from CloneSet `cs_uid` to its dead pod (DisablePVCReuse):
/// Kruise's `updateClaimOwnerRefToPod` removes only the CloneSet's reference and appends
/// `NewControllerRef(pod)` (controller and blockOwnerDeletion true), unless the pod is there already.
pub(crate) fn pvc_owners_handed_to_pod(refs: &[OwnerReference], cs_uid: &str, pod_name: &str, pod_uid: &str) -> Vec<OwnerReference> {
    let mut out: Vec<OwnerReference> = refs.iter().filter(|o| o.uid != cs_uid).cloned().collect();
    if !out.iter().any(|o| o.uid == pod_uid) {
        out.push(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod_name.into(),
            uid: pod_uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        });
    }
    out
}

/// The part of a revision name after the last `-` (the hash).
pub(crate) fn short_hash(revision_name: &str) -> &str {
    revision_name.rsplit_once('-').map_or(revision_name, |(_, h)| h)
}

/// Whether a pod's `controller-revision-hash` names `revision`: equal in full, or equal after
/// the last `-` on both sides (pods written with the `CloneSetShortHash` gate carry only the hash).
pub(crate) fn hash_matches(pod_hash: &str, revision: &str) -> bool {
    pod_hash == revision || short_hash(pod_hash) == short_hash(revision)
}

/// PVC name for a volumeClaimTemplate and instance.
pub(crate) fn pvc_name(vct: &str, cloneset: &str, instance_id: &str) -> String {
    format!("{vct}-{cloneset}-{instance_id}")
}

/// Everything a new pod is built from.
pub(crate) struct PodRecipe<'a> {
    pub cloneset: &'a CloneSet,
    /// The template of the revision the pod belongs to.
    pub template: &'a PodTemplateSpec,
    pub revision_name: &'a str,
    pub instance_id: &'a str,
    /// Feature gate `CloneSetShortHash`: write only the hash in `controller-revision-hash`.
    pub short_hash_label: bool,
    pub now: Timestamp,
}

/// A pod as Kruise's `newVersionedPods` builds it, ready to create.
pub(crate) fn build_pod(r: &PodRecipe<'_>) -> Pod {
    let cs = r.cloneset;
    let cs_name = cs.metadata.name.clone().unwrap_or_default();
    let tmeta = r.template.metadata.clone().unwrap_or_default();
    let mut labels = tmeta.labels.unwrap_or_default();
    let hash = short_hash(r.revision_name).to_string();
    let revision_label = if r.short_hash_label { hash.clone() } else { r.revision_name.to_string() };
    labels.insert(keys::CONTROLLER_REVISION_HASH.into(), revision_label);
    labels.insert(keys::POD_TEMPLATE_HASH.into(), hash);
    labels.insert(keys::CLONESET_INSTANCE_ID.into(), r.instance_id.into());
    labels.insert(keys::LIFECYCLE_STATE.into(), LifecycleState::PreparingNormal.as_str().into());
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.insert(keys::LIFECYCLE_TIMESTAMP.into(), rfc3339_seconds(r.now));

    let mut spec: PodSpec = r.template.spec.clone().unwrap_or_default();
    // Kruise's pod webhook adds KruisePodReady to every pod it owns (lifecycle hooks with
    // markPodNotReady use it); we add it at creation since we run no pod webhook.
    let gates = spec.readiness_gates.get_or_insert_with(Vec::new);
    for gate in [keys::INPLACE_UPDATE_READY, keys::KRUISE_POD_READY] {
        if !gates.iter().any(|g| g.condition_type == gate) {
            gates.push(PodReadinessGate { condition_type: gate.into() });
        }
    }
    if !cs.spec.volume_claim_templates.is_empty() {
        // VCT volumes come first, then the template's own (a same-named template volume is replaced).
        let vct_names: BTreeSet<&str> = cs.spec.volume_claim_templates.iter().filter_map(|v| v.metadata.name.as_deref()).collect();
        let mut volumes: Vec<Volume> = vct_names
            .iter()
            .map(|name| Volume {
                name: (*name).into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: pvc_name(name, &cs_name, r.instance_id),
                    read_only: Some(false),
                }),
                ..Default::default()
            })
            .collect();
        volumes.extend(spec.volumes.take().unwrap_or_default().into_iter().filter(|v| !vct_names.contains(v.name.as_str())));
        spec.volumes = Some(volumes);
    }

    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{cs_name}-{}", r.instance_id)),
            generate_name: Some(format!("{cs_name}-")),
            namespace: cs.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            finalizers: tmeta.finalizers,
            owner_references: Some(vec![controller_ref(cs)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The PVCs of one instance: labels = the template's + the selector's matchLabels + instance id.
pub(crate) fn build_pvcs(cs: &CloneSet, instance_id: &str) -> Vec<PersistentVolumeClaim> {
    let cs_name = cs.metadata.name.clone().unwrap_or_default();
    let match_labels = cs.spec.selector.match_labels.clone().unwrap_or_default();
    cs.spec
        .volume_claim_templates
        .iter()
        .map(|VolumeClaimTemplate { metadata, spec, status: _ }| {
            let vct = metadata.name.clone().unwrap_or_default();
            let mut labels = metadata.labels.clone().unwrap_or_default();
            labels.extend(match_labels.clone());
            labels.insert(keys::CLONESET_INSTANCE_ID.into(), instance_id.into());
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(pvc_name(&vct, &cs_name, instance_id)),
                    namespace: cs.metadata.namespace.clone(),
                    labels: Some(labels),
                    annotations: metadata.annotations.clone(),
                    owner_references: Some(vec![controller_ref(cs)]),
                    ..Default::default()
                },
                spec: spec.clone(),
                status: None,
            }
        })
        .collect()
}

/// A pod object that still holds an instance id without being active: no new pod may take the
/// id (its name) while it exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeldBy<'a> {
    /// A pod that ended (phase `Failed`, evicted, or `Succeeded`) and is not being deleted.
    Finished { pod: &'a str },
    /// A pod being deleted: it goes by itself, and its replacement takes the id then.
    Terminating,
}

/// What a scale-up does with instance ids ([`instance_ids_for_new_pods`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NewPodIds {
    /// The ids of the pods to create now.
    pub ids: Vec<String>,
    /// Finished pods to delete first, each holding a free PVC's id: the pod that replaces it takes
    /// the id, and so the PVCs, on a later pass, once it is gone (as a StatefulSet replaces a
    /// failed pod). They count towards the pods this pass was asked for.
    pub delete_first: Vec<String>,
    /// Pods asked for that wait for a terminating pod holding a free PVC's id to be gone.
    pub waiting: usize,
}

/// Instance ids for `count` new pods: first the ids of PVCs no active pod uses (so a new pod
/// takes over a gone pod's volumes), then fresh random ids unused by any pod or PVC. A free PVC's
/// id that a pod object still holds (`held`) is never given out while it does: a finished pod
/// holding it is deleted first, and one being deleted is waited for (its replacement keeps the
/// id and the PVCs, as with Kruise, but is never created into a name still taken).
/// `random` yields random numbers (the caller owns the randomness).
pub(crate) fn instance_ids_for_new_pods(
    count: usize,
    free_pvc_ids: &BTreeSet<String>,
    ids_in_use: &BTreeSet<String>,
    held: &BTreeMap<String, HeldBy<'_>>,
    mut random: impl FnMut() -> u64,
) -> NewPodIds {
    let mut out = NewPodIds::default();
    let planned = |out: &NewPodIds| out.ids.len() + out.delete_first.len() + out.waiting;
    for id in free_pvc_ids {
        if planned(&out) == count {
            break;
        }
        match held.get(id) {
            None => out.ids.push(id.clone()),
            Some(HeldBy::Finished { pod }) => out.delete_first.push(pod.to_string()),
            Some(HeldBy::Terminating) => out.waiting += 1,
        }
    }
    let mut taken: BTreeSet<String> = ids_in_use.iter().chain(free_pvc_ids.iter()).chain(held.keys()).cloned().collect();
    while planned(&out) < count {
        let mut n = random();
        let id: String = (0..INSTANCE_ID_LEN)
            .map(|_| {
                let c = INSTANCE_ID_ALPHABET[(n % INSTANCE_ID_ALPHABET.len() as u64) as usize] as char;
                n /= INSTANCE_ID_ALPHABET.len() as u64;
                c
            })
            .collect();
        if taken.insert(id.clone()) {
            out.ids.push(id);
        }
    }
    out
}

/// Free instance ids: those on owned PVCs with no active pod of the same id.
pub(crate) fn free_pvc_ids<'a>(pvc_ids: impl IntoIterator<Item = &'a str>, active_pod_ids: &BTreeSet<String>) -> BTreeSet<String> {
    pvc_ids.into_iter().filter(|id| !active_pod_ids.contains(*id)).map(str::to_string).collect()
}

/// The instance id label of an object.
pub(crate) fn instance_id(labels: Option<&BTreeMap<String, String>>) -> Option<&str> {
    labels?.get(keys::CLONESET_INSTANCE_ID).map(String::as_str)
}

/// A pod's instance id.
pub(crate) fn pod_instance_id(pod: &dyn crate::core::pod_read::PodRead) -> Option<&str> {
    pod.label(keys::CLONESET_INSTANCE_ID)
}

/// RFC 3339 with whole seconds, as Go's `metav1.Time` writes it.
pub(crate) fn rfc3339_seconds(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn update_claim_owner_ref_to_pod_keeps_other_owners_and_makes_the_pod_controller() {
        let other = OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "keep".into(),
            uid: "u-keep".into(),
            ..Default::default()
        };
        let cs = controller_ref(&cloneset(true));
        let refs = pvc_owners_handed_to_pod(&[other.clone(), cs], "uid-1", "foo-abcde", "u-pod");
        let pod = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "foo-abcde".into(),
            uid: "u-pod".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        assert_eq!(refs, [other, pod.clone()]);
        assert_eq!(pvc_owners_handed_to_pod(&refs, "uid-1", "foo-abcde", "u-pod"), refs, "SetOwnerRef is a no-op once the pod owns it");
    }

    fn cloneset(vcts: bool) -> CloneSet {
        let mut v = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
            "metadata": {"name": "foo", "namespace": "ns", "uid": "uid-1"},
            "spec": {"selector": {"matchLabels": {"app": "foo"}},
                     "template": {"metadata": {"labels": {"app": "foo"}, "annotations": {"a": "b"}, "finalizers": ["f/x"]},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}],
                                           "volumes": [{"name": "host", "hostPath": {"path": "/tmp"}}, {"name": "datadir", "emptyDir": {}}]}}},
        });
        if vcts {
            v["spec"]["volumeClaimTemplates"] =
                json!([{"metadata": {"name": "datadir", "labels": {"vct": "yes"}}, "spec": {"accessModes": ["ReadWriteOnce"]}}]);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn create_pods_builds_kruise_shaped_pods() {
        // Kruise TestCreatePods: name foo-id1, generateName foo-, labels, owner, gate, PVC volume first.
        let cs = cloneset(true);
        let pod = build_pod(&PodRecipe {
            cloneset: &cs,
            template: &cs.spec.template,
            revision_name: "foo-revision_abc",
            instance_id: "id1",
            short_hash_label: false,
            now: "2026-01-02T03:04:05.678Z".parse().unwrap(),
        });
        let m = &pod.metadata;
        assert_eq!(m.name.as_deref(), Some("foo-id1"));
        assert_eq!(m.generate_name.as_deref(), Some("foo-"));
        assert_eq!(m.namespace.as_deref(), Some("ns"));
        let labels = m.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "foo");
        assert_eq!(labels[keys::CONTROLLER_REVISION_HASH], "foo-revision_abc");
        assert_eq!(labels[keys::POD_TEMPLATE_HASH], "revision_abc");
        assert_eq!(labels[keys::CLONESET_INSTANCE_ID], "id1");
        assert_eq!(labels[keys::LIFECYCLE_STATE], "PreparingNormal");
        assert_eq!(m.annotations.as_ref().unwrap()[keys::LIFECYCLE_TIMESTAMP], "2026-01-02T03:04:05Z");
        assert_eq!(m.annotations.as_ref().unwrap()["a"], "b");
        assert_eq!(m.finalizers.as_deref(), Some(&["f/x".to_string()][..]));
        let owner = &m.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.api_version.as_str(), owner.kind.as_str(), owner.uid.as_str()), ("apps.kruise.io/v1alpha1", "CloneSet", "uid-1"));
        assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.readiness_gates.unwrap()[0].condition_type, "InPlaceUpdateReady");
        let vols = spec.volumes.unwrap();
        let names: Vec<&str> = vols.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["datadir", "host"], "VCT volume first; the template's same-named volume replaced");
        assert_eq!(vols[0].persistent_volume_claim.as_ref().unwrap().claim_name, "datadir-foo-id1");
    }

    #[test]
    fn short_hash_gate_writes_only_the_hash() {
        let cs = cloneset(false);
        let pod = build_pod(&PodRecipe {
            cloneset: &cs,
            template: &cs.spec.template,
            revision_name: "foo-597d4cb8fd",
            instance_id: "abcde",
            short_hash_label: true,
            now: Timestamp::UNIX_EPOCH,
        });
        assert_eq!(pod.metadata.labels.unwrap()[keys::CONTROLLER_REVISION_HASH], "597d4cb8fd");
        assert!(hash_matches("597d4cb8fd", "foo-597d4cb8fd"));
        assert!(hash_matches("foo-597d4cb8fd", "foo-597d4cb8fd"));
        assert!(!hash_matches("foo-597d4cb8ff", "foo-597d4cb8fd"));
    }

    #[test]
    fn pvcs_carry_template_selector_and_instance_labels() {
        let cs = cloneset(true);
        let pvcs = build_pvcs(&cs, "id3");
        assert_eq!(pvcs.len(), 1);
        assert_eq!(pvcs[0].metadata.name.as_deref(), Some("datadir-foo-id3"));
        let labels = pvcs[0].metadata.labels.as_ref().unwrap();
        assert_eq!((labels["vct"].as_str(), labels["app"].as_str(), labels[keys::CLONESET_INSTANCE_ID].as_str()), ("yes", "foo", "id3"));
        assert_eq!(pvcs[0].metadata.owner_references.as_ref().unwrap()[0].name, "foo");
    }

    #[test]
    fn free_pvc_ids_are_reused_before_random_ones() {
        // Kruise TestGetOrGenAvailableIDs: a free PVC id is reused, the other is random, length 5.
        let active: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        let free = free_pvc_ids(["a", "c"], &active);
        assert_eq!(free, ["c".to_string()].into());
        let mut n = 0u64;
        let ids = instance_ids_for_new_pods(2, &free, &active, &BTreeMap::new(), || {
            n += 7919;
            n
        })
        .ids;
        assert_eq!(ids[0], "c");
        assert_eq!(ids[1].len(), 5);
        assert!(ids[1].bytes().all(|b| INSTANCE_ID_ALPHABET.contains(&b)));
    }

    #[test]
    fn random_ids_never_collide_with_ids_in_use() {
        let in_use: BTreeSet<String> = ["bbbbb".to_string()].into();
        let mut calls = 0;
        // The first draw maps to "bbbbb" (all zero digits), the second to something else.
        let ids = instance_ids_for_new_pods(1, &BTreeSet::new(), &in_use, &BTreeMap::new(), || {
            calls += 1;
            if calls == 1 { 0 } else { 12345 }
        })
        .ids;
        assert_ne!(ids[0], "bbbbb");
        assert_eq!(calls, 2);
    }

    #[test]
    fn a_free_pvcs_id_still_held_by_a_pod_object_is_never_given_out() {
        let free: BTreeSet<String> = ["aaaaa", "ccccc", "ddddd"].map(String::from).into();
        let held: BTreeMap<String, HeldBy> =
            [("aaaaa".to_string(), HeldBy::Finished { pod: "web-aaaaa" }), ("ccccc".to_string(), HeldBy::Terminating)].into();
        let mut n = 0u64;
        let mut random = || {
            n += 7919;
            n
        };
        // The evicted pod goes first, its replacement (and PVCs) next pass; the terminating one
        // is waited for; the free id no pod holds is reused; the rest are fresh.
        let plan = instance_ids_for_new_pods(4, &free, &BTreeSet::new(), &held, &mut random);
        assert_eq!((plan.delete_first.as_slice(), plan.waiting), (["web-aaaaa".to_string()].as_slice(), 1));
        assert_eq!(plan.ids[0], "ddddd");
        assert_eq!(plan.ids.len(), 2);
        assert!(!["aaaaa", "ccccc", "ddddd"].contains(&plan.ids[1].as_str()));
        // Asked for one: the finished pod's deletion is that one.
        let plan = instance_ids_for_new_pods(1, &free, &BTreeSet::new(), &held, &mut random);
        assert_eq!((plan.ids.len(), plan.delete_first.len()), (0, 1));
        // Once it is gone its id is free again, and taken.
        let plan = instance_ids_for_new_pods(1, &free, &BTreeSet::new(), &BTreeMap::new(), &mut random);
        assert_eq!(plan.ids, ["aaaaa"]);
    }

    #[test]
    fn a_random_id_never_takes_a_finished_pods_name() {
        let held: BTreeMap<String, HeldBy> = [("bbbbb".to_string(), HeldBy::Finished { pod: "web-bbbbb" })].into();
        let mut calls = 0;
        let plan = instance_ids_for_new_pods(1, &BTreeSet::new(), &BTreeSet::new(), &held, || {
            calls += 1;
            if calls == 1 { 0 } else { 12345 }
        });
        assert_ne!(plan.ids[0], "bbbbb");
        assert!(plan.delete_first.is_empty(), "without PVC reuse a finished pod stays");
    }
}
