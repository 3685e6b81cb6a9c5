//! The HTTP transport under the Kubernetes client: kube's, except that it negotiates HTTP/2 and
//! pings its connections, as client-go does.
//!
//! kube's own transport speaks HTTP/1.1 only. A connection that goes silent without closing (a
//! stuck load balancer, NAT or proxy) is then noticed only by its read timeout, minutes later,
//! and a watch on it simply stops delivering. Here every connection that has read nothing for
//! [`PING_AFTER`] is pinged, and closed when no answer comes within [`PING_TIMEOUT`]: the watches
//! and requests on it fail, and their retries open a new connection. An apiserver that does not
//! offer HTTP/2 (or a plain `http://` URL) gets HTTP/1.1 with kube's timeouts.

use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_rustls::FixedServerNameResolver;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt as _, DynBody};
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};

/// How long a connection may read nothing before it is pinged (client-go's `ReadIdleTimeout`).
pub(crate) const PING_AFTER: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed (client-go's `PingTimeout`).
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// kube's `GenericService`: what a [`ClientBuilder`] starts from.
pub(crate) type BaseService = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// The base of the client's stack: TLS (HTTP/2 preferred), kube's timeouts, the cluster URL,
/// authentication and extra headers; no retry (the caller adds its own).
pub(crate) fn client_builder(config: &kube::Config) -> kube::Result<ClientBuilder<BaseService>> {
    if let Some(proxy) = &config.proxy_url {
        return Err(kube::Error::ProxyProtocolUnsupported { proxy_url: Box::new(proxy.clone()) });
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let tls = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config.rustls_client_config()?).https_or_http();
    let tls = match &config.tls_server_name {
        Some(name) => {
            let name = name.clone().try_into().map_err(|e| kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e)))?;
            tls.with_server_name_resolver(FixedServerNameResolver::new(name))
        }
        None => tls,
    };
    let mut connector = TimeoutConnector::new(tls.enable_all_versions().wrap_connector(tcp));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);

    let http = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_AFTER)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http)
        .map_response(|res: Response<Incoming>| res.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>));
    Ok(ClientBuilder::new(BoxService::new(service), config.default_namespace.clone()))
}
