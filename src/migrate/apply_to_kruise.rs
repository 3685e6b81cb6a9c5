//! The IO of `migrate --to-kruise`: once this operator has stopped, stores each CloneSet's
//! template as Kruise's webhook would have (decided by [`super::to_kruise`]), then gives the CRD
//! back to Kruise's release. Each step is a no-op when already done, and says what it did.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt as _};

use super::apply::{LeaseRef, describe, wait_for_lease};
use super::to_kruise::{self, TemplatePlan};
use super::*;
use crate::api::CloneSet;
use crate::core::gojson;

/// What `cloneset-operator migrate --to-kruise` was asked to do.
#[derive(Clone, Debug)]
pub struct ToKruiseOptions {
    /// Kruise's Helm release, given the CRD back.
    pub target: Release,
    /// This operator's leader-election Lease (`<namespace>`, `<name>`): it must not be held.
    pub operator_lease_namespace: String,
    pub operator_lease_name: String,
    /// Only CloneSets in this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Change nothing; say what would change (writes are sent as server-side dry runs).
    pub dry_run: bool,
    /// How long to wait for this operator's Lease to lapse.
    pub lease_timeout: Duration,
}

/// Prepares the cluster for Kruise's manager: once this operator no longer leads, stores each
/// CloneSet's template as Kruise's webhook would have, then gives the CRD to Kruise's release.
/// Every CloneSet is tried; the ones that failed make the error (run again).
pub async fn run_to_kruise(client: &Client, opts: &ToKruiseOptions, say: &mut dyn FnMut(&str)) -> Result<Vec<Step>, MigrateError> {
    let mut m = ToKruise::new(client, opts, say);
    let crd = m.crds.get_opt(CRD_NAME).await?.ok_or(MigrateError::NoCrd)?;
    m.operator_stopped().await?;
    let failed = m.templates_with_kruise_defaults().await?;
    m.crd_to_kruise_release(&crd, failed.len()).await?;
    if !failed.is_empty() {
        return Err(MigrateError::TemplatesNotWritten { clonesets: failed });
    }
    Ok(m.said.steps)
}

/// One run of `migrate --to-kruise`: the steps in the order [`run_to_kruise`] takes them.
struct ToKruise<'a> {
    client: &'a Client,
    opts: &'a ToKruiseOptions,
    crds: Api<CustomResourceDefinition>,
    /// Patches: server-side dry runs in a dry run.
    write: PatchParams,
    said: Said<'a>,
}

impl<'a> ToKruise<'a> {
    fn new(client: &'a Client, opts: &'a ToKruiseOptions, say: &'a mut dyn FnMut(&str)) -> Self {
        Self {
            client,
            opts,
            crds: Api::all(client.clone()),
            write: if opts.dry_run { PatchParams::default().dry_run() } else { PatchParams::default() },
            said: Said::new(say),
        }
    }

    /// Step 1: this operator must have stopped, or it would reconcile beside Kruise's manager.
    async fn operator_stopped(&mut self) -> Result<(), MigrateError> {
        let (client, opts) = (self.client, self.opts);
        let lease = LeaseRef { namespace: &opts.operator_lease_namespace, name: &opts.operator_lease_name, whose: "this operator's" };
        let said = &mut self.said;
        let state = wait_for_lease(client, &lease, opts.dry_run, opts.lease_timeout, &mut |l| said.progress(l)).await?.map_err(
            |(holder, waited)| MigrateError::OperatorStillLeads { lease: format!("{}/{}", lease.namespace, lease.name), holder, waited },
        )?;
        let line = if state == LeaseState::Absent {
            format!(
                "warning: no Lease {}/{}: if this operator runs elsewhere (another --leader-election-namespace, or \
                 without leader election), stop it before starting Kruise's manager",
                lease.namespace, lease.name
            )
        } else {
            format!("this operator's Lease {}/{}: {}", lease.namespace, lease.name, describe(&state, "the operator"))
        };
        self.said.record(false, line);
        Ok(())
    }

