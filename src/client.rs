//! The Kubernetes client: kube's default stack plus what client-go has and kube lacks — an
//! optional client-side token bucket (Kruise's `--rest-config-qps` / `--rest-config-burst`, off
//! unless given: the apiserver's Priority and Fairness is the limit, see [`RateLimit::from_flags`]),
//! retries of 429/503/504 that honour `Retry-After`, a count of every request by status code,
//! host and method (`rest_client_requests_total`), and a User-Agent naming the operator
//! ([`USER_AGENT`]) on every request.
//!
//! The stack, outermost first:
//!
//! ```text
//! Client (kube's own Buffer) → PodsInProtobuf (pod_cache/protobuf.rs) → Retry (429/503/504, server_retry)
//!   → Throttle (token bucket + request metric) → ConcurrencyLimit ([`MAX_REQUESTS_IN_FLIGHT`])
//!   → Timed (request latency) → Buffer → the transport (transport.rs: kube's stack over HTTP/2
//!   with pings, no retry)
//! ```
//!
//! kube's retry normally sits inside its stack, below anything added with
//! `ClientBuilder::with_layer`; it is moved above the throttle so that every attempt, retries
//! included, waits for a token and is counted, as in client-go. Every request takes one token
//! before it is sent: gets, lists, writes, and the initial request of each watch. A watch's
//! response streams for minutes on that one request, so a long-running watch counts once (per
//! (re)connection), exactly like client-go's rate limiter.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::retry::RetryPolicy;
use tokio::time::Instant;
use tower::buffer::BufferLayer;
use tower::limit::ConcurrencyLimitLayer;
use tower::retry::RetryLayer;
use tower::{Layer, Service, ServiceExt as _};

use crate::metrics::Metrics;
use crate::pod_cache::protobuf::PodsInProtobufLayer;

/// Requests per second and burst of one client's token bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    pub qps: f64,
    pub burst: u32,
}

impl Default for RateLimit {
    /// Kruise's defaults.
    fn default() -> Self {
        Self { qps: 30.0, burst: 50 }
    }
}

impl RateLimit {
    /// The client-side limit of `--rest-config-qps` / `--rest-config-burst`.
    ///
    /// Neither flag given: no client-side limit. The apiserver's API Priority and Fairness (on by
    /// default since Kubernetes 1.20) queues or rejects with 429 + `Retry-After` what it cannot
    /// take, and the client retries those; this is what SIG API Machinery recommends and what
    /// controller-runtime does since kubernetes-sigs/controller-runtime#3119. Either flag given: Kruise's meaning, a token bucket,
    /// the other flag keeping Kruise's default (30 / 50). As in client-go, a negative QPS turns
    /// the bucket off, a QPS of 0 means client-go's default 5, a burst of 0 its default 10.
    /// A negative burst (which client-go would turn into a bucket that never serves) is refused
    /// when the flags are parsed.
    pub fn from_flags(qps: Option<i32>, burst: Option<i32>) -> Option<RateLimit> {
        if qps.is_none() && burst.is_none() {
            return None;
        }
        let kruise = RateLimit::default();
        let qps = match qps {
            Some(q) if q < 0 => return None,
            Some(0) => 5.0,
            Some(q) => f64::from(q),
            None => kruise.qps,
        };
        let burst = match burst {
            Some(0) => 10,
            Some(b) => b.unsigned_abs(),
            None => kruise.burst,
        };
        Some(RateLimit { qps, burst })
    }
}

