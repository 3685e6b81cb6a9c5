//! The `apps.kruise.io` CloneSet API: pure types of both served versions, the conversion between
//! them, keys, and CRD and admission policy generation.

pub mod cloneset;
pub mod conversion;
pub mod crd;
pub mod keys;
mod rules;
pub mod shared;
pub mod template_fields;
pub mod v1beta1;

pub use cloneset::{CloneSet, CloneSetCondition, CloneSetScaleStrategy, CloneSetSpec, CloneSetStatus, CloneSetUpdateStrategy};
