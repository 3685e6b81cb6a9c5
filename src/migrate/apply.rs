//! The IO of `migrate`: reads the cluster, applies the decisions of [`super`] in a crash-safe
//! order (each step is a no-op when already done), and says what it did.
//!
//! Order: nothing before Kruise's Deployment is at zero; then at once what a stopped Kruise
//! leaves broken (its pod and CloneSet webhooks, and with Kruise 2.0 the CRD's conversion),
//! since a Kruise replica still stopping only puts them back, which is undone once its Lease has
//! lapsed; only then the rest: take the CRD out of Kruise's release records before moving its
//! ownership (a second run still knows whose records to clean), then the storage version.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt as _};

use super::*;
use crate::api::CloneSet;

/// What `cloneset-operator migrate` was asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    /// The release of this chart that takes the CRD over.
    pub target: Release,
    /// Kruise's installation namespace (its Lease and manager Deployment live there).
    pub kruise_namespace: String,
    /// Change nothing; say what would change (writes are sent as server-side dry runs).
    pub dry_run: bool,
    /// How long to wait for Kruise's Lease to lapse.
    pub lease_timeout: Duration,
    /// Where this operator's conversion webhook is, for a CRD storing CloneSets as v1beta1.
    pub conversion: storage::ConversionTarget,
}

/// Runs the migration, calling `say` with each line as it goes; returns the steps.
pub async fn run(client: &Client, opts: &Options, say: &mut dyn FnMut(&str)) -> Result<Vec<Step>, MigrateError> {
    let mut m = Migration::new(client, opts, say);
    let crd = m.crds.get_opt(CRD_NAME).await?.ok_or(MigrateError::NoCrd)?;
    // Refused before anything changes when the conversion cannot be taken over.
    let take_over = storage::plan(&crd, &opts.conversion)?;
    let previous_owner = helm_owner(&crd.metadata);
    m.kruise_manager_stopped().await?;
    m.point_conversion(&take_over).await?;
    m.cut_kruise_webhooks().await?;
    m.kruise_lease_lapsed().await?;
    m.conversion_still_here(&take_over).await?;
    m.webhooks_still_cut().await?;
    if let Some(owner) = previous_owner.as_ref().filter(|o| **o != opts.target) {
        m.out_of_previous_release(owner).await?;
    }
    m.crd_to_target_release(&crd, previous_owner.as_ref()).await?;
    if let Some(stored) = &take_over.stored_elsewhere {
        m.stored_as_v1alpha1(stored).await?;
    }
    Ok(m.said.steps)
}

/// One run of `migrate`: the steps in the order [`run`] takes them, each a no-op when done
/// already, each saying what it did.
struct Migration<'a> {
    client: &'a Client,
    opts: &'a Options,
    crds: Api<CustomResourceDefinition>,
    /// Patches and replacements: server-side dry runs in a dry run.
    write: PatchParams,
    replace: PostParams,
    said: Said<'a>,
}

impl<'a> Migration<'a> {
    fn new(client: &'a Client, opts: &'a Options, say: &'a mut dyn FnMut(&str)) -> Self {
        Self {
            client,
            opts,
            crds: Api::all(client.clone()),
            write: if opts.dry_run { PatchParams::default().dry_run() } else { PatchParams::default() },
            replace: PostParams { dry_run: opts.dry_run, field_manager: None },
            said: Said::new(say),
        }
    }