/// A token bucket as in client-go (golang.org/x/time/rate): it holds at most `burst` tokens,
/// starts full, and refills at `qps` tokens per second. A request that finds it empty reserves
/// the next token and waits for it, so waiting requests are served in arrival order and, over
/// any interval of length `t`, at most `burst + qps * t` requests start.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    limit: RateLimit,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Tokens available; negative when requests are waiting for tokens not yet refilled.
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub(crate) fn new(limit: RateLimit) -> Self {
        let limit = RateLimit { qps: limit.qps.max(f64::MIN_POSITIVE), burst: limit.burst.max(1) };
        Self { limit, state: Mutex::new(BucketState { tokens: f64::from(limit.burst), last: Instant::now() }) }
    }

    /// Takes one token at `now`, returning how long to wait before it may be used.
    pub(crate) fn reserve(&self, now: Instant) -> Duration {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // Callers read the clock before taking the lock, so `now` may be a hair behind `last`:
        // the bucket's time never goes back, and such a caller waits the difference too.
        let at = s.last.max(now);
        let elapsed = at.duration_since(s.last);
        s.last = at;
        s.tokens = (s.tokens + elapsed.as_secs_f64() * self.limit.qps).min(f64::from(self.limit.burst)) - 1.0;
        let deficit = if s.tokens >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-s.tokens / self.limit.qps) };
        at.duration_since(now) + deficit
    }

    /// Waits for a token.
    pub(crate) async fn acquire(&self) {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The User-Agent of every request, `<binary>/<version>` as client-go starts its own. The
/// apiserver names the field manager of every non-apply write after its first segment, so
/// managedFields show `cloneset-operator` (not `unknown`), as do audit logs.
pub(crate) const USER_AGENT: &str = concat!("cloneset-operator/", env!("CARGO_PKG_VERSION"));

/// A [`Layer`] that makes every request wait for a token (when there is a bucket) and counts it
/// in `rest_client_requests_total`.
#[derive(Clone)]
pub(crate) struct ThrottleLayer {
    bucket: Option<Arc<TokenBucket>>,
    metrics: Arc<Metrics>,
    /// The apiserver's `host:port` (requests here carry only a path; kube adds the host below).
    host: Arc<str>,
}

impl ThrottleLayer {
    pub(crate) fn new(limit: Option<RateLimit>, metrics: Arc<Metrics>, host: &str) -> Self {
        Self { bucket: limit.map(|l| Arc::new(TokenBucket::new(l))), metrics, host: host.into() }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle { inner, bucket: self.bucket.clone(), metrics: self.metrics.clone(), host: self.host.clone() }
    }
}

/// The service [`ThrottleLayer`] builds. `inner` must be cheap to clone (a `Buffer`).
#[derive(Clone)]
pub(crate) struct Throttle<S> {
    inner: S,
    bucket: Option<Arc<TokenBucket>>,
    metrics: Arc<Metrics>,
    host: Arc<str>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Throttle<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    ReqBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    /// Always ready: the inner service's readiness is awaited after the token, inside the future,
    /// so a waiting request holds no slot of the buffer below.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let bucket = self.bucket.clone();
        let metrics = self.metrics.clone();
        let host = self.host.clone();
        Box::pin(async move {
            if let Some(bucket) = bucket {
                bucket.acquire().await;
            }
            let method = req.method().clone();
            let path = req.uri().path().to_string();
            let res = inner.oneshot(req).await;
            metrics.request(&host, &method, &path, res.as_ref().ok().map(|r| r.status()));
            res
        })
    }
}

/// Times each request below the in-flight limit, for `rest_client_request_duration_seconds`:
/// what the connection and the apiserver take, without the wait for a slot. Watches are left
/// out, as client-go leaves them out: their responses stream for minutes.
pub(crate) struct TimedLayer {
    metrics: Arc<Metrics>,
    host: Arc<str>,
}

impl<S> Layer<S> for TimedLayer {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed { inner, metrics: self.metrics.clone(), host: self.host.clone() }
    }
}

/// The service [`TimedLayer`] builds.
#[derive(Clone)]
pub(crate) struct Timed<S> {
    inner: S,
    metrics: Arc<Metrics>,
    host: Arc<str>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Timed<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let watch = req.uri().query().is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        let method = req.method().clone();
        let (metrics, host) = (self.metrics.clone(), self.host.clone());
        let start = Instant::now();
        let response = self.inner.call(req);
        Box::pin(async move {
            let res = response.await;
            if !watch {
                metrics.request_latency(&host, &method, start.elapsed().as_secs_f64());
            }
            res
        })
    }
}

/// Requests of one client waiting for their response at once: enough to keep an apiserver busy,
/// few enough that one slow-start batch of pod creations cannot flood it (over HTTP/1.1, where an
/// apiserver offers no HTTP/2, each would also hold a pooled connection with its buffers). A
/// watch holds its slot only until its response starts streaming.
pub(crate) const MAX_REQUESTS_IN_FLIGHT: usize = 32;

