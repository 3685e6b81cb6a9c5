//! The Helm chart in `charts/cloneset-operator`: `helm lint` and `helm template` checks (RBAC is
//! exactly what the controller uses, the manager pod meets the Pod Security Standard
//! *restricted*, values change the output), `helm install`/`helm uninstall` on the local control
//! plane, and the operator binary running with a token of the chart's ServiceAccount.
//!
//! Helm is built once from the Go module proxy by `e2e/scripts/build-helm.sh` (cached outside
//! the repository); its own state lives in `target/helm-home`, never in the user's Helm config.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use cloneset_operator::api::CloneSet;
use cloneset_operator::api::crd::{POLICY_NAME, TEMPLATE_FIELDS_POLICY_NAME};
use e2e::chart::{self, chart_dir, repo_root};
use e2e::helm_release::{Release, adopt_policy, helm_must, push_operator_image, restore_policy, this_operator, unique};
use e2e::rbac::Access;
use e2e::testenv::{self, Credentials, Operator, OperatorOptions, TestNamespace, install_api, wait_deleted, wait_until, watch_until};
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, PersistentVolumeClaim, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(120);
/// The release name used for rendering: the objects are then simply `cloneset-operator`.
const RELEASE: &str = "cloneset-operator";

fn helm_ok(args: &[&str]) -> String {
    chart::helm_ok(args).unwrap_or_else(|e| panic!("{e:#}"))
}

fn parse_docs(yaml: &str) -> Vec<Value> {
    chart::parse_docs(yaml).unwrap()
}

/// `helm template` of the chart with extra arguments (`--set ...`), parsed.
fn render(extra: &[&str]) -> Vec<Value> {
    chart::render(RELEASE, "default", extra).unwrap_or_else(|e| panic!("{e:#}"))
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(docs, kind);
    assert_eq!(found.len(), 1, "expected exactly one {kind}, found {}", found.len());
    found[0]
}

fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter().map(|d| d["kind"].as_str().unwrap_or_default().to_string()).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// The ways a pod spec breaks the Pod Security Standard *restricted* (plus our own
/// readOnlyRootFilesystem rule). Empty means compliant.
fn restricted_violations(spec: &Value) -> Vec<String> {
    let mut v = Vec::new();
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[host] == true {
            v.push(format!("{host} is true"));
        }
    }
    const ALLOWED_VOLUMES: &[&str] =
        &["name", "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
    for vol in spec["volumes"].as_array().into_iter().flatten() {
        for key in vol.as_object().into_iter().flatten().map(|(k, _)| k) {
            if !ALLOWED_VOLUMES.contains(&key.as_str()) {
                v.push(format!("volume {} is of type {key}", vol["name"]));
            }
        }
    }
    let pod_sc = &spec["securityContext"];
    if pod_sc["runAsUser"] == 0 {
        v.push("pod runs as UID 0".into());
    }
    let containers =
        ["initContainers", "containers", "ephemeralContainers"].into_iter().flat_map(|k| spec[k].as_array().into_iter().flatten());
    let mut any = false;
    for c in containers {
        any = true;
        let name = c["name"].as_str().unwrap_or("?");
        let sc = &c["securityContext"];
        // A container's setting overrides the pod's.
        let effective = |key: &str| if sc.get(key).is_some_and(|x| !x.is_null()) { &sc[key] } else { &pod_sc[key] };
        if effective("runAsNonRoot") != true {
            v.push(format!("{name}: runAsNonRoot is not true"));
        }
        if effective("runAsUser") == 0 {
            v.push(format!("{name}: runAsUser is 0"));
        }
        if sc["allowPrivilegeEscalation"] != false {
            v.push(format!("{name}: allowPrivilegeEscalation is not false"));
        }
        if sc["privileged"] == true {
            v.push(format!("{name}: privileged"));
        }
        if !strings(&sc["capabilities"]["drop"]).iter().any(|c| c == "ALL") {
            v.push(format!("{name}: capabilities.drop lacks ALL"));
        }
        if !strings(&sc["capabilities"]["add"]).is_empty() {
            v.push(format!("{name}: capabilities.add is not empty"));
        }
        let seccomp = effective("seccompProfile")["type"].as_str().unwrap_or_default();
        if seccomp != "RuntimeDefault" && seccomp != "Localhost" {
            v.push(format!("{name}: seccompProfile is {seccomp:?}, not RuntimeDefault or Localhost"));
        }
        if sc["readOnlyRootFilesystem"] != true {
            v.push(format!("{name}: readOnlyRootFilesystem is not true"));
        }
        for port in c["ports"].as_array().into_iter().flatten() {
            if port["hostPort"].as_i64().unwrap_or(0) != 0 {
                v.push(format!("{name}: hostPort {}", port["hostPort"]));
            }
        }
    }
    if !any {
        v.push("no containers".into());
    }
    v
}

/// The container port a probe targets (by number or by port name).
fn probe_port(container: &Value, probe: &Value) -> i64 {
    let port = &probe["httpGet"]["port"];
    if let Some(n) = port.as_i64() {
        return n;
    }
    let name = port.as_str().expect("probe port");
    container["ports"].as_array().unwrap().iter().find(|p| p["name"] == name).map(|p| p["containerPort"].as_i64().unwrap()).unwrap()
}

fn env_of(container: &Value, name: &str) -> Value {
    container["env"].as_array().unwrap().iter().find(|e| e["name"] == name).cloned().unwrap_or(Value::Null)
}

