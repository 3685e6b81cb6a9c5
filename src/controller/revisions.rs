//! A pass's revisions: the update revision found, reused or created (a hash collision renamed),
//! the current one, history beyond the limit deleted, and what the CloneSet's spec gives its
//! revisions, computed once per generation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt as _;
use serde_json::Value;

use super::Context;
use super::cached_revision::CachedRevision;
use super::error::ReconcileError;
use super::writes::{self};
use crate::api::{CloneSet, keys};
use crate::core::history::{self, RevisionView, UpdateRevisionPlan};
use crate::core::pod_read::PodRead;
use crate::core::sync::{self};
use crate::core::{order, pods as podcore, revision, status};

/// The revisions this reconcile works with.
pub(crate) struct Revisions {
    pub update: String,
    pub current: String,
    pub collision_count: i32,
    /// All revisions of this CloneSet, oldest first, as seen (plus one created now).
    pub sorted: Vec<RevisionView>,
    /// What the CloneSet's template and volumeClaimTemplates give, for this generation.
    pub template: Arc<TemplateRevisionData>,
}

impl Revisions {
    /// The templates `plan`'s new pods are built from. Decoded here, not with the revisions:
    /// only a pass that creates pods reads one.
    pub(super) fn templates_for(&self, plan: &sync::ScalePlan) -> Result<NewPodTemplates<'_>, ReconcileError> {
        let decode = |needed: bool, name: &str| -> Result<Option<PodTemplateSpec>, ReconcileError> {
            match self.sorted.iter().find(|r| r.name == name).filter(|_| needed) {
                Some(r) => template_of(&r.data).map(Some),
                None => Ok(None),
            }
        };
        Ok(NewPodTemplates {
            current: (&self.current, decode(plan.create_current > 0, &self.current)?),
            update: (&self.update, decode(plan.create_update > 0, &self.update)?),
        })
    }
}

