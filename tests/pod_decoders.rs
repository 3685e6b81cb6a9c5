//! The pod cache's two decoders against complete generated types: a pod with every field the
//! controller reads set (and many it does not), written once as JSON, is decoded
//! - as k8s-openapi's complete `Pod`, then stripped by `keep_read_fields` (what the core reads);
//! - by the watch's JSON decoder (`WirePod`);
//! - encoded in protobuf by k8s-pb's messages (generated from Kubernetes' `generated.proto`, with
//!   every field), by the watch's protobuf decoder, whose messages declare only the fields read.
//!
//! The three must be equal: a field number, a type or a name one decoder gets wrong, or a field
//! the policy keeps that a decoder misses, fails here without a cluster. The conversion to k8s-pb
//! below names every field of each message the cache reads (no `..Default::default()`), so a
//! field k8s-pb adds breaks the build until it is given a value here.

use std::collections::BTreeMap;

use cloneset_operator::pod_cache::fields::keep_read_fields;
use cloneset_operator::pod_cache::protobuf;
use cloneset_operator::pod_cache::wire::WirePod;
use k8s_openapi::api::core::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::api::resource::Quantity as PbQuantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
use prost::Message as _;
use serde_json::{Value, json};

fn time(t: &Option<meta::Time>) -> Option<pbmeta::Time> {
    t.as_ref().map(|t| pbmeta::Time { seconds: Some(t.0.as_second()), nanos: Some(0) })
}

fn quantities(q: &Option<BTreeMap<String, Quantity>>) -> BTreeMap<String, PbQuantity> {
    q.iter().flatten().map(|(k, v)| (k.clone(), PbQuantity { string: Some(v.0.clone()) })).collect()
}

fn resources(r: &api::ResourceRequirements) -> pb::ResourceRequirements {
    pb::ResourceRequirements {
        limits: quantities(&r.limits),
        requests: quantities(&r.requests),
        claims: r.claims.iter().flatten().map(|c| pb::ResourceClaim { name: Some(c.name.clone()), request: c.request.clone() }).collect(),
    }
}

fn metadata(m: &meta::ObjectMeta) -> pbmeta::ObjectMeta {
    pbmeta::ObjectMeta {
        name: m.name.clone(),
        generate_name: m.generate_name.clone(),
        namespace: m.namespace.clone(),
        self_link: m.self_link.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        generation: m.generation,
        creation_timestamp: time(&m.creation_timestamp),
        deletion_timestamp: time(&m.deletion_timestamp),
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        owner_references: m
            .owner_references
            .iter()
            .flatten()
            .map(|o| pbmeta::OwnerReference {
                api_version: Some(o.api_version.clone()),
                kind: Some(o.kind.clone()),
                name: Some(o.name.clone()),
                uid: Some(o.uid.clone()),
                controller: o.controller,
                block_owner_deletion: o.block_owner_deletion,
            })
            .collect(),
        finalizers: m.finalizers.clone().unwrap_or_default(),
        managed_fields: m
            .managed_fields
            .iter()
            .flatten()
            .map(|f| pbmeta::ManagedFieldsEntry {
                manager: f.manager.clone(),
                operation: f.operation.clone(),
                api_version: f.api_version.clone(),
                time: time(&f.time),
                fields_type: f.fields_type.clone(),
                fields_v1: f.fields_v1.as_ref().map(|v| pbmeta::FieldsV1 { raw: Some(v.0.to_string().into_bytes()) }),
                subresource: f.subresource.clone(),
            })
            .collect(),
    }
}

