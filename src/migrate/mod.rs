//! `cloneset-operator migrate`: hand CloneSets over from OpenKruise's Helm release to this
//! operator's, without restarting a pod.
//!
//! What stands in the way, in Kruise v1.9.0 as its chart installs it:
//! - the CloneSet CRD is a *template* of Kruise's release, so `helm uninstall kruise` deletes it
//!   and, with it, every CloneSet and (by garbage collection) every pod. Helm 3 decides what to
//!   delete from the manifest stored in the release record, not from the live object, so a
//!   `helm.sh/resource-policy: keep` annotation added to the live CRD does not stop that
//!   uninstall: the CRD must leave the stored manifest too;
//! - Kruise's webhooks call `kruise-webhook-service`, which has no endpoints once Kruise's manager
//!   is stopped; those with `failurePolicy: Fail` on pods block pod creation, update, deletion and
//!   eviction cluster-wide, and those on CloneSets block every CloneSet write;
//! - Kruise's manager restores its webhook configurations from their `template` annotation while it
//!   runs, so an edit made while a replica is still stopping is made again once its
//!   leader-election Lease has lapsed.
//!
//! - with Kruise 2.0, CloneSets are stored as v1beta1 and converted by Kruise's manager: see
//!   [`storage`].
//!
//! `migrate --to-kruise` goes back: see [`to_kruise`].
//!
//! This module holds the decisions (pure, tested without a cluster); [`apply`] is the IO.

pub mod apply;
pub mod apply_to_kruise;
pub mod storage;
pub mod to_kruise;

use std::io::{Read as _, Write as _};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use serde_json::{Value, json};

pub(crate) use crate::kruise_guard::{KRUISE_LEASE_NAME, KRUISE_LEASE_NAMESPACE};

/// The CRD this operator serves.
pub(crate) const CRD_NAME: &str = "clonesets.apps.kruise.io";
/// Kruise's webhook configurations (`pkg/webhook/util/controller/webhook_controller.go`).
pub const KRUISE_MUTATING_CONFIG: &str = "kruise-mutating-webhook-configuration";
pub const KRUISE_VALIDATING_CONFIG: &str = "kruise-validating-webhook-configuration";
/// Kruise's manager Deployment in its chart.
pub(crate) const KRUISE_MANAGER_DEPLOYMENT: &str = "kruise-controller-manager";
/// controller-runtime's default lease duration, which Kruise keeps.
pub(crate) const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// How far our clock may run ahead of the one that wrote `renewTime` before a Lease renewed long
/// ago is wrongly read as lapsed without watching it.
pub(crate) const CLOCK_SKEW_ALLOWANCE: Duration = Duration::from_secs(60);

