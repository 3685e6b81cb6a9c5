//! The CustomResourceDefinition and the ValidatingAdmissionPolicy, generated from the types.
//!
//! Validation is split by what can see what, and needs no server of ours:
//! - the CRD schema and its CEL rules check every structured field (on every write path,
//!   including the `scale` subresource);
//! - a ValidatingAdmissionPolicy checks what lives inside the schemaless pod template (CRD rules
//!   cannot read unknown fields; admission policies read them dynamically);
//! - a second one only warns, naming the template's fields that Kubernetes newer than 1.32 has
//!   and revisions and pods do not carry (`template_fields`).
//!
//! What neither can check (whether `podsToDelete` names existing pods of this CloneSet, and the
//! full Kubernetes pod validation of the template) is caught by the controller and reported on
//! the CloneSet.

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt as _;
use serde_json::{Value, json};

use super::CloneSet;

/// Name of the admission policy and its binding.
pub const POLICY_NAME: &str = "clonesets.apps.kruise.io";
/// Name of the policy (and binding) that warns about template fields newer than Kubernetes 1.32.
pub const TEMPLATE_FIELDS_POLICY_NAME: &str = "template-fields.clonesets.apps.kruise.io";

/// Where the apiserver sends conversion requests unless the installer says otherwise: the
/// chart's webhook Service in its default namespace.
pub(crate) const WEBHOOK_SERVICE_NAMESPACE: &str = "cloneset-system";
pub(crate) const WEBHOOK_SERVICE_NAME: &str = "cloneset-operator-webhook";
/// The version CloneSets are stored in, in every CRD this operator installs: what Kruise 1.x
/// stores and what the operator watches.
pub(crate) const STORAGE_VERSION: &str = "v1alpha1";
/// The path the operator serves ConversionReviews on.
pub(crate) const CONVERSION_PATH: &str = "/convert";

/// The CloneSet CRD, shaped like Kruise's: no nullable fields, atomic selectors, the status and
/// scale subresources, and Kruise's printer columns in Kruise's order. Serves v1alpha1 only: the
/// one the manifests, the chart and `make run` install.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(CloneSet::crd()).expect("CRD serializes");
    shape_version(&mut crd["spec"]["versions"][0]);
    serde_json::from_value(crd).expect("post-processed CRD is still a CRD")
}

/// The CRD serving v1beta1 beside v1alpha1 (stored), converted by the operator's webhook (its
/// `caBundle` kept by the operator, or by cert-manager). Installed only when asked for (the
/// chart's `crds.v1beta1`): once a CRD converts through a webhook, every list of CloneSets
/// through v1beta1 (the preferred version, which the namespace controller and garbage collector
/// use) fails while no webhook answers, and with it every namespace deletion in the cluster.
pub fn crd_with_v1beta1() -> CustomResourceDefinition {
    let alpha = CloneSet::crd();
    let beta = super::v1beta1::CloneSet::crd();
    let merged = kube::core::crd::merge_crds(vec![alpha, beta], STORAGE_VERSION).expect("both versions describe one resource");
    let mut crd = serde_json::to_value(merged).expect("CRD serializes");
    if let Some(versions) = crd["spec"]["versions"].as_array_mut() {
        versions.iter_mut().for_each(shape_version);
    }
    crd["spec"]["conversion"] = json!({
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "service": {"namespace": WEBHOOK_SERVICE_NAMESPACE, "name": WEBHOOK_SERVICE_NAME, "path": CONVERSION_PATH, "port": 443},
            },
        },
    });
    serde_json::from_value(crd).expect("post-processed CRD is still a CRD")
}

