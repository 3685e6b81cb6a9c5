//! The CloneSet API on the real apiserver: manifests written for Kruise are accepted unchanged,
//! defaults are filled, printer columns and the scale subresource work, and every validation
//! rule rejects its invalid manifest at apply time with a message naming the field — while the
//! valid neighbour is accepted. Template fields that pods do not get are named at apply time
//! and in an event.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use e2e::testenv::{self, TestNamespace, clonesets_dynamic, install_api, wait_until};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn load(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every field of `expected` is present in `actual` with the same value (actual may add defaults).
fn assert_subset(expected: &Value, actual: &Value, path: &str) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                let child = a.get(k).unwrap_or_else(|| panic!("{path}.{k} was lost: {actual}"));
                assert_subset(v, child, &format!("{path}.{k}"));
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            assert_eq!(e.len(), a.len(), "{path}: list length changed");
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                assert_subset(ev, av, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(expected, actual, "{path} changed"),
    }
}

async fn setup(prefix: &str) -> (TestNamespace, Api<DynamicObject>) {
    install_api().await.unwrap();
    let ns = TestNamespace::create(prefix).await.unwrap();
    let api = clonesets_dynamic(&ns.client, &ns.name);
    (ns, api)
}

async fn create(api: &Api<DynamicObject>, manifest: &Value) -> Result<DynamicObject, kube::Error> {
    api.create(&PostParams::default(), &serde_json::from_value(manifest.clone()).unwrap()).await
}

#[tokio::test]
async fn kruise_documentation_examples_are_accepted_unchanged() {
    let (_ns, api) = setup("docs").await;
    let mut files: Vec<_> = std::fs::read_dir(fixtures().join("docs")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 10, "expected the documentation examples, found {}", files.len());
    for file in files {
        let manifest = load(&file);
        let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
        create(&api, &manifest).await.unwrap_or_else(|e| panic!("{} rejected: {e}", file.display()));
        let stored = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
        assert_subset(&manifest["spec"], &stored["spec"], &format!("{}: spec", file.display()));
    }
}

#[tokio::test]
async fn every_spec_field_survives_apply_and_get() {
    let (_ns, api) = setup("roundtrip").await;
    let manifest = load(&fixtures().join("all-fields.yaml"));
    // Server-side apply, as `kubectl apply --server-side` sends it.
    let obj: DynamicObject = serde_json::from_value(manifest.clone()).unwrap();
    api.patch("everything", &PatchParams::apply("e2e"), &Patch::Apply(&obj)).await.unwrap();
    let stored = serde_json::to_value(api.get("everything").await.unwrap()).unwrap();
    assert_subset(&manifest["spec"], &stored["spec"], "spec");
    assert_subset(&manifest["metadata"]["labels"], &stored["metadata"]["labels"], "metadata.labels");
}

#[tokio::test]
async fn defaults_are_filled_on_a_minimal_cloneset_and_on_update() {
    let (_ns, api) = setup("defaults").await;
    let minimal = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "minimal"},
        "spec": {"selector": {"matchLabels": {"app": "m"}},
                 "template": {"metadata": {"labels": {"app": "m"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}},
    });
    let created = serde_json::to_value(create(&api, &minimal).await.unwrap()).unwrap();
    let spec = &created["spec"];
    assert_eq!(spec["replicas"], json!(1));
    assert_eq!(spec["revisionHistoryLimit"], json!(10));
    assert_eq!(spec["scaleStrategy"], json!({}));
    assert_eq!(spec["updateStrategy"], json!({"type": "ReCreate", "partition": 0, "maxUnavailable": "20%", "maxSurge": 0}));

    // A full replace that drops defaulted fields gets them back.
    let mut replaced = minimal.clone();
    replaced["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    replaced["spec"]["updateStrategy"] = json!({"type": "InPlaceIfPossible"});
    let updated = api.replace("minimal", &PostParams::default(), &serde_json::from_value(replaced).unwrap()).await.unwrap();
    let spec = serde_json::to_value(updated).unwrap()["spec"].clone();
    assert_eq!(spec["replicas"], json!(1));
    assert_eq!(spec["revisionHistoryLimit"], json!(10));
    assert_eq!(spec["updateStrategy"], json!({"type": "InPlaceIfPossible", "partition": 0, "maxUnavailable": "20%", "maxSurge": 0}));
}

