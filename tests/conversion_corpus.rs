//! Our conversion against Kruise's own: every object in `tests/golden/conversion-kruise-master/in`
//! converted by `convert` to the other version, compared with what OpenKruise master's conversion
//! made of it (`converted/`) and of that again (`back/`).
//!
//! Compared: `apiVersion`, labels and annotations (the apiserver keeps the rest of the metadata
//! from the stored object), and the spec outside the pod and PVC templates, after dropping what
//! Go's `omitempty` drops (null, false, "", {}, []), since Kruise re-encodes typed structs and we
//! pass JSON through. The templates and status are compared with the input: we pass them through
//! untouched, where Kruise re-encodes them (so it drops unknown fields and rewrites quantities).
//! Where we differ on purpose, the difference is listed in [`DEVIATIONS`] and must occur exactly
//! there: a new difference, or a listed one gone, fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cloneset_operator::api::conversion::{STASH, V1ALPHA1, V1BETA1, convert};
use serde_json::{Map, Value, json};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/conversion-kruise-master")
}

fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Drops what Go's `omitempty` leaves out, bottom up.
fn go_view(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let kept: Map<String, Value> = map.iter().map(|(k, v)| (k.clone(), go_view(v))).filter(|(_, v)| !is_empty(v)).collect();
            Value::Object(kept)
        }
        Value::Array(items) => Value::Array(items.iter().map(go_view).collect()),
        other => other.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// What conversion decides: the version, Kruise's labels and annotations, and the spec around
/// the templates.
fn decided(obj: &Value) -> Value {
    let mut spec = obj["spec"].clone();
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("template");
        spec.remove("volumeClaimTemplates");
    }
    let meta = |key: &str| {
        let mut map = obj["metadata"][key].as_object().cloned().unwrap_or_default();
        map.remove(STASH);
        Value::Object(map)
    };
    json!({"apiVersion": obj["apiVersion"], "labels": meta("labels"), "annotations": meta("annotations"), "spec": go_view(&spec)})
}

/// Paths (`/spec/updateStrategy/...`) where `a` and `b` differ.
fn differences(a: &Value, b: &Value, path: &str, out: &mut BTreeSet<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()).collect::<BTreeSet<_>>() {
                let (xv, yv) = (x.get(key).unwrap_or(&Value::Null), y.get(key).unwrap_or(&Value::Null));
                differences(xv, yv, &format!("{path}/{key}"), out);
            }
        }
        (x, y) if x != y => {
            out.insert(path.to_string());
        }
        _ => {}
    }
}

/// (input, path) for every path where the two objects `pair` makes of an input differ, in what
/// conversion decides.
fn differences_per_input(corpus: &[(String, Value)], pair: impl Fn(&str, &Value) -> (Value, Value)) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for (name, input) in corpus {
        let (a, b) = pair(name, input);
        let mut paths = BTreeSet::new();
        differences(&decided(&a), &decided(&b), "", &mut paths);
        found.extend(paths.into_iter().map(|p| (name.clone(), p)));
    }
    found
}

fn other_version(obj: &Value) -> &'static str {
    if obj["apiVersion"] == V1ALPHA1 { V1BETA1 } else { V1ALPHA1 }
}

/// Inputs, by file stem.
fn corpus() -> Vec<(String, Value)> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir().join("in")).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    names.into_iter().map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), read(&p))).collect()
}

const EXCLUDE_LABEL: &str = "/labels/apps.kruise.io/cloneset-scaling-exclude-preparing-delete";

/// Where our conversion differs from Kruise master's, as (input, path, why); docs/v1beta1.md
/// says the same to users.
const DEVIATIONS: &[(&str, &str, &str)] = &[
    (
        "alpha-serialisation-edge",
        "/spec/futureSpecField",
        "Kruise's typed decoding drops unknown fields; the apiserver prunes them before storing anyway",
    ),
    ("alpha-serialisation-edge", "/spec/minReadySeconds", "Go's omitempty drops a zero; the same value"),
    ("beta-serialisation-edge", "/spec/futureSpecField", "as above"),
    ("beta-serialisation-edge", "/spec/minReadySeconds", "as above"),
    ("beta-full-recreate", EXCLUDE_LABEL, "excludePreparingDelete: true becomes the label the v1alpha1 controller reads; Kruise drops it"),
    ("beta-ondelete-with-rollingupdate", EXCLUDE_LABEL, "as above"),
];

