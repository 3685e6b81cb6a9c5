//! The conversion webhook: every replica serves `POST /convert` over TLS, leader or not, so
//! reads and writes through either CloneSet version keep working while one replica restarts.
//!
//! Certificates come from cert-manager (`--webhook-cert-dir`, reloaded when the files change;
//! cert-manager's CA injector keeps the CRD's `caBundle`) or, by default, from the replica itself
//! (`certs.rs`: its own CA, added to the `caBundle` by `ca_bundle.rs`, rotated before expiry).
//! The replica is ready to convert once the apiserver trusts the certificate it serves: its CA
//! is in the bundle, or cert-manager's files are loaded. While the CRD sends conversions to
//! another server (Kruise 2.0's), it is ready once its CA is published for `migrate`'s switch.

pub mod ca_bundle;
pub mod certs;
pub mod review;

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};

use crate::server::{Health, PLAIN, text};

/// Where the webhook's certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// This replica's own CA, added to the `caBundle` of the CRD `crd`.
    SelfSigned { hosts: Vec<String>, validity: Duration, crd: String, identity: String },
    /// `tls.crt` and `tls.key` in this directory (a mounted cert-manager Secret).
    Files(PathBuf),
}

/// The certificate served now; swapped in place on rotation.
#[derive(Debug, Default)]
struct CertSlot(RwLock<Option<Arc<CertifiedKey>>>);

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl CertSlot {
    fn set(
        &self,
        chain: Vec<rustls_pki_types::CertificateDer<'static>>,
        key: &rustls_pki_types::PrivateKeyDer<'static>,
    ) -> anyhow::Result<()> {
        let signing = rustls::crypto::ring::sign::any_supported_type(key)?;
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(CertifiedKey::new(chain, signing)));
        Ok(())
    }
}

/// Serves conversions on `listener` and keeps its certificate current, until dropped.
pub async fn run(listener: TcpListener, source: CertSource, client: kube::Client, health: Arc<Health>) {
    let slot = Arc::new(CertSlot::default());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_cert_resolver(slot.clone());
    let acceptor = TlsAcceptor::from(Arc::new(config));
    health.set_conversion(Some("conversion webhook: no certificate yet".into()));
    tokio::spawn(serve(listener, acceptor));
    match source {
        CertSource::Files(dir) => watch_files(dir, slot, health).await,
        CertSource::SelfSigned { hosts, validity, crd, identity } => {
            let bundle = ca_bundle::CaBundle::new(client, crd, hosts.clone());
            self_signed(hosts, validity, identity, bundle, slot, health).await
        }
    }
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// How long a new CA sits in the bundle before its certificate is served: the apiserver reads
/// the CRD from its watch, a moment after our write.
const BUNDLE_SETTLE: Duration = Duration::from_secs(5);

async fn self_signed(
    hosts: Vec<String>,
    validity: Duration,
    identity: String,
    bundle: ca_bundle::CaBundle,
    slot: Arc<CertSlot>,
    health: Arc<Health>,
) {
    let check = (validity / 20).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut serving: Option<certs::Issued> = None;
    let mut next: Option<(certs::Issued, Option<i64>)> = None;
    let mut failures = 0u32;
    loop {
        let now = now();
        if next.is_none() && serving.as_ref().is_none_or(|s| now >= s.renew_at()) {
            match certs::issue(&hosts, now, validity, &identity) {
                Ok(issued) => next = Some((issued, None)),
                Err(e) => tracing::error!(error = %e, "conversion webhook: cannot make a certificate"),
            }
        }
        let ours: Vec<&str> = serving.iter().chain(next.as_ref().map(|(n, _)| n)).map(|c| c.ca_pem.as_str()).collect();
        let result = bundle.ensure(&ours, now).await;
        match &result {
            Ok(ca_bundle::Conversion::None) => {
                // The CRD converts nothing through a webhook: no conversion waits on us.
                failures = 0;
                health.set_converting(false);
                health.set_conversion(None);
            }
            Ok(conversion @ (ca_bundle::Conversion::Here(current) | ca_bundle::Conversion::Elsewhere(current))) => {
                failures = 0;
                // Elsewhere: ready for `migrate` to send conversions here (Kruise's rule: a
                // replica that can convert is ready, leader or not).
                health.set_converting(true);
                if let Some((issued, seen)) = next.as_mut()
                    && certs::contains(current.as_bytes(), &issued.ca_pem)
                {
                    let seen_at = *seen.get_or_insert(now);
                    // The first certificate is served at once: nothing is served before it.
                    if serving.is_none() || now - seen_at >= BUNDLE_SETTLE.as_secs() as i64 {
                        let issued = next.take().map(|(i, _)| i).expect("checked above");
                        match slot.set(vec![issued.cert_der.clone()], &issued.key()) {
                            Ok(()) => {
                                tracing::info!(not_after = issued.not_after, "conversion webhook: serving a new certificate");
                                serving = Some(issued);
                            }
                            Err(e) => tracing::error!(error = %e, "conversion webhook: cannot load its certificate"),
                        }
                    }
                }
                let trusted = serving.as_ref().is_some_and(|s| certs::contains(current.as_bytes(), &s.ca_pem));
                let why = match conversion {
                    ca_bundle::Conversion::Elsewhere(_) => "its CA is not published on the CRD yet",
                    _ => "its CA is not in the CRD's caBundle yet",
                };
                health.set_conversion((!trusted).then(|| format!("conversion webhook: {why}")));
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, failures, "conversion webhook: cannot update the CRD's caBundle; retrying");
                if serving.is_none() {
                    health.set_conversion(Some(format!("conversion webhook: cannot update the CRD's caBundle: {e}")));
                }
            }
        }
        let wait = match (&result, &next) {
            (Err(_), _) => Duration::from_millis(200 * 2u64.pow(failures.min(8))).min(check),
            (Ok(ca_bundle::Conversion::Here(_) | ca_bundle::Conversion::Elsewhere(_)), Some(_)) => Duration::from_secs(1),
            _ => check,
        };
        tokio::time::sleep(wait).await;
    }
}