async fn kubectl(args: &[&str]) -> String {
    let kubeconfig = testenv::kubeconfig().await.unwrap();
    let out = Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("kubectl runs");
    assert!(out.status.success(), "kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn kubectl_get_clone_shows_kruise_printer_columns() {
    let (ns, api) = setup("columns").await;
    create(&api, &load(&fixtures().join("docs/04-partition-canary.yaml"))).await.unwrap();
    let narrow = kubectl(&["-n", &ns.name, "get", "clone"]).await;
    let header: Vec<&str> = narrow.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DESIRED", "UPDATED", "UPDATED_READY", "UPDATED_AVAILABLE", "READY", "TOTAL", "AGE"]);
    let wide = kubectl(&["-n", &ns.name, "get", "clonesets.apps.kruise.io", "-o", "wide"]).await;
    let mut lines = wide.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "DESIRED", "UPDATED", "UPDATED_READY", "UPDATED_AVAILABLE", "READY", "TOTAL", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row[0], "canary");
    assert_eq!(row[1], "5", "DESIRED shows spec.replicas");
    assert!(row.contains(&"main") && row.contains(&"nginx:1.27"), "wide row shows containers and images: {row:?}");
}

#[tokio::test]
async fn kubectl_scale_changes_spec_replicas_through_the_scale_subresource() {
    let (ns, api) = setup("scale").await;
    create(&api, &load(&fixtures().join("docs/09-paused.yaml"))).await.unwrap();
    kubectl(&["-n", &ns.name, "scale", "clone/paused", "--replicas=7"]).await;
    let stored = serde_json::to_value(api.get("paused").await.unwrap()).unwrap();
    assert_eq!(stored["spec"]["replicas"], json!(7));
    // The scale subresource enforces the schema too.
    let scale = api.get_scale("paused").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(7));
}

#[tokio::test]
async fn rollout_undo_merge_patch_with_a_patch_directive_is_accepted() {
    let (_ns, api) = setup("undo").await;
    create(&api, &load(&fixtures().join("docs/04-partition-canary.yaml"))).await.unwrap();
    // What `kubectl kruise rollout undo` sends: a revision's data as a JSON merge patch.
    let undo = json!({"spec": {"template": {"$patch": "replace", "metadata": {"labels": {"app": "canary"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.26", "resources": {}}]}}}});
    let patched = api.patch("canary", &PatchParams::default(), &Patch::Merge(&undo)).await.expect("undo patch accepted");
    let v = serde_json::to_value(patched).unwrap();
    assert_eq!(v["spec"]["template"]["spec"]["containers"][0]["image"], json!("nginx:1.26"));
}

// ---------------------------------------------------------------------------------------------
// One case per validation rule of Kruise's CloneSet webhook (§8): the invalid manifest is
// rejected at create/update with a message naming the field and the rule; its valid neighbour,
// differing only in the offending field, is accepted.

fn base(name: &str) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "sample"}},
            "template": {"metadata": {"labels": {"app": "sample", "tier": "web"}},
                         "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}},
        },
    })
}

fn with(name: &str, patch: Value) -> Value {
    let mut v = base(name);
    json_patch::merge(&mut v, &patch);
    v
}

/// Creates `invalid` (expecting rejection with every fragment in the message) and `valid`.
async fn check_create_rule(case: &str, invalid: Value, fragments: &[&str], valid: Value) {
    let (_ns, api) = setup(&case.replace('_', "-")).await;
    let mut invalid = with(case_name(case, "bad"), invalid);
    if invalid["metadata"]["name"].is_null() {
        invalid["metadata"]["name"] = json!(case_name(case, "bad"));
    }
    match create(&api, &invalid).await {
        Ok(_) => panic!("{case}: the invalid manifest was accepted"),
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{case}: {e:?}");
            for f in fragments {
                assert!(e.message.contains(f), "{case}: message lacks {f:?}: {}", e.message);
            }
        }
        Err(e) => panic!("{case}: unexpected error {e}"),
    }
    let valid = with(case_name(case, "ok"), valid);
    create(&api, &valid).await.unwrap_or_else(|e| panic!("{case}: the valid neighbour was rejected: {e}"));
}

fn case_name(case: &str, suffix: &str) -> &'static str {
    Box::leak(format!("{}-{suffix}", case.replace('_', "-")).into_boxed_str())
}

