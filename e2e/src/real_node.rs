//! What the tests on a real node share: the template fields that place pods there, the images
//! the registry serves, and the cluster's real node with its lock (a test that stops the kubelet
//! has it to itself).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt as _;
use serde_json::{Value, json};

use crate::nodes::real::{LABEL, TAINT};
use crate::workload::condition;

/// The template fields that put a CloneSet's pods on the real node.
pub fn on_the_real_node(mut spec: Value) -> Value {
    let placement = json!({"template": {"spec": {
        "nodeSelector": {LABEL: "true"},
        "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    }}});
    json_patch::merge(&mut spec, &placement);
    spec
}

/// Container `main` serving `image` on port 80, ready once it answers. (A merge patch replaces
/// the whole container list, so an image change repeats the rest.)
pub fn served(image: &str) -> Value {
    json!({"template": {"spec": {"containers": [{"name": "main", "image": image, "imagePullPolicy": "Always",
        "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 1}}]}}})
}

/// Tests share the real node; one that stops its kubelet has it to itself.
pub static REAL_NODE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The cluster's real nodes and the registry digests of the images it serves, for one test.
pub struct RealCluster {
    pub real: crate::nodes::real::RealNodes,
    pub digests: BTreeMap<String, String>,
    pub dir: std::path::PathBuf,
    _shared: Option<tokio::sync::RwLockReadGuard<'static, ()>>,
}

/// The test cluster's real node, shared with the other tests; a clear failure when it has none.
pub async fn real_cluster() -> RealCluster {
    let shared = REAL_NODE.read().await;
    let state = crate::testenv::cluster_state().await.unwrap();
    RealCluster { _shared: Some(shared), ..RealCluster::without_lock(state) }
}

impl RealCluster {
    pub fn without_lock(state: crate::cluster::ClusterState) -> Self {
        let real = state.real.clone().unwrap_or_else(|| {
            panic!(
                "the test cluster has no real node: `make test` starts one when it runs as root (a bridge, iptables, containerd, \
                 runc and the kubelet need it); as another user these tests cannot run"
            )
        });
        let digests = crate::image::published_digests(&state.images_dir()).unwrap();
        Self { real, digests, dir: state.dir().to_path_buf(), _shared: None }
    }
}

/// The imageID a kubelet reports for an image pulled by tag: the repository at the digest the
/// registry served.
pub fn image_id(digests: &BTreeMap<String, String>, reference: &str) -> String {
    let repository = reference.rsplit_once(':').map_or(reference, |(r, _)| r);
    format!("{repository}@{}", digests[reference])
}

pub fn main_status(p: &Pod) -> ContainerStatus {
    reported_main(p).unwrap_or_else(|| panic!("{}: no status for container main", p.name_any()))
}

/// Container `main`'s status, if the kubelet has reported one yet (not for a pod just created).
pub fn reported_main(p: &Pod) -> Option<ContainerStatus> {
    let statuses = p.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find(|c| c.name == "main").cloned()
}

pub fn pod_ip(p: &Pod) -> String {
    p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default()
}

/// One observation of a pod from a watch: its Ready and InPlaceUpdateReady conditions and the
/// container that runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub ready: Option<String>,
    pub in_place_ready: Option<String>,
    pub container_id: Option<String>,
}

/// What each pod (by name) looked like in `pods`, in order, repeats dropped.
pub fn histories(pods: &[Pod]) -> BTreeMap<String, Vec<Seen>> {
    let mut all = BTreeMap::<String, Vec<Seen>>::new();
    for p in pods {
        let container_id = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == "main"))
            .and_then(|c| c.container_id.clone());
        let now = Seen { ready: condition(p, "Ready"), in_place_ready: condition(p, "InPlaceUpdateReady"), container_id };
        let history = all.entry(p.name_any()).or_default();
        if history.last() != Some(&now) {
            history.push(now);
        }
    }
    all
}

/// What the real container serves (the stand-in images answer with their own name).
pub async fn http_get(ip: &str) -> String {
    let addr: std::net::SocketAddr = format!("{ip}:80").parse().unwrap();
    crate::testenv::http_get(addr, "/").await.map(|(_, body)| body).unwrap_or_else(|e| format!("<{e}>"))
}
