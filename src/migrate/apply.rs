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
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt as _};

use super::to_kruise::{self, TemplatePlan};
use super::*;
use crate::api::CloneSet;
use crate::core::gojson;

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
    let mut steps = Vec::new();
    let mut record = |steps: &mut Vec<Step>, done: bool, line: String| {
        say(&line);
        steps.push(Step { done, line });
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get_opt(CRD_NAME).await?.ok_or(MigrateError::NoCrd)?;
    // Refused before anything changes when the conversion cannot be taken over.
    let take_over = storage::plan(&crd, &opts.conversion)?;
    let previous_owner = helm_owner(&crd.metadata);

    // 1. Kruise's manager must be gone, or it takes its Lease back and restores its webhooks.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &opts.kruise_namespace);
    if let Some(d) = deployments.get_opt(KRUISE_MANAGER_DEPLOYMENT).await? {
        let replicas = d.spec.and_then(|s| s.replicas).unwrap_or(1);
        if replicas > 0 {
            if !opts.dry_run {
                return Err(MigrateError::KruiseManagerScaledUp { replicas });
            }
            record(
                &mut steps,
                false,
                format!(
                    "Kruise's manager {}/{KRUISE_MANAGER_DEPLOYMENT} runs {replicas} replica(s): the real run refuses until it is scaled to 0",
                    opts.kruise_namespace
                ),
            );
        }
    }
    let write = if opts.dry_run { PatchParams::default().dry_run() } else { PatchParams::default() };
    let replace = PostParams { dry_run: opts.dry_run, field_manager: None };

    // 2. With Kruise 2.0's v1beta1 storage, conversions to this operator at once, before
    // Kruise's Lease lapses (its manager does not release it): reads and writes through the
    // version a CloneSet is not stored in fail from Kruise's stop until then, and this
    // operator's replicas already convert correctly. A Kruise replica still stopping may put its
    // own settings back; that is checked once the Lease has lapsed.
    if let Some(patch) = &take_over.conversion {
        crds.patch(CRD_NAME, &write, &Patch::Json::<()>(patch.clone())).await?;
        let v = verb(opts.dry_run, "pointed", "point");
        record(
            &mut steps,
            true,
            format!(
                "{v} the CRD's conversion from {} to {}, trusting the CAs this operator's replicas published",
                take_over.previous, opts.conversion
            ),
        );
    }

    // 3. Kruise's webhooks on pods and CloneSets, nobody serves them once its Deployment is at zero:
    // cut at once, so pods and CloneSets are not blocked while its Lease lapses. A Kruise replica
    // still stopping restores them from their template; they are cut again after the lapse.
    for (done, line) in cut_webhooks(client, &replace, opts.dry_run).await? {
        record(&mut steps, done, line);
    }

    // 4. Kruise's Lease lapsed: no Kruise replica is left to undo 2 and 3, which are checked.
    let state = wait_for_kruise_lease(client, opts, &mut |l| record(&mut steps, false, l.to_string())).await?;
    record(
        &mut steps,
        false,
        format!("Kruise's Lease {}/{KRUISE_LEASE_NAME}: {}", opts.kruise_namespace, describe(&state, "Kruise's manager")),
    );

    if take_over.conversion.is_some() && !opts.dry_run {
        // Once more if a stopping Kruise replica rewrote it in between (then nothing is left to).
        if let Some(patch) = storage::plan(&crds.get(CRD_NAME).await?, &opts.conversion)?.conversion {
            crds.patch(CRD_NAME, &write, &Patch::Json::<()>(patch)).await?;
            record(
                &mut steps,
                true,
                format!("pointed the CRD's conversion at {} again: a stopping Kruise replica had put its own back", opts.conversion),
            );
        }
        check_conversions(client, &opts.conversion).await?;
        // Kruise's manager rewrites the conversion in every replica, leader or not: one still
        // running elsewhere would have put its own back.
        let now = crds.get(CRD_NAME).await?;
        let config = now.spec.conversion.and_then(|c| c.webhook).and_then(|w| w.client_config).unwrap_or_default();
        if !opts.conversion.is(&config) {
            return Err(MigrateError::ConversionTakenBack { by: crate::webhook::ca_bundle::target_host(&config).unwrap_or_default() });
        }
        record(&mut steps, false, "CloneSets read through apps.kruise.io/v1alpha1 and v1beta1".to_string());
    }

    if !opts.dry_run {
        for (_, line) in cut_webhooks(client, &replace, false).await?.into_iter().filter(|(done, _)| *done) {
            record(&mut steps, true, format!("{line} again: a stopping Kruise replica had restored them"));
        }
    }

    // 5. Out of the previous release's records, so `helm uninstall` of that release keeps it.
    match &previous_owner {
        Some(owner) if *owner != opts.target => {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &owner.namespace);
            let mut records = secrets.list(&ListParams::default().labels(&release_record_selector(owner))).await?.items;
            records.sort_by_key(|s| s.name_any());
            if records.is_empty() {
                record(
                    &mut steps,
                    false,
                    format!(
                        "warning: no Helm release records (Secrets) of release {owner} found; if Helm stores them elsewhere \
                         (HELM_DRIVER), `helm uninstall {}` would still delete the CRD",
                        owner.name
                    ),
                );
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
                secrets.replace(&name, &replace, &secret).await?;
                let v = verb(opts.dry_run, "removed", "remove");
                record(
                    &mut steps,
                    true,
                    format!(
                        "{v} the CRD from Helm release record {}/{name}, so `helm uninstall {}` leaves it",
                        owner.namespace, owner.name
                    ),
                );
            }
            if listed == 0 {
                record(&mut steps, false, format!("Helm release {owner} does not list the CRD (any more)"));
            }
        }
        _ => {}
    }

    // 6. Ownership to our release, kept on uninstall.
    match crd_ownership_patch(&crd.metadata, &opts.target) {
        Some(patch) => {
            crds.patch(CRD_NAME, &write, &Patch::Merge(&patch)).await?;
            let from = previous_owner.as_ref().map_or("no Helm release".to_string(), |o| format!("Helm release {o}"));
            let v = verb(opts.dry_run, "moved", "move");
            record(
                &mut steps,
                true,
                format!("{v} CRD {CRD_NAME} from {from} to Helm release {}, with helm.sh/resource-policy=keep", opts.target),
            );
        }
        None => record(&mut steps, false, format!("CRD {CRD_NAME} already belongs to Helm release {} and is kept", opts.target)),
    }

    // 7. Every CloneSet stored as v1alpha1, then v1alpha1 the only stored version.
    if let Some(stored) = &take_over.stored_elsewhere {
        let plan = storage::plan(&crds.get(CRD_NAME).await?, &opts.conversion)?;
        if let Some(patch) = &plan.storage {
            let before = storage_version_hash(client).await;
            crds.patch(CRD_NAME, &write, &Patch::Json::<()>(patch.clone())).await?;
            let v = verb(opts.dry_run, "made", "make");
            record(
                &mut steps,
                true,
                format!("{v} {}/{} the CRD's storage version", crate::api::conversion::GROUP, crate::api::crd::STORAGE_VERSION),
            );
            if !opts.dry_run {
                wait_for_new_storage(client, before).await?;
            }
        }
        if opts.dry_run {
            record(
                &mut steps,
                true,
                format!("would rewrite every CloneSet as v1alpha1 (some are stored as {stored}) and set the CRD's storedVersions"),
            );
        } else {
            let (rewritten, failed) = rewrite_clonesets(client).await?;
            record(&mut steps, true, format!("rewrote {rewritten} CloneSet(s), so each is stored as v1alpha1"));
            if !failed.is_empty() {
                return Err(MigrateError::NotRewritten { clonesets: failed });
            }
            crds.patch_status(CRD_NAME, &write, &Patch::Merge(storage::stored_versions_patch())).await?;
            record(&mut steps, true, format!("set the CRD's storedVersions to [{}] (was {stored} too)", crate::api::crd::STORAGE_VERSION));
        }
    }
    Ok(steps)
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

