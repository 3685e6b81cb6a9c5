//! Pods in Kubernetes' protobuf encoding: the messages the pod cache decodes its lists and
//! watches from, and the layer that reads the answers to pod writes in protobuf.
//!
//! Encoding a pod as JSON is most of what a cold start costs the apiserver (managedFields make
//! up most of its bytes; e2e/bench/HISTORY.md has the measurement). kube speaks JSON only, so
//! [`PodsInProtobufLayer`] asks for protobuf where the operator reads pods at volume:
//! - the pod cache's own lists and watches (`controller::pod_watch`), which mark their requests
//!   [`Untranscoded`] and decode the protobuf themselves, straight into the cached pod
//!   ([`Pod::into_wire`]), with no JSON between;
//! - pod writes (a create, and a patch, update or deletion of a pod, its status or its resize,
//!   each answered with the whole pod): the answer is rewritten as JSON holding the written
//!   pod's name, namespace, uid and resourceVersion only ([`WrittenPod`]), all that the writes'
//!   resourceVersion expectations read.
//!
//! Any other pod request, a list or watch through kube's `Api` among them, passes through as
//! JSON with every field: only a reader that decodes protobuf itself gets protobuf.
//!
//! Kruise's manager does the same: controller-runtime (v0.20, `apiutil.createRestConfig`) reads
//! every built-in kind in protobuf. Here only pods are: with managedFields they are nearly all the
//! bytes a large cluster sends. A response the apiserver sends as JSON (an apiserver or proxy
//! without protobuf) passes through untouched.
//!
//! The messages (`pod.rs`, and the envelopes around them in `envelope.rs`) are the subset of
//! `k8s.io/api/core/v1/generated.proto` and `k8s.io/apimachinery/.../generated.proto` the cache
//! reads, with their field numbers. A pod decodes (`into_wire.rs`) to the same
//! [`WirePod`](crate::pod_cache::wire::WirePod) its JSON would: `tests/pod_decoders.rs` checks
//! field numbers and types against Kubernetes' complete generated messages (k8s-pb), and
//! `e2e/tests/operator/pod_cache.rs` against the apiserver.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use prost::Message;
use serde::Serialize;
use tower::{Layer, Service};

mod envelope;
mod into_wire;
mod pod;

use envelope::WrittenPod;
#[cfg(test)]
pub(crate) use envelope::{ListMeta, RawExtension, TypeMeta, Unknown};
pub(crate) use envelope::{PodList, Status, WatchEvent, unenvelope};
pub use pod::*;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The values of `--kube-api-content-type` (kube-controller-manager's flag).
pub const PROTOBUF_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
pub const JSON_CONTENT_TYPE: &str = "application/json";
/// Protobuf first, JSON where the apiserver (or a proxy) serves no protobuf.
const ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";

/// Why a protobuf response could not be read: the watch ends with this error (kube's watcher
/// then backs off and lists again), a list fails with it.
#[derive(Debug, thiserror::Error)]
pub enum TranscodeError {
    #[error("protobuf response without the k8s magic prefix")]
    NoMagic,
    #[error("protobuf response of kind {0:?}, expected a Pod, PodList or Status")]
    UnexpectedKind(String),
    #[error("undecodable protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("writing JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("a watch frame of {0} bytes is cut short")]
    Truncated(usize),
    #[error("a time out of range: {0}")]
    Time(String),
}

/// Writes `object` as JSON with its apiVersion and kind first (kube reads a bookmark's).
fn typed_json<T: Serialize>(api_version: &str, kind: &str, object: &T, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    out.extend_from_slice(b"{\"apiVersion\":");
    serde_json::to_writer(&mut *out, api_version)?;
    out.extend_from_slice(b",\"kind\":");
    serde_json::to_writer(&mut *out, kind)?;
    let fields_at = out.len();
    serde_json::to_writer(&mut *out, object)?;
    // The object's own `{` becomes the separator; `{}` leaves only the closing brace.
    if out.len() - fields_at == 2 {
        out.truncate(fields_at);
        out.push(b'}');
    } else {
        out[fields_at] = b',';
    }
    Ok(())
}

/// Writes the answer to a pod write (`k8s\0` + `runtime.Unknown`: the written pod, or the
/// Status of a refusal) as JSON into `out`, the pod as its identity and resourceVersion only.
fn written_json(envelope: Bytes, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    let (api_version, kind, raw) = unenvelope(envelope)?;
    let api_version = api_version.as_deref().unwrap_or("v1");
    match kind.as_str() {
        "Pod" => typed_json(api_version, &kind, &WrittenPod::decode(raw)?, out)?,
        "Status" => typed_json(api_version, &kind, &Status::decode(raw)?, out)?,
        _ => return Err(TranscodeError::UnexpectedKind(kind)),
    }
    Ok(())
}

/// A response body of JSON transcoded from protobuf.
pub(crate) type TranscodedBody = UnsyncBoxBody<Bytes, BoxError>;

/// A write's answer as one JSON document, once the whole body has arrived.
fn transcode_written<B>(body: B) -> TranscodedBody
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let json = futures::stream::once(async move {
        let bytes = body.collect().await.map_err(Into::into)?.to_bytes();
        let mut out = Vec::new();
        written_json(bytes, &mut out)?;
        Ok::<_, BoxError>(hyper::body::Frame::data(Bytes::from(out)))
    });
    UnsyncBoxBody::new(http_body_util::StreamBody::new(json))
}