pub(crate) const RELEASE_NAME_ANNOTATION: &str = "meta.helm.sh/release-name";
pub(crate) const RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";
pub(crate) const RESOURCE_POLICY_ANNOTATION: &str = "helm.sh/resource-policy";
pub(crate) const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("the CloneSet CRD {CRD_NAME} does not exist: there is nothing to migrate (install the chart instead)")]
    NoCrd,
    #[error(
        "Kruise's manager still leads (Lease {KRUISE_LEASE_NAMESPACE}/{KRUISE_LEASE_NAME} held by {holder:?}) after waiting {waited:?}; \
         stop it first: kubectl -n {KRUISE_LEASE_NAMESPACE} scale deployment {KRUISE_MANAGER_DEPLOYMENT} --replicas=0"
    )]
    KruiseStillLeads { holder: String, waited: Duration },
    #[error(
        "Kruise's manager Deployment {KRUISE_LEASE_NAMESPACE}/{KRUISE_MANAGER_DEPLOYMENT} still wants {replicas} replica(s): it would take \
         the Lease back and restore its webhooks; stop it first: kubectl -n {KRUISE_LEASE_NAMESPACE} scale deployment \
         {KRUISE_MANAGER_DEPLOYMENT} --replicas=0"
    )]
    KruiseManagerScaledUp { replicas: i32 },
    #[error(
        "this operator still leads (Lease {lease} held by {holder:?}) after waiting {waited:?}; stop it first: \
         kubectl -n <its namespace> scale deployment <its release name> --replicas=0"
    )]
    OperatorStillLeads { lease: String, holder: String, waited: Duration },
    #[error("{} CloneSet(s) not prepared ({}); Kruise's manager would roll them: run again before starting it", clonesets.len(), clonesets.join(", "))]
    TemplatesNotWritten { clonesets: Vec<String> },
    #[error("Helm release record {secret}: {reason}")]
    ReleaseRecord { secret: String, reason: String },
    #[error(
        "the CloneSet CRD stores CloneSets as {stored} but converts them without a webhook, so they cannot be read as v1alpha1: \
         nothing was changed"
    )]
    StoredAsAnotherVersion { stored: String },
    #[error(
        "the CloneSet CRD stores CloneSets as Kruise 2.0's v1beta1 and converts through Kruise's webhook, and no replica of this \
         operator has published its CA for the hand-over: nothing was changed. Install this operator's chart first with \
         --set crds.managed=false (its pods serve conversions for {target} and publish their CA on the CRD once ready), or pass \
         --conversion-service / --conversion-url where its webhook is"
    )]
    NoPublishedCa { target: String },
    #[error("conversions through {target} do not work ({reason}); the CRD now sends them there: make its pods ready, then run again")]
    ConversionFails { target: String, reason: String },
    #[error(
        "the CRD's conversion was pointed back at {by} after `migrate` switched it: a Kruise manager still runs (every replica \
         rewrites it, leader or not). Stop every kruise-controller-manager pod, then run again"
    )]
    ConversionTakenBack { by: String },
    #[error("{} CloneSet(s) not rewritten as v1alpha1 ({}): run again", clonesets.len(), clonesets.join(", "))]
    NotRewritten { clonesets: Vec<String> },
    #[error(
        "the apiserver still advertises the old storage version a minute after the CRD's was changed: nothing was rewritten; \
         run again"
    )]
    StorageNotSwitched,
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// A Helm release: its name and the namespace its record lives in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub name: String,
    pub namespace: String,
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The Helm release an object belongs to, by the metadata Helm checks before adopting it.
pub(crate) fn helm_owner(meta: &ObjectMeta) -> Option<Release> {
    let annotations = meta.annotations.as_ref()?;
    Some(Release {
        name: annotations.get(RELEASE_NAME_ANNOTATION)?.clone(),
        namespace: annotations.get(RELEASE_NAMESPACE_ANNOTATION)?.clone(),
    })
}

/// The merge patch that makes the CRD `target`'s (so `helm install` of this chart adopts it) and
/// kept by Helm when a release that lists it is upgraded without it; `None` when it already is.
pub(crate) fn crd_ownership_patch(meta: &ObjectMeta, target: &Release) -> Option<Value> {
    let annotation = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k)).map(String::as_str);
    let label = meta.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).map(String::as_str);
    let done = annotation(RELEASE_NAME_ANNOTATION) == Some(&target.name)
        && annotation(RELEASE_NAMESPACE_ANNOTATION) == Some(&target.namespace)
        && annotation(RESOURCE_POLICY_ANNOTATION) == Some("keep")
        && label == Some("Helm");
    (!done).then(|| {
        json!({"metadata": {
            "labels": {MANAGED_BY_LABEL: "Helm"},
            "annotations": {
                RELEASE_NAME_ANNOTATION: target.name,
                RELEASE_NAMESPACE_ANNOTATION: target.namespace,
                RESOURCE_POLICY_ANNOTATION: "keep",
            },
        }})
    })
}

/// Where Kruise's leadership stands, as client-go's leader election reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// No Lease: Kruise's manager is not running (or never ran with leader election).
    Absent,
    /// A Lease with no holder: released on a clean shutdown.
    Released,
    /// Nobody renewed it within its duration.
    Lapsed,
    /// Someone may still lead, for at most `at_most` more unless they renew.
    Held { holder: String, at_most: Duration },
}

