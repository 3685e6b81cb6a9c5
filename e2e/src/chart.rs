//! The Helm chart as the e2e suite uses it: the pinned helm binary, `helm template`, and the
//! operator's own credentials: the ServiceAccount and RBAC the chart renders, installed for one
//! namespace, with a kubeconfig that holds a token of that account and nothing else.
//!
//! Helm is built once from the Go module proxy by `e2e/scripts/build-helm.sh` (cached outside
//! the repository); its own state lives in `target/helm-home`, never in the user's Helm config.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use anyhow::{Context as _, bail};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The chart's name, and so the suffix of every ServiceAccount it installs (`<release>-<name>`).
pub const CHART_NAME: &str = "cloneset-operator";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("charts").join(CHART_NAME)
}

/// The chart that runs `migrate` as a Job.
pub const MIGRATE_CHART_NAME: &str = "cloneset-operator-migrate";

/// The helm binary, built (or found in the cache) once per process.
pub fn helm_bin() -> anyhow::Result<&'static Path> {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    if let Some(p) = HELM.get() {
        return Ok(p);
    }
    let script = repo_root().join("e2e/scripts/build-helm.sh");
    let out = Command::new("bash").arg(&script).stderr(Stdio::inherit()).output().context("running build-helm.sh")?;
    if !out.status.success() {
        bail!("{} failed", script.display());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().context("build-helm.sh printed no path")?.trim());
    Ok(HELM.get_or_init(|| path))
}

/// Runs helm with its state under `target/helm-home` and without the ambient KUBECONFIG.
pub fn helm(args: &[&str]) -> anyhow::Result<Output> {
    let home = repo_root().join("target/helm-home");
    Command::new(helm_bin()?)
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .context("running helm")
}