/// Whether the response to `method` on `path` is a pod, a pod list or a watch of pods that is
/// read in protobuf: lists and watches of the pods collection, a pod's creation, and the pod
/// every patch, update or deletion of one pod (or of its `status` or `resize`) answers with.
/// A single pod's GET stays JSON: it is how a reader gets a whole pod.
fn pods_answer_in_protobuf(method: &http::Method, path: &str) -> bool {
    use http::Method;
    let Some(rest) = path.strip_prefix("/api/v1/") else { return false };
    if rest == "pods" {
        return method == Method::GET;
    }
    let Some((ns, tail)) = rest.strip_prefix("namespaces/").and_then(|r| r.split_once('/')) else { return false };
    if ns.is_empty() {
        return false;
    }
    let Some(after) = tail.strip_prefix("pods") else { return false };
    if after.is_empty() {
        return [Method::GET, Method::POST].contains(method);
    }
    // One pod (`pods/<name>`) or its subresource (`pods/<name>/<sub>`), split without allocating:
    // this runs for every request the client makes.
    let Some((name, subresource)) = after.strip_prefix('/').map(|one| one.split_once('/').unwrap_or((one, ""))) else {
        return false;
    };
    let writes_one = [Method::PATCH, Method::PUT].contains(method);
    match subresource {
        _ if name.is_empty() => false,
        "" => writes_one || method == Method::DELETE,
        "status" | "resize" => writes_one,
        _ => false,
    }
}

/// Marks a pod list or watch whose reader decodes the response itself (the pod cache's watcher,
/// `controller::pod_watch`): the layer asks for protobuf when enabled and passes the response
/// through untouched.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Untranscoded;

/// Asks for protobuf on pod lists, watches and writes and hands kube their JSON (see the module);
/// not `enabled`, it passes every request and response through as they are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PodsInProtobufLayer {
    pub enabled: bool,
}

impl<S> Layer<S> for PodsInProtobufLayer {
    type Service = PodsInProtobuf<S>;

    fn layer(&self, inner: S) -> PodsInProtobuf<S> {
        PodsInProtobuf { inner, enabled: self.enabled }
    }
}