fn manager(docs: &[Value]) -> (&Value, &Value) {
    let deploy = one(docs, "Deployment");
    let containers = deploy["spec"]["template"]["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    (deploy, &containers[0])
}

#[test]
fn helm_lint_passes_and_the_defaults_render_the_expected_objects() {
    let chart = chart_dir();
    let lint = helm_ok(&["lint", "--strict", chart.to_str().unwrap()]);
    assert!(lint.contains("0 chart(s) failed"), "{lint}");

    let docs = render(&[]);
    let expected: BTreeSet<String> = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "CustomResourceDefinition",
        "PodDisruptionBudget",
        "FlowSchema",
        "PriorityLevelConfiguration",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(kinds(&docs), expected);
    // Two Services (metrics, conversion webhook), two admission policies and their bindings
    // (one refuses, one warns); one object of every other kind.
    assert_eq!(docs.len(), expected.len() + 3, "one object of each kind but Service and the admission policies");

    let ns = one(&docs, "Namespace");
    assert_eq!(ns["metadata"]["name"], "cloneset-system");
    assert_eq!(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted");
    for d in &docs {
        let kind = d["kind"].as_str().unwrap();
        let cluster_scoped = [
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "CustomResourceDefinition",
            "FlowSchema",
            "PriorityLevelConfiguration",
        ]
        .contains(&kind);
        let expected_ns = if cluster_scoped { Value::Null } else { json!("cloneset-system") };
        assert_eq!(d["metadata"]["namespace"], expected_ns, "namespace of {kind}");
    }

    // The bindings point at the chart's ServiceAccount.
    let sa = one(&docs, "ServiceAccount");
    assert_eq!(sa["metadata"]["name"], "cloneset-operator");
    for binding in [one(&docs, "ClusterRoleBinding"), one(&docs, "RoleBinding")] {
        let subjects = binding["subjects"].as_array().unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0], json!({"kind": "ServiceAccount", "name": "cloneset-operator", "namespace": "cloneset-system"}));
    }
    assert_eq!(one(&docs, "ClusterRoleBinding")["roleRef"]["name"], one(&docs, "ClusterRole")["metadata"]["name"]);
    assert_eq!(one(&docs, "RoleBinding")["roleRef"]["name"], one(&docs, "Role")["metadata"]["name"]);

    // Every request of that ServiceAccount goes to the chart's own priority level, after the
    // built-in schemas of the control plane and before `service-accounts` (9000).
    let (fs, plc) = (one(&docs, "FlowSchema"), one(&docs, "PriorityLevelConfiguration"));
    assert_eq!(fs["spec"]["priorityLevelConfiguration"]["name"], plc["metadata"]["name"]);
    assert_eq!(fs["spec"]["matchingPrecedence"], 1000);
    assert_eq!(
        fs["spec"]["rules"][0]["subjects"],
        json!([{"kind": "ServiceAccount", "serviceAccount": {"name": "cloneset-operator", "namespace": "cloneset-system"}}])
    );
    assert_eq!(plc["spec"]["limited"]["nominalConcurrencyShares"], 40);
    let without = render(&["--set", "apiPriorityAndFairness.enabled=false"]);
    assert!(of_kind(&without, "FlowSchema").is_empty() && of_kind(&without, "PriorityLevelConfiguration").is_empty());

    // One Service exposes the metrics port of the manager pods, the other the conversion
    // webhook the CRD names.
    let (deploy, c) = manager(&docs);
    let service = |name: &str| of_kind(&docs, "Service").into_iter().find(|s| s["metadata"]["name"] == name).unwrap();
    let (svc, webhook) = (service("cloneset-operator-metrics"), service("cloneset-operator-webhook"));
    assert_eq!(svc["spec"]["ports"][0]["port"], 8080);
    assert_eq!(webhook["spec"]["ports"][0]["port"], 443);
    assert_eq!(webhook["spec"]["ports"][0]["targetPort"], "webhook");
    assert!(c["ports"].as_array().unwrap().iter().any(|p| p["name"] == "webhook" && p["containerPort"] == 9876));
    for s in [svc, webhook] {
        for (k, v) in s["spec"]["selector"].as_object().unwrap() {
            assert_eq!(&deploy["spec"]["template"]["metadata"]["labels"][k], v, "selector {k}");
        }
    }

    // The admission policy is the very file `make crds` writes to crds/.
    // Helm orders what it renders by kind.
    let by_kind_and_name = |d: &Value| (d["kind"].to_string(), d["metadata"]["name"].to_string());
    let mut from_crds =
        parse_docs(&std::fs::read_to_string(repo_root().join("crds/apps.kruise.io_clonesets-admission-policy.yaml")).unwrap());
    from_crds.sort_by_key(by_kind_and_name);
    let mut rendered: Vec<Value> =
        docs.iter().filter(|d| d["kind"].as_str().unwrap().starts_with("ValidatingAdmissionPolicy")).cloned().collect();
    rendered.sort_by_key(by_kind_and_name);
    assert_eq!(rendered, from_crds);

    // The CRD is the one `make crds` writes, kept on uninstall.
    let mut crd = one(&docs, "CustomResourceDefinition").clone();
    assert_eq!(crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    let meta = crd["metadata"].as_object_mut().unwrap();
    meta.remove("annotations");
    meta.remove("labels");
    let mut generated = parse_docs(&std::fs::read_to_string(repo_root().join("crds/apps.kruise.io_clonesets.yaml")).unwrap());
    // Helm's fromYaml/toYaml writes `minimum: 0.0` as `0`: the same number to the apiserver.
    numbers_as_f64(&mut crd);
    generated.iter_mut().for_each(numbers_as_f64);
    assert_eq!(vec![crd], generated);
}

fn numbers_as_f64(v: &mut Value) {
    match v {
        Value::Number(n) => *v = json!(n.as_f64().unwrap()),
        Value::Array(items) => items.iter_mut().for_each(numbers_as_f64),
        Value::Object(map) => map.values_mut().for_each(numbers_as_f64),
        _ => {}
    }
}

#[test]
fn the_deletion_protection_policy_is_rendered_only_with_its_gate() {
    let policies = |gates: &str| -> Vec<Value> {
        render(&["--set-string", &format!("featureGates={gates}")])
            .into_iter()
            .filter(|d| d["metadata"]["name"] == cloneset_operator::api::crd::DELETION_PROTECTION_POLICY_NAME)
            .collect()
    };
    assert!(policies("").is_empty());
    assert!(policies(r"ResourcesDeletionProtection=false\,CloneSetShortHash=true").is_empty());
    let file = parse_docs(&std::fs::read_to_string(repo_root().join(cloneset_operator::api::crd::DELETION_PROTECTION_FILE)).unwrap());
    assert_eq!(file.len(), 2, "policy and binding");
    assert_eq!(policies(r"CloneSetShortHash=true\, ResourcesDeletionProtection=true"), file);
    assert_eq!(policies("ResourcesDeletionProtection=true"), file);
}

#[test]
fn crds_v1beta1_serves_both_versions_through_the_releases_webhook_service() {
    let crd_of = |extra: &[&str]| one(&render(extra), "CustomResourceDefinition").clone();
    let served = |crd: &Value| -> Vec<String> {
        crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["served"] == true)
            .map(|v| v["name"].as_str().unwrap().to_string())
            .collect()
    };
    let default = crd_of(&[]);
    assert_eq!(served(&default), ["v1alpha1"]);
    assert!(default["spec"]["conversion"].is_null() || default["spec"]["conversion"]["strategy"] == "None");

    let both = crd_of(&["--set", "crds.v1beta1=true", "--set", "fullnameOverride=edge", "--set", "installation.namespace=platform"]);
    assert_eq!(served(&both), ["v1alpha1", "v1beta1"]);
    let stored: Vec<&Value> = both["spec"]["versions"].as_array().unwrap().iter().filter(|v| v["storage"] == true).collect();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["name"], "v1alpha1", "objects stay stored as v1alpha1, so turning v1beta1 off again is safe");
    let webhook = &both["spec"]["conversion"]["webhook"];
    assert_eq!(both["spec"]["conversion"]["strategy"], "Webhook");
    assert_eq!(
        webhook["clientConfig"]["service"],
        json!({"namespace": "platform", "name": "edge-webhook", "path": "/convert", "port": 443})
    );
    assert!(webhook["clientConfig"]["caBundle"].is_null(), "the operator or cert-manager keeps the caBundle");
    assert_eq!(webhook["clientConfig"]["url"], Value::Null, "written as null, so an upgrade removes a URL set outside Helm");
    assert_eq!(both["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    let url = crd_of(&["--set", "crds.v1beta1=true", "--set", "crds.conversionURL=https://127.0.0.1:9876/convert"]);
    let client_config = url["spec"]["conversion"]["webhook"]["clientConfig"].as_object().unwrap();
    assert_eq!(client_config.get("url"), Some(&json!("https://127.0.0.1:9876/convert")));
    assert_eq!(client_config.get("service"), Some(&Value::Null), "the Service written as null");
    let with_cert_manager = crd_of(&["--set", "crds.v1beta1=true", "--set", "manager.webhook.certManager.enabled=true"]);
    assert_eq!(
        with_cert_manager["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "cloneset-system/cloneset-operator-webhook-cert"
    );
}

/// Every way the CRD's conversion can be left upgrades cleanly, each step a `helm upgrade` (or
/// `helm rollback`) that the apiserver accepts: pointed at a URL by the chart
/// (`crds.conversionURL`, as `make run V1BETA1=1` does) twice in a row; back to the release's
/// Service; pointed at a URL outside Helm (`migrate --conversion-url`) and upgraded; v1beta1
/// turned off and on again; and a rollback to the URL. Helm merges a CRD three ways, so a
/// clientConfig left with both a URL and a Service (which the apiserver refuses) is what fails.
#[tokio::test]
async fn every_way_the_crds_conversion_was_left_upgrades_cleanly() {
    let _one_at_a_time = CLUSTER.lock().await;
    let client = testenv::client().await.unwrap();
    install_api().await.unwrap();
    let id = unique();
    let release = format!("cso-conv-{id}");
    let ns = format!("e2e-conv-{id}");
    adopt_policy(&client, &release, "default").await;
    let kubeconfig = testenv::kubeconfig().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let url = "https://127.0.0.1:9/convert";
    // A CloneSet elsewhere in the cluster, as other tests leave while their namespaces go: while
    // nothing answers conversions, no list of CloneSets through v1beta1 succeeds.
    let elsewhere_ns = TestNamespace::create("conv-other").await.unwrap();
    let other: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "other"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "other"}},
                 "template": {"metadata": {"labels": {"app": "other"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}},
    }))
    .unwrap();
    elsewhere_ns.api::<CloneSet>().create(&PostParams::default(), &other).await.unwrap();
    let ns_value = format!("installation.namespace={ns}");
    let upgrade = |extra: &[&str]| {
        let mut args: Vec<String> = ["upgrade", "--install", &release, chart_dir().to_str().unwrap(), "--namespace", "default"]
            .into_iter()
            .map(String::from)
            .collect();
        args.extend(["--kubeconfig".to_string(), kubeconfig.display().to_string()]);
        args.extend(["--set", &ns_value, "--set", "manager.replicas=0"].map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    // The served versions, and where conversions go: `url`, `service` or nothing.
    let left = || async {
        let crd = crds.get("clonesets.apps.kruise.io").await.unwrap();
        let served: Vec<String> = crd.spec.versions.iter().filter(|v| v.served).map(|v| v.name.clone()).collect();
        let config = crd.spec.conversion.and_then(|c| c.webhook).and_then(|w| w.client_config).unwrap_or_default();
        let to = match (config.url, config.service) {
            (Some(u), None) => u,
            (None, Some(s)) => format!("service {}/{}", s.namespace, s.name),
            (None, None) => "nowhere".to_string(),
            (Some(u), Some(s)) => panic!("both {u} and service {}/{}", s.namespace, s.name),
        };
        (served.join(","), to)
    };
    let run = helm_must;
    let service = format!("service {ns}/{release}-cloneset-operator-webhook");
    let to_url = ["--set", "crds.v1beta1=true", "--set", &format!("crds.conversionURL={url}")].map(String::from);
    let to_url: Vec<&str> = to_url.iter().map(String::as_str).collect();

    run(upgrade(&to_url)).await;
    assert_eq!(left().await, ("v1alpha1,v1beta1".to_string(), url.to_string()), "installed pointing at the URL");
    run(upgrade(&to_url)).await;
    assert_eq!(left().await.1, url, "the same again");
    run(upgrade(&["--set", "crds.v1beta1=true"])).await;
    assert_eq!(left().await.1, service, "back to the release's Service");
    let elsewhere = json!({"spec": {"conversion": {"webhook": {"clientConfig": {"service": null, "url": url}}}}});
    crds.patch("clonesets.apps.kruise.io", &PatchParams::default(), &Patch::Merge(&elsewhere)).await.unwrap();
    run(upgrade(&["--set", "crds.v1beta1=true"])).await;
    assert_eq!(left().await.1, service, "a URL set outside Helm gives way to the chart's Service");
    run(upgrade(&[])).await;
    assert_eq!(left().await, ("v1alpha1".to_string(), "nowhere".to_string()), "v1beta1 off");
    run(upgrade(&to_url)).await;
    assert_eq!(left().await.1, url, "v1beta1 on again, at the URL");
    run(upgrade(&["--set", "crds.v1beta1=true"])).await;
    let kc = kubeconfig.display().to_string();
    run(["rollback", &release, "6", "--namespace", "default", "--kubeconfig", &kc].map(String::from).to_vec()).await;
    assert_eq!(left().await.1, url, "a rollback to the URL's revision");
    // Off again before uninstalling: with v1beta1 served and nothing answering at the URL, the
    // apiserver cannot list CloneSets through v1beta1 while one exists anywhere (`other`), so no
    // namespace deletion could finish, this release's included.
    run(upgrade(&[])).await;
    assert_eq!(left().await, ("v1alpha1".to_string(), "nowhere".to_string()), "v1beta1 off before the uninstall");

    let uninstall = ["uninstall", &release, "--namespace", "default", "--kubeconfig", &kc, "--wait", "--timeout", "3m"];
    run(uninstall.map(String::from).to_vec()).await;
    wait_deleted(&Api::<Namespace>::all(client.clone()), &ns, T).await.unwrap();
    drop(elsewhere_ns);
    // The CRD every other test uses, without conversion; the admission policies as they were.
    testenv::apply_crd(&client, &cloneset_operator::api::crd::crd()).await.unwrap();
    restore_policy(&client).await;
}

/// The chart's RBAC in its two modes. Whether it is exactly what the operator calls is checked
/// over the whole e2e run (`local-cluster rbac-audit`, from kube-apiserver's audit log); here,
/// that both modes grant the same calls, in the right places, and nothing broad.
#[test]
fn rbac_grants_the_same_calls_cluster_wide_or_in_one_namespace() {
    let cluster_wide = render(&[]);
    let one_namespace = render(&["--set", "manager.watchNamespace=apps"]);
    let grants = |docs: &[Value]| e2e::rbac::grants(docs).unwrap();
    assert_eq!(grants(&cluster_wide), grants(&one_namespace));
    let all = grants(&cluster_wide);
    assert!(all.contains(&Access::new("", "pods/resize", "patch")), "InPlaceWorkloadVerticalScaling patches pods/resize");
    assert!(!all.iter().any(|a| a.group == "*" || a.resource == "*" || a.verb == "*" || a.resource == "secrets"), "{all:?}");

    // Cluster-wide: one ClusterRole for everything but the leader-election Lease.
    assert_eq!(of_kind(&cluster_wide, "Role").len(), 1);
    assert_eq!(one(&cluster_wide, "Role")["metadata"]["name"], "cloneset-operator-leader-election");
    assert_eq!(one(&cluster_wide, "Role")["metadata"]["namespace"], "cloneset-system", "leases only in the installation namespace");

    // One namespace: the workload rules in a Role there, bound to the chart's ServiceAccount;
    // the ClusterRole keeps only reads of nodes and of Kruise's Lease.
    let roles = of_kind(&one_namespace, "Role");
    let workload = roles.iter().find(|r| r["metadata"]["name"] == "cloneset-operator").expect("a Role for the watched namespace");
    assert_eq!(workload["metadata"]["namespace"], "apps");
    let binding = of_kind(&one_namespace, "RoleBinding").into_iter().find(|b| b["metadata"]["name"] == "cloneset-operator").unwrap();
    assert_eq!(binding["metadata"]["namespace"], "apps");
    assert_eq!(binding["subjects"][0], json!({"kind": "ServiceAccount", "name": "cloneset-operator", "namespace": "cloneset-system"}));
    let cluster_role = grants(&[one(&one_namespace, "ClusterRole").clone()]);
    let kruise_lease = Access { name: Some("kruise-manager".into()), ..Access::new("coordination.k8s.io", "leases", "get") };
    let crd = |verb: &str| Access {
        name: Some("clonesets.apps.kruise.io".into()),
        ..Access::new("apiextensions.k8s.io", "customresourcedefinitions", verb)
    };
    let expected: BTreeSet<Access> = ["list", "watch"]
        .map(|v| Access::new("", "nodes", v))
        .into_iter()
        .chain([kruise_lease.clone(), crd("get"), crd("patch")])
        .collect();
    assert_eq!(cluster_role, expected);
    let (_, c) = manager(&one_namespace);
    assert!(strings(&c["args"]).contains(&"--namespace=apps".to_string()));

    // The Lease read follows manager.kruiseManagerLease, and goes with it.
    let elsewhere = grants(&render(&["--set", "manager.kruiseManagerLease=ops/kruise-leader"]));
    assert!(elsewhere.contains(&Access { name: Some("kruise-leader".into()), ..kruise_lease.clone() }));
    assert!(!elsewhere.contains(&kruise_lease));
    let none = render(&["--set", "manager.kruiseManagerLease="]);
    assert!(!grants(&none).iter().any(|a| a.resource == "leases" && a.name.is_some()));
    assert!(strings(&manager(&none).1["args"]).contains(&"--kruise-manager-lease=".to_string()));
}

#[test]
fn the_manager_pod_meets_pod_security_restricted_and_has_probes() {
    let docs = render(&[]);
    let (deploy, c) = manager(&docs);
    let spec = &deploy["spec"]["template"]["spec"];
    let violations = restricted_violations(spec);
    assert!(violations.is_empty(), "Pod Security Standard restricted: {violations:?}");
    assert_eq!(spec["securityContext"]["runAsUser"], 65532);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");

    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(probe_port(c, &c["livenessProbe"]), 8000);
    assert_eq!(probe_port(c, &c["readinessProbe"]), 8000);
    assert!(c["resources"]["requests"].is_object() && c["resources"]["limits"].is_object());

    assert_eq!(
        strings(&c["args"]),
        [
            "--enable-leader-election=true",
            "--leader-election-namespace=cloneset-system",
            "--metrics-addr=:8080",
            "--health-probe-addr=:8000",
            "--webhook-addr=:9876",
            "--webhook-hosts=cloneset-operator-webhook.cloneset-system.svc,cloneset-operator-webhook.cloneset-system.svc.cluster.local",
            "--logging-format=text",
            "--feature-gates=",
            "--kruise-manager-lease=kruise-system/kruise-manager",
        ]
    );
    assert_eq!(env_of(c, "RUST_LOG")["value"], "info");
    assert_eq!(env_of(c, "POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    assert_eq!(env_of(c, "POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
    assert_eq!(deploy["spec"]["replicas"], 2);
    assert_eq!(c["image"], format!("cloneset-operator:{}", chart_app_version()));
    assert_eq!(spec["serviceAccountName"], "cloneset-operator");
}

fn chart_app_version() -> String {
    let chart: Value = serde_saphyr::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap()).unwrap();
    chart["appVersion"].as_str().unwrap().to_string()
}

/// The checks above are only worth something if they catch violations.
#[test]
fn the_restricted_check_catches_each_violation() {
    let good = json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                                         "capabilities": {"drop": ["ALL"]}}}],
    });
    assert_eq!(restricted_violations(&good), Vec::<String>::new());
    let bad: &[(&str, Value)] = &[
        ("hostNetwork", json!({"hostNetwork": true})),
        ("hostPID", json!({"hostPID": true})),
        ("hostIPC", json!({"hostIPC": true})),
        ("hostPath", json!({"volumes": [{"name": "v", "hostPath": {"path": "/"}}]})),
        ("runAsNonRoot", json!({"containers": [{"name": "c", "securityContext": {"runAsNonRoot": false}}]})),
        ("runAsUser", json!({"securityContext": {"runAsUser": 0}})),
        ("allowPrivilegeEscalation", json!({"containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": null}}]})),
        ("privileged", json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}]})),
        ("drop", json!({"containers": [{"name": "c", "securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}]})),
        ("add", json!({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]})),
        ("seccomp", json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}})),
        ("readOnlyRootFilesystem", json!({"containers": [{"name": "c", "securityContext": {"readOnlyRootFilesystem": false}}]})),
        ("hostPort", json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]})),
    ];
    for (what, patch) in bad {
        let mut spec = good.clone();
        json_patch::merge(&mut spec, patch);
        assert!(!restricted_violations(&spec).is_empty(), "{what} not caught: {spec}");
    }
}

