//! The `apps.kruise.io/v1alpha1` API: pure types, keys, CRD and admission policy generation.

pub mod cloneset;
pub mod crd;
pub mod keys;
pub mod shared;

pub use cloneset::{CloneSet, CloneSetCondition, CloneSetScaleStrategy, CloneSetSpec, CloneSetStatus, CloneSetUpdateStrategy};