macro_rules! create_rule {
    ($name:ident, invalid: $invalid:expr, message: [$($frag:expr),+], valid: $valid:expr) => {
        #[tokio::test]
        async fn $name() {
            check_create_rule(stringify!($name), $invalid, &[$($frag),+], $valid).await;
        }
    };
}

create_rule!(rule_replicas_non_negative,
    invalid: json!({"spec": {"replicas": -1}}),
    message: ["spec.replicas", "greater than or equal to 0"],
    valid: json!({"spec": {"replicas": 0}}));

create_rule!(rule_selector_required,
    invalid: json!({"spec": {"selector": null}}),
    message: ["spec.selector", "Required value"],
    valid: json!({}));

create_rule!(rule_selector_not_empty,
    invalid: json!({"spec": {"selector": {"matchLabels": null}}}),
    message: ["spec.selector", "empty selector is invalid for cloneset"],
    valid: json!({}));

create_rule!(rule_selector_expressions_valid,
    invalid: json!({"spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["web"]}]}}}),
    message: ["spec.selector", "Exists and DoesNotExist take none"],
    valid: json!({"spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}}));

create_rule!(rule_label_syntax,
    invalid: json!({"spec": {"selector": {"matchLabels": {"app": "sample", "bad key!": "x"}},
                             "template": {"metadata": {"labels": {"bad key!": "x"}}}}}),
    message: ["spec.template.metadata.labels", "qualified names"],
    valid: json!({"spec": {"selector": {"matchLabels": {"app": "sample", "example.io/good-key": "x"}},
                           "template": {"metadata": {"labels": {"example.io/good-key": "x"}}}}}));

create_rule!(rule_selector_matches_template_labels,
    invalid: json!({"spec": {"selector": {"matchLabels": {"app": "other"}}}}),
    message: ["spec.template.metadata.labels", "`selector` does not match template `labels`"],
    valid: json!({"spec": {"selector": {"matchLabels": null, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}}}));

create_rule!(rule_restart_policy_always,
    invalid: json!({"spec": {"template": {"spec": {"restartPolicy": "Never"}}}}),
    message: ["spec.template.spec.restartPolicy", "Unsupported value: \"Never\""],
    valid: json!({"spec": {"template": {"spec": {"restartPolicy": "Always"}}}}));

create_rule!(rule_no_active_deadline_seconds,
    invalid: json!({"spec": {"template": {"spec": {"activeDeadlineSeconds": 30}}}}),
    message: ["spec.template.spec.activeDeadlineSeconds", "not Supported"],
    valid: json!({"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 30}}}}));

create_rule!(rule_template_needs_containers,
    invalid: json!({"spec": {"template": {"spec": {"containers": []}}}}),
    message: ["spec.template.spec.containers", "Required value"],
    valid: json!({}));

create_rule!(rule_container_names_are_dns_labels,
    invalid: json!({"spec": {"template": {"spec": {"containers": [{"name": "Main_1", "image": "nginx:1.27"}]}}}}),
    message: ["spec.template.spec.containers[*].name", "RFC 1123"],
    valid: json!({"spec": {"template": {"spec": {"containers": [{"name": "main-1", "image": "nginx:1.27"}]}}}}));

create_rule!(rule_container_names_unique,
    invalid: json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "a:1"}], "initContainers": [{"name": "main", "image": "b:1"}]}}}}),
    message: ["spec.template.spec.containers[*].name", "Duplicate value"],
    valid: json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "a:1"}], "initContainers": [{"name": "init", "image": "b:1"}]}}}}));

