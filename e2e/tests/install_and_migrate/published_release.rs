//! A release as a platform team takes it: `make publish`'s script (e2e/scripts/publish.sh)
//! pushes the image and both charts of a release directory to a registry and signs each by its
//! digest with cosign, the SBOM attached as a signed attestation; the team verifies them with
//! cosign as docs/install.md shows, then installs the chart from `oci://` by its digest with the
//! image pinned by its digest, the manager pods on a real node.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine as _;
use cloneset_operator::api::CloneSet;
use e2e::chart::{self, chart_dir, repo_root};
use e2e::helm_release::{Release, adopt_policy, operator_archive, real_node_values, restore_test_api, this_operator, unique};
use e2e::image::host_architecture;
use e2e::testenv::{self, TestNamespace, install_api, watch_until};
use e2e::workload::{manifest, rolled_out};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(120);
const PASSWORD: &str = "e2e-release-key";

/// Runs the pinned cosign (e2e/scripts/cosign.sh) in `dir` with `args`.
fn cosign(dir: &Path, args: &[&str]) -> Output {
    Command::new("bash")
        .arg(repo_root().join("e2e/scripts/cosign.sh"))
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", PASSWORD)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// What docs/install.md gives cosign as its trusted root where Sigstore's services are out of
/// reach: none, so that it fetches none (a key needs none).
const EMPTY_TRUSTED_ROOT: &str = r#"{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}"#;

/// `cosign verify` (or `verify-attestation`, with `extra`) of `reference` against `public_key`,
/// as docs/install.md has it for a registry of one's own without Sigstore's services.
fn verify(command: &str, public_key: &Path, reference: &str, extra: &[&str]) -> Output {
    let key = public_key.display().to_string();
    let root = public_key.parent().unwrap().join("trusted-root.json");
    std::fs::write(&root, EMPTY_TRUSTED_ROOT).unwrap();
    let root = root.display().to_string();
    let mut args = vec![command, "--key", &key, "--insecure-ignore-tlog=true", "--trusted-root", &root];
    args.extend(["--allow-http-registry", "--allow-insecure-registry"]);
    args.extend(extra);
    args.push(reference);
    cosign(public_key.parent().unwrap(), &args)
}

/// The chart's version (Chart.yaml), which a release's artifacts are named after.
fn chart_version() -> String {
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    text.lines().find_map(|l| l.strip_prefix("version: ")).unwrap().trim().trim_matches('"').to_string()
}

/// A second architecture's name, for the image beside this machine's.
fn other_architecture() -> &'static str {
    if host_architecture() == "arm64" { "amd64" } else { "arm64" }
}

/// The release directory as the release workflow gathers it from its builders, for this
/// checkout's operator: one image archive per architecture, both charts packaged by Helm and
/// the SBOM. The second architecture's image holds this machine's binary under that
/// architecture's name: what is under test is the index over the two, from which a node pulls
/// its own.
fn release_dir(dir: &Path, version: &str, id: &str) -> Value {
    std::fs::create_dir_all(dir).unwrap();
    for arch in [host_architecture(), other_architecture()] {
        let reference = format!("docker.io/library/cloneset-operator:{version}");
        let archive = operator_archive(&this_operator(), &reference, &format!("published-{id}-{arch}"), arch);
        std::fs::rename(&archive, dir.join(format!("cloneset-operator-{version}-{arch}.oci.tar"))).unwrap();
    }
    for name in [chart::CHART_NAME, chart::MIGRATE_CHART_NAME] {
        let path = repo_root().join("charts").join(name).display().to_string();
        chart::helm_ok(&["package", &path, "--destination", &dir.display().to_string()]).unwrap();
    }
    // `make release` lists the crates cargo auditable recorded in the release binary; the e2e
    // build is no such binary, so its SBOM names the operator alone.
    let sbom = json!({
        "bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1,
        "metadata": {"component": {"type": "application", "name": "cloneset-operator", "version": version}},
        "components": [],
    });
    std::fs::write(dir.join(format!("cloneset-operator-{version}.cdx.json")), sbom.to_string()).unwrap();
    sbom
}

/// A reference's repository and digest (`repo@sha256:...`, without `oci://`).
fn split(reference: &str) -> (&str, &str) {
    reference.trim_start_matches("oci://").split_once('@').unwrap()
}

