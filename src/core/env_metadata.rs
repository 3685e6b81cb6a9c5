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
use serde_json::{Value, json};

use crate::api::keys;
use crate::api::shared::{RefMetadata, RuntimeContainerMetaSet};
use crate::core::gojson;
use crate::core::pod_read::PodRead;
use crate::core::revision;

/// Env variables Kruise leaves out (SidecarSet's own).
const NOT_FROM_METADATA: [&str; 2] = ["SIDECARSET_VERSION", "SIDECARSET_VERSION_ALT"];

/// Which of the pod's metadata maps a variable reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
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

    /// This source's map of `labels` and `annotations`.
    fn of<T>(self, labels: T, annotations: T) -> T {
        match self {
            Source::Labels => labels,
            Source::Annotations => annotations,
        }
    }
}

/// What a variable named `name` reads, given its literal `value` and its `fieldRef.fieldPath`:
/// a label or annotation key, by Kruise's rules (no literal value, not SidecarSet's).
pub(crate) fn reads<'a>(name: &str, value: Option<&str>, field_path: Option<&'a str>) -> Option<(Source, &'a str)> {
    if value.is_some_and(|v| !v.is_empty()) || NOT_FROM_METADATA.contains(&name) {
        return None;
    }
    let (field, key) = split_subscripted(field_path?)?;
    let source = match field {
        "metadata.labels" => Source::Labels,
        "metadata.annotations" => Source::Annotations,
        _ => return None,
    };
    Some((source, key))
}

/// Whether the cache must keep this env variable: it may read the pod's metadata.
pub(crate) fn is_metadata_env(name: &str, value: Option<&str>, field_path: Option<&str>) -> bool {
    reads(name, value, field_path).is_some()
}

/// `metadata.labels['k']` → `("metadata.labels", "k")`, as Kubernetes' `SplitMaybeSubscriptedPath`.
fn split_subscripted(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    inner.split_once("['")
}

/// A label or annotation that an update's metadata patch changes and a container's env reads.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ChangedRead {
    container: String,
    env: String,
    source: Source,
    key: String,
    /// The new value; `None` when the update removes the key.
    value: Option<String>,
}

impl ChangedRead {
    /// `container <c> env <E> (<fieldPath>)`, as conditions and events name it.
    pub(crate) fn describe(&self) -> String {
        format!("container {} env {} (metadata.{}['{}'])", self.container, self.env, self.source.field(), self.key)
    }
}

/// The labels and annotations that `patch` (an update's metadata patch, `{"metadata":
/// {"labels": …, "annotations": …}}`) changes and an env variable of the new template's
/// containers reads (`new_data`, a revision's data), in container and variable order.
pub(crate) fn changed_reads(new_data: &[u8], patch: &Value) -> Vec<ChangedRead> {
    let template = revision::template_from_revision_data(new_data).ok();
    let containers = template.as_ref().and_then(|t| t.get("spec")?.get("containers")?.as_array());
    let mut out = Vec::new();
    for c in containers.into_iter().flatten() {
        let env = c.get("env").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for e in env {
            let Some(name) = e.get("name").and_then(Value::as_str) else { continue };
            let path = e.get("valueFrom").and_then(|v| v.get("fieldRef")?.get("fieldPath")?.as_str());
            let Some((source, key)) = reads(name, e.get("value").and_then(Value::as_str), path) else { continue };
            let Some(value) = patch["metadata"][source.field()].get(key) else { continue };
            out.push(ChangedRead {
                container: c.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                env: name.to_string(),
                source,
                key: key.to_string(),
                value: value.as_str().map(str::to_string),
            });
        }
    }
    out
}