#[test]
fn values_change_the_output() {
    let term =
        json!({"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "cloneset-operator"}}});
    let affinity = format!(
        "manager.affinity={}",
        json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]}})
    );
    let docs = render(&[
        "--set",
        "manager.replicas=3",
        "--set-string",
        r"featureGates=CloneSetShortHash=true\,PreparingUpdateAsUpdate=true",
        "--set",
        "installation.namespace=ops",
        "--set",
        "installation.createNamespace=false",
        "--set",
        "manager.log.level=debug",
        "--set",
        "manager.loggingFormat=json",
        "--set",
        "manager.metrics.port=9090",
        "--set",
        "manager.healthProbe.port=9000",
        "--set",
        "manager.image.repository=registry.example/cso",
        "--set",
        "manager.image.tag=v9",
        "--set",
        "imagePullSecrets[0].name=regcred",
        "--set",
        "manager.nodeSelector.role=infra",
        "--set",
        "manager.tolerations[0].key=dedicated",
        "--set",
        "manager.tolerations[0].operator=Exists",
        "--set-json",
        &affinity,
        "--set",
        "manager.resources.limits.memory=1Gi",
        "--set-string",
        "manager.resyncPeriod=10m",
        "--set",
        "serviceAccount.annotations.team=platform",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "crds.managed=false",
        "--set",
        "fullnameOverride=ops-cso",
        "--set",
        "manager.image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "--set",
        "manager.watchNamespace=shop",
        "--set",
        "manager.kruiseManagerLease=kruise/kruise-manager",
        "--set",
        "manager.workers=5",
        "--set",
        "manager.cacheSyncTimeout=10m",
        "--set",
        "manager.clientRateLimit.qps=-1",
        "--set",
        "manager.clientRateLimit.burst=0",
        "--set-json",
        r#"manager.extraArgs=["--threads=2","--expectation-timeout=2m"]"#,
        "--set-json",
        r#"manager.extraEnv=[{"name":"HTTPS_PROXY","value":"http://proxy:3128"}]"#,
        "--set",
        "manager.podAnnotations.owner=platform",
        "--set",
        "manager.podLabels.team=platform",
        "--set",
        "manager.priorityClassName=system-cluster-critical",
    ]);
    let (deploy, c) = manager(&docs);
    let spec = &deploy["spec"]["template"]["spec"];
    assert_eq!(deploy["spec"]["replicas"], 3);
    assert_eq!(
        strings(&c["args"]),
        [
            "--enable-leader-election=true",
            "--leader-election-namespace=ops",
            "--metrics-addr=:9090",
            "--health-probe-addr=:9000",
            "--webhook-addr=:9876",
            "--webhook-hosts=ops-cso-webhook.ops.svc,ops-cso-webhook.ops.svc.cluster.local",
            "--logging-format=json",
            "--feature-gates=CloneSetShortHash=true,PreparingUpdateAsUpdate=true",
            "--kruise-manager-lease=kruise/kruise-manager",
            "--namespace=shop",
            "--sync-period=10m",
            "--cloneset-workers=5",
            "--controller-cache-sync-timeout=10m",
            "--rest-config-qps=-1",
            "--rest-config-burst=0",
            "--threads=2",
            "--expectation-timeout=2m",
        ]
    );
    assert_eq!(env_of(c, "RUST_LOG")["value"], "debug");
    assert_eq!(env_of(c, "HTTPS_PROXY")["value"], "http://proxy:3128");
    assert_eq!(c["image"], "registry.example/cso@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    let pod_meta = &deploy["spec"]["template"]["metadata"];
    assert_eq!(pod_meta["annotations"], json!({"owner": "platform"}));
    assert_eq!(pod_meta["labels"]["team"], "platform");
    assert_eq!(pod_meta["labels"]["app.kubernetes.io/instance"], RELEASE, "the chart's own labels stay");
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert_eq!(spec["serviceAccountName"], "ops-cso");
    assert_eq!(deploy["metadata"]["name"], "ops-cso");
    assert_eq!(probe_port(c, &c["livenessProbe"]), 9000);
    assert_eq!(probe_port(c, &c["readinessProbe"]), 9000);
    assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(spec["nodeSelector"], json!({"role": "infra"}));
    assert_eq!(spec["tolerations"], json!([{"key": "dedicated", "operator": "Exists"}]));
    assert_eq!(spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"], 100);
    assert!(restricted_violations(spec).is_empty());

    // No Namespace object; everything namespaced lives in `ops`, leases included, but for the
    // access to the watched namespace `shop`.
    assert!(of_kind(&docs, "Namespace").is_empty());
    for d in docs.iter().filter(|d| !d["metadata"]["namespace"].is_null()) {
        let watched = d["metadata"]["name"] == "ops-cso" && (d["kind"] == "Role" || d["kind"] == "RoleBinding");
        assert_eq!(d["metadata"]["namespace"], if watched { "shop" } else { "ops" }, "{} {}", d["kind"], d["metadata"]["name"]);
    }
    let leader_role = of_kind(&docs, "Role").into_iter().find(|r| r["metadata"]["name"] == "ops-cso-leader-election").unwrap();
    assert_eq!(leader_role["metadata"]["namespace"], "ops");
    assert_eq!(one(&docs, "ClusterRoleBinding")["subjects"][0], json!({"kind": "ServiceAccount", "name": "ops-cso", "namespace": "ops"}));
    assert_eq!(one(&docs, "ServiceAccount")["metadata"]["annotations"], json!({"team": "platform"}));
    let metrics = of_kind(&docs, "Service").into_iter().find(|s| s["metadata"]["name"] == "ops-cso-metrics").unwrap();
    assert_eq!(metrics["spec"]["ports"][0]["port"], 9090);

    let sm = one(&docs, "ServiceMonitor");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"], json!(["ops"]));

    // crds.managed=false: no CRD, as in Kruise's chart; the admission policy stays, unless it
    // is turned off too.
    assert!(of_kind(&docs, "CustomResourceDefinition").is_empty());
    let policies: Vec<&Value> = of_kind(&docs, "ValidatingAdmissionPolicy");
    let names: Vec<&str> = policies.iter().filter_map(|p| p["metadata"]["name"].as_str()).collect();
    assert_eq!(names, [POLICY_NAME, TEMPLATE_FIELDS_POLICY_NAME], "the policy that refuses and the one that warns");
    assert_eq!(of_kind(&docs, "ValidatingAdmissionPolicyBinding").len(), 2);
    let without = render(&["--set", "admissionPolicy.enabled=false"]);
    assert!(!kinds(&without).iter().any(|k| k.starts_with("ValidatingAdmissionPolicy")));
    assert_eq!(of_kind(&without, "CustomResourceDefinition").len(), 1);
}

// ---------------------------------------------------------------------------------------------
// On the local control plane.

/// The cluster tests install cluster-scoped objects (the admission policy, roles): one at a time.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn helm_install_and_uninstall_on_the_local_control_plane() {
    let _one_at_a_time = CLUSTER.lock().await;
    let client = testenv::client().await.unwrap();
    let id = unique();
    let release = format!("cso-{id}");
    let ns = format!("e2e-helm-{id}");
    let fullname = format!("{release}-cloneset-operator");
    let had_policy = adopt_policy(&client, &release, "default").await;

    // The chart creates the namespace, labelled to enforce Pod Security "restricted": the
    // Deployment only becomes ready if the apiserver admits its pods under that profile.
    let ns_value = format!("installation.namespace={ns}");
    let (mut rel, out) = Release::install(&release, "default", &["--set", &ns_value, "--wait", "--timeout", "3m"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("PodSecurity"), "helm install warned about Pod Security:\n{stderr}");

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get("clonesets.apps.kruise.io").await.unwrap();
    assert!(crd.status.unwrap().conditions.unwrap_or_default().iter().any(|c| c.type_ == "Established" && c.status == "True"));
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policy = policies.get(POLICY_NAME).await.unwrap();
    assert_eq!(policy.annotations().get("meta.helm.sh/release-name"), Some(&release));
    assert_eq!(bindings.get(POLICY_NAME).await.unwrap().spec.unwrap().policy_name.as_deref(), Some(POLICY_NAME));
    let warns = bindings.get(TEMPLATE_FIELDS_POLICY_NAME).await.unwrap().spec.unwrap();
    assert_eq!(warns.validation_actions, Some(vec!["Warn".to_string()]), "the template-fields policy only warns");

    let namespace = Api::<Namespace>::all(client.clone()).get(&ns).await.unwrap();
    assert_eq!(namespace.labels().get("pod-security.kubernetes.io/enforce").map(String::as_str), Some("restricted"));
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deploy = deploys.get(&fullname).await.unwrap();
    let status = deploy.status.unwrap_or_default();
    assert_eq!((status.replicas, status.ready_replicas), (Some(2), Some(2)), "the simulated manager pods are admitted and ready");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let manager_pods = pods.list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"))).await.unwrap();
    assert_eq!(manager_pods.items.len(), 2);
    for p in &manager_pods.items {
        assert_eq!(p.spec.as_ref().unwrap().service_account_name.as_deref(), Some(fullname.as_str()));
    }

    rel.uninstall().await;

    // Everything the release installed is gone, except the CRD (helm.sh/resource-policy: keep).
    assert!(deploys.get_opt(&fullname).await.unwrap().is_none(), "Deployment");
    assert!(Api::<ServiceAccount>::namespaced(client.clone(), &ns).get_opt(&fullname).await.unwrap().is_none(), "ServiceAccount");
    assert!(Api::<Service>::namespaced(client.clone(), &ns).get_opt(&format!("{fullname}-metrics")).await.unwrap().is_none(), "Service");
    let role_name = format!("{fullname}-leader-election");
    assert!(Api::<Role>::namespaced(client.clone(), &ns).get_opt(&role_name).await.unwrap().is_none(), "Role");
    assert!(Api::<RoleBinding>::namespaced(client.clone(), &ns).get_opt(&role_name).await.unwrap().is_none(), "RoleBinding");
    assert!(Api::<ClusterRole>::all(client.clone()).get_opt(&fullname).await.unwrap().is_none(), "ClusterRole");
    assert!(Api::<ClusterRoleBinding>::all(client.clone()).get_opt(&fullname).await.unwrap().is_none(), "ClusterRoleBinding");
    for name in [POLICY_NAME, TEMPLATE_FIELDS_POLICY_NAME] {
        assert!(policies.get_opt(name).await.unwrap().is_none(), "ValidatingAdmissionPolicy {name}");
        assert!(bindings.get_opt(name).await.unwrap().is_none(), "ValidatingAdmissionPolicyBinding {name}");
    }
    wait_deleted(&Api::<Namespace>::all(client.clone()), &ns, T).await.unwrap();
    assert!(crds.get_opt("clonesets.apps.kruise.io").await.unwrap().is_some(), "the CRD stays");
    let list = helm_ok(&["list", "--all", "--namespace", "default", "--short", "--kubeconfig", rel.kubeconfig.to_str().unwrap()]);
    assert!(!list.lines().any(|l| l == release), "release still listed: {list}");
    // Leave the cluster as we found it.
    if had_policy {
        restore_policy(&client).await;
    }
}

#[tokio::test]
async fn the_charts_service_account_can_run_the_operator_and_nothing_more() {
    let _one_at_a_time = CLUSTER.lock().await;
    install_api().await.unwrap();
    let ns = TestNamespace::create("helm-rbac").await.unwrap();
    let admin_kc = testenv::kubeconfig().await.unwrap();
    let release = format!("cso-{}", unique());
    let sa = format!("{release}-cloneset-operator");
    let ns_value = format!("installation.namespace={}", ns.name);
    // Only the ServiceAccount and RBAC matter here: no manager pods, no policy (install_api has it).
    let (mut rel, _) = Release::install(
        &release,
        &ns.name,
        &[
            "--set",
            &ns_value,
            "--set",
            "installation.createNamespace=false",
            "--set",
            "crds.managed=false",
            "--set",
            "admissionPolicy.enabled=false",
            "--set",
            "manager.replicas=0",
        ],
    )
    .await;

    let user = format!("system:serviceaccount:{}:{sa}", ns.name);
    let client = &ns.client;
    // Outside the chart's rules: refused.
    for (verb, group, resource, namespace) in [
        ("list", "", "secrets", Some(ns.name.as_str())),
        ("list", "", "secrets", None),
        ("list", "", "configmaps", Some(&ns.name)),
        ("create", "apps", "deployments", Some(&ns.name)),
        ("create", "apps.kruise.io", "clonesets", Some(&ns.name)),
        ("delete", "apps.kruise.io", "clonesets", Some(&ns.name)),
        ("list", "coordination.k8s.io", "leases", Some("default")),
        ("create", "", "pods/eviction", Some(&ns.name)),
        ("create", "", "pods/exec", Some(&ns.name)),
        // Nothing the operator calls: not granted either.
        ("update", "apps.kruise.io", "clonesets", Some(&ns.name)),
        ("list", "coordination.k8s.io", "leases", Some(&ns.name)),
    ] {
        assert!(
            !chart::may(client, &user, verb, group, resource, namespace).await.unwrap(),
            "{verb} {group}/{resource} in {namespace:?} is allowed"
        );
    }
    // Inside them: allowed, cluster-wide (this release watches every namespace).
    for (verb, group, resource, namespace) in [
        ("update", "coordination.k8s.io", "leases", Some(ns.name.as_str())),
        ("list", "", "pods", None),
        ("patch", "", "pods/resize", Some("default")),
        ("patch", "apps.kruise.io", "clonesets/status", Some("default")),
    ] {
        assert!(
            chart::may(client, &user, verb, group, resource, namespace).await.unwrap(),
            "{verb} {group}/{resource} in {namespace:?} is refused"
        );
    }
    let dir = repo_root().join("target/e2e-logs");
    std::fs::create_dir_all(&dir).unwrap();
    let sa_kc = dir.join(format!("{}-chart-sa.kubeconfig", ns.name));
    chart::account_kubeconfig(&admin_kc, client, &ns.name, &sa, &sa_kc).await.unwrap();

    // The operator with nothing but the chart's ServiceAccount reconciles a CloneSet end to end:
    // pods and PVCs created, status written, events recorded; then scaled down and rolled out.
    // The chart's flags: leader election on a Lease in the installation namespace; the metrics
    // and health servers on free local ports (the harness's defaults).
    let opts = OperatorOptions {
        args: vec!["--enable-leader-election=true".into(), format!("--leader-election-namespace={}", ns.name)],
        credentials: Credentials::Kubeconfig(sa_kc.clone()),
        ..Default::default()
    };
    let operator = Operator::start_with(&ns.name, opts).await.unwrap();
    let clonesets: Api<CloneSet> = ns.api();
    let cs: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": "nginx:1.27"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                      "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }))
    .unwrap();
    clonesets.create(&PostParams::default(), &cs).await.unwrap();
    let done = |replicas: i32| {
        move |cs: &CloneSet| {
            let s = cs.status.clone().unwrap_or_default();
            s.observed_generation == cs.metadata.generation.unwrap_or(0)
                && s.replicas == replicas
                && s.ready_replicas == replicas
                && s.updated_ready_replicas == replicas
                && s.current_revision == s.update_revision
        }
    };
    let wait = |what: &'static str, replicas: i32| {
        let clonesets = clonesets.clone();
        let operator = &operator;
        async move {
            watch_until(&clonesets, "web", T, done(replicas))
                .await
                .unwrap_or_else(|e| panic!("{what}: {e:#}\n--- operator log ---\n{}", operator.log_tail(40)))
        }
    };
    wait("3 ready replicas", 3).await;
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    assert_eq!(pvcs.list(&ListParams::default()).await.unwrap().items.len(), 3, "one PVC per pod");
    let events: Api<Event> = ns.api();
    wait_until(T, "a SuccessfulCreate event", || async {
        Ok(events.list(&ListParams::default()).await?.items.iter().any(|e| e.reason.as_deref() == Some("SuccessfulCreate")))
    })
    .await
    .unwrap();

    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    wait("scaled down to 1", 1).await;
    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": e2e::workload::new_image("nginx:1.28")}))).await.unwrap();
    wait("rolled out to the new image", 1).await;
    let pods: Api<Pod> = ns.api();
    wait_until(T, "one pod on the new image", || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await?;
        let active: Vec<_> = list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        Ok(active.len() == 1 && active[0].spec.as_ref().is_some_and(|s| s.containers[0].image.as_deref() == Some("nginx:1.28")))
    })
    .await
    .unwrap();
    // What the chart's liveness and readiness probes ask.
    for path in ["/healthz", "/readyz"] {
        let operator = &operator;
        wait_until(T, path, || async move { Ok(operator.probe(path).await? == 200) }).await.unwrap();
    }
    let leases = Api::<Lease>::namespaced(ns.client.clone(), &ns.name).list(&ListParams::default()).await.unwrap();
    assert!(!leases.items.is_empty(), "the leader-election Lease in the installation namespace");

    let log = std::fs::read_to_string(&operator.log).unwrap_or_default().to_lowercase();
    // An authorizer's refusal reads "<resource> is forbidden: User ..." (a 422 can say forbidden too).
    assert!(!log.contains("is forbidden: user") && !log.contains(" 403"), "the operator was refused something:\n{}", operator.log_tail(60));
    drop(operator);
    let _ = std::fs::remove_file(&sa_kc);
    rel.uninstall().await;
}