/// What each served version shares: the schema's shape, subresources and printer columns.
fn shape_version(version: &mut Value) {
    let schema = &mut version["schema"]["openAPIV3Schema"];
    normalize(schema);
    // Status is written only by the controller; defaults there would only hide missing writes.
    strip_key(&mut schema["properties"]["status"], "default");
    let selector = &mut schema["properties"]["spec"]["properties"]["selector"];
    selector["x-kubernetes-map-type"] = json!("atomic");
    selector["properties"]["matchExpressions"]["x-kubernetes-list-type"] = json!("atomic");

    version["subresources"] = json!({
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.labelSelector",
        },
    });
    let col = |name: &str, type_: &str, path: &str, description: &str, priority: i32| {
        let mut c = json!({"name": name, "type": type_, "jsonPath": path, "description": description});
        if priority > 0 {
            c["priority"] = json!(priority);
        }
        c
    };
    version["additionalPrinterColumns"] = json!([
        col("DESIRED", "integer", ".spec.replicas", "The desired number of pods.", 0),
        col("UPDATED", "integer", ".status.updatedReplicas", "The number of pods updated.", 0),
        col("UPDATED_READY", "integer", ".status.updatedReadyReplicas", "The number of pods updated and ready.", 0),
        col("UPDATED_AVAILABLE", "integer", ".status.updatedAvailableReplicas", "The number of pods updated and available.", 0),
        col("READY", "integer", ".status.readyReplicas", "The number of pods ready.", 0),
        col("TOTAL", "integer", ".status.replicas", "The number of currently all pods.", 0),
        col(
            "AGE",
            "date",
            ".metadata.creationTimestamp",
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
            0
        ),
        col("CONTAINERS", "string", ".spec.template.spec.containers[*].name", "The containers of currently cloneset.", 1),
        col("IMAGES", "string", ".spec.template.spec.containers[*].image", "The images of currently cloneset.", 1),
        col("SELECTOR", "string", ".status.labelSelector", "The selector of currently cloneset.", 1),
    ]);
}

/// Removes `nullable` (Kruise's schema has none: an explicit `null` is then defaulted or
/// pruned, not stored) and writes integer bounds as integers.
fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("nullable");
            for key in ["minimum", "maximum"] {
                if let Some(n) = map.get(key).and_then(Value::as_f64).filter(|n| n.fract() == 0.0) {
                    map.insert(key.into(), json!(n as i64));
                }
            }
            map.values_mut().for_each(normalize);
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn strip_key(v: &mut Value, key: &str) {
    match v {
        Value::Object(map) => {
            map.remove(key);
            map.values_mut().for_each(|c| strip_key(c, key));
        }
        Value::Array(items) => items.iter_mut().for_each(|c| strip_key(c, key)),
        _ => {}
    }
}

/// Label-key and label-value syntax (Kubernetes qualified names and label values).
const LABEL_KEY_RE: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
const LABEL_VALUE_RE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// One validation of the admission policy: a CEL expression that must hold, and the message
/// (naming the field and the rule) shown at `kubectl apply` when it does not.
struct TemplateRule {
    expression: String,
    message: Option<&'static str>,
    message_expression: Option<String>,
}

fn rule(expression: impl Into<String>, message: &'static str) -> TemplateRule {
    TemplateRule { expression: expression.into(), message: Some(message), message_expression: None }
}