fn env_var(e: &api::EnvVar) -> pb::EnvVar {
    let source = e.value_from.as_ref().map(|s| pb::EnvVarSource {
        field_ref: s
            .field_ref
            .as_ref()
            .map(|f| pb::ObjectFieldSelector { api_version: f.api_version.clone(), field_path: Some(f.field_path.clone()) }),
        resource_field_ref: s.resource_field_ref.as_ref().map(|r| pb::ResourceFieldSelector {
            container_name: r.container_name.clone(),
            resource: Some(r.resource.clone()),
            divisor: r.divisor.as_ref().map(|d| PbQuantity { string: Some(d.0.clone()) }),
        }),
        config_map_key_ref: s.config_map_key_ref.as_ref().map(|k| pb::ConfigMapKeySelector {
            local_object_reference: Some(pb::LocalObjectReference { name: Some(k.name.clone()) }),
            key: Some(k.key.clone()),
            optional: k.optional,
        }),
        secret_key_ref: s.secret_key_ref.as_ref().map(|k| pb::SecretKeySelector {
            local_object_reference: Some(pb::LocalObjectReference { name: Some(k.name.clone()) }),
            key: Some(k.key.clone()),
            optional: k.optional,
        }),
        file_key_ref: None,
    });
    pb::EnvVar { name: Some(e.name.clone()), value: e.value.clone(), value_from: source }
}

/// Every field of a container; those the controller never reads get fixed values (JSON's are in
/// the pod below), so the protobuf carries them for the decoder to skip.
fn container(c: &api::Container) -> pb::Container {
    pb::Container {
        name: Some(c.name.clone()),
        image: c.image.clone(),
        command: c.command.clone().unwrap_or_default(),
        args: c.args.clone().unwrap_or_default(),
        working_dir: c.working_dir.clone(),
        ports: vec![pb::ContainerPort { container_port: Some(8080), protocol: Some("TCP".into()), ..Default::default() }],
        env_from: vec![pb::EnvFromSource {
            config_map_ref: Some(pb::ConfigMapEnvSource {
                local_object_reference: Some(pb::LocalObjectReference { name: Some("settings".into()) }),
                optional: None,
            }),
            ..Default::default()
        }],
        env: c.env.iter().flatten().map(env_var).collect(),
        resources: c.resources.as_ref().map(resources),
        resize_policy: c
            .resize_policy
            .iter()
            .flatten()
            .map(|p| pb::ContainerResizePolicy {
                resource_name: Some(p.resource_name.clone()),
                restart_policy: Some(p.restart_policy.clone()),
            })
            .collect(),
        restart_policy: c.restart_policy.clone(),
        restart_policy_rules: vec![pb::ContainerRestartRule { action: Some("Restart".into()), ..Default::default() }],
        volume_mounts: vec![pb::VolumeMount { name: Some("data".into()), mount_path: Some("/data".into()), ..Default::default() }],
        volume_devices: vec![pb::VolumeDevice { name: Some("raw".into()), device_path: Some("/dev/raw".into()) }],
        liveness_probe: Some(pb::Probe { period_seconds: Some(10), ..Default::default() }),
        readiness_probe: Some(pb::Probe { failure_threshold: Some(3), ..Default::default() }),
        startup_probe: Some(pb::Probe { initial_delay_seconds: Some(1), ..Default::default() }),
        lifecycle: Some(pb::Lifecycle { stop_signal: Some("SIGTERM".into()), ..Default::default() }),
        termination_message_path: c.termination_message_path.clone(),
        termination_message_policy: c.termination_message_policy.clone(),
        image_pull_policy: c.image_pull_policy.clone(),
        security_context: Some(pb::SecurityContext { run_as_user: Some(1000), ..Default::default() }),
        stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(true),
    }
}

fn state(s: &api::ContainerState) -> pb::ContainerState {
    pb::ContainerState {
        waiting: s.waiting.as_ref().map(|w| pb::ContainerStateWaiting { reason: w.reason.clone(), message: w.message.clone() }),
        running: s.running.as_ref().map(|r| pb::ContainerStateRunning { started_at: time(&r.started_at) }),
        terminated: s.terminated.as_ref().map(|t| pb::ContainerStateTerminated {
            exit_code: Some(t.exit_code),
            signal: t.signal,
            reason: t.reason.clone(),
            message: t.message.clone(),
            started_at: time(&t.started_at),
            finished_at: time(&t.finished_at),
            container_id: t.container_id.clone(),
        }),
    }
}