    /// Step 2: every CloneSet's template as Kruise's webhook stores it; returns the CloneSets
    /// that could not be prepared (each said with its reason).
    async fn templates_with_kruise_defaults(&mut self) -> Result<Vec<String>, MigrateError> {
        let clonesets: Api<CloneSet> = match &self.opts.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let mut listed = clonesets.list(&ListParams::default()).await?.items;
        listed.sort_by_key(|cs| (cs.namespace().unwrap_or_default(), cs.name_any()));
        let mut failed = Vec::new();
        for cs in &listed {
            let name = format!("{}/{}", cs.namespace().unwrap_or_default(), cs.name_any());
            let (done, line) = match self.template_with_kruise_defaults(cs).await {
                Ok(said) => said,
                Err(reason) => {
                    failed.push(name.clone());
                    (false, format!("error: {reason}"))
                }
            };
            self.said.record(done, format!("CloneSet {name}: {line}"));
        }
        Ok(failed)
    }

    /// One CloneSet of step 2: what was done, or why it was not (then it is tried again on the
    /// next run).
    async fn template_with_kruise_defaults(&self, cs: &CloneSet) -> Result<(bool, String), String> {
        if cs.metadata.deletion_timestamp.is_some() {
            return Ok((false, "being deleted, left alone".to_string()));
        }
        let ns = cs.namespace().unwrap_or_default();
        let update_revision = cs.status.as_ref().map(|s| s.update_revision.clone()).filter(|r| !r.is_empty());
        let data = match &update_revision {
            Some(r) => Api::<ControllerRevision>::namespaced(self.client.clone(), &ns)
                .get_opt(r)
                .await
                .map_err(|e| format!("its update revision cannot be read ({e}); run again"))?
                .and_then(|r| r.data)
                .map(|d| gojson::encode_value(&d.0)),
            None => None,
        };
        let stored = serde_json::to_value(&cs.spec.template).map_err(|e| format!("its template cannot be read ({e})"))?;
        let revision = update_revision.as_deref().unwrap_or_default();
        match to_kruise::plan_template(&stored, data.as_deref()) {
            TemplatePlan::Keep => Ok((false, format!("template already hashes to update revision {revision}"))),
            TemplatePlan::NewRevisionAnyway => {
                let outcome = to_kruise::revision_outcome(update_revision.as_deref(), data.is_some(), false);
                Ok((false, format!("template already has Kruise's defaults; {outcome}")))
            }
            TemplatePlan::Write { template, keeps_revision } => {
                let patch = to_kruise::template_patch(&cs.resource_version().unwrap_or_default(), &template);
                let outcome = to_kruise::revision_outcome(update_revision.as_deref(), data.is_some(), keeps_revision);
                Api::<CloneSet>::namespaced(self.client.clone(), &ns)
                    .patch(&cs.name_any(), &self.write, &Patch::<()>::Json(patch))
                    .await
                    .map_err(|e| format!("its template was not written ({e}); run again"))?;
                let v = verb(self.opts.dry_run, "stored", "store");
                Ok((true, format!("{v} its template with Kruise's defaults; {outcome}")))
            }
        }
    }

