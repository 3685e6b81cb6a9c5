//! A Helm release of the chart on the test cluster, for the tests that install, upgrade, roll back
//! and uninstall one: the release (uninstalled when dropped), the admission policies and CRD
//! adopted into it, the operator's image pushed to the real nodes' registry, and the previous
//! release (`e2e/previous-release`) that `make previous-release` builds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context as _, bail};
use cloneset_operator::api::crd::{POLICY_NAME, TEMPLATE_FIELDS_POLICY_NAME};
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::chart::{self, chart_dir, repo_root};
use crate::testenv;

/// A name part no other run of the same test used: releases and namespaces outlive a failed test.
pub fn unique() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{:x}{:x}", nanos % 0xfffff, N.fetch_add(1, Ordering::Relaxed))
}

/// [`chart::helm`] off the async runtime (install and uninstall wait for minutes).
pub async fn helm_async(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || chart::helm(&args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap()).await.unwrap()
}

/// Runs helm with `args` and fails the test, with helm's output, when it fails.
pub async fn helm_must(args: Vec<String>) -> Output {
    let out = helm_async(args.clone()).await;
    assert!(
        out.status.success(),
        "helm {} failed:\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A Helm release on the test cluster, uninstalled on drop if the test did not.
pub struct Release {
    pub name: String,
    pub namespace: String,
    pub kubeconfig: PathBuf,
    installed: bool,
}

impl Release {
    /// `helm install` of this checkout's chart.
    pub async fn install(name: &str, namespace: &str, extra: &[&str]) -> (Self, Output) {
        Self::install_chart(&chart_dir(), name, namespace, extra).await
    }

    pub async fn install_chart(chart: &Path, name: &str, namespace: &str, extra: &[&str]) -> (Self, Output) {
        let kubeconfig = testenv::kubeconfig().await.unwrap();
        let release = Self { name: name.into(), namespace: namespace.into(), kubeconfig, installed: true };
        let mut args = vec!["install".to_string(), name.to_string(), chart.display().to_string()];
        args.extend(release.target());
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = helm_must(args).await;
        (release, out)
    }

    /// `--namespace <records> --kubeconfig <test cluster>`, for any helm command on the release.
    pub fn target(&self) -> Vec<String> {
        ["--namespace", &self.namespace, "--kubeconfig", &self.kubeconfig.display().to_string()].map(String::from).to_vec()
    }

    /// `helm upgrade` of the release to `chart` with `extra` arguments.
    pub async fn upgrade(&self, chart: &Path, extra: &[&str]) -> Output {
        let mut args = vec!["upgrade".to_string(), self.name.clone(), chart.display().to_string()];
        args.extend(self.target());
        args.extend(extra.iter().map(|s| s.to_string()));
        helm_must(args).await
    }

    /// `helm rollback` of the release to `revision` with `extra` arguments.
    pub async fn rollback(&self, revision: u32, extra: &[&str]) -> Output {
        let mut args = vec!["rollback".to_string(), self.name.clone(), revision.to_string()];
        args.extend(self.target());
        args.extend(extra.iter().map(|s| s.to_string()));
        helm_must(args).await
    }

    fn uninstall_args(&self) -> Vec<String> {
        let mut args = vec!["uninstall".to_string(), self.name.clone()];
        args.extend(self.target());
        args.extend(["--wait", "--timeout", "3m"].map(String::from));
        args
    }

    pub async fn uninstall(&mut self) {
        let out = helm_async(self.uninstall_args()).await;
        self.installed = false;
        assert!(out.status.success(), "helm uninstall failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.installed {
            let args = self.uninstall_args();
            let _ = chart::helm(&args.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}

/// `testenv::install_api` (other tests, other test binaries) creates the admission policies
/// without Helm's ownership metadata, so `helm install` would refuse them. Mark them as the
/// release's, as an operator adopting existing objects into a release would. Returns whether
/// there was one to adopt.
pub async fn adopt_policy(client: &Client, release: &str, release_namespace: &str) -> bool {
    let patch = json!({"metadata": {
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": release_namespace},
    }});
    let pp = PatchParams::default();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    for name in [POLICY_NAME, TEMPLATE_FIELDS_POLICY_NAME] {
        if policies.get_opt(name).await.unwrap().is_some() {
            policies.patch(name, &pp, &Patch::Merge(&patch)).await.unwrap();
        }
        if bindings.get_opt(name).await.unwrap().is_some() {
            bindings.patch(name, &pp, &Patch::Merge(&patch)).await.unwrap();
        }
    }
    // The chart's CRD template adopts the CRD the same way.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt("clonesets.apps.kruise.io").await.unwrap().is_some() {
        crds.patch("clonesets.apps.kruise.io", &pp, &Patch::Merge(&patch)).await.unwrap();
    }
    policies.get_opt(POLICY_NAME).await.unwrap().is_some()
}

/// Puts the admission policies back the way `testenv::install_api` applies them.
pub async fn restore_policy(client: &Client) {
    let ssa = PatchParams::apply("cloneset-e2e").force();
    for (policy, binding) in cloneset_operator::api::crd::admission_policies() {
        let name = policy.metadata.name.clone().unwrap();
        Api::<ValidatingAdmissionPolicy>::all(client.clone()).patch(&name, &ssa, &Patch::Apply(&policy)).await.unwrap();
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).patch(&name, &ssa, &Patch::Apply(&binding)).await.unwrap();
    }
}

/// The values a platform team keeps for a release on the test cluster: the installation
/// namespace, the manager's `image` values, and the manager pods on the real node.
pub fn real_node_values(namespace: &str, image: serde_json::Value) -> serde_json::Value {
    json!({
        "installation": {"namespace": namespace},
        "manager": {
            "image": image,
            "nodeSelector": {crate::nodes::real::LABEL: "true"},
            "tolerations": [{"key": crate::nodes::real::TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        },
    })
}

/// Puts back what every other test uses once a test's release is gone: the CRD without the
/// release's settings, and the admission policies if there were any to adopt.
pub async fn restore_test_api(client: &Client, had_policy: bool) {
    testenv::apply_crd(client, &cloneset_operator::api::crd::crd()).await.unwrap();
    if had_policy {
        restore_policy(client).await;
    }
}

/// The operator's image made from `binary` (debug info stripped, as it does not run), named
/// `reference` and labelled for `architecture`, as an OCI archive in target/e2e-images (`name`
/// tells the archives apart).
pub fn operator_archive(binary: &Path, reference: &str, name: &str, architecture: &str) -> PathBuf {
    let work = repo_root().join("target/e2e-images");
    std::fs::create_dir_all(&work).unwrap();
    let stripped = work.join(format!("cloneset-operator-{name}"));
    let copied = Command::new("objcopy").args(["--strip-debug"]).arg(binary).arg(&stripped).status().is_ok_and(|s| s.success());
    let bytes = std::fs::read(if copied { &stripped } else { binary }).unwrap();
    crate::image::check_static(&bytes)
        .unwrap_or_else(|e| panic!("{}: {e:#}; build with `make` (it links statically) before running this test", binary.display()));
    let archive = work.join(format!("cloneset-operator-{name}.oci.tar"));
    let version = crate::image::BinaryVersion::of(binary).unwrap();
    let image = crate::image::build_for(&crate::image::operator_image(reference, bytes, &version), architecture);
    crate::image::write_archive(&archive, &image).unwrap();
    let _ = std::fs::remove_file(&stripped);
    archive
}

/// The operator's image made from `binary` ([`operator_archive`]), copied into the test
/// cluster's registry as `docker.io/library/cloneset-operator:<tag>`; returns the registry's
/// digest.
pub fn push_operator_image(real: &crate::nodes::real::RealNodes, binary: &Path, tag: &str) -> String {
    let reference = format!("docker.io/library/cloneset-operator:{tag}");
    let archive = operator_archive(binary, &reference, tag, crate::image::host_architecture());
    crate::registry::push(&archive, real.registry, &reference).unwrap()
}

/// This checkout's operator binary (the one `make` builds beside the e2e binaries).
pub fn this_operator() -> PathBuf {
    crate::cluster::sibling_binary("cloneset-operator").unwrap()
}

/// The release an upgrade is tested from, as `make previous-release` left it.
pub struct PreviousRelease {
    pub version: String,
    pub commit: String,
    /// Its operator binary, built from its commit.
    pub binary: PathBuf,
    /// Its chart (`charts/cloneset-operator` at its commit).
    pub chart: PathBuf,
}

/// The version and commit `e2e/previous-release` names.
pub fn previous_release_row() -> anyhow::Result<(String, String)> {
    let path = repo_root().join("e2e/previous-release");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let row = text.lines().find(|l| !l.starts_with('#') && !l.trim().is_empty()).context("e2e/previous-release names no release")?;
    match row.split_whitespace().collect::<Vec<_>>()[..] {
        [version, commit] => Ok((version.to_string(), commit.to_string())),
        _ => bail!("e2e/previous-release: {row:?} is not `<version> <commit>`"),
    }
}

/// The previous release's binary and chart, built by `make previous-release` (which `make e2e`
/// runs first); a clear error when they are missing or from another commit.
pub fn previous_release() -> anyhow::Result<PreviousRelease> {
    let (version, commit) = previous_release_row()?;
    let dir = repo_root().join("target/previous-release").join(&version);
    let built = std::fs::read_to_string(dir.join("commit")).unwrap_or_default();
    if built.trim() != commit {
        bail!("{} holds no build of {version} ({commit}): run `make previous-release` (make e2e does)", dir.display());
    }
    let binary = dir.join("cloneset-operator");
    let built = crate::image::BinaryVersion::of(&binary)?;
    if built.version != version || !commit.starts_with(&built.revision) {
        bail!("{} is {} at {}, not {version} at {commit}", binary.display(), built.version, built.revision);
    }
    Ok(PreviousRelease { version, commit, binary, chart: dir.join("charts").join(chart::CHART_NAME) })
}

/// `chart` packaged by Helm and pushed to the registry at `registry` under `charts/` (plain
/// HTTP, as the test registry serves), as a platform team publishes one; returns the
/// `oci://` reference to install it from with `--version`.
pub fn push_chart(chart: &Path, registry: std::net::SocketAddr, work: &Path) -> anyhow::Result<String> {
    let out = chart::helm_ok(&["package", &chart.display().to_string(), "--destination", &work.display().to_string()])?;
    // "Successfully packaged chart and saved it to: <path>"
    let package = out.rsplit(": ").next().map(str::trim).context("helm package printed no path")?.to_string();
    let repository = format!("oci://{registry}/charts");
    chart::helm_ok(&["push", &package, &repository, "--plain-http"])?;
    Ok(format!("{repository}/{}", chart.file_name().context("a chart directory")?.to_string_lossy()))
}
