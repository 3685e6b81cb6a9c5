//! ControllerRevision history: which revision is the update revision, when an older
//! one is reused (rollback), and which non-live revisions are truncated.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

/// What the planner needs to know about one existing revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RevisionView {
    pub name: String,
    pub revision: i64,
    pub created: Option<Timestamp>,
    /// The revision's data re-encoded the way Go encodes it, so byte equality is meaningful
    /// whether Kruise or we wrote it. Shared with the revision cache: a pass copies no data.
    pub data: Arc<[u8]>,
    /// Its `kruise.io/cloneset-volumeclaimtemplate-hash` annotation, if it has one.
    pub vct_hash: Option<String>,
}

/// Kruise's history order: by `.revision`, then creation time, then name.
pub(crate) fn sort_revisions(revisions: &mut [RevisionView]) {
    revisions.sort_by(|a, b| (a.revision, a.created, &a.name).cmp(&(b.revision, b.created, &b.name)));
}

/// How to get the update revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UpdateRevisionPlan {
    /// The newest revision already has this template: nothing to write.
    Existing { name: String },
    /// An older revision has this template (a rollback): bump its `.revision` to the next number.
    Reuse { name: String, revision: i64 },
    /// No revision has this template: create one with the next number.
    Create { revision: i64 },
}

/// Chooses the update revision for `candidate_data` (the defaulted template's revision data)
/// among `sorted` (oldest first). `stored_data` is the revision data of the template as stored:
/// Kruise's webhook defaults a template only when it is created or changed, so a newest revision
/// made from the stored template exactly (without defaults: by `TemplateNoDefaults`, by a version
/// of this operator that did not default, or by Kruise's manager over a template this operator
/// stored) is the update revision, as it is for Kruise's controller, which hashes the stored
/// template. Only when the newest revision has neither is an older one rolled back to: else a
/// CloneSet Kruise's manager ran over after this operator would be rolled back to this operator's
/// defaulted revision, every pod recreated (as was seen with kruise-manager v1.9.0).
pub(crate) fn plan_update_revision(sorted: &[RevisionView], candidate_data: &[u8], stored_data: &[u8]) -> UpdateRevisionPlan {
    let next = sorted.last().map_or(1, |r| r.revision + 1);
    if let Some(newest) = sorted.last().filter(|r| *r.data == *candidate_data || *r.data == *stored_data) {
        return UpdateRevisionPlan::Existing { name: newest.name.clone() };
    }
    match sorted.iter().rposition(|r| *r.data == *candidate_data) {
        Some(i) => UpdateRevisionPlan::Reuse { name: sorted[i].name.clone(), revision: next },
        None => UpdateRevisionPlan::Create { revision: next },
    }
}