/// Prepares the cluster for Kruise's manager (see [`super::to_kruise`]): once this operator no
/// longer leads, stores each CloneSet's template as Kruise's webhook would have, then gives the CRD
/// to Kruise's release. Every CloneSet is tried; the ones that failed make the error (run again).
pub async fn run_to_kruise(client: &Client, opts: &ToKruiseOptions, say: &mut dyn FnMut(&str)) -> Result<Vec<Step>, MigrateError> {
    let mut steps = Vec::new();
    let mut record = |steps: &mut Vec<Step>, done: bool, line: String| {
        say(&line);
        steps.push(Step { done, line });
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get_opt(CRD_NAME).await?.ok_or(MigrateError::NoCrd)?;

    // 1. This operator must have stopped, or it would reconcile beside Kruise's manager.
    let lease = LeaseRef { namespace: &opts.operator_lease_namespace, name: &opts.operator_lease_name, whose: "this operator's" };
    let state = wait_for_lease(client, &lease, opts.dry_run, opts.lease_timeout, &mut |l| record(&mut steps, false, l.to_string()))
        .await?
        .map_err(|(holder, waited)| MigrateError::OperatorStillLeads {
            lease: format!("{}/{}", lease.namespace, lease.name),
            holder,
            waited,
        })?;
    if state == LeaseState::Absent {
        record(
            &mut steps,
            false,
            format!(
                "warning: no Lease {}/{}: if this operator runs elsewhere (another --leader-election-namespace, or \
                 without leader election), stop it before starting Kruise's manager",
                lease.namespace, lease.name
            ),
        );
    } else {
        record(
            &mut steps,
            false,
            format!("this operator's Lease {}/{}: {}", lease.namespace, lease.name, describe(&state, "the operator")),
        );
    }

    // 2. Templates as Kruise's webhook stores them.
    let clonesets: Api<CloneSet> = match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let write = if opts.dry_run { PatchParams::default().dry_run() } else { PatchParams::default() };
    let mut failed = Vec::new();
    let mut listed = clonesets.list(&ListParams::default()).await?.items;
    listed.sort_by_key(|cs| (cs.namespace().unwrap_or_default(), cs.name_any()));
    for cs in &listed {
        let ns = cs.namespace().unwrap_or_default();
        let name = format!("{ns}/{}", cs.name_any());
        if cs.metadata.deletion_timestamp.is_some() {
            record(&mut steps, false, format!("CloneSet {name}: being deleted, left alone"));
            continue;
        }
        let update_revision = cs.status.as_ref().map(|s| s.update_revision.clone()).filter(|r| !r.is_empty());
        let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), &ns);
        let read = match &update_revision {
            Some(r) => revisions.get_opt(r).await.map(|r| r.and_then(|r| r.data).map(|d| gojson::encode_value(&d.0))),
            None => Ok(None),
        };
        let stored = serde_json::to_value(&cs.spec.template);
        let (data, stored) = match (read, stored) {
            (Ok(data), Ok(stored)) => (data, stored),
            (Err(e), _) => {
                record(&mut steps, false, format!("CloneSet {name}: error: its update revision cannot be read ({e}); run again"));
                failed.push(name);
                continue;
            }
            (_, Err(e)) => {
                record(&mut steps, false, format!("CloneSet {name}: error: its template cannot be read ({e})"));
                failed.push(name);
                continue;
            }
        };
        let revision = update_revision.as_deref().unwrap_or_default();
        match to_kruise::plan_template(&stored, data.as_deref()) {
            TemplatePlan::Keep => {
                record(&mut steps, false, format!("CloneSet {name}: template already hashes to update revision {revision}"))
            }
            TemplatePlan::NewRevisionAnyway => {
                let outcome = to_kruise::revision_outcome(update_revision.as_deref(), data.is_some(), false);
                record(&mut steps, false, format!("CloneSet {name}: template already has Kruise's defaults; {outcome}"))
            }
            TemplatePlan::Write { template, keeps_revision } => {
                let resource_version = cs.resource_version().unwrap_or_default();
                let patch = to_kruise::template_patch(&resource_version, &template);
                let outcome = to_kruise::revision_outcome(update_revision.as_deref(), data.is_some(), keeps_revision);
                match Api::<CloneSet>::namespaced(client.clone(), &ns).patch(&cs.name_any(), &write, &Patch::<()>::Json(patch)).await {
                    Ok(_) => {
                        let v = verb(opts.dry_run, "stored", "store");
                        record(&mut steps, true, format!("CloneSet {name}: {v} its template with Kruise's defaults; {outcome}"));
                    }
                    Err(e) => {
                        record(&mut steps, false, format!("CloneSet {name}: error: its template was not written ({e}); run again"));
                        failed.push(name);
                    }
                }
            }
        }
    }

    // 3. The CRD back to Kruise's release, so `helm upgrade` of it adopts the CRD again. A run
    // over one namespace leaves the cluster-wide CRD as it is; after a failed write the CRD stays
    // this operator's, so Helm refuses to reinstall Kruise until a run succeeds.
    match crd_ownership_patch(&crd.metadata, &opts.target) {
        _ if !failed.is_empty() => {
            record(&mut steps, false, format!("CRD {CRD_NAME} left as it is: {} CloneSet(s) not prepared", failed.len()))
        }
        _ if opts.namespace.is_some() => {
            record(&mut steps, false, format!("CRD {CRD_NAME} left as it is: --namespace prepares that namespace's CloneSets only"))
        }
        Some(patch) => {
            crds.patch(CRD_NAME, &write, &Patch::Merge(&patch)).await?;
            let v = verb(opts.dry_run, "gave", "give");
            record(&mut steps, true, format!("{v} CRD {CRD_NAME} to Helm release {}, with helm.sh/resource-policy=keep", opts.target));
        }
        None => record(&mut steps, false, format!("CRD {CRD_NAME} already belongs to Helm release {} and is kept", opts.target)),
    }
    if !failed.is_empty() {
        return Err(MigrateError::TemplatesNotWritten { clonesets: failed });
    }
    Ok(steps)
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

fn describe(state: &LeaseState, manager: &str) -> String {
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
struct LeaseRef<'a> {
    namespace: &'a str,
    name: &'a str,
    whose: &'a str,
}

/// Polls a Lease until it is no longer held (client-go's rule: the same record for a whole lease
/// duration on our clock). A dry run looks once and does not wait. `Ok(Err((holder, waited)))`
/// when it is still held after `timeout`.
async fn wait_for_lease(
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
