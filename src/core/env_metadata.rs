//! Container env variables read from the pod's own labels and annotations through the downward
//! API (`metadata.labels['<key>']`, `metadata.annotations['<key>']`). The kubelet resolves such a
//! variable when a container starts, so a label patched onto a running pod leaves the container
//! with the old value. Where kruise-daemon runs, it restarts those containers during an in-place
//! update and reports, per container, a hash of the values the container really has
//! (`apps.kruise.io/runtime-containers-meta`); the update is complete once every hash is the one
//! the pod's metadata asks for. This module holds Kruise's rules for which variables count, that
//! hash, and the check.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::Value;

use crate::api::keys;
use crate::api::shared::{RefMetadata, RuntimeContainerMetaSet};
use crate::core::gojson;
use crate::core::pod_read::PodRead;
use crate::core::revision;

/// Env variables Kruise leaves out (SidecarSet's own).
const NOT_FROM_METADATA: [&str; 2] = ["SIDECARSET_VERSION", "SIDECARSET_VERSION_ALT"];

/// Which of the pod's metadata maps a variable reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Labels,
    Annotations,
}

impl Source {
    fn field(self) -> &'static str {
        match self {
            Source::Labels => "labels",
            Source::Annotations => "annotations",
        }
    }
}

/// What a variable named `name` reads, given its literal `value` and its `fieldRef.fieldPath`:
/// a label or annotation key, by Kruise's rules (no literal value, not SidecarSet's).
pub fn reads(name: &str, value: Option<&str>, field_path: Option<&str>) -> Option<(Source, String)> {
    if value.is_some_and(|v| !v.is_empty()) || NOT_FROM_METADATA.contains(&name) {
        return None;
    }
    let (field, key) = split_subscripted(field_path?)?;
    let source = match field {
        "metadata.labels" => Source::Labels,
        "metadata.annotations" => Source::Annotations,
        _ => return None,
    };
    Some((source, key.to_string()))
}

/// Whether the cache must keep this env variable: it may read the pod's metadata.
pub fn is_metadata_env(name: &str, value: Option<&str>, field_path: Option<&str>) -> bool {
    reads(name, value, field_path).is_some()
}

/// `metadata.labels['k']` → `("metadata.labels", "k")`, as Kubernetes' `SplitMaybeSubscriptedPath`.
fn split_subscripted(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    inner.split_once("['")
}

/// Per container of a template (JSON), the variables that read metadata: (name, source, key).
fn template_reads(container: &Value) -> Vec<(String, Source, String)> {
    let env = container.get("env").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    env.iter()
        .filter_map(|e| {
            let name = e.get("name")?.as_str()?;
            let path = e.get("valueFrom")?.get("fieldRef")?.get("fieldPath")?.as_str();
            let (source, key) = reads(name, e.get("value").and_then(Value::as_str), path)?;
            Some((name.to_string(), source, key))
        })
        .collect()
}

/// Which container env variable, if any, reads a label or annotation that `patch` (an update's
/// metadata patch, `{"metadata": {"labels": …, "annotations": …}}`) changes, as
/// `"container <c> env <E> (<fieldPath>)"`. Kruise's rules: the containers of the new template
/// (`new_data`, a revision's data).
pub fn changed_by(new_data: &[u8], patch: &Value) -> Option<String> {
    let template = revision::template_from_revision_data(new_data).ok()?;
    let containers = template.get("spec")?.get("containers")?.as_array()?;
    containers.iter().find_map(|c| {
        template_reads(c).into_iter().find_map(|(name, source, key)| {
            patch["metadata"][source.field()].as_object()?.contains_key(&key).then(|| {
                let path = format!("metadata.{}['{key}']", source.field());
                format!("container {} env {name} ({path})", c.get("name").and_then(Value::as_str).unwrap_or_default())
            })
        })
    })
}

/// `patch` split as Kruise splits it for kruise-daemon to refresh the env: each changed label or
/// annotation a container reads leaves the patch for that container's `containerRefMetadata`.
/// Returns the rest of the patch (`None` when nothing is left) and the containers' metadata.
/// `None` when no read key changes, or when one is removed by the update: the daemon restarts a
/// container only for a value it can see change, so such a pod is left to a new pod.
pub fn split_for_daemon(new_data: &[u8], patch: &Value) -> Option<(Option<Value>, BTreeMap<String, RefMetadata>)> {
    let template = revision::template_from_revision_data(new_data).ok()?;
    let containers = template.get("spec")?.get("containers")?.as_array()?;
    let mut rest = patch.clone();
    let mut refs: BTreeMap<String, RefMetadata> = BTreeMap::new();
    for c in containers {
        let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
        for (_, source, key) in template_reads(c) {
            let Some(value) = patch["metadata"][source.field()].get(&key) else { continue };
            let meta = refs.entry(cname.to_string()).or_default();
            let map = match source {
                Source::Labels => &mut meta.labels,
                Source::Annotations => &mut meta.annotations,
            };
            map.get_or_insert_with(BTreeMap::new).insert(key.clone(), value.as_str()?.to_string());
            let fields = rest["metadata"].as_object_mut()?;
            if let Some(field) = fields.get_mut(source.field()).and_then(Value::as_object_mut) {
                field.remove(&key);
                if field.is_empty() {
                    fields.remove(source.field());
                }
            }
        }
    }
    if refs.is_empty() {
        return None;
    }
    let left = rest["metadata"].as_object().is_some_and(|m| !m.is_empty());
    Some((left.then_some(rest), refs))
}

