//! ControllerRevision data must match OpenKruise v1.9.0 byte for byte.
//!
//! `e2e/revision-golden/corpus.jsonl` holds pod templates; `vectors.jsonl` holds what the Go reference
//! program in that directory (built against the Kubernetes libraries Kruise v1.9.0 uses) produced
//! for them. The first test checks our encoding against the committed vectors. The second rebuilds
//! the vectors and the PodTemplateSpec schema (`src/core/gojson_podtemplate_schema.json`) with that
//! program and checks that the committed files are current; it needs Go, so it is `#[ignore]`d
//! with that reason, and `make test` (which requires Go) runs it. A third, ignored for the same
//! reason, regenerates the list of template fields newer than that schema
//! (`src/api/newer_pod_template_fields.json`) from the newest `k8s.io/api`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use cloneset_operator::core::defaults::default_volume_claim_templates;
use cloneset_operator::core::revision::{hash_revision, revision_data, revision_name, volume_claim_templates_hash};
use serde_json::Value;

const GOLDEN_DIR: &str = "e2e/revision-golden";
const SCHEMA_FILE: &str = "src/core/gojson_podtemplate_schema.json";
const NEWER_FIELDS_DIR: &str = "e2e/revision-golden/newer-fields";
const NEWER_FIELDS_FILE: &str = "src/api/newer_pod_template_fields.json";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json_lines(path: &Path) -> Vec<Value> {
    read(path)
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1)))
        .collect()
}

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("missing string {key:?} in {v}"))
}

/// Shows where two byte strings first differ.
fn first_difference(ours: &str, go: &str) -> String {
    let at = ours.bytes().zip(go.bytes()).position(|(a, b)| a != b).unwrap_or(ours.len().min(go.len()));
    let window = |s: &str| {
        let mut start = at.saturating_sub(60).min(s.len());
        while !s.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (at + 60).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        s[start..end].to_string()
    };
    format!("first difference at byte {at}\n    ours: …{}…\n    go:   …{}…", window(ours), window(go))
}

#[test]
fn our_encoding_matches_the_committed_go_vectors() {
    let corpus = json_lines(&root().join(GOLDEN_DIR).join("corpus.jsonl"));
    let vectors = json_lines(&root().join(GOLDEN_DIR).join("vectors.jsonl"));
    assert_eq!(corpus.len(), vectors.len(), "corpus.jsonl and vectors.jsonl differ in length; regenerate the vectors");
    assert!(corpus.len() >= 50, "the corpus should have at least 50 templates, has {}", corpus.len());

    let mut failures = Vec::new();
    for (i, (entry, vector)) in corpus.iter().zip(&vectors).enumerate() {
        let name = str_field(entry, "name");
        let collision_count = i32::try_from(entry["collisionCount"].as_i64().unwrap_or(0)).expect("collisionCount fits i32");
        assert_eq!(name, str_field(vector, "name"), "line {}: corpus and vectors are out of step", i + 1);
        assert_eq!(entry["collisionCount"], vector["collisionCount"], "line {}: corpus and vectors are out of step", i + 1);

        let data = revision_data(&entry["template"]);
        let ours = String::from_utf8(data.clone()).expect("revision data is UTF-8");
        let expected = str_field(vector, "data");
        let label = format!("line {} ({}: {})", i + 1, name.chars().take(40).collect::<String>(), str_field(entry, "note"));
        if ours != expected {
            failures.push(format!("{label}: data differs, {}", first_difference(&ours, expected)));
            continue;
        }
        let hash = hash_revision(&data, collision_count);
        if hash != str_field(vector, "hash") {
            failures.push(format!("{label}: hash {hash} != {}", str_field(vector, "hash")));
        }
        let revision = revision_name(name, &hash);
        if revision != str_field(vector, "revision") {
            failures.push(format!("{label}: revision {revision} != {}", str_field(vector, "revision")));
        }
    }
    println!("revision golden vectors: {} of {} byte-exact", corpus.len() - failures.len(), corpus.len());
    assert!(failures.is_empty(), "{} of {} vectors differ:\n{}", failures.len(), corpus.len(), failures.join("\n"));
}

/// `kruise.io/cloneset-volumeclaimtemplate-hash`, with and without the webhook's defaults, against
/// `vct-vectors.jsonl`: a revision this operator writes must carry the hash Kruise would, or
/// RecreatePodWhenChangeVCTInCloneSetGate recreates pods across a switch of managers.
#[test]
fn volume_claim_template_hashes_match_the_committed_go_vectors() {
    let corpus = json_lines(&root().join(GOLDEN_DIR).join("vct-corpus.jsonl"));
    let vectors = json_lines(&root().join(GOLDEN_DIR).join("vct-vectors.jsonl"));
    assert_eq!(corpus.len(), vectors.len(), "vct-corpus.jsonl and vct-vectors.jsonl differ in length; regenerate the vectors");
    let mut failures = Vec::new();
    for (i, (entry, vector)) in corpus.iter().zip(&vectors).enumerate() {
        let name = str_field(entry, "name");
        assert_eq!(name, str_field(vector, "name"), "line {}: corpus and vectors are out of step", i + 1);
        let templates = &entry["volumeClaimTemplates"];
        let stored = volume_claim_templates_hash(templates);
        let defaulted = volume_claim_templates_hash(&default_volume_claim_templates(templates));
        for (what, ours, key) in [("as stored", stored, "hash"), ("defaulted", defaulted, "defaultedHash")] {
            if ours != str_field(vector, key) {
                failures.push(format!("line {} ({name}, {what}): {ours} != {}", i + 1, str_field(vector, key)));
            }
        }
    }
    assert!(failures.is_empty(), "{} hashes differ:\n{}", failures.len(), failures.join("\n"));
}