#[test]
fn converted_as_kruise_converts_but_for_the_listed_deviations() {
    let found = differences_per_input(&corpus(), |name, input| {
        (convert(input, other_version(input)).unwrap(), read(&dir().join("converted").join(format!("{name}.json"))))
    });
    let listed: BTreeSet<(String, String)> = DEVIATIONS.iter().map(|(n, p, _)| (n.to_string(), p.to_string())).collect();
    let unlisted: Vec<_> = found.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&found).collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "differences from Kruise master not listed:\n{unlisted:#?}\nlisted but gone:\n{gone:#?}"
    );
}

fn there_and_back(input: &Value) -> Value {
    let there = convert(input, other_version(input)).unwrap();
    convert(&there, input["apiVersion"].as_str().unwrap()).unwrap()
}

/// `object` with the defaults of its version's schema in our CRD filled in, as the apiserver
/// fills them in on every write and read.
fn schema_defaulted(object: &Value) -> Value {
    fn fill(v: &mut Value, schema: &Value) {
        let (Some(map), Some(props)) = (v.as_object_mut(), schema["properties"].as_object()) else { return };
        for (key, sub) in props {
            if !map.contains_key(key)
                && let Some(d) = sub.get("default")
            {
                map.insert(key.clone(), d.clone());
            }
            if let Some(child) = map.get_mut(key) {
                fill(child, sub);
            }
        }
    }
    let crd = serde_json::to_value(cloneset_operator::api::crd::crd_with_v1beta1()).unwrap();
    let version = object["apiVersion"].as_str().unwrap().rsplit('/').next().unwrap();
    let schema = crd["spec"]["versions"].as_array().unwrap().iter().find(|v| v["name"] == version).unwrap();
    let mut out = object.clone();
    // Kruise's v1beta1 defaulting also gives a RollingUpdate its (then defaulted) settings.
    if version == "v1beta1"
        && let Some(us) = out["spec"].as_object_mut().map(|s| s.entry("updateStrategy").or_insert(json!({})))
    {
        let rolling = us.get("type").and_then(Value::as_str).is_none_or(|t| t.is_empty() || t == "RollingUpdate");
        if rolling && us.get("rollingUpdate").is_none_or(Value::is_null) {
            us["rollingUpdate"] = json!({});
        }
    }
    fill(&mut out, &schema["schema"]["openAPIV3Schema"]);
    out
}

/// Where a round trip, through the apiserver's defaults, loses part of a stored object: ours
/// must lose nothing, and Kruise's is listed to say what it loses.
fn round_trip_losses(corpus: &[(String, Value)], back: impl Fn(&str, &Value) -> Value) -> BTreeSet<(String, String)> {
    differences_per_input(corpus, |name, input| {
        let stored = schema_defaulted(input);
        (schema_defaulted(&back(name, &stored)), stored)
    })
}

#[test]
fn there_and_back_gives_the_stored_object() {
    let ours = round_trip_losses(&corpus(), |_, stored| there_and_back(stored));
    assert!(ours.is_empty(), "{ours:#?}");
}

/// The annotation is written where Kruise's own round trip loses a setting (so it is needed),
/// and Kruise's round trip does lose settings (so the corpus can tell).
#[test]
fn where_kruise_loses_a_setting_ours_keeps_it_in_the_annotation() {
    let corpus = corpus();
    let kruise = round_trip_losses(&corpus, |name, _| read(&dir().join("back").join(format!("{name}.json"))));
    // Serialisation, not conversion: unknown fields and zeros Kruise's re-encoding drops.
    let lossy: BTreeSet<&str> = kruise.iter().map(|(n, _)| n.as_str()).filter(|n| !n.ends_with("serialisation-edge")).collect();
    assert!(lossy.len() >= 10, "{lossy:?}");
    for (name, input) in corpus.iter().filter(|(n, _)| lossy.contains(n.as_str())) {
        let there = convert(&schema_defaulted(input), other_version(input)).unwrap();
        assert!(
            there["metadata"]["annotations"][STASH].is_string(),
            "{name}: Kruise loses {:?}; ours keeps no record",
            kruise.iter().filter(|(n, _)| n == name).collect::<Vec<_>>()
        );
    }
}

#[test]
fn templates_and_status_pass_through_untouched() {
    for (name, input) in corpus() {
        let out = convert(&input, other_version(&input)).unwrap();
        for key in ["template", "volumeClaimTemplates"] {
            assert_eq!(out["spec"][key], input["spec"][key], "{name}: spec.{key}");
        }
        assert_eq!(out["status"], input["status"], "{name}: status");
    }
}
