//! `cloneset-operator migrate` on a cluster that looks exactly like an OpenKruise v1.9.0 Helm
//! install: a Helm release `kruise` whose manifest holds the CloneSet CRD and Kruise's webhook
//! configurations (pointing at `kruise-webhook-service`, which has no endpoints: the manager is
//! stopped), Kruise's Lease just renewed, and a CloneSet mid-rollout with the revisions Kruise
//! made (e2e/fixtures/kruise-v1.9.0) and its pods. It runs on a private control plane: it
//! changes the CRD and installs webhooks that would block every other test's pods.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cloneset_operator::api::{CloneSet, keys};
use cloneset_operator::migrate::{KRUISE_MUTATING_CONFIG, KRUISE_VALIDATING_CONFIG};
use e2e::chart::repo_root;
use e2e::testenv::{Operator, OperatorOptions, wait_until, watch_until};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(120);
const CRD: &str = "clonesets.apps.kruise.io";
const NS: &str = "takeover";
/// Where `migrate`'s own ServiceAccounts live, as its chart's Job would run them.
const MIGRATE_NS: &str = "cloneset-migrate";
/// The migrate chart's releases (and so ServiceAccounts): one each way.
const MIGRATE_RELEASES: [(&str, bool); 2] = [("cloneset-migrate", false), ("cloneset-migrate-back", true)];

/// A control plane of this test's own, stopped on drop.
struct PrivateCluster {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl PrivateCluster {
    async fn up(name: &str) -> Self {
        let dir = repo_root().join("target").join(name);
        let (state, _) = e2e::cluster::up(&e2e::testenv::test_up_options(&dir)).await.expect("the private control plane starts");
        Self { dir, kubeconfig: state.kubeconfig }
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = e2e::cluster::down(&self.dir);
    }
}

fn helm_bin() -> PathBuf {
    e2e::chart::helm_bin().unwrap().to_path_buf()
}

/// Runs a binary with the private cluster's kubeconfig, off the async runtime.
async fn run(bin: PathBuf, args: Vec<String>, kubeconfig: &Path) -> Output {
    let home = repo_root().join("target/helm-home");
    let kubeconfig = kubeconfig.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

async fn run_ok(bin: PathBuf, args: &[&str], kubeconfig: &Path) -> String {
    let out = run(bin.clone(), args.iter().map(|s| s.to_string()).collect(), kubeconfig).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{} {} failed:\n{stdout}\n{}", bin.display(), args.join(" "), String::from_utf8_lossy(&out.stderr));
    stdout
}

fn to_yaml(v: &Value) -> String {
    cloneset_operator::api::crd::to_yaml(v).unwrap()
}

/// A chart shaped like Kruise's (release `kruise`, CRD as a template, Kruise's webhook
/// configuration names and the entries this operator replaces plus some it must keep, a webhook
/// Service with no endpoints, the manager Deployment stopped). Written here, not copied from
/// Kruise: only the names, rules and failure policies matter. `v2`: as Kruise 2.0 has it, the
/// CRD serving v1beta1 too, storing it, and converting through Kruise's webhook Service.
fn write_kruise_like_chart(dir: &Path, v2: bool) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    let version = if v2 { "2.0.0" } else { "1.9.0" };
    std::fs::write(dir.join("Chart.yaml"), format!("apiVersion: v1\nname: kruise\nversion: {version}\nappVersion: {version}\n")).unwrap();
    std::fs::write(dir.join("values.yaml"), "webhooks: false\n").unwrap();
    // Kruise's CRD differs from ours; a missing printer column stands for that difference.
    let mut crd = serde_json::to_value(cloneset_operator::api::crd::crd()).unwrap();
    if v2 {
        crd = serde_json::to_value(cloneset_operator::api::crd::crd_with_v1beta1()).unwrap();
        for v in crd["spec"]["versions"].as_array_mut().unwrap() {
            v["storage"] = json!(v["name"] == "v1beta1");
        }
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let kruise_ca = cloneset_operator::webhook::certs::issue(
            &["kruise-webhook-service.kruise-system.svc".into()],
            now,
            Duration::from_secs(86400),
            "kruise",
        )
        .unwrap()
        .ca_pem;
        crd["spec"]["conversion"]["webhook"]["clientConfig"] = json!({
            "service": {"namespace": "kruise-system", "name": "kruise-webhook-service", "path": "/convert", "port": 443},
            "caBundle": k8s_openapi::ByteString(kruise_ca.into_bytes()),
        });
    }
    crd["metadata"]["annotations"] = json!({"controller-gen.kubebuilder.io/version": "v0.17.3"});
    crd["spec"]["versions"][0]["additionalPrinterColumns"].as_array_mut().unwrap().retain(|c| c["name"] != "UPDATED_AVAILABLE");
    std::fs::write(dir.join("templates/apps.kruise.io_clonesets.yaml"), to_yaml(&crd)).unwrap();
    let svc = |path: &str| json!({"service": {"name": "kruise-webhook-service", "namespace": "kruise-system", "path": path}});
    let selector = json!({"matchExpressions": [
        {"key": "control-plane", "operator": "NotIn", "values": ["openkruise"]},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]});
    let hook = |name: &str, group: &str, resource: &str, ops: &[&str], policy: &str| {
        json!({"name": name, "admissionReviewVersions": ["v1", "v1beta1"], "clientConfig": svc(&format!("/{name}")),
               "failurePolicy": policy, "sideEffects": "None", "timeoutSeconds": 30, "namespaceSelector": selector,
               "rules": [{"apiGroups": [group], "apiVersions": ["v1", "v1alpha1"], "operations": ops, "resources": [resource]}]})
    };
    let mutating = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": KRUISE_MUTATING_CONFIG, "annotations": {"template": ""}},
        "webhooks": [hook("mpod.kb.io", "", "pods", &["CREATE"], "Fail"),
                     hook("madvancedcronjob.kb.io", "apps.kruise.io", "advancedcronjobs", &["CREATE", "UPDATE"], "Fail"),
                     hook("mcloneset.kb.io", "apps.kruise.io", "clonesets", &["CREATE", "UPDATE"], "Fail")]});
    let validating = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": KRUISE_VALIDATING_CONFIG, "annotations": {"template": ""}},
        "webhooks": [hook("vbuiltindeployment.kb.io", "apps", "deployments", &["DELETE"], "Ignore"),
                     hook("vpod.kb.io", "", "pods", &["UPDATE", "DELETE"], "Fail"),
                     hook("vpodeviction.kb.io", "", "pods/eviction", &["CREATE"], "Fail"),
                     hook("vcloneset.kb.io", "apps.kruise.io", "clonesets", &["CREATE", "UPDATE", "DELETE"], "Fail"),
                     hook("vsidecarset.kb.io", "apps.kruise.io", "sidecarsets", &["CREATE", "UPDATE"], "Fail")]});
    std::fs::write(
        dir.join("templates/webhookconfiguration.yaml"),
        format!("{{{{- if .Values.webhooks }}}}\n{}---\n{}{{{{- end }}}}\n", to_yaml(&mutating), to_yaml(&validating)),
    )
    .unwrap();
    let manager = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kruise-system", "labels": {"control-plane": "openkruise"}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kruise-webhook-service", "namespace": "kruise-system"},
               "spec": {"selector": {"control-plane": "controller-manager"}, "ports": [{"port": 443, "targetPort": 9876}]}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "kruise-controller-manager", "namespace": "kruise-system"},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"control-plane": "controller-manager"}},
                        "template": {"metadata": {"labels": {"control-plane": "controller-manager"}},
                                     // Scaled to zero and never run: the image is a placeholder.
                                     "spec": {"containers": [{"name": "manager", "image": "registry.invalid/stopped-manager:0"}]}}}}),
    ];
    std::fs::write(dir.join("templates/manager.yaml"), manager.iter().map(to_yaml).collect::<Vec<_>>().join("---\n")).unwrap();
}