/// Reads Kruise's Lease. `unchanged_for` is how long this process has watched the same record
/// (resourceVersion) on its own monotonic clock — client-go's rule, with no clock comparison. A
/// `renewTime` older than the duration plus [`CLOCK_SKEW_ALLOWANCE`] by our wall clock `now` is
/// lapsed at once, so a long-dead manager costs no wait.
pub(crate) fn lease_state(spec: Option<&LeaseSpec>, unchanged_for: Duration, now: Timestamp) -> LeaseState {
    let Some(spec) = spec else { return LeaseState::Absent };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder.is_empty() {
        return LeaseState::Released;
    }
    let duration =
        spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok()).map(Duration::from_secs).unwrap_or(DEFAULT_LEASE_DURATION);
    if unchanged_for >= duration {
        return LeaseState::Lapsed;
    }
    let renewed_long_ago = spec.renew_time.as_ref().is_some_and(|t| {
        let age = now.duration_since(t.0);
        age.is_positive() && age.unsigned_abs() > duration + CLOCK_SKEW_ALLOWANCE
    });
    if renewed_long_ago {
        return LeaseState::Lapsed;
    }
    LeaseState::Held { holder, at_most: duration - unchanged_for }
}

/// Whether a webhook is one this operator replaces: it acts on pods (creation, update, deletion,
/// eviction — Kruise's `mpod`, `vpod`, `vpodeviction`) or on CloneSets (`mcloneset`, `vcloneset`).
/// The others in Kruise's configurations serve Kruise's other kinds and stay.
pub(crate) fn replaced_webhook(rules: &[RuleWithOperations]) -> bool {
    rules.iter().any(|rule| {
        let groups = rule.api_groups.as_deref().unwrap_or_default();
        let resources = rule.resources.as_deref().unwrap_or_default();
        let in_group = |g: &str| groups.iter().any(|x| x == g || x == "*");
        let resource = |r: &str| resources.iter().any(|x| x == r || x == "*" || x.split('/').next() == Some(r));
        (in_group("") && resource("pods")) || (in_group("apps.kruise.io") && resource("clonesets"))
    })
}

/// Splits a Helm manifest into its documents, each with the `---` line that opens it.
fn manifest_documents(manifest: &str) -> Vec<&str> {
    let mut starts = vec![0];
    let mut offset = 0;
    for line in manifest.split_inclusive('\n') {
        if offset > 0 && line.trim_end() == "---" {
            starts.push(offset);
        }
        offset += line.len();
    }
    starts.push(manifest.len());
    starts.windows(2).map(|w| &manifest[w[0]..w[1]]).filter(|d| !d.is_empty()).collect()
}

/// Whether a manifest document is the CRD named `crd_name`.
fn is_crd(document: &str, crd_name: &str) -> bool {
    if !document.contains("CustomResourceDefinition") || !document.contains(crd_name) {
        return false;
    }
    let body = document.trim_start().strip_prefix("---").unwrap_or(document);
    serde_saphyr::from_str::<Value>(body).is_ok_and(|v| v["kind"] == "CustomResourceDefinition" && v["metadata"]["name"] == crd_name)
}

/// The manifest without the CRD `crd_name`; `None` when it does not list that CRD.
pub(crate) fn manifest_without_crd(manifest: &str, crd_name: &str) -> Option<String> {
    let docs = manifest_documents(manifest);
    let kept: Vec<&str> = docs.iter().copied().filter(|d| !is_crd(d, crd_name)).collect();
    (kept.len() != docs.len()).then(|| kept.concat())
}

/// A Helm v3 release record as stored in the `release` key of its Secret: base64 of gzipped JSON.
pub(crate) fn decode_release(stored: &[u8]) -> Result<Value, String> {
    let raw = base64::engine::general_purpose::STANDARD.decode(stored).map_err(|e| format!("not base64: {e}"))?;
    let json = if raw.starts_with(&[0x1f, 0x8b, 0x08]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw.as_slice()).read_to_end(&mut out).map_err(|e| format!("not gzip: {e}"))?;
        out
    } else {
        raw
    };
    serde_json::from_slice(&json).map_err(|e| format!("not a release: {e}"))
}