/// Non-live revisions to delete, oldest first, keeping `limit` of them.
pub(crate) fn revisions_to_truncate(sorted: &[RevisionView], live: &BTreeSet<String>, limit: i32) -> Vec<String> {
    let history: Vec<&RevisionView> = sorted.iter().filter(|r| !live.contains(&r.name)).collect();
    let excess = history.len().saturating_sub(limit.max(0) as usize);
    history.into_iter().take(excess).map(|r| r.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(name: &str, revision: i64, data: &str) -> RevisionView {
        RevisionView { name: name.into(), revision, created: None, data: data.as_bytes().into(), vct_hash: None }
    }

    #[test]
    fn newest_equal_revision_is_used_as_is() {
        // Kruise TestGetActiveRevisions: "equal immediately-prior revision is reused".
        let revs = [rev("a", 1, "x"), rev("b", 2, "y")];
        assert_eq!(plan_update_revision(&revs, b"y", b"y"), UpdateRevisionPlan::Existing { name: "b".into() });
    }

    #[test]
    fn a_newest_revision_kruise_made_from_the_stored_template_is_kept_not_rolled_back() {
        // Made by this operator from the defaulted template ("defaulted"), then by Kruise's
        // manager from the template as stored ("stored"): the pods are at the newest, and
        // Kruise's controller would keep it. Rolling back to "a" would recreate every pod.
        let revs = [rev("a", 1, "defaulted"), rev("b", 2, "stored")];
        assert_eq!(plan_update_revision(&revs, b"defaulted", b"stored"), UpdateRevisionPlan::Existing { name: "b".into() });
        // A template changed since is a new revision, or a rollback where one matches.
        assert_eq!(plan_update_revision(&revs, b"new defaulted", b"new stored"), UpdateRevisionPlan::Create { revision: 3 });
        let revs = [rev("a", 1, "defaulted"), rev("b", 2, "stored"), rev("c", 3, "other")];
        assert_eq!(plan_update_revision(&revs, b"defaulted", b"stored"), UpdateRevisionPlan::Reuse { name: "a".into(), revision: 4 });
    }

    #[test]
    fn an_older_equal_revision_is_bumped_on_rollback() {
        let revs = [rev("a", 1, "x"), rev("b", 2, "y"), rev("c", 3, "z")];
        assert_eq!(plan_update_revision(&revs, b"x", b"x"), UpdateRevisionPlan::Reuse { name: "a".into(), revision: 4 });
    }

    #[test]
    fn a_new_template_creates_the_next_revision() {
        // Kruise TestGetActiveRevisions: "a new revision is created when none is equal" and "empty list".
        assert_eq!(plan_update_revision(&[], b"x", b"x"), UpdateRevisionPlan::Create { revision: 1 });
        assert_eq!(plan_update_revision(&[rev("a", 7, "x")], b"q", b"q"), UpdateRevisionPlan::Create { revision: 8 });
    }

    #[test]
    fn kruise_defaults_a_template_only_when_it_changes() {
        // The newest revision was made from the template as stored, without defaults: unchanged
        // since, so no new revision (and no rollout) just because defaulting is on now.
        let revs = [rev("old", 1, "D"), rev("undefaulted", 2, "s")];
        assert_eq!(plan_update_revision(&revs, b"s+defaults", b"s"), UpdateRevisionPlan::Existing { name: "undefaulted".into() });
        // An older undefaulted revision is not the stored template "unchanged": a change back to
        // it is a change, and gets the defaulted revision.
        let revs = [rev("undefaulted", 1, "s"), rev("newer", 2, "t")];
        assert_eq!(plan_update_revision(&revs, b"s+defaults", b"s"), UpdateRevisionPlan::Create { revision: 3 });
        // The newest, made from the stored template, is kept even where an older revision has the
        // defaulted one: Kruise's controller, which hashes the stored template, keeps it too.
        let revs = [rev("defaulted", 1, "s+defaults"), rev("undefaulted", 2, "s")];
        assert_eq!(plan_update_revision(&revs, b"s+defaults", b"s"), UpdateRevisionPlan::Existing { name: "undefaulted".into() });
        // Once the newest has neither, the defaulted one is rolled back to.
        let revs = [rev("defaulted", 1, "s+defaults"), rev("undefaulted", 2, "s"), rev("newer", 3, "t")];
        assert_eq!(plan_update_revision(&revs, b"s+defaults", b"s"), UpdateRevisionPlan::Reuse { name: "defaulted".into(), revision: 4 });
    }

    #[test]
    fn history_keeps_live_revisions_and_the_newest_non_live_ones() {
        let mut revs = vec![rev("e", 5, ""), rev("a", 1, ""), rev("c", 3, ""), rev("b", 2, ""), rev("d", 4, "")];
        sort_revisions(&mut revs);
        let live: BTreeSet<String> = ["a".to_string(), "e".to_string()].into();
        assert_eq!(revisions_to_truncate(&revs, &live, 1), ["b", "c"]);
        assert_eq!(revisions_to_truncate(&revs, &live, 10), Vec::<String>::new());
        assert_eq!(revisions_to_truncate(&revs, &live, 0), ["b", "c", "d"]);
    }

    #[test]
    fn order_is_revision_then_creation_then_name() {
        let t1: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t2: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let mut revs = vec![
            RevisionView { name: "z".into(), revision: 1, created: Some(t2), data: Arc::from([]), vct_hash: None },
            RevisionView { name: "y".into(), revision: 1, created: Some(t1), data: Arc::from([]), vct_hash: None },
            RevisionView { name: "x".into(), revision: 2, created: Some(t1), data: Arc::from([]), vct_hash: None },
        ];
        sort_revisions(&mut revs);
        let names: Vec<&str> = revs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["y", "z", "x"]);
    }
}
