//! cloneset-operator: an OpenKruise-compatible CloneSet operator.
//!
//! The module tree (docs/development.md, "Map of the code"): pure decisions in `core`,
//! the only apiserver I/O in `controller`, process wiring in `main.rs`.

pub mod api;
pub mod build_info;
pub mod client;
pub mod config;
pub mod controller;
pub mod core;
pub mod heap;
pub mod kruise_guard;
pub mod leader;
pub mod metrics;
pub mod migrate;
pub mod pod_cache;
pub mod procfs;
pub mod server;
#[cfg(test)]
mod stand_in;
pub mod telemetry;
pub mod transport;
pub mod webhook;