/// The current and the update revision's names, with their templates where the scale plan
/// creates pods of them (none for a revision not seen).
pub(super) struct NewPodTemplates<'a> {
    pub(super) current: (&'a str, Option<PodTemplateSpec>),
    pub(super) update: (&'a str, Option<PodTemplateSpec>),
}

/// What a CloneSet's spec gives its revisions, which a pass compares the existing revisions with.
/// It changes only with the spec, so it is computed once per generation
/// ([`TemplateRevisionCache`]): serializing, defaulting and encoding the template as Go does
/// cost a third as much as the decisions themselves on every pass.
#[derive(Debug, PartialEq)]
pub(crate) struct TemplateRevisionData {
    uid: String,
    generation: i64,
    /// The revision data of the template as stored.
    pub stored: Arc<[u8]>,
    /// The revision data of the template as Kruise's webhook would have defaulted it, which
    /// Kruise hashes and builds pods from (`stored` itself under TemplateNoDefaults).
    pub candidate: Arc<[u8]>,
    /// The VCT hash of the current volumeClaimTemplates (what a new revision records).
    pub vct_hash: String,
    /// The VCT hash this operator recorded for them before it hashed like Kruise.
    pub legacy_vct_hash: String,
}

impl TemplateRevisionData {
    /// `template`: `cs.spec.template` as JSON (the cache keeps it as text, see `CompactCloneSet`).
    fn compute(cs: &CloneSet, template: &str, template_no_defaults: bool) -> Result<Self, ReconcileError> {
        let stored: Value = serde_json::from_str(template).map_err(|e| ReconcileError::Revision(e.to_string()))?;
        let stored_data: Arc<[u8]> = revision::revision_data(&stored).into();
        let candidate = if template_no_defaults {
            stored_data.clone()
        } else {
            revision::revision_data(&crate::core::defaults::default_pod_template(&stored)).into()
        };
        Ok(Self {
            uid: cs.metadata.uid.clone().unwrap_or_default(),
            generation: cs.metadata.generation.unwrap_or_default(),
            stored: stored_data,
            candidate,
            vct_hash: vct_hash(cs, template_no_defaults),
            legacy_vct_hash: legacy_vct_hash(cs),
        })
    }
}

/// [`TemplateRevisionData`] by CloneSet key, for the generation it was computed at. The apiserver
/// bumps `metadata.generation` on every change outside metadata and status, so a CloneSet seen at
/// the same uid and generation has the same template. One without a generation (never from the
/// apiserver) is computed every pass. An entry is dropped when its CloneSet leaves the cache.
#[derive(Default)]
pub(crate) struct TemplateRevisionCache(Mutex<HashMap<String, Arc<TemplateRevisionData>>>);

impl TemplateRevisionCache {
    /// `template`: `cs.spec.template` as JSON.
    pub(crate) fn get(
        &self,
        key: &str,
        cs: &CloneSet,
        template: &str,
        template_no_defaults: bool,
    ) -> Result<Arc<TemplateRevisionData>, ReconcileError> {
        let uid = cs.metadata.uid.as_deref().unwrap_or_default();
        let Some(generation) = cs.metadata.generation else {
            return TemplateRevisionData::compute(cs, template, template_no_defaults).map(Arc::new);
        };
        let cached = self.lock().get(key).filter(|d| d.uid == uid && d.generation == generation).cloned();
        if let Some(data) = cached {
            return Ok(data);
        }
        let data = Arc::new(TemplateRevisionData::compute(cs, template, template_no_defaults)?);
        self.lock().insert(key.to_string(), data.clone());
        Ok(data)
    }

    pub(crate) fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TemplateRevisionData>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn owned_revisions(ctx: &Context, cs: &CloneSet) -> Vec<Arc<CachedRevision>> {
    let ns = cs.namespace().unwrap_or_default();
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    let selector = &cs.spec.selector;
    // Its own (from the owner index) and the orphans of its namespace it may adopt; a revision
    // that names it without being controlled by it is also an orphan: keep it once.
    let mut candidates = ctx.stores.revisions.owned_by(&uid);
    let own: BTreeSet<String> = candidates.iter().map(|r| r.object.name_any()).collect();
    candidates.extend(ctx.stores.revisions.orphans_in(&ns).into_iter().filter(|r| !own.contains(&r.object.name_any())));
    candidates
        .into_iter()
        .filter(|r| r.object.namespace().as_deref() == Some(ns.as_str()))
        .filter(|r| {
            let controller = r.object.owner_references().iter().find(|o| o.controller == Some(true));
            controller.is_none_or(|o| o.uid == uid) && order::selector_matches(selector, r.object.labels()) == Some(true)
        })
        .collect()
}

fn view(r: &CachedRevision) -> RevisionView {
    let o = &r.object;
    RevisionView {
        name: o.name_any(),
        revision: o.revision,
        created: o.metadata.creation_timestamp.as_ref().map(|t| t.0),
        data: r.data.clone(),
        vct_hash: o.annotations().get(keys::VOLUME_CLAIM_TEMPLATE_HASH).cloned(),
    }
}

fn template_of(data: &[u8]) -> Result<PodTemplateSpec, ReconcileError> {
    let v = revision::template_from_revision_data(data).map_err(|e| ReconcileError::Revision(e.to_string()))?;
    serde_json::from_value(v).map_err(|e| ReconcileError::Revision(e.to_string()))
}

/// The `kruise.io/cloneset-volumeclaimtemplate-hash` Kruise records on revisions (`""` without
/// VCTs), over the templates as its webhook would have stored them.
fn vct_hash(cs: &CloneSet, template_no_defaults: bool) -> String {
    let stored = serde_json::to_value(&cs.spec.volume_claim_templates).unwrap_or_default();
    let seen = if template_no_defaults { stored } else { crate::core::defaults::default_volume_claim_templates(&stored) };
    revision::volume_claim_templates_hash(&seen)
}

/// The VCT hash this operator recorded before it hashed like Kruise.
fn legacy_vct_hash(cs: &CloneSet) -> String {
    revision::legacy_volume_claim_templates_hash(&serde_json::to_value(&cs.spec.volume_claim_templates).unwrap_or_default())
}

/// Revision name → its recorded VCT hash, for the update's "did the templates change" check. A
/// revision carrying the legacy hash of the current templates had these templates, so it counts as
/// carrying their current hash: an upgrade alone never makes RecreatePodWhenChangeVCTInCloneSetGate
/// recreate pods.
pub(super) fn recorded_vct_hashes(revisions: &[RevisionView], current: &str, legacy_of_current: &str) -> BTreeMap<String, String> {
    revisions
        .iter()
        .filter_map(|r| {
            let recorded = r.vct_hash.as_deref()?;
            let hash = if !legacy_of_current.is_empty() && recorded == legacy_of_current { current } else { recorded };
            Some((r.name.clone(), hash.to_string()))
        })
        .collect()
}

/// Find or create the update revision; pick the current one.
pub(super) async fn sync_revisions(ctx: &Context, key: &str, cs: &CloneSet, template: &str) -> Result<Revisions, ReconcileError> {
    let ns = cs.namespace().unwrap_or_default();
    let cs_name = cs.name_any();
    let existing = owned_revisions(ctx, cs);
    let mut sorted: Vec<RevisionView> = existing.iter().map(|r| view(r)).collect();
    history::sort_revisions(&mut sorted);
    let template = ctx.template_revisions.get(key, cs, template, ctx.config.gates.template_no_defaults)?;
    // Kruise hashes (and builds pods from) the template its webhook defaulted, unless TemplateNoDefaults.
    let data = &template.candidate;
    let mut collision_count = cs.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0);
    let vct = &template.vct_hash;

    let update = match history::plan_update_revision(&sorted, data, &template.stored) {
        UpdateRevisionPlan::Existing { name } => {
            collision_count = revision::collision_count_naming(&cs_name, &name, &[data, &template.stored], collision_count);
            name
        }
        UpdateRevisionPlan::Reuse { name, revision } => {
            writes::bump_revision(ctx, &ns, &name, revision, vct).await?;
            if let Some(r) = sorted.iter_mut().find(|r| r.name == name) {
                r.revision = revision;
                r.vct_hash = Some(vct.clone());
            }
            history::sort_revisions(&mut sorted);
            name
        }
        UpdateRevisionPlan::Create { revision: number } => {
            let hash_label = revision::hash_revision(data, collision_count);
            loop {
                let hash = revision::hash_revision(data, collision_count);
                let name = revision::revision_name(&cs_name, &hash);
                let mut labels = cs.spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
                labels.insert(keys::CONTROLLER_REVISION_HASH_LABEL.into(), hash_label.clone());
                let mut annotations = cs.annotations().clone();
                annotations.insert(keys::VOLUME_CLAIM_TEMPLATE_HASH.into(), vct.clone());
                let rev = ControllerRevision {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        labels: Some(labels),
                        annotations: Some(annotations),
                        owner_references: Some(vec![podcore::controller_ref(cs)]),
                        ..Default::default()
                    },
                    data: None,
                    revision: number,
                };
                match writes::create_revision(ctx, &ns, rev, data).await {
                    Ok(created) => {
                        sorted.push(view(&CachedRevision::new(created)));
                        break name;
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        let api: kube::Api<ControllerRevision> = kube::Api::namespaced(ctx.client.clone(), &ns);
                        let other = api.get(&name).await?;
                        let same_owner = other.owner_references().iter().any(|o| Some(&o.uid) == cs.metadata.uid.as_ref());
                        let other = view(&CachedRevision::new(other));
                        if same_owner && other.data == *data {
                            if !sorted.iter().any(|r| r.name == name) {
                                sorted.push(other);
                            }
                            break name;
                        }
                        // A different revision holds this name: a hash collision.
                        collision_count += 1;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    let status_current = cs.status.as_ref().map(|s| s.current_revision.clone()).unwrap_or_default();
    let current = if sorted.iter().any(|r| r.name == status_current) { status_current } else { update.clone() };
    Ok(Revisions { update, current, collision_count, sorted, template })
}

/// Delete non-live revisions beyond `revisionHistoryLimit`, oldest first.
pub(super) async fn truncate_history(
    ctx: &Context,
    cs: &CloneSet,
    revs: &Revisions,
    active: &[&dyn PodRead],
    current_after: &str,
) -> Result<(), ReconcileError> {
    let mut live: BTreeSet<String> = [revs.update.clone(), revs.current.clone(), current_after.to_string()].into();
    for r in &revs.sorted {
        if active.iter().any(|p| status::pod_revision(p).is_some_and(|h| podcore::hash_matches(h, &r.name))) {
            live.insert(r.name.clone());
        }
    }
    let limit = cs.spec.revision_history_limit.unwrap_or(10);
    let ns = cs.namespace().unwrap_or_default();
    for name in history::revisions_to_truncate(&revs.sorted, &live, limit) {
        writes::delete_revision(ctx, &ns, &name).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::cloneset_cache::CompactCloneSet;
    use crate::controller::reconcile::has_spread_constraints;

    const KEY: &str = "takeover/inplace";

    /// Kruise's own CloneSet, at generation 2, whose update revision kruise-manager v1.9.0 named.
    fn golden_cloneset() -> CloneSet {
        let path = format!("{}/tests/golden/kruise-v1.9.0-objects/cloneset-in-place.yaml", env!("CARGO_MANIFEST_DIR"));
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// The template revision data of `cs` as a reconcile gets it: from the cached (compact) CloneSet.
    fn get(cache: &TemplateRevisionCache, key: &str, cs: &CloneSet) -> Arc<TemplateRevisionData> {
        let cached = CompactCloneSet::new(cs.clone());
        cache.get(key, &cached.cloneset, &cached.template, false).unwrap()
    }

    fn compute(cs: &CloneSet, template_no_defaults: bool) -> TemplateRevisionData {
        TemplateRevisionData::compute(cs, &serde_json::to_string(&cs.spec.template).unwrap(), template_no_defaults).unwrap()
    }

    fn revision_name_of(cs: &CloneSet, data: &TemplateRevisionData) -> String {
        revision::revision_name(&cs.name_any(), &revision::hash_revision(&data.candidate, 0))
    }

    #[test]
    fn a_cloneset_s_template_revision_data_is_computed_once_per_generation() {
        let cache = TemplateRevisionCache::default();
        let mut cs = golden_cloneset();
        let first = get(&cache, KEY, &cs);
        assert_eq!(revision_name_of(&cs, &first), "inplace-b55cd4488", "the revision Kruise's manager made of this template");
        assert!(Arc::ptr_eq(&first, &get(&cache, KEY, &cs)), "the same generation again: not computed again");
        // A status write or a relist gives a new object of the same generation.
        cs.metadata.resource_version = Some("9999".into());
        cs.status.as_mut().unwrap().ready_replicas = 0;
        assert!(Arc::ptr_eq(&first, &get(&cache, KEY, &cs)));

        cs.spec.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.27".into());
        cs.metadata.generation = Some(3);
        let changed = get(&cache, KEY, &cs);
        assert_ne!(changed.candidate, first.candidate, "a new generation's template is encoded anew");
        assert_eq!(*changed, compute(&cs, false));
        assert!(Arc::ptr_eq(&changed, &get(&cache, KEY, &cs)));
    }

    #[test]
    fn a_recreated_or_forgotten_cloneset_s_template_revision_data_is_computed_again() {
        let cache = TemplateRevisionCache::default();
        let cs = golden_cloneset();
        let first = get(&cache, KEY, &cs);

        let mut recreated = cs.clone();
        recreated.metadata.uid = Some("another-uid".into());
        recreated.spec.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.27".into());
        let second = get(&cache, KEY, &recreated);
        assert_ne!(second.candidate, first.candidate, "same name and generation, another uid: its own template");

        cache.forget(KEY);
        assert!(!Arc::ptr_eq(&second, &get(&cache, KEY, &recreated)), "forgotten: computed again");

        let mut without_generation = cs;
        without_generation.metadata.generation = None;
        let a = get(&cache, "other/one", &without_generation);
        assert!(!Arc::ptr_eq(&a, &get(&cache, "other/one", &without_generation)), "never cached");
    }

    #[test]
    fn without_defaults_the_candidate_is_the_stored_template() {
        let cs = golden_cloneset();
        let no_defaults = compute(&cs, true);
        assert!(Arc::ptr_eq(&no_defaults.stored, &no_defaults.candidate));
        let defaulted = compute(&cs, false);
        assert_eq!(defaulted.stored, no_defaults.stored);
    }

    /// The cache keeps a CloneSet's template as text; its revision data must be the bytes the
    /// decoded template gave (what Kruise hashes), for a template using much of the pod spec.
    #[test]
    fn the_cached_template_text_gives_the_revision_data_of_the_decoded_template() {
        let mut cs = golden_cloneset();
        let rich = serde_json::json!({
            "metadata": {"labels": {"app": "inplace", "tier": "web"}, "annotations": {"a": "b"}},
            "spec": {
                "containers": [{"name": "main", "image": "nginx:1.26", "ports": [{"containerPort": 80}],
                                "env": [{"name": "X", "value": "1"}, {"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                                "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 5},
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                               {"name": "sidecar", "image": "busybox", "command": ["sleep", "3600"]}],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                                               "labelSelector": {"matchLabels": {"app": "inplace"}}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "terminationGracePeriodSeconds": 5,
            },
        });
        cs.spec.template = serde_json::from_value(rich).unwrap();
        for no_defaults in [false, true] {
            let stored = serde_json::to_value(&cs.spec.template).unwrap();
            let expected = if no_defaults { stored.clone() } else { crate::core::defaults::default_pod_template(&stored) };
            let cached = CompactCloneSet::new(cs.clone());
            let data = TemplateRevisionCache::default().get(KEY, &cached.cloneset, &cached.template, no_defaults).unwrap();
            assert_eq!(&*data.stored, revision::revision_data(&stored).as_slice());
            assert_eq!(&*data.candidate, revision::revision_data(&expected).as_slice());
        }
        // What a pass reads of the template besides: its metadata and spread constraints.
        let cached = CompactCloneSet::new(cs.clone());
        assert_eq!(cached.cloneset.spec.template.metadata, cs.spec.template.metadata);
        assert!(has_spread_constraints(&cached.cloneset));
        let spread = |c: &CloneSet| crate::core::order::pod_spread_constraints(c.spec.template.spec.as_ref());
        assert_eq!(spread(&cached.cloneset), spread(&cs));
        assert!(cached.cloneset.spec.template.spec.as_ref().unwrap().containers.is_empty(), "the rest is kept as text only");
        assert!(!has_spread_constraints(&CompactCloneSet::new(golden_cloneset()).cloneset));
    }
}
