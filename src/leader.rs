//! Leader election on a `coordination.k8s.io/v1` Lease: client-go's algorithm with Kruise's
//! timings (lease 15 s, renew deadline 10 s, retry 2 s), written against kube directly (no extra
//! crate), with optimistic updates (`resourceVersion`) on the Lease.
//!
//! - A candidate reads the Lease every retry period. It takes the Lease when it is missing, has
//!   no holder, or its record (resourceVersion) has not changed for `leaseDurationSeconds`
//!   measured on the candidate's *own* monotonic clock since it first saw that record — no
//!   comparison of wall clocks between machines.
//! - The leader renews every retry period. It stops leading as soon as a renewal shows another
//!   holder, or when no renewal has succeeded for the renew deadline (10 s after the last
//!   successful renewal was sent). A candidate needs at least 15 s of silence, so the old leader
//!   has stopped at least 5 s before anyone else can start.
//! - A request that gets no answer within a third of the renew deadline is abandoned with its
//!   client, and the next attempt goes out on a new connection ([`LeaderElector::reconnecting`]):
//!   a connection that went silent (a stuck load balancer) costs one attempt, not the Lease.
//! - On a clean shutdown the leader releases the Lease (no holder, duration 1 s), so a standby
//!   takes over within one retry period instead of waiting for expiry.
//!
//! What the controller does with this (fail-stop on loss, standby with warm caches) is in
//! `controller::run`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

/// The Lease's default name (`--leader-election-id`). Kruise's is `kruise-manager`; running both
/// managers at once is prevented by [`crate::kruise_guard`], not by sharing a Lease.
pub const LEASE_NAME: &str = "cloneset-operator-leader";

/// Namespace of the Lease when `--leader-election-namespace` is empty and the operator does not
/// run in a pod: Kruise's flag falls back to the in-cluster namespace, which only exists in a pod.
pub(crate) const FALLBACK_NAMESPACE: &str = "kube-system";

/// Where and how to elect.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    pub namespace: String,
    pub lease_name: String,
    /// Unique per process: `<pod or host name>_<random>`.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// Kruise's (controller-runtime's) timings.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            lease_name: LEASE_NAME.to_string(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// client-go's checks (`NewLeaderElector`): a candidate must wait longer than a leader
    /// keeps trying, and a leader must get more than one jittered retry within its deadline.
    pub fn validate(&self) -> Result<(), String> {
        let (lease, renew, retry) = (self.lease_duration, self.renew_deadline, self.retry_period);
        if retry.is_zero() || renew.is_zero() || lease.is_zero() {
            return Err(
                "--leader-election-lease-duration, --leader-election-renew-deadline and --leader-election-retry-period must be positive"
                    .into(),
            );
        }
        if lease <= renew {
            return Err(format!(
                "--leader-election-lease-duration ({lease:?}) must be greater than --leader-election-renew-deadline ({renew:?})"
            ));
        }
        if renew <= retry.mul_f64(1.2) {
            return Err(format!(
                "--leader-election-renew-deadline ({renew:?}) must be greater than 1.2 × --leader-election-retry-period ({retry:?})"
            ));
        }
        Ok(())
    }

    /// How long one attempt (a read and a write of the Lease) may take before it is abandoned:
    /// short enough to leave a fresh connection most of the renew deadline.
    pub(crate) fn attempt_timeout(&self) -> Duration {
        self.renew_deadline / 3
    }
}

/// The namespace of the Lease: the flag, else `POD_NAMESPACE`, else the in-cluster service
/// account's namespace, else [`FALLBACK_NAMESPACE`].
pub fn resolve_namespace(flag: &str) -> String {
    if !flag.is_empty() {
        return flag.to_string();
    }
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| FALLBACK_NAMESPACE.to_string())
}

/// `<POD_NAME or host name>_<16 random hex digits>`, like controller-runtime's `<hostname>_<uuid>`.
pub fn new_identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cloneset-operator".to_string());
    format!("{host}_{:016x}", random_u64())
}

fn random_u64() -> u64 {
    use std::io::Read as _;
    let mut buf = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).is_ok() {
        return u64::from_le_bytes(buf);
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// Why this process stopped leading.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Lost {
    #[error("the lease {0} is now held by {1:?}")]
    TakenBy(String, String),
    #[error("could not renew the lease {0} within the renew deadline ({1:?}){2}")]
    RenewDeadline(String, Duration, String),
}