create_rule!(rule_container_image_required,
    invalid: json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": ""}]}}}}),
    message: ["spec.template.spec.containers[*].image", "Required value"],
    valid: json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.28"}]}}}}));

create_rule!(rule_pods_to_delete_no_duplicates,
    invalid: json!({"spec": {"scaleStrategy": {"podsToDelete": ["a", "b", "a"]}}}),
    message: ["spec.scaleStrategy.podsToDelete", "duplicated items"],
    valid: json!({"spec": {"scaleStrategy": {"podsToDelete": ["a", "b"]}}}));

// A scale-down of a large set names many pods: the duplicate check must not exceed the
// apiserver's cost limit and refuse it.
create_rule!(rule_pods_to_delete_long_list,
    invalid: json!({"spec": {"scaleStrategy": {"podsToDelete": (0..256).map(|i| format!("web-{}", i % 255)).collect::<Vec<_>>()}}}),
    message: ["spec.scaleStrategy.podsToDelete", "duplicated items"],
    valid: json!({"spec": {"scaleStrategy": {"podsToDelete": (0..2000).map(|i| format!("web-{i:05}")).collect::<Vec<_>>()}}}));

create_rule!(rule_update_type_enum,
    invalid: json!({"spec": {"updateStrategy": {"type": "OnDelete"}}}),
    message: ["spec.updateStrategy.type", "must be 'ReCreate', 'InPlaceIfPossible' or 'InPlaceOnly'"],
    valid: json!({"spec": {"updateStrategy": {"type": "InPlaceIfPossible"}}}));

create_rule!(rule_partition_non_negative,
    invalid: json!({"spec": {"updateStrategy": {"partition": -1}}}),
    message: ["spec.updateStrategy.partition", "non-negative integer or percentage"],
    valid: json!({"spec": {"updateStrategy": {"partition": "33.3%"}}}));

create_rule!(rule_partition_string_must_be_percent,
    invalid: json!({"spec": {"updateStrategy": {"partition": "5"}}}),
    message: ["spec.updateStrategy.partition", "non-negative integer or percentage"],
    valid: json!({"spec": {"updateStrategy": {"partition": 5}}}));

create_rule!(rule_max_unavailable_int_or_percent,
    invalid: json!({"spec": {"updateStrategy": {"maxUnavailable": "5"}}}),
    message: ["spec.updateStrategy.maxUnavailable", "non-negative integer or percentage"],
    valid: json!({"spec": {"updateStrategy": {"maxUnavailable": "120%"}}}));

create_rule!(rule_max_surge_int_or_percent,
    invalid: json!({"spec": {"updateStrategy": {"maxSurge": "1"}}}),
    message: ["spec.updateStrategy.maxSurge", "non-negative integer or percentage"],
    valid: json!({"spec": {"updateStrategy": {"maxSurge": "10%"}}}));

create_rule!(rule_no_max_surge_with_in_place_only,
    invalid: json!({"spec": {"updateStrategy": {"type": "InPlaceOnly", "maxSurge": 1}}}),
    message: ["spec.updateStrategy.maxSurge", "can not use maxSurge with strategy type InPlaceOnly"],
    valid: json!({"spec": {"updateStrategy": {"type": "InPlaceOnly", "maxSurge": 0}}}));

create_rule!(rule_max_unavailable_and_max_surge_not_both_zero,
    invalid: json!({"spec": {"updateStrategy": {"maxUnavailable": 0, "maxSurge": "0%"}}}),
    message: ["spec.updateStrategy.maxUnavailable", "maxUnavailable and maxSurge should not both be less than 1"],
    valid: json!({"spec": {"updateStrategy": {"maxUnavailable": 0, "maxSurge": 1}}}));

create_rule!(rule_priority_only_one_kind,
    invalid: json!({"spec": {"updateStrategy": {"priorityStrategy": {
        "orderPriority": [{"orderedKey": "k"}],
        "weightPriority": [{"weight": 10, "matchSelector": {"matchLabels": {"k": "v"}}}]}}}}),
    message: ["spec.updateStrategy.priorityStrategy", "only one of weightPriority and orderPriority can be used"],
    valid: json!({"spec": {"updateStrategy": {"priorityStrategy": {"orderPriority": [{"orderedKey": "k"}]}}}}));

create_rule!(rule_priority_order_key_not_empty,
    invalid: json!({"spec": {"updateStrategy": {"priorityStrategy": {"orderPriority": [{"orderedKey": ""}]}}}}),
    message: ["spec.updateStrategy.priorityStrategy.orderPriority[0].orderedKey", "order key can not be empty"],
    valid: json!({"spec": {"updateStrategy": {"priorityStrategy": {"orderPriority": [{"orderedKey": "some-key"}]}}}}));

create_rule!(rule_priority_weight_range,
    invalid: json!({"spec": {"updateStrategy": {"priorityStrategy": {"weightPriority": [{"weight": 101, "matchSelector": {"matchLabels": {"k": "v"}}}]}}}}),
    message: ["spec.updateStrategy.priorityStrategy.weightPriority[0].weight", "range 1-100"],
    valid: json!({"spec": {"updateStrategy": {"priorityStrategy": {"weightPriority": [{"weight": 100, "matchSelector": {"matchLabels": {"k": "v"}}}]}}}}));

create_rule!(rule_priority_weight_selector_not_empty,
    invalid: json!({"spec": {"updateStrategy": {"priorityStrategy": {"weightPriority": [{"weight": 10, "matchSelector": {}}]}}}}),
    message: ["spec.updateStrategy.priorityStrategy.weightPriority[0].matchSelector", "selector can not be empty"],
    valid: json!({"spec": {"updateStrategy": {"priorityStrategy": {"weightPriority": [{"weight": 10, "matchSelector": {"matchLabels": {"k": "v"}}}]}}}}));

create_rule!(rule_priority_weight_selector_valid,
    invalid: json!({"spec": {"updateStrategy": {"priorityStrategy": {"weightPriority": [{"weight": 10, "matchSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}}]}}}}),
    message: ["spec.updateStrategy.priorityStrategy.weightPriority[*].matchSelector", "invalid selector"],
    valid: json!({"spec": {"updateStrategy": {"priorityStrategy": {"weightPriority": [{"weight": 10, "matchSelector": {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}}]}}}}));

create_rule!(rule_scatter_key_not_empty,
    invalid: json!({"spec": {"updateStrategy": {"scatterStrategy": [{"key": "", "value": "a"}]}}}),
    message: ["spec.updateStrategy.scatterStrategy[0].key", "key should not be empty"],
    valid: json!({"spec": {"updateStrategy": {"scatterStrategy": [{"key": "zone", "value": "a"}]}}}));

create_rule!(rule_scatter_terms_unique,
    invalid: json!({"spec": {"updateStrategy": {"scatterStrategy": [{"key": "zone", "value": "a"}, {"key": "zone", "value": "a"}]}}}),
    message: ["spec.updateStrategy.scatterStrategy", "duplicated key=value"],
    valid: json!({"spec": {"updateStrategy": {"scatterStrategy": [{"key": "zone", "value": "a"}, {"key": "zone", "value": "b"}]}}}));

create_rule!(rule_progress_deadline_non_negative,
    invalid: json!({"spec": {"progressDeadlineSeconds": -1}}),
    message: ["spec.progressDeadlineSeconds", "greater than or equal to 0"],
    valid: json!({"spec": {"progressDeadlineSeconds": 10}}));

create_rule!(rule_progress_deadline_above_min_ready,
    invalid: json!({"spec": {"progressDeadlineSeconds": 10, "minReadySeconds": 10}}),
    message: ["spec.progressDeadlineSeconds", "must be greater than minReadySeconds"],
    valid: json!({"spec": {"progressDeadlineSeconds": 2147483647, "minReadySeconds": 2147483647}}));

create_rule!(rule_name_is_dns_subdomain,
    invalid: json!({"metadata": {"name": "Bad_Name"}}),
    message: ["metadata.name", "Invalid value"],
    valid: json!({}));

/// Creates `base` (patched by `initial`), then expects `bad_update` rejected and `good_update` accepted.
async fn check_update_rule(case: &str, initial: Value, bad_update: Value, fragments: &[&str], good_update: Value) {
    let (_ns, api) = setup(&case.replace('_', "-")).await;
    let name = case_name(case, "cs");
    create(&api, &with(name, initial)).await.unwrap();
    match api.patch(name, &PatchParams::default(), &Patch::Merge(&bad_update)).await {
        Ok(_) => panic!("{case}: the invalid update was accepted"),
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{case}: {e:?}");
            for f in fragments {
                assert!(e.message.contains(f), "{case}: message lacks {f:?}: {}", e.message);
            }
        }
        Err(e) => panic!("{case}: unexpected error {e}"),
    }
    api.patch(name, &PatchParams::default(), &Patch::Merge(&good_update))
        .await
        .unwrap_or_else(|e| panic!("{case}: valid update rejected: {e}"));
}

#[tokio::test]
async fn rule_update_selector_is_immutable() {
    check_update_rule(
        "rule_update_selector_is_immutable",
        json!({}),
        json!({"spec": {"selector": {"matchLabels": {"tier": "web"}}}}),
        &["spec.selector", "field is immutable"],
        json!({"spec": {"replicas": 5, "minReadySeconds": 3, "revisionHistoryLimit": 2, "progressDeadlineSeconds": 60,
                        "scaleStrategy": {"maxUnavailable": 1}, "updateStrategy": {"paused": true},
                        "lifecycle": {"preDelete": {"labelsHandler": {"k": "v"}}},
                        "template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.28"}]}}}}),
    )
    .await;
}

#[tokio::test]
async fn rule_update_in_place_only_changes_images_only() {
    check_update_rule(
        "rule_update_in_place_only_changes_images_only",
        json!({"spec": {"updateStrategy": {"type": "InPlaceOnly"}}}),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.28", "env": [{"name": "A", "value": "1"}]}]}}}}),
        &["spec.template.spec", "only allowed to update images in spec for InPlaceOnly"],
        json!({"spec": {"template": {"metadata": {"labels": {"extra": "label"}}, "spec": {"containers": [{"name": "main", "image": "nginx:1.28"}]}}}}),
    )
    .await;
}

/// Policy-enforced rules must never block anything but CloneSets.
#[tokio::test]
async fn admission_policy_does_not_touch_other_resources() {
    let (ns, _api) = setup("scope").await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "plain", "labels": {"app": "x"}},
        "spec": {"restartPolicy": "Never", "activeDeadlineSeconds": 5, "containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.expect("pods are not validated by the CloneSet policy");
    wait_until(Duration::from_secs(10), "the pod", || async { Ok(pods.get_opt("plain").await?.is_some()) }).await.unwrap();
}

/// Kruise's `policy.kruise.io/delete-protection` (gate ResourcesDeletionProtection): the policy
/// the chart installs with the gate refuses `Always` and, while replicas > 0, `Cascading`.
#[tokio::test]
async fn deletion_protection_label_refuses_deletes_as_kruise_does() {
    use cloneset_operator::api::crd;
    use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
    let (ns, api) = setup("protect").await;
    let ssa = PatchParams::apply("cloneset-e2e").force();
    let (policy, binding) = crd::deletion_protection_policy();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(ns.client.clone());
    policies.patch(crd::DELETION_PROTECTION_POLICY_NAME, &ssa, &Patch::Apply(&policy)).await.unwrap();
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(ns.client.clone());
    bindings.patch(crd::DELETION_PROTECTION_POLICY_NAME, &ssa, &Patch::Apply(&binding)).await.unwrap();

    let labelled = |name: &str, value: &str, replicas: i32| {
        let mut m = with(name, json!({"spec": {"replicas": replicas}}));
        m["metadata"]["labels"] = json!({(cloneset_operator::api::keys::DELETE_PROTECTION): value});
        m
    };
    create(&api, &labelled("always", "Always", 0)).await.unwrap();
    create(&api, &labelled("cascading", "Cascading", 2)).await.unwrap();
    create(&api, &labelled("other", "Never", 2)).await.unwrap();
    let dry = kube::api::DeleteParams { dry_run: true, ..Default::default() };
    let denied = |res: Result<either::Either<DynamicObject, kube::core::response::Status>, kube::Error>| match res {
        Err(kube::Error::Api(e)) if e.message.contains(crd::DELETION_PROTECTION_POLICY_NAME) => Some(e.message),
        _ => None,
    };
    wait_until(Duration::from_secs(60), "the deletion-protection policy to be enforced", || async {
        Ok(denied(api.delete("always", &dry).await).is_some())
    })
    .await
    .unwrap();

    let msg = denied(api.delete("always", &Default::default()).await).expect("Always is refused");
    assert!(msg.contains("forbidden by ResourcesProtectionDeletion for policy.kruise.io/delete-protection=Always"), "{msg}");
    let msg = denied(api.delete("cascading", &Default::default()).await).expect("Cascading with replicas is refused");
    assert!(
        msg.contains("forbidden by ResourcesProtectionDeletion for policy.kruise.io/delete-protection=Cascading and replicas 2>0"),
        "{msg}"
    );
    api.delete("other", &Default::default()).await.expect("an unknown value protects nothing");
    // Cascading lets go once scaled to zero; Always only once the label is removed.
    api.patch("cascading", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}}))).await.unwrap();
    api.delete("cascading", &Default::default()).await.expect("Cascading with 0 replicas is deleted");
    api.patch(
        "always",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {(cloneset_operator::api::keys::DELETE_PROTECTION): null}}})),
    )
    .await
    .unwrap();
    api.delete("always", &Default::default()).await.expect("deleted once unprotected");
}