/// The rules of the admission policy: those that read the schemaless template, and the two
/// duplicate checks whose quadratic cost the CRD's static CEL budget refuses.
fn template_rules() -> Vec<TemplateRule> {
    let label_ok = |map: &str| {
        format!(
            "{map}.all(k, size(k) <= 317 && k.matches('{LABEL_KEY_RE}') && string({map}[k]).size() <= 63 && string({map}[k]).matches('{LABEL_VALUE_RE}'))"
        )
    };
    vec![
        rule(
            label_ok("variables.labels"),
            "spec.template.metadata.labels: Invalid value: label keys must be qualified names and values valid label values (at most 63 characters, alphanumeric, '-', '_' or '.')",
        ),
        rule(
            format!("!has(object.spec.selector.matchLabels) || {}", label_ok("object.spec.selector.matchLabels")),
            "spec.selector.matchLabels: Invalid value: label keys must be qualified names and values valid label values",
        ),
        rule(
            concat!(
                "(!has(object.spec.selector.matchLabels) || object.spec.selector.matchLabels.all(k, k in variables.labels && string(variables.labels[k]) == object.spec.selector.matchLabels[k])) && ",
                "(!has(object.spec.selector.matchExpressions) || object.spec.selector.matchExpressions.all(e, ",
                "e.operator == 'In' ? (e.key in variables.labels && has(e.values) && string(variables.labels[e.key]) in e.values) : ",
                "e.operator == 'NotIn' ? (!(e.key in variables.labels) || !has(e.values) || !(string(variables.labels[e.key]) in e.values)) : ",
                "e.operator == 'Exists' ? e.key in variables.labels : ",
                "e.operator == 'DoesNotExist' ? !(e.key in variables.labels) : true))"
            ),
            "spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`",
        ),
        TemplateRule {
            expression: "!('restartPolicy' in variables.podSpec) || variables.podSpec.restartPolicy == null || string(variables.podSpec.restartPolicy) in ['', 'Always']".into(),
            message: None,
            message_expression: Some(
                "'spec.template.spec.restartPolicy: Unsupported value: \"' + string(variables.podSpec.restartPolicy) + '\": supported values: \"Always\"'".into(),
            ),
        },
        rule(
            "!('activeDeadlineSeconds' in variables.podSpec) || variables.podSpec.activeDeadlineSeconds == null",
            "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in cloneset is not Supported",
        ),
        rule("size(variables.containers) > 0", "spec.template.spec.containers: Required value: a CloneSet's pod template needs at least one container"),
        rule(
            "variables.allContainers.all(c, 'name' in c && c.name != null && string(c.name).size() <= 63 && string(c.name).matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",
            "spec.template.spec.containers[*].name: Invalid value: a lowercase RFC 1123 label is required (e.g. 'my-name', at most 63 characters)",
        ),
        rule(
            "variables.allContainers.all(c, variables.allContainers.exists_one(d, 'name' in d && 'name' in c && d.name == c.name))",
            "spec.template.spec.containers[*].name: Duplicate value: container names must be unique across containers and initContainers",
        ),
        rule(
            "variables.containers.all(c, 'image' in c && c.image != null && string(c.image) != '')",
            "spec.template.spec.containers[*].image: Required value",
        ),
        // CEL has no set to check uniqueness in one pass, and a pairwise check of a list of
        // about 700 names exceeds the apiserver's cost limit for one expression, which would
        // refuse a large scale-down: longer lists go unchecked (a name listed twice is one).
        rule(
            concat!(
                "!has(object.spec.scaleStrategy) || !has(object.spec.scaleStrategy.podsToDelete) || ",
                "size(object.spec.scaleStrategy.podsToDelete) > 256 || ",
                "object.spec.scaleStrategy.podsToDelete.all(x, object.spec.scaleStrategy.podsToDelete.exists_one(y, y == x))"
            ),
            "spec.scaleStrategy.podsToDelete: Invalid value: duplicated items",
        ),
        rule(
            concat!(
                "!has(object.spec.updateStrategy) || !has(object.spec.updateStrategy.priorityStrategy) || ",
                "!has(object.spec.updateStrategy.priorityStrategy.weightPriority) || ",
                "object.spec.updateStrategy.priorityStrategy.weightPriority.all(w, !has(w.matchSelector.matchExpressions) || ",
                "w.matchSelector.matchExpressions.all(e, e.operator == 'In' || e.operator == 'NotIn' ? has(e.values) && size(e.values) > 0 : ",
                "(e.operator == 'Exists' || e.operator == 'DoesNotExist') && (!has(e.values) || size(e.values) == 0)))"
            ),
            "spec.updateStrategy.priorityStrategy.weightPriority[*].matchSelector: Required value: invalid selector: operator must be In, NotIn, Exists or DoesNotExist; In and NotIn need values, Exists and DoesNotExist take none",
        ),
        rule(
            "!has(object.spec.updateStrategy) || !has(object.spec.updateStrategy.scatterStrategy) || object.spec.updateStrategy.scatterStrategy.all(x, object.spec.updateStrategy.scatterStrategy.exists_one(y, y.key == x.key && y.value == x.value))",
            "spec.updateStrategy.scatterStrategy: Required value: duplicated key=value terms",
        ),
        rule(
            concat!(
                "request.operation != 'UPDATE' || !has(object.spec.updateStrategy) || !has(object.spec.updateStrategy.type) || object.spec.updateStrategy.type != 'InPlaceOnly' || (",
                "variables.podSpec.all(k, k == 'containers' || (k in variables.oldPodSpec && variables.oldPodSpec[k] == variables.podSpec[k])) && ",
                "variables.oldPodSpec.all(k, k == 'containers' || k in variables.podSpec) && ",
                "variables.containers.map(c, c.name) == variables.oldContainers.map(c, c.name) && ",
                "variables.containers.all(c, variables.oldContainers.filter(o, o.name == c.name).all(o, ",
                "c.all(k, k == 'image' || (k in o && o[k] == c[k])) && o.all(k, k == 'image' || k in c))))"
            ),
            "spec.template.spec: Forbidden: only allowed to update images in spec for InPlaceOnly",
        ),
    ]
}