/// The inverse of [`decode_release`], as Helm writes it.
pub(crate) fn encode_release(release: &Value) -> Result<Vec<u8>, String> {
    let json = serde_json::to_vec(release).map_err(|e| e.to_string())?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&json).map_err(|e| e.to_string())?;
    let zipped = gz.finish().map_err(|e| e.to_string())?;
    Ok(base64::engine::general_purpose::STANDARD.encode(zipped).into_bytes())
}

/// The release record with the CRD removed from its manifest; `None` when it does not list it.
pub(crate) fn release_without_crd(release: &Value, crd_name: &str) -> Option<Value> {
    let manifest = release["manifest"].as_str()?;
    let stripped = manifest_without_crd(manifest, crd_name)?;
    let mut out = release.clone();
    out["manifest"] = Value::String(stripped);
    Some(out)
}

/// Labels that select a release's records in Helm's Secret storage driver.
pub(crate) fn release_record_selector(release: &Release) -> String {
    format!("owner=helm,name={}", release.name)
}

/// What one step found or did, in the words the command prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub done: bool,
    pub line: String,
}

/// What a run has said: each line handed to `say` as it comes, and kept as a step.
pub(crate) struct Said<'a> {
    pub(crate) steps: Vec<Step>,
    say: &'a mut dyn FnMut(&str),
}

impl<'a> Said<'a> {
    pub(crate) fn new(say: &'a mut dyn FnMut(&str)) -> Self {
        Self { steps: Vec::new(), say }
    }

    /// A step: `done` when it changed (or, in a dry run, would change) something.
    pub(crate) fn record(&mut self, done: bool, line: String) {
        (self.say)(&line);
        self.steps.push(Step { done, line });
    }

    /// A line said while waiting, which changes nothing.
    pub(crate) fn progress(&mut self, line: &str) {
        self.record(false, line.to_string());
    }
}

/// Counts changes made (or, in a dry run, that would be) over the steps.
pub fn changes(steps: &[Step]) -> usize {
    steps.iter().filter(|s| s.done).count()
}

/// "would" in a dry run, the past tense otherwise.
pub(crate) fn verb(dry_run: bool, past: &str, base: &str) -> String {
    if dry_run { format!("would {base}") } else { past.to_string() }
}