fn container_status(s: &api::ContainerStatus) -> pb::ContainerStatus {
    pb::ContainerStatus {
        name: Some(s.name.clone()),
        state: s.state.as_ref().map(state),
        last_state: s.last_state.as_ref().map(state),
        ready: Some(s.ready),
        restart_count: Some(s.restart_count),
        image: Some(s.image.clone()),
        image_id: Some(s.image_id.clone()),
        container_id: s.container_id.clone(),
        started: s.started,
        allocated_resources: quantities(&s.allocated_resources),
        resources: s.resources.as_ref().map(resources),
        volume_mounts: s
            .volume_mounts
            .iter()
            .flatten()
            .map(|v| pb::VolumeMountStatus {
                name: Some(v.name.clone()),
                mount_path: Some(v.mount_path.clone()),
                read_only: v.read_only,
                recursive_read_only: v.recursive_read_only.clone(),
            })
            .collect(),
        user: s.user.as_ref().map(|u| pb::ContainerUser {
            linux: u.linux.as_ref().map(|l| pb::LinuxContainerUser {
                uid: Some(l.uid),
                gid: Some(l.gid),
                supplemental_groups: l.supplemental_groups.clone().unwrap_or_default(),
            }),
        }),
        allocated_resources_status: s
            .allocated_resources_status
            .iter()
            .flatten()
            .map(|r| pb::ResourceStatus {
                name: Some(r.name.clone()),
                resources: r
                    .resources
                    .iter()
                    .flatten()
                    .map(|h| pb::ResourceHealth { resource_id: Some(h.resource_id.clone()), health: h.health.clone() })
                    .collect(),
            })
            .collect(),
        stop_signal: s.stop_signal.clone(),
    }
}