#[derive(Clone)]
pub(crate) struct PodsInProtobuf<S> {
    inner: S,
    enabled: bool,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for PodsInProtobuf<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<TranscodedBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        // A list or watch only for the reader that decodes protobuf itself: any other pod list
        // (kube's `Api`, anywhere in the operator) gets the apiserver's whole JSON.
        let untranscoded = req.extensions().get::<Untranscoded>().is_some();
        let read = req.method() == http::Method::GET;
        let pods = self.enabled && pods_answer_in_protobuf(req.method(), req.uri().path()) && (untranscoded || !read);
        if pods {
            req.headers_mut().insert(header::ACCEPT, http::HeaderValue::from_static(ACCEPT));
        }
        let res = self.inner.call(req);
        Box::pin(async move {
            let res = res.await?;
            let content_type = res.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
            if untranscoded || !(pods && content_type.starts_with(PROTOBUF_CONTENT_TYPE)) {
                return Ok(res.map(|b| UnsyncBoxBody::new(b.map_err(Into::into))));
            }
            let (mut parts, body) = res.into_parts();
            parts.headers.insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
            parts.headers.remove(header::CONTENT_LENGTH);
            Ok(Response::from_parts(parts, transcode_written(body)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::envelope::MAGIC;
    use super::*;

    fn enveloped(kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown =
            Unknown { type_meta: Some(TypeMeta { api_version: Some("v1".into()), kind: Some(kind.into()) }), raw: Some(raw.into()) };
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    #[test]
    fn pod_lists_watches_and_the_answers_to_pod_writes_are_read_in_protobuf() {
        use http::Method;
        let ns = "/api/v1/namespaces/default";
        for (method, path, protobuf) in [
            (Method::GET, "/api/v1/pods".to_string(), true),
            (Method::GET, format!("{ns}/pods"), true),
            (Method::POST, format!("{ns}/pods"), true),
            (Method::PATCH, format!("{ns}/pods/web-1"), true),
            (Method::PUT, format!("{ns}/pods/web-1"), true),
            (Method::DELETE, format!("{ns}/pods/web-1"), true),
            (Method::PATCH, format!("{ns}/pods/web-1/status"), true),
            (Method::PATCH, format!("{ns}/pods/web-1/resize"), true),
            // A whole pod, read by name; what is not a pod (an eviction, a log, a list deletion).
            (Method::GET, format!("{ns}/pods/web-1"), false),
            (Method::GET, format!("{ns}/pods/web-1/status"), false),
            (Method::POST, format!("{ns}/pods/web-1/eviction"), false),
            (Method::GET, format!("{ns}/pods/web-1/log"), false),
            (Method::DELETE, format!("{ns}/pods"), false),
            (Method::POST, "/api/v1/pods".to_string(), false),
            (Method::PATCH, format!("{ns}/pods/"), false),
            (Method::PATCH, format!("{ns}/pods//status"), false),
            (Method::PATCH, format!("{ns}/pods/web-1/status/x"), false),
            (Method::PATCH, format!("{ns}/podsx/web-1"), false),
            (Method::GET, "/api/v1/namespaces//pods".to_string(), false),
            (Method::GET, format!("{ns}/persistentvolumeclaims"), false),
            (Method::GET, format!("{ns}/podtemplates"), false),
            (Method::PATCH, "/apis/apps.kruise.io/v1alpha1/namespaces/default/clonesets/web".to_string(), false),
        ] {
            assert_eq!(pods_answer_in_protobuf(&method, &path), protobuf, "{method} {path}");
        }
    }

    /// Only the pod cache's own reads (marked [`Untranscoded`]) and pod writes ask for protobuf;
    /// a pod list through kube's `Api` gets the apiserver's whole JSON, and only a write's answer
    /// is trimmed.
    #[tokio::test]
    async fn only_the_caches_reads_and_pod_writes_are_asked_in_protobuf() {
        use http_body_util::Full;
        let pod = Pod {
            metadata: Some(ObjectMeta { name: Some("web-1".into()), resource_version: Some("7".into()), ..Default::default() }),
            ..Default::default()
        };
        let body = Bytes::from(enveloped("Pod", pod.encode_to_vec()));
        let served = body.clone();
        // The apiserver: protobuf when asked for it, JSON otherwise.
        let apiserver = tower::service_fn(move |req: Request<()>| {
            let body = served.clone();
            let protobuf = req.headers().get(header::ACCEPT).is_some_and(|a| a.to_str().unwrap().starts_with(PROTOBUF_CONTENT_TYPE));
            let (content_type, bytes) =
                if protobuf { (PROTOBUF_CONTENT_TYPE, body) } else { (JSON_CONTENT_TYPE, Bytes::from_static(b"{\"whole\":true}")) };
            async move {
                Ok::<_, std::convert::Infallible>(
                    Response::builder().header(header::CONTENT_TYPE, content_type).body(Full::new(bytes)).unwrap(),
                )
            }
        });
        let mut layer = PodsInProtobufLayer { enabled: true }.layer(apiserver);
        let path = "/api/v1/namespaces/default/pods";
        let ask = |method: http::Method, path: &str, marked: bool| {
            let mut req = Request::builder().method(method).uri(path).body(()).unwrap();
            if marked {
                req.extensions_mut().insert(Untranscoded);
            }
            req
        };
        let text = |res: Response<TranscodedBody>| async move { res.into_body().collect().await.unwrap().to_bytes() };
        let listed = text(layer.call(ask(http::Method::GET, path, false)).await.unwrap()).await;
        assert_eq!(&listed[..], b"{\"whole\":true}", "kube's own pod list: the apiserver's JSON");
        let cached = text(layer.call(ask(http::Method::GET, path, true)).await.unwrap()).await;
        assert_eq!(cached, body, "the cache's read: protobuf, untouched");
        let written = text(layer.call(ask(http::Method::PATCH, &format!("{path}/web-1"), false)).await.unwrap()).await;
        assert_eq!(&written[..], br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","resourceVersion":"7"}}"#);
    }

    #[test]
    fn a_written_pod_is_answered_with_its_identity_and_resource_version_only() {
        let pod = Pod {
            metadata: Some(ObjectMeta {
                name: Some("web-1".into()),
                generate_name: Some("web-".into()),
                namespace: Some("default".into()),
                uid: Some("u-1".into()),
                resource_version: Some("7".into()),
                labels: [("app".to_string(), "web".to_string())].into(),
                ..Default::default()
            }),
            spec: Some(PodSpec { node_name: Some("node-a".into()), ..Default::default() }),
            status: Some(PodStatus { phase: Some("Running".into()), ..Default::default() }),
        };
        let answer = || {
            let mut out = Vec::new();
            written_json(enveloped("Pod", pod.encode_to_vec()).into(), &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            answer(),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"default","uid":"u-1","resourceVersion":"7"}}"#
        );
        // What a write's caller reads of it (writes::expect_version).
        let written: crate::pod_cache::wire::WirePod = serde_json::from_str(&answer()).unwrap();
        assert_eq!((written.0.metadata.uid.as_deref(), written.0.metadata.resource_version.as_deref()), (Some("u-1"), Some("7")));
        // A refused write is answered with a Status either way.
        let refused = Status { status: Some("Failure".into()), code: Some(409), ..Default::default() };
        let mut out = Vec::new();
        written_json(enveloped("Status", refused.encode_to_vec()).into(), &mut out).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"apiVersion":"v1","kind":"Status","metadata":{},"status":"Failure","code":409}"#
        );
    }

    #[test]
    fn what_is_not_a_pod_or_status_is_an_error() {
        let mut out = Vec::new();
        for kind in ["Secret", "PodList"] {
            assert!(matches!(written_json(enveloped(kind, vec![]).into(), &mut out), Err(TranscodeError::UnexpectedKind(k)) if k == kind));
        }
        assert!(matches!(written_json(Bytes::from_static(b"{\"kind\":\"Pod\"}"), &mut out), Err(TranscodeError::NoMagic)));
    }
}
