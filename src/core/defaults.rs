//! The pod-spec defaults Kubernetes fills in (`SetDefaults_PodSpec`, `SetDefaults_Container`, …),
//! which Kruise's webhook also writes into every stored CloneSet template.
//!
//! This operator has no webhook, so two templates can differ only in whether a default is spelled
//! out: a CloneSet Kruise created carries them, the same manifest re-applied does not. Filling
//! both sides before comparing makes such a change what it is under Kruise — no change at all —
//! so it can still be made in place. Only absent fields are filled, with the values the
//! apiserver would give a pod; nothing here touches revision data or hashes.

use serde_json::{Map, Value, json};

/// Fills the absent defaulted fields of a pod spec (JSON), in place.
pub fn fill_pod_spec_defaults(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else { return };
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool).unwrap_or(false);
    for (field, value) in [
        ("dnsPolicy", json!("ClusterFirst")),
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("securityContext", json!({})),
        ("schedulerName", json!("default-scheduler")),
        ("enableServiceLinks", json!(true)),
    ] {
        fill(spec, field, value);
    }
    for list in ["initContainers", "containers"] {
        for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(c) = c.as_object_mut() {
                fill_container_defaults(c, host_network);
            }
        }
    }
    for v in spec.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        for source in ["secret", "configMap", "projected", "downwardAPI"] {
            if let Some(s) = v.get_mut(source).and_then(Value::as_object_mut) {
                fill(s, "defaultMode", json!(420));
                for item in s.get_mut("items").and_then(Value::as_array_mut).into_iter().flatten() {
                    fill_field_ref(item);
                }
            }
        }
    }
}

fn fill(obj: &mut Map<String, Value>, field: &str, value: Value) {
    if obj.get(field).is_none_or(Value::is_null) {
        obj.insert(field.to_string(), value);
    }
}

fn fill_container_defaults(c: &mut Map<String, Value>, host_network: bool) {
    let pull = match c.get("image").and_then(Value::as_str) {
        Some(image) if image_tag(image) == "latest" => "Always",
        _ => "IfNotPresent",
    };
    fill(c, "imagePullPolicy", json!(pull));
    fill(c, "terminationMessagePath", json!("/dev/termination-log"));
    fill(c, "terminationMessagePolicy", json!("File"));
    for p in c.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(p) = p.as_object_mut() {
            fill(p, "protocol", json!("TCP"));
            if host_network && let Some(port) = p.get("containerPort").cloned() {
                fill(p, "hostPort", port);
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            for (field, value) in [("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)] {
                fill(p, field, json!(value));
            }
            if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                fill(h, "scheme", json!("HTTP"));
            }
        }
    }
    for e in c.get_mut("env").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(from) = e.get_mut("valueFrom") {
            fill_field_ref(from);
        }
    }
}

/// `fieldRef.apiVersion` defaults to `v1` (env, downward API items).
fn fill_field_ref(holder: &mut Value) {
    if let Some(r) = holder.get_mut("fieldRef").and_then(Value::as_object_mut) {
        fill(r, "apiVersion", json!("v1"));
    }
}

/// The tag of an image reference as Kubernetes' defaulting reads it: `latest` when there is
/// neither a tag nor a digest, empty when there is only a digest.
fn image_tag(image: &str) -> &str {
    let name = image.split_once('@').map_or(image, |(n, _)| n);
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':') {
        Some((_, tag)) => tag,
        None if image.contains('@') => "",
        None => "latest",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags_read_as_kubernetes_does() {
        assert_eq!(image_tag("nginx"), "latest");
        assert_eq!(image_tag("nginx:1.25"), "1.25");
        assert_eq!(image_tag("registry:5000/team/nginx"), "latest");
        assert_eq!(image_tag("registry:5000/team/nginx:v2"), "v2");
        assert_eq!(image_tag("nginx@sha256:abcd"), "");
        assert_eq!(image_tag("nginx:1.25@sha256:abcd"), "1.25");
    }

    /// The defaulted template Kruise stores for a bare manifest (golden vector
    /// `defaulted-template`) is what filling the bare one gives, field for field.
    #[test]
    fn a_bare_spec_filled_equals_kruises_stored_template() {
        let mut bare = json!({"containers": [{"name": "nginx", "image": "nginx:1.25"}]});
        fill_pod_spec_defaults(&mut bare);
        let mut stored = json!({
            "containers": [{"image": "nginx:1.25", "imagePullPolicy": "IfNotPresent", "name": "nginx",
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
            "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler", "securityContext": {},
            "terminationGracePeriodSeconds": 30});
        fill_pod_spec_defaults(&mut stored);
        assert_eq!(bare, stored);
    }

    #[test]
    fn explicit_values_are_kept_and_nested_defaults_filled() {
        let mut spec = json!({
            "hostNetwork": true, "dnsPolicy": "Default", "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "a", "image": "app", "imagePullPolicy": "Never",
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 2},
                "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}],
            "volumes": [{"name": "s", "secret": {"secretName": "x"}}, {"name": "d", "downwardAPI": {"items": [{"path": "p", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]});
        fill_pod_spec_defaults(&mut spec);
        assert_eq!(spec["dnsPolicy"], "Default");
        assert_eq!(spec["terminationGracePeriodSeconds"], 5);
        let c = &spec["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Never");
        assert_eq!(c["ports"][0], json!({"containerPort": 8080, "protocol": "TCP", "hostPort": 8080}));
        assert_eq!(
            c["readinessProbe"],
            json!({"httpGet": {"path": "/", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 2, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(spec["volumes"][0]["secret"]["defaultMode"], 420);
        assert_eq!(spec["volumes"][1]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"], "v1");
    }

    #[test]
    fn untagged_images_default_to_always_pulling() {
        let mut spec = json!({"containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "nginx@sha256:ab"}]});
        fill_pod_spec_defaults(&mut spec);
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(spec["containers"][1]["imagePullPolicy"], "IfNotPresent");
    }
}
