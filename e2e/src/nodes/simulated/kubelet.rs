//! The I/O part: the controller loop that writes what `status.rs` decides, the nodes and their
//! heartbeats, and the provisioning of volumes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;

use super::*;

struct Ctx {
    client: Client,
    cfg: SimConfig,
    nodes: HashMap<String, usize>,
    next_ip: Mutex<HashMap<usize, u32>>,
    memory: Mutex<RuntimeMemory>,
}

impl Ctx {
    fn allocate_pod_ip(&self, node: usize) -> String {
        let mut next = self.next_ip.lock().expect("ip lock");
        let n = next.entry(node).or_insert(0);
        let ip = crate::addresses::pod_ip(node, *n);
        *n += 1;
        ip.to_string()
    }
}

#[derive(Debug, thiserror::Error)]
enum SimError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

/// Registers the nodes, then serves until the process ends.
pub async fn run(client: Client, cfg: SimConfig) -> anyhow::Result<()> {
    register_nodes(&client, &cfg).await?;
    start_heartbeats(&client, &cfg);
    tokio::spawn(provision_volumes(client.clone()));

    let nodes = cfg.node_names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
    let ctx =
        Arc::new(Ctx { client: client.clone(), cfg: cfg.clone(), nodes, next_ip: Mutex::new(HashMap::new()), memory: Default::default() });
    let pods: Api<Pod> = Api::all(client);
    // A kubelet's pod cache holds whole pods; ours drops managedFields, which nothing here reads,
    // so 100,000 simulated pods leave more of the machine to the control plane under test.
    let (store, writer) = reflector::store();
    // No backoff here: the controller backs off its trigger stream itself, as with Controller::new.
    let bound_pods = watcher::watcher(pods, watcher::Config::default().fields("spec.nodeName!="))
        .modify(|pod| pod.metadata.managed_fields = None)
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(bound_pods, store)
        .with_config(kube::runtime::controller::Config::default().concurrency(cfg.workers))
        .run(reconcile_pod, on_error, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "pod reconcile failed");
            }
        })
        .await;
    Ok(())
}

async fn reconcile_pod(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).and_then(|n| ctx.nodes.get(n)).copied() else {
        return Ok(Action::await_change());
    };
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let now = Timestamp::now();

    if let Some(due) = deletion_due(&pod, ctx.cfg.max_grace_period) {
        if pod.metadata.deletion_grace_period_seconds == Some(0) {
            return Ok(Action::await_change()); // already force-deleted; only finalizers hold it
        }
        if now < due {
            return Ok(Action::requeue(duration_between(now, due)));
        }
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        ctx.memory.lock().expect("runtime memory lock").forget_pod(pod.metadata.uid.as_deref().unwrap_or_default());
        return Ok(Action::await_change());
    }

    // A kubelet never takes a pod out of a terminal phase.
    if is_terminal(&pod) {
        return Ok(Action::await_change());
    }

    let host_ip = crate::addresses::node_ip(node).to_string();
    let fresh_ip = if pod.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some() { String::new() } else { ctx.allocate_pod_ip(node) };
    let slot = NodeSlot { host_ip: &host_ip, fresh_pod_ip: &fresh_ip };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    // Decided on this pod's part of the runtime memory, kept only once the decision needs no
    // write or its write is made: a decision dropped unwritten must not leave a restart counted.
    let decide = |view: &Pod| {
        let mut part = ctx.memory.lock().expect("runtime memory lock").of_pod(&uid);
        let plan = desired_status(view, &ctx.cfg, &slot, &mut part, now);
        (plan, part)
    };
    let (mut plan, mut part) = decide(&pod);
    if plan.status.is_some() {
        // As the real kubelet's status manager does (syncPod): read the pod, then patch its
        // status with the UID as the only precondition. Its status is decided again from the
        // read when the watch's view was behind, so no write is computed from a stale view and
        // none is refused as a conflict (a resourceVersion precondition had a fifth of them
        // answered 409 on a loaded apiserver, each a whole patch's work for nothing).
        let fresh = match api.get(&pod.name_any()).await {
            Ok(fresh) => fresh,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        };
        if fresh.metadata.uid != pod.metadata.uid || fresh.metadata.deletion_timestamp.is_some() || is_terminal(&fresh) {
            return Ok(Action::await_change()); // recreated, deleting or ended: the watch brings it
        }
        if fresh.resource_version() != pod.resource_version() {
            (plan, part) = decide(&fresh);
        }
        if let Some(status) = plan.status.take() {
            let patch = json!({ "metadata": { "uid": uid }, "status": status_patch(&fresh, status)? });
            match api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(patch)).await {
                Ok(_) => {}
                // Gone, or another pod of the name (its UID differs): the watch brings that.
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => return Ok(Action::await_change()),
                Err(e) => return Err(e.into()),
            }
        }
    }
    ctx.memory.lock().expect("runtime memory lock").keep_pod(&uid, part);
    Ok(plan.recheck_after.map_or_else(Action::await_change, Action::requeue))
}

