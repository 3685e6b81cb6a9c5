//! `cloneset-operator migrate --to-kruise`: what each CloneSet needs before Kruise's manager runs
//! over it again, so that its manager keeps the update revision and restarts no pod.
//!
//! Kruise's webhook stores a CloneSet's pod template with Kruise's defaults filled in, and Kruise's
//! controller hashes the template *as stored*. This operator stores templates as written (no
//! mutating webhook) and makes its revisions from the defaulted template, as Kruise's pair does
//! together. Handed back as they are, Kruise's controller hashes the undefaulted template, finds no
//! equal revision, makes a new one and recreates every pod (the defaults are pod-spec fields, not
//! updated in place): seen with kruise-manager v1.9.0 over 501 CloneSets. Writing back the template
//! Kruise's webhook would have stored makes its hash the update revision's again.

use serde_json::Value;

use crate::core::{defaults, revision};

/// What one CloneSet needs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TemplatePlan {
    /// The stored template already hashes to the update revision (Kruise made the revision, or
    /// `TemplateNoDefaults` was on, or the template was stored with defaults): leave it.
    Keep,
    /// Store this template (Kruise's webhook's defaulting of the stored one). `keeps_revision`:
    /// whether it hashes to the update revision; when not, the template changed after the last
    /// revision was made and Kruise makes a new one either way, from the same template this
    /// operator would have used.
    Write { template: Value, keeps_revision: bool },
    /// Stored with defaults already, but not the update revision's template: it changed after the
    /// revision was made (or there is none yet), and Kruise will make a new revision, as this
    /// operator would have.
    NewRevisionAnyway,
}

/// Decides for a CloneSet with `stored` as its `spec.template` (as read from the apiserver) and
/// `update_revision_data` the data of its `status.updateRevision` (Go-encoded; `None` when it has
/// no update revision yet or the revision is gone).
pub(crate) fn plan_template(stored: &Value, update_revision_data: Option<&[u8]>) -> TemplatePlan {
    let stored_data = revision::revision_data(stored);
    if update_revision_data == Some(stored_data.as_slice()) {
        return TemplatePlan::Keep;
    }
    let defaulted = defaults::default_pod_template(stored);
    let defaulted_data = revision::revision_data(&defaulted);
    if defaulted_data == stored_data {
        return TemplatePlan::NewRevisionAnyway;
    }
    let keeps_revision = update_revision_data == Some(defaulted_data.as_slice());
    TemplatePlan::Write { template: defaulted, keeps_revision }
}

/// The JSON patch that stores `template`, refused by the apiserver if the CloneSet changed since
/// it was read at `resource_version` (a user's edit in between is never overwritten).
pub(crate) fn template_patch(resource_version: &str, template: &Value) -> json_patch::Patch {
    serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        {"op": "replace", "path": "/spec/template", "value": template},
    ]))
    .expect("a well-formed JSON patch")
}

/// What Kruise's manager will do with a CloneSet's update revision once its template is as
/// Kruise's webhook stores it: `found` whether the revision was read, `kept` whether that template
/// hashes to it.
pub(crate) fn revision_outcome(update_revision: Option<&str>, found: bool, kept: bool) -> String {
    match update_revision {
        Some(r) if kept => format!("Kruise's manager keeps update revision {r}"),
        Some(r) if found => format!(
            "warning: its template changed after update revision {r} was made; Kruise's manager will make a new revision \
             and roll, as this operator would have"
        ),
        Some(r) => format!("its update revision {r} is gone: Kruise's manager will make one"),
        None => "no update revision yet: Kruise's manager will make one".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A template as written in a manifest: nothing Kruise's webhook fills in.
    fn written() -> Value {
        json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "main", "image": "registry.local/web:v1",
                                     "ports": [{"containerPort": 8080}]}]}
        })
    }

    #[test]
    fn a_template_stored_as_written_gets_kruises_defaults_and_keeps_the_revision_made_from_them() {
        let stored = written();
        let update = revision::revision_data(&defaults::default_pod_template(&stored));
        let TemplatePlan::Write { template, keeps_revision } = plan_template(&stored, Some(&update)) else {
            panic!("a template stored without defaults is written back")
        };
        assert!(keeps_revision);
        // What Kruise's controller hashes after the write is the update revision's data.
        assert_eq!(revision::revision_data(&template), update);
        let spec = &template["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "Always", "Kruise's default, for in-place updates");
        assert_eq!(spec["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(template["metadata"]["labels"]["app"], "web", "what the user wrote stays");
        // Run again over what it wrote: nothing left to do.
        assert_eq!(plan_template(&template, Some(&update)), TemplatePlan::Keep);
    }

    #[test]
    fn a_revision_kruise_made_from_the_stored_template_is_left_alone() {
        // Kruise's manager already ran over it (or TemplateNoDefaults): writing defaults now
        // would be what makes it roll.
        let stored = written();
        assert_eq!(plan_template(&stored, Some(&revision::revision_data(&stored))), TemplatePlan::Keep);
    }

    #[test]
    fn a_template_changed_after_its_last_revision_still_gets_the_defaults_kruise_would_store() {
        let mut stored = written();
        let old = revision::revision_data(&defaults::default_pod_template(&stored));
        stored["spec"]["containers"][0]["image"] = json!("registry.local/web:v2");
        match plan_template(&stored, Some(&old)) {
            TemplatePlan::Write { template, keeps_revision } => {
                assert!(!keeps_revision);
                assert_eq!(template["spec"]["containers"][0]["image"], "registry.local/web:v2");
                assert_eq!(template["spec"]["dnsPolicy"], "ClusterFirst");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(plan_template(&stored, None), TemplatePlan::Write { keeps_revision: false, .. }), "no revision yet");
        let defaulted = defaults::default_pod_template(&stored);
        assert_eq!(plan_template(&defaulted, Some(&old)), TemplatePlan::NewRevisionAnyway);
        assert_eq!(plan_template(&defaulted, None), TemplatePlan::NewRevisionAnyway, "defaulted, no revision yet: nothing to write");
    }

    #[test]
    fn the_outcome_names_the_revision_kruise_keeps_or_why_it_makes_one() {
        assert_eq!(revision_outcome(Some("web-1"), true, true), "Kruise's manager keeps update revision web-1");
        assert!(revision_outcome(Some("web-1"), true, false).starts_with("warning: its template changed after update revision web-1"));
        assert_eq!(revision_outcome(Some("web-1"), false, false), "its update revision web-1 is gone: Kruise's manager will make one");
        assert_eq!(revision_outcome(None, false, false), "no update revision yet: Kruise's manager will make one");
    }

    #[test]
    fn the_patch_tests_the_resource_version_it_read() {
        let patch = serde_json::to_value(template_patch("42", &written())).unwrap();
        assert_eq!(patch[0], json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"}));
        assert_eq!(patch[1]["op"], "replace");
        assert_eq!(patch[1]["path"], "/spec/template");
        assert_eq!(patch[1]["value"], written());
    }
}