fn status(s: &api::PodStatus) -> pb::PodStatus {
    pb::PodStatus {
        observed_generation: s.observed_generation,
        phase: s.phase.clone(),
        conditions: s
            .conditions
            .iter()
            .flatten()
            .map(|c| pb::PodCondition {
                r#type: Some(c.type_.clone()),
                observed_generation: c.observed_generation,
                status: Some(c.status.clone()),
                last_probe_time: time(&c.last_probe_time),
                last_transition_time: time(&c.last_transition_time),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
        message: s.message.clone(),
        reason: s.reason.clone(),
        nominated_node_name: s.nominated_node_name.clone(),
        host_ip: s.host_ip.clone(),
        host_ips: s.host_ips.iter().flatten().map(|i| pb::HostIp { ip: Some(i.ip.clone()) }).collect(),
        pod_ip: s.pod_ip.clone(),
        pod_ips: s.pod_ips.iter().flatten().map(|i| pb::PodIp { ip: Some(i.ip.clone()) }).collect(),
        start_time: time(&s.start_time),
        init_container_statuses: s.init_container_statuses.iter().flatten().map(container_status).collect(),
        container_statuses: s.container_statuses.iter().flatten().map(container_status).collect(),
        qos_class: s.qos_class.clone(),
        ephemeral_container_statuses: s.ephemeral_container_statuses.iter().flatten().map(container_status).collect(),
        resize: s.resize.clone(),
        resource_claim_statuses: s
            .resource_claim_statuses
            .iter()
            .flatten()
            .map(|c| pb::PodResourceClaimStatus { name: Some(c.name.clone()), resource_claim_name: c.resource_claim_name.clone() })
            .collect(),
        // Newer than the k8s-openapi the operator builds with: unread, so skipped.
        extended_resource_claim_status: Some(pb::PodExtendedResourceClaimStatus {
            resource_claim_name: Some("extended".into()),
            ..Default::default()
        }),
        allocated_resources: [("cpu".to_string(), PbQuantity { string: Some("1".into()) })].into(),
        resources: Some(pb::ResourceRequirements {
            limits: [("cpu".to_string(), PbQuantity { string: Some("2".into()) })].into(),
            ..Default::default()
        }),
    }
}

fn spec(s: &api::PodSpec) -> pb::PodSpec {
    pb::PodSpec {
        containers: s.containers.iter().map(container).collect(),
        init_containers: s.init_containers.iter().flatten().map(container).collect(),
        readiness_gates: s
            .readiness_gates
            .iter()
            .flatten()
            .map(|g| pb::PodReadinessGate { condition_type: Some(g.condition_type.clone()) })
            .collect(),
        node_name: s.node_name.clone(),
        // Some of what is never read.
        volumes: vec![pb::Volume { name: Some("data".into()), ..Default::default() }],
        tolerations: vec![pb::Toleration { key: Some("example.com/t".into()), operator: Some("Exists".into()), ..Default::default() }],
        node_selector: [("zone".to_string(), "a".to_string())].into(),
        service_account_name: Some("default".into()),
        hostname: Some("web".into()),
        priority: Some(7),
        termination_grace_period_seconds: Some(30),
        scheduling_gates: vec![pb::PodSchedulingGate { name: Some("example.com/gate".into()) }],
        ..Default::default()
    }
}

fn to_pb(pod: &api::Pod) -> pb::Pod {
    pb::Pod { metadata: Some(metadata(&pod.metadata)), spec: pod.spec.as_ref().map(spec), status: pod.status.as_ref().map(status) }
}

/// A pod with every field the cache keeps set to a value other than its default, in several
/// shapes (env read and unread, every env source, each container state), and some it drops.
fn every_read_field() -> Value {
    let t = |s: u32| format!("2026-11-25T16:56:{s:02}Z");
    let container = |name: &str, image: &str| {
        json!({
            "name": name, "image": image, "imagePullPolicy": "Always",
            "command": ["/app"], "args": ["--serve"], "workingDir": "/srv",
            "env": [
                {"name": "MODE", "value": "prod"},
                {"name": "KRUISE_CONTAINER_PRIORITY", "value": "10"},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "KRUISE_CONTAINER_BARRIER", "valueFrom": {"configMapKeyRef": {"name": "barrier", "key": "p_10", "optional": true}}},
                {"name": "KRUISE_CONTAINER_BARRIER", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": false}}},
                {"name": "KRUISE_CONTAINER_PRIORITY", "valueFrom": {"resourceFieldRef": {"containerName": name, "resource": "limits.cpu", "divisor": "1m"}}},
                {"name": "VER", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels['ver']"}}},
                {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}},
            ],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"},
                          "claims": [{"name": "gpu", "request": "one"}]},
            "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}, {"resourceName": "memory", "restartPolicy": "RestartContainer"}],
            "restartPolicy": "Always",
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        })
    };
    let statuses = |name: &str, running: Value| {
        json!({
            "name": name, "image": "app:v2", "imageID": format!("app@sha256:{name}"), "containerID": format!("containerd://{name}-2"),
            "ready": true, "started": true, "restartCount": 2, "stopSignal": "SIGTERM",
            "state": running,
            "lastState": {"terminated": {"exitCode": 137, "signal": 9, "reason": "Error", "message": "killed",
                                         "startedAt": t(1), "finishedAt": t(2), "containerID": format!("containerd://{name}-1")}},
            "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "128Mi"}},
            "allocatedResources": {"cpu": "100m", "memory": "64Mi"},
            "allocatedResourcesStatus": [{"name": "claim:gpu", "resources": [{"resourceID": "gpu-0", "health": "Healthy"}]}],
            "user": {"linux": {"uid": 1000, "gid": 1000, "supplementalGroups": [4]}},
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true, "recursiveReadOnly": "Disabled"}],
        })
    };
    json!({
        "metadata": {
            "name": "web-abcde", "generateName": "web-", "namespace": "default", "selfLink": "/api/v1/namespaces/default/pods/web-abcde",
            "uid": "afe506fc", "resourceVersion": "42", "generation": 2,
            "creationTimestamp": t(0), "deletionTimestamp": t(9), "deletionGracePeriodSeconds": 30,
            "labels": {"app": "web", "ver": "1"}, "annotations": {"note": "", "apps.kruise.io/inplace-update-state": "{}"},
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web", "uid": "6c4846ec",
                                 "controller": true, "blockOwnerDeletion": true}],
            "finalizers": ["example.com/keep"],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "time": t(0),
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}, "subresource": "status"}],
        },
        "spec": {
            "containers": [container("main", "app:v1"), {"name": "plain", "env": [{"name": "ONLY", "value": "unread"}]}],
            "initContainers": [container("sidecar", "side:v1")],
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}, {"conditionType": "example.com/ready"}],
            "nodeName": "node-1",
        },
        "status": {
            "phase": "Running", "message": "m", "reason": "r", "resize": "InProgress", "nominatedNodeName": "node-2",
            "observedGeneration": 3, "qosClass": "Burstable", "startTime": t(3),
            "hostIP": "127.1.0.11", "hostIPs": [{"ip": "127.1.0.11"}], "podIP": "127.129.1.94", "podIPs": [{"ip": "127.129.1.94"}],
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "main is waiting",
                 "lastTransitionTime": t(4), "lastProbeTime": t(5), "observedGeneration": 3},
                {"type": "InPlaceUpdateReady", "status": "True", "lastTransitionTime": t(6)},
            ],
            "containerStatuses": [
                statuses("main", json!({"running": {"startedAt": t(7)}})),
                statuses("plain", json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}})),
            ],
            "initContainerStatuses": [statuses("sidecar", json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": t(1), "finishedAt": t(8)}}))],
            "ephemeralContainerStatuses": [statuses("debug", json!({"running": {"startedAt": t(8)}}))],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
        },
    })
}