/// The admission policy for the template rules, and its binding (cluster-wide, Deny).
pub(crate) fn admission_policy() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let validations: Vec<Value> = template_rules()
        .into_iter()
        .map(|r| {
            let mut v = json!({"expression": r.expression, "reason": "Invalid"});
            if let Some(m) = r.message {
                v["message"] = json!(m);
            }
            if let Some(m) = r.message_expression {
                v["messageExpression"] = json!(m);
            }
            v
        })
        .collect();
    let spec = json!({
        // `dyn(...)`: the template is schemaless, so its fields are read dynamically.
        "variables": [
            {"name": "template", "expression": TEMPLATE_VARIABLE},
            {"name": "labels", "expression": "'metadata' in variables.template && variables.template.metadata != null && 'labels' in variables.template.metadata && variables.template.metadata.labels != null ? variables.template.metadata.labels : dyn({})"},
            {"name": "podSpec", "expression": POD_SPEC_VARIABLE},
            {"name": "containers", "expression": "'containers' in variables.podSpec && variables.podSpec.containers != null ? variables.podSpec.containers : dyn([])"},
            {"name": "allContainers", "expression": "variables.containers + ('initContainers' in variables.podSpec && variables.podSpec.initContainers != null ? variables.podSpec.initContainers : dyn([]))"},
            {"name": "oldPodSpec", "expression": "oldObject != null && has(oldObject.spec.template) && 'spec' in dyn(oldObject.spec.template) ? dyn(oldObject.spec.template).spec : dyn({})"},
            {"name": "oldContainers", "expression": "'containers' in variables.oldPodSpec && variables.oldPodSpec.containers != null ? variables.oldPodSpec.containers : dyn([])"},
        ],
        "validations": validations,
    });
    clonesets_policy(POLICY_NAME, &["CREATE", "UPDATE"], spec, "Deny")
}

/// The policy variable `template`: the schemaless template, read dynamically.
const TEMPLATE_VARIABLE: &str = "has(object.spec.template) ? dyn(object.spec.template) : dyn({})";
/// The policy variable `podSpec`: the template's `spec`, `{}` when it has none.
const POD_SPEC_VARIABLE: &str = "'spec' in variables.template && variables.template.spec != null ? variables.template.spec : dyn({})";

/// The policy that warns, at `kubectl apply`, about each template field newer than Kubernetes
/// 1.32 (`template_fields`), and its cluster-wide binding (Warn). `failurePolicy: Ignore`: a
/// policy that only warns must never refuse a write, not even when it cannot be evaluated.
pub(crate) fn template_fields_policy() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let spec = json!({
        "failurePolicy": "Ignore",
        "variables": [
            {"name": "template", "expression": TEMPLATE_VARIABLE},
            {"name": "podSpec", "expression": POD_SPEC_VARIABLE},
        ],
        "validations": super::template_fields::warning_validations(),
    });
    clonesets_policy(TEMPLATE_FIELDS_POLICY_NAME, &["CREATE", "UPDATE"], spec, "Warn")
}

/// The policies (each with its binding) of the generated admission-policy file, which the chart's
/// `admissionPolicy.enabled` installs: the one that refuses and the one that warns.
pub fn admission_policies() -> [(ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding); 2] {
    [admission_policy(), template_fields_policy()]
}

/// A ValidatingAdmissionPolicy named `name` over CloneSet `operations` (with `spec` holding the
/// rest of its spec: variables, validations, …; `failurePolicy: Fail` unless it says otherwise)
/// and its cluster-wide binding with `action` (`Deny`, `Warn`).
fn clonesets_policy(
    name: &str,
    operations: &[&str],
    spec: Value,
    action: &str,
) -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let metadata = json!({"name": name, "labels": {"app.kubernetes.io/part-of": "cloneset-operator"}});
    let mut policy_spec = json!({
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [{"apiGroups": ["apps.kruise.io"], "apiVersions": ["v1alpha1"], "operations": operations, "resources": ["clonesets"]}],
        },
    });
    if let (Some(dst), Value::Object(rest)) = (policy_spec.as_object_mut(), spec) {
        dst.extend(rest);
    }
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": metadata, "spec": policy_spec,
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": metadata,
        "spec": {"policyName": name, "validationActions": [action]},
    });
    (serde_json::from_value(policy).expect("policy is well-formed"), serde_json::from_value(binding).expect("binding is well-formed"))
}

/// Name of the policy (and binding) that enforces Kruise's deletion-protection label.
pub const DELETION_PROTECTION_POLICY_NAME: &str = "deletion-protection.clonesets.apps.kruise.io";