/// `patch` split as Kruise splits it for kruise-daemon to refresh the env: each of `changed`
/// leaves the patch for its container's `containerRefMetadata`. Returns the rest of the patch
/// (`None` when nothing is left) and the containers' metadata. `None` when nothing changes, or
/// when a read key is removed: the daemon restarts a container only for a value it can see
/// change, so such a pod is left to a new pod.
pub(crate) fn split_for_daemon(patch: &Value, changed: &[ChangedRead]) -> Option<(Option<Value>, BTreeMap<String, RefMetadata>)> {
    if changed.is_empty() {
        return None;
    }
    let mut rest = patch.clone();
    let mut refs: BTreeMap<String, RefMetadata> = BTreeMap::new();
    for read in changed {
        let meta = refs.entry(read.container.clone()).or_default();
        let map = read.source.of(&mut meta.labels, &mut meta.annotations);
        map.get_or_insert_with(BTreeMap::new).insert(read.key.clone(), read.value.clone()?);
        let fields = rest["metadata"].as_object_mut()?;
        if let Some(field) = fields.get_mut(read.source.field()).and_then(Value::as_object_mut) {
            field.remove(&read.key);
            if field.is_empty() {
                fields.remove(read.source.field());
            }
        }
    }
    let left = rest["metadata"].as_object().is_some_and(|m| !m.is_empty());
    Some((left.then_some(rest), refs))
}

/// Whether kruise-daemon reports on this pod (its runtime-containers-meta annotation).
pub(crate) fn daemon_reports(pod: &dyn PodRead) -> bool {
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
            Some((e.name.as_str(), source.of(labels, annotations).and_then(|m| m.get(key)).map_or("", String::as_str)))
        })
        .collect();
    envs.sort_by(|a, b| a.0.cmp(b.0));
    hash_envs(&envs)
}

/// Kruise's `hashEnvs`: FNV-1a (32 bits) of `dump.ForHash` of the JSON of `[]v1.EnvVar`
/// (`[{"name":…,"value":…}]`, `null` when empty, an empty value omitted). `dump.ForHash` of a
/// `[]byte` prints `([]uint8)[b0 b1 …]` with each byte in decimal.
fn hash_envs(envs: &[(&str, &str)]) -> u64 {
    let list: Vec<Value> = envs
        .iter()
        .map(|(name, value)| if value.is_empty() { json!({"name": name}) } else { json!({"name": name, "value": value}) })
        .collect();
    let json = gojson::encode_value(&if list.is_empty() { Value::Null } else { Value::Array(list) });
    let bytes: Vec<String> = json.iter().map(u8::to_string).collect();
    let dumped = format!("([]uint8)[{}]", bytes.join(" "));
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
pub(crate) fn daemon_caught_up(pod: &Pod) -> bool {
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
        let changed = changed_reads(&data, &patch);
        let described: Vec<String> = changed.iter().map(ChangedRead::describe).collect();
        assert_eq!(described, ["container main env X (metadata.labels['ver'])"]);
        let (rest, refs) = split_for_daemon(&patch, &changed).expect("a daemon can refresh it");
        assert_eq!(rest, Some(json!({"metadata": {"labels": {"team": "b"}}})), "the rest stays in the patch");
        assert_eq!(
            serde_json::to_value(&refs).unwrap(),
            json!({"main": {"creationTimestamp": null, "labels": {"ver": "2"}}}),
            "only the reading container, with the new value"
        );
        let only_read = json!({"metadata": {"labels": {"ver": "2"}}});
        let (rest, _) = split_for_daemon(&only_read, &changed_reads(&data, &only_read)).unwrap();
        assert_eq!(rest, None, "nothing else to patch");
    }

    #[test]
    fn a_removed_key_or_an_unread_one_is_not_for_the_daemon() {
        let env = json!([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ver']"}}}]);
        let data = revision_data(json!({"app": "a"}), env);
        let removed = json!({"metadata": {"labels": {"ver": null}}});
        let changed = changed_reads(&data, &removed);
        assert_eq!(changed.len(), 1, "a removal is a change");
        assert_eq!(split_for_daemon(&removed, &changed), None);
        let unread = json!({"metadata": {"labels": {"team": "b"}}});
        assert_eq!(changed_reads(&data, &unread), []);
        assert_eq!(split_for_daemon(&unread, &[]), None);
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