    /// Step 1: Kruise's manager must be gone, or it takes its Lease back and restores its webhooks.
    /// A dry run says so and goes on.
    async fn kruise_manager_stopped(&mut self) -> Result<(), MigrateError> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.opts.kruise_namespace);
        let Some(d) = deployments.get_opt(KRUISE_MANAGER_DEPLOYMENT).await? else { return Ok(()) };
        let replicas = d.spec.and_then(|s| s.replicas).unwrap_or(1);
        if replicas > 0 {
            if !self.opts.dry_run {
                return Err(MigrateError::KruiseManagerScaledUp { replicas });
            }
            let line = format!(
                "Kruise's manager {}/{KRUISE_MANAGER_DEPLOYMENT} runs {replicas} replica(s): the real run refuses until it is scaled to 0",
                self.opts.kruise_namespace
            );
            self.said.record(false, line);
        }
        Ok(())
    }

    /// Step 2: With Kruise 2.0's v1beta1 storage, conversions to this operator at once, before
    /// Kruise's Lease lapses (its manager does not release it): reads and writes through the
    /// version a CloneSet is not stored in fail from Kruise's stop until then, and this
    /// operator's replicas already convert correctly. A Kruise replica still stopping may put
    /// its own settings back; [`Self::conversion_still_here`] checks once the Lease has lapsed.
    async fn point_conversion(&mut self, take_over: &storage::TakeOver) -> Result<(), MigrateError> {
        let Some(patch) = &take_over.conversion else { return Ok(()) };
        self.crds.patch(CRD_NAME, &self.write, &Patch::Json::<()>(patch.clone())).await?;
        let v = verb(self.opts.dry_run, "pointed", "point");
        let line = format!(
            "{v} the CRD's conversion from {} to {}, trusting the CAs this operator's replicas published",
            take_over.previous, self.opts.conversion
        );
        self.said.record(true, line);
        Ok(())
    }

    /// Step 3: Kruise's webhooks on pods and CloneSets, which nobody serves once its Deployment is at
    /// zero: cut at once, so pods and CloneSets are not blocked while its Lease lapses. A Kruise
    /// replica still stopping restores them from their template; [`Self::webhooks_still_cut`]
    /// cuts them again after the lapse.
    async fn cut_kruise_webhooks(&mut self) -> Result<(), MigrateError> {
        for (done, line) in cut_webhooks(self.client, &self.replace, self.opts.dry_run).await? {
            self.said.record(done, line);
        }
        Ok(())
    }

    /// Step 4: Kruise's Lease lapsed: no Kruise replica is left to undo steps 2 and 3.
    async fn kruise_lease_lapsed(&mut self) -> Result<(), MigrateError> {
        let (client, opts) = (self.client, self.opts);
        let said = &mut self.said;
        let state = wait_for_kruise_lease(client, opts, &mut |l| said.progress(l)).await?;
        let line = format!("Kruise's Lease {}/{KRUISE_LEASE_NAME}: {}", opts.kruise_namespace, describe(&state, "Kruise's manager"));
        self.said.record(false, line);
        Ok(())
    }

    /// Step 2 again, once the Lease lapsed, if a stopping Kruise replica rewrote the conversion in
    /// between (then nothing is left to); then CloneSets must read through both versions, and
    /// no Kruise replica running elsewhere may have put its own conversion back.
    async fn conversion_still_here(&mut self, take_over: &storage::TakeOver) -> Result<(), MigrateError> {
        if take_over.conversion.is_none() || self.opts.dry_run {
            return Ok(());
        }
        if let Some(patch) = storage::plan(&self.crds.get(CRD_NAME).await?, &self.opts.conversion)?.conversion {
            self.crds.patch(CRD_NAME, &self.write, &Patch::Json::<()>(patch)).await?;
            let line =
                format!("pointed the CRD's conversion at {} again: a stopping Kruise replica had put its own back", self.opts.conversion);
            self.said.record(true, line);
        }
        check_conversions(self.client, &self.opts.conversion).await?;
        // Kruise's manager rewrites the conversion in every replica, leader or not.
        let now = self.crds.get(CRD_NAME).await?;
        let config = now.spec.conversion.and_then(|c| c.webhook).and_then(|w| w.client_config).unwrap_or_default();
        if !self.opts.conversion.is(&config) {
            return Err(MigrateError::ConversionTakenBack { by: crate::webhook::ca_bundle::target_host(&config).unwrap_or_default() });
        }
        self.said.record(false, "CloneSets read through apps.kruise.io/v1alpha1 and v1beta1".to_string());
        Ok(())
    }

    /// Step 3 again, once the Lease lapsed: what a stopping Kruise replica restored.
    async fn webhooks_still_cut(&mut self) -> Result<(), MigrateError> {
        if self.opts.dry_run {
            return Ok(());
        }
        for (_, line) in cut_webhooks(self.client, &self.replace, false).await?.into_iter().filter(|(done, _)| *done) {
            self.said.record(true, format!("{line} again: a stopping Kruise replica had restored them"));
        }
        Ok(())
    }

    /// Step 5: Out of the previous release's records, so `helm uninstall` of that release keeps it.
    async fn out_of_previous_release(&mut self, owner: &Release) -> Result<(), MigrateError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &owner.namespace);
        let mut records = secrets.list(&ListParams::default().labels(&release_record_selector(owner))).await?.items;
        records.sort_by_key(|s| s.name_any());
        if records.is_empty() {
            let line = format!(
                "warning: no Helm release records (Secrets) of release {owner} found; if Helm stores them elsewhere \
                 (HELM_DRIVER), `helm uninstall {}` would still delete the CRD",
                owner.name
            );
            self.said.record(false, line);
        }
        let mut listed = 0;
        for mut secret in records {
            let name = secret.name_any();
            let Some(stored) = secret.data.as_ref().and_then(|d| d.get("release")) else { continue };
            let release = decode_release(&stored.0).map_err(|reason| MigrateError::ReleaseRecord { secret: name.clone(), reason })?;
            let Some(stripped) = release_without_crd(&release, CRD_NAME) else { continue };
            listed += 1;
            let encoded = encode_release(&stripped).map_err(|reason| MigrateError::ReleaseRecord { secret: name.clone(), reason })?;
            secret.data.get_or_insert_default().insert("release".into(), k8s_openapi::ByteString(encoded));
            secrets.replace(&name, &self.replace, &secret).await?;
            let v = verb(self.opts.dry_run, "removed", "remove");
            let line =
                format!("{v} the CRD from Helm release record {}/{name}, so `helm uninstall {}` leaves it", owner.namespace, owner.name);
            self.said.record(true, line);
        }
        if listed == 0 {
            self.said.record(false, format!("Helm release {owner} does not list the CRD (any more)"));
        }
        Ok(())
    }

    /// Step 6: Ownership to our release, kept on uninstall.
    async fn crd_to_target_release(
        &mut self,
        crd: &CustomResourceDefinition,
        previous_owner: Option<&Release>,
    ) -> Result<(), MigrateError> {
        let target = &self.opts.target;
        let Some(patch) = crd_ownership_patch(&crd.metadata, target) else {
            self.said.record(false, format!("CRD {CRD_NAME} already belongs to Helm release {target} and is kept"));
            return Ok(());
        };
        self.crds.patch(CRD_NAME, &self.write, &Patch::Merge(&patch)).await?;
        let from = previous_owner.map_or("no Helm release".to_string(), |o| format!("Helm release {o}"));
        let v = verb(self.opts.dry_run, "moved", "move");
        self.said.record(true, format!("{v} CRD {CRD_NAME} from {from} to Helm release {target}, with helm.sh/resource-policy=keep"));
        Ok(())
    }

    /// Step 7: Every CloneSet stored as v1alpha1, then v1alpha1 the only stored version (`stored`:
    /// the other version some are stored as).
    async fn stored_as_v1alpha1(&mut self, stored: &str) -> Result<(), MigrateError> {
        let plan = storage::plan(&self.crds.get(CRD_NAME).await?, &self.opts.conversion)?;
        if let Some(patch) = &plan.storage {
            let before = storage_version_hash(self.client).await;
            self.crds.patch(CRD_NAME, &self.write, &Patch::Json::<()>(patch.clone())).await?;
            let v = verb(self.opts.dry_run, "made", "make");
            self.said.record(
                true,
                format!("{v} {}/{} the CRD's storage version", crate::api::conversion::GROUP, crate::api::crd::STORAGE_VERSION),
            );
            if !self.opts.dry_run {
                wait_for_new_storage(self.client, before).await?;
            }
        }
        if self.opts.dry_run {
            self.said.record(
                true,
                format!("would rewrite every CloneSet as v1alpha1 (some are stored as {stored}) and set the CRD's storedVersions"),
            );
            return Ok(());
        }
        let (rewritten, failed) = rewrite_clonesets(self.client).await?;
        self.said.record(true, format!("rewrote {rewritten} CloneSet(s), so each is stored as v1alpha1"));
        if !failed.is_empty() {
            return Err(MigrateError::NotRewritten { clonesets: failed });
        }
        self.crds.patch_status(CRD_NAME, &self.write, &Patch::Merge(storage::stored_versions_patch())).await?;
        self.said.record(true, format!("set the CRD's storedVersions to [{}] (was {stored} too)", crate::api::crd::STORAGE_VERSION));
        Ok(())
    }
}