/// `helm install kruise <chart>`, and its CRD Established.
async fn install_kruise_like(chart: &str, kc: &Path, client: &Client) {
    run_ok(helm_bin(), &["install", "kruise", chart, "--namespace", "default"], kc).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_until(T, "the CRD Established", || async {
        let c = crds.get(CRD).await?;
        Ok(c.status.and_then(|s| s.conditions).unwrap_or_default().iter().any(|c| c.type_ == "Established" && c.status == "True"))
    })
    .await
    .unwrap();
}

/// Kruise's Lease as its manager leaves it when stopped: renewed a moment ago.
async fn kruises_lease_just_renewed(client: &Client) {
    let now = k8s_openapi::jiff::Timestamp::now();
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "kruise-manager", "namespace": "kruise-system"},
        "spec": {"holderIdentity": "kruise-controller-manager-6d5f7c9b8-x2x9q_0c3e", "leaseDurationSeconds": 15,
                 "acquireTime": now.to_string(), "renewTime": now.to_string(), "leaseTransitions": 0}}))
    .unwrap();
    Api::<Lease>::namespaced(client.clone(), "kruise-system").create(&PostParams::default(), &lease).await.unwrap();
}

fn fixture(name: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(repo_root().join("e2e/fixtures/kruise-v1.9.0").join(name)).unwrap()).unwrap()
}

fn strip_server_fields(obj: &mut Value) {
    let meta = obj["metadata"].as_object_mut().unwrap();
    for k in ["resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"] {
        meta.remove(k);
    }
}

