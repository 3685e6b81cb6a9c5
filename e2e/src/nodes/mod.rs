//! The nodes of the local control plane, two kinds side by side:
//!
//! - [`simulated`]: many cheap nodes driven by our simulated kubelet, one process for all of
//!   them, no containers; for scale and speed. They must behave like the real kubelet wherever
//!   CloneSet depends on it.
//! - [`real`]: a kubelet of the pinned Kubernetes with containerd and runc, running real
//!   containers from the local registry ([`crate::registry`]), on a host network of the run's
//!   own ([`network`]); the oracle for the simulated kind.

pub mod network;
pub mod real;
pub mod simulated;
