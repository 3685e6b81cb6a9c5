//! The one apiserver call the webhook makes: adding this replica's CA to the CRD's conversion
//! `caBundle` (and dropping expired ones), against the CRD's resourceVersion so two replicas
//! writing at once cannot drop each other's CA.

use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::certs;

pub struct CaBundle {
    api: Api<CustomResourceDefinition>,
    name: String,
}

impl CaBundle {
    pub fn new(client: kube::Client, name: String) -> Self {
        CaBundle { api: Api::all(client), name }
    }

    /// Makes the bundle hold `ours` and nothing expired; returns the bundle now in place, or
    /// `None` when the CRD does not convert through a webhook (then nothing needs our CA).
    pub async fn ensure(&self, ours: &[&str], now: i64) -> anyhow::Result<Option<String>> {
        let crd = self.api.get(&self.name).await?;
        let Some(webhook) = crd.spec.conversion.as_ref().filter(|c| c.strategy == "Webhook").and_then(|c| c.webhook.as_ref()) else {
            return Ok(None);
        };
        let current = webhook.client_config.as_ref().and_then(|c| c.ca_bundle.as_ref()).map(|b| b.0.clone()).unwrap_or_default();
        let Some(next) = certs::next_bundle(&current, ours, now) else {
            return Ok(Some(String::from_utf8_lossy(&current).into_owned()));
        };
        let version = crd.metadata.resource_version.unwrap_or_default();
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/spec/conversion/webhook/clientConfig/caBundle", "value": base64::engine::general_purpose::STANDARD.encode(&next)},
        ]))?;
        self.api.patch(&self.name, &PatchParams::default(), &Patch::Json::<()>(patch)).await?;
        tracing::info!(crd = %self.name, "conversion webhook: updated the CRD's caBundle");
        Ok(Some(next))
    }
}