/// Kruise's `ResourcesDeletionProtection` for CloneSets, which Kruise enforces in its webhook on
/// DELETE: `Always` refuses every delete, `Cascading` refuses it while `spec.replicas > 0`. A
/// CloneSet already being deleted is let through, as in Kruise. Installed only when the gate is
/// on (the chart renders it then), because Kruise's gate is off by default.
pub fn deletion_protection_policy() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let label = super::keys::DELETE_PROTECTION;
    let prefix = format!("forbidden by ResourcesProtectionDeletion for {label}=");
    let spec = json!({
        // On DELETE the object is `oldObject`; `object` is null.
        "matchConditions": [{"name": "not-already-deleting", "expression": "!has(oldObject.metadata.deletionTimestamp)"}],
        "variables": [
            {"name": "protection", "expression": format!("has(oldObject.metadata.labels) && '{label}' in oldObject.metadata.labels ? oldObject.metadata.labels['{label}'] : ''")},
            {"name": "replicas", "expression": "has(oldObject.spec.replicas) ? oldObject.spec.replicas : 0"},
        ],
        "validations": [
            {"expression": "variables.protection != 'Always'", "reason": "Forbidden", "message": format!("{prefix}Always")},
            {
                "expression": "variables.protection != 'Cascading' || variables.replicas <= 0",
                "reason": "Forbidden",
                "messageExpression": format!("'{prefix}Cascading and replicas ' + string(variables.replicas) + '>0'"),
            },
        ],
    });
    clonesets_policy(DELETION_PROTECTION_POLICY_NAME, &["DELETE"], spec, "Deny")
}

/// Renders one manifest as YAML.
pub fn to_yaml<T: serde::Serialize>(obj: &T) -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(obj)
}

/// The admission policies and their bindings ([`admission_policies`]) as one multi-document YAML file.
pub(crate) fn admission_policy_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut documents = Vec::new();
    for (policy, binding) in admission_policies() {
        documents.push(to_yaml(&policy)?);
        documents.push(to_yaml(&binding)?);
    }
    Ok(documents.join("---\n"))
}

/// The exact contents of the generated deletion-protection policy file.
pub fn generated_deletion_protection_file() -> Result<String, serde_saphyr::ser::Error> {
    let (policy, binding) = deletion_protection_policy();
    Ok(format!("{GENERATED_HEADER}{}---\n{}", to_yaml(&policy)?, to_yaml(&binding)?))
}

/// Header written at the top of generated files.
pub(crate) const GENERATED_HEADER: &str = "# Generated from src/api by `make crds`; do not edit.\n";

/// Where the generated files live, relative to the repository root; a test checks each one.
pub const CRD_FILES: [&str; 2] = ["crds/apps.kruise.io_clonesets.yaml", "charts/cloneset-operator/files/apps.kruise.io_clonesets.yaml"];
pub const POLICY_FILES: [&str; 2] = [
    "crds/apps.kruise.io_clonesets-admission-policy.yaml",
    "charts/cloneset-operator/files/apps.kruise.io_clonesets-admission-policy.yaml",
];

/// Only in the chart (rendered when `crds.v1beta1` is set): `crds/` is applied whole by `make
/// run`, and this is the same CRD serving one more version.
pub const CRD_V1BETA1_FILE: &str = "charts/cloneset-operator/files/apps.kruise.io_clonesets-v1beta1.yaml";

/// Only in the chart (rendered when the gate is on): `crds/` is applied whole by `make run`.
pub const DELETION_PROTECTION_FILE: &str = "charts/cloneset-operator/files/apps.kruise.io_clonesets-deletion-protection-policy.yaml";

/// The exact contents of the generated CRD file.
pub fn generated_crd_file() -> Result<String, serde_saphyr::ser::Error> {
    Ok(format!("{GENERATED_HEADER}{}", to_yaml(&crd())?))
}

/// The exact contents of the generated two-version CRD file.
pub fn generated_crd_with_v1beta1_file() -> Result<String, serde_saphyr::ser::Error> {
    Ok(format!("{GENERATED_HEADER}{}", to_yaml(&crd_with_v1beta1())?))
}

/// The exact contents of the generated admission policy file.
pub fn generated_policy_file() -> Result<String, serde_saphyr::ser::Error> {
    Ok(format!("{GENERATED_HEADER}{}", admission_policy_yaml()?))
}