/// The CloneSet `canary` as Kruise left it: 5 replicas, partition 3, 2 pods on the update
/// revision and 3 on the current one, every pod Ready.
async fn create_kruise_made_cloneset(client: &Client) {
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), NS);
    let revs: Api<ControllerRevision> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut cs = fixture("cloneset-partition-mid-rollout.yaml");
    let mut status = cs.as_object_mut().unwrap().remove("status").unwrap();
    strip_server_fields(&mut cs);
    let created = clonesets.create(&PostParams::default(), &serde_json::from_value(cs).unwrap()).await.unwrap();
    let owner = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "canary", "uid": created.metadata.uid,
                       "controller": true, "blockOwnerDeletion": true});
    let mut templates = BTreeMap::new();
    for mut rev in fixture("controllerrevisions-canary.yaml")["items"].as_array().unwrap().clone() {
        strip_server_fields(&mut rev);
        rev["metadata"]["ownerReferences"] = json!([owner]);
        let mut template = rev["data"]["spec"]["template"].clone();
        template.as_object_mut().unwrap().remove("$patch");
        templates.insert(rev["metadata"]["name"].as_str().unwrap().to_string(), template);
        revs.create(&PostParams::default(), &serde_json::from_value(rev).unwrap()).await.unwrap();
    }
    let (current, update) =
        (status["currentRevision"].as_str().unwrap().to_string(), status["updateRevision"].as_str().unwrap().to_string());
    let on = [("c1xk2", &current), ("c2pq7", &current), ("c3zr9", &current), ("u1mb4", &update), ("u2hw8", &update)];
    for (id, revision) in on {
        let hash = revision.trim_start_matches("canary-");
        let template = &templates[revision.as_str()];
        let mut spec = template["spec"].clone();
        spec["readinessGates"] = json!([{"conditionType": keys::INPLACE_UPDATE_READY}]);
        let pod = json!({"metadata": {"name": format!("canary-{id}"), "generateName": "canary-",
            "labels": {"app": "canary", keys::CONTROLLER_REVISION_HASH: revision, keys::POD_TEMPLATE_HASH: hash,
                       keys::CLONESET_INSTANCE_ID: id, keys::LIFECYCLE_STATE: "Normal"},
            "annotations": {keys::LIFECYCLE_TIMESTAMP: "2026-11-22T14:27:35Z"}, "ownerReferences": [owner]}, "spec": spec});
        pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
        let ready = json!({"status": {"conditions": [{"type": keys::INPLACE_UPDATE_READY, "status": "True"}]}});
        pods.patch_status(&format!("canary-{id}"), &PatchParams::default(), &Patch::Strategic(ready)).await.unwrap();
    }
    status["observedGeneration"] = json!(created.metadata.generation);
    status.as_object_mut().unwrap().remove("conditions");
    clonesets.patch_status("canary", &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await.unwrap();
    wait_until(T, "Kruise's 5 pods Ready", || async {
        let list = pods.list(&ListParams::default()).await?.items;
        Ok(list.len() == 5 && list.iter().all(|p| e2e::workload::condition(p, "Ready").as_deref() == Some("True")))
    })
    .await
    .unwrap();
}

/// Each pod's UID and container restart counts.
async fn pod_identities(pods: &Api<Pod>) -> BTreeMap<String, (String, i32)> {
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            let restarts =
                p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum());
            (p.name_any(), (p.uid().unwrap(), restarts))
        })
        .collect()
}

async fn revision_uids(revs: &Api<ControllerRevision>) -> Vec<String> {
    let mut uids: Vec<String> = revs.list(&ListParams::default()).await.unwrap().items.iter().map(|r| r.uid().unwrap()).collect();
    uids.sort();
    uids
}

/// Creates a bare pod in `ns`; the error, if the apiserver refuses it.
async fn create_pod(client: &Client, ns: &str, name: &str) -> Result<(), String> {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await.map(|_| ()).map_err(|e| e.to_string())
}

/// A kubeconfig with the permissions `charts/cloneset-operator-migrate` gives its Job in release
/// `release` (`migrate`, or with `to_kruise` `migrate --to-kruise`), installed with `client`.
async fn migrate_kubeconfig(client: &Client, admin: &Path, release: &str, to_kruise: bool, extra: &[&str]) -> PathBuf {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(MIGRATE_NS).await.unwrap().is_none() {
        namespaces
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": MIGRATE_NS}})).unwrap())
            .await
            .unwrap();
    }
    let mut values = vec![format!("toKruise={to_kruise}")];
    values.extend(extra.iter().map(|v| v.to_string()));
    let account =
        e2e::chart::install_identity(client, e2e::chart::MIGRATE_CHART_NAME, release, MIGRATE_NS, &values, &["rbac.yaml"]).await.unwrap();
    // Beside the admin's, in the private cluster's directory: each test has its own cluster.
    let out = admin.with_file_name(format!("migrate-{release}.kubeconfig"));
    e2e::chart::account_kubeconfig(admin, client, MIGRATE_NS, &account, &out).await.unwrap();
    out
}

/// Every request `migrate` sent with its chart's ServiceAccounts (the control plane's audit log)
/// against what the chart grants them: each call granted, each grant used, nothing refused.
fn migrate_calls_match_its_chart(cluster_dir: &Path, releases: &[(&str, bool)], extra: &[&str]) {
    let log = std::fs::read_to_string(e2e::cluster::audit_log(cluster_dir)).unwrap();
    let users: Vec<String> = releases.iter().map(|(r, _)| format!("system:serviceaccount:{MIGRATE_NS}:{r}")).collect();
    let (calls, _) = e2e::rbac::calls(&log, |u| users.iter().any(|x| x == u)).unwrap();
    let mut grants = BTreeSet::new();
    for (release, to_kruise) in releases {
        let set = format!("toKruise={to_kruise}");
        let mut args = vec!["--set", &set, "--show-only", "templates/rbac.yaml"];
        for v in extra {
            args.extend(["--set", v]);
        }
        let docs = e2e::chart::render_chart(e2e::chart::MIGRATE_CHART_NAME, release, MIGRATE_NS, &args).unwrap();
        grants.extend(e2e::rbac::grants(&docs).unwrap());
    }
    let report = e2e::rbac::compare(&grants, &calls);
    println!("migrate's requests against its chart's RBAC: {report}");
    assert!(report.requests > 0 && report.is_clean(), "{report}");
}

fn webhook_names(hooks: impl IntoIterator<Item = String>) -> Vec<String> {
    hooks.into_iter().collect()
}

