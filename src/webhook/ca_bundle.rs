//! The one apiserver object the webhook writes: the CloneSet CRD. When the CRD sends conversions
//! to this replica, its CA goes into the conversion `caBundle`; when it sends them to another
//! server (Kruise 2.0's manager, before `migrate` takes the CRD over), the replica leaves
//! `spec.conversion` alone (Kruise's manager rewrites it whole on every change, so adding to it
//! would start a write war) and publishes its CA in [`PUBLISHED_CAS`], from which `migrate` builds
//! the bundle it switches to, so the switch trusts replicas already serving. Both writes drop
//! expired CAs and are made against the CRD's resourceVersion, so two replicas writing at once
//! cannot drop each other's CA.

use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{CustomResourceDefinition, WebhookClientConfig};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::certs;

/// The CRD annotation holding the CAs of replicas ready to convert once the CRD is pointed at
/// them (PEM, as a `caBundle`).
pub const PUBLISHED_CAS: &str = "cloneset-operator.dev/conversion-ca-bundle";

/// Where the CRD sends conversions, as seen by one replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Conversion {
    /// Nowhere: the CRD converts nothing through a webhook.
    None,
    /// To this replica's names; the `caBundle` now in place.
    Here(String),
    /// To a server this replica's certificate is not for; the CAs now published.
    Elsewhere(String),
}

/// The host the apiserver dials for `config` (a URL's host, or `<service>.<namespace>.svc`).
pub(crate) fn target_host(config: &WebhookClientConfig) -> Option<String> {
    if let Some(url) = &config.url {
        let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host = match host_port.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host_port.rsplit_once(':').map_or(host_port, |(h, _)| h),
        };
        return Some(host.to_ascii_lowercase());
    }
    config.service.as_ref().map(|s| format!("{}.{}.svc", s.name, s.namespace).to_ascii_lowercase())
}

/// Whether conversions sent per `config` reach a server named in `hosts`: only then can the
/// certificate this replica serves be accepted for them.
pub(crate) fn sent_here(config: &WebhookClientConfig, hosts: &[String]) -> bool {
    target_host(config).is_some_and(|h| hosts.iter().any(|ours| ours.eq_ignore_ascii_case(&h)))
}

pub(crate) struct CaBundle {
    api: Api<CustomResourceDefinition>,
    name: String,
    hosts: Vec<String>,
}

impl CaBundle {
    pub(crate) fn new(client: kube::Client, name: String, hosts: Vec<String>) -> Self {
        CaBundle { api: Api::all(client), name, hosts }
    }

    /// Makes the bundle that matters hold `ours` and nothing expired: the CRD's `caBundle` when
    /// conversions come here, the published CAs when they go elsewhere.
    pub(crate) async fn ensure(&self, ours: &[&str], now: i64) -> anyhow::Result<Conversion> {
        let crd = self.api.get(&self.name).await?;
        let Some(webhook) = crd.spec.conversion.as_ref().filter(|c| c.strategy == "Webhook").and_then(|c| c.webhook.as_ref()) else {
            return Ok(Conversion::None);
        };
        let config = webhook.client_config.clone().unwrap_or_default();
        let version = crd.metadata.resource_version.clone().unwrap_or_default();
        if !sent_here(&config, &self.hosts) {
            let current = crd.metadata.annotations.as_ref().and_then(|a| a.get(PUBLISHED_CAS)).cloned().unwrap_or_default();
            let Some(next) = certs::next_bundle(current.as_bytes(), ours, now) else {
                return Ok(Conversion::Elsewhere(current));
            };
            // A merge patch carrying the resourceVersion is refused if the CRD changed since.
            let patch = json!({"metadata": {"resourceVersion": version, "annotations": {PUBLISHED_CAS: next}}});
            self.api.patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            let target = target_host(&config).unwrap_or_default();
            tracing::info!(crd = %self.name, %target, "conversion webhook: published its CA for a hand-over; conversions go elsewhere");
            return Ok(Conversion::Elsewhere(next));
        }
        let current = config.ca_bundle.as_ref().map(|b| b.0.clone()).unwrap_or_default();
        let Some(next) = certs::next_bundle(&current, ours, now) else {
            return Ok(Conversion::Here(String::from_utf8_lossy(&current).into_owned()));
        };
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/spec/conversion/webhook/clientConfig/caBundle", "value": base64::engine::general_purpose::STANDARD.encode(&next)},
        ]))?;
        self.api.patch(&self.name, &PatchParams::default(), &Patch::Json::<()>(patch)).await?;
        tracing::info!(crd = %self.name, "conversion webhook: updated the CRD's caBundle");
        Ok(Conversion::Here(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::ServiceReference;

    fn service(namespace: &str, name: &str) -> WebhookClientConfig {
        WebhookClientConfig {
            service: Some(ServiceReference { namespace: namespace.into(), name: name.into(), ..Default::default() }),
            ..Default::default()
        }
    }

    fn url(u: &str) -> WebhookClientConfig {
        WebhookClientConfig { url: Some(u.into()), ..Default::default() }
    }

    #[test]
    fn conversions_come_here_only_when_the_crd_names_one_of_our_hosts() {
        let ours: Vec<String> =
            ["cloneset-operator-webhook.cloneset-system.svc", "cloneset-operator-webhook.cloneset-system.svc.cluster.local", "127.0.0.1"]
                .map(String::from)
                .into();
        assert!(sent_here(&service("cloneset-system", "cloneset-operator-webhook"), &ours));
        // Kruise 2.0's manager, or the same chart in another namespace.
        assert!(!sent_here(&service("kruise-system", "kruise-webhook-service"), &ours));
        assert!(!sent_here(&service("ops", "cloneset-operator-webhook"), &ours));
        assert!(sent_here(&url("https://127.0.0.1:9876/convert"), &ours));
        assert!(!sent_here(&url("https://127.0.0.2:9876/convert"), &ours));
        assert!(sent_here(&url("https://Cloneset-Operator-Webhook.cloneset-system.svc/convert"), &ours), "names are case-insensitive");
        assert!(!sent_here(&WebhookClientConfig::default(), &ours), "no target at all");
        assert_eq!(target_host(&url("https://[::1]:9443/convert")).as_deref(), Some("::1"));
        assert_eq!(target_host(&url("https://kruise.example:443")).as_deref(), Some("kruise.example"));
    }
}
