//! Why a reconcile failed: a value the worker retries with backoff, soon when it was only a
//! conflict.

use super::writes::WriteError;

/// Why a reconcile failed; the worker retries with backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReconcileError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("revision: {0}")]
    Revision(String),
}

impl ReconcileError {
    /// An optimistic-concurrency conflict: our cache was behind; retrying soon is routine.
    pub(crate) fn is_conflict(&self) -> bool {
        let api = match self {
            Self::Write(WriteError::Api(kube::Error::Api(e))) | Self::Kube(kube::Error::Api(e)) => Some(e.code),
            _ => None,
        };
        api == Some(409)
    }
}