#[tokio::test]
async fn migrate_hands_a_kruise_helm_install_over_without_restarting_a_pod() {
    let cluster = PrivateCluster::up("migrate-cluster").await;
    let kc = cluster.kubeconfig.clone();
    let client = e2e::cluster::client_for(&kc).await.unwrap();
    let helm = helm_bin();
    let operator_bin = e2e::cluster::sibling_binary("cloneset-operator").unwrap();
    let kruise_chart = repo_root().join("target/migrate-e2e/kruise-chart");
    write_kruise_like_chart(&kruise_chart, false);
    let kruise_chart = kruise_chart.to_str().unwrap().to_string();

    // Kruise's install: CRD first (the CloneSet, revisions and pods are made while no webhook is
    // in the way), then the webhooks as its manager would have them, then the manager stopped.
    install_kruise_like(&kruise_chart, &kc, &client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [NS, "elsewhere"] {
        namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap()).await.unwrap();
    }
    wait_until(T, "default ServiceAccounts", || async {
        let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "elsewhere");
        Ok(sa.get_opt("default").await?.is_some()
            && Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), NS).get_opt("default").await?.is_some())
    })
    .await
    .unwrap();
    create_kruise_made_cloneset(&client).await;
    run_ok(helm.clone(), &["upgrade", "kruise", &kruise_chart, "--namespace", "default", "--set", "webhooks=true"], &kc).await;
    kruises_lease_just_renewed(&client).await;

    // The dead webhook blocks pods everywhere: the state this test must end. The apiserver finds
    // the webhook's Service without endpoints and fails there, with no connection attempted
    // (the local control plane routes webhooks to endpoints, never to a ClusterIP).
    let blocked = create_pod(&client, "elsewhere", "before").await.expect_err("Kruise's dead pod webhook blocks pod creation");
    assert!(blocked.contains("mpod.kb.io"), "{blocked}");
    assert!(blocked.contains(r#"no endpoints available for service "kruise-webhook-service""#), "{blocked}");

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let revs: Api<ControllerRevision> = Api::namespaced(client.clone(), NS);
    let pods_before = pod_identities(&pods).await;
    let revs_before = revision_uids(&revs).await;
    assert_eq!((pods_before.len(), revs_before.len()), (5, 2));
    let crd_before = crds.get(CRD).await.unwrap();
    assert_eq!(crd_before.annotations().get("meta.helm.sh/release-name").map(String::as_str), Some("kruise"));

    // `migrate` runs with exactly the permissions its chart gives its Job.
    let migrate_kc = migrate_kubeconfig(&client, &kc, MIGRATE_RELEASES[0].0, false, &[]).await;
    let back_kc = migrate_kubeconfig(&client, &kc, MIGRATE_RELEASES[1].0, true, &[]).await;

    // Dry run: says what it would do, changes nothing.
    let op = operator_bin.clone();
    let dry = run_ok(op.clone(), &["migrate", "--dry-run"], &migrate_kc).await;
    for expected in [
        "would remove the CRD from Helm release record default/sh.helm.release.v1.kruise.v1",
        "would remove the CRD from Helm release record default/sh.helm.release.v1.kruise.v2",
        "would move CRD clonesets.apps.kruise.io from Helm release default/kruise to Helm release default/cloneset-operator",
        "would remove mpod.kb.io, mcloneset.kb.io from kruise-mutating-webhook-configuration",
        "would remove vpod.kb.io, vpodeviction.kb.io, vcloneset.kb.io from kruise-validating-webhook-configuration",
    ] {
        assert!(dry.contains(expected), "dry run lacks {expected:?}:\n{dry}");
    }
    assert_eq!(crds.get(CRD).await.unwrap().metadata.resource_version, crd_before.metadata.resource_version, "dry run changed the CRD");
    assert!(create_pod(&client, "elsewhere", "dry").await.is_err(), "dry run removed the webhook");

    // The real run waits for Kruise's Lease, then hands over.
    let started = Instant::now();
    let out = run_ok(op.clone(), &["migrate"], &migrate_kc).await;
    let took = started.elapsed();
    println!("migrate took {took:?}:\n{out}");
    assert!(out.contains("waiting up to 120s for Kruise's Lease kruise-system/kruise-manager"), "{out}");
    assert!(took >= Duration::from_secs(10), "did not wait for the Lease to lapse: {took:?}");
    assert!(out.contains("migrate: done, 5 change(s)"), "{out}");
    // Pods were unblocked at once, not after the Lease lapsed.
    let at = |needle: &str| out.find(needle).unwrap_or_else(|| panic!("{needle:?} not in:\n{out}"));
    assert!(at("removed mpod.kb.io, mcloneset.kb.io") < at("Kruise's Lease kruise-system/kruise-manager: lapsed"), "{out}");
    let crd = crds.get(CRD).await.unwrap();
    for (k, v) in [
        ("meta.helm.sh/release-name", "cloneset-operator"),
        ("meta.helm.sh/release-namespace", "default"),
        ("helm.sh/resource-policy", "keep"),
    ] {
        assert_eq!(crd.annotations().get(k).map(String::as_str), Some(v), "{k}");
    }
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone()).get(KRUISE_MUTATING_CONFIG).await.unwrap();
    assert_eq!(webhook_names(mutating.webhooks.unwrap_or_default().into_iter().map(|w| w.name)), ["madvancedcronjob.kb.io"]);
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone()).get(KRUISE_VALIDATING_CONFIG).await.unwrap();
    assert_eq!(
        webhook_names(validating.webhooks.unwrap_or_default().into_iter().map(|w| w.name)),
        ["vbuiltindeployment.kb.io", "vsidecarset.kb.io"]
    );
    create_pod(&client, "elsewhere", "after").await.expect("pod creation elsewhere is no longer blocked");

    // Twice is safe.
    let again = run_ok(op.clone(), &["migrate"], &migrate_kc).await;
    assert!(again.contains("nothing to change: already migrated"), "{again}");

    // Kruise's release goes; the CRD, the CloneSet and its pods stay.
    run_ok(helm.clone(), &["uninstall", "kruise", "--namespace", "default", "--wait"], &kc).await;
    assert!(crds.get_opt(CRD).await.unwrap().is_some(), "helm uninstall kruise deleted the CRD");
    assert!(Api::<MutatingWebhookConfiguration>::all(client.clone()).get_opt(KRUISE_MUTATING_CONFIG).await.unwrap().is_none());

    // Our release adopts the CRD and upgrades it to our schema (the printer column Kruise's lacks).
    let chart = repo_root().join("charts/cloneset-operator");
    run_ok(
        helm.clone(),
        &["install", "cloneset-operator", chart.to_str().unwrap(), "--namespace", "default", "--set", "manager.replicas=0"],
        &kc,
    )
    .await;
    let columns = |crd: &CustomResourceDefinition| -> Vec<String> {
        crd.spec.versions[0].additional_printer_columns.iter().flatten().map(|c| c.name.clone()).collect()
    };
    assert!(columns(&crds.get(CRD).await.unwrap()).contains(&"UPDATED_AVAILABLE".to_string()), "the CRD was not upgraded");

    // The CRD upgrade path: a chart whose CRD changed, `helm upgrade`.
    let changed = repo_root().join("target/migrate-e2e/chart-with-changed-crd");
    let _ = std::fs::remove_dir_all(&changed);
    copy_dir(&chart, &changed);
    let crd_file = changed.join("files/apps.kruise.io_clonesets.yaml");
    let mut crd_doc: Value = serde_saphyr::from_str(&std::fs::read_to_string(&crd_file).unwrap()).unwrap();
    crd_doc["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "UPGRADE_TEST", "type": "string", "jsonPath": ".metadata.name"}));
    std::fs::write(&crd_file, to_yaml(&crd_doc)).unwrap();
    run_ok(
        helm.clone(),
        &["upgrade", "cloneset-operator", changed.to_str().unwrap(), "--namespace", "default", "--set", "manager.replicas=0"],
        &kc,
    )
    .await;
    assert!(columns(&crds.get(CRD).await.unwrap()).contains(&"UPGRADE_TEST".to_string()), "helm upgrade did not change the CRD");

    // Our manager takes over: not one pod replaced or restarted, no new revision.
    let opts = OperatorOptions { cluster: Some(kc.clone()), ..Default::default() };
    let operator = Operator::start_with(NS, opts).await.unwrap();
    wait_until(T, "the CloneSet reconciled and the queue empty", || async {
        Ok(e2e::bench::reconciled_and_idle(&operator.metrics().await?, 1.0))
    })
    .await
    .unwrap();
    assert_eq!(pod_identities(&pods).await, pods_before, "a pod was replaced or restarted\n{}", operator.log_tail(30));
    assert_eq!(revision_uids(&revs).await, revs_before, "a revision was created or replaced");

    // And a rollout completes: the last partition step.
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), NS);
    clonesets.patch("canary", &PatchParams::default(), &Patch::Merge(json!({"spec": {"updateStrategy": {"partition": 0}}}))).await.unwrap();
    let done = watch_until(&clonesets, "canary", T, |cs: &CloneSet| {
        let s = cs.status.clone().unwrap_or_default();
        s.observed_generation == cs.metadata.generation.unwrap_or(0)
            && s.updated_ready_replicas == 5
            && s.current_revision == s.update_revision
    })
    .await
    .unwrap_or_else(|e| panic!("rollout: {e:#}\n{}", operator.log_tail(40)));
    assert_eq!(done.status.unwrap().update_revision, "canary-568d47f6b7", "rolled out to Kruise's update revision");
    assert_eq!(revision_uids(&revs).await, revs_before, "the rollout reused Kruise's revision");

    // Going back. A CloneSet created under this operator has its template stored as written.
    let mut fresh = e2e::workload::manifest("fresh", 2, "nginx:1.27", json!({}));
    fresh.spec.template.spec.as_mut().unwrap().containers[0].ports =
        Some(vec![serde_json::from_value(json!({"containerPort": 8080})).unwrap()]);
    clonesets.create(&PostParams::default(), &fresh).await.unwrap();
    watch_until(&clonesets, "fresh", T, |cs: &CloneSet| cs.status.as_ref().is_some_and(|s| s.updated_ready_replicas == 2))
        .await
        .unwrap_or_else(|e| panic!("fresh: {e:#}\n{}", operator.log_tail(40)));
    wait_until(T, "no pod left terminating from the rollout", || async {
        Ok(pods.list(&ListParams::default()).await?.items.iter().all(|p| p.metadata.deletion_timestamp.is_none()))
    })
    .await
    .unwrap();
    drop(operator);
    let pods_before = pod_identities(&pods).await;
    let revs_before = revision_uids(&revs).await;
    let back = run_ok(op.clone(), &["migrate", "--to-kruise"], &back_kc).await;
    println!("migrate --to-kruise:\n{back}");
    for expected in [
        format!("CloneSet {NS}/canary: template already hashes to update revision canary-568d47f6b7"),
        format!("CloneSet {NS}/fresh: stored its template with Kruise's defaults; Kruise's manager keeps update revision"),
        "gave CRD clonesets.apps.kruise.io to Helm release default/kruise, with helm.sh/resource-policy=keep".to_string(),
    ] {
        assert!(back.contains(&expected), "migrate --to-kruise lacks {expected:?}:\n{back}");
    }
    // Kruise's chart adopts the CRD again (its namespace, deleted with its release, gone first).
    wait_until(T, "kruise-system deleted", || async { Ok(namespaces.get_opt("kruise-system").await?.is_none()) }).await.unwrap();
    run_ok(helm.clone(), &["install", "kruise", &kruise_chart, "--namespace", "default"], &kc).await;
    let crd = crds.get(CRD).await.unwrap();
    assert_eq!(crd.annotations().get("meta.helm.sh/release-name").map(String::as_str), Some("kruise"));
    assert!(!columns(&crd).contains(&"UPDATED_AVAILABLE".to_string()), "Kruise's chart did not take the CRD back");
    // Kruise's rule (the stored template hashed, here by `TemplateNoDefaults`) keeps every revision and pod.
    let opts = OperatorOptions { cluster: Some(kc.clone()), ..OperatorOptions::args(&["--feature-gates=TemplateNoDefaults=true"]) };
    let kruises_rule = Operator::start_with(NS, opts).await.unwrap();
    wait_until(T, "both CloneSets reconciled and the queue empty", || async {
        Ok(e2e::bench::reconciled_and_idle(&kruises_rule.metrics().await?, 2.0))
    })
    .await
    .unwrap();
    let writes = e2e::bench::Requests::from_metrics(&kruises_rule.metrics().await.unwrap());
    let pod_writes = writes.pod_create + writes.pod_patch + writes.pod_update + writes.pod_delete + writes.pod_status;
    assert_eq!((pod_writes, writes.other_writes), (0.0, 0.0), "{writes:?}\n{}", kruises_rule.log_tail(30));
    assert_eq!(pod_identities(&pods).await, pods_before, "a pod was replaced or restarted going back");
    assert_eq!(revision_uids(&revs).await, revs_before, "a revision was created going back");
    drop(kruises_rule);
    migrate_calls_match_its_chart(&cluster.dir, &MIGRATE_RELEASES, &[]);
    drop(cluster);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn storage_and_stored(crd: &CustomResourceDefinition) -> (Vec<String>, Vec<String>) {
    let storage = crd.spec.versions.iter().filter(|v| v.storage).map(|v| v.name.clone()).collect();
    (storage, crd.status.as_ref().and_then(|s| s.stored_versions.clone()).unwrap_or_default())
}

