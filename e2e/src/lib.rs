//! End-to-end support for cloneset-operator: a real local control plane ([`cluster`]), its nodes
//! ([`nodes`]: simulated and real, side by side), and helpers for tests against them ([`testenv`]).

pub mod addresses;
pub mod bench;
pub mod chaos;
pub mod chart;
pub mod cluster;
pub mod freezing_proxy;
pub mod host;
pub mod image;
pub mod nodes;
pub mod rbac;
pub mod registry;
pub mod testenv;
pub mod workload;

use k8s_openapi::api::core::v1::Node;

/// Whether a Node reports `Ready=True`.
pub fn node_is_ready(node: &Node) -> bool {
    node.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
