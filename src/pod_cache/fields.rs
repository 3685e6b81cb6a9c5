//! Which fields of a pod the controller reads: the policy the cache's decoders
//! ([`super::wire`], [`super::protobuf`]) and its compact layout ([`super::compact`]) follow,
//! written here once.

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec};

use crate::api::keys;
use crate::core::env_metadata;

/// Whether the controller reads a container's env variable `name` with this literal `value` and
/// `fieldRef.fieldPath`: launch priority, and variables read from the pod's labels or annotations
/// (kruise-daemon's env hash).
pub(crate) fn is_read_env(name: &str, value: Option<&str>, field_path: Option<&str>) -> bool {
    name == keys::CONTAINER_PRIORITY_ENV || name == keys::CONTAINER_BARRIER_ENV || env_metadata::is_metadata_env(name, value, field_path)
}

/// [`is_read_env`] of a decoded variable.
pub(crate) fn is_read_env_var(e: &EnvVar) -> bool {
    let path = e.value_from.as_ref().and_then(|f| f.field_ref.as_ref()).map(|f| f.field_path.as_str());
    is_read_env(&e.name, e.value.as_deref(), path)
}

/// Drops what the controller never reads from a pod. What it reads (checked in `controller`
/// and `core`): all of metadata but managedFields; `spec.containers[].name`, `.image` and
/// `.resources` (in-place updates and vertical scaling) and `.resizePolicy` (whether a resize
/// restarts the container decides InPlaceUpdateReady), the `KRUISE_CONTAINER_PRIORITY` and
/// `KRUISE_CONTAINER_BARRIER` env variables (launch priority) and those read from the pod's labels
/// or annotations (kruise-daemon's env hash), `spec.initContainers` likewise
/// and their `restartPolicy` (sidecars: the update order's restart-count tie-break),
/// `spec.readinessGates`, `spec.nodeName`; and `status` but the pod's IP lists and the
/// containers' volume mounts and user. Everything else of the spec (volumes, tolerations,
/// affinity, the rest of env, mounts, probes, commands, ports) is never read. The pod watch
/// decodes only what is kept here ([`WirePod`](super::wire::WirePod), and from protobuf
/// [`super::protobuf`]): a field kept here must be decoded there too. `tests/pod_decoders.rs`
/// checks both decoders against this function on a pod with every kept field set, encoded in
/// protobuf by Kubernetes' complete generated messages.
pub fn keep_read_fields(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    if let Some(spec) = pod.spec.take() {
        let container = |c: Container| {
            let env: Vec<EnvVar> = c.env.into_iter().flatten().filter(is_read_env_var).collect();
            Container {
                name: c.name,
                image: c.image,
                resources: c.resources,
                resize_policy: c.resize_policy,
                restart_policy: c.restart_policy,
                env: (!env.is_empty()).then_some(env),
                ..Default::default()
            }
        };
        pod.spec = Some(PodSpec {
            containers: spec.containers.into_iter().map(container).collect(),
            init_containers: spec.init_containers.map(|cs| cs.into_iter().map(container).collect()),
            readiness_gates: spec.readiness_gates,
            node_name: spec.node_name,
            ..Default::default()
        });
    }
    if let Some(status) = pod.status.as_mut() {
        status.host_ips = None;
        status.pod_ips = None;
        for s in [&mut status.container_statuses, &mut status.init_container_statuses, &mut status.ephemeral_container_statuses]
            .into_iter()
            .flatten()
            .flatten()
        {
            s.volume_mounts = None;
            s.user = None;
        }
    }
}