#[tokio::test]
async fn migrate_takes_over_a_kruise_2_crd_storing_v1beta1_without_restarting_a_pod() {
    let cluster = PrivateCluster::up("migrate-v2-cluster").await;
    let kc = cluster.kubeconfig.clone();
    let client = e2e::cluster::client_for(&kc).await.unwrap();
    let helm = helm_bin();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());

    // A Kruise 1.9 install with a CloneSet mid-rollout (stored as v1alpha1), upgraded to a
    // Kruise 2.0-style release: v1beta1 stored, conversions to Kruise's manager, now stopped.
    let v1_chart = repo_root().join("target/migrate-e2e/kruise-chart-v1-for-v2");
    write_kruise_like_chart(&v1_chart, false);
    install_kruise_like(v1_chart.to_str().unwrap(), &kc, &client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap()).await.unwrap();
    wait_until(T, "the default ServiceAccount", || async {
        Ok(Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), NS).get_opt("default").await?.is_some())
    })
    .await
    .unwrap();
    create_kruise_made_cloneset(&client).await;
    let v2_chart = repo_root().join("target/migrate-e2e/kruise-chart-v2");
    write_kruise_like_chart(&v2_chart, true);
    run_ok(helm.clone(), &["upgrade", "kruise", v2_chart.to_str().unwrap(), "--namespace", "default"], &kc).await;
    wait_until(T, "v1beta1 stored beside v1alpha1", || async {
        Ok(storage_and_stored(&crds.get(CRD).await?) == (vec!["v1beta1".into()], vec!["v1alpha1".into(), "v1beta1".into()]))
    })
    .await
    .unwrap();
    // A CloneSet made through v1beta1 is stored as it is: no conversion needed to create it.
    let beta: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet", "metadata": {"name": "beta"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "beta"}},
                 "template": {"metadata": {"labels": {"app": "beta"}}, "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "partition": 1}}},
    }))
    .unwrap();
    // (Once the apiserver's CRD handler stores v1beta1 too, a moment after the status says so.)
    wait_until(T, "beta created through v1beta1 without a conversion", || async {
        match e2e::testenv::clonesets_as(&client, NS, "v1beta1").create(&PostParams::default(), &beta).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.message.contains("conversion webhook") => Ok(false),
            Err(e) => Err(e.into()),
        }
    })
    .await
    .unwrap();
    // Kruise's webhooks last: theirs on CloneSets would convert every write, as v1alpha1, too.
    run_ok(helm.clone(), &["upgrade", "kruise", v2_chart.to_str().unwrap(), "--namespace", "default", "--set", "webhooks=true"], &kc).await;
    kruises_lease_just_renewed(&client).await;

    // The state to end: with Kruise's webhook gone, reading through the version not stored fails.
    let alpha = e2e::testenv::clonesets_as(&client, NS, "v1alpha1");
    let betas = e2e::testenv::clonesets_as(&client, NS, "v1beta1");
    let broken = alpha.get("beta").await.expect_err("v1alpha1 read of a v1beta1-stored CloneSet without Kruise's webhook");
    assert!(broken.to_string().contains("conversion webhook"), "{broken}");
    assert!(betas.get("canary").await.is_err(), "v1beta1 read of a v1alpha1-stored CloneSet");
    let kruise_config = crds.get(CRD).await.unwrap().spec.conversion.unwrap().webhook.unwrap().client_config;

    // This operator's replica, installed beside it: leaves Kruise's conversion alone, publishes
    // its CA for the switch, and is ready (the Service must have endpoints at the switch).
    let webhook = e2e::testenv::free_local_addr().unwrap();
    let webhook_flag = format!("--webhook-addr={webhook}");
    let opts = OperatorOptions { cluster: Some(kc.clone()), ..OperatorOptions::args(&[&webhook_flag, "--webhook-hosts=127.0.0.1"]) };
    let operator = Operator::start_with(NS, opts).await.unwrap();
    wait_until(T, "the operator ready to take conversions", || async { Ok(operator.probe("/readyz").await? == 200) })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", operator.log_tail(30)));
    let crd = crds.get(CRD).await.unwrap();
    assert_eq!(
        crd.spec.conversion.clone().unwrap().webhook.unwrap().client_config,
        kruise_config,
        "the operator changed Kruise's conversion"
    );
    let published = crd.annotations().get(cloneset_operator::webhook::ca_bundle::PUBLISHED_CAS).cloned().unwrap_or_default();
    assert_eq!(published.matches("BEGIN CERTIFICATE").count(), 1, "{published}");

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let revs: Api<ControllerRevision> = Api::namespaced(client.clone(), NS);
    let pods_before = pod_identities(&pods).await;
    let revs_before = revision_uids(&revs).await;

    // `migrate`, with its chart's rights for a v1beta1-storing Kruise.
    let v2_values = ["kruise.storesV1beta1=true"];
    let migrate_kc = migrate_kubeconfig(&client, &kc, MIGRATE_RELEASES[0].0, false, &v2_values).await;
    let url = format!("https://{webhook}/convert");
    let op = e2e::cluster::sibling_binary("cloneset-operator").unwrap();
    let dry = run_ok(op.clone(), &["migrate", "--dry-run", "--conversion-url", &url], &migrate_kc).await;
    let line = format!("would point the CRD's conversion from kruise-webhook-service.kruise-system.svc to {url}");
    assert!(dry.contains(&line), "{dry}");
    assert_eq!(storage_and_stored(&crds.get(CRD).await.unwrap()).0, ["v1beta1"], "dry run changed the storage version");
    // A Kruise replica still stopping puts its conversion settings and its webhooks back once,
    // after migrate's early switch and cut and before Kruise's Lease lapses.
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let kruise_hooks = mutating.get(KRUISE_MUTATING_CONFIG).await.unwrap().webhooks;
    let kruise_replica_stopping = async {
        wait_until(T, "migrate's switch", || async {
            let crd = crds.get(CRD).await?;
            Ok(crd.spec.conversion.and_then(|c| c.webhook).and_then(|w| w.client_config).and_then(|c| c.url).as_deref() == Some(&url))
        })
        .await
        .unwrap();
        wait_until(T, "migrate's cut", || async {
            Ok(mutating.get(KRUISE_MUTATING_CONFIG).await?.webhooks.unwrap_or_default().len() < kruise_hooks.iter().flatten().count())
        })
        .await
        .unwrap();
        let back = json!({"spec": {"conversion": {"webhook": {"clientConfig": {"url": null, "service": kruise_config.as_ref().unwrap().service}}}}});
        crds.patch(CRD, &PatchParams::default(), &Patch::Merge(back)).await.unwrap();
        let mut config = mutating.get(KRUISE_MUTATING_CONFIG).await.unwrap();
        config.webhooks = kruise_hooks.clone();
        mutating.replace(KRUISE_MUTATING_CONFIG, &PostParams::default(), &config).await.unwrap();
    };
    let args = ["migrate", "--conversion-url", &url];
    let (out, ()) = tokio::join!(run_ok(op.clone(), &args, &migrate_kc), kruise_replica_stopping);
    println!("migrate:\n{out}");
    for expected in [
        format!("pointed the CRD's conversion from kruise-webhook-service.kruise-system.svc to {url}"),
        format!("pointed the CRD's conversion at {url} again: a stopping Kruise replica had put its own back"),
        "removed mpod.kb.io, mcloneset.kb.io from kruise-mutating-webhook-configuration (1 others, for Kruise's other kinds, kept) again"
            .to_string(),
        "CloneSets read through apps.kruise.io/v1alpha1 and v1beta1".to_string(),
        "made apps.kruise.io/v1alpha1 the CRD's storage version".to_string(),
        "rewrote 2 CloneSet(s), so each is stored as v1alpha1".to_string(),
        "set the CRD's storedVersions to [v1alpha1]".to_string(),
    ] {
        assert!(out.contains(&expected), "migrate lacks {expected:?}:\n{out}");
    }
    // Conversions came here before Kruise's Lease lapsed: the window is not the lease duration.
    let at = |needle: &str| out.find(needle).unwrap_or_else(|| panic!("{needle:?} not in:\n{out}"));
    assert!(at("pointed the CRD's conversion") < at("Kruise's Lease kruise-system/kruise-manager: lapsed"), "{out}");
    let hooks = mutating.get(KRUISE_MUTATING_CONFIG).await.unwrap().webhooks.unwrap_or_default();
    assert_eq!(webhook_names(hooks.into_iter().map(|w| w.name)), ["madvancedcronjob.kb.io"]);
    let crd = crds.get(CRD).await.unwrap();
    assert_eq!(storage_and_stored(&crd), (vec!["v1alpha1".to_string()], vec!["v1alpha1".to_string()]));
    let config = crd.spec.conversion.unwrap().webhook.unwrap().client_config.unwrap();
    assert_eq!((config.url.as_deref(), config.service.is_none()), (Some(url.as_str()), true));
    for name in ["canary", "beta"] {
        alpha.get(name).await.unwrap_or_else(|e| panic!("v1alpha1 {name}: {e}"));
        betas.get(name).await.unwrap_or_else(|e| panic!("v1beta1 {name}: {e}"));
    }
    let again = run_ok(op.clone(), &["migrate", "--conversion-url", &url], &migrate_kc).await;
    assert!(again.contains("nothing to change: already migrated"), "{again}");

    // The operator runs over both: Kruise's pods untouched, the v1beta1-made CloneSet scaled up.
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), NS);
    watch_until(&clonesets, "beta", T, |cs: &CloneSet| cs.status.as_ref().is_some_and(|s| s.ready_replicas == 2))
        .await
        .unwrap_or_else(|e| panic!("beta: {e:#}\n{}", operator.log_tail(40)));
    wait_until(T, "both CloneSets reconciled and the queue empty", || async {
        Ok(e2e::bench::reconciled_and_idle(&operator.metrics().await?, 2.0))
    })
    .await
    .unwrap();
    let canary: BTreeMap<_, _> = pod_identities(&pods).await.into_iter().filter(|(n, _)| n.starts_with("canary-")).collect();
    assert_eq!(canary, pods_before, "a pod of Kruise's was replaced or restarted\n{}", operator.log_tail(30));
    assert_eq!(revision_uids(&revs).await.iter().filter(|r| revs_before.contains(r)).count(), revs_before.len());
    drop(operator);

    // The documented release steps: installed beside Kruise without the CRD, then given it with
    // v1beta1 still served, the values given again each time. The CRD as `migrate
    // --conversion-url` left it: with the same URL as `crds.conversionURL` the upgrade keeps it;
    // without, it sends conversions to the release's Service (which reaches no local process
    // here, so nothing is read after this). Either way the caBundle migrate wrote stays.
    let bundle = config.ca_bundle.clone();
    let chart = repo_root().join("charts/cloneset-operator");
    let chart = chart.to_str().unwrap();
    let release = ["--namespace", "default", "--set", "manager.replicas=0"];
    run_ok(helm.clone(), &[&["install", "cloneset-operator", chart, "--set", "crds.managed=false"][..], &release].concat(), &kc).await;
    let upgrade = ["upgrade", "cloneset-operator", chart, "--set", "crds.managed=true", "--set", "crds.v1beta1=true"];
    let at_url = format!("crds.conversionURL={url}");
    run_ok(helm.clone(), &[&upgrade[..], &release, &["--set", &at_url]].concat(), &kc).await;
    let crd = crds.get(CRD).await.unwrap();
    let served: Vec<&str> = crd.spec.versions.iter().filter(|v| v.served).map(|v| v.name.as_str()).collect();
    assert_eq!(served, ["v1alpha1", "v1beta1"]);
    assert_eq!(storage_and_stored(&crd), (vec!["v1alpha1".to_string()], vec!["v1alpha1".to_string()]));
    let config = crd.spec.conversion.unwrap().webhook.unwrap().client_config.unwrap();
    assert_eq!((config.url.as_deref(), config.service.is_none()), (Some(url.as_str()), true), "the URL migrate set, kept");
    assert_eq!(config.ca_bundle, bundle, "the upgrade kept the caBundle migrate wrote");
    run_ok(helm.clone(), &[&upgrade[..], &release].concat(), &kc).await;
    let config = crds.get(CRD).await.unwrap().spec.conversion.unwrap().webhook.unwrap().client_config.unwrap();
    let service = config.service.expect("conversions to the release's Service");
    assert_eq!((service.namespace.as_str(), service.name.as_str(), config.url), ("cloneset-system", "cloneset-operator-webhook", None));
    assert_eq!(config.ca_bundle, bundle, "the upgrade kept the caBundle migrate wrote");
    migrate_calls_match_its_chart(&cluster.dir, &MIGRATE_RELEASES[..1], &v2_values);
    drop(cluster);
}
