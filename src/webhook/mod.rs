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
mod rotation;

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
    health.set_conversion(Some("conversion webhook: no certificate yet".into()));
    tokio::spawn(serve(listener, acceptor(slot.clone())));
    match source {
        CertSource::Files(dir) => watch_files(dir, slot, health).await,
        CertSource::SelfSigned { hosts, validity, crd, identity } => {
            let bundle = ca_bundle::CaBundle::new(client, crd, hosts.clone());
            self_signed(hosts, validity, identity, bundle, slot, health).await
        }
    }
}

/// TLS with whatever certificate `slot` holds at each handshake.
fn acceptor(slot: Arc<CertSlot>) -> TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_cert_resolver(slot);
    TlsAcceptor::from(Arc::new(config))
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

async fn self_signed(
    hosts: Vec<String>,
    validity: Duration,
    identity: String,
    bundle: ca_bundle::CaBundle,
    slot: Arc<CertSlot>,
    health: Arc<Health>,
) {
    let check = (validity / 20).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut rotation = rotation::Rotation::default();
    let mut failures = 0u32;
    loop {
        let now = now();
        if rotation.due(now) {
            match certs::issue(&hosts, now, validity, &identity) {
                Ok(issued) => rotation.issued(issued),
                Err(e) => tracing::error!(error = %e, "conversion webhook: cannot make a certificate"),
            }
        }
        let result = bundle.ensure(&rotation.cas(), now).await;
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
                if let Some(issued) = rotation.take_to_serve(current.as_bytes(), now) {
                    match slot.set(vec![issued.cert_der.clone()], &issued.key()) {
                        Ok(()) => {
                            tracing::info!(not_after = issued.not_after, "conversion webhook: serving a new certificate");
                            rotation.serving(issued);
                        }
                        Err(e) => tracing::error!(error = %e, "conversion webhook: cannot load its certificate"),
                    }
                }
                let why = match conversion {
                    ca_bundle::Conversion::Elsewhere(_) => "its CA is not published on the CRD yet",
                    _ => "its CA is not in the CRD's caBundle yet",
                };
                health.set_conversion((!rotation.trusted(current.as_bytes())).then(|| format!("conversion webhook: {why}")));
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, failures, "conversion webhook: cannot update the CRD's caBundle; retrying");
                if !rotation.serves() {
                    health.set_conversion(Some(format!("conversion webhook: cannot update the CRD's caBundle: {e}")));
                }
            }
        }
        let wait = match &result {
            Err(_) => Duration::from_millis(200 * 2u64.pow(failures.min(8))).min(check),
            Ok(ca_bundle::Conversion::Here(_) | ca_bundle::Conversion::Elsewhere(_)) if rotation.waiting() => Duration::from_secs(1),
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

async fn handle<B>(req: Request<B>) -> Response<Full<Bytes>>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
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

#[cfg(test)]
mod tests {
    use rustls_pki_types::pem::PemObject as _;
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_rustls::TlsConnector;

    use super::*;

    /// `POST path` with `body` over TLS, trusting only `ca_pem`: the status code and body, or the
    /// handshake's error.
    async fn post(addr: std::net::SocketAddr, ca_pem: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls_pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
        let mut tls = TlsConnector::from(Arc::new(config)).connect(name, tcp).await?;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(request.as_bytes()).await?;
        let mut answer = String::new();
        tls.read_to_string(&mut answer).await?;
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        Ok((code, body.to_string()))
    }

    fn issue(name: &str) -> certs::Issued {
        certs::issue(&["127.0.0.1".into()], now(), Duration::from_secs(3_600), name).unwrap()
    }

    /// The server converts a review over TLS with the certificate in its slot, answers 404 and
    /// 400 for what is not a review, and serves a certificate swapped into the slot at the next
    /// handshake: a client that trusts only the old CA is then refused, without a restart.
    #[tokio::test]
    async fn conversions_are_served_over_tls_with_the_certificate_in_the_slot() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let slot = Arc::new(CertSlot::default());
        tokio::spawn(serve(listener, acceptor(slot.clone())));
        let first = issue("first");
        slot.set(vec![first.cert_der.clone()], &first.key()).unwrap();

        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {
            "uid": "7e1", "desiredAPIVersion": "apps.kruise.io/v1beta1",
            "objects": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "a"}, "spec": {}}]}});
        let path = crate::api::crd::CONVERSION_PATH;
        let (code, body) = post(addr, &first.ca_pem, path, &review.to_string()).await.unwrap();
        assert_eq!(code, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["response"]["uid"], "7e1");
        assert_eq!(answer["response"]["convertedObjects"][0]["apiVersion"], "apps.kruise.io/v1beta1");
        assert_eq!(post(addr, &first.ca_pem, "/other", "{}").await.unwrap().0, 404);
        let (code, body) = post(addr, &first.ca_pem, path, "not json").await.unwrap();
        assert!(code == 400 && body.contains("not a ConversionReview"), "{code} {body}");

        let second = issue("second");
        slot.set(vec![second.cert_der.clone()], &second.key()).unwrap();
        assert!(post(addr, &first.ca_pem, path, &review.to_string()).await.is_err(), "the old CA no longer verifies");
        assert_eq!(post(addr, &second.ca_pem, path, &review.to_string()).await.unwrap().0, 200);
    }
}
