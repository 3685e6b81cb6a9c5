//! Taking over a CRD that stores CloneSets as another version: Kruise 2.0 serves
//! `apps.kruise.io/v1beta1`, stores it, and converts through its manager's webhook, which stops
//! with its manager. Once Kruise's Deployment is at zero, `migrate` (1) points the conversion at
//! this operator's webhook at once, not waiting for Kruise's Lease to lapse, trusting the CAs its
//! replicas published on the CRD (they serve before the switch, so the switch is one write, and
//! conversions work whether a stopping Kruise replica puts its own settings back or not),
//! (2) makes v1alpha1 the storage version, (3) rewrites every
//! CloneSet so it is stored as v1alpha1, and (4) sets `status.storedVersions` to v1alpha1 alone,
//! after which a CRD serving v1alpha1 only (or Kruise 1.x's) is valid again.
//!
//! The decisions, pure; `apply.rs` does the IO.

use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{CustomResourceDefinition, WebhookClientConfig};
use serde_json::{Value, json};

use super::MigrateError;
use crate::api::crd::{CONVERSION_PATH, STORAGE_VERSION};
use crate::webhook::ca_bundle::PUBLISHED_CAS;

/// Where this operator's webhook takes conversions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConversionTarget {
    /// The chart's webhook Service (port 443, path `/convert`).
    Service { namespace: String, name: String },
    /// A URL (a webhook outside the cluster, or a test's local process).
    Url(String),
}

impl std::fmt::Display for ConversionTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConversionTarget::Service { namespace, name } => write!(f, "Service {namespace}/{name}"),
            ConversionTarget::Url(url) => write!(f, "{url}"),
        }
    }
}

impl ConversionTarget {
    /// Whether `config` already sends conversions here.
    pub(crate) fn is(&self, config: &WebhookClientConfig) -> bool {
        match self {
            ConversionTarget::Service { namespace, name } => {
                config.url.is_none() && config.service.as_ref().is_some_and(|s| s.namespace == *namespace && s.name == *name)
            }
            ConversionTarget::Url(url) => config.url.as_deref() == Some(url.as_str()),
        }
    }

    /// The clientConfig sending conversions here, trusting `ca_bundle` (PEM).
    pub(crate) fn client_config(&self, ca_bundle: &str) -> Value {
        let ca = base64::engine::general_purpose::STANDARD.encode(ca_bundle);
        match self {
            ConversionTarget::Service { namespace, name } => json!({
                "service": {"namespace": namespace, "name": name, "path": CONVERSION_PATH, "port": 443},
                "caBundle": ca,
            }),
            ConversionTarget::Url(url) => json!({"url": url, "caBundle": ca}),
        }
    }
}

/// What the CRD needs before this operator can run over it; all `None`/false when it stores
/// v1alpha1 only.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TakeOver {
    /// The JSON patch pointing the conversion at this operator, when it points elsewhere.
    pub conversion: Option<json_patch::Patch>,
    /// Whence conversions went before (for the command's words).
    pub previous: String,
    /// The JSON patch making v1alpha1 the storage version, when it is not.
    pub storage: Option<json_patch::Patch>,
    /// The other versions objects may still be stored in, as `apps.kruise.io/<v>`: every
    /// CloneSet is rewritten, then `status.storedVersions` is set to v1alpha1 alone.
    pub stored_elsewhere: Option<String>,
}

/// Decides for `crd`, this operator's webhook being at `target`.
pub(crate) fn plan(crd: &CustomResourceDefinition, target: &ConversionTarget) -> Result<TakeOver, MigrateError> {
    let Some(stored) = other_stored_versions(crd) else { return Ok(TakeOver::default()) };
    let version = crd.metadata.resource_version.clone().unwrap_or_default();
    let webhook = crd.spec.conversion.as_ref().filter(|c| c.strategy == "Webhook").and_then(|c| c.webhook.as_ref());
    let Some(webhook) = webhook else { return Err(MigrateError::StoredAsAnotherVersion { stored }) };
    let config = webhook.client_config.clone().unwrap_or_default();
    let previous = crate::webhook::ca_bundle::target_host(&config).unwrap_or_else(|| "nowhere".into());
    let conversion = if target.is(&config) {
        None
    } else {
        let published = crd.metadata.annotations.as_ref().and_then(|a| a.get(PUBLISHED_CAS)).filter(|p| !p.trim().is_empty());
        let Some(published) = published else { return Err(MigrateError::NoPublishedCa { target: target.to_string() }) };
        Some(patch(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "replace", "path": "/spec/conversion/webhook/clientConfig", "value": target.client_config(published)},
        ])))
    };
    let storage_version = crd.spec.versions.iter().find(|v| v.storage).map(|v| v.name.as_str());
    let storage = (storage_version != Some(STORAGE_VERSION)).then(|| {
        let mut ops = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
        for (i, v) in crd.spec.versions.iter().enumerate() {
            let ours = v.name == STORAGE_VERSION;
            ops.push(json!({"op": "replace", "path": format!("/spec/versions/{i}/storage"), "value": ours}));
            if ours {
                ops.push(json!({"op": "replace", "path": format!("/spec/versions/{i}/served"), "value": true}));
            }
        }
        patch(Value::Array(ops))
    });
    Ok(TakeOver { conversion, previous, storage, stored_elsewhere: Some(stored) })
}