/// The outcome of one read-and-maybe-write of the Lease.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// We hold the Lease (just acquired or renewed).
    Held,
    /// Someone else holds it (empty: nobody, but we may not take it yet).
    HeldBy(String),
    /// The Lease changed between our read and write: read again.
    Conflict,
}

/// What a candidate remembers about the Lease: the version it saw last and when (its own clock).
struct Observed {
    resource_version: String,
    at: Instant,
}

/// One process's side of the election.
pub struct LeaderElector {
    api: Api<Lease>,
    /// Makes a client with connections of its own, for after an attempt went unanswered.
    connect: Option<Box<dyn Fn() -> kube::Result<Client> + Send + Sync>>,
    cfg: ElectionConfig,
    observed: Option<Observed>,
    /// When the request of the last successful acquire/renew was sent.
    last_renew: Option<Instant>,
    rng: u64,
}

impl LeaderElector {
    pub fn new(client: Client, cfg: ElectionConfig) -> Self {
        let api = Api::namespaced(client, &cfg.namespace);
        Self { api, connect: None, cfg, observed: None, last_renew: None, rng: random_u64() | 1 }
    }

    /// After an attempt that got no answer in time, the next one is made by a new client from
    /// `connect`: a pooled connection may have gone silent, and HTTP/2 would put the retry on it.
    pub fn reconnecting(mut self, connect: impl Fn() -> kube::Result<Client> + Send + Sync + 'static) -> Self {
        self.connect = Some(Box::new(connect));
        self
    }

    /// Drops the client whose request went unanswered, with its connections.
    fn reconnect(&mut self) {
        let Some(connect) = &self.connect else { return };
        match connect() {
            Ok(client) => self.api = Api::namespaced(client, &self.cfg.namespace),
            Err(e) => {
                tracing::warn!(lease = %self.lease_ref(), error = %e, "could not build a new client for the lease; keeping the old one")
            }
        }
    }

    pub(crate) fn config(&self) -> &ElectionConfig {
        &self.cfg
    }

    fn lease_ref(&self) -> String {
        format!("{}/{}", self.cfg.namespace, self.cfg.lease_name)
    }

    /// A retry period stretched by up to 20 %, so candidates do not move in lockstep.
    fn jittered_retry(&mut self) -> Duration {
        // xorshift64: enough to spread two or three processes apart.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let frac = (self.rng % 1000) as f64 / 1000.0;
        self.cfg.retry_period.mul_f64(1.0 + 0.2 * frac)
    }

