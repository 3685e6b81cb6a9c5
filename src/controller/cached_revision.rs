//! The cached form of a ControllerRevision: what a reconcile reads, with its data held as the
//! bytes revisions are compared by. Decoded, a revision is its pod template as a JSON tree (a
//! map node and a string per field) plus every annotation of its CloneSet, which Kruise copies
//! onto it (`kubectl apply`'s last-applied configuration, the whole CloneSet, among them):
//! kilobytes each, a large share of the heap at scale (e2e/bench/HISTORY.md). And every
//! reconcile encoded each tree again to compare it with the template.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;

use super::owned_store::{Held, Key, OwnerView};
use crate::api::keys;
use crate::core::gojson;

/// A ControllerRevision as the revision cache holds it.
#[derive(Debug)]
pub struct CachedRevision {
    /// The revision without its data and the annotations it copied from its CloneSet: of those,
    /// a reconcile reads only the volumeClaimTemplate hash. (The watch has already dropped its
    /// managedFields, as for every cached kind: `controller::without_managed_fields`.)
    pub object: ControllerRevision,
    /// `data` as Go's encoding/json writes it ([`gojson::encode_value`]): for a revision read
    /// back from the apiserver, the exact bytes Kruise hashed and stored; empty without data.
    /// Shared, so a reconcile's view of its revisions copies none.
    pub data: Arc<[u8]>,
}

impl CachedRevision {
    pub fn new(mut object: ControllerRevision) -> Self {
        let data = object.data.take().map(|d| gojson::encode_value(&d.0)).unwrap_or_default();
        if let Some(annotations) = object.metadata.annotations.as_mut() {
            annotations.retain(|k, _| k == keys::VOLUME_CLAIM_TEMPLATE_HASH);
        }
        Self { object, data: data.into() }
    }
}

impl Held for CachedRevision {
    fn key(&self) -> Key {
        self.object.key()
    }

    fn owners(&self) -> impl Iterator<Item = OwnerView<'_>> {
        Held::owners(&self.object)
    }

    fn resource_version(&self) -> Option<&str> {
        Held::resource_version(&self.object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden_revisions() -> Vec<ControllerRevision> {
        #[derive(serde::Deserialize)]
        struct List {
            items: Vec<ControllerRevision>,
        }
        let text = include_str!("../../tests/golden/kruise-v1.9.0-objects/controllerrevisions-canary.yaml");
        serde_saphyr::from_str::<List>(text).expect("the golden revisions").items
    }

    #[test]
    fn a_cached_revision_keeps_kruise_s_bytes_and_what_a_reconcile_reads() {
        for revision in golden_revisions() {
            let encoded = gojson::encode_value(&revision.data.as_ref().unwrap().0);
            let cached = CachedRevision::new(revision.clone());
            assert_eq!(&*cached.data, encoded.as_slice());
            assert_eq!(cached.object.metadata.name, revision.metadata.name);
            assert_eq!(cached.object.metadata.labels, revision.metadata.labels);
            assert_eq!(cached.object.metadata.owner_references, revision.metadata.owner_references);
            assert_eq!(cached.object.metadata.creation_timestamp, revision.metadata.creation_timestamp);
            assert_eq!(cached.object.revision, revision.revision);
            assert_eq!(Held::key(&cached), Held::key(&revision));
            let annotations = cached.object.metadata.annotations.unwrap();
            assert_eq!(annotations.keys().collect::<Vec<_>>(), [keys::VOLUME_CLAIM_TEMPLATE_HASH]);
            assert_eq!(cached.object.data, None);
        }
    }
}