/// Kruise's chart values that mean the same here render; Kruise-only and unknown keys are refused
/// by values.schema.json with a message saying why.
#[test]
fn the_schema_keeps_kruises_shared_values_and_refuses_the_others() {
    let docs = render(&[
        "--set-string",
        "manager.log.level=4",
        "--set-string",
        "manager.loggingFormat=",
        "--set-string",
        "manager.resyncPeriod=0",
        "--set-string",
        "featureGates=ImagePullJobGate=true",
        "--set",
        "manager.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=type",
        "--set",
        "manager.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
    ]);
    let (deploy, c) = manager(&docs);
    let args = strings(&c["args"]);
    assert!(args.contains(&"--v=4".to_string()) && args.contains(&"--logging-format=text".to_string()), "{args:?}");
    assert_eq!(env_of(c, "RUST_LOG"), Value::Null, "RUST_LOG would override --v");
    let affinity = &deploy["spec"]["template"]["spec"]["affinity"];
    assert!(affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"].is_object(), "{affinity}");
    assert!(affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"].is_array(), "{affinity}");

    let chart = chart_dir();
    let refused = |set: &str| {
        let out = chart::helm(&["template", RELEASE, chart.to_str().unwrap(), "--set", set]).unwrap();
        assert!(!out.status.success(), "{set} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Kruise's webhook port is this operator's conversion webhook port.
    let docs = render(&["--set", "manager.webhook.port=9443"]);
    let (_, c) = manager(&docs);
    assert!(strings(&c["args"]).contains(&"--webhook-addr=:9443".to_string()));
    assert!(c["ports"].as_array().unwrap().iter().any(|p| p["name"] == "webhook" && p["containerPort"] == 9443));
    assert!(refused("manager.webhook.port=0").contains("/manager/webhook/port"));
    assert!(refused("daemon.port=10221").contains("there is no kruise-daemon here"));
    assert!(refused("webhookConfiguration.timeoutSeconds=30").contains("installs no admission webhook"));
    assert!(refused("manager.hostNetwork=true").contains("Kruise-only value"));
    assert!(refused("manager.replica=3").contains("additional properties 'replica' not allowed"));
    assert!(refused("manager.log.level=9").contains("/manager/log/level"));
    assert!(refused("manager.image.digest=latest").contains("/manager/image/digest"));
    assert!(refused("manager.kruiseManagerLease=kruise-manager").contains("/manager/kruiseManagerLease"), "not <namespace>/<name>");
    assert!(refused("manager.workers=0").contains("/manager/workers"));
    assert!(refused("manager.extraArgs[0]=threads").contains("/manager/extraArgs"), "a flag, not a word");
}

#[test]
fn ha_defaults_spread_the_replicas_and_bound_disruptions() {
    let docs = render(&["--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=prometheus"]);
    let (deploy, _) = manager(&docs);
    let spec = &deploy["spec"]["template"]["spec"];
    let selector = &deploy["spec"]["selector"]["matchLabels"];
    let term = &spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(&term["labelSelector"]["matchLabels"], selector);
    let spread = &spec["topologySpreadConstraints"][0];
    assert_eq!((&spread["topologyKey"], &spread["whenUnsatisfiable"]), (&json!("topology.kubernetes.io/zone"), &json!("ScheduleAnyway")));
    assert_eq!(&spread["labelSelector"]["matchLabels"], selector);
    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!((&pdb["spec"]["maxUnavailable"], &pdb["spec"]["selector"]["matchLabels"]), (&json!(1), selector));
    assert_eq!(one(&docs, "ServiceMonitor")["metadata"]["labels"]["release"], "prometheus");
    // One replica: a PDB would block every drain.
    assert!(of_kind(&render(&["--set", "manager.replicas=1"]), "PodDisruptionBudget").is_empty());
    let hard = render(&["--set", "manager.podAntiAffinity=hard"]);
    assert!(
        manager(&hard).0["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            .is_array()
    );
}

/// The migrate chart: a Job running `migrate` (or `migrate --to-kruise`) with the flags its values
/// name, and permissions for that direction only.
#[test]
fn the_migrate_chart_runs_migrate_with_its_values_and_only_that_directions_rights() {
    let lint = helm_ok(&["lint", "--strict", repo_root().join("charts/cloneset-operator-migrate").to_str().unwrap()]);
    assert!(lint.contains("0 chart(s) failed"), "{lint}");
    let render = |extra: &[&str]| chart::render_chart(chart::MIGRATE_CHART_NAME, "cloneset-migrate", "cloneset-migrate", extra).unwrap();
    let job_args = |docs: &[Value]| strings(&one(docs, "Job")["spec"]["template"]["spec"]["containers"][0]["args"]);

    let forward = render(&["--set", "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"]);
    assert_eq!(job_args(&forward), ["migrate", "--kruise-namespace=kruise-system", "--release-namespace=default", "--lease-timeout=2m"]);
    let pod = &one(&forward, "Job")["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "cloneset-migrate");
    assert!(restricted_violations(pod).is_empty(), "{:?}", restricted_violations(pod));
    assert!(
        pod["containers"][0]["image"]
            .as_str()
            .unwrap()
            .ends_with("@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
    );
    let secrets = one(&forward, "Role");
    assert_eq!(secrets["metadata"]["namespace"], "default", "Kruise's release records, in its release's namespace");
    let g = e2e::rbac::grants(&forward).unwrap();
    assert!(g.contains(&Access::new("", "secrets", "update")) && !g.iter().any(|a| a.group == "apps.kruise.io"), "{g:?}");

    // From Kruise 2.0 (v1beta1 storage): the conversion's target, and rewriting every CloneSet.
    let v2 = render(&["--set", "kruise.storesV1beta1=true", "--set", "operator.namespace=ops"]);
    assert_eq!(job_args(&v2)[2], "--conversion-service=ops/cloneset-operator-webhook");
    let g2 = e2e::rbac::grants(&v2).unwrap();
    let added: Vec<&Access> = g2.iter().filter(|a| !g.contains(a)).collect();
    assert_eq!(
        added,
        [
            &Access {
                name: Some("clonesets.apps.kruise.io".into()),
                ..Access::new("apiextensions.k8s.io", "customresourcedefinitions/status", "patch")
            },
            &Access::new("apps.kruise.io", "clonesets", "list"),
            &Access::new("apps.kruise.io", "clonesets", "update"),
        ]
    );

    let back = render(&["--set", "toKruise=true", "--set", "dryRun=true", "--set", "watchNamespace=shop", "--set", "release.name=kruise"]);
    assert_eq!(
        job_args(&back),
        [
            "migrate",
            "--to-kruise",
            "--leader-election-namespace=cloneset-system",
            "--leader-election-id=cloneset-operator-leader",
            "--namespace=shop",
            "--release-name=kruise",
            "--release-namespace=default",
            "--lease-timeout=2m",
            "--dry-run",
        ]
    );
    assert!(of_kind(&back, "Role").is_empty(), "no secrets going back");
    let g = e2e::rbac::grants(&back).unwrap();
    assert!(g.contains(&Access::new("apps.kruise.io", "clonesets", "patch")) && !g.iter().any(|a| a.resource == "secrets"), "{g:?}");
}

#[test]
fn the_grafana_dashboard_is_a_configmap_for_the_sidecar_when_enabled() {
    assert!(of_kind(&render(&[]), "ConfigMap").is_empty(), "off by default");
    let docs = render(&["--set", "grafanaDashboard.enabled=true"]);
    let cm = one(&docs, "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1", "the label Grafana's dashboard sidecar selects");
    let rendered: Value = serde_json::from_str(cm["data"]["cloneset-operator.json"].as_str().unwrap()).unwrap();
    let file =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/cloneset-operator/dashboards/cloneset-operator.json"))
            .unwrap();
    assert_eq!(rendered, serde_json::from_str::<Value>(&file).unwrap(), "the chart ships the dashboard file unchanged");
}

fn ready(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The user's path on a real node: `helm install` of the chart with the operator's own image
/// (built here, pulled from the local registry) runs two manager pods for real; one leads;
/// `/metrics` answers through the chart's Service and `/readyz` on each pod; deleting the
/// leader's pod mid-rollout hands over to another manager and the rollout finishes within
/// maxUnavailable; `helm upgrade` to another tag rolls the manager without restarting a
/// CloneSet pod; `helm uninstall` leaves the CloneSet and its pods running.
/// Moves CloneSet `work` to `image` and returns once a pod is updated: the rollout is mid-way.
async fn start_rollout(clonesets: &Api<CloneSet>, image: &str) {
    let new_image = json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}});
    clonesets.patch("work", &PatchParams::default(), &Patch::Merge(new_image)).await.unwrap();
    watch_until(clonesets, "work", T, |c| c.status.as_ref().is_some_and(|s| s.updated_replicas >= 1)).await.unwrap();
}

/// Waits for `work`'s rollout to finish with `replicas` updated and ready pods, then checks from
/// the `watched` pods that it never had more than its maxUnavailable (1) unready at once across
/// `fault`.
async fn finishes_within_max_unavailable(
    clonesets: &Api<CloneSet>,
    replicas: i32,
    (extremes, monitor): (std::sync::Arc<std::sync::Mutex<e2e::workload::Extremes>>, tokio::task::JoinHandle<()>),
    fault: &str,
) {
    watch_until(clonesets, "work", T, |c| {
        let s = c.status.clone().unwrap_or_default();
        s.observed_generation == c.metadata.generation.unwrap_or(0)
            && s.updated_replicas == replicas
            && s.updated_ready_replicas == replicas
    })
    .await
    .unwrap();
    monitor.abort();
    let seen = extremes.lock().unwrap().max_unready;
    assert!(seen <= 1, "the rollout exceeded maxUnavailable 1 across {fault}: {seen} unready at once");
}

#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn the_chart_runs_the_operators_own_image_on_a_real_node() {
    let _one_at_a_time = CLUSTER.lock().await;
    let real = e2e::real_node::real_cluster().await.real;
    let client = testenv::client().await.unwrap();
    let id = unique();
    let (release, ns) = (format!("cso-real-{id}"), format!("e2e-helm-real-{id}"));
    let fullname = format!("{release}-cloneset-operator");
    let (tag, next_tag) = (format!("e2e-{id}"), format!("e2e-{id}-next"));
    let digest = push_operator_image(&real, &this_operator(), &tag);
    push_operator_image(&real, &this_operator(), &next_tag);
    let had_policy = adopt_policy(&client, &release, "default").await;

    let real_node = &real.nodes[0].name;
    let sets = [
        format!("installation.namespace={ns}"),
        format!("manager.image.tag={tag}"),
        "manager.image.pullPolicy=Always".into(),
        "manager.log.level=debug".into(),
        "featureGates=InPlaceWorkloadVerticalScaling=true".into(),
    ];
    let placement = [
        format!("manager.nodeSelector={{\"{}\":\"true\"}}", e2e::nodes::real::LABEL),
        format!("manager.tolerations=[{{\"key\":\"{}\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}}]", e2e::nodes::real::TAINT),
    ];
    let mut args: Vec<&str> = Vec::new();
    for s in &sets {
        args.extend(["--set", s]);
    }
    for s in &placement {
        args.extend(["--set-json", s]);
    }
    args.extend(["--wait", "--timeout", "3m"]);
    let (mut rel, _) = Release::install(&release, "default", &args).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let managers = || async {
        let list = pods.list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"))).await.unwrap();
        list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect::<Vec<_>>()
    };
    let first = managers().await;
    assert_eq!(first.len(), 2);
    for p in &first {
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_ref(), Some(real_node), "{} runs on the real node", p.name_any());
        assert!(ready(p), "{} is Ready: its /readyz answered the kubelet's probe", p.name_any());
        let status = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        assert_eq!(status.image_id, format!("docker.io/library/cloneset-operator@{digest}"), "the image from the local registry");
        assert!(status.container_id.as_deref().is_some_and(|c| c.starts_with("containerd://")));
    }

    // One leads: the Lease names a manager pod.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = || async {
        let lease = leases.get_opt(cloneset_operator::leader::LEASE_NAME).await.ok().flatten();
        lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).unwrap_or_default()
    };
    // The identity is `<pod name>_<random>`.
    let leading = |among: Vec<Pod>| async move {
        let h = holder().await;
        among.into_iter().find(|p| h.starts_with(&format!("{}_", p.name_any())))
    };
    wait_until(T, "a manager pod to lead", || async { Ok(leading(first.clone()).await.is_some()) }).await.unwrap();
    let leader = leading(first.clone()).await.unwrap();
    let standby = first.iter().find(|p| p.name_any() != leader.name_any()).unwrap().clone();

    // /metrics through the Service (kube-proxy takes the ClusterIP to a pod); /readyz on each pod.
    let svc = Api::<Service>::namespaced(client.clone(), &ns).get(&format!("{fullname}-metrics")).await.unwrap();
    let cluster_ip = svc.spec.unwrap().cluster_ip.unwrap();
    // kube-proxy programs the Service once its EndpointSlice lists the ready pods: a moment after.
    let through_service = format!("{cluster_ip}:8080").parse().unwrap();
    wait_until(Duration::from_secs(30), "/metrics through the Service", || async {
        Ok(testenv::http_get(through_service, "/metrics")
            .await
            .is_ok_and(|(code, body)| code == 200 && body.contains("kruise_manager_is_leader")))
    })
    .await
    .unwrap();
    for p in &first {
        let ip = p.status.as_ref().unwrap().pod_ip.clone().unwrap();
        assert_eq!(testenv::http_get(format!("{ip}:8000").parse().unwrap(), "/readyz").await.unwrap().0, 200, "{}", p.name_any());
    }

    // A CloneSet the in-cluster operator manages (its pods on the simulated nodes).
    let work = TestNamespace::create("helm-real-work").await.unwrap();
    let clonesets: Api<CloneSet> = work.api();
    let work_pods: Api<Pod> = work.api();
    let cs: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "work"},
        "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "work"}},
                 "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1},
                 "template": {"metadata": {"labels": {"app": "work"}},
                              "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": "nginx:1.27"}]}}},
    }))
    .unwrap();
    clonesets.create(&PostParams::default(), &cs).await.unwrap();
    let ready_replicas = |n: i32| {
        move |c: &CloneSet| {
            c.status.as_ref().is_some_and(|s| s.observed_generation == c.metadata.generation.unwrap_or(0) && s.ready_replicas == n)
        }
    };
    watch_until(&clonesets, "work", T, ready_replicas(5)).await.unwrap();

    // InPlaceWorkloadVerticalScaling through the installed chart: a cpu request change of a pod on
    // the real node is made through pods/resize, which the chart's RBAC must grant: the same
    // container, not restarted, reports the new request.
    let sized = |cpu: &str| {
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27",
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "64Mi"}}}]}}}})
    };
    let mut resized: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "sized"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "sized"}},
                 "updateStrategy": {"type": "InPlaceIfPossible"},
                 "template": {"metadata": {"labels": {"app": "sized"}},
                              "spec": {"nodeSelector": {e2e::nodes::real::LABEL: "true"},
                                       "tolerations": [{"key": e2e::nodes::real::TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                                       "containers": [{"name": "main", "image": "nginx:1.27"}]}}},
    }))
    .unwrap();
    let mut spec = serde_json::to_value(&resized).unwrap();
    json_patch::merge(&mut spec, &sized("100m"));
    resized = serde_json::from_value(spec).unwrap();
    clonesets.create(&PostParams::default(), &resized).await.unwrap();
    let rolled_out = |c: &CloneSet| {
        c.status.as_ref().is_some_and(|s| {
            s.observed_generation == c.metadata.generation.unwrap_or(0) && s.updated_ready_replicas == 1 && s.replicas == 1
        })
    };
    watch_until(&clonesets, "sized", T, rolled_out).await.unwrap();
    let sized_pod = || async {
        let list = work_pods.list(&ListParams::default().labels("app=sized")).await.unwrap().items;
        list.into_iter().find(|p| p.metadata.deletion_timestamp.is_none()).expect("the sized pod")
    };
    let before = sized_pod().await;
    clonesets.patch("sized", &PatchParams::default(), &Patch::Merge(sized("200m"))).await.unwrap();
    let main_status = |p: &Pod| p.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default().remove(0);
    let reported = |p: &Pod| main_status(p).resources.and_then(|r| r.requests).and_then(|r| r.get("cpu").map(|q| q.0.clone()));
    let after = watch_until(&work_pods, &before.name_any(), T, |p| reported(p).as_deref() == Some("200m"))
        .await
        .unwrap_or_else(|e| panic!("the resize through the chart's operator: {e:#}"));
    assert_eq!(after.metadata.uid, before.metadata.uid, "resized, not recreated");
    assert_eq!(main_status(&after).container_id, main_status(&before).container_id, "the same container");
    assert_eq!(main_status(&after).restart_count, 0);
    watch_until(&clonesets, "sized", T, rolled_out).await.unwrap();
    clonesets.delete("sized", &Default::default()).await.unwrap();

    // A rollout starts, and mid-way `kubectl delete pod` of the leader: it releases the Lease on
    // its way out, and another manager takes it within a few retry periods (2 s): the standby, or
    // the Deployment's replacement pod if that polls first (client-go's election lets any
    // candidate take a released Lease). The rollout finishes within its budget.
    let watched = e2e::workload::monitor(work_pods.clone(), "app=work".into());
    start_rollout(&clonesets, "nginx:1.28").await;
    let deleted_at = std::time::Instant::now();
    pods.delete(&leader.name_any(), &Default::default()).await.unwrap();
    let handed_over = wait_until(T, "another manager to lead", || async {
        Ok(leading(managers().await).await.is_some_and(|p| p.name_any() != leader.name_any()))
    })
    .await;
    if let Err(e) = handed_over {
        let logs = pods.logs(&standby.name_any(), &Default::default()).await.unwrap_or_else(|e| e.to_string());
        let tail: Vec<&str> = logs.lines().rev().take(30).collect();
        panic!(
            "{e:#}; the Lease names {:?}; the standby's log ends:\n{}",
            holder().await,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let took = deleted_at.elapsed();
    println!("handover: {:?} led {took:?} after its predecessor's pod was deleted", holder().await);
    assert!(took < Duration::from_secs(15), "the Lease was not released on shutdown: taken over only after {took:?}");
    finishes_within_max_unavailable(&clonesets, 5, watched, "the handover").await;
    let identities = || async {
        let list = work_pods.list(&ListParams::default().labels("app=work")).await.unwrap().items;
        list.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| (p.name_any(), p.metadata.uid.clone(), p.status.as_ref().and_then(|s| s.start_time.clone())))
            .collect::<BTreeSet<_>>()
    };
    let before_upgrade = identities().await;
    assert_eq!(before_upgrade.len(), 5);

    // `helm upgrade` to another tag rolls the manager; no CloneSet pod is touched.
    let kc = rel.kubeconfig.display().to_string();
    let next = format!("manager.image.tag={next_tag}");
    let chart = chart_dir();
    helm_ok(&[
        "upgrade",
        &release,
        chart.to_str().unwrap(),
        "--namespace",
        "default",
        "--kubeconfig",
        &kc,
        "--reuse-values",
        "--set",
        &next,
        "--wait",
        "--timeout",
        "3m",
    ]);
    let rolled = managers().await;
    assert_eq!(rolled.len(), 2);
    for p in &rolled {
        assert!(
            p.spec.as_ref().unwrap().containers[0].image.as_deref().is_some_and(|i| i.ends_with(&next_tag)),
            "{} runs the new tag",
            p.name_any()
        );
        assert!(!first.iter().any(|f| f.metadata.uid == p.metadata.uid), "{} is a new manager pod", p.name_any());
    }
    wait_until(T, "a new manager pod to lead", || async { Ok(leading(rolled.clone()).await.is_some()) }).await.unwrap();
    clonesets.patch("work", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await.unwrap();
    watch_until(&clonesets, "work", T, ready_replicas(4)).await.unwrap();
    let after_upgrade = identities().await;
    assert!(
        after_upgrade.is_subset(&before_upgrade),
        "a CloneSet pod was replaced or restarted by the upgrade: {after_upgrade:?} vs {before_upgrade:?}"
    );

    // The leader's own pod evicted (the Eviction API, which its PodDisruptionBudget allows for one
    // of two) mid-rollout: another manager leads and the rollout finishes, within maxUnavailable.
    let evicted = leading(rolled.clone()).await.expect("a leader");
    let watched = e2e::workload::monitor(work_pods.clone(), "app=work".into());
    start_rollout(&clonesets, "nginx:1.27").await;
    pods.evict(&evicted.name_any(), &Default::default()).await.unwrap();
    wait_until(T, "another manager to lead after the eviction", || async {
        Ok(leading(managers().await).await.is_some_and(|p| p.name_any() != evicted.name_any()))
    })
    .await
    .unwrap();
    finishes_within_max_unavailable(&clonesets, 4, watched, "the eviction").await;
    let before_uninstall = identities().await;

    // `helm uninstall` leaves the CloneSet and its pods.
    rel.uninstall().await;
    assert!(clonesets.get_opt("work").await.unwrap().is_some(), "the CloneSet stays");
    assert_eq!(identities().await, before_uninstall, "its pods stay");
    if had_policy {
        restore_policy(&client).await;
    }
}

/// `migrate` from the operator's own image, as its chart's Job on the real node: a dry run over
/// the test cluster succeeds and says what it would change, with only the permissions the chart
/// gives it; `helm uninstall` removes the Job, its ServiceAccount and its permissions.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn the_migrate_chart_runs_migrate_from_the_operators_image_as_a_job() {
    let _one_at_a_time = CLUSTER.lock().await;
    install_api().await.unwrap();
    let real = e2e::real_node::real_cluster().await.real;
    let client = testenv::client().await.unwrap();
    let id = unique();
    let (release, ns) = (format!("cso-migrate-{id}"), format!("e2e-migrate-job-{id}"));
    let digest = push_operator_image(&real, &this_operator(), &format!("e2e-migrate-{id}"));
    let sets = ["image.repository=docker.io/library/cloneset-operator".to_string(), format!("image.digest={digest}"), "dryRun=true".into()];
    let selector = format!("nodeSelector={{\"{}\":\"true\"}}", e2e::nodes::real::LABEL);
    let toleration = format!("tolerations=[{{\"key\":\"{}\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}}]", e2e::nodes::real::TAINT);
    let mut args: Vec<&str> =
        vec!["--create-namespace", "--wait", "--wait-for-jobs", "--timeout", "3m", "--set-json", &selector, "--set-json", &toleration];
    for s in &sets {
        args.extend(["--set", s]);
    }
    let (mut rel, _) = Release::install_chart(&repo_root().join("charts/cloneset-operator-migrate"), &release, &ns, &args).await;

    let job = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ns).get(&release).await.unwrap();
    assert_eq!(job.status.and_then(|s| s.succeeded), Some(1), "the Job succeeded");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = pods.list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"))).await.unwrap().items.remove(0);
    assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some(real.nodes[0].name.as_str()), "it ran on the real node");
    let log = pods.logs(&pod.name_any(), &Default::default()).await.unwrap();
    for expected in
        ["migrate (dry run): Kruise's Lease kruise-system/kruise-manager", "CRD clonesets.apps.kruise.io", "migrate (dry run): "]
    {
        assert!(log.contains(expected), "the Job's log lacks {expected:?}:\n{log}");
    }
    assert!(!log.to_lowercase().contains("forbidden"), "the Job was refused something:\n{log}");

    rel.uninstall().await;
    assert!(Api::<ClusterRole>::all(client.clone()).get_opt(&release).await.unwrap().is_none(), "its ClusterRole");
    assert!(Api::<ClusterRoleBinding>::all(client.clone()).get_opt(&release).await.unwrap().is_none(), "its ClusterRoleBinding");
    assert!(Api::<ServiceAccount>::namespaced(client.clone(), &ns).get_opt(&release).await.unwrap().is_none(), "its ServiceAccount");
    let _ = Api::<Namespace>::all(client.clone()).delete(&ns, &Default::default()).await;
}