    /// Returns once this process holds the Lease; keeps trying (every retry period) forever.
    pub(crate) async fn acquire(&mut self) {
        let mut last_holder: Option<String> = None;
        loop {
            // An attempt stuck longer than its timeout is abandoned and retried on a new client.
            match tokio::time::timeout(self.cfg.attempt_timeout(), self.try_acquire_or_renew(false)).await {
                Ok(Ok(Attempt::Held)) => {
                    tracing::info!(lease = %self.lease_ref(), identity = %self.cfg.identity, "acquired the lease: leading");
                    return;
                }
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    if last_holder.as_ref() != Some(&holder) {
                        tracing::info!(lease = %self.lease_ref(), %holder, "standing by: the lease is held by another instance");
                        last_holder = Some(holder);
                    }
                }
                Ok(Ok(Attempt::Conflict)) => {}
                Ok(Err(e)) => tracing::warn!(lease = %self.lease_ref(), error = %e, "could not read or take the lease; retrying"),
                Err(_) => {
                    tracing::warn!(lease = %self.lease_ref(), "lease request timed out; retrying on a new connection");
                    self.reconnect();
                }
            }
            let pause = self.jittered_retry();
            tokio::time::sleep(pause).await;
        }
    }

    /// Keeps renewing the Lease every retry period; returns only when leadership is lost.
    pub(crate) async fn hold(&mut self) -> Lost {
        let mut last_error = String::new();
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            loop {
                let last = self.last_renew.unwrap_or_else(Instant::now);
                let deadline = last + self.cfg.renew_deadline;
                if Instant::now() >= deadline {
                    return Lost::RenewDeadline(self.lease_ref(), self.cfg.renew_deadline, last_error);
                }
                let attempt_deadline = deadline.min(Instant::now() + self.cfg.attempt_timeout());
                match tokio::time::timeout_at(attempt_deadline, self.try_acquire_or_renew(true)).await {
                    Err(_) if attempt_deadline >= deadline => {
                        return Lost::RenewDeadline(self.lease_ref(), self.cfg.renew_deadline, " (request timed out)".into());
                    }
                    Err(_) => {
                        tracing::warn!(lease = %self.lease_ref(), "lease renewal timed out; retrying on a new connection");
                        last_error = " (requests timed out)".into();
                        self.reconnect();
                    }
                    Ok(Ok(Attempt::Held)) => break,
                    Ok(Ok(Attempt::HeldBy(holder))) => return Lost::TakenBy(self.lease_ref(), holder),
                    // Someone wrote the Lease since our read: read it again (a short pause avoids a hot loop).
                    Ok(Ok(Attempt::Conflict)) => tokio::time::sleep(Duration::from_millis(50)).await,
                    Ok(Err(e)) => {
                        tracing::warn!(lease = %self.lease_ref(), error = %e, "could not renew the lease; retrying");
                        last_error = format!(" (last error: {e})");
                        let pause = self.cfg.retry_period.min(deadline.saturating_duration_since(Instant::now()));
                        tokio::time::sleep(pause).await;
                    }
                }
            }
        }
    }

    /// Gives the Lease up if this process still holds it (on a clean shutdown), so a standby
    /// can take over at its next retry instead of after expiry.
    pub(crate) async fn release(&mut self) {
        let release = async {
            let Some(mut lease) = self.api.get_opt(&self.cfg.lease_name).await? else { return Ok(()) };
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
                return Ok(());
            }
            let now = MicroTime(Timestamp::now());
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.acquire_time = Some(now.clone());
            spec.renew_time = Some(now);
            self.api.replace(&self.cfg.lease_name, &PostParams::default(), &lease).await.map(|_| ())
        };
        match tokio::time::timeout(self.cfg.renew_deadline, release).await {
            Ok(Ok(())) => tracing::info!(lease = %self.lease_ref(), "released the lease"),
            Ok(Err(e)) => tracing::warn!(lease = %self.lease_ref(), error = %e, "could not release the lease; it expires on its own"),
            Err(_) => tracing::warn!(lease = %self.lease_ref(), "releasing the lease timed out; it expires on its own"),
        }
        self.last_renew = None;
    }

    /// client-go's `tryAcquireOrRenew`. `leading`: we believe we hold the Lease, so seeing
    /// another holder means we lost it.
    async fn try_acquire_or_renew(&mut self, leading: bool) -> kube::Result<Attempt> {
        let sent = Instant::now();
        let now = MicroTime(Timestamp::now());
        let me = self.cfg.identity.clone();
        let duration_secs = i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.cfg.lease_name).await? else {
            if leading {
                return Ok(Attempt::HeldBy(String::new()));
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.lease_name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => Ok(self.took(created, sent)),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Conflict),
                Err(e) => Err(e),
            };
        };

        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        // A new record starts its expiry clock when we read it (client-go's observedTime).
        let observed_at = match &self.observed {
            Some(o) if o.resource_version == rv => o.at,
            _ => {
                let at = Instant::now();
                self.observed = Some(Observed { resource_version: rv, at });
                at
            }
        };
        let mine = holder == me;
        if leading && !mine {
            return Ok(Attempt::HeldBy(holder));
        }
        let held_for = spec.lease_duration_seconds.map_or(self.cfg.lease_duration, |s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
        if !mine && !holder.is_empty() && observed_at + held_for > Instant::now() {
            return Ok(Attempt::HeldBy(holder));
        }

        let spec = lease.spec.get_or_insert_with(Default::default);
        if !mine {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(me);
        spec.lease_duration_seconds = Some(duration_secs);
        spec.renew_time = Some(now);
        match self.api.replace(&self.cfg.lease_name, &PostParams::default(), &lease).await {
            Ok(updated) => Ok(self.took(updated, sent)),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    fn took(&mut self, lease: Lease, sent: Instant) -> Attempt {
        let rv = lease.metadata.resource_version.unwrap_or_default();
        self.observed = Some(Observed { resource_version: rv, at: sent });
        self.last_renew = Some(sent);
        Attempt::Held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kruise_timings_and_a_unique_identity() {
        let c = ElectionConfig::new("ns", "me");
        assert_eq!(
            (c.lease_duration, c.renew_deadline, c.retry_period),
            (Duration::from_secs(15), Duration::from_secs(10), Duration::from_secs(2))
        );
        assert!(c.renew_deadline < c.lease_duration, "the leader must stop before a standby may start");
        assert_eq!(c.lease_name, LEASE_NAME);
        let (a, b) = (new_identity(), new_identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }

    #[test]
    fn timings_are_checked_as_client_go_checks_them() {
        let with = |lease: u64, renew: u64, retry: u64| ElectionConfig {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
            ..ElectionConfig::new("ns", "me")
        };
        assert_eq!(with(15, 10, 2).validate(), Ok(()));
        assert_eq!(with(60, 40, 5).validate(), Ok(()));
        assert!(with(10, 10, 2).validate().unwrap_err().contains("lease-duration"));
        assert!(with(15, 10, 9).validate().unwrap_err().contains("1.2"));
        assert!(with(15, 10, 0).validate().unwrap_err().contains("positive"));
    }

    #[test]
    fn the_namespace_flag_wins() {
        assert_eq!(resolve_namespace("cloneset-system"), "cloneset-system");
    }

    // ---- the algorithm against an in-memory apiserver, in virtual time ----

    use std::convert::Infallible;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http::{Method, Request, Response, StatusCode};
    use http_body_util::{BodyExt as _, Full};
    use serde_json::{Value, json};

    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    enum Mode {
        #[default]
        Up,
        /// Every request fails with a 500.
        Failing,
        /// Requests never get an answer.
        Hanging,
    }

    #[derive(Default)]
    struct FakeState {
        lease: Option<Value>,
        rv: u64,
        mode: Mode,
    }

    /// Just enough of an apiserver for one Lease: get, create, and replace with resourceVersion checks.
    #[derive(Clone, Default)]
    struct Fake(Arc<Mutex<FakeState>>);

    fn answer(code: u16, body: &Value) -> Response<Full<Bytes>> {
        let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
        *res.status_mut() = StatusCode::from_u16(code).unwrap();
        res
    }

    fn failure(code: u16, reason: &str) -> Response<Full<Bytes>> {
        answer(code, &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": reason}))
    }

    impl Fake {
        fn set_mode(&self, mode: Mode) {
            self.0.lock().unwrap().mode = mode;
        }

        fn holder(&self) -> Option<String> {
            let s = self.0.lock().unwrap();
            s.lease.as_ref()?["spec"]["holderIdentity"].as_str().map(str::to_string)
        }

        /// Someone else writes the Lease (as a buggy or forced take-over would).
        fn steal(&self, holder: &str) {
            let mut s = self.0.lock().unwrap();
            s.rv += 1;
            let rv = s.rv.to_string();
            let lease = s.lease.as_mut().unwrap();
            lease["spec"]["holderIdentity"] = json!(holder);
            lease["metadata"]["resourceVersion"] = json!(rv);
        }

        async fn handle(self, req: Request<kube::client::Body>) -> Response<Full<Bytes>> {
            let mode = self.0.lock().unwrap().mode;
            match mode {
                Mode::Up => {}
                Mode::Failing => return failure(500, "InternalError"),
                Mode::Hanging => std::future::pending().await,
            }
            let (parts, body) = req.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let mut s = self.0.lock().unwrap();
            match parts.method {
                Method::GET => match &s.lease {
                    Some(l) => answer(200, l),
                    None => failure(404, "NotFound"),
                },
                Method::POST if s.lease.is_some() => failure(409, "AlreadyExists"),
                Method::POST | Method::PUT => {
                    let mut obj: Value = serde_json::from_slice(&body).unwrap();
                    if parts.method == Method::PUT {
                        let Some(current) = &s.lease else { return failure(404, "NotFound") };
                        if obj["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                            return failure(409, "Conflict");
                        }
                    }
                    s.rv += 1;
                    obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                    s.lease = Some(obj.clone());
                    answer(if parts.method == Method::POST { 201 } else { 200 }, &obj)
                }
                _ => failure(405, "MethodNotAllowed"),
            }
        }
    }

    /// One connection to the fake: once `silent`, its requests never get an answer.
    #[derive(Clone)]
    struct Line {
        fake: Fake,
        silent: Arc<std::sync::atomic::AtomicBool>,
    }

    impl tower::Service<Request<kube::client::Body>> for Line {
        type Response = Response<Full<Bytes>>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
            let (fake, silent) = (self.fake.clone(), self.silent.load(std::sync::atomic::Ordering::SeqCst));
            Box::pin(async move {
                if silent {
                    std::future::pending::<()>().await;
                }
                Ok(fake.handle(req).await)
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_connection_goes_silent_renews_on_a_new_one() {
        let fake = Fake::default();
        let first = Line { fake: fake.clone(), silent: Default::default() };
        let connects = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = connects.clone();
        let reconnect_to = fake.clone();
        let mut a = LeaderElector::new(Client::new(first.clone(), "default"), ElectionConfig::new("ns", "a")).reconnecting(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Client::new(Line { fake: reconnect_to.clone(), silent: Default::default() }, "default"))
        });
        a.acquire().await;
        first.silent.store(true, std::sync::atomic::Ordering::SeqCst);
        let held = tokio::time::timeout(Duration::from_secs(60), a.hold()).await;
        assert!(held.is_err(), "still leading a minute later, not {:?}", held.map(|l| l.to_string()));
        assert_eq!(connects.load(std::sync::atomic::Ordering::SeqCst), 1, "one new connection, after the first unanswered renewal");
        assert_eq!(fake.holder().as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_whose_connection_goes_silent_reads_on_a_new_one() {
        let fake = Fake::default();
        let first = Line { fake: fake.clone(), silent: Arc::new(true.into()) };
        let reconnect_to = fake.clone();
        let mut b = LeaderElector::new(Client::new(first, "default"), ElectionConfig::new("ns", "b"))
            .reconnecting(move || Ok(Client::new(Line { fake: reconnect_to.clone(), silent: Default::default() }, "default")));
        let t = Instant::now();
        tokio::time::timeout(Duration::from_secs(60), b.acquire()).await.expect("acquired on the new connection");
        // One unanswered attempt, one jittered retry period (2-2.4 s), then the new connection.
        let cfg = ElectionConfig::new("ns", "b");
        let (least, most) = (cfg.attempt_timeout() + cfg.retry_period, cfg.attempt_timeout() + cfg.retry_period.mul_f64(1.2));
        assert!((least..=most).contains(&t.elapsed()), "{:?}", t.elapsed());
        assert_eq!(fake.holder().as_deref(), Some("b"));
    }

    fn elector(fake: &Fake, who: &str) -> LeaderElector {
        LeaderElector::new(Client::new(Line { fake: fake.clone(), silent: Default::default() }, "default"), ElectionConfig::new("ns", who))
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_renew_stops_at_the_renew_deadline() {
        for mode in [Mode::Failing, Mode::Hanging] {
            let fake = Fake::default();
            let mut a = elector(&fake, "a");
            a.acquire().await;
            assert_eq!(fake.holder().as_deref(), Some("a"));
            let acquired = Instant::now();
            fake.set_mode(mode);
            let lost = a.hold().await;
            assert!(matches!(lost, Lost::RenewDeadline(..)), "{mode:?}: {lost}");
            assert_eq!(acquired.elapsed(), Duration::from_secs(10), "{mode:?}: stops exactly at the renew deadline");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_lease_was_taken_stops_at_its_next_renewal() {
        let fake = Fake::default();
        let mut a = elector(&fake, "a");
        a.acquire().await;
        let t = Instant::now();
        fake.steal("intruder");
        let lost = a.hold().await;
        assert!(matches!(&lost, Lost::TakenBy(_, h) if h == "intruder"), "{lost}");
        assert_eq!(t.elapsed(), Duration::from_secs(2), "noticed at the next renewal");
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_takes_over_only_after_the_lease_expires() {
        let fake = Fake::default();
        let (mut a, mut b) = (elector(&fake, "a"), elector(&fake, "b"));
        let start = Instant::now();
        a.acquire().await;
        // A renews at 2 s and 4 s and crashes at 5 s; B tries all along.
        let crash = async {
            assert!(tokio::time::timeout(Duration::from_secs(5), a.hold()).await.is_err(), "A keeps the lease while alive");
        };
        let take_over = async {
            b.acquire().await;
            start.elapsed()
        };
        let ((), took) = tokio::join!(crash, take_over);
        assert_eq!(fake.holder().as_deref(), Some("b"));
        // B saw A's last renewal (4 s) at one of its reads every 2-2.4 s, then needs 15 s of silence.
        assert!(took >= Duration::from_secs(19), "took over while the lease was valid: {took:?}");
        assert!(took <= Duration::from_secs(4 + 15 + 5), "slow take-over: {took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_lease_is_taken_at_once() {
        let fake = Fake::default();
        let (mut a, mut b) = (elector(&fake, "a"), elector(&fake, "b"));
        a.acquire().await;
        a.release().await;
        assert_eq!(fake.holder(), None);
        let t = Instant::now();
        b.acquire().await;
        assert_eq!(t.elapsed(), Duration::ZERO);
        assert_eq!(fake.holder().as_deref(), Some("b"));
        // Releasing a lease someone else holds changes nothing.
        a.release().await;
        assert_eq!(fake.holder().as_deref(), Some("b"));
    }
}