    /// Step 3: the CRD back to Kruise's release, so `helm upgrade` of it adopts the CRD again. A
    /// run over one namespace leaves the cluster-wide CRD as it is; after `failed` CloneSets the
    /// CRD stays this operator's, so Helm refuses to reinstall Kruise until a run succeeds.
    async fn crd_to_kruise_release(&mut self, crd: &CustomResourceDefinition, failed: usize) -> Result<(), MigrateError> {
        let target = &self.opts.target;
        let line = match crd_ownership_patch(&crd.metadata, target) {
            _ if failed > 0 => format!("CRD {CRD_NAME} left as it is: {failed} CloneSet(s) not prepared"),
            _ if self.opts.namespace.is_some() => {
                format!("CRD {CRD_NAME} left as it is: --namespace prepares that namespace's CloneSets only")
            }
            Some(patch) => {
                self.crds.patch(CRD_NAME, &self.write, &Patch::Merge(&patch)).await?;
                let v = verb(self.opts.dry_run, "gave", "give");
                let line = format!("{v} CRD {CRD_NAME} to Helm release {target}, with helm.sh/resource-policy=keep");
                self.said.record(true, line);
                return Ok(());
            }
            None => format!("CRD {CRD_NAME} already belongs to Helm release {target} and is kept"),
        };
        self.said.record(false, line);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::stand_in::Apiserver;

    const CLONESETS: &str = "/apis/apps.kruise.io/v1alpha1/namespaces/ns/clonesets";
    const REVISIONS: &str = "/apis/apps/v1/namespaces/ns/controllerrevisions";
    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/cloneset-system/leases/cloneset-operator-leader";
    const CRD: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clonesets.apps.kruise.io";

    fn options(dry_run: bool, namespace: Option<&str>) -> ToKruiseOptions {
        ToKruiseOptions {
            target: Release { name: "kruise".into(), namespace: "kruise-system".into() },
            operator_lease_namespace: "cloneset-system".into(),
            operator_lease_name: "cloneset-operator-leader".into(),
            namespace: namespace.map(String::from),
            dry_run,
            lease_timeout: Duration::from_millis(300),
        }
    }

    /// A template as written in a manifest: nothing Kruise's webhook fills in.
    fn written() -> Value {
        json!({"metadata": {"labels": {"app": "web"}},
               "spec": {"containers": [{"name": "main", "image": "registry.local/web:v1"}]}})
    }

    fn cloneset(name: &str, extra: Value) -> Value {
        let mut cs = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
                            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": written()}});
        json_patch::merge(&mut cs, &extra);
        cs
    }

    /// The CloneSet CRD, owned by `release` (`namespace/name`).
    fn crd(namespace: &str, name: &str) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": CRD_NAME, "labels": {MANAGED_BY_LABEL: "Helm"},
                            "annotations": {RELEASE_NAME_ANNOTATION: name, RELEASE_NAMESPACE_ANNOTATION: namespace}},
               "spec": {"group": "apps.kruise.io", "scope": "Namespaced",
                        "names": {"kind": "CloneSet", "plural": "clonesets"},
                        "versions": [{"name": "v1alpha1", "served": true, "storage": true}]}})
    }

    /// Step 1: an absent Lease is a warning; one still held stops a real run once the timeout
    /// passes, and is only reported by a dry run.
    #[tokio::test]
    async fn this_operator_must_have_stopped_and_an_absent_lease_is_a_warning() {
        let apiserver = Apiserver::default();
        let client = apiserver.client();
        let (real, dry) = (options(false, None), options(true, None));
        let mut quiet = |_: &str| {};
        let mut m = ToKruise::new(&client, &real, &mut quiet);
        m.operator_stopped().await.unwrap();
        assert!(
            matches!(&m.said.steps[..], [s] if s.line.starts_with("warning: no Lease cloneset-system/cloneset-operator-leader")),
            "{:?}",
            m.said.steps
        );
        apiserver.put(
            LEASE,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "cloneset-operator-leader", "namespace": "cloneset-system"},
                   "spec": {"holderIdentity": "operator-0", "leaseDurationSeconds": 15,
                            "renewTime": k8s_openapi::jiff::Timestamp::now().to_string()}}),
        );
        let mut m = ToKruise::new(&client, &real, &mut quiet);
        let refused = m.operator_stopped().await;
        assert!(matches!(&refused, Err(MigrateError::OperatorStillLeads { holder, .. }) if holder == "operator-0"), "{refused:?}");
        assert!(m.said.steps[0].line.starts_with("waiting up to 0s for this operator's Lease"), "{:?}", m.said.steps);
        let mut m = ToKruise::new(&client, &dry, &mut quiet);
        m.operator_stopped().await.unwrap();
        assert!(matches!(&m.said.steps[..], [s] if s.line.contains("held by operator-0")), "{:?}", m.said.steps);
    }

    /// Step 2: a template as written is stored with Kruise's defaults (a dry run only says so),
    /// then found defaulted; a CloneSet being deleted is left alone; one whose update revision
    /// cannot be read is named as failed, and the others are still done.
    #[tokio::test]
    async fn templates_get_kruise_s_defaults_and_a_failure_is_named() {
        let apiserver = Apiserver::refusing(|s| (s.path == format!("{REVISIONS}/broken-1")).then_some(500));
        apiserver.put(&format!("{CLONESETS}/broken"), cloneset("broken", json!({"status": {"updateRevision": "broken-1"}})));
        apiserver.put(&format!("{CLONESETS}/gone"), cloneset("gone", json!({"metadata": {"deletionTimestamp": "2026-12-05T00:00:00Z"}})));
        apiserver.put(&format!("{CLONESETS}/web"), cloneset("web", json!({})));
        let client = apiserver.client();
        let mut quiet = |_: &str| {};
        let dry = options(true, Some("ns"));
        let mut m = ToKruise::new(&client, &dry, &mut quiet);
        assert_eq!(m.templates_with_kruise_defaults().await.unwrap(), ["ns/broken"]);
        assert_eq!(apiserver.get(&format!("{CLONESETS}/web")).unwrap()["spec"]["template"], written(), "a dry run changes nothing");
        assert!(m.said.steps[2].line.starts_with("CloneSet ns/web: would store its template"), "{:?}", m.said.steps);

        let real = options(false, Some("ns"));
        let mut m = ToKruise::new(&client, &real, &mut quiet);
        assert_eq!(m.templates_with_kruise_defaults().await.unwrap(), ["ns/broken"]);
        let lines: Vec<(bool, &str)> = m.said.steps.iter().map(|s| (s.done, s.line.as_str())).collect();
        let (broken, rest) = lines.split_first().unwrap();
        assert!(!broken.0 && broken.1.starts_with("CloneSet ns/broken: error: its update revision cannot be read ("), "{broken:?}");
        assert!(broken.1.ends_with("; run again"), "{broken:?}");
        assert_eq!(
            rest,
            [
                (false, "CloneSet ns/gone: being deleted, left alone"),
                (
                    true,
                    "CloneSet ns/web: stored its template with Kruise's defaults; no update revision yet: Kruise's manager will make one"
                ),
            ]
        );
        let stored = apiserver.get(&format!("{CLONESETS}/web")).unwrap()["spec"]["template"].clone();
        assert_eq!(stored, crate::core::defaults::default_pod_template(&written()));
        assert_eq!(apiserver.get(&format!("{CLONESETS}/gone")).unwrap()["spec"]["template"], written());
        let patched: Vec<(String, bool)> =
            apiserver.take().iter().filter(|s| s.method == http::Method::PATCH).map(|s| (s.line(), s.dry_run)).collect();
        assert_eq!(patched, [("PATCH clonesets/web".to_string(), true), ("PATCH clonesets/web".to_string(), false)]);

        let mut m = ToKruise::new(&client, &real, &mut quiet);
        m.templates_with_kruise_defaults().await.unwrap();
        assert!(m.said.steps[2].line.starts_with("CloneSet ns/web: template already has Kruise's defaults"), "{:?}", m.said.steps);
        assert!(!apiserver.take().iter().any(|s| s.method == http::Method::PATCH), "nothing left to write");
    }

    /// Step 3: the CRD goes back to Kruise's release only when every CloneSet was prepared and
    /// the run covered every namespace; then it is Kruise's.
    #[tokio::test]
    async fn the_crd_goes_back_only_when_every_cloneset_was_prepared() {
        let apiserver = Apiserver::default();
        apiserver.put(CRD, crd("ops", "cloneset-operator"));
        let client = apiserver.client();
        let mut quiet = |_: &str| {};
        let ours: CustomResourceDefinition = serde_json::from_value(crd("ops", "cloneset-operator")).unwrap();
        let (all, one) = (options(false, None), options(false, Some("ns")));
        let mut m = ToKruise::new(&client, &all, &mut quiet);
        m.crd_to_kruise_release(&ours, 1).await.unwrap();
        assert_eq!(m.said.steps[0].line, format!("CRD {CRD_NAME} left as it is: 1 CloneSet(s) not prepared"));
        let mut m = ToKruise::new(&client, &one, &mut quiet);
        m.crd_to_kruise_release(&ours, 0).await.unwrap();
        assert!(m.said.steps[0].line.ends_with("--namespace prepares that namespace's CloneSets only"), "{:?}", m.said.steps);
        assert_eq!(apiserver.get(CRD), Some(crd("ops", "cloneset-operator")), "left as it is");

        let mut m = ToKruise::new(&client, &all, &mut quiet);
        m.crd_to_kruise_release(&ours, 0).await.unwrap();
        let held = apiserver.get(CRD).unwrap();
        let annotations = &held["metadata"]["annotations"];
        assert_eq!(
            (&annotations[RELEASE_NAME_ANNOTATION], &annotations[RELEASE_NAMESPACE_ANNOTATION]),
            (&json!("kruise"), &json!("kruise-system"))
        );
        assert!(
            matches!(&m.said.steps[..], [s] if s.done && s.line.starts_with("gave CRD clonesets.apps.kruise.io to Helm release kruise-system/kruise")),
            "{:?}",
            m.said.steps
        );
        let kruise_s: CustomResourceDefinition = serde_json::from_value(held).unwrap();
        let mut m = ToKruise::new(&client, &all, &mut quiet);
        m.crd_to_kruise_release(&kruise_s, 0).await.unwrap();
        assert!(matches!(&m.said.steps[..], [s] if !s.done && s.line.contains("already belongs")), "{:?}", m.said.steps);
    }
}