/// The pod the three ways: what the core reads of it (complete type, stripped), and what each
/// decoder makes of it.
fn three_ways(pod: &Value) -> (api::Pod, api::Pod, api::Pod) {
    let complete: api::Pod = serde_json::from_value(pod.clone()).unwrap();
    let mut read = complete.clone();
    keep_read_fields(&mut read);
    let WirePod(from_json) = serde_json::from_value(pod.clone()).unwrap();
    let bytes = to_pb(&complete).encode_to_vec();
    let WirePod(from_protobuf) = protobuf::Pod::decode(&bytes[..]).unwrap().into_wire().unwrap();
    (read, from_json, from_protobuf)
}

#[test]
fn both_decoders_give_what_the_core_reads_of_a_complete_pod() {
    let (read, from_json, from_protobuf) = three_ways(&every_read_field());
    let read = serde_json::to_value(read).unwrap();
    for (decoder, pod) in [("JSON", from_json), ("protobuf", from_protobuf)] {
        let mut differences = Vec::new();
        differ(&read, &serde_json::to_value(pod).unwrap(), String::new(), &mut differences);
        assert!(differences.is_empty(), "the {decoder} decoder differs from what the core reads:\n{}", differences.join("\n"));
    }
}

/// Where two JSON values differ: a path and both sides, a line each.
fn differ(want: &Value, got: &Value, path: String, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for key in w.keys().chain(g.keys().filter(|k| !w.contains_key(*k))) {
                let none = Value::Null;
                differ(w.get(key).unwrap_or(&none), g.get(key).unwrap_or(&none), format!("{path}.{key}"), out);
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (w, g)) in w.iter().zip(g).enumerate() {
                differ(w, g, format!("{path}[{i}]"), out);
            }
        }
        (w, g) if w != g => out.push(format!("{path}: want {w}, got {g}")),
        _ => {}
    }
}