// ---------------------------------------------------------------------------------------------
// Template fields that revisions and pods do not carry (Kubernetes 1.32's pod API, as Kruise
// v1.9.0 reads templates): named at apply and in an event, never lost in silence.

/// `kubectl apply -f` of `manifest`; returns kubectl's stderr, where it prints the warnings.
async fn kubectl_apply(ns: &str, manifest: &Value) -> String {
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{ns}-apply.json"));
    std::fs::write(&file, serde_json::to_vec(manifest).unwrap()).unwrap();
    let kubeconfig = testenv::kubeconfig().await.unwrap();
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", ns, "apply", "-f"])
        .arg(&file)
        .output()
        .expect("kubectl runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "kubectl apply: {stderr}");
    stderr
}

/// The pod spec as stored, whole (k8s-openapi's `Pod` would drop the fields in question).
async fn raw_pod_specs(ns: &TestNamespace, app: &str) -> Vec<Value> {
    let pods: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()));
    let list = pods.list(&kube::api::ListParams::default().labels(&format!("app={app}"))).await.unwrap();
    list.items.into_iter().map(|p| p.data["spec"].clone()).collect()
}

#[tokio::test]
async fn template_fields_newer_than_kubernetes_1_32_are_named_at_apply_and_in_an_event() {
    use cloneset_operator::api::CloneSet;
    use cloneset_operator::core::revision;
    use e2e::workload::{T, env, rolled_out};
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use k8s_openapi::api::core::v1::Event;
    let e = env("fields").await;
    let cloneset = |name: &str, newer: bool| {
        let mut spec = json!({"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": "nginx:1.27"}]});
        if newer {
            spec["hostnameOverride"] = json!("web.example");
            spec["hostnamee"] = json!("misspelt");
            spec["containers"][0]["restartPolicyRules"] = json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]);
        }
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": name},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
    };

    // At apply: one warning per newer field, the write accepted. A misspelt field is not known
    // to be wrong there.
    let stderr = kubectl_apply(&e.ns.name, &cloneset("newer", true)).await;
    for field in ["spec.template.spec.hostnameOverride", "spec.template.spec.containers[*].restartPolicyRules"] {
        let warning = format!("{field}: {}", cloneset_operator::api::template_fields::NOT_CARRIED);
        assert!(stderr.lines().any(|l| l.starts_with("Warning: ") && l.ends_with(&warning)), "no warning {warning:?} in:\n{stderr}");
    }
    assert!(!stderr.contains("hostnamee"), "{stderr}");
    let plain_stderr = kubectl_apply(&e.ns.name, &cloneset("plain", false)).await;
    assert!(!plain_stderr.contains("Warning"), "{plain_stderr}");

    // The event names every dropped field, newer or misspelt, with its index.
    let events: Api<Event> = e.ns.api();
    let dropped_events = || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|ev| ev.reason.as_deref() == Some("TemplateFieldsDropped") && ev.type_.as_deref() == Some("Warning"))
            .collect::<Vec<_>>()
    };
    wait_until(T, "a TemplateFieldsDropped event", || async { Ok(!dropped_events().await.is_empty()) }).await.unwrap();
    for name in ["newer", "plain"] {
        e.wait_status(name, "rolled out", |cs: &CloneSet| rolled_out(cs, 1)).await;
    }
    // More passes (a scale, same revision) record no new event and repeat none.
    e.patch("newer", json!({"replicas": 2})).await;
    e.wait_status("newer", "scaled to 2", |cs: &CloneSet| rolled_out(cs, 2)).await;
    let found = dropped_events().await;
    assert_eq!(found.len(), 1, "{found:?}");
    let ev = &found[0];
    assert_eq!(ev.involved_object.name.as_deref(), Some("newer"));
    assert_eq!(ev.count, Some(1), "recorded once, not on every pass");
    let message = ev.message.as_deref().unwrap_or_default();
    for field in
        ["spec.template.spec.hostnameOverride", "spec.template.spec.hostnamee", "spec.template.spec.containers[0].restartPolicyRules"]
    {
        assert!(message.contains(field), "{field} not in {message:?}");
    }

    // The pods lack them, and the revision is the one the template without them gives.
    for spec in raw_pod_specs(&e.ns, "newer").await {
        assert!(spec.get("hostnameOverride").is_none() && spec.get("hostnamee").is_none(), "{spec}");
        assert!(spec["containers"][0].get("restartPolicyRules").is_none(), "{spec}");
    }
    assert_eq!(raw_pod_specs(&e.ns, "newer").await.len(), 2);
    let without = cloneset("newer", false)["spec"]["template"].clone();
    let data = revision::revision_data(&cloneset_operator::core::defaults::default_pod_template(&without));
    let expected = revision::revision_name("newer", &revision::hash_revision(&data, 0));
    let revisions: Api<ControllerRevision> = e.ns.api();
    let list = revisions.list(&kube::api::ListParams::default().labels("app=newer")).await.unwrap();
    let names: Vec<String> = list.items.iter().map(|r| r.metadata.name.clone().unwrap_or_default()).collect();
    assert_eq!(names, [expected], "one revision, named as the template without the fields names it");
    let stored = list.items[0].data.as_ref().map(|d| cloneset_operator::core::gojson::encode_value(&d.0)).unwrap_or_default();
    assert_eq!(String::from_utf8_lossy(&stored), String::from_utf8_lossy(&data), "and holding its data");
}

