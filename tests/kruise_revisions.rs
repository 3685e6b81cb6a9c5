//! Revision names and data as OpenKruise v1.9.0 writes them, for templates as users write them:
//! Kruise's webhook defaults the template (`SetDefaultPodSpec`) before the controller hashes it.
//!
//! Ground truth in `tests/golden/` (see its README): `revisions-corpus.yaml` holds CloneSets,
//! `revisions-expected.tsv` the revision name and the exact revision data Kruise recorded for
//! each, and `kruise-v1.9.0-objects/` objects exactly as Kruise stored them.

use std::path::{Path, PathBuf};

use cloneset_operator::core::defaults::default_pod_template;
use cloneset_operator::core::revision::{hash_revision, revision_data, revision_name, template_from_revision_data};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::{Value, json};

fn golden(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(file)
}

fn read(file: &str) -> String {
    let path = golden(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml_documents(file: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(&read(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// What the controller records for a CloneSet's template: read through the typed
/// `PodTemplateSpec` as the controller holds it, defaulted as Kruise's webhook would have, encoded.
fn recorded(name: &str, template: &Value) -> (String, String) {
    let typed: PodTemplateSpec = serde_json::from_value(template.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let template = serde_json::to_value(&typed).unwrap();
    let data = revision_data(&default_pod_template(&template));
    let revision = revision_name(name, &hash_revision(&data, 0));
    (revision, String::from_utf8(data).unwrap())
}

/// Every corpus template comes out with Kruise's revision name and Kruise's revision data, byte
/// for byte.
#[test]
fn kruise_names_and_records_every_corpus_template_after_defaulting_it() {
    let corpus = yaml_documents("revisions-corpus.yaml");
    let expected: Vec<(String, String)> = read("revisions-expected.tsv")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (name, data) = l.split_once('\t').unwrap_or_else(|| panic!("not name<TAB>data: {l}"));
            (name.to_string(), data.to_string())
        })
        .collect();
    assert_eq!(corpus.len(), expected.len(), "one expected line per corpus document");
    assert!(corpus.len() >= 10);

    let mut failures = Vec::new();
    for (cs, (want_revision, want_data)) in corpus.iter().zip(&expected) {
        let name = cs["metadata"]["name"].as_str().expect("metadata.name");
        let (revision, data) = recorded(name, &cs["spec"]["template"]);
        if data != *want_data {
            failures.push(format!("{name}: data differs\n    ours:   {data}\n    kruise: {want_data}"));
        } else if revision != *want_revision {
            failures.push(format!("{name}: revision {revision} != {want_revision}"));
        }
        // Kruise's stored template is its own defaulting's fixed point: recording it again keeps the name.
        let stored = template_from_revision_data(want_data.as_bytes()).unwrap();
        assert_eq!(recorded(name, &stored), (want_revision.clone(), want_data.clone()), "{name}: re-defaulting Kruise's template");
    }
    assert!(failures.is_empty(), "{} of {} differ from Kruise:\n{}", failures.len(), corpus.len(), failures.join("\n"));
}

/// The README's example: CloneSet `sample` with one `nginx:alpine` container is `sample-d4d4fb5bd`
/// in Kruise (it was `sample-597d4cb8fd` here before the template was defaulted).
#[test]
fn kruise_names_the_sample_manifest_sample_d4d4fb5bd() {
    let template = json!({"metadata": {"labels": {"app": "sample"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]}});
    assert_eq!(recorded("sample", &template).0, "sample-d4d4fb5bd");
}

/// A CloneSet Kruise created keeps its revision names under this operator: its stored template
/// is already defaulted, and defaulting it again changes no byte. Checked on the objects Kruise
/// wrote, and against the bare manifests they were applied from.
#[test]
fn a_cloneset_kruise_created_keeps_its_revision_names() {
    // The CloneSet: its stored template hashes to the revision in its status.
    let cs = &yaml_documents("kruise-v1.9.0-objects/cloneset-in-place.yaml")[0];
    let revision = cs["status"]["updateRevision"].as_str().unwrap();
    assert_eq!(revision, "inplace-b55cd4488");
    assert_eq!(recorded("inplace", &cs["spec"]["template"]).0, revision);
    // … and so does the manifest it was applied from, with the image it was later given.
    let applied: Value =
        serde_json::from_str(cs["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].as_str().unwrap()).unwrap();
    let mut bare = applied["spec"]["template"].clone();
    bare["spec"]["containers"][0]["image"] = json!("nginx:1.26");
    assert_eq!(recorded("inplace", &bare).0, revision);

    // Kruise's ControllerRevisions: each one's data names it again.
    let list = &yaml_documents("kruise-v1.9.0-objects/controllerrevisions-canary.yaml")[0];
    let revisions = list["items"].as_array().unwrap();
    assert_eq!(revisions.len(), 2);
    for rev in revisions {
        let name = rev["metadata"]["name"].as_str().unwrap();
        let hash = rev["metadata"]["labels"]["controller.kubernetes.io/hash"].as_str().unwrap();
        assert_eq!(name, format!("canary-{hash}"));
        let mut stored = rev["data"]["spec"]["template"].clone();
        stored.as_object_mut().unwrap().remove("$patch");
        assert_eq!(recorded("canary", &stored).0, name);
        let applied: Value =
            serde_json::from_str(rev["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].as_str().unwrap())
                .unwrap();
        let mut bare = applied["spec"]["template"].clone();
        bare["spec"]["containers"][0]["image"] = stored["spec"]["containers"][0]["image"].clone();
        assert_eq!(recorded("canary", &bare).0, name, "the bare manifest of {name}");
    }
}