/// The pod above sets every field of the parts the policy keeps whole (metadata, status), so a
/// decoder that misses one fails the test above. The patterns name every field (no `..`): a field
/// k8s-openapi adds breaks the build here until the pod sets it.
#[test]
fn the_pod_sets_every_field_that_is_kept() {
    let (read, ..) = three_ways(&every_read_field());
    let meta::ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields,
        name,
        namespace,
        owner_references,
        resource_version,
        self_link,
        uid,
    } = &read.metadata;
    assert!(managed_fields.is_none(), "the one part of metadata never kept");
    let set = [
        annotations.is_some(),
        creation_timestamp.is_some(),
        deletion_grace_period_seconds.is_some(),
        deletion_timestamp.is_some(),
        finalizers.is_some(),
        generate_name.is_some(),
        generation.is_some(),
        labels.is_some(),
        name.is_some(),
        namespace.is_some(),
        owner_references.is_some(),
        resource_version.is_some(),
        self_link.is_some(),
        uid.is_some(),
    ];
    assert!(set.iter().all(|s| *s), "metadata: {set:?}");
    let Some(meta::OwnerReference { api_version: _, kind: _, name: _, uid: _, controller: Some(_), block_owner_deletion: Some(_) }) =
        owner_references.iter().flatten().next()
    else {
        panic!("an owner reference with every field");
    };

    let api::PodStatus {
        conditions,
        container_statuses,
        ephemeral_container_statuses,
        host_ip,
        host_ips,
        init_container_statuses,
        message,
        nominated_node_name,
        observed_generation,
        phase,
        pod_ip,
        pod_ips,
        qos_class,
        reason,
        resize,
        resource_claim_statuses,
        start_time,
    } = read.status.as_ref().unwrap();
    assert!(host_ips.is_none() && pod_ips.is_none(), "the IP lists are never kept");
    let set = [
        conditions.is_some(),
        container_statuses.is_some(),
        ephemeral_container_statuses.is_some(),
        host_ip.is_some(),
        init_container_statuses.is_some(),
        message.is_some(),
        nominated_node_name.is_some(),
        observed_generation.is_some(),
        phase.is_some(),
        pod_ip.is_some(),
        qos_class.is_some(),
        reason.is_some(),
        resize.is_some(),
        resource_claim_statuses.is_some(),
        start_time.is_some(),
    ];
    assert!(set.iter().all(|s| *s), "status: {set:?}");
    assert!(conditions.iter().flatten().any(|c| {
        let api::PodCondition { last_probe_time, last_transition_time, message, observed_generation, reason, status: _, type_: _ } = c;
        last_probe_time.is_some()
            && last_transition_time.is_some()
            && message.is_some()
            && observed_generation.is_some()
            && reason.is_some()
    }));
    for s in [container_statuses, init_container_statuses, ephemeral_container_statuses].into_iter().flatten().flatten() {
        let api::ContainerStatus {
            allocated_resources,
            allocated_resources_status,
            container_id,
            image,
            image_id,
            last_state,
            name,
            ready: _,
            resources,
            restart_count,
            started,
            state,
            stop_signal,
            user,
            volume_mounts,
        } = s;
        assert!(user.is_none() && volume_mounts.is_none(), "a container's user and mounts are never kept");
        let set = [
            allocated_resources.is_some(),
            allocated_resources_status.is_some(),
            container_id.is_some(),
            !image.is_empty(),
            !image_id.is_empty(),
            last_state.is_some(),
            !name.is_empty(),
            resources.is_some(),
            *restart_count > 0,
            started.is_some(),
            state.is_some(),
            stop_signal.is_some(),
        ];
        assert!(set.iter().all(|s| *s), "{name}: {set:?}");
        let Some(api::ContainerStateTerminated {
            container_id: Some(_),
            exit_code: _,
            finished_at: Some(_),
            message: Some(_),
            reason: Some(_),
            signal: Some(_),
            started_at: Some(_),
        }) = last_state.as_ref().and_then(|l| l.terminated.as_ref())
        else {
            panic!("{name}: a last state with every field");
        };
    }
    let states: Vec<_> =
        container_statuses.iter().flatten().chain(init_container_statuses.iter().flatten()).filter_map(|s| s.state.as_ref()).collect();
    assert!(states.iter().any(|s| s.running.is_some()) && states.iter().any(|s| s.terminated.is_some()));
    assert!(states.iter().any(|s| s.waiting.as_ref().is_some_and(|w| w.message.is_some() && w.reason.is_some())));
}