/// Runs `e2e/scripts/chart-release.sh` as `make run` and `make deploy` do, against the test
/// cluster, with `TAKE_OVER` when given; returns whether it succeeded and what it printed.
async fn chart_release(take_over: bool, args: &[&str]) -> (bool, String) {
    let kubeconfig = testenv::kubeconfig().await.unwrap();
    let operator = e2e::cluster::sibling_binary("cloneset-operator").unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("e2e/scripts/chart-release.sh"))
        .arg(&kubeconfig)
        .args(args)
        .env("OPERATOR", operator)
        .env("TAKE_OVER", if take_over { "1" } else { "0" })
        .env_remove("KUBECONFIG");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// `make run` and `make deploy` install one Helm release (`chart-release.sh`), so either may follow
/// the other: the first takes the CRD only when told to (here it was applied without Helm), the
/// manager's replicas follow whichever ran last, and a CRD another release owns is refused.
#[tokio::test]
async fn make_run_and_make_deploy_share_one_release_in_either_order() {
    let _one_at_a_time = CLUSTER.lock().await;
    install_api().await.unwrap();
    let client = testenv::client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let owner = |crd: &CustomResourceDefinition| crd.annotations().get("meta.helm.sh/release-name").cloned();
    let before = crds.get("clonesets.apps.kruise.io").await.unwrap();
    // Others' tests leave it with their release's metadata or none: either way not this release's.
    assert_ne!(owner(&before).as_deref(), Some("cloneset-operator"));

    // Not told to: nothing changes, and the message says whose the CRD is and what to do.
    let (ok, out) = chart_release(false, &["--set", "manager.replicas=0"]).await;
    assert!(!ok, "took the CRD without TAKE_OVER:\n{out}");
    assert!(out.contains("belongs to") && out.contains("TAKE_OVER=1"), "{out}");
    assert_eq!(crds.get("clonesets.apps.kruise.io").await.unwrap().metadata.resource_version, before.metadata.resource_version);

    // `make run TAKE_OVER=1`: the release owns the CRD and the policy; no manager runs.
    let (ok, out) = chart_release(true, &["--set", "manager.replicas=0"]).await;
    assert!(ok, "{out}");
    assert_eq!(owner(&crds.get("clonesets.apps.kruise.io").await.unwrap()).as_deref(), Some("cloneset-operator"));
    let policy = Api::<ValidatingAdmissionPolicy>::all(client.clone()).get(POLICY_NAME).await.unwrap();
    assert_eq!(policy.annotations().get("meta.helm.sh/release-name").map(String::as_str), Some("cloneset-operator"));
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "cloneset-system");
    let replicas = || async { deploys.get("cloneset-operator").await.unwrap().spec.unwrap().replicas };
    assert_eq!(replicas().await, Some(0));

    // `make deploy` after it (its managers run on the simulated nodes here), then `make run` again:
    // no ownership conflict either way.
    let (ok, out) = chart_release(false, &["--wait", "--timeout", "3m", "--set", "manager.replicas=1"]).await;
    assert!(ok, "make deploy after make run:\n{out}");
    assert_eq!(replicas().await, Some(1));
    let (ok, out) = chart_release(false, &["--set", "manager.replicas=0"]).await;
    assert!(ok, "make run after make deploy:\n{out}");
    assert_eq!(replicas().await, Some(0));

    // A CRD another Helm release owns (Kruise's) is refused, naming it, even here.
    let kruises =
        json!({"metadata": {"annotations": {"meta.helm.sh/release-name": "kruise", "meta.helm.sh/release-namespace": "default"}}});
    crds.patch("clonesets.apps.kruise.io", &PatchParams::default(), &Patch::Merge(&kruises)).await.unwrap();
    let (ok, out) = chart_release(false, &["--set", "manager.replicas=0"]).await;
    assert!(!ok && out.contains("Helm release default/kruise"), "{out}");

    // Leave the cluster as the other tests expect it: no release, the policy as install_api has it.
    let ours = json!({"metadata": {"annotations": {"meta.helm.sh/release-name": "cloneset-operator"}}});
    crds.patch("clonesets.apps.kruise.io", &PatchParams::default(), &Patch::Merge(&ours)).await.unwrap();
    let kc = testenv::kubeconfig().await.unwrap();
    let kc = kc.to_str().unwrap();
    helm_ok(&["uninstall", "cloneset-operator", "--namespace", "default", "--kubeconfig", kc, "--wait", "--timeout", "3m"]);
    wait_deleted(&Api::<Namespace>::all(client.clone()), "cloneset-system", T).await.unwrap();
    restore_policy(&client).await;
}