/// Whether kruise-daemon reports on this pod (its runtime-containers-meta annotation).
pub fn daemon_reports(pod: &dyn PodRead) -> bool {
    pod.annotation(keys::RUNTIME_CONTAINERS_META).is_some()
}

/// Kruise's `GetExpectHash`: the hash of the values `container`'s variables read from `labels`
/// and `annotations` (a missing key reads as empty), sorted by name.
pub fn expected_hash(
    container: &Container,
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
) -> u64 {
    let mut envs: Vec<(&str, &str)> = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            let path = e.value_from.as_ref()?.field_ref.as_ref().map(|f| f.field_path.as_str());
            let (source, key) = reads(&e.name, e.value.as_deref(), path)?;
            let map = match source {
                Source::Labels => labels,
                Source::Annotations => annotations,
            };
            Some((e.name.as_str(), map.and_then(|m| m.get(&key)).map_or("", String::as_str)))
        })
        .collect();
    envs.sort_by(|a, b| a.0.cmp(b.0));
    hash_envs(&envs)
}

/// Kruise's `hashEnvs`: FNV-1a (32 bits) of `dump.ForHash` of the JSON of `[]v1.EnvVar`
/// (`[{"name":…,"value":…}]`, `null` when empty, an empty value omitted). `dump.ForHash` of a
/// `[]byte` prints `([]uint8)[b0 b1 …]` with each byte in decimal.
fn hash_envs(envs: &[(&str, &str)]) -> u64 {
    let mut json = Vec::new();
    if envs.is_empty() {
        json.extend_from_slice(b"null");
    } else {
        json.push(b'[');
        for (i, (name, value)) in envs.iter().enumerate() {
            if i > 0 {
                json.push(b',');
            }
            json.extend_from_slice(b"{\"name\":");
            gojson::append_string(&mut json, name);
            if !value.is_empty() {
                json.extend_from_slice(b",\"value\":");
                gojson::append_string(&mut json, value);
            }
            json.push(b'}');
        }
        json.push(b']');
    }
    let mut dumped = String::from("([]uint8)[");
    for (i, b) in json.iter().enumerate() {
        if i > 0 {
            dumped.push(' ');
        }
        dumped.push_str(&b.to_string());
    }
    dumped.push(']');
    let mut hash: u32 = 0x811c_9dc5;
    for b in dumped.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    u64::from(hash)
}