/// Published with `make publish`'s script, signed with the team's cosign key: the image and both
/// charts verify against that key and are refused against another; the SBOM attestation verifies
/// and carries the release's SBOM; the chart installs from `oci://` by its digest, its manager
/// pods run the image by its digest, and manage a CloneSet.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn a_release_verified_with_cosign_installs_from_its_registry_by_digest() {
    let real = e2e::real_node::real_cluster().await.real;
    let client = testenv::client().await.unwrap();
    install_api().await.unwrap();
    let id = unique();
    let work = repo_root().join("target/e2e-published").join(&id);
    let version = chart_version();
    let dir = work.join("release");
    let sbom = release_dir(&dir, &version, &id);

    // The team's key pair, as `cosign generate-key-pair` makes it, and one that is not theirs.
    for name in ["team", "other"] {
        std::fs::create_dir_all(work.join(name)).unwrap();
        let out = cosign(&work.join(name), &["generate-key-pair"]);
        assert!(out.status.success(), "cosign generate-key-pair: {}", text(&out));
    }
    let (team, other) = (work.join("team/cosign.pub"), work.join("other/cosign.pub"));

    // Published as `make publish` does it, to a path of the test registry.
    let registry = format!("{}/e2e-{id}", real.registry);
    let out = Command::new("bash")
        .arg(repo_root().join("e2e/scripts/publish.sh"))
        .args([dir.display().to_string(), version.clone(), registry.clone()])
        .env("COSIGN_KEY", work.join("team/cosign.key"))
        .env("COSIGN_PASSWORD", PASSWORD)
        .env("TLOG", "0")
        .env("PLAIN_HTTP", "1")
        .env("LOCAL_CLUSTER", e2e::cluster::sibling_binary("local-cluster").unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "publish.sh failed:\n{}", text(&out));
    let published = std::fs::read_to_string(dir.join("published.txt")).unwrap();
    println!("published:\n{published}");
    let find = |kind: &str, repository: &str| {
        published
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{kind} ")).filter(|r| split(r).0.trim_start_matches("oci://") == repository))
            .unwrap_or_else(|| panic!("published.txt names no {kind} in {repository}:\n{published}"))
            .to_string()
    };
    let image = find("image", &format!("{registry}/cloneset-operator"));
    let charts = [chart::CHART_NAME, chart::MIGRATE_CHART_NAME].map(|c| find("chart", &format!("{registry}/charts/{c}")));

    // The image is an index over both architectures' images.
    let raw = e2e::host::run("skopeo", &["inspect", "--raw", "--tls-verify=false", &format!("docker://{image}")]).unwrap();
    let index: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(index["mediaType"], "application/vnd.oci.image.index.v1+json", "the published image: {index}");
    let platforms: Vec<(String, String)> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["platform"]["architecture"].as_str().unwrap().to_string(), m["digest"].as_str().unwrap().to_string()))
        .collect();
    let mut architectures: Vec<&str> = platforms.iter().map(|p| p.0.as_str()).collect();
    architectures.sort();
    assert_eq!(architectures, ["amd64", "arm64"], "the index's platforms");
    let per_platform: Vec<String> = platforms.iter().map(|(_, d)| format!("{}@{d}", split(&image).0)).collect();

    // Each verifies against the team's key (the index and each architecture's image alike),
    // naming its own repository and digest, and is refused against the other key.
    for reference in [&image, &per_platform[0], &per_platform[1], &charts[0], &charts[1]] {
        let (repository, digest) = split(reference);
        let out = verify("verify", &team, &format!("{repository}@{digest}"), &[]);
        assert!(out.status.success(), "cosign verify {reference}: {}", text(&out));
        let claims: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert!(!claims.is_empty(), "cosign verify {reference} printed no claims");
        for claim in &claims {
            assert_eq!(claim["critical"]["image"]["docker-manifest-digest"], digest, "the signature's digest: {claim}");
            assert_eq!(claim["critical"]["identity"]["docker-reference"], repository, "the signature's repository: {claim}");
        }
        let refused = verify("verify", &other, &format!("{repository}@{digest}"), &[]);
        assert!(!refused.status.success(), "cosign verify {reference} against another key passed: {}", text(&refused));
    }
    // The SBOM, signed, attached to the image.
    let out = verify("verify-attestation", &team, &image, &["--type", "cyclonedx"]);
    assert!(out.status.success(), "cosign verify-attestation: {}", text(&out));
    let envelope: Value = serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let payload = base64::engine::general_purpose::STANDARD.decode(envelope["payload"].as_str().unwrap()).unwrap();
    let statement: Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(statement["predicate"], sbom, "the attested SBOM is the release's");
    assert_eq!(format!("sha256:{}", statement["subject"][0]["digest"]["sha256"].as_str().unwrap()), split(&image).1);
    let refused = verify("verify-attestation", &other, &image, &["--type", "cyclonedx"]);
    assert!(!refused.status.success(), "the attestation verified against another key: {}", text(&refused));

    // Installed as docs/install.md shows: the chart by its digest, the image pinned by its digest.
    let ns = format!("e2e-published-{id}");
    let release = format!("cso-pub-{id}");
    let had_policy = adopt_policy(&client, &release, "default").await;
    let (repository, digest) = split(&image);
    let values = real_node_values(&ns, json!({"repository": repository, "digest": digest}));
    let values_path = work.join("values.yaml");
    std::fs::write(&values_path, values.to_string()).unwrap();
    let values_arg = values_path.display().to_string();
    let (mut rel, _) = Release::install_chart(
        Path::new(&charts[0]),
        &release,
        "default",
        &["--plain-http", "-f", &values_arg, "--wait", "--timeout", "3m"],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let managers = pods.list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"))).await.unwrap().items;
    assert!(!managers.is_empty(), "the release runs no manager pod");
    for p in &managers {
        let spec_image = p.spec.as_ref().unwrap().containers[0].image.clone().unwrap_or_default();
        assert_eq!(spec_image, format!("{repository}@{digest}"), "{} runs the image by its digest", p.name_any());
        let status = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        assert!(status.image_id.ends_with(&format!("@{digest}")), "{} pulled {}, not {digest}", p.name_any(), status.image_id);
    }
    let work_ns = TestNamespace::create("published-work").await.unwrap();
    let clonesets: Api<CloneSet> = work_ns.api();
    clonesets.create(&PostParams::default(), &manifest("web", 3, "nginx:1.27", json!({}))).await.unwrap();
    watch_until(&clonesets, "web", T, |c| rolled_out(c, 3)).await.unwrap();

    rel.uninstall().await;
    drop(work_ns);
    restore_test_api(&client, had_policy).await;
    let _ = std::fs::remove_dir_all(&work);
}
