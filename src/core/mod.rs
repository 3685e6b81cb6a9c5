//! Pure decisions: functions of snapshots and `now`. Nothing here takes a client, spawns a task
//! or reads a clock.

pub mod diff;
pub mod gojson;
pub mod intstr;
pub mod order;
pub mod revision;
pub mod expectations;
pub mod pods;
pub mod status;
pub mod history;
pub mod lifecycle;
pub mod sync;
