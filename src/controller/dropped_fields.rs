//! The Warning event that names the pod-template fields a CloneSet's revisions and pods do not
//! carry (`core::gojson::dropped_fields`): once for each update revision and set of fields, not
//! on every pass. Kruise drops the same fields without a word; it has no such event.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::runtime::events::EventType;

use super::Context;
use crate::api::CloneSet;

/// The event's reason.
pub(crate) const TEMPLATE_FIELDS_DROPPED: &str = "TemplateFieldsDropped";

/// Per CloneSet key, what it was last warned about. An entry goes with its CloneSet, or when its
/// template no longer drops anything; the operator warns again after it restarts.
#[derive(Default)]
pub(crate) struct DroppedFieldWarnings(Mutex<HashMap<String, Warned>>);

struct Warned {
    uid: String,
    revision: String,
    fields: Box<[String]>,
}

impl DroppedFieldWarnings {
    /// Whether `fields`, dropped from the template of the CloneSet `key` (`uid`) whose update
    /// revision is `revision`, are news: not what that CloneSet was last warned about at that
    /// revision. Remembers them.
    fn is_news(&self, key: &str, uid: &str, revision: &str, fields: &[String]) -> bool {
        let mut warned = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if fields.is_empty() {
            warned.remove(key);
            return false;
        }
        if warned.get(key).is_some_and(|w| w.uid == uid && w.revision == revision && *w.fields == *fields) {
            return false;
        }
        warned.insert(key.to_string(), Warned { uid: uid.into(), revision: revision.into(), fields: fields.into() });
        true
    }

    pub(crate) fn forget(&self, key: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// Records the Warning event when the fields `cs` drops from its template are news (see
/// [`DroppedFieldWarnings::is_news`]).
pub(crate) async fn warn(ctx: &Context, key: &str, cs: &CloneSet, fields: &[String], revision: &str) {
    let uid = cs.metadata.uid.as_deref().unwrap_or_default();
    if ctx.dropped_field_warnings.is_news(key, uid, revision, fields) {
        ctx.events.record(cs, EventType::Warning, TEMPLATE_FIELDS_DROPPED, note(fields)).await;
    }
}

/// The event's message: why, then the fields (a note too long for the Events API loses its tail).
fn note(fields: &[String]) -> String {
    format!(
        "pod template fields not carried to revisions or pods, as Kruise v1.9.0 reads templates with Kubernetes 1.32's fields \
         (a newer or misspelt field is dropped): {}",
        fields.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_cloneset_is_warned_once_per_revision_and_set_of_fields() {
        let w = DroppedFieldWarnings::default();
        let one = fields(&["spec.template.spec.hostnameOverride"]);
        let two = fields(&["spec.template.spec.hostnameOverride", "spec.template.spec.containers[0].restartPolicyRules"]);
        assert!(w.is_news("ns/web", "u1", "web-1", &one), "first seen");
        assert!(!w.is_news("ns/web", "u1", "web-1", &one), "the next pass, nothing new");
        assert!(w.is_news("ns/web", "u1", "web-1", &two), "another field, same revision");
        assert!(w.is_news("ns/web", "u1", "web-2", &two), "a new revision keeps the fields");
        assert!(w.is_news("ns/web", "u2", "web-2", &two), "recreated under the same name");
        assert!(w.is_news("ns/other", "u3", "other-1", &one), "each CloneSet on its own");

        assert!(!w.is_news("ns/web", "u2", "web-2", &[]), "nothing dropped: no event");
        assert!(w.is_news("ns/web", "u2", "web-2", &two), "and the fields back: news again");
        w.forget("ns/web");
        assert!(w.is_news("ns/web", "u2", "web-2", &two), "forgotten with its CloneSet");
    }

    #[test]
    fn the_note_names_every_field() {
        let n = note(&fields(&["spec.template.spec.hostnameOverride", "spec.template.spec.hostnamee"]));
        assert!(n.ends_with(": spec.template.spec.hostnameOverride, spec.template.spec.hostnamee"), "{n}");
        assert!(n.contains("Kubernetes 1.32"), "{n}");
    }
}