/// Kruise's check for an update that refreshes env from metadata: every container of the spec
/// has a status and a reported meta with the same containerID, and the reported hash is the one
/// the pod's current labels and annotations give.
pub fn daemon_caught_up(pod: &Pod) -> bool {
    let Some(meta) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::RUNTIME_CONTAINERS_META))
        .and_then(|raw| serde_json::from_str::<RuntimeContainerMetaSet>(raw).ok())
    else {
        return false;
    };
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    containers.iter().all(|c| {
        let Some(status) = statuses.iter().find(|s| s.name == c.name) else { return false };
        let Some(reported) = meta.containers.iter().rev().find(|m| m.name == c.name) else { return false };
        reported.container_id == status.container_id.as_deref().unwrap_or_default()
            && reported.hashes.extracted_env_from_metadata_hash
                == expected_hash(c, pod.metadata.labels.as_ref(), pod.metadata.annotations.as_ref())
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec, PodStatus};
    use serde_json::json;

    use super::*;

    fn from(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector { field_path: path.into(), ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container(env: Vec<EnvVar>) -> Container {
        Container { name: "a".into(), env: Some(env), ..Default::default() }
    }

    /// The hashes Kruise v1.9.0's `containermeta.NewEnvFromMetadataHasher().GetExpectHash` gives
    /// for these containers and this metadata (run from Kruise's source, outside this repository).
    #[test]
    fn expected_hashes_are_kruises() {
        let labels: BTreeMap<String, String> = [("ver", "2"), ("app", "web")].map(|(k, v)| (k.into(), v.into())).into();
        let annotations: BTreeMap<String, String> = [("note", "héllo \"q\" <&>"), ("empty", "")].map(|(k, v)| (k.into(), v.into())).into();
        let literal = EnvVar { name: "X".into(), value: Some("1".into()), ..Default::default() };
        let cases = [
            ("none", Container { name: "a".into(), ..Default::default() }, 86995377),
            ("literal", container(vec![literal]), 86995377),
            ("label", container(vec![from("X", "metadata.labels['ver']")]), 2535965607),
            (
                "two, sorted by name; other fields ignored",
                container(vec![from("Z", "metadata.labels['app']"), from("X", "metadata.labels['ver']"), from("N", "metadata.name")]),
                1454927504,
            ),
            ("annotation with escapes", container(vec![from("NOTE", "metadata.annotations['note']")]), 3537035112),
            (
                "missing and empty values",
                container(vec![from("M", "metadata.labels['missing']"), from("E", "metadata.annotations['empty']")]),
                1151175447,
            ),
            ("SidecarSet's variable", container(vec![from("SIDECARSET_VERSION", "metadata.labels['ver']")]), 86995377),
        ];
        for (name, c, want) in cases {
            assert_eq!(expected_hash(&c, Some(&labels), Some(&annotations)), want, "{name}");
        }
    }

    fn revision_data(labels: serde_json::Value, env: serde_json::Value) -> Vec<u8> {
        revision::revision_data(&json!({"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "main", "image": "nginx:1", "env": env}, {"name": "side", "image": "busybox:1"}]}}))
    }

    #[test]
    fn a_changed_key_moves_to_the_reading_container_for_the_daemon() {
        let env = json!([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ver']"}}}]);
        let data = revision_data(json!({"app": "a", "ver": "2", "team": "b"}), env);
        let patch = json!({"metadata": {"labels": {"ver": "2", "team": "b"}}});
        assert_eq!(changed_by(&data, &patch).as_deref(), Some("container main env X (metadata.labels['ver'])"));
        let (rest, refs) = split_for_daemon(&data, &patch).expect("a daemon can refresh it");
        assert_eq!(rest, Some(json!({"metadata": {"labels": {"team": "b"}}})), "the rest stays in the patch");
        assert_eq!(
            serde_json::to_value(&refs).unwrap(),
            json!({"main": {"creationTimestamp": null, "labels": {"ver": "2"}}}),
            "only the reading container, with the new value"
        );
        let (rest, _) = split_for_daemon(&data, &json!({"metadata": {"labels": {"ver": "2"}}})).unwrap();
        assert_eq!(rest, None, "nothing else to patch");
    }

    #[test]
    fn a_removed_key_or_an_unread_one_is_not_for_the_daemon() {
        let env = json!([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ver']"}}}]);
        let data = revision_data(json!({"app": "a"}), env);
        let removed = json!({"metadata": {"labels": {"ver": null}}});
        assert!(changed_by(&data, &removed).is_some());
        assert_eq!(split_for_daemon(&data, &removed), None);
        let unread = json!({"metadata": {"labels": {"team": "b"}}});
        assert_eq!((changed_by(&data, &unread), split_for_daemon(&data, &unread)), (None, None));
    }

    fn pod(meta: Option<&str>, container_id: &str, ver: &str) -> Pod {
        let mut pod = Pod {
            spec: Some(PodSpec { containers: vec![container(vec![from("X", "metadata.labels['ver']")])], ..Default::default() }),
            status: Some(PodStatus {
                container_statuses: Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
                    name: "a".into(),
                    container_id: Some(container_id.into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        pod.metadata.labels = Some([("ver".to_string(), ver.to_string())].into());
        if let Some(meta) = meta {
            pod.metadata.annotations = Some([(keys::RUNTIME_CONTAINERS_META.to_string(), meta.to_string())].into());
        }
        pod
    }

    #[test]
    fn caught_up_once_the_daemon_reports_the_running_container_with_the_new_hash() {
        let ver2 = expected_hash(&container(vec![from("X", "metadata.labels['ver']")]), Some(&[("ver".into(), "2".into())].into()), None);
        let report = |id: &str, hash: u64| {
            json!({"containers": [{"name": "a", "containerID": id, "restartCount": 0,
                "hashes": {"plainHash": 1, "extractedEnvFromMetadataHash": hash}}]})
            .to_string()
        };
        assert!(!daemon_caught_up(&pod(None, "containerd://2", "2")), "no report");
        assert!(!daemon_caught_up(&pod(Some(&report("containerd://1", ver2)), "containerd://2", "2")), "about the old container");
        assert!(!daemon_caught_up(&pod(Some(&report("containerd://2", ver2 + 1)), "containerd://2", "2")), "the old value");
        assert!(daemon_caught_up(&pod(Some(&report("containerd://2", ver2)), "containerd://2", "2")));
        assert!(!daemon_caught_up(&pod(Some("not json"), "containerd://2", "2")));
    }
}