/// Every field of PodTemplateSpec that this apiserver serves (its OpenAPI) is either in Kruise's
/// Kubernetes 1.32 types (the Go encoding schema) or under a field the warning policy names:
/// on any Kubernetes version, so that no newer field goes without a warning.
#[tokio::test]
async fn every_template_field_the_apiserver_serves_is_read_or_warned_about() {
    use std::collections::{BTreeMap, BTreeSet};
    let client = testenv::client().await.unwrap();
    let request = http::Request::get("/openapi/v3/api/v1").body(Vec::new()).unwrap();
    let openapi: Value = serde_json::from_str(&client.request_text(request).await.unwrap()).unwrap();
    let schemas = openapi["components"]["schemas"].as_object().expect("components.schemas").clone();
    let schemas: BTreeMap<String, Value> = schemas.into_iter().collect();

    fn walk(schemas: &BTreeMap<String, Value>, schema: &Value, path: &str, open: &mut Vec<String>, out: &mut Vec<String>) {
        let reference = schema["$ref"].as_str().or_else(|| schema["allOf"][0]["$ref"].as_str());
        if let Some(name) = reference.and_then(|r| r.strip_prefix("#/components/schemas/")) {
            if open.iter().any(|o| o == name) {
                return;
            }
            open.push(name.to_string());
            walk(schemas, &schemas[name], path, open, out);
            open.pop();
            return;
        }
        if let Some(properties) = schema["properties"].as_object() {
            for (name, property) in properties {
                let child = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                out.push(child.clone());
                walk(schemas, property, &child, open, out);
            }
        } else if schema["type"] == "array" {
            walk(schemas, &schema["items"], &format!("{path}[]"), open, out);
        } else if schema["additionalProperties"].is_object() {
            walk(schemas, &schema["additionalProperties"], &format!("{path}{{}}"), open, out);
        }
    }
    let mut served = Vec::new();
    walk(&schemas, &json!({"$ref": "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"}), "", &mut Vec::new(), &mut served);
    assert!(served.iter().any(|p| p == "spec.containers[].image"), "the walk reads the OpenAPI: {served:?}");

    let known: BTreeSet<String> = cloneset_operator::core::gojson::pod_template_field_paths().into_iter().collect();
    let newer = cloneset_operator::api::template_fields::newer_fields().fields;
    let under = |p: &str, f: &str| p == f || p.strip_prefix(f).is_some_and(|rest| rest.starts_with(['.', '[', '{']));
    let unwarned: Vec<&String> = served.iter().filter(|p| !known.contains(*p) && !newer.iter().any(|f| under(p, f))).collect();
    assert!(
        unwarned.is_empty(),
        "served by this apiserver, missing from Kruise's types and from src/api/newer_pod_template_fields.json \
         (regenerate it with a newer k8s.io/api, see e2e/revision-golden/README.md): {unwarned:#?}"
    );
}