/// Webhook names by whether they stay or go, in their configuration's order.
pub(crate) fn split_webhooks<'a>(entries: impl IntoIterator<Item = (&'a str, &'a [RuleWithOperations])>) -> (Vec<String>, Vec<String>) {
    let mut remove = Vec::new();
    let mut keep = Vec::new();
    for (name, rules) in entries {
        if replaced_webhook(rules) { remove.push(name.to_string()) } else { keep.push(name.to_string()) }
    }
    (remove, keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn target() -> Release {
        Release { name: "cloneset-operator".into(), namespace: "default".into() }
    }

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |kv: &[(&str, &str)]| Some(kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        ObjectMeta { labels: map(labels), annotations: map(annotations), ..Default::default() }
    }

    #[test]
    fn a_crd_of_kruises_release_is_patched_to_ours_and_kept() {
        let kruise =
            meta(&[(MANAGED_BY_LABEL, "Helm")], &[(RELEASE_NAME_ANNOTATION, "kruise"), (RELEASE_NAMESPACE_ANNOTATION, "kruise-system")]);
        assert_eq!(helm_owner(&kruise), Some(Release { name: "kruise".into(), namespace: "kruise-system".into() }));
        let patch = crd_ownership_patch(&kruise, &target()).expect("a patch");
        assert_eq!(patch["metadata"]["annotations"][RELEASE_NAME_ANNOTATION], "cloneset-operator");
        assert_eq!(patch["metadata"]["annotations"][RELEASE_NAMESPACE_ANNOTATION], "default");
        assert_eq!(patch["metadata"]["annotations"][RESOURCE_POLICY_ANNOTATION], "keep");
        assert_eq!(patch["metadata"]["labels"][MANAGED_BY_LABEL], "Helm");
    }

    #[test]
    fn a_crd_already_ours_needs_no_patch_and_one_missing_anything_does() {
        let ours = [
            (RELEASE_NAME_ANNOTATION, "cloneset-operator"),
            (RELEASE_NAMESPACE_ANNOTATION, "default"),
            (RESOURCE_POLICY_ANNOTATION, "keep"),
        ];
        assert_eq!(crd_ownership_patch(&meta(&[(MANAGED_BY_LABEL, "Helm")], &ours), &target()), None);
        assert!(crd_ownership_patch(&meta(&[], &ours), &target()).is_some(), "no managed-by label");
        assert!(crd_ownership_patch(&meta(&[(MANAGED_BY_LABEL, "Helm")], &ours[..2]), &target()).is_some(), "no keep");
        let other_ns = [ours[0], (RELEASE_NAMESPACE_ANNOTATION, "ops"), ours[2]];
        assert!(crd_ownership_patch(&meta(&[(MANAGED_BY_LABEL, "Helm")], &other_ns), &target()).is_some());
        assert_eq!(helm_owner(&meta(&[], &[])), None, "applied with kubectl: no owner");
    }

    fn lease(holder: Option<&str>, duration: Option<i32>, renewed: Option<Timestamp>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(String::from),
            lease_duration_seconds: duration,
            renew_time: renewed.map(MicroTime),
            ..Default::default()
        }
    }

    #[test]
    fn kruises_lease_lapses_after_its_duration_unchanged_on_our_clock() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let just_renewed = lease(Some("kruise-controller-manager-abc_1"), Some(15), Some(now));
        assert_eq!(lease_state(None, Duration::ZERO, now), LeaseState::Absent);
        assert_eq!(lease_state(Some(&lease(None, Some(15), Some(now))), Duration::ZERO, now), LeaseState::Released);
        assert_eq!(lease_state(Some(&lease(Some(""), Some(15), Some(now))), Duration::ZERO, now), LeaseState::Released);
        assert_eq!(
            lease_state(Some(&just_renewed), Duration::from_secs(4), now),
            LeaseState::Held { holder: "kruise-controller-manager-abc_1".into(), at_most: Duration::from_secs(11) }
        );
        assert_eq!(lease_state(Some(&just_renewed), Duration::from_secs(15), now), LeaseState::Lapsed);
        // No duration on the Lease: controller-runtime's 15 s.
        assert_eq!(lease_state(Some(&lease(Some("x"), None, Some(now))), Duration::from_secs(15), now), LeaseState::Lapsed);
        assert!(matches!(lease_state(Some(&lease(Some("x"), None, Some(now))), Duration::from_secs(14), now), LeaseState::Held { .. }));
    }

    #[test]
    fn a_lease_renewed_long_ago_is_lapsed_at_once_but_clock_skew_is_tolerated() {
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let at = |s: &str| -> Timestamp { s.parse().unwrap() };
        let hour_ago = lease(Some("x"), Some(15), Some(at("2026-01-01T00:00:00Z")));
        assert_eq!(lease_state(Some(&hour_ago), Duration::ZERO, now), LeaseState::Lapsed);
        // 70 s old: within 15 s + 60 s of skew, so watch it rather than trust the clocks.
        let recent = lease(Some("x"), Some(15), Some(at("2026-01-01T00:58:50Z")));
        assert!(matches!(lease_state(Some(&recent), Duration::ZERO, now), LeaseState::Held { .. }));
        // Renewed "in the future" (their clock ahead of ours): still held.
        let ahead = lease(Some("x"), Some(15), Some(at("2026-01-01T02:00:00Z")));
        assert!(matches!(lease_state(Some(&ahead), Duration::ZERO, now), LeaseState::Held { .. }));
    }

    fn rule(groups: &[&str], resources: &[&str]) -> RuleWithOperations {
        RuleWithOperations {
            api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
            api_versions: Some(vec!["v1".into()]),
            operations: Some(vec!["CREATE".into()]),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            scope: None,
        }
    }

    #[test]
    fn only_kruises_pod_and_cloneset_webhooks_are_replaced() {
        // Kruise v1.9.0 chart's entries (name, group, resource).
        let table: &[(&str, &str, &str, bool)] = &[
            ("mpod.kb.io", "", "pods", true),
            ("mcloneset.kb.io", "apps.kruise.io", "clonesets", true),
            ("vpod.kb.io", "", "pods", true),
            ("vpodeviction.kb.io", "", "pods/eviction", true),
            ("vcloneset.kb.io", "apps.kruise.io", "clonesets", true),
            ("madvancedcronjob.kb.io", "apps.kruise.io", "advancedcronjobs", false),
            ("mstatefulset.kb.io", "apps.kruise.io", "statefulsets", false),
            ("vsidecarset.kb.io", "apps.kruise.io", "sidecarsets", false),
            ("vbuiltindeployment.kb.io", "apps", "deployments", false),
            ("vnamespace.kb.io", "", "namespaces", false),
            ("vservice.kb.io", "", "services", false),
            ("vpodunavailablebudget.kb.io", "policy.kruise.io", "podunavailablebudgets", false),
        ];
        for (name, group, resource, replaced) in table {
            assert_eq!(replaced_webhook(&[rule(&[group], &[resource])]), *replaced, "{name}");
        }
        // A "pods" resource in another group is not the core Pod.
        assert!(!replaced_webhook(&[rule(&["metrics.k8s.io"], &["pods"])]));
        assert!(replaced_webhook(&[rule(&["*"], &["*"])]), "a wildcard rule covers pods");
        let rules: Vec<(String, Vec<RuleWithOperations>)> =
            table.iter().map(|(n, g, r, _)| (n.to_string(), vec![rule(&[g], &[r])])).collect();
        let (remove, keep) = split_webhooks(rules.iter().map(|(n, r)| (n.as_str(), r.as_slice())));
        assert_eq!(remove, ["mpod.kb.io", "mcloneset.kb.io", "vpod.kb.io", "vpodeviction.kb.io", "vcloneset.kb.io"]);
        assert_eq!(keep.len(), table.len() - 5);
    }

    const MANIFEST: &str = "---\n# Source: kruise/templates/manager.yaml\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: kruise-system\n\
        ---\n# Source: kruise/templates/apps.kruise.io_clonesets.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
        metadata:\n  name: clonesets.apps.kruise.io\nspec:\n  group: apps.kruise.io\n\
        ---\n# Source: kruise/templates/apps.kruise.io_daemonsets.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
        metadata:\n  name: daemonsets.apps.kruise.io\n  annotations:\n    note: \"not clonesets.apps.kruise.io\"\nspec:\n  group: apps.kruise.io\n";

    #[test]
    fn the_cloneset_crd_and_nothing_else_leaves_a_release_manifest() {
        let stripped = manifest_without_crd(MANIFEST, CRD_NAME).expect("the CRD is listed");
        assert!(!stripped.contains("name: clonesets.apps.kruise.io"), "{stripped}");
        assert!(stripped.contains("kind: Namespace") && stripped.contains("name: daemonsets.apps.kruise.io"), "{stripped}");
        assert_eq!(manifest_documents(&stripped).len(), 2);
        assert_eq!(manifest_without_crd(&stripped, CRD_NAME), None, "twice: nothing more to remove");
    }

    #[test]
    fn a_release_record_round_trips_and_loses_only_the_crd() {
        let record = json!({"name": "kruise", "namespace": "kruise-system", "version": 2, "manifest": MANIFEST,
                            "info": {"status": "deployed"}, "config": {"featureGates": "x"}});
        let stored = encode_release(&record).unwrap();
        assert_eq!(&base64::engine::general_purpose::STANDARD.decode(&stored).unwrap()[..3], &[0x1f, 0x8b, 0x08], "gzip inside");
        assert_eq!(decode_release(&stored).unwrap(), record);
        let forgotten = release_without_crd(&record, CRD_NAME).unwrap();
        assert_eq!(forgotten["manifest"], json!(manifest_without_crd(MANIFEST, CRD_NAME).unwrap()));
        assert_eq!(forgotten["config"], record["config"]);
        assert_eq!(release_without_crd(&forgotten, CRD_NAME), None);
        assert!(decode_release(b"not base64!").is_err());
    }
}
