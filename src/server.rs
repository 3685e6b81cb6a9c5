//! The two small HTTP servers Kruise users expect: `/metrics` on `--metrics-addr`, and `/healthz`
//! and `/readyz` on `--health-probe-addr` (controller-runtime's paths).
//!
//! - `/healthz` answers 200 while the process serves at all (liveness).
//! - `/readyz` answers 200 once every cache the reconciler reads has finished its first list,
//!   and 503 before. A standby of leader election syncs its caches too (so it can take over at
//!   once), and is ready when they are: a healthy standby is ready, which lets a rolling update of
//!   the Deployment proceed while the old leader still leads.
//! - While the apiserver sends this operator conversions (the CRD converts through its webhook),
//!   `/readyz` means "can convert", Kruise's rule: 200 once the apiserver trusts the certificate
//!   it serves, leader, standby or standing by for Kruise alike. Caches are not waited for: with
//!   CloneSets stored as v1beta1 the operator's own v1alpha1 list converts through its own
//!   Service, which sends nothing to a pod that is not ready. The same holds while the CRD still
//!   sends conversions to Kruise 2.0's manager and this replica has published its CA for
//!   `migrate` to switch to: the Service must have ready pods before the switch.
//! - Otherwise, while a live Kruise manager keeps this operator from reconciling, `/readyz`
//!   answers 503 and its body says so (see `kruise_guard`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::config::ListenAddr;
use crate::metrics::{self, Metrics};

/// What `/readyz` reports; set by the controller.
#[derive(Debug, Default)]
pub struct Health {
    caches_synced: AtomicBool,
    /// Why the operator stands by instead of reconciling, if it does.
    standing_by: Mutex<Option<String>>,
    /// Why the conversion webhook cannot convert yet, if it cannot.
    conversion: Mutex<Option<String>>,
    /// Whether the apiserver sends conversions here (the CRD converts through a webhook), or
    /// will once `migrate` switches the CRD to this replica's published CA.
    converting: AtomicBool,
}

impl Health {
    pub(crate) fn set_caches_synced(&self, synced: bool) {
        self.caches_synced.store(synced, Ordering::Release);
    }

    /// Marks the operator as standing by (`Some(why)`) or not (`None`).
    pub(crate) fn set_standing_by(&self, why: Option<String>) {
        *self.standing_by.lock().unwrap_or_else(|e| e.into_inner()) = why;
    }

    /// Marks the conversion webhook as unable to convert (`Some(why)`) or able (`None`).
    pub(crate) fn set_conversion(&self, why: Option<String>) {
        *self.conversion.lock().unwrap_or_else(|e| e.into_inner()) = why;
    }

    /// Marks whether the apiserver sends conversions to this operator's webhook.
    pub(crate) fn set_converting(&self, converting: bool) {
        self.converting.store(converting, Ordering::Release);
    }

    /// `Ok` when ready, else why not.
    pub(crate) fn readiness(&self) -> Result<(), String> {
        if let Some(why) = self.conversion.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            return Err(why.clone());
        }
        if self.converting.load(Ordering::Acquire) {
            return Ok(());
        }
        if !self.caches_synced.load(Ordering::Acquire) {
            return Err("caches not synced".into());
        }
        self.standing_by.lock().unwrap_or_else(|e| e.into_inner()).clone().map_or(Ok(()), Err)
    }
}

/// Binds `addr` (an empty host listens on every interface: IPv6 and IPv4 where the host has
/// IPv6, IPv4 only otherwise).
pub async fn bind(addr: &ListenAddr) -> std::io::Result<TcpListener> {
    match addr {
        ListenAddr::Disabled => Err(std::io::Error::other("listener disabled")),
        ListenAddr::Any { port } => match TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, *port)).await {
            Ok(l) => Ok(l),
            Err(_) => TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, *port)).await,
        },
        ListenAddr::Host { host, port } => TcpListener::bind((host.as_str(), *port)).await,
    }
}

type Routes = Arc<dyn Fn(&Method, &str) -> Response<Full<Bytes>> + Send + Sync>;

pub(crate) fn text(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(body.into()));
    *res.status_mut() = status;
    res.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    res
}

pub(crate) const PLAIN: &str = "text/plain; charset=utf-8";

/// Serves `GET /metrics` until the task is dropped.
pub async fn serve_metrics(listener: TcpListener, metrics: Arc<Metrics>) {
    let routes: Routes = Arc::new(move |method, path| match (method, path) {
        (&Method::GET | &Method::HEAD, "/metrics") => text(StatusCode::OK, metrics::CONTENT_TYPE, metrics.encode()),
        _ => text(StatusCode::NOT_FOUND, PLAIN, "not found\n"),
    });
    serve(listener, routes).await
}

/// Serves `GET /healthz` and `GET /readyz` until the task is dropped.
pub async fn serve_health(listener: TcpListener, health: Arc<Health>) {
    let routes: Routes = Arc::new(move |method, path| match (method, path) {
        (&Method::GET | &Method::HEAD, "/healthz" | "/livez") => text(StatusCode::OK, PLAIN, "ok\n"),
        (&Method::GET | &Method::HEAD, "/readyz") => match health.readiness() {
            Ok(()) => text(StatusCode::OK, PLAIN, "ok\n"),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, format!("{why}\n")),
        },
        _ => text(StatusCode::NOT_FOUND, PLAIN, "not found\n"),
    });
    serve(listener, routes).await
}

async fn serve(listener: TcpListener, routes: Routes) {
    loop {
        let (stream, peer): (_, SocketAddr) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let routes = routes.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let res = routes(req.method(), req.uri().path());
                async move { Ok::<_, Infallible>(res) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "metrics/health connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::Health;

    #[test]
    fn a_standby_for_kruise_is_ready_only_when_it_must_convert_and_can() {
        let health = Health::default();
        health.set_caches_synced(true);
        health.set_standing_by(Some("standing by: Kruise's manager".into()));
        assert_eq!(health.readiness(), Err("standing by: Kruise's manager".into()));
        health.set_caches_synced(false);
        health.set_converting(true);
        assert_eq!(health.readiness(), Ok(()), "caches do not matter to a standby");
        health.set_conversion(Some("conversion webhook: no certificate yet".into()));
        assert_eq!(health.readiness(), Err("conversion webhook: no certificate yet".into()));
        health.set_conversion(None);
        health.set_converting(false);
        health.set_standing_by(None);
        assert_eq!(health.readiness(), Err("caches not synced".into()), "without conversions, a leader-to-be waits for its caches");
        health.set_caches_synced(true);
        assert_eq!(health.readiness(), Ok(()));
    }

    #[test]
    fn a_converting_replica_is_ready_when_it_can_convert_before_its_caches_sync() {
        // With CloneSets stored as v1beta1 its caches fill through its own conversions, which
        // the Service sends only to ready pods: waiting for them would never end.
        let health = Health::default();
        health.set_converting(true);
        health.set_conversion(Some("conversion webhook: its CA is not in the CRD's caBundle yet".into()));
        assert!(health.readiness().is_err());
        health.set_conversion(None);
        assert_eq!(health.readiness(), Ok(()));
        health.set_caches_synced(true);
        assert_eq!(health.readiness(), Ok(()));
    }
}