/// A pod a kubelet no longer runs: tests set a terminal phase to simulate an eviction.
fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Failed" | "Succeeded"))
}

/// The pod conditions the kubelet owns; the others (a readiness gate's, PodScheduled) belong to
/// other writers.
pub(super) const KUBELET_CONDITIONS: [&str; 4] = ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"];

/// `status` as a strategic merge patch onto `view`'s: `conditions` merge by type and only the
/// kubelet's own are sent, so a condition another writer changed since `view` was read (a
/// readiness gate flipped by the operator) is never written back with its old value, as the
/// real kubelet's status manager leaves them alone; a resize condition `view` has and `status`
/// drops is deleted by name.
pub(super) fn status_patch(view: &Pod, mut status: PodStatus) -> Result<serde_json::Value, serde_json::Error> {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| KUBELET_CONDITIONS.contains(&c.type_.as_str()));
    }
    let mut status = with_cleared_condition_fields(serde_json::to_value(&status)?);
    let had: Vec<&str> = view.status.iter().flat_map(|s| s.conditions.iter().flatten()).map(|c| c.type_.as_str()).collect();
    for gone in RESIZE_CONDITIONS.iter().filter(|t| had.contains(t)) {
        status["conditions"].as_array_mut().into_iter().for_each(|l| l.push(json!({"type": gone, "$patch": "delete"})));
    }
    Ok(status)
}

/// The kubelet writes each of its conditions whole (its status patch is a diff, so a reason it no
/// longer sets is removed); in a strategic merge an absent field would keep another writer's.
fn with_cleared_condition_fields(mut status: serde_json::Value) -> serde_json::Value {
    for c in status.get_mut("conditions").and_then(|c| c.as_array_mut()).into_iter().flatten() {
        for field in ["reason", "message"] {
            if let Some(obj) = c.as_object_mut() {
                obj.entry(field).or_insert(serde_json::Value::Null);
            }
        }
    }
    status
}

fn on_error(_pod: Arc<Pod>, _err: &SimError, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(500))
}

async fn register_nodes(client: &Client, cfg: &SimConfig) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for (i, name) in cfg.node_names.iter().enumerate() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
                    NODE_LABEL: "true",
                },
            },
        }))?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        patch_node_status(&nodes, name, i, cfg).await?;
    }
    Ok(())
}

async fn patch_node_status(nodes: &Api<Node>, name: &str, index: usize, cfg: &SimConfig) -> anyhow::Result<()> {
    let now = Time(Timestamp::now());
    let cond = |type_: &str, status: &str, reason: &str, message: &str| json!({"type": type_, "status": status, "reason": reason, "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now});
    let resources = json!({"cpu": "64", "memory": "256Gi", "pods": cfg.pods_per_node.to_string(), "ephemeral-storage": "1Ti"});
    let status = json!({
        "status": {
            "conditions": [
                cond("Ready", "True", "KubeletReady", "simulated kubelet is posting ready status"),
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "simulated"),
            ],
            "addresses": [{"type": "InternalIP", "address": crate::addresses::node_ip(index).to_string()}, {"type": "Hostname", "address": name}],
            "capacity": resources,
            "allocatable": resources,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": hex_sha256(name)[..32].to_string(),
                "systemUUID": hex_sha256(name)[32..].to_string(),
                "bootID": "sim",
                "kernelVersion": "6.1.0-sim",
                "osImage": "Simulated Linux",
                "containerRuntimeVersion": "containerd://1.7.0-sim",
                "kubeletVersion": cfg.kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
    });
    nodes.patch_status(name, &PatchParams::default(), &Patch::Strategic(status)).await?;
    Ok(())
}

/// Renews each node's Lease every 10 s (as a kubelet does), and re-posts node status each minute
/// so a node marked Unknown while we were stopped comes back. Each node keeps its own clock, as
/// separate kubelets do, their starts spread over the period: renewed one after another, 128
/// nodes on a busy apiserver took 33 s a round, close to the Lease's 40 s.
fn start_heartbeats(client: &Client, cfg: &SimConfig) {
    let count = cfg.node_names.len().max(1) as u32;
    for (i, name) in cfg.node_names.iter().enumerate() {
        let offset = LEASE_RENEW_PERIOD * i as u32 / count;
        tokio::spawn(node_heartbeat(client.clone(), cfg.clone(), i, name.clone(), offset));
    }
}

const LEASE_RENEW_PERIOD: Duration = Duration::from_secs(10);

async fn node_heartbeat(client: Client, cfg: SimConfig, index: usize, name: String, offset: Duration) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    // The Node's UID for the Lease's owner reference, read once (a kubelet does not read its Node
    // to renew its Lease; at 128 nodes a read per renewal was 13 GETs a second), and read again
    // after a failed renewal in case the Node was replaced.
    let mut node_uid: Option<String> = None;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + offset, LEASE_RENEW_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tick.tick().await;
        if let Err(e) = renew_lease(&leases, &nodes, &mut node_uid, &name).await {
            node_uid = None;
            tracing::warn!(node = %name, error = %e, "lease renewal failed");
        }
        if n % 6 == 5
            && let Err(e) = patch_node_status(&nodes, &name, index, &cfg).await
        {
            tracing::warn!(node = %name, error = %e, "node status update failed");
        }
    }
}

