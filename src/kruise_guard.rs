//! Never two CloneSet controllers at once: while Kruise's manager holds and renews its
//! leader-election Lease (`kruise-system/kruise-manager` by default, `--kruise-manager-lease`),
//! this operator stands by instead of reconciling.
//!
//! Whether the Lease is live is judged as a client-go candidate judges it: by whether its record
//! (resourceVersion) has changed within its `leaseDurationSeconds`, measured on this process's own
//! monotonic clock from when it first saw that record, so no wall clocks are compared. One
//! exception: a Lease whose `renewTime` is already more than twice its duration old when first
//! seen (Kruise uninstalled, its Lease left behind) counts as lapsed at once, so a stale Lease
//! does not delay every start by a lease duration. A Lease without a holder (released on a clean
//! shutdown) has lapsed. A missing Lease means no Kruise manager with leader election runs.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use tokio::time::Instant;

/// Kruise's leader-election Lease: `--leader-election-namespace` and `--leader-election-id`
/// defaults in Kruise's `main.go`, which its chart keeps.
pub(crate) const KRUISE_LEASE_NAMESPACE: &str = "kruise-system";
pub(crate) const KRUISE_LEASE_NAME: &str = "kruise-manager";

/// What the Kruise manager's Lease shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KruiseState {
    /// No such Lease (or it may not be read; see [`KruiseGuard::check`]).
    Absent,
    /// Held and renewed within its duration: Kruise's CloneSet controller may be acting.
    Live { holder: String },
    /// Released, or not renewed for its duration.
    Lapsed,
}

/// The last record seen and when (this process's clock), or that it was stale on arrival.
#[derive(Debug)]
struct Seen {
    resource_version: String,
    at: Instant,
    stale_on_arrival: bool,
}

/// The pure part: judges successive reads of the Lease.
#[derive(Debug, Default)]
pub(crate) struct LeaseJudge {
    seen: Option<Seen>,
}

impl LeaseJudge {
    /// Judges one read of the Lease at `now` (monotonic) and `wall` (for the stale check only).
    /// `own_identity`: a holder that is this process is not Kruise (a user may point
    /// `--leader-election-id` at Kruise's Lease to share it).
    pub(crate) fn judge(&mut self, lease: Option<&Lease>, now: Instant, wall: Timestamp, own_identity: &str) -> KruiseState {
        let Some(lease) = lease else {
            self.seen = None;
            return KruiseState::Absent;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.unwrap_or_default();
        if holder.is_empty() || holder == own_identity {
            return KruiseState::Lapsed;
        }
        let duration = Duration::from_secs(spec.lease_duration_seconds.map_or(15, |s| u64::try_from(s).unwrap_or(0)));
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let seen = match self.seen.take() {
            Some(s) if s.resource_version == rv => s,
            previous => {
                let age = spec.renew_time.map(|t| wall.duration_since(t.0)).and_then(|d| Duration::try_from(d).ok());
                let stale_on_arrival = previous.is_none() && age.is_some_and(|a| a > duration * 2);
                Seen { resource_version: rv, at: now, stale_on_arrival }
            }
        };
        let live = !seen.stale_on_arrival && now < seen.at + duration;
        self.seen = Some(seen);
        if live { KruiseState::Live { holder } } else { KruiseState::Lapsed }
    }
}

/// Reads Kruise's Lease and judges it.
pub struct KruiseGuard {
    api: Api<Lease>,
    namespace: String,
    name: String,
    own_identity: String,
    /// How often to look while standing by or leading (the leader-election retry period).
    pub retry_period: Duration,
    judge: LeaseJudge,
    warned_forbidden: bool,
}

impl KruiseGuard {
    pub fn new(client: Client, namespace: &str, name: &str, own_identity: &str, retry_period: Duration) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            own_identity: own_identity.to_string(),
            retry_period,
            judge: LeaseJudge::default(),
            warned_forbidden: false,
        }
    }

    /// `<namespace>/<name>` of the Lease watched.
    pub(crate) fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Reads the Lease once. Errors are values: a read that fails is reported as `Err` and the
    /// caller keeps its current state; a 403 (no RBAC to read the Lease) is logged once and
    /// treated as absent, since the operator cannot tell and must not stop for it.
    pub(crate) async fn check(&mut self) -> Result<KruiseState, kube::Error> {
        let lease = match self.api.get_opt(&self.name).await {
            Ok(lease) => lease,
            Err(kube::Error::Api(e)) if e.code == 403 => {
                if !self.warned_forbidden {
                    self.warned_forbidden = true;
                    tracing::warn!(lease = %self.lease_ref(), error = %e.message, "cannot read Kruise's leader-election Lease; not checking for a running Kruise manager");
                }
                None
            }
            Err(e) => return Err(e),
        };
        Ok(self.judge.judge(lease.as_ref(), Instant::now(), Timestamp::now(), &self.own_identity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::SignedDuration;

    fn lease(rv: u64, holder: Option<&str>, renewed: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta { resource_version: Some(rv.to_string()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(renewed)),
                ..Default::default()
            }),
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_renewed_lease_is_live_until_it_goes_unchanged_for_its_duration() {
        let (t0, wall) = (Instant::now(), Timestamp::now());
        let mut j = LeaseJudge::default();
        let live = KruiseState::Live { holder: "kruise-1".into() };
        assert_eq!(j.judge(Some(&lease(1, Some("kruise-1"), wall)), t0, wall, "me"), live);
        // Renewed at 2 s: the clock restarts from that read.
        assert_eq!(j.judge(Some(&lease(2, Some("kruise-1"), wall)), t0 + secs(2), wall, "me"), live);
        assert_eq!(j.judge(Some(&lease(2, Some("kruise-1"), wall)), t0 + secs(16), wall, "me"), live, "14 s unchanged");
        assert_eq!(j.judge(Some(&lease(2, Some("kruise-1"), wall)), t0 + secs(17), wall, "me"), KruiseState::Lapsed, "15 s unchanged");
        // Kruise comes back.
        assert_eq!(
            j.judge(Some(&lease(3, Some("kruise-2"), wall)), t0 + secs(30), wall, "me"),
            KruiseState::Live { holder: "kruise-2".into() }
        );
    }

    #[test]
    fn released_missing_stale_and_own_leases_are_not_kruise() {
        let (t0, wall) = (Instant::now(), Timestamp::now());
        assert_eq!(LeaseJudge::default().judge(None, t0, wall, "me"), KruiseState::Absent);
        assert_eq!(LeaseJudge::default().judge(Some(&lease(1, None, wall)), t0, wall, "me"), KruiseState::Lapsed, "released");
        assert_eq!(LeaseJudge::default().judge(Some(&lease(1, Some("me"), wall)), t0, wall, "me"), KruiseState::Lapsed, "our own");
        let old = wall - SignedDuration::from_secs(31);
        assert_eq!(LeaseJudge::default().judge(Some(&lease(1, Some("k"), old)), t0, wall, "me"), KruiseState::Lapsed, "left behind");
        // A renewTime a little old (clock skew, a slow renewal) is still trusted to be live.
        let skewed = wall - SignedDuration::from_secs(20);
        assert!(matches!(LeaseJudge::default().judge(Some(&lease(1, Some("k"), skewed)), t0, wall, "me"), KruiseState::Live { .. }));
        // A stale Lease that is then renewed is live.
        let mut j = LeaseJudge::default();
        j.judge(Some(&lease(1, Some("k"), old)), t0, wall, "me");
        assert!(matches!(j.judge(Some(&lease(2, Some("k"), wall)), t0 + secs(2), wall, "me"), KruiseState::Live { .. }));
    }
}
