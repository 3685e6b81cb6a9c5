//! A protobuf pod decoded straight into the [`WirePod`] the pod cache compacts, with no JSON in
//! between: each field becomes what the apiserver's JSON of it decodes to. Go's JSON leaves out
//! an empty string, a zero count, an empty map or list (`omitempty`), which k8s-openapi then
//! decodes as absent; where the JSON field is required (a container's name, a condition's type)
//! an absent value decodes as empty. `tests/pod_decoders.rs` checks every field against
//! k8s-openapi's decoding of the same pod's JSON (encoded by k8s-pb's complete messages),
//! `tests::empty_values_decode_as_gos_json_leaves_them` (below) the empty ones, and
//! `e2e/tests/operator/pod_cache.rs` the whole against the apiserver's own JSON.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::{
    Container, ContainerState, ContainerStatus, EnvVar, KeySelector, ObjectMeta, Pod, PodCondition, PodSpec, PodStatus, Quantity,
    ResourceRequirements, Time, TranscodeError, is_kept_env,
};
use crate::pod_cache::wire::WirePod;

/// An `omitempty` string: absent when empty.
fn text(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// An `omitempty` count: absent when zero.
fn count<N: Default + PartialEq>(n: Option<N>) -> Option<N> {
    n.filter(|n| *n != N::default())
}

/// An `omitempty` list: absent when empty.
fn list<T, U>(items: Vec<T>, each: impl FnMut(T) -> U) -> Option<Vec<U>> {
    (!items.is_empty()).then(|| items.into_iter().map(each).collect())
}

fn fallible_list<T, U>(items: Vec<T>, each: impl FnMut(T) -> Result<U, TranscodeError>) -> Result<Option<Vec<U>>, TranscodeError> {
    if items.is_empty() { Ok(None) } else { items.into_iter().map(each).collect::<Result<_, _>>().map(Some) }
}

fn map<V>(pairs: BTreeMap<String, V>) -> Option<BTreeMap<String, V>> {
    (!pairs.is_empty()).then_some(pairs)
}

/// A time: seconds only, as the JSON has it; an empty message (Go's zero time) is left out.
fn time(t: Option<Time>) -> Result<Option<meta::Time>, TranscodeError> {
    let Some(seconds) = t.and_then(|t| t.seconds) else { return Ok(None) };
    let at = k8s_openapi::jiff::Timestamp::from_second(seconds).map_err(|e| TranscodeError::Time(e.to_string()))?;
    Ok(Some(meta::Time(at)))
}

fn quantity(q: Quantity) -> KubeQuantity {
    KubeQuantity(q.string.unwrap_or_default())
}

fn quantities(qs: BTreeMap<String, Quantity>) -> Option<BTreeMap<String, KubeQuantity>> {
    map(qs.into_iter().map(|(k, q)| (k, quantity(q))).collect())
}

fn resources(r: ResourceRequirements) -> core::ResourceRequirements {
    core::ResourceRequirements {
        limits: quantities(r.limits),
        requests: quantities(r.requests),
        claims: list(r.claims, |c| core::ResourceClaim { name: c.name.unwrap_or_default(), request: text(c.request) }),
    }
}

fn key_selector(k: KeySelector) -> (String, String, Option<bool>) {
    (k.local_object_reference.and_then(|r| r.name).unwrap_or_default(), k.key.unwrap_or_default(), k.optional)
}

fn env_var(v: EnvVar) -> core::EnvVar {
    core::EnvVar {
        name: v.name.unwrap_or_default(),
        value: text(v.value),
        value_from: v.value_from.map(|s| core::EnvVarSource {
            field_ref: s
                .field_ref
                .map(|f| core::ObjectFieldSelector { api_version: text(f.api_version), field_path: f.field_path.unwrap_or_default() }),
            resource_field_ref: s.resource_field_ref.map(|r| core::ResourceFieldSelector {
                container_name: text(r.container_name),
                resource: r.resource.unwrap_or_default(),
                divisor: r.divisor.map(quantity),
            }),
            config_map_key_ref: s.config_map_key_ref.map(key_selector).map(|(name, key, optional)| core::ConfigMapKeySelector {
                name,
                key,
                optional,
            }),
            secret_key_ref: s.secret_key_ref.map(key_selector).map(|(name, key, optional)| core::SecretKeySelector { name, key, optional }),
        }),
    }
}

/// A container as `WirePod` keeps it: only the env variables the controller reads.
fn container(c: Container) -> core::Container {
    let env: Vec<core::EnvVar> = c.env.into_iter().filter(is_kept_env).map(env_var).collect();
    core::Container {
        name: c.name.unwrap_or_default(),
        image: text(c.image),
        env: (!env.is_empty()).then_some(env),
        resources: c.resources.map(resources),
        resize_policy: list(c.resize_policy, |p| core::ContainerResizePolicy {
            resource_name: p.resource_name.unwrap_or_default(),
            restart_policy: p.restart_policy.unwrap_or_default(),
        }),
        restart_policy: c.restart_policy,
        ..Default::default()
    }
}

fn spec(s: PodSpec) -> core::PodSpec {
    core::PodSpec {
        containers: s.containers.into_iter().map(container).collect(),
        init_containers: list(s.init_containers, container),
        node_name: text(s.node_name),
        readiness_gates: list(s.readiness_gates, |g| core::PodReadinessGate { condition_type: g.condition_type.unwrap_or_default() }),
        ..Default::default()
    }
}

fn state(s: ContainerState) -> Result<core::ContainerState, TranscodeError> {
    Ok(core::ContainerState {
        waiting: s.waiting.map(|w| core::ContainerStateWaiting { reason: text(w.reason), message: text(w.message) }),
        running: s.running.map(|r| time(r.started_at).map(|started_at| core::ContainerStateRunning { started_at })).transpose()?,
        terminated: s
            .terminated
            .map(|t| {
                Ok::<_, TranscodeError>(core::ContainerStateTerminated {
                    exit_code: t.exit_code.unwrap_or_default(),
                    signal: count(t.signal),
                    reason: text(t.reason),
                    message: text(t.message),
                    started_at: time(t.started_at)?,
                    finished_at: time(t.finished_at)?,
                    container_id: text(t.container_id),
                })
            })
            .transpose()?,
    })
}

fn container_status(s: ContainerStatus) -> Result<core::ContainerStatus, TranscodeError> {
    Ok(core::ContainerStatus {
        name: s.name.unwrap_or_default(),
        state: s.state.map(state).transpose()?,
        last_state: s.last_state.map(state).transpose()?,
        ready: s.ready.unwrap_or_default(),
        restart_count: s.restart_count.unwrap_or_default(),
        image: s.image.unwrap_or_default(),
        image_id: s.image_id.unwrap_or_default(),
        container_id: text(s.container_id),
        started: s.started,
        allocated_resources: quantities(s.allocated_resources),
        resources: s.resources.map(resources),
        allocated_resources_status: list(s.allocated_resources_status, |r| core::ResourceStatus {
            name: r.name.unwrap_or_default(),
            resources: list(r.resources, |h| core::ResourceHealth {
                resource_id: h.resource_id.unwrap_or_default(),
                health: text(h.health),
            }),
        }),
        stop_signal: s.stop_signal,
        user: None,
        volume_mounts: None,
    })
}

fn condition(c: PodCondition) -> Result<core::PodCondition, TranscodeError> {
    Ok(core::PodCondition {
        type_: c.r#type.unwrap_or_default(),
        observed_generation: count(c.observed_generation),
        status: c.status.unwrap_or_default(),
        last_probe_time: time(c.last_probe_time)?,
        last_transition_time: time(c.last_transition_time)?,
        reason: text(c.reason),
        message: text(c.message),
    })
}

fn status(s: PodStatus) -> Result<core::PodStatus, TranscodeError> {
    Ok(core::PodStatus {
        observed_generation: count(s.observed_generation),
        phase: text(s.phase),
        conditions: fallible_list(s.conditions, condition)?,
        message: text(s.message),
        reason: text(s.reason),
        nominated_node_name: text(s.nominated_node_name),
        host_ip: text(s.host_ip),
        host_ips: None,
        pod_ip: text(s.pod_ip),
        pod_ips: None,
        start_time: time(s.start_time)?,
        init_container_statuses: fallible_list(s.init_container_statuses, container_status)?,
        container_statuses: fallible_list(s.container_statuses, container_status)?,
        qos_class: text(s.qos_class),
        ephemeral_container_statuses: fallible_list(s.ephemeral_container_statuses, container_status)?,
        resize: text(s.resize),
        resource_claim_statuses: list(s.resource_claim_statuses, |c| core::PodResourceClaimStatus {
            name: c.name.unwrap_or_default(),
            resource_claim_name: c.resource_claim_name,
        }),
    })
}

fn metadata(m: ObjectMeta) -> Result<meta::ObjectMeta, TranscodeError> {
    Ok(meta::ObjectMeta {
        name: text(m.name),
        generate_name: text(m.generate_name),
        namespace: text(m.namespace),
        self_link: text(m.self_link),
        uid: text(m.uid),
        resource_version: text(m.resource_version),
        generation: count(m.generation),
        creation_timestamp: time(m.creation_timestamp)?,
        deletion_timestamp: time(m.deletion_timestamp)?,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: map(m.labels),
        annotations: map(m.annotations),
        owner_references: list(m.owner_references, |o| meta::OwnerReference {
            api_version: o.api_version.unwrap_or_default(),
            kind: o.kind.unwrap_or_default(),
            name: o.name.unwrap_or_default(),
            uid: o.uid.unwrap_or_default(),
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        }),
        finalizers: map_list(m.finalizers),
        managed_fields: None,
    })
}

fn map_list(items: Vec<String>) -> Option<Vec<String>> {
    (!items.is_empty()).then_some(items)
}

impl Pod {
    /// The pod as the pod cache decodes its JSON (see the module).
    pub fn into_wire(self) -> Result<WirePod, TranscodeError> {
        Ok(WirePod(core::Pod {
            metadata: self.metadata.map(metadata).transpose()?.unwrap_or_default(),
            spec: self.spec.map(spec),
            status: self.status.map(status).transpose()?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::*;
    use crate::pod_cache::wire::WirePod;

    fn t(seconds: i64) -> Option<Time> {
        Some(Time { seconds: Some(seconds) })
    }

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    fn q(v: &str) -> Quantity {
        Quantity { string: s(v) }
    }

    fn key(name: &str) -> KeySelector {
        KeySelector { local_object_reference: Some(LocalObjectReference { name: s(name) }), key: s("k"), optional: Some(true) }
    }

    fn resources() -> ResourceRequirements {
        ResourceRequirements {
            limits: [("cpu".to_string(), q("500m"))].into(),
            requests: [("memory".to_string(), q("64Mi"))].into(),
            claims: vec![ResourceClaim { name: s("gpu"), request: s("one") }],
        }
    }

    fn state(n: i64) -> ContainerState {
        ContainerState {
            waiting: Some(ContainerStateWaiting { reason: s("CrashLoopBackOff"), message: s("back-off") }),
            running: Some(ContainerStateRunning { started_at: t(n) }),
            terminated: Some(ContainerStateTerminated {
                exit_code: Some(137),
                signal: Some(9),
                reason: s("OOMKilled"),
                message: s("killed"),
                started_at: t(n),
                finished_at: t(n + 1),
                container_id: s("containerd://abc"),
            }),
        }
    }

    fn container_status(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: s(name),
            state: Some(state(1_764_000_000)),
            last_state: Some(ContainerState::default()),
            ready: Some(true),
            restart_count: Some(3),
            image: s("app:v2"),
            image_id: s("app@sha256:c3c5"),
            container_id: s("containerd://333f"),
            started: Some(true),
            allocated_resources: [("cpu".to_string(), q("100m"))].into(),
            resources: Some(resources()),
            allocated_resources_status: vec![ResourceStatus {
                name: s("claim:gpu"),
                resources: vec![ResourceHealth { resource_id: s("gpu-0"), health: s("Healthy") }],
            }],
            stop_signal: s("SIGTERM"),
        }
    }

    fn container(name: &str) -> Container {
        let var = |name: &str, value_from: Option<EnvVarSource>| EnvVar { name: s(name), value: s("10"), value_from };
        Container {
            name: s(name),
            image: s("registry.local/app:1"),
            env: vec![
                var("UNREAD", None),
                var(
                    "KRUISE_CONTAINER_PRIORITY",
                    Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector { api_version: s("v1"), field_path: s("metadata.name") }),
                        resource_field_ref: Some(ResourceFieldSelector {
                            container_name: s("main"),
                            resource: s("limits.cpu"),
                            divisor: Some(q("1m")),
                        }),
                        config_map_key_ref: Some(key("barrier")),
                        secret_key_ref: Some(key("secret")),
                    }),
                ),
                var("KRUISE_CONTAINER_BARRIER", None),
                EnvVar {
                    name: s("VER"),
                    value: None,
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector { api_version: s("v1"), field_path: s("metadata.labels['ver']") }),
                        ..Default::default()
                    }),
                },
            ],
            resources: Some(resources()),
            resize_policy: vec![ContainerResizePolicy { resource_name: s("cpu"), restart_policy: s("NotRequired") }],
            restart_policy: s("Always"),
        }
    }

    /// Every field set (struct literals without `..Default::default()`: a field added to a
    /// message must be added here).
    fn every_field() -> Pod {
        let meta = ObjectMeta {
            name: s("web-abcde"),
            generate_name: s("web-"),
            namespace: s("default"),
            self_link: s("/api/v1/namespaces/default/pods/web-abcde"),
            uid: s("afe506fc"),
            resource_version: s("42"),
            generation: Some(2),
            creation_timestamp: t(1_764_000_000),
            deletion_timestamp: t(1_764_000_100),
            deletion_grace_period_seconds: Some(30),
            labels: [("app".to_string(), "web".to_string())].into(),
            annotations: [("note".to_string(), String::new())].into(),
            owner_references: vec![OwnerReference {
                api_version: s("apps.kruise.io/v1alpha1"),
                kind: s("CloneSet"),
                name: s("web"),
                uid: s("6c4846ec"),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }],
            finalizers: vec!["example.com/hold".into()],
        };
        let spec = PodSpec {
            containers: vec![container("main"), Container { name: s("plain"), ..Default::default() }],
            init_containers: vec![container("sidecar")],
            node_name: s("node-1"),
            readiness_gates: vec![PodReadinessGate { condition_type: s("InPlaceUpdateReady") }],
        };
        let status = PodStatus {
            observed_generation: Some(2),
            phase: s("Running"),
            conditions: vec![PodCondition {
                r#type: s("Ready"),
                observed_generation: Some(2),
                status: s("True"),
                last_probe_time: t(1_764_000_001),
                last_transition_time: t(1_764_000_002),
                reason: s("r"),
                message: s("m"),
            }],
            message: s("a message"),
            reason: s("AReason"),
            nominated_node_name: s("node-2"),
            host_ip: s("127.1.0.11"),
            pod_ip: s("127.129.1.94"),
            start_time: t(1_764_000_003),
            init_container_statuses: vec![container_status("sidecar")],
            container_statuses: vec![container_status("main")],
            qos_class: s("Burstable"),
            ephemeral_container_statuses: vec![container_status("debug")],
            resize: s("InProgress"),
            resource_claim_statuses: vec![PodResourceClaimStatus { name: s("gpu"), resource_claim_name: s("gpu-claim") }],
        };
        Pod { metadata: Some(meta), spec: Some(spec), status: Some(status) }
    }

    /// The same shape with every value empty, zero or absent: what Go's JSON leaves out.
    fn every_field_empty() -> Pod {
        let empty = Some(String::new());
        let zero_time = Some(Time { seconds: None });
        let meta = ObjectMeta {
            name: empty.clone(),
            generate_name: empty.clone(),
            namespace: empty.clone(),
            self_link: empty.clone(),
            uid: empty.clone(),
            resource_version: empty.clone(),
            generation: Some(0),
            creation_timestamp: zero_time.clone(),
            deletion_timestamp: None,
            deletion_grace_period_seconds: Some(0),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            owner_references: vec![OwnerReference::default()],
            finalizers: Vec::new(),
        };
        let status_of_nothing = ContainerStatus {
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting::default()),
                running: Some(ContainerStateRunning { started_at: zero_time.clone() }),
                terminated: Some(ContainerStateTerminated { signal: Some(0), ..Default::default() }),
            }),
            container_id: empty.clone(),
            resources: Some(ResourceRequirements::default()),
            allocated_resources_status: vec![ResourceStatus::default()],
            ..Default::default()
        };
        let spec = PodSpec {
            containers: vec![Container {
                image: empty.clone(),
                env: vec![EnvVar { name: s("KRUISE_CONTAINER_PRIORITY"), value: empty.clone(), value_from: Some(EnvVarSource::default()) }],
                resources: Some(ResourceRequirements { claims: vec![ResourceClaim::default()], ..Default::default() }),
                resize_policy: vec![ContainerResizePolicy::default()],
                restart_policy: empty.clone(),
                ..Default::default()
            }],
            init_containers: Vec::new(),
            node_name: empty.clone(),
            readiness_gates: vec![PodReadinessGate::default()],
        };
        let status = PodStatus {
            observed_generation: Some(0),
            phase: empty.clone(),
            conditions: vec![PodCondition {
                last_probe_time: zero_time,
                reason: empty.clone(),
                observed_generation: Some(0),
                ..Default::default()
            }],
            message: empty.clone(),
            container_statuses: vec![status_of_nothing, ContainerStatus::default()],
            ..Default::default()
        };
        Pod { metadata: Some(meta), spec: Some(spec), status: Some(status) }
    }

    /// `pod` decoded as the apiserver's JSON of it, written out by hand.
    fn from_json(pod: serde_json::Value) -> WirePod {
        serde_json::from_value(pod).unwrap()
    }

    /// An empty string, a zero count, Go's zero time and an empty list or map are what Go's JSON
    /// leaves out (`omitempty`); a pointer to a zero (`deletionGracePeriodSeconds`, a
    /// `restartPolicy` of `""`) and a field without `omitempty` (names, a condition's type, a
    /// status's image) stay.
    #[test]
    fn empty_values_decode_as_gos_json_leaves_them() {
        let container_status = serde_json::json!({"image": "", "imageID": "", "name": "", "ready": false, "restartCount": 0});
        let mut full_status = container_status.clone();
        full_status["allocatedResourcesStatus"] = serde_json::json!([{"name": ""}]);
        full_status["resources"] = serde_json::json!({});
        full_status["state"] = serde_json::json!({"running": {}, "terminated": {"exitCode": 0}, "waiting": {}});
        let want = from_json(serde_json::json!({
            "metadata": {"deletionGracePeriodSeconds": 0, "ownerReferences": [{"apiVersion": "", "kind": "", "name": "", "uid": ""}]},
            "spec": {
                "containers": [{
                    "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "valueFrom": {}}],
                    "name": "",
                    "resizePolicy": [{"resourceName": "", "restartPolicy": ""}],
                    "resources": {"claims": [{"name": ""}]},
                    "restartPolicy": ""
                }],
                "readinessGates": [{"conditionType": ""}]
            },
            "status": {"conditions": [{"status": "", "type": ""}], "containerStatuses": [full_status, container_status]}
        }));
        assert_eq!(every_field_empty().into_wire().unwrap(), want);
        assert_eq!(Pod::default().into_wire().unwrap(), from_json(serde_json::json!({"metadata": {}})));
        let empty_meta = Pod { metadata: Some(ObjectMeta::default()), ..Default::default() };
        assert_eq!(empty_meta.into_wire().unwrap(), from_json(serde_json::json!({"metadata": {}})));
    }

    /// A set value is kept; every field against k8s-openapi's decoding is `tests/pod_decoders.rs`.
    #[test]
    fn a_pod_keeps_what_the_controller_reads() {
        let WirePod(full) = every_field().into_wire().unwrap();
        let main = &full.spec.as_ref().unwrap().containers[0];
        let env: Vec<_> = main.env.iter().flatten().map(|e| e.name.as_str()).collect();
        assert_eq!(env, ["KRUISE_CONTAINER_PRIORITY", "KRUISE_CONTAINER_BARRIER", "VER"]);
        assert_eq!(full.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].restart_count, 3);
        assert_eq!(full.metadata.deletion_timestamp.unwrap().0.as_second(), 1_764_000_100);
        let condition = &full.status.unwrap().conditions.unwrap()[0];
        assert_eq!((condition.reason.as_deref(), condition.observed_generation), (Some("r"), Some(2)));
    }
}
