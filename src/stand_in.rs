//! A stand-in apiserver for unit tests of the code that talks to the apiserver: it records every
//! request and serves it from the objects it holds, so a test sees what a function sends, in
//! order, and what the cluster holds after, in milliseconds and without a cluster. Used by the
//! reconcile scenarios (`controller/reconcile_requests.rs`) and the `migrate` steps.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};

/// A request as the stand-in apiserver received it.
#[derive(Clone, Debug)]
pub(crate) struct Sent {
    pub method: Method,
    /// The path without the query.
    pub path: String,
    pub body: Value,
    /// A server-side dry run (`dryRun=All`): answered as a write, nothing stored.
    pub dry_run: bool,
}

impl Sent {
    /// `METHOD path`, the path from the resource on (`POST pods`, `PATCH clonesets/web/status`).
    pub(crate) fn line(&self) -> String {
        let path = self.path.split_once("/namespaces/ns/").map_or(self.path.as_str(), |(_, rest)| rest);
        format!("{} {path}", self.method)
    }

    pub(crate) fn is_event(&self) -> bool {
        self.path.contains("/events")
    }
}

/// Which requests the stand-in refuses, and with what status code.
type Refusal = Box<dyn Fn(&Sent) -> Option<u16> + Send>;

#[derive(Default)]
struct Served {
    log: Vec<Sent>,
    /// By path (a subresource's object is its parent's).
    objects: BTreeMap<String, Value>,
    version: u64,
    refuse: Option<Refusal>,
}

/// A stand-in apiserver: it records each request and serves it from the objects it holds. A
/// read answers the object or 404; a read of a collection lists what it holds (selectors are not
/// applied); a create stores the object (named from `generateName` if need be, given a uid), or
/// answers 409 when one of that name is held; a replace (PUT) swaps a held object; a patch merges
/// into the stored object (a strategic one merging conditions by type), or into an empty one of
/// that name, and a JSON patch applies to a held object (422 when it does not apply); each write
/// gets the next resourceVersion; a deletion removes the object; a request
/// the test refuses gets its code and a Status.
#[derive(Clone, Default)]
pub(crate) struct Apiserver(Arc<Mutex<Served>>);

/// The segments of `path` after its API group and version (`/api/v1`, `/apis/<group>/<version>`)
/// and its namespace: `[resource]`, `[resource, name]` or `[resource, name, subresource]`.
fn resource_segments(path: &str) -> Vec<&str> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let rest = if parts.first() == Some(&"api") { &parts[2.min(parts.len())..] } else { &parts[3.min(parts.len())..] };
    if rest.first() == Some(&"namespaces") && rest.len() > 2 { rest[2..].to_vec() } else { rest.to_vec() }
}

/// The path of the object a request is about: its own, less a subresource.
fn object_path(path: &str) -> &str {
    match resource_segments(path).len() {
        3 => &path[..path.rfind('/').unwrap()],
        _ => path,
    }
}

/// Whether `path` names a collection (a list or a create), not one object.
fn is_collection(path: &str) -> bool {
    resource_segments(path).len() == 1
}

/// Merges a strategic-merge or merge `patch` into `obj`: conditions by type, the rest as a JSON
/// merge patch, directives (`$setElementOrder/...`) dropped.
fn merge(obj: &mut Value, mut patch: Value) {
    if let Some(conditions) = patch.pointer_mut("/status/conditions").map(Value::take) {
        let held = obj.pointer_mut("/status/conditions").and_then(Value::as_array_mut);
        let held = match held {
            Some(h) => h,
            None => {
                obj["status"]["conditions"] = json!([]);
                obj["status"]["conditions"].as_array_mut().unwrap()
            }
        };
        for c in conditions.as_array().into_iter().flatten() {
            match held.iter_mut().find(|h| h["type"] == c["type"]) {
                Some(h) => json_patch::merge(h, c),
                None => held.push(c.clone()),
            }
        }
        patch["status"].as_object_mut().unwrap().remove("conditions");
    }
    fn drop_directives(v: &mut Value) {
        if let Value::Object(m) = v {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(drop_directives);
        }
    }
    drop_directives(&mut patch);
    json_patch::merge(obj, &patch);
}

