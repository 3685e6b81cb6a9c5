//! Pod ingestion: what the operator keeps of each pod and how it gets there. The pod watch's
//! responses (protobuf or JSON) are decoded straight into the fields the controller reads
//! ([`fields`]), then held in a compact shared layout ([`compact`]) that the pure core reads
//! through its `PodRead` trait. Nothing here calls the apiserver or knows the controller; it
//! depends only on the API's keys and the core.

pub mod compact;
pub mod fields;
pub mod protobuf;
pub mod wire;