async fn watch_files(dir: PathBuf, slot: Arc<CertSlot>, health: Arc<Health>) {
    // cert-manager keeps the caBundle and nothing here reads the CRD: assume it converts.
    health.set_converting(true);
    let mut loaded: Option<(Vec<u8>, Vec<u8>)> = None;
    loop {
        let read = match (tokio::fs::read(dir.join("tls.crt")).await, tokio::fs::read(dir.join("tls.key")).await) {
            (Ok(c), Ok(k)) => Ok((c, k)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        match read {
            Ok(pair) if loaded.as_ref() != Some(&pair) => match certs::read_pem_pair(&pair.0, &pair.1) {
                Ok((chain, key)) => match slot.set(chain, &key) {
                    Ok(()) => {
                        tracing::info!(dir = %dir.display(), "conversion webhook: loaded its certificate");
                        health.set_conversion(None);
                        loaded = Some(pair);
                    }
                    Err(e) => tracing::error!(error = %e, "conversion webhook: cannot use the key in tls.key"),
                },
                Err(e) => tracing::error!(dir = %dir.display(), error = %e, "conversion webhook: cannot read its certificate"),
            },
            Ok(_) => {}
            Err(e) if loaded.is_none() => {
                health.set_conversion(Some(format!("conversion webhook: no certificate in {}: {e}", dir.display())));
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// Largest ConversionReview read: the apiserver sends one object per review for reads and
/// writes, whole lists for list calls.
const MAX_BODY: usize = 64 << 20;

async fn serve(listener: TcpListener, acceptor: TlsAcceptor) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "conversion webhook: accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "conversion webhook: TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "conversion webhook: TLS handshake timed out"),
            };
            let svc = hyper::service::service_fn(|req: Request<Incoming>| async move { Ok::<_, Infallible>(handle(req).await) });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(tls), svc);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "conversion webhook connection ended with an error");
            }
        });
    }
}

async fn handle(req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::POST || req.uri().path() != crate::api::crd::CONVERSION_PATH {
        return text(StatusCode::NOT_FOUND, PLAIN, "not found\n");
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return text(StatusCode::BAD_REQUEST, PLAIN, format!("reading the request: {e}\n")),
    };
    // Conversion is CPU work on a request's objects: off the reactor for large lists.
    let answer = tokio::task::spawn_blocking(move || review::answer(&body)).await;
    match answer {
        Ok(Ok(review)) => text(StatusCode::OK, "application/json", serde_json::to_vec(&review).unwrap_or_default()),
        Ok(Err(message)) => text(StatusCode::BAD_REQUEST, PLAIN, format!("{message}\n")),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, PLAIN, format!("conversion failed: {e}\n")),
    }
}
