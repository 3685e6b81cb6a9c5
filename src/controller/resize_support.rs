//! What this cluster lets an in-place resize change, found by asking its apiserver, never read
//! off its version number: discovery says whether `pods/resize` is served; a dry-run resize, sent
//! the first time an update would lower a memory limit, says whether that is allowed in place.
//! The answers reach the pure update plan as [`ResizeSupport`].

use std::sync::atomic::{AtomicU8, Ordering};

use kube::Client;

use crate::core::inplace::ResizeSupport;

const UNKNOWN: u8 = 0;
const ALLOWED: u8 = 1;
const REFUSED: u8 = 2;

/// The apiserver's answers so far.
#[derive(Debug)]
pub(crate) struct ResizeAnswers {
    served: bool,
    memory_limit_decrease: AtomicU8,
}

impl ResizeAnswers {
    /// With `pods/resize` served or not; nothing known yet of memory limits.
    pub(crate) fn new(served: bool) -> Self {
        Self { served, memory_limit_decrease: AtomicU8::new(UNKNOWN) }
    }

    /// Asks discovery whether `pods/resize` is served, when InPlaceWorkloadVerticalScaling
    /// (`gate`) needs it; said in the log when it is not.
    pub(crate) async fn discover(client: &Client, gate: bool) -> Result<Self, kube::Error> {
        if !gate {
            return Ok(Self::new(true));
        }
        let core = client.list_core_api_resources("v1").await?;
        let served = core.resources.iter().any(|r| r.name == "pods/resize");
        if !served {
            tracing::warn!(
                "InPlaceWorkloadVerticalScaling is on, but this apiserver does not serve pods/resize (its InPlacePodVerticalScaling feature gate is off): a resources change recreates pods under InPlaceIfPossible and is held under InPlaceOnly"
            );
        }
        Ok(Self::new(served))
    }

    /// What the plan may count on now; a memory limit decrease not yet asked about counts as
    /// allowed (the update asks before its first write: [`Self::must_ask_memory_limit_decrease`]).
    pub(crate) fn support(&self) -> ResizeSupport {
        ResizeSupport { served: self.served, memory_limit_decrease: self.memory_limit_decrease.load(Ordering::Acquire) != REFUSED }
    }

    /// Whether the apiserver has not yet said if it lowers memory limits in place.
    pub(crate) fn must_ask_memory_limit_decrease(&self) -> bool {
        self.memory_limit_decrease.load(Ordering::Acquire) == UNKNOWN
    }

    /// Records the apiserver's answer to a dry-run resize that lowers a memory limit.
    pub(crate) fn record_memory_limit_decrease(&self, allowed: bool) {
        self.memory_limit_decrease.store(if allowed { ALLOWED } else { REFUSED }, Ordering::Release);
        if !allowed {
            tracing::warn!(
                "this apiserver refuses to lower a memory limit in place unless the container's memory resizePolicy is RestartContainer: such changes recreate pods under InPlaceIfPossible and are held under InPlaceOnly"
            );
        }
    }
}

/// Whether an apiserver's refusal of a resize is its refusal to lower a memory limit in place
/// (Kubernetes 1.33: "memory limits cannot be decreased unless resizePolicy is RestartContainer",
/// or "cannot be added" for a container without one).
pub(crate) fn refuses_memory_limit_decrease(e: &kube::Error) -> bool {
    let refusal = |m: &str| m.contains("memory limits cannot be decreased") || m.contains("memory limits cannot be added");
    matches!(e, kube::Error::Api(s) if s.code == 422 && refusal(&s.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_limit_decrease_counts_as_allowed_until_the_apiserver_refuses_one() {
        let answers = ResizeAnswers::new(true);
        assert!(answers.must_ask_memory_limit_decrease());
        assert_eq!(answers.support(), ResizeSupport { served: true, memory_limit_decrease: true });
        answers.record_memory_limit_decrease(false);
        assert!(!answers.must_ask_memory_limit_decrease());
        assert_eq!(answers.support(), ResizeSupport { served: true, memory_limit_decrease: false });
        let allowed = ResizeAnswers::new(false);
        allowed.record_memory_limit_decrease(true);
        assert_eq!(allowed.support(), ResizeSupport { served: false, memory_limit_decrease: true });
    }

    #[test]
    fn only_the_memory_limit_refusal_is_taken_for_one() {
        let status = |code: u16, message: &str| {
            kube::Error::Api(kube::core::Status { code, ..kube::core::Status::failure(message, "Invalid") }.boxed())
        };
        let refusal = "Pod \"web-x\" is invalid: spec.containers[0].resources.limits[memory]: Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer";
        assert!(refuses_memory_limit_decrease(&status(422, refusal)));
        assert!(refuses_memory_limit_decrease(&status(
            422,
            "limits[memory]: Forbidden: memory limits cannot be added unless resizePolicy is RestartContainer"
        )));
        assert!(!refuses_memory_limit_decrease(&status(422, "spec: Forbidden: only cpu and memory resources are mutable")));
        assert!(!refuses_memory_limit_decrease(&status(409, refusal)));
    }
}
