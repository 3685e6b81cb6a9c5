//! Pure decisions: functions of snapshots and `now`. Nothing here takes a client, spawns a task
//! or reads a clock.

#[cfg(test)]
mod convergence;
pub mod defaults;
pub mod diff;
pub mod env_metadata;
pub mod events;
pub mod expectations;
pub mod gates;
pub mod gojson;
pub mod history;
pub mod inplace;
pub mod intstr;
pub mod lifecycle;
pub mod order;
pub mod pod_read;
pub mod pods;
pub mod readiness;
pub mod resources;
pub mod revision;
pub mod status;
pub mod sync;