fn go_command(dir: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(dir).env("GOTOOLCHAIN", "local").env("GOFLAGS", "-mod=mod -buildvcs=false");
    cmd
}

fn run(mut cmd: Command, what: &str) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.status.success(), "{what} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
#[ignore = "needs Go 1.26 (the Go reference program); make test runs it"]
fn go_reference_regenerates_the_committed_files() {
    let go = Command::new("go").arg("version").output();
    assert!(go.is_ok_and(|o| o.status.success()), "no working `go` on PATH: install Go 1.26 to check the revision golden files");
    let dir = root().join(GOLDEN_DIR);
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("revision-golden");
    std::fs::create_dir_all(&out_dir).unwrap();

    // `go run` keeps the built program in the Go build cache, so only the first run compiles (and
    // downloads the pinned modules through the module proxy).
    let started = Instant::now();
    let schema_path = out_dir.join("gojson_podtemplate_schema.json");
    let vectors_path = out_dir.join("vectors.jsonl");
    let vct_vectors_path = out_dir.join("vct-vectors.jsonl");
    let mut schema = go_command(&dir);
    schema.args(["run", ".", "schema"]);
    std::fs::write(&schema_path, run(schema, "go run . schema (in e2e/revision-golden)")).unwrap();
    let mut vectors = go_command(&dir);
    vectors.args(["run", ".", "vectors", "corpus.jsonl"]);
    std::fs::write(&vectors_path, run(vectors, "go run . vectors corpus.jsonl (in e2e/revision-golden)")).unwrap();
    let mut vct_vectors = go_command(&dir);
    vct_vectors.args(["run", ".", "vct-vectors", "vct-corpus.jsonl"]);
    std::fs::write(&vct_vectors_path, run(vct_vectors, "go run . vct-vectors vct-corpus.jsonl (in e2e/revision-golden)")).unwrap();
    println!("go reference: schema and vectors regenerated in {:.2?}", started.elapsed());

    let regenerate = "regenerate with: cd e2e/revision-golden && GOTOOLCHAIN=local GOFLAGS=-mod=mod \
                      go run . schema > ../../src/core/gojson_podtemplate_schema.json && go run . vectors corpus.jsonl > vectors.jsonl \
                      && go run . vct-vectors vct-corpus.jsonl > vct-vectors.jsonl";
    for (fresh, committed) in [
        (&schema_path, root().join(SCHEMA_FILE)),
        (&vectors_path, dir.join("vectors.jsonl")),
        (&vct_vectors_path, dir.join("vct-vectors.jsonl")),
    ] {
        let fresh_text = read(fresh);
        let committed_text = read(&committed);
        assert!(
            fresh_text == committed_text,
            "{} is out of date with the Go reference (fresh output in {});\n{}\n{regenerate}",
            committed.display(),
            fresh.display(),
            first_difference(&committed_text, &fresh_text)
        );
    }
}

#[test]
#[ignore = "needs Go 1.26 and k8s.io/api in the Go module cache (the newer-fields program); make test runs it"]
fn newer_fields_list_holds_the_newest_kubernetes_types() {
    let mut cmd = go_command(&root().join(NEWER_FIELDS_DIR));
    // The module cache only: a test never reaches off the machine.
    cmd.env("GOPROXY", "off").args(["run", ".", root().join(SCHEMA_FILE).to_str().unwrap()]);
    let fresh: Value = serde_json::from_slice(&run(
        cmd,
        "go run . (in e2e/revision-golden/newer-fields; `go mod download` there first if modules are missing)",
    ))
    .unwrap();
    let committed: Value = serde_json::from_str(&read(&root().join(NEWER_FIELDS_FILE))).unwrap();
    let fields = |v: &Value| v["fields"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect::<Vec<_>>();
    // The committed list is the union over every supported release (generate.sh); the older
    // releases' own fields are held to their apiservers by the e2e suite on each one.
    let listed = fields(&committed);
    let missing: Vec<String> = fields(&fresh).into_iter().filter(|f| !listed.contains(f)).collect();
    let newest = str_field(&fresh, "kubernetes");
    assert!(
        missing.is_empty() && str_field(&committed, "kubernetes").split(' ').any(|v| v == newest),
        "{NEWER_FIELDS_FILE} is out of date with k8s.io/api {newest} (it lacks {missing:?}); regenerate with \
         {NEWER_FIELDS_DIR}/generate.sh"
    );
}