/// Runs helm and returns its stdout; an error holds its output when it fails.
pub fn helm_ok(args: &[&str]) -> anyhow::Result<String> {
    let out = helm(args)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("helm {} failed:\n{stdout}\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    }
    Ok(stdout)
}

/// Parses multi-document YAML, skipping documents that hold only comments.
pub fn parse_docs(yaml: &str) -> anyhow::Result<Vec<Value>> {
    yaml.split("\n---")
        .map(|doc| doc.strip_prefix("---").unwrap_or(doc))
        .filter(|doc| doc.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')))
        .map(|doc| serde_saphyr::from_str::<Value>(doc).with_context(|| format!("rendered YAML does not parse:\n{doc}")))
        .collect()
}

/// `helm template <release> <chart> --namespace <namespace>` with extra arguments, parsed.
pub fn render(release: &str, namespace: &str, extra: &[&str]) -> anyhow::Result<Vec<Value>> {
    render_chart(CHART_NAME, release, namespace, extra)
}

/// [`render`] of the chart `charts/<name>`.
pub fn render_chart(name: &str, release: &str, namespace: &str, extra: &[&str]) -> anyhow::Result<Vec<Value>> {
    let chart = repo_root().join("charts").join(name);
    let mut args = vec!["template", release, chart.to_str().context("chart path")?, "--namespace", namespace];
    args.extend_from_slice(extra);
    parse_docs(&helm_ok(&args)?)
}

/// Whether `username` (as kube-apiserver names a request's user) is the ServiceAccount of a
/// release of this chart: `system:serviceaccount:<namespace>:[<release>-]cloneset-operator`.
pub fn is_operator_account(username: &str) -> bool {
    username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(_, name)| name == CHART_NAME || name.ends_with(&format!("-{CHART_NAME}")))
}

/// The release the suite installs for an operator watching `namespace` (its objects are
/// `<release>-cloneset-operator`, at most 63 characters).
pub fn release_for(namespace: &str) -> String {
    if namespace.len() + CHART_NAME.len() < 63 {
        return namespace.to_string();
    }
    // FNV-1a: a short stable name for a long namespace.
    let hash = namespace.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("cso-{:08x}", hash as u32)
}

/// Where the chart is installed for an operator of `namespace` started with `args`, and with
/// which values: in the namespace of its leader-election Lease (the chart grants leases only in
/// its installation namespace, and its pods' `POD_NAMESPACE` names it; the operator's own
/// namespace unless the flag says otherwise, as Kruise's chart arguments do), watching only
/// `namespace`, and reading the Kruise Lease it is told to watch.
pub fn install_for(namespace: &str, args: &[String]) -> (String, Vec<String>) {
    let flag = |name: &str| args.iter().rev().find_map(|a| a.strip_prefix(&format!("{name}=")));
    let installed_in = flag("--leader-election-namespace").filter(|n| !n.is_empty()).unwrap_or(namespace).to_string();
    let mut values = vec![
        format!("installation.namespace={installed_in}"),
        "installation.createNamespace=false".into(),
        "crds.managed=false".into(),
        "admissionPolicy.enabled=false".into(),
        format!("manager.watchNamespace={namespace}"),
    ];
    if let Some(lease) = flag("--kruise-manager-lease") {
        values.push(format!("manager.kruiseManagerLease={lease}"));
    }
    (installed_in, values)
}

/// The rendered objects that make up the operator's identity and permissions.
const IDENTITY_KINDS: [&str; 5] = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

/// Installs the ServiceAccount and RBAC that `templates` of chart `charts/<chart>` render for
/// `release` in `namespace` with `values` (`key=value`), using `admin`; returns the
/// ServiceAccount's name.
pub async fn install_identity(
    admin: &Client,
    chart: &str,
    release: &str,
    namespace: &str,
    values: &[String],
    templates: &[&str],
) -> anyhow::Result<String> {
    let mut extra: Vec<String> = Vec::new();
    for v in values {
        extra.extend(["--set".into(), v.clone()]);
    }
    for t in templates {
        extra.extend(["--show-only".into(), format!("templates/{t}")]);
    }
    let (chart, release, ns) = (chart.to_string(), release.to_string(), namespace.to_string());
    let docs =
        tokio::task::spawn_blocking(move || render_chart(&chart, &release, &ns, &extra.iter().map(String::as_str).collect::<Vec<_>>()))
            .await??;
    if let Some(kind) = docs.iter().filter_map(|d| d["kind"].as_str()).find(|k| !IDENTITY_KINDS.contains(k)) {
        bail!("{templates:?} rendered a {kind}, not only an identity and its permissions");
    }
    let applied = apply_rendered(admin, docs).await?;
    applied.into_iter().find_map(|(kind, name)| (kind == "ServiceAccount").then_some(name)).context("the chart rendered no ServiceAccount")
}

/// Applies rendered objects with `admin` (server-side apply); returns their kinds and names.
pub async fn apply_rendered(admin: &Client, docs: Vec<Value>) -> anyhow::Result<Vec<(String, String)>> {
    let ssa = PatchParams::apply("cloneset-e2e").force();
    let mut applied = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let obj: DynamicObject = serde_json::from_value(doc)?;
        let (group, version) = match obj.types.as_ref().map(|t| t.api_version.as_str()) {
            Some("v1") => ("", "v1"),
            Some(gv) => gv.split_once('/').context("apiVersion without a group")?,
            None => bail!("a rendered {kind} without apiVersion"),
        };
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &kind));
        let name = obj.metadata.name.clone().context("a rendered object without a name")?;
        let api: Api<DynamicObject> = match obj.metadata.namespace.as_deref() {
            Some(ns) => Api::namespaced_with(admin.clone(), ns, &ar),
            None => Api::all_with(admin.clone(), &ar),
        };
        api.patch(&name, &ssa, &Patch::Apply(&obj)).await.with_context(|| format!("applying {kind} {name}"))?;
        applied.push((kind, name));
    }
    Ok(applied)
}

/// Writes `out`, a kubeconfig for the cluster of `admin_kubeconfig` that authenticates as
/// ServiceAccount `namespace/account` (a token of its, valid for 12 hours), using `admin`.
pub async fn account_kubeconfig(admin_kubeconfig: &Path, admin: &Client, namespace: &str, account: &str, out: &Path) -> anyhow::Result<()> {
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 12 * 3600}}))?;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let token = sas
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .with_context(|| format!("a token for ServiceAccount {namespace}/{account}"))?
        .status
        .context("a TokenRequest without status")?
        .token;
    token_kubeconfig(admin_kubeconfig, &token, namespace, out)
}

/// Removes what [`operator_identity`] installed outside `namespace` (its ClusterRole and
/// ClusterRoleBinding); the namespace's own objects go with it.
pub async fn remove_cluster_identity(admin: &Client, namespace: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let name = format!("{}-{CHART_NAME}", release_for(namespace));
    let _ = Api::<ClusterRoleBinding>::all(admin.clone()).delete(&name, &Default::default()).await;
    let _ = Api::<ClusterRole>::all(admin.clone()).delete(&name, &Default::default()).await;
}

