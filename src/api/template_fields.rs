//! Pod-template fields that Kubernetes newer than 1.32 has and Kruise v1.9.0's API types lack,
//! and the admission-policy validations that name them at `kubectl apply`.
//!
//! Revisions stay byte-identical to Kruise's, so such a field is not carried to revisions or pods
//! (`core::gojson`). The list, `newer_pod_template_fields.json`, is generated from the `k8s.io/api`
//! of every supported release and the Go encoding schema by `e2e/revision-golden/newer-fields`
//! (a field a later release removed can still be in a template written on an earlier one); tests check it
//! against that program (`tests/revision_golden.rs`), the schema (`core::gojson`) and a running
//! apiserver's OpenAPI (`e2e/tests/operator/api.rs`).

use serde::Deserialize;
use serde_json::{Value, json};

/// The committed list (see the module).
#[derive(Debug, Deserialize)]
pub struct NewerFields {
    /// The `k8s.io/api` versions the list was generated from, e.g. `v0.36.3 v0.37.2`.
    pub kubernetes: String,
    /// Paths relative to the template: `.` between fields, `[]` after a list, `{}` after a map
    /// (`spec.containers[].restartPolicyRules`); the outermost new field of a subtree only.
    pub fields: Vec<String>,
}

pub fn newer_fields() -> NewerFields {
    serde_json::from_str(include_str!("newer_pod_template_fields.json")).expect("newer_pod_template_fields.json is valid")
}

/// What a warning says after the field's path.
pub const NOT_CARRIED: &str =
    "not carried to pods: cloneset-operator reads pod templates with Kubernetes 1.32's fields, as Kruise v1.9.0 does";

/// One validation per newer field, failing (so warning) when the template sets it; the message
/// names the field, with `[*]` for any list item or map value. The expressions read the policy's
/// variables `template` and `podSpec` (the template and its `spec`, as `dyn`).
pub(crate) fn warning_validations() -> Vec<Value> {
    newer_fields()
        .fields
        .iter()
        .map(|path| json!({"expression": format!("!({})", is_set(path)), "message": format!("spec.template.{}: {NOT_CARRIED}", shown(path))}))
        .collect()
}

/// `path` as a warning shows it: `spec.containers[*].restartPolicyRules`.
fn shown(path: &str) -> String {
    path.replace("[]", "[*]").replace("{}", "[*]")
}

/// A CEL expression, true when the template has a value other than null at `path`. Each step
/// checks that its key is there and not null before going on, so a template without the field
/// costs one lookup per step; a value of the wrong type is a runtime error, which the policy's
/// `failurePolicy: Ignore` turns into no warning.
fn is_set(path: &str) -> String {
    let steps: Vec<&str> = path.split('.').collect();
    match steps.split_first() {
        Some((&"spec", rest)) if !rest.is_empty() => set_below("variables.podSpec", rest, 0),
        _ => set_below("variables.template", &steps, 0),
    }
}

/// True when `object` has a non-null value at `steps`; `depth` numbers the loop variables.
fn set_below(object: &str, steps: &[&str], depth: usize) -> String {
    let Some((step, rest)) = steps.split_first() else { return "true".into() };
    let name = step.trim_end_matches(['[', ']', '{', '}']);
    let value = select(object, name);
    let inner = each(&value, &step[name.len()..], rest, depth);
    let present = format!("'{name}' in {object} && {value} != null");
    if inner == "true" { present } else { format!("{present} && {inner}") }
}

/// True when some item of `value` (one `[]` or `{}` of `loops` for each level) has `rest` set.
fn each(value: &str, loops: &str, rest: &[&str], depth: usize) -> String {
    let var = format!("x{depth}");
    if let Some(more) = loops.strip_prefix("[]") {
        format!("{value}.exists({var}, {})", each(&var, more, rest, depth + 1))
    } else if let Some(more) = loops.strip_prefix("{}") {
        format!("{value}.exists({var}, {})", each(&format!("{value}[{var}]"), more, rest, depth + 1))
    } else {
        set_below(value, rest, depth)
    }
}

/// `object.name`, or `object['name']` where the name is a CEL reserved word.
fn select(object: &str, name: &str) -> String {
    const RESERVED: [&str; 22] = [
        "as",
        "break",
        "const",
        "continue",
        "else",
        "false",
        "for",
        "function",
        "if",
        "import",
        "in",
        "let",
        "loop",
        "namespace",
        "null",
        "package",
        "return",
        "true",
        "var",
        "void",
        "while",
        "map",
    ];
    if RESERVED.contains(&name) { format!("{object}['{name}']") } else { format!("{object}.{name}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_names_the_fields_of_the_issue() {
        let list = newer_fields();
        assert!(list.kubernetes.starts_with("v0."), "{}", list.kubernetes);
        for f in
            ["spec.hostnameOverride", "spec.workloadRef", "spec.containers[].restartPolicyRules", "spec.containers[].lifecycle.stopSignal"]
        {
            assert!(list.fields.iter().any(|g| g == f), "{f} missing from {:?}", list.fields);
        }
        let mut sorted = list.fields.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, list.fields, "sorted, once each");
    }

    #[test]
    fn expressions_walk_fields_lists_and_maps() {
        assert_eq!(
            is_set("spec.hostnameOverride"),
            "'hostnameOverride' in variables.podSpec && variables.podSpec.hostnameOverride != null"
        );
        assert_eq!(
            is_set("spec.containers[].lifecycle.stopSignal"),
            "'containers' in variables.podSpec && variables.podSpec.containers != null && variables.podSpec.containers.exists(x0, \
             'lifecycle' in x0 && x0.lifecycle != null && 'stopSignal' in x0.lifecycle && x0.lifecycle.stopSignal != null)"
        );
        let (m, a) = ("variables.template.metadata", "variables.template.metadata.a");
        assert_eq!(
            is_set("metadata.a{}.b[][].in"),
            format!(
                "'metadata' in variables.template && {m} != null && 'a' in {m} && {a} != null && {a}.exists(x0, \
                 'b' in {a}[x0] && {a}[x0].b != null && {a}[x0].b.exists(x1, x1.exists(x2, 'in' in x2 && x2['in'] != null)))"
            )
        );
        assert_eq!(
            shown("spec.volumes[].projected.sources[].secret.items[].user"),
            "spec.volumes[*].projected.sources[*].secret.items[*].user"
        );
    }

    #[test]
    fn each_newer_field_has_a_warning_naming_it() {
        let list = newer_fields();
        let validations = warning_validations();
        assert_eq!(validations.len(), list.fields.len());
        let hostname =
            validations.iter().find(|v| v["message"].as_str().unwrap().starts_with("spec.template.spec.hostnameOverride: ")).unwrap();
        assert_eq!(
            hostname["message"],
            "spec.template.spec.hostnameOverride: not carried to pods: cloneset-operator reads pod templates with Kubernetes 1.32's fields, as Kruise v1.9.0 does"
        );
        assert!(validations.iter().all(|v| v["expression"].as_str().unwrap().starts_with("!(")));
    }
}