/// The versions other than v1alpha1 that objects of `crd` are, or may still be, stored in (its
/// storage version and `status.storedVersions`), as `apps.kruise.io/<v>`, comma-separated; `None`
/// when there are none. Such a CRD converts through Kruise's webhook, which stops with its
/// manager, and its objects would need rewriting first.
pub(crate) fn other_stored_versions(crd: &CustomResourceDefinition) -> Option<String> {
    let storage = crd.spec.versions.iter().filter(|v| v.storage).map(|v| v.name.as_str());
    let stored = crd.status.iter().flat_map(|s| s.stored_versions.iter().flatten()).map(String::as_str);
    let mut others: Vec<&str> = storage.chain(stored).filter(|v| *v != STORAGE_VERSION).collect();
    others.sort_unstable();
    others.dedup();
    (!others.is_empty()).then(|| others.iter().map(|v| format!("{}/{v}", crate::api::conversion::GROUP)).collect::<Vec<_>>().join(", "))
}

/// The status patch that leaves v1alpha1 as the only stored version (once every object is).
pub(crate) fn stored_versions_patch() -> Value {
    json!({"status": {"storedVersions": [STORAGE_VERSION]}})
}

fn patch(ops: Value) -> json_patch::Patch {
    serde_json::from_value(ops).expect("a well-formed JSON patch")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CRD as Kruise 2.0 leaves it: v1beta1 stored, conversion to its manager's Service.
    fn kruise_2(published: Option<&str>) -> CustomResourceDefinition {
        let mut crd = crate::api::crd::crd_with_v1beta1();
        crd.spec.versions.iter_mut().for_each(|v| v.storage = v.name == "v1beta1");
        let webhook = crd.spec.conversion.as_mut().unwrap().webhook.as_mut().unwrap();
        webhook.client_config = Some(
            serde_json::from_value(
                json!({"service": {"namespace": "kruise-system", "name": "kruise-webhook-service", "path": "/convert", "port": 443},
                                          "caBundle": "S1JVSVNF"}),
            )
            .unwrap(),
        );
        crd.metadata.resource_version = Some("7".into());
        if let Some(p) = published {
            crd.metadata.annotations = Some([(PUBLISHED_CAS.to_string(), p.to_string())].into());
        }
        crd.status = Some(serde_json::from_value(json!({"storedVersions": ["v1alpha1", "v1beta1"]})).unwrap());
        crd
    }

    fn ours() -> ConversionTarget {
        ConversionTarget::Service { namespace: "cloneset-system".into(), name: "cloneset-operator-webhook".into() }
    }

    fn apply(crd: &CustomResourceDefinition, p: &json_patch::Patch) -> Value {
        let mut doc = serde_json::to_value(crd).unwrap();
        json_patch::patch(&mut doc, p).unwrap();
        doc
    }

    #[test]
    fn a_kruise_2_crd_gets_our_conversion_trusting_the_published_cas_then_v1alpha1_storage() {
        let crd = kruise_2(Some("PEM"));
        let plan = plan(&crd, &ours()).unwrap();
        assert_eq!(plan.previous, "kruise-webhook-service.kruise-system.svc");
        assert_eq!(plan.stored_elsewhere.as_deref(), Some("apps.kruise.io/v1beta1"));
        let switched = apply(&crd, plan.conversion.as_ref().unwrap());
        let config = &switched["spec"]["conversion"]["webhook"]["clientConfig"];
        assert_eq!(
            config["service"],
            json!({"namespace": "cloneset-system", "name": "cloneset-operator-webhook", "path": "/convert", "port": 443})
        );
        assert_eq!(config["caBundle"], base64::engine::general_purpose::STANDARD.encode("PEM"));
        assert_eq!(
            switched["spec"]["conversion"]["webhook"]["conversionReviewVersions"],
            json!(["v1"]),
            "the rest of the conversion stays"
        );
        let stored = apply(&crd, plan.storage.as_ref().unwrap());
        let storage: Vec<(&str, bool)> =
            stored["spec"]["versions"].as_array().unwrap().iter().map(|v| (v["name"].as_str().unwrap(), v["storage"] == true)).collect();
        assert_eq!(storage, [("v1alpha1", true), ("v1beta1", false)]);
        assert_eq!(stored_versions_patch()["status"]["storedVersions"], json!(["v1alpha1"]));
    }

    #[test]
    fn a_crd_storing_v1beta1_now_or_before_has_other_stored_versions() {
        let crd = |storage: &str, stored: &[&str]| -> CustomResourceDefinition {
            let mut crd = crate::api::crd::crd_with_v1beta1();
            crd.spec.versions.iter_mut().for_each(|v| v.storage = v.name == storage);
            crd.status = Some(serde_json::from_value(json!({"storedVersions": stored})).unwrap());
            crd
        };
        assert_eq!(other_stored_versions(&crate::api::crd::crd()), None, "our CRD, before any status");
        assert_eq!(other_stored_versions(&crd("v1alpha1", &["v1alpha1"])), None);
        assert_eq!(other_stored_versions(&crd("v1beta1", &["v1alpha1", "v1beta1"])).as_deref(), Some("apps.kruise.io/v1beta1"));
        // Back on v1alpha1 storage, but objects may still be stored as v1beta1.
        assert_eq!(other_stored_versions(&crd("v1alpha1", &["v1alpha1", "v1beta1"])).as_deref(), Some("apps.kruise.io/v1beta1"));
    }

    #[test]
    fn nothing_to_take_over_from_a_crd_storing_v1alpha1_only() {
        assert_eq!(plan(&crate::api::crd::crd(), &ours()).unwrap(), TakeOver::default());
        assert_eq!(plan(&crate::api::crd::crd_with_v1beta1(), &ours()).unwrap(), TakeOver::default());
    }

    #[test]
    fn a_second_run_after_the_switch_only_finishes_the_storage() {
        let mut crd = kruise_2(None);
        let webhook = crd.spec.conversion.as_mut().unwrap().webhook.as_mut().unwrap();
        webhook.client_config = Some(serde_json::from_value(ours().client_config("PEM")).unwrap());
        let plan = plan(&crd, &ours()).unwrap();
        assert!(plan.conversion.is_none() && plan.storage.is_some() && plan.stored_elsewhere.is_some());
        // Storage already switched, objects not all rewritten yet.
        crd.spec.versions.iter_mut().for_each(|v| v.storage = v.name == "v1alpha1");
        let plan = super::plan(&crd, &ours()).unwrap();
        assert!(plan.conversion.is_none() && plan.storage.is_none() && plan.stored_elsewhere.is_some());
    }

    #[test]
    fn no_switch_without_a_replica_ready_to_convert_or_without_a_webhook() {
        assert!(matches!(plan(&kruise_2(None), &ours()), Err(MigrateError::NoPublishedCa { .. })));
        assert!(matches!(plan(&kruise_2(Some("  ")), &ours()), Err(MigrateError::NoPublishedCa { .. })));
        let mut crd = kruise_2(Some("PEM"));
        crd.spec.conversion = Some(serde_json::from_value(json!({"strategy": "None"})).unwrap());
        assert!(matches!(plan(&crd, &ours()), Err(MigrateError::StoredAsAnotherVersion { .. })));
    }

    #[test]
    fn a_url_target_is_matched_and_written_as_a_url() {
        let url = ConversionTarget::Url("https://127.0.0.1:9876/convert".into());
        let config: WebhookClientConfig = serde_json::from_value(url.client_config("PEM")).unwrap();
        assert!(url.is(&config) && !ours().is(&config));
        assert!(!url.is(&serde_json::from_value(ours().client_config("PEM")).unwrap()));
    }
}