/// The chart's ServiceAccount for an operator: a kubeconfig with a token of it, and the namespace
/// the chart would install the operator in (its pods' `POD_NAMESPACE`).
#[derive(Clone, Debug)]
pub struct OperatorIdentity {
    pub kubeconfig: PathBuf,
    pub installed_in: String,
}

/// The chart's identity ([`OperatorIdentity`]) for an operator of `namespace` started with
/// `args`, on the cluster of `admin_kubeconfig`, installing that account and its RBAC first. One
/// per cluster, namespace and values, made once per process.
pub async fn operator_identity(admin_kubeconfig: &Path, namespace: &str, args: &[String]) -> anyhow::Result<OperatorIdentity> {
    /// The token kubeconfigs made so far, by cluster, namespace and values.
    type Made = HashMap<(PathBuf, String, Vec<String>), PathBuf>;
    static MADE: Mutex<Option<Made>> = Mutex::new(None);
    let (installed_in, values) = install_for(namespace, args);
    let key = (admin_kubeconfig.to_path_buf(), namespace.to_string(), values.clone());
    if let Some(path) = MADE.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_default().get(&key) {
        return Ok(OperatorIdentity { kubeconfig: path.clone(), installed_in });
    }
    let admin = crate::cluster::client_for(admin_kubeconfig).await?;
    let templates = ["serviceaccount.yaml", "rbac.yaml"];
    let account = install_identity(&admin, CHART_NAME, &release_for(namespace), &installed_in, &values, &templates).await?;
    let dir = repo_root().join("target/e2e-logs");
    std::fs::create_dir_all(&dir)?;
    let n = MADE.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_default().len();
    let path = dir.join(format!("{namespace}-{n}-{account}.kubeconfig"));
    account_kubeconfig(admin_kubeconfig, &admin, &installed_in, &account, &path).await?;
    permissions_in_effect(&admin, &format!("system:serviceaccount:{installed_in}:{account}"), namespace).await?;
    MADE.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_default().insert(key, path.clone());
    Ok(OperatorIdentity { kubeconfig: path, installed_in })
}

/// Waits until the authorizer lets `user` watch CloneSets in `namespace`: a new RoleBinding takes
/// a moment to reach it, and an operator started before that is refused its first requests.
async fn permissions_in_effect(admin: &Client, user: &str, namespace: &str) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !may(admin, user, "watch", "apps.kruise.io", "clonesets", Some(namespace)).await? {
        if std::time::Instant::now() > deadline {
            bail!("{user} still may not watch CloneSets in {namespace} 30 s after its RBAC was applied");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Whether ServiceAccount `user` (`system:serviceaccount:<namespace>:<name>`) may `verb`
/// `resource` (`pods`, or `pods/status`) of `group` in `namespace` (cluster-wide when `None`), as
/// kube-apiserver's authorizer answers a SubjectAccessReview sent by `admin`: the account itself
/// sends nothing (a refused request would count in the RBAC audit).
pub async fn may(admin: &Client, user: &str, verb: &str, group: &str, resource: &str, namespace: Option<&str>) -> anyhow::Result<bool> {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let (resource, sub) = resource.split_once('/').map_or((resource, None), |(r, s)| (r, Some(s)));
    let account_ns = user.strip_prefix("system:serviceaccount:").and_then(|r| r.split_once(':')).map(|(ns, _)| ns);
    let groups: Vec<String> = ["system:serviceaccounts".to_string(), "system:authenticated".to_string()]
        .into_iter()
        .chain(account_ns.map(|ns| format!("system:serviceaccounts:{ns}")))
        .collect();
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": user, "groups": groups,
        "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "subresource": sub, "namespace": namespace},
    }}))?;
    let answer = Api::<SubjectAccessReview>::all(admin.clone()).create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Makes a kubeconfig cluster entry's relative CA path, which is relative to the kubeconfig at
/// `from`, absolute, so the entry can be written into a kubeconfig elsewhere.
pub fn absolute_ca(cluster: &mut Value, from: &Path) {
    if let Some(ca) = cluster["certificate-authority"].as_str().map(PathBuf::from).filter(|p| p.is_relative()) {
        cluster["certificate-authority"] = json!(from.parent().unwrap_or(Path::new(".")).join(ca));
    }
}

