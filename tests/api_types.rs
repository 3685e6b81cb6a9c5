//! The Rust types lose no field: every fixture (Kruise documentation examples and the
//! every-field sample) deserializes into `CloneSet` and serializes back to the same JSON.

use std::path::PathBuf;

use cloneset_operator::api::CloneSet;
use serde_json::Value;

fn fixtures() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs")).unwrap().map(|e| e.unwrap().path()).collect();
    files.push(root.join("all-fields.yaml"));
    files.sort();
    files
}

#[test]
fn every_fixture_round_trips_through_the_types() {
    let files = fixtures();
    assert!(files.len() >= 11);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let original: Value = serde_saphyr::from_str(&text).unwrap();
        let typed: CloneSet = serde_json::from_value(original.clone()).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut back = serde_json::to_value(&typed).unwrap();
        // Like Go's non-pointer structs, the two strategies are always written, `{}` when empty.
        for key in ["scaleStrategy", "updateStrategy"] {
            if original["spec"].get(key).is_none() && back["spec"][key] == serde_json::json!({}) {
                back["spec"].as_object_mut().unwrap().remove(key);
            }
        }
        if let Some(diff) = first_difference(&original, &back, "") {
            panic!("{} changed in a round trip through the types at {diff}", file.display());
        }
    }
}

#[test]
fn status_serializes_like_kruise() {
    // Go writes the five counters always, the rest only when set.
    let status = cloneset_operator::api::CloneSetStatus::default();
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        serde_json::json!({"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "updatedReplicas": 0, "updatedReadyReplicas": 0})
    );
}

/// The path of the first difference between two JSON values, if any.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x
            .keys()
            .chain(y.keys())
            .find_map(|k| first_difference(x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), &format!("{path}.{k}"))),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| first_difference(p, q, &format!("{path}[{i}]")))
        }
        _ if a == b => None,
        _ => Some(format!("{path}: {a} became {b}")),
    }
}