/// Builds a client for `config` whose requests all pass through its own token bucket, if
/// `limit` is set. With `protobuf_pods`, the pod cache's own lists and watches and the answers to
/// pod writes are read in protobuf ([`PodsInProtobufLayer`], outermost: every retry asks for
/// protobuf too).
///
/// Each call makes a separate bucket, like each client-go client built from a rest.Config: the
/// leader-election client gets its own, so lease renewals never queue behind a burst of pod
/// creations (and both count in the same `rest_client_requests_total`).
pub fn build(mut config: kube::Config, limit: Option<RateLimit>, metrics: Arc<Metrics>, protobuf_pods: bool) -> kube::Result<Client> {
    let retry = std::mem::replace(&mut config.default_retry, false);
    if !config.headers.iter().any(|(name, _)| name == http::header::USER_AGENT) {
        config.headers.push((http::header::USER_AGENT, http::HeaderValue::from_static(USER_AGENT)));
    }
    let host = apiserver_host(&config.cluster_url);
    let builder = crate::transport::client_builder(&config)?
        // Makes kube's boxed stack cloneable, so a request can wait for its token first.
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&TimedLayer { metrics: metrics.clone(), host: host.as_str().into() })
        .with_layer(&ConcurrencyLimitLayer::new(MAX_REQUESTS_IN_FLIGHT))
        .with_layer(&ThrottleLayer::new(limit, metrics, &host));
    let pods = PodsInProtobufLayer { enabled: protobuf_pods };
    Ok(if retry {
        builder.with_layer(&RetryLayer::new(RetryPolicy::server_retry())).with_layer(&pods).build()
    } else {
        builder.with_layer(&pods).build()
    })
}