impl Served {
    /// The objects held in `collection` (a path), not those of collections below it.
    fn held_in(&self, collection: &str) -> Vec<Value> {
        let prefix = format!("{collection}/");
        self.objects
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k[prefix.len()..].contains('/'))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The answer to `sent`, applied to the objects held.
    fn answer(&mut self, sent: Sent) -> (StatusCode, Value) {
        let path = object_path(&sent.path).to_string();
        let not_found = || (StatusCode::NOT_FOUND, failure(404, "not found"));
        self.version += 1;
        let version = self.version.to_string();
        match sent.method {
            Method::GET if is_collection(&path) => {
                let items = self.held_in(&path);
                (StatusCode::OK, json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": version}, "items": items}))
            }
            Method::GET => self.objects.get(&path).map_or_else(not_found, |o| (StatusCode::OK, o.clone())),
            Method::PUT => match self.objects.get_mut(&path) {
                Some(held) => {
                    *held = sent.body;
                    held["metadata"]["resourceVersion"] = json!(version);
                    (StatusCode::OK, held.clone())
                }
                None => not_found(),
            },
            Method::DELETE => match self.objects.remove(&path) {
                Some(_) => (StatusCode::OK, json!({"apiVersion": "v1", "kind": "Status", "status": "Success"})),
                None => not_found(),
            },
            Method::POST => {
                let mut obj = sent.body;
                let meta = &mut obj["metadata"];
                if meta.get("name").is_none_or(Value::is_null) {
                    meta["name"] = json!(format!("{}{version}", meta["generateName"].as_str().unwrap_or_default()));
                }
                let name = meta["name"].as_str().unwrap().to_string();
                if self.objects.contains_key(&format!("{path}/{name}")) {
                    return (StatusCode::CONFLICT, failure(409, "already exists"));
                }
                meta["uid"] = json!(format!("uid-{name}"));
                meta["resourceVersion"] = json!(version);
                self.objects.insert(format!("{path}/{name}"), obj.clone());
                (StatusCode::CREATED, obj)
            }
            // A JSON patch (`[{"op": ...}]`), as the apiserver applies one: 422 when an
            // operation (a `test` among them) does not apply.
            _ if sent.body.is_array() => {
                let Some(held) = self.objects.get_mut(&path) else { return not_found() };
                let mut patched = held.clone();
                let applied = serde_json::from_value::<json_patch::Patch>(sent.body)
                    .map_err(|e| e.to_string())
                    .and_then(|p| json_patch::patch(&mut patched, &p).map_err(|e| e.to_string()));
                if let Err(e) = applied {
                    return (StatusCode::UNPROCESSABLE_ENTITY, failure(422, &e));
                }
                *held = patched;
                held["metadata"]["resourceVersion"] = json!(version);
                (StatusCode::OK, held.clone())
            }
            _ => {
                let name = path.rsplit('/').next().unwrap_or_default().to_string();
                let obj = self.objects.entry(path).or_insert_with(|| json!({"metadata": {"name": name, "uid": format!("uid-{name}")}}));
                merge(obj, sent.body);
                obj["metadata"]["resourceVersion"] = json!(version);
                (StatusCode::OK, obj.clone())
            }
        }
    }
}

/// A failed request's Status, with the reason kube's `get_opt` reads for 404.
fn failure(code: u16, message: &str) -> Value {
    let reason = match code {
        404 => "NotFound",
        409 => "AlreadyExists",
        _ => "",
    };
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message})
}

impl Apiserver {
    /// Refuses the requests `refuse` picks, with the code it gives.
    pub(crate) fn refusing(refuse: impl Fn(&Sent) -> Option<u16> + Send + 'static) -> Self {
        let a = Self::default();
        a.0.lock().unwrap().refuse = Some(Box::new(refuse));
        a
    }

    /// The requests received since the last call.
    pub(crate) fn take(&self) -> Vec<Sent> {
        std::mem::take(&mut self.0.lock().unwrap().log)
    }

    pub(crate) fn put(&self, path: &str, obj: Value) {
        self.0.lock().unwrap().objects.insert(path.to_string(), obj);
    }

    /// The object at `path`, if held.
    pub(crate) fn get(&self, path: &str) -> Option<Value> {
        self.0.lock().unwrap().objects.get(path).cloned()
    }

    /// The objects held under `collection` (a path).
    pub(crate) fn objects(&self, collection: &str) -> Vec<Value> {
        self.0.lock().unwrap().held_in(collection)
    }

    fn serve(&self, sent: Sent) -> (StatusCode, Value) {
        let mut served = self.0.lock().unwrap();
        served.log.push(sent.clone());
        if let Some(code) = served.refuse.as_ref().and_then(|r| r(&sent)) {
            return (StatusCode::from_u16(code).unwrap(), failure(code, "refused by the test"));
        }
        if !sent.dry_run {
            return served.answer(sent);
        }
        // Answered as the write would be, then the objects put back.
        let held = served.objects.clone();
        let answer = served.answer(sent);
        served.objects = held;
        answer
    }

    /// A client of this apiserver.
    pub(crate) fn client(&self) -> kube::Client {
        let apiserver = self.clone();
        let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
            let apiserver = apiserver.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let sent = Sent {
                    method: parts.method,
                    path: parts.uri.path().to_string(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                    dry_run: parts.uri.query().is_some_and(|q| q.split('&').any(|p| p == "dryRun=All")),
                };
                let (code, body) = apiserver.serve(sent);
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .status(code)
                        .header(http::header::CONTENT_TYPE, "application/json")
                        .body(Full::new(Bytes::from(body.to_string())))
                        .unwrap(),
                )
            }
        });
        kube::Client::new(svc, "ns")
    }
}