/// The discovered CloneSet resource of v1alpha1, as a dynamic object type.
fn cloneset_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<CloneSet>(&())
}

/// Polls until CloneSets list through both versions (the apiserver picks the new conversion
/// up from its watch of the CRD, a moment after the write), for at most a minute.
async fn check_conversions(client: &Client, target: &storage::ConversionTarget) -> Result<(), MigrateError> {
    let alpha: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &cloneset_resource());
    let beta: Api<kube::api::DynamicObject> =
        Api::all_with(client.clone(), &kube::api::ApiResource::erase::<crate::api::v1beta1::CloneSet>(&()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let read = async {
            alpha.list(&ListParams::default()).await?;
            beta.list(&ListParams::default()).await
        };
        match read.await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(MigrateError::ConversionFails { target: target.to_string(), reason: e.to_string() });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The storage version hash the apiserver advertises for CloneSets (discovery), which changes
/// once it stores them in the new version.
async fn storage_version_hash(client: &Client) -> Option<String> {
    let version = format!("{}/{}", crate::api::conversion::GROUP, crate::api::crd::STORAGE_VERSION);
    let list = client.list_api_group_resources(&version).await.ok()?;
    list.resources.into_iter().find(|r| r.name == "clonesets").and_then(|r| r.storage_version_hash)
}

/// Waits (at most a minute) until the advertised storage version hash differs from `before`:
/// rewriting earlier could store objects in the old version again.
async fn wait_for_new_storage(client: &Client, before: Option<String>) -> Result<(), MigrateError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while storage_version_hash(client).await == before && before.is_some() {
        if tokio::time::Instant::now() >= deadline {
            return Err(MigrateError::StorageNotSwitched);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Writes every CloneSet back unchanged, as the storage version migrator does, so the
/// apiserver stores it in the storage version; a conflict means someone else wrote it since,
/// and it is read and written again. Returns how many were written and which failed.
async fn rewrite_clonesets(client: &Client) -> Result<(usize, Vec<String>), MigrateError> {
    let all: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &cloneset_resource());
    let mut rewritten = 0;
    let mut failed = Vec::new();
    for mut obj in all.list(&ListParams::default()).await?.items {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), &ns, &cloneset_resource());
        let mut attempts = 0;
        loop {
            attempts += 1;
            match api.replace(&name, &PostParams::default(), &obj).await {
                Ok(_) => {
                    rewritten += 1;
                    break;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => break,
                Err(kube::Error::Api(e)) if e.code == 409 && attempts < 5 => match api.get_opt(&name).await? {
                    Some(fresh) => obj = fresh,
                    None => break,
                },
                Err(e) => {
                    tracing::warn!(cloneset = %format!("{ns}/{name}"), error = %e, "not rewritten");
                    failed.push(format!("{ns}/{name}"));
                    break;
                }
            }
        }
    }
    Ok((rewritten, failed))
}

/// Removes the webhooks this operator replaces from Kruise's two configurations; one line per
/// configuration found, and whether it changed.
async fn cut_webhooks(client: &Client, replace: &PostParams, dry_run: bool) -> Result<Vec<(bool, String)>, MigrateError> {
    let mut lines = Vec::new();
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(mut config) = mutating.get_opt(KRUISE_MUTATING_CONFIG).await? {
        let hooks = config.webhooks.take().unwrap_or_default();
        let (remove, keep) = split_webhooks(hooks.iter().map(|w| (w.name.as_str(), w.rules.as_deref().unwrap_or_default())));
        config.webhooks = Some(hooks.into_iter().filter(|w| !remove.contains(&w.name)).collect());
        if !remove.is_empty() {
            mutating.replace(KRUISE_MUTATING_CONFIG, replace, &config).await?;
        }
        lines.push(cut_line(dry_run, KRUISE_MUTATING_CONFIG, &remove, &keep));
    }
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(mut config) = validating.get_opt(KRUISE_VALIDATING_CONFIG).await? {
        let hooks = config.webhooks.take().unwrap_or_default();
        let (remove, keep) = split_webhooks(hooks.iter().map(|w| (w.name.as_str(), w.rules.as_deref().unwrap_or_default())));
        config.webhooks = Some(hooks.into_iter().filter(|w| !remove.contains(&w.name)).collect());
        if !remove.is_empty() {
            validating.replace(KRUISE_VALIDATING_CONFIG, replace, &config).await?;
        }
        lines.push(cut_line(dry_run, KRUISE_VALIDATING_CONFIG, &remove, &keep));
    }
    Ok(lines)
}

fn cut_line(dry_run: bool, config: &str, remove: &[String], keep: &[String]) -> (bool, String) {
    if remove.is_empty() {
        (false, format!("{config}: no pod or CloneSet webhook left ({} others kept)", keep.len()))
    } else {
        let v = verb(dry_run, "removed", "remove");
        (true, format!("{v} {} from {config} ({} others, for Kruise's other kinds, kept)", remove.join(", "), keep.len()))
    }
}

/// A Lease's state in the words the command prints.
pub(super) fn describe(state: &LeaseState, manager: &str) -> String {
    match state {
        LeaseState::Absent => format!("absent ({manager} is not running)"),
        LeaseState::Released => format!("released ({manager} stopped)"),
        LeaseState::Lapsed => format!("lapsed ({manager} stopped)"),
        LeaseState::Held { holder, at_most } => format!("held by {holder} (for at most {}s more unless renewed)", at_most.as_secs()),
    }
}

/// Polls Kruise's Lease until it is no longer held; see [`wait_for_lease`].
async fn wait_for_kruise_lease(client: &Client, opts: &Options, say: &mut dyn FnMut(&str)) -> Result<LeaseState, MigrateError> {
    let lease = LeaseRef { namespace: &opts.kruise_namespace, name: KRUISE_LEASE_NAME, whose: "Kruise's" };
    wait_for_lease(client, &lease, opts.dry_run, opts.lease_timeout, say)
        .await?
        .map_err(|(holder, waited)| MigrateError::KruiseStillLeads { holder, waited })
}

/// A leader-election Lease and whose it is, in the words the command prints.
pub(super) struct LeaseRef<'a> {
    pub(super) namespace: &'a str,
    pub(super) name: &'a str,
    pub(super) whose: &'a str,
}

/// Polls a Lease until it is no longer held (client-go's rule: the same record for a whole lease
/// duration on our clock). A dry run looks once and does not wait. `Ok(Err((holder, waited)))`
/// when it is still held after `timeout`.
pub(super) async fn wait_for_lease(
    client: &Client,
    lease_ref: &LeaseRef<'_>,
    dry_run: bool,
    timeout: Duration,
    say: &mut dyn FnMut(&str),
) -> Result<Result<LeaseState, (String, Duration)>, MigrateError> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), lease_ref.namespace);
    let started = tokio::time::Instant::now();
    let mut seen: Option<(String, tokio::time::Instant)> = None;
    let mut announced = false;
    loop {
        let lease = leases.get_opt(lease_ref.name).await?;
        let version = lease.as_ref().and_then(|l| l.resource_version()).unwrap_or_default();
        let now = tokio::time::Instant::now();
        let since = match &seen {
            Some((v, at)) if *v == version => *at,
            _ => {
                seen = Some((version, now));
                now
            }
        };
        let state = lease_state(lease.as_ref().and_then(|l| l.spec.as_ref()), now - since, Timestamp::now());
        let LeaseState::Held { holder, at_most } = &state else { return Ok(Ok(state)) };
        if dry_run {
            return Ok(Ok(state));
        }
        if started.elapsed() >= timeout {
            return Ok(Err((holder.clone(), started.elapsed())));
        }
        if !announced {
            say(&format!(
                "waiting up to {}s for {} Lease {}/{} (held by {holder}) to lapse",
                timeout.as_secs(),
                lease_ref.whose,
                lease_ref.namespace,
                lease_ref.name
            ));
            announced = true;
        }
        tokio::time::sleep((*at_most).clamp(Duration::from_millis(200), Duration::from_secs(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use http::Method;
    use serde_json::{Value, json};

    use super::*;
    use crate::stand_in::Apiserver;

    const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/kruise-system/deployments";
    const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
    const SECRETS: &str = "/api/v1/namespaces/kruise-system/secrets";
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kruise-system/leases";
    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

    fn options(dry_run: bool) -> Options {
        Options {
            target: Release { name: "cloneset-operator".into(), namespace: "ops".into() },
            kruise_namespace: "kruise-system".into(),
            dry_run,
            lease_timeout: Duration::from_secs(1),
            conversion: storage::ConversionTarget::Url("https://127.0.0.1:9443/convert".into()),
        }
    }

    /// The request lines the stand-in received since the last call (`GET deployments/x`).
    fn sent(apiserver: &Apiserver) -> Vec<String> {
        apiserver.take().iter().map(|s| format!("{}{}", s.line(), if s.dry_run { " (dry run)" } else { "" })).collect()
    }

    fn manager(replicas: i32) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": KRUISE_MANAGER_DEPLOYMENT, "namespace": "kruise-system"},
               "spec": {"replicas": replicas, "selector": {}, "template": {}}})
    }

    /// Kruise's mutating configuration with a pod webhook (replaced) and a StatefulSet one (kept).
    fn kruise_webhooks() -> Value {
        let hook = |name: &str, group: &str, resource: &str| {
            json!({"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                   "clientConfig": {"service": {"name": "kruise-webhook-service", "namespace": "kruise-system"}},
                   "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}]})
        };
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": KRUISE_MUTATING_CONFIG},
               "webhooks": [hook("mpod.kb.io", "", "pods"), hook("mstatefulset.kb.io", "apps.kruise.io", "statefulsets")]})
    }

    /// The CloneSet CRD as Kruise's Helm release installs it, storing v1alpha1.
    fn kruise_crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": CRD_NAME, "labels": {MANAGED_BY_LABEL: "Helm"},
                            "annotations": {RELEASE_NAME_ANNOTATION: "kruise", RELEASE_NAMESPACE_ANNOTATION: "kruise-system"}},
               "spec": {"group": "apps.kruise.io", "scope": "Namespaced",
                        "names": {"kind": "CloneSet", "plural": "clonesets", "shortNames": ["clone"]},
                        "versions": [{"name": "v1alpha1", "served": true, "storage": true}]},
               "status": {"storedVersions": ["v1alpha1"]}})
    }

    /// Kruise's Helm release record, its manifest listing a Namespace and the CloneSet CRD.
    fn release_record() -> Value {
        let manifest = format!(
            "---\n# Source: kruise/templates/manager.yaml\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: kruise-system\n\
             ---\n# Source: kruise/templates/crds.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             metadata:\n  name: {CRD_NAME}\n"
        );
        let record = json!({"name": "kruise", "namespace": "kruise-system", "version": 1, "manifest": manifest});
        let stored = encode_release(&record).unwrap();
        json!({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
               "metadata": {"name": "sh.helm.release.v1.kruise.v1", "namespace": "kruise-system", "labels": {"owner": "helm", "name": "kruise"}},
               "data": {"release": base64::engine::general_purpose::STANDARD.encode(stored)}})
    }

    fn manifest_of(secret: &Value) -> String {
        let stored = base64::engine::general_purpose::STANDARD.decode(secret["data"]["release"].as_str().unwrap()).unwrap();
        decode_release(&stored).unwrap()["manifest"].as_str().unwrap().to_string()
    }

    /// Step 1: a Kruise manager with replicas stops the real run before any write, and is only
    /// reported by a dry run; at zero replicas nothing is said.
    #[tokio::test]
    async fn a_running_kruise_manager_refuses_the_run_and_a_dry_run_reports_it() {
        let apiserver = Apiserver::default();
        apiserver.put(&format!("{DEPLOYMENTS}/{KRUISE_MANAGER_DEPLOYMENT}"), manager(2));
        let client = apiserver.client();
        let (real, dry) = (options(false), options(true));
        let mut quiet = |_: &str| {};
        let mut m = Migration::new(&client, &real, &mut quiet);
        let refused = m.kruise_manager_stopped().await;
        assert!(matches!(refused, Err(MigrateError::KruiseManagerScaledUp { replicas: 2 })), "{refused:?}");
        assert!(m.said.steps.is_empty());
        let mut m = Migration::new(&client, &dry, &mut quiet);
        m.kruise_manager_stopped().await.unwrap();
        assert!(matches!(&m.said.steps[..], [s] if !s.done && s.line.contains("runs 2 replica(s)")), "{:?}", m.said.steps);
        apiserver.put(&format!("{DEPLOYMENTS}/{KRUISE_MANAGER_DEPLOYMENT}"), manager(0));
        let mut m = Migration::new(&client, &real, &mut quiet);
        m.kruise_manager_stopped().await.unwrap();
        assert!(m.said.steps.is_empty());
        assert!(sent(&apiserver).iter().all(|l| l.starts_with("GET ")), "reads only");
    }

    /// Step 3: Kruise's pod webhook leaves its configuration, its StatefulSet webhook stays; a
    /// dry run changes nothing, and a second run finds nothing to cut.
    #[tokio::test]
    async fn kruise_s_pod_webhooks_are_cut_and_its_others_kept() {
        let apiserver = Apiserver::default();
        let path = format!("{MUTATING}/{KRUISE_MUTATING_CONFIG}");
        apiserver.put(&path, kruise_webhooks());
        let client = apiserver.client();
        let mut quiet = |_: &str| {};
        let dry = options(true);
        let mut m = Migration::new(&client, &dry, &mut quiet);
        m.cut_kruise_webhooks().await.unwrap();
        assert!(m.said.steps[0].line.starts_with("would remove mpod.kb.io"), "{:?}", m.said.steps);
        assert_eq!(apiserver.get(&path), Some(kruise_webhooks()), "a dry run changes nothing");
        assert!(sent(&apiserver).contains(&format!("PUT {path} (dry run)")));

        let real = options(false);
        let mut m = Migration::new(&client, &real, &mut quiet);
        m.cut_kruise_webhooks().await.unwrap();
        let held = apiserver.get(&path).unwrap();
        let names: Vec<&str> = held["webhooks"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["mstatefulset.kb.io"]);
        let expected = format!("removed mpod.kb.io from {KRUISE_MUTATING_CONFIG} (1 others, for Kruise's other kinds, kept)");
        assert!(matches!(&m.said.steps[..], [s] if s.done && s.line == expected), "{:?}", m.said.steps);
        assert!(sent(&apiserver).contains(&format!("PUT {path}")));
        let mut m = Migration::new(&client, &real, &mut quiet);
        m.cut_kruise_webhooks().await.unwrap();
        assert!(matches!(&m.said.steps[..], [s] if !s.done && s.line.contains("no pod or CloneSet webhook left")), "{:?}", m.said.steps);
        assert!(!sent(&apiserver).iter().any(|l| l.starts_with("PUT ")), "nothing left to write");
    }

    /// Step 4: an absent Lease is reported as such; a held one is reported by a dry run, which
    /// does not wait for it.
    #[tokio::test]
    async fn kruise_s_lease_is_reported_and_a_dry_run_does_not_wait() {
        let apiserver = Apiserver::default();
        let client = apiserver.client();
        let (real, dry) = (options(false), options(true));
        let mut quiet = |_: &str| {};
        let mut m = Migration::new(&client, &real, &mut quiet);
        m.kruise_lease_lapsed().await.unwrap();
        let absent = format!("Kruise's Lease kruise-system/{KRUISE_LEASE_NAME}: absent (Kruise's manager is not running)");
        assert!(matches!(&m.said.steps[..], [s] if s.line == absent), "{:?}", m.said.steps);
        let renewed = k8s_openapi::jiff::Timestamp::now().to_string();
        apiserver.put(
            &format!("{LEASES}/{KRUISE_LEASE_NAME}"),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": KRUISE_LEASE_NAME, "namespace": "kruise-system"},
                   "spec": {"holderIdentity": "kruise-0", "leaseDurationSeconds": 15, "renewTime": renewed}}),
        );
        let mut m = Migration::new(&client, &dry, &mut quiet);
        m.kruise_lease_lapsed().await.unwrap();
        assert!(matches!(&m.said.steps[..], [s] if s.line.contains("held by kruise-0")), "{:?}", m.said.steps);
    }

    /// Step 5: the CRD leaves Kruise's release record (the record's other objects stay), so
    /// `helm uninstall kruise` keeps it; a second run finds nothing to remove.
    #[tokio::test]
    async fn the_crd_leaves_kruise_s_release_record_and_nothing_else_does() {
        let apiserver = Apiserver::default();
        let path = format!("{SECRETS}/sh.helm.release.v1.kruise.v1");
        apiserver.put(&path, release_record());
        let client = apiserver.client();
        let real = options(false);
        let kruise = Release { name: "kruise".into(), namespace: "kruise-system".into() };
        let mut quiet = |_: &str| {};
        let mut m = Migration::new(&client, &real, &mut quiet);
        m.out_of_previous_release(&kruise).await.unwrap();
        let manifest = manifest_of(&apiserver.get(&path).unwrap());
        assert!(!manifest.contains(CRD_NAME) && manifest.contains("kind: Namespace"), "{manifest}");
        assert!(
            matches!(&m.said.steps[..], [s] if s.done && s.line.contains("removed the CRD from Helm release record")),
            "{:?}",
            m.said.steps
        );
        assert_eq!(sent(&apiserver), [format!("GET {SECRETS}"), format!("PUT {path}")]);
        let mut m = Migration::new(&client, &real, &mut quiet);
        m.out_of_previous_release(&kruise).await.unwrap();
        assert!(matches!(&m.said.steps[..], [s] if !s.done && s.line.contains("does not list the CRD")), "{:?}", m.said.steps);
        let elsewhere = Release { name: "kruise".into(), namespace: "other".into() };
        let mut m = Migration::new(&client, &real, &mut quiet);
        m.out_of_previous_release(&elsewhere).await.unwrap();
        assert!(m.said.steps[0].line.starts_with("warning: no Helm release records"), "{:?}", m.said.steps);
    }

    /// Step 6: the CRD moves from Kruise's release to ours, kept on uninstall; then it is ours.
    #[tokio::test]
    async fn the_crd_moves_to_the_target_release_once() {
        let apiserver = Apiserver::default();
        let path = format!("{CRDS}/{CRD_NAME}");
        apiserver.put(&path, kruise_crd());
        let client = apiserver.client();
        let real = options(false);
        let mut quiet = |_: &str| {};
        let crd: CustomResourceDefinition = serde_json::from_value(kruise_crd()).unwrap();
        let kruise = helm_owner(&crd.metadata);
        let mut m = Migration::new(&client, &real, &mut quiet);
        m.crd_to_target_release(&crd, kruise.as_ref()).await.unwrap();
        let held = apiserver.get(&path).unwrap();
        let annotations = &held["metadata"]["annotations"];
        assert_eq!(
            (&annotations[RELEASE_NAME_ANNOTATION], &annotations[RELEASE_NAMESPACE_ANNOTATION]),
            (&json!("cloneset-operator"), &json!("ops"))
        );
        assert_eq!(annotations["helm.sh/resource-policy"], "keep");
        let moved = "moved CRD clonesets.apps.kruise.io from Helm release kruise-system/kruise to Helm release ops/cloneset-operator";
        assert!(matches!(&m.said.steps[..], [s] if s.done && s.line.starts_with(moved)), "{:?}", m.said.steps);
        let ours: CustomResourceDefinition = serde_json::from_value(held).unwrap();
        let mut m = Migration::new(&client, &real, &mut quiet);
        m.crd_to_target_release(&ours, helm_owner(&ours.metadata).as_ref()).await.unwrap();
        assert!(matches!(&m.said.steps[..], [s] if !s.done && s.line.contains("already belongs")), "{:?}", m.said.steps);
    }

    /// The whole pipeline as a dry run over a cluster Kruise ran on: every step says what it
    /// would do, in order, and nothing held changes.
    #[tokio::test]
    async fn a_dry_run_says_each_step_and_changes_nothing() {
        let apiserver = Apiserver::default();
        apiserver.put(&format!("{DEPLOYMENTS}/{KRUISE_MANAGER_DEPLOYMENT}"), manager(0));
        apiserver.put(&format!("{MUTATING}/{KRUISE_MUTATING_CONFIG}"), kruise_webhooks());
        apiserver.put(&format!("{SECRETS}/sh.helm.release.v1.kruise.v1"), release_record());
        apiserver.put(&format!("{CRDS}/{CRD_NAME}"), kruise_crd());
        let before: Vec<Value> = [DEPLOYMENTS, MUTATING, SECRETS, CRDS].iter().flat_map(|c| apiserver.objects(c)).collect();
        let mut said = Vec::new();
        let steps = run(&apiserver.client(), &options(true), &mut |l| said.push(l.to_string())).await.unwrap();
        let lines: Vec<&str> = steps.iter().map(|s| s.line.as_str()).collect();
        assert_eq!(lines, said.iter().map(String::as_str).collect::<Vec<_>>(), "each step said as it went");
        let starts = [
            "would remove mpod.kb.io",
            "Kruise's Lease kruise-system/kruise-manager: absent",
            "would remove the CRD from Helm release record",
            "would move CRD",
        ];
        assert_eq!(lines.len(), starts.len(), "{lines:#?}");
        for (line, start) in lines.iter().zip(starts) {
            assert!(line.starts_with(start), "{line:?} should start with {start:?}");
        }
        let after: Vec<Value> = [DEPLOYMENTS, MUTATING, SECRETS, CRDS].iter().flat_map(|c| apiserver.objects(c)).collect();
        assert_eq!(before, after);
        assert!(apiserver.take().iter().all(|s| s.method == Method::GET || s.dry_run), "only reads and dry runs");
    }
}