/// client-go's `host` label: the URL's host and port as written (`req.URL.Host`).
pub fn apiserver_host(url: &http::Uri) -> String {
    url.authority().map_or_else(String::new, |a| a.as_str().rsplit('@').next().unwrap_or_default().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_serves_the_burst_then_qps() {
        let b = TokenBucket::new(RateLimit { qps: 5.0, burst: 3 });
        let t0 = Instant::now();
        assert_eq!([b.reserve(t0), b.reserve(t0), b.reserve(t0)], [Duration::ZERO; 3]);
        // Empty: the next requests wait 200 ms, 400 ms, ... in arrival order.
        assert_eq!(b.reserve(t0), ms(200));
        assert_eq!(b.reserve(t0), ms(400));
        // Half a second later 2.5 tokens have come back and two were promised: 100 ms more for the next.
        assert_eq!(b.reserve(t0 + ms(500)), ms(100));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_bucket_refills_only_up_to_burst() {
        let b = TokenBucket::new(RateLimit { qps: 5.0, burst: 2 });
        let t0 = Instant::now();
        b.reserve(t0);
        b.reserve(t0);
        let later = t0 + Duration::from_secs(60);
        assert_eq!([b.reserve(later), b.reserve(later)], [Duration::ZERO; 2]);
        assert_eq!(b.reserve(later), ms(200));
    }

    /// The property the e2e test relies on: in any window of length t at most burst + qps·t
    /// requests start, however they arrive.
    #[tokio::test(start_paused = true)]
    async fn starts_in_any_window_are_bounded() {
        let limit = RateLimit { qps: 5.0, burst: 5 };
        let b = TokenBucket::new(limit);
        let t0 = Instant::now();
        let mut starts = Vec::new();
        // 100 requests arriving in irregular clumps over 4 s (some reading the clock late).
        let mut arrivals: Vec<Instant> = (0..100u64).map(|i| t0 + ms((i * 37) % 4000)).collect();
        arrivals.sort();
        arrivals.swap(10, 11);
        for arrival in arrivals {
            starts.push(arrival + b.reserve(arrival));
        }
        starts.sort();
        for (i, a) in starts.iter().enumerate() {
            for (j, z) in starts.iter().enumerate().skip(i) {
                let t = z.duration_since(*a).as_secs_f64();
                let n = (j - i + 1) as f64;
                assert!(n <= f64::from(limit.burst) + limit.qps * t + 1e-9, "{n} starts in {t}s");
            }
        }
    }

    #[test]
    fn the_host_label_is_the_url_host_and_port() {
        assert_eq!(apiserver_host(&"https://10.96.0.1:443".parse().unwrap()), "10.96.0.1:443");
        assert_eq!(apiserver_host(&"https://kubernetes.default.svc".parse().unwrap()), "kubernetes.default.svc");
        assert_eq!(apiserver_host(&"https://[::1]:6443/".parse().unwrap()), "[::1]:6443");
    }

    #[test]
    fn the_user_agent_names_the_operator_first() {
        // The apiserver's field manager for non-apply writes is the User-Agent up to its first '/'.
        assert_eq!(USER_AGENT.split('/').next(), Some("cloneset-operator"));
        assert!(http::HeaderValue::from_str(USER_AGENT).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_waits_for_tokens_and_counts_requests() {
        let metrics = Arc::new(Metrics::new());
        let inner = tower::service_fn(|_req: Request<()>| async { Ok::<_, std::convert::Infallible>(Response::new(())) });
        let mut svc = ThrottleLayer::new(Some(RateLimit { qps: 2.0, burst: 1 }), metrics.clone(), "127.0.0.1:6443").layer(inner);
        let start = Instant::now();
        for _ in 0..3 {
            svc.ready().await.unwrap().call(Request::new(())).await.unwrap();
        }
        assert_eq!(Instant::now() - start, Duration::from_secs(1), "1 from the burst, then 2 at 2/s");
        let text = metrics.encode();
        assert!(
            text.contains(
                "rest_client_requests_total{code=\"200\",host=\"127.0.0.1:6443\",method=\"GET\",resource=\"\",subresource=\"\"} 3"
            ),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn requests_are_timed_from_their_slot_to_their_answer_and_watches_are_not() {
        let metrics = Arc::new(Metrics::new());
        let apiserver = tower::service_fn(|_req: Request<()>| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, std::convert::Infallible>(Response::new(()))
        });
        let mut svc = TimedLayer { metrics: metrics.clone(), host: "127.0.0.1:6443".into() }.layer(apiserver);
        for uri in ["/api/v1/pods", "/api/v1/pods?watch=true&resourceVersion=1"] {
            let req = Request::builder().method("POST").uri(uri).body(()).unwrap();
            svc.ready().await.unwrap().call(req).await.unwrap();
        }
        let text = metrics.encode();
        let series = "rest_client_request_duration_seconds_bucket{le=\"0.5\",verb=\"POST\",host=\"127.0.0.1:6443\"}";
        assert!(text.contains(&format!("{series} 1")), "one request of 300 ms, the watch not counted:\n{text}");
        assert!(
            text.contains("rest_client_request_duration_seconds_bucket{le=\"0.25\",verb=\"POST\",host=\"127.0.0.1:6443\"} 0"),
            "{text}"
        );
    }

    /// With no client-side limit, the apiserver's 429s are what slows the operator down: they
    /// are retried after the server's `Retry-After`, and every attempt is counted.
    #[tokio::test(start_paused = true)]
    async fn a_429_is_retried_after_retry_after_and_counted() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let metrics = Arc::new(Metrics::new());
        let calls = Arc::new(AtomicU32::new(0));
        let seen = calls.clone();
        let apiserver = tower::service_fn(move |_req: Request<kube::client::Body>| {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            async move {
                let status = if n < 2 { http::StatusCode::TOO_MANY_REQUESTS } else { http::StatusCode::CREATED };
                Ok::<_, tower::BoxError>(Response::builder().status(status).header("Retry-After", "1").body(()).unwrap())
            }
        });
        let throttle = ThrottleLayer::new(None, metrics.clone(), "127.0.0.1:6443").layer(apiserver);
        let mut svc = RetryLayer::new(RetryPolicy::server_retry()).layer(throttle);
        let start = Instant::now();
        let req = Request::post("/api/v1/namespaces/a/pods").body(kube::client::Body::from(b"{}".to_vec())).unwrap();
        let res = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(res.status(), http::StatusCode::CREATED);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(Instant::now() - start, Duration::from_secs(2), "two waits of Retry-After: 1s");
        let text = metrics.encode();
        for (code, n) in [("429", 2), ("201", 1)] {
            let line = format!(
                "rest_client_requests_total{{code=\"{code}\",host=\"127.0.0.1:6443\",method=\"POST\",resource=\"pods\",subresource=\"\"}} {n}"
            );
            assert!(text.contains(&line), "{line}\n{text}");
        }
    }

    /// No limit given (the default): a burst far above Kruise's 50 goes out without waiting.
    #[tokio::test(start_paused = true)]
    async fn without_a_limit_no_request_waits() {
        let metrics = Arc::new(Metrics::new());
        let inner = tower::service_fn(|_req: Request<()>| async { Ok::<_, std::convert::Infallible>(Response::new(())) });
        let mut svc = ThrottleLayer::new(None, metrics, "127.0.0.1:6443").layer(inner);
        let start = Instant::now();
        for _ in 0..500 {
            svc.ready().await.unwrap().call(Request::new(())).await.unwrap();
        }
        assert_eq!(Instant::now(), start);
    }
}
