//! The IO of `migrate`: reads the cluster, applies the decisions of [`super`] in a crash-safe
//! order (each step is a no-op when already done), and says what it did.
//!
//! Order: stop only once Kruise's manager is gone (Deployment at zero, Lease lapsed); take the CRD
//! out of Kruise's release records before moving its ownership (a second run still knows whose
//! records to clean); then cut Kruise's pod and CloneSet webhooks.

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
    let state = wait_for_kruise_lease(client, opts, &mut |l| record(&mut steps, false, l.to_string())).await?;
    record(&mut steps, false, format!("Kruise's Lease {}/{KRUISE_LEASE_NAME}: {}", opts.kruise_namespace, describe(&state)));

    let write = if opts.dry_run { PatchParams::default().dry_run() } else { PatchParams::default() };
    let replace = PostParams { dry_run: opts.dry_run, field_manager: None };

    // 2. Out of the previous release's records, so `helm uninstall` of that release keeps it.
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

    // 3. Ownership to our release, kept on uninstall.
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

    // 4. Kruise's webhooks on pods and CloneSets: nobody serves them any more.
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(mut config) = mutating.get_opt(KRUISE_MUTATING_CONFIG).await? {
        let hooks = config.webhooks.take().unwrap_or_default();
        let (remove, keep) = split_webhooks(hooks.iter().map(|w| (w.name.as_str(), w.rules.as_deref().unwrap_or_default())));
        config.webhooks = Some(hooks.into_iter().filter(|w| !remove.contains(&w.name)).collect());
        if !remove.is_empty() {
            mutating.replace(KRUISE_MUTATING_CONFIG, &replace, &config).await?;
        }
        record_cut(&mut steps, &mut record, opts.dry_run, KRUISE_MUTATING_CONFIG, &remove, &keep);
    }
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(mut config) = validating.get_opt(KRUISE_VALIDATING_CONFIG).await? {
        let hooks = config.webhooks.take().unwrap_or_default();
        let (remove, keep) = split_webhooks(hooks.iter().map(|w| (w.name.as_str(), w.rules.as_deref().unwrap_or_default())));
        config.webhooks = Some(hooks.into_iter().filter(|w| !remove.contains(&w.name)).collect());
        if !remove.is_empty() {
            validating.replace(KRUISE_VALIDATING_CONFIG, &replace, &config).await?;
        }
        record_cut(&mut steps, &mut record, opts.dry_run, KRUISE_VALIDATING_CONFIG, &remove, &keep);
    }
    Ok(steps)
}

fn record_cut(
    steps: &mut Vec<Step>,
    record: &mut impl FnMut(&mut Vec<Step>, bool, String),
    dry_run: bool,
    config: &str,
    remove: &[String],
    keep: &[String],
) {
    if remove.is_empty() {
        record(steps, false, format!("{config}: no pod or CloneSet webhook left ({} others kept)", keep.len()));
    } else {
        let v = verb(dry_run, "removed", "remove");
        record(steps, true, format!("{v} {} from {config} ({} others, for Kruise's other kinds, kept)", remove.join(", "), keep.len()));
    }
}

fn describe(state: &LeaseState) -> String {
    match state {
        LeaseState::Absent => "absent (Kruise's manager is not running)".into(),
        LeaseState::Released => "released (Kruise's manager stopped)".into(),
        LeaseState::Lapsed => "lapsed (Kruise's manager stopped)".into(),
        LeaseState::Held { holder, at_most } => format!("held by {holder} (for at most {}s more unless renewed)", at_most.as_secs()),
    }
}

/// Polls Kruise's Lease until it is no longer held (client-go's rule: the same record for a
/// whole lease duration on our clock). A dry run looks once and does not wait.
async fn wait_for_kruise_lease(client: &Client, opts: &Options, say: &mut dyn FnMut(&str)) -> Result<LeaseState, MigrateError> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &opts.kruise_namespace);
    let started = tokio::time::Instant::now();
    let mut seen: Option<(String, tokio::time::Instant)> = None;
    let mut announced = false;
    loop {
        let lease = leases.get_opt(KRUISE_LEASE_NAME).await?;
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
        let LeaseState::Held { holder, at_most } = &state else { return Ok(state) };
        if opts.dry_run {
            return Ok(state);
        }
        if started.elapsed() >= opts.lease_timeout {
            return Err(MigrateError::KruiseStillLeads { holder: holder.clone(), waited: started.elapsed() });
        }
        if !announced {
            say(&format!(
                "waiting up to {}s for Kruise's Lease {}/{KRUISE_LEASE_NAME} (held by {holder}) to lapse",
                opts.lease_timeout.as_secs(),
                opts.kruise_namespace
            ));
            announced = true;
        }
        tokio::time::sleep((*at_most).clamp(Duration::from_millis(200), Duration::from_secs(1))).await;
    }
}