/// Installs the chart's FlowSchema and PriorityLevelConfiguration for the operator of
/// `namespace` (rendered with the values [`operator_identity`] installs its account with, so the
/// FlowSchema names that account), and waits until the apiserver uses them (`Dangling=False`).
/// Returns what it installed, to delete afterwards.
pub async fn install_flowcontrol(admin: &Client, namespace: &str) -> anyhow::Result<Vec<(ApiResource, String)>> {
    let (installed_in, values) = install_for(namespace, &[]);
    let mut extra: Vec<&str> = values.iter().flat_map(|v| ["--set", v.as_str()]).collect();
    extra.extend(["--show-only", "templates/flowcontrol.yaml"]);
    let docs = render(&release_for(namespace), &installed_in, &extra)?;
    let flowcontrol = |kind: &str| ApiResource::from_gvk(&GroupVersionKind::gvk("flowcontrol.apiserver.k8s.io", "v1", kind));
    let installed: Vec<(ApiResource, String)> =
        apply_rendered(admin, docs).await?.into_iter().map(|(kind, name)| (flowcontrol(&kind), name)).collect();
    let schema =
        installed.iter().find(|(ar, _)| ar.kind == "FlowSchema").map(|(_, n)| n.clone()).context("the chart rendered no FlowSchema")?;
    let schemas: Api<DynamicObject> = Api::all_with(admin.clone(), &flowcontrol("FlowSchema"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let fs = schemas.get(&schema).await?;
        let conditions = fs.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
        if conditions.iter().any(|c| c["type"] == "Dangling" && c["status"] == "False") {
            return Ok(installed);
        }
        if std::time::Instant::now() > deadline {
            bail!("FlowSchema {schema} not in use (Dangling=False) 30 s after it was applied: {:?}", fs.data["status"]);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Writes a kubeconfig for the cluster of `admin` (its current context) that authenticates with
/// `token` only.
pub fn token_kubeconfig(admin: &Path, token: &str, namespace: &str, out: &Path) -> anyhow::Result<()> {
    let kc = kube::config::Kubeconfig::read_from(admin)?;
    let current = kc.current_context.clone().context("a kubeconfig without a current context")?;
    let context = kc.contexts.iter().find(|c| c.name == current).and_then(|c| c.context.clone()).context("no current context")?;
    let named = kc.clusters.iter().find(|c| c.name == context.cluster).context("the current context's cluster is missing")?;
    let mut cluster = serde_json::to_value(named.cluster.clone().context("a cluster entry without a cluster")?)?;
    absolute_ca(&mut cluster, admin);
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "cluster", "user": "operator", "namespace": namespace}}],
        "current-context": "operator",
    });
    // JSON is YAML: kubectl and kube read it as a kubeconfig.
    std::fs::write(out, serde_json::to_vec_pretty(&config)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_accounts_are_recognised_and_no_other() {
        assert!(is_operator_account("system:serviceaccount:cloneset-system:cloneset-operator"));
        assert!(is_operator_account("system:serviceaccount:e2e-x:e2e-x-cloneset-operator"));
        assert!(!is_operator_account("system:serviceaccount:e2e-x:operator"));
        assert!(!is_operator_account("system:serviceaccount:e2e-x:cloneset-operator-migrate"));
        assert!(!is_operator_account("system:serviceaccount:kube-system:replicaset-controller"));
        assert!(!is_operator_account("admin"));
    }

    #[test]
    fn a_release_name_keeps_the_objects_within_63_characters() {
        assert_eq!(release_for("e2e-in-place-1a2b3"), "e2e-in-place-1a2b3");
        let long = "e2e-a-very-long-prefix-of-a-test-namespace-1a2b3c4d5e";
        let release = release_for(long);
        assert!(release.starts_with("cso-") && release.len() + CHART_NAME.len() < 63, "{release}");
        assert_eq!(release, release_for(long), "stable");
    }

    #[test]
    fn the_values_follow_the_flags_that_change_permissions() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (installed_in, v) = install_for("ns", &args(&["--kruise-manager-lease=ns/kruise-manager"]));
        assert_eq!(installed_in, "ns");
        assert!(v.contains(&"manager.watchNamespace=ns".to_string()) && v.contains(&"installation.namespace=ns".to_string()));
        assert!(v.contains(&"manager.kruiseManagerLease=ns/kruise-manager".to_string()));
        // Kruise's chart arguments: the Lease, and so the installation, in kruise-system.
        let (installed_in, v) = install_for("ns", &args(&["--leader-election-namespace=ns", "--leader-election-namespace=kruise-system"]));
        assert_eq!(installed_in, "kruise-system");
        assert!(v.contains(&"installation.namespace=kruise-system".to_string()) && v.contains(&"manager.watchNamespace=ns".to_string()));
    }
}