async fn renew_lease(leases: &Api<Lease>, nodes: &Api<Node>, node_uid: &mut Option<String>, name: &str) -> anyhow::Result<()> {
    let uid = match node_uid {
        Some(uid) => uid.clone(),
        None => node_uid.insert(nodes.get(name).await?.metadata.uid.unwrap_or_default()).clone(),
    };
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": MicroTime(Timestamp::now())},
    });
    leases.patch(name, &PatchParams::apply("sim-kubelet").force(), &Patch::Apply(lease)).await?;
    Ok(())
}

/// Label on the PersistentVolumes the simulated provisioner creates.
pub const PV_LABEL: &str = "sim.cloneset-operator.dev/provisioned";

/// A stand-in for a storage provisioner: every pending PVC without a volume gets a matching
/// PersistentVolume pre-bound to it (the controller-manager's PV binder completes the binding,
/// and the scheduler can then place the pod); released volumes are deleted.
async fn provision_volumes(client: Client) {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let pvcs: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let claims = watcher::watcher(pvcs, watcher::Config::default()).default_backoff();
    let volumes = watcher::watcher(pvs.clone(), watcher::Config::default().labels(PV_LABEL)).default_backoff();
    use kube::runtime::WatchStreamExt as _;
    let claims = claims.applied_objects().filter_map(|r| async move { r.ok() }).map(either::Either::Left);
    let volumes = volumes.applied_objects().filter_map(|r| async move { r.ok() }).map(either::Either::Right);
    let mut events = futures::stream::select(claims, volumes).boxed();
    while let Some(ev) = events.next().await {
        let result = match ev {
            either::Either::Left(pvc) => {
                let pending = pvc.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|p| p == "Pending");
                let unbound = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_none_or(str::is_empty);
                if !(pending && unbound) || pvc.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let spec = pvc.spec.clone().unwrap_or_default();
                let storage = spec.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage").cloned());
                let uid = pvc.metadata.uid.clone().unwrap_or_default();
                let pv = json!({
                    "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": format!("sim-pv-{uid}"), "labels": {PV_LABEL: "true"}},
                    "spec": {
                        "capacity": {"storage": storage.map_or_else(|| "1Gi".to_string(), |q| q.0)},
                        "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": spec.storage_class_name.clone().unwrap_or_default(),
                        "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
                        "hostPath": {"path": format!("/tmp/sim-volumes/{uid}")},
                        "claimRef": {"namespace": pvc.namespace(), "name": pvc.name_any(), "uid": uid},
                    },
                });
                match serde_json::from_value::<PersistentVolume>(pv) {
                    Ok(pv) => pvs.create(&PostParams::default(), &pv).await.map(|_| ()),
                    Err(e) => Err(kube::Error::SerdeError(e)),
                }
            }
            either::Either::Right(pv) => {
                if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Released") {
                    continue;
                }
                pvs.delete(&pv.name_any(), &DeleteParams::default()).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
            Err(e) => tracing::warn!(error = %e, "volume provisioning step failed"),
        }
    }
}
