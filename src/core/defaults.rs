//! The pod-template defaults Kruise's CloneSet webhook writes into every template it admits:
//! `SetDefaultPodSpec` of OpenKruise v1.9.0 (`apis/apps/defaults/pod.go`), which calls the
//! Kubernetes v1.32 defaulting functions (`pkg/apis/core/v1/defaults.go`) on chosen parts of the
//! spec only.
//!
//! Kruise's webhook (`SetDefaultsCloneSet`, unless the `TemplateNoDefaults` gate is on) defaults
//! the template before the CloneSet is stored, so Kruise hashes revisions and builds pods from the
//! defaulted template. This operator has no webhook: the controller applies the same function to
//! the template before it records revision data (and so before it builds pods), which gives a
//! manifest the revision name Kruise gives it. The in-place check applies it to both templates it
//! compares, so a default spelled out on one side only is no change.
//!
//! What Kruise fills (only where the Go field is unset: absent, `null`, or the zero value of a
//! non-pointer field such as `""` or `0`):
//!
//! * pod spec: `dnsPolicy: ClusterFirst`, `restartPolicy: Always`, `securityContext: {}`,
//!   `terminationGracePeriodSeconds: 30`, `schedulerName: default-scheduler`;
//! * regular containers: `imagePullPolicy: Always` (Kruise's choice, for in-place updates);
//!   init containers: `Always` for a `latest` or untagged image, otherwise `IfNotPresent`
//!   (Kubernetes' rule); both: `terminationMessagePath: /dev/termination-log`,
//!   `terminationMessagePolicy: File`;
//! * regular, init and ephemeral containers: port `protocol: TCP`; env `fieldRef.apiVersion: v1`;
//!   `resources.limits`/`requests` rounded up to milli-units; probes' `timeoutSeconds: 1`,
//!   `periodSeconds: 10`, `successThreshold: 1`, `failureThreshold: 3`; `httpGet` of probes and
//!   of `lifecycle.postStart`/`preStop`: `path: /`, `scheme: HTTP`;
//! * `overhead` rounded up to milli-units;
//! * volumes: no source at all becomes `emptyDir: {}`; `hostPath.type: ""`; `defaultMode: 420` of
//!   secret, configMap, downwardAPI and projected; `fieldRef.apiVersion: v1` in downwardAPI items
//!   (also inside projected); `expirationSeconds: 3600` of projected serviceAccountToken.
//!
//! What it does not fill, although the apiserver fills it into a pod: `enableServiceLinks`,
//! `hostPort` under `hostNetwork`, requests copied from limits, `resizePolicy` (all
//! `SetDefaults_Pod`, never called on a template), ephemeral containers' `imagePullPolicy` and
//! termination message fields, an image volume's `pullPolicy` (Kubernetes' `ImageVolume` gate,
//! off in Kruise's process), and anything of `ephemeral` volumes' claim templates, of
//! configMap/secret items, or of gRPC probes.

use serde_json::{Map, Value, json};

use super::gojson;

/// The pod template Kruise's webhook stores for `template` (`{"metadata":…,"spec":…}`, as
/// [`super::revision::revision_data`] takes it): decoded into Go's `PodTemplateSpec`,
/// [`set_default_pod_spec`] applied to its spec, encoded again
/// ([`gojson::typed_round_trip_pod_template`]). The Go round trip is part of what the webhook
/// stores: a `null` list element, for instance, is a zero-valued container or volume, which then
/// gets defaults. Pure and idempotent.
pub fn default_pod_template(template: &Value) -> Value {
    let mut template = gojson::typed_round_trip_pod_template(template);
    if let Some(spec) = template.get_mut("spec") {
        set_default_pod_spec(spec);
    }
    template
}

/// The `volumeClaimTemplates` Kruise's webhook stores (same condition as the pod template's
/// defaults): per claim, `SetDefaults_PersistentVolumeClaim` (`status.phase: Pending` when unset)
/// and `SetDefaults_ResourceList` on `spec.resources.limits`, `spec.resources.requests` and
/// `status.capacity` (rounded up to milli-units). Anything not a list of objects is returned as it is.
pub fn default_volume_claim_templates(templates: &Value) -> Value {
    let mut templates = templates.clone();
    for claim in templates.as_array_mut().into_iter().flatten().filter_map(Value::as_object_mut) {
        if let Some(resources) = object_mut(claim, "spec").and_then(|spec| object_mut(spec, "resources")) {
            round_up_resource_list(resources, "limits");
            round_up_resource_list(resources, "requests");
        }
        if !claim.get("status").is_some_and(Value::is_object) {
            claim.insert("status".into(), json!({}));
        }
        if let Some(status) = object_mut(claim, "status") {
            fill_string(status, "phase", "Pending");
            round_up_resource_list(status, "capacity");
        }
    }
    templates
}

/// Kruise's `SetDefaultPodSpec` on a pod spec (JSON), in place. A value of the wrong JSON type
/// (which Kruise could not decode) is left as it is.
pub(crate) fn set_default_pod_spec(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else { return };
    // v1.SetDefaults_PodSpec
    fill_string(spec, "dnsPolicy", "ClusterFirst");
    fill_string(spec, "restartPolicy", "Always");
    fill_pointer(spec, "securityContext", json!({}));
    fill_pointer(spec, "terminationGracePeriodSeconds", json!(30));
    fill_string(spec, "schedulerName", "default-scheduler");

    if let Some(volumes) = array_mut(spec, "volumes") {
        volumes.iter_mut().filter_map(Value::as_object_mut).for_each(set_default_volume);
    }
    if let Some(init) = array_mut(spec, "initContainers") {
        for c in init.iter_mut().filter_map(Value::as_object_mut) {
            let policy = if image_tag(c.get("image").and_then(Value::as_str).unwrap_or_default()) == Some("latest") {
                "Always"
            } else {
                "IfNotPresent"
            };
            fill_string(c, "imagePullPolicy", policy);
            set_default_termination_message(c);
            set_default_container_common(c);
        }
    }
    if let Some(containers) = array_mut(spec, "containers") {
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            // "For in-place update, we set default imagePullPolicy to Always".
            fill_string(c, "imagePullPolicy", "Always");
            set_default_termination_message(c);
            set_default_container_common(c);
        }
    }
    if let Some(ephemeral) = array_mut(spec, "ephemeralContainers") {
        ephemeral.iter_mut().filter_map(Value::as_object_mut).for_each(set_default_container_common);
    }
    round_up_resource_list(spec, "overhead");
}

/// The part of `v1.SetDefaults_Container` after the pull policy.
fn set_default_termination_message(c: &mut Map<String, Value>) {
    fill_string(c, "terminationMessagePath", "/dev/termination-log");
    fill_string(c, "terminationMessagePolicy", "File");
}

/// What Kruise does for every kind of container: ports, env, resources, probes, lifecycle hooks.
fn set_default_container_common(c: &mut Map<String, Value>) {
    if let Some(ports) = array_mut(c, "ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            fill_string(p, "protocol", "TCP");
        }
    }
    if let Some(env) = array_mut(c, "env") {
        for e in env.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(from) = object_mut(e, "valueFrom") {
                set_default_field_ref(from);
            }
        }
    }
    if let Some(resources) = object_mut(c, "resources") {
        round_up_resource_list(resources, "limits");
        round_up_resource_list(resources, "requests");
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = object_mut(c, probe) {
            // v1.SetDefaults_Probe: non-pointer int32 fields, so 0 counts as unset.
            fill_int(p, "timeoutSeconds", 1);
            fill_int(p, "periodSeconds", 10);
            fill_int(p, "successThreshold", 1);
            fill_int(p, "failureThreshold", 3);
            set_default_http_get(p);
        }
    }
    if let Some(lifecycle) = object_mut(c, "lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = object_mut(lifecycle, hook) {
                set_default_http_get(h);
            }
        }
    }
}

/// `v1.SetDefaults_HTTPGetAction` on the `httpGet` of a probe or hook, if it has one.
fn set_default_http_get(handler: &mut Map<String, Value>) {
    if let Some(h) = object_mut(handler, "httpGet") {
        fill_string(h, "path", "/");
        fill_string(h, "scheme", "HTTP");
    }
}

/// `v1.SetDefaults_ObjectFieldSelector` on the `fieldRef` of `holder`, if it has one.
fn set_default_field_ref(holder: &mut Map<String, Value>) {
    if let Some(r) = object_mut(holder, "fieldRef") {
        fill_string(r, "apiVersion", "v1");
    }
}

/// Every volume source a `v1.Volume` can name (k8s.io/api v0.32.10; the test checks this list
/// against the generated schema of the Go types).
const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

/// Kruise's `SetDefaultPodVolumes` for one volume.
fn set_default_volume(v: &mut Map<String, Value>) {
    // v1.SetDefaults_Volume: every source pointer nil means an emptyDir.
    if VOLUME_SOURCES.iter().all(|s| v.get(*s).is_none_or(Value::is_null)) {
        v.insert("emptyDir".into(), json!({}));
    }
    if let Some(h) = object_mut(v, "hostPath") {
        fill_pointer(h, "type", json!(""));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = object_mut(v, source) {
            fill_pointer(s, "defaultMode", json!(420));
        }
    }
    if let Some(items) = object_mut(v, "downwardAPI").and_then(|d| array_mut(d, "items")) {
        items.iter_mut().filter_map(Value::as_object_mut).for_each(set_default_field_ref);
    }
    if let Some(sources) = object_mut(v, "projected").and_then(|p| array_mut(p, "sources")) {
        for s in sources.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(items) = object_mut(s, "downwardAPI").and_then(|d| array_mut(d, "items")) {
                items.iter_mut().filter_map(Value::as_object_mut).for_each(set_default_field_ref);
            }
            if let Some(token) = object_mut(s, "serviceAccountToken") {
                fill_pointer(token, "expirationSeconds", json!(3600));
            }
        }
    }
}

/// `v1.SetDefaults_ResourceList` on `holder[field]`: every quantity rounded up to milli-units,
/// written as Go writes it.
fn round_up_resource_list(holder: &mut Map<String, Value>, field: &str) {
    if let Some(list) = object_mut(holder, field) {
        for q in list.values_mut() {
            if let Some(rounded) = gojson::quantity_rounded_up_to_milli(q) {
                *q = Value::String(rounded);
            }
        }
    }
}

fn object_mut<'a>(obj: &'a mut Map<String, Value>, field: &str) -> Option<&'a mut Map<String, Value>> {
    obj.get_mut(field).and_then(Value::as_object_mut)
}

fn array_mut<'a>(obj: &'a mut Map<String, Value>, field: &str) -> Option<&'a mut Vec<Value>> {
    obj.get_mut(field).and_then(Value::as_array_mut)
}

/// A pointer field: unset when absent or `null`.
fn fill_pointer(obj: &mut Map<String, Value>, field: &str, value: Value) {
    if obj.get(field).is_none_or(Value::is_null) {
        obj.insert(field.to_string(), value);
    }
}

/// A Go `string` field: unset when absent, `null` or `""`.
fn fill_string(obj: &mut Map<String, Value>, field: &str, value: &str) {
    if obj.get(field).is_none_or(|v| v.is_null() || v.as_str() == Some("")) {
        obj.insert(field.to_string(), json!(value));
    }
}

/// A Go `int32` field: unset when absent, `null` or `0`.
fn fill_int(obj: &mut Map<String, Value>, field: &str, value: i64) {
    if obj.get(field).is_none_or(|v| v.is_null() || v.as_f64() == Some(0.0)) {
        obj.insert(field.to_string(), json!(value));
    }
}

/// The tag Kubernetes' `parsers.ParseImageName` reports for an image: the tag; `latest` when
/// there is neither tag nor digest; `Some("")` for a digest only; `None` when the reference does
/// not parse (github.com/distribution/reference v0.6.0 `ParseNormalizedNamed`, the version
/// Kubernetes v1.32 uses), which `SetDefaults_Container` then treats as not `latest`.
fn image_tag(image: &str) -> Option<&str> {
    let r = reference::parse_normalized_named(image)?;
    Some(match (r.tag, r.digest) {
        ("", "") => "latest",
        (tag, _) => tag,
    })
}

/// `ParseNormalizedNamed` of github.com/distribution/reference v0.6.0, as far as deciding
/// whether a reference parses and what its tag and digest are.
mod reference {
    pub(crate) struct Reference<'a> {
        pub tag: &'a str,
        pub digest: &'a str,
    }

    const DEFAULT_DOMAIN: &str = "docker.io";
    const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
    const OFFICIAL_REPO_PREFIX: &str = "library/";
    const REPOSITORY_NAME_TOTAL_LENGTH_MAX: usize = 255;

    pub(crate) fn parse_normalized_named(s: &str) -> Option<Reference<'_>> {
        // A bare 64-character hex identifier is refused.
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return None;
        }
        let (domain, remainder) = split_docker_domain(s);
        let remote = remainder.split_once(':').map_or(remainder.as_str(), |(r, _)| r);
        if remote.to_lowercase() != remote {
            return None;
        }
        // `Parse(domain + "/" + remainder)`: the tag and digest come from the original string's
        // tail, which `remainder` ends with.
        let full = format!("{domain}/{remainder}");
        let (tag_len, digest_len) = parse(&full)?;
        let digest = &s[s.len() - digest_len..];
        let before_digest = s.len() - digest_len - usize::from(digest_len > 0);
        let tag = &s[before_digest - tag_len..before_digest];
        Some(Reference { tag, digest })
    }

    /// `splitDockerDomain`: the domain and the remote name (with any tag and digest).
    fn split_docker_domain(name: &str) -> (String, String) {
        let Some((maybe_domain, maybe_remote)) = name.split_once('/') else {
            return (DEFAULT_DOMAIN.into(), format!("{OFFICIAL_REPO_PREFIX}{name}"));
        };
        let (domain, remote) = if maybe_domain == "localhost" {
            (maybe_domain, maybe_remote)
        } else if maybe_domain == LEGACY_DEFAULT_DOMAIN {
            (DEFAULT_DOMAIN, maybe_remote)
        } else if maybe_domain.contains(['.', ':']) || maybe_domain.to_lowercase() != maybe_domain {
            (maybe_domain, maybe_remote)
        } else {
            (DEFAULT_DOMAIN, name)
        };
        if domain == DEFAULT_DOMAIN && !remote.contains('/') {
            return (domain.into(), format!("{OFFICIAL_REPO_PREFIX}{remote}"));
        }
        (domain.into(), remote.into())
    }

    /// `Parse`: whether `s` matches `ReferenceRegexp` (name, optional `:tag`, optional
    /// `@digest`) with a valid digest and a path of at most 255 characters. Returns the lengths
    /// of the tag and the digest (0 when absent).
    fn parse(s: &str) -> Option<(usize, usize)> {
        let (name_tag, digest) = match s.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (s, None),
        };
        if let Some(d) = digest
            && !valid_digest(d)
        {
            return None;
        }
        // Only the last path component can carry a tag: a domain is always followed by '/'.
        let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name_tag[last_slash..].split_once(':') {
            Some((_, t)) => (&name_tag[..name_tag.len() - t.len() - 1], Some(t)),
            None => (name_tag, None),
        };
        if let Some(t) = tag
            && !valid_tag(t)
        {
            return None;
        }
        let components: Vec<&str> = name.split('/').collect();
        // `anchoredNameRegexp` takes a domain whenever the first component can be one.
        let path = if components.len() > 1 && valid_domain_and_port(components[0]) { &name[components[0].len() + 1..] } else { name };
        if !path.split('/').all(valid_path_component) || path.len() > REPOSITORY_NAME_TOTAL_LENGTH_MAX {
            return None;
        }
        Some((tag.map_or(0, str::len), digest.map_or(0, str::len)))
    }

    /// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
    fn valid_path_component(c: &str) -> bool {
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let b = c.as_bytes();
        if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
            return false;
        }
        let mut i = 0;
        while i < b.len() {
            if alnum(b[i]) {
                i += 1;
                continue;
            }
            // A separator between alphanumerics: ".", "_", "__" or one or more "-".
            let start = i;
            while i < b.len() && !alnum(b[i]) {
                i += 1;
            }
            let sep = &c[start..i];
            if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
                return false;
            }
        }
        true
    }

    /// `(?:domainName|\[[a-fA-F0-9:]+\])(?::[0-9]+)?`
    fn valid_domain_and_port(s: &str) -> bool {
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let Some((v6, after)) = rest.split_once(']') else { return false };
            if v6.is_empty() || !v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
                return false;
            }
            (None, after)
        } else {
            match s.split_once(':') {
                Some((h, _)) => (Some(h), &s[h.len()..]),
                None => (Some(s), ""),
            }
        };
        if let Some(h) = host
            && !h.split('.').all(valid_domain_component)
        {
            return false;
        }
        port.is_empty() || port.strip_prefix(':').is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    }

    /// `[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]`
    fn valid_domain_component(c: &str) -> bool {
        let b = c.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|x| x.is_ascii_alphanumeric() || *x == b'-')
    }

    /// `[\w][\w.-]{0,127}`
    fn valid_tag(t: &str) -> bool {
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let b = t.as_bytes();
        !b.is_empty() && b.len() <= 128 && word(b[0]) && b.iter().all(|x| word(*x) || *x == b'.' || *x == b'-')
    }

    /// The digest pattern of the reference grammar, then go-digest's `Validate` with the
    /// algorithms Kubernetes links in: sha256, sha384 and sha512 in lowercase hex of their size.
    fn valid_digest(d: &str) -> bool {
        let Some((algorithm, hex)) = d.split_once(':') else { return false };
        let size = match algorithm {
            "sha256" => 64,
            "sha384" => 96,
            "sha512" => 128,
            _ => return false,
        };
        hex.len() == size && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaulted_spec(mut spec: Value) -> Value {
        set_default_pod_spec(&mut spec);
        spec
    }

    #[test]
    fn kubernetes_reads_image_tags_with_the_docker_reference_grammar() {
        let sha = "0".repeat(64);
        for (image, tag) in [
            ("nginx", Some("latest")),
            ("nginx:1.25", Some("1.25")),
            ("nginx:latest", Some("latest")),
            ("nginx:LATEST", Some("LATEST")),
            ("registry:5000/team/nginx", Some("latest")),
            ("registry:5000/team/nginx:v2", Some("v2")),
            ("localhost/nginx:v2", Some("v2")),
            ("[::1]:5000/nginx", Some("latest")),
            ("Registry.Example.com/team/web:2", Some("2")),
            (&format!("nginx@sha256:{sha}"), Some("")),
            (&format!("nginx:latest@sha256:{sha}"), Some("latest")),
            // Not parsable: Kubernetes then does not see `latest`.
            ("", None),
            ("Nginx", None),
            ("team/Nginx:latest", None),
            ("nginx@sha256:abcd", None),
            (&format!("nginx@md5:{sha}"), None),
            (&format!("nginx@sha256:{}", "A".repeat(64)), None),
            (&sha, None),
            ("nginx:", None),
            ("nginx:-x", None),
            ("nginx::1", None),
            ("nginx/", None),
            ("nginx//x", None),
            ("ng--inx___x", None),
            ("ng--inx__x", Some("latest")),
            ("-registry.io/x", None),
            ("registry.io:/x", None),
            // The repository path (after `docker.io/`, with `library/` for a one-part name) has at
            // most 255 characters.
            (&format!("team/{}", "a".repeat(250)), Some("latest")),
            (&format!("team/{}", "a".repeat(251)), None),
            (&"a".repeat(247), Some("latest")),
            (&"a".repeat(248), None),
        ] {
            assert_eq!(image_tag(image), tag, "{image:?}");
        }
    }

    /// Regular containers pull `Always` whatever the tag (Kruise's in-place rule); init containers
    /// follow Kubernetes (`Always` only for `latest` or no tag); explicit policies stay.
    #[test]
    fn kruise_pulls_regular_containers_always_and_init_containers_by_tag() {
        let spec = defaulted_spec(json!({
            "initContainers": [{"name": "i1", "image": "busybox:1.36"}, {"name": "i2", "image": "busybox"},
                               {"name": "i3", "image": "busybox:latest", "imagePullPolicy": "Never"}, {"name": "i4", "image": "Busybox"}],
            "containers": [{"name": "a", "image": "nginx:1.27"}, {"name": "b", "image": "nginx", "imagePullPolicy": "IfNotPresent"},
                           {"name": "c", "image": "nginx:1.27", "imagePullPolicy": ""}],
            "ephemeralContainers": [{"name": "e", "image": "busybox"}]}));
        let policies = |list: &str| -> Vec<Value> {
            spec[list].as_array().unwrap().iter().map(|c| c.get("imagePullPolicy").cloned().unwrap_or(Value::Null)).collect()
        };
        assert_eq!(policies("initContainers"), [json!("IfNotPresent"), json!("Always"), json!("Never"), json!("IfNotPresent")]);
        assert_eq!(policies("containers"), [json!("Always"), json!("IfNotPresent"), json!("Always")]);
        assert_eq!(policies("ephemeralContainers"), [Value::Null], "ephemeral containers get no pull policy");
    }

    /// `SetDefaults_Pod` is never called on a template: no `enableServiceLinks`, no `hostPort`
    /// under `hostNetwork`, no requests copied from limits, no `resizePolicy`.
    #[test]
    fn kruise_fills_no_pod_only_defaults() {
        let spec = defaulted_spec(json!({"hostNetwork": true, "containers": [{"name": "a", "image": "app:1",
            "ports": [{"containerPort": 8080}], "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}));
        assert_eq!(spec.get("enableServiceLinks"), None);
        let c = &spec["containers"][0];
        assert_eq!(c["ports"][0], json!({"containerPort": 8080, "protocol": "TCP"}));
        assert_eq!(c["resources"], json!({"limits": {"cpu": "1", "memory": "1Gi"}}));
        assert_eq!(c.get("resizePolicy"), None);
    }

    #[test]
    fn kruise_fills_the_pod_spec_fields_and_keeps_explicit_ones() {
        assert_eq!(
            defaulted_spec(json!({"containers": []})),
            json!({"containers": [], "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "securityContext": {},
                   "terminationGracePeriodSeconds": 30, "schedulerName": "default-scheduler"})
        );
        let explicit = json!({"containers": [], "dnsPolicy": "Default", "restartPolicy": "Never", "securityContext": {"runAsUser": 1},
                              "terminationGracePeriodSeconds": 0, "schedulerName": "mine"});
        assert_eq!(defaulted_spec(explicit.clone()), explicit, "0 is a set pointer value");
        let empty = defaulted_spec(json!({"dnsPolicy": "", "securityContext": null, "terminationGracePeriodSeconds": null}));
        assert_eq!(
            (&empty["dnsPolicy"], &empty["securityContext"], &empty["terminationGracePeriodSeconds"]),
            (&json!("ClusterFirst"), &json!({}), &json!(30))
        );
        // No spec at all: Go's PodSpec is a struct, so it is defaulted too.
        assert_eq!(default_pod_template(&json!({"metadata": {}}))["spec"]["dnsPolicy"], "ClusterFirst");
        assert_eq!(default_pod_template(&json!({"spec": null}))["spec"]["schedulerName"], "default-scheduler");
    }

    #[test]
    fn kruise_fills_probe_and_hook_defaults_in_every_kind_of_container() {
        let c = json!({"name": "a", "image": "app:1",
            "readinessProbe": {"httpGet": {"port": 80}, "periodSeconds": 2, "timeoutSeconds": 0},
            "livenessProbe": {"grpc": {"port": 9}},
            "lifecycle": {"postStart": {"httpGet": {"port": 80, "path": "", "scheme": "HTTPS"}}, "preStop": {"exec": {"command": ["x"]}}},
            "ports": [{"containerPort": 53, "protocol": "UDP"}, {"containerPort": 80, "protocol": ""}],
            "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "M", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}]});
        let spec = defaulted_spec(json!({"initContainers": [c.clone()], "containers": [c.clone()], "ephemeralContainers": [c]}));
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            let c = &spec[list][0];
            assert_eq!(
                c["readinessProbe"],
                json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "periodSeconds": 2, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3}),
                "{list}"
            );
            assert_eq!(
                c["livenessProbe"],
                json!({"grpc": {"port": 9}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
            );
            assert_eq!(c["lifecycle"]["postStart"]["httpGet"], json!({"port": 80, "path": "/", "scheme": "HTTPS"}));
            assert_eq!(c["lifecycle"]["preStop"], json!({"exec": {"command": ["x"]}}));
            assert_eq!(c["ports"], json!([{"containerPort": 53, "protocol": "UDP"}, {"containerPort": 80, "protocol": "TCP"}]));
            assert_eq!(c["env"][0]["valueFrom"]["fieldRef"], json!({"fieldPath": "metadata.name", "apiVersion": "v1"}));
            assert_eq!(c["env"][1]["valueFrom"], json!({"resourceFieldRef": {"resource": "limits.memory"}}), "no divisor default");
        }
        assert_eq!(spec["ephemeralContainers"][0].get("terminationMessagePath"), None);
        assert_eq!(spec["initContainers"][0]["terminationMessagePolicy"], "File");
    }

    #[test]
    fn kruise_rounds_resource_quantities_up_to_milli_units() {
        let spec = defaulted_spec(json!({"overhead": {"cpu": "250u"}, "containers": [{"name": "a", "image": "app:1", "resources": {
            "limits": {"cpu": "0.0001", "memory": "1.5Gi", "example.com/x": 3},
            "requests": {"cpu": "100m", "memory": "1000u", "ephemeral-storage": "-1.0001m", "n": "1n", "odd": null}}}]}));
        assert_eq!(spec["overhead"], json!({"cpu": "1m"}));
        assert_eq!(
            spec["containers"][0]["resources"],
            json!({
            "limits": {"cpu": "1m", "memory": "1536Mi", "example.com/x": "3"},
            "requests": {"cpu": "100m", "memory": "1m", "ephemeral-storage": "-2m", "n": "1m", "odd": "0"}})
        );
        // Invalid quantities are left for the apiserver to refuse.
        let bad = defaulted_spec(json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1 core", "x": true}}}]}));
        assert_eq!(bad["containers"][0]["resources"], json!({"limits": {"cpu": "1 core", "x": true}}));
    }

    #[test]
    fn kruise_fills_volume_defaults() {
        let spec = defaulted_spec(json!({"volumes": [
            {"name": "none"},
            {"name": "nulls", "secret": null, "emptyDir": null},
            {"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}},
            {"name": "host", "hostPath": {"path": "/x"}},
            {"name": "host-typed", "hostPath": {"path": "/x", "type": "Directory"}},
            {"name": "cm", "configMap": {"name": "c", "items": [{"key": "k", "path": "p"}]}},
            {"name": "sec", "secret": {"secretName": "s", "defaultMode": 256}},
            {"name": "dapi", "downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "proj", "projected": {"sources": [
                {"downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                {"serviceAccountToken": {"path": "t"}}, {"serviceAccountToken": {"path": "t", "expirationSeconds": 600}},
                {"configMap": {"name": "c"}}]}},
            {"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
            {"name": "img", "image": {"reference": "x:1"}}]}));
        let v = |i: usize| spec["volumes"][i].clone();
        assert_eq!(v(0), json!({"name": "none", "emptyDir": {}}));
        assert_eq!(v(1), json!({"name": "nulls", "secret": null, "emptyDir": {}}));
        assert_eq!(v(2), json!({"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}}));
        assert_eq!(v(3), json!({"name": "host", "hostPath": {"path": "/x", "type": ""}}));
        assert_eq!(v(4), json!({"name": "host-typed", "hostPath": {"path": "/x", "type": "Directory"}}));
        assert_eq!(v(5), json!({"name": "cm", "configMap": {"name": "c", "defaultMode": 420, "items": [{"key": "k", "path": "p"}]}}));
        assert_eq!(v(6), json!({"name": "sec", "secret": {"secretName": "s", "defaultMode": 256}}));
        assert_eq!(
            v(7),
            json!({"name": "dapi", "downwardAPI": {"defaultMode": 420, "items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels", "apiVersion": "v1"}}]}})
        );
        assert_eq!(
            v(8),
            json!({"name": "proj", "projected": {"defaultMode": 420, "sources": [
                {"downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels", "apiVersion": "v1"}}]}},
                {"serviceAccountToken": {"path": "t", "expirationSeconds": 3600}}, {"serviceAccountToken": {"path": "t", "expirationSeconds": 600}},
                {"configMap": {"name": "c"}}]}})
        );
        assert_eq!(v(9), json!({"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}));
        assert_eq!(v(10), json!({"name": "img", "image": {"reference": "x:1"}}), "the ImageVolume gate is off in Kruise");
    }

    /// The volume sources listed here are exactly the pointer fields of Go's `v1.Volume` (its
    /// inlined `VolumeSource`), as the generated schema of the Go types has them.
    #[test]
    fn volume_sources_are_those_of_the_go_type() {
        let schema: Value = serde_json::from_str(include_str!("gojson_podtemplate_schema.json")).unwrap();
        let fields: Vec<&str> = schema["types"]["k8s.io/api/core/v1.Volume"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["name"] != "name")
            .inspect(|f| assert!(f["type"].as_str().unwrap().starts_with('*'), "{f}"))
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(fields, VOLUME_SOURCES);
    }

    /// Kruise's webhook defaults a template it already defaulted to the same thing, so defaulting
    /// a stored template again changes nothing (and its revision keeps its name).
    #[test]
    fn kruise_defaulting_is_idempotent() {
        let templates = [
            json!({"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "a", "image": "nginx"}]}}),
            json!({"spec": {"hostNetwork": true, "overhead": {"cpu": "1u"},
                "initContainers": [{"name": "i", "image": "busybox", "resources": {"limits": {"memory": "1.5Gi"}}}],
                "containers": [{"name": "a", "image": "nginx:1", "ports": [{"containerPort": 1}],
                    "readinessProbe": {"httpGet": {"port": 1}}, "lifecycle": {"preStop": {"httpGet": {"port": 1}}},
                    "env": [{"name": "E", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                    "resources": {"requests": {"cpu": "0.00001", "memory": 100}}}],
                "volumes": [{"name": "v"}, {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}}),
        ];
        for t in templates {
            let once = default_pod_template(&t);
            assert_ne!(once, t);
            assert_eq!(default_pod_template(&once), once);
        }
    }

    /// The webhook decodes the template into Go types before defaulting and writes back what Go
    /// encodes: a `null` container or volume is a zero value that gets defaults, a template
    /// without a spec gets a defaulted empty one, and integers keep every digit.
    #[test]
    fn kruise_defaults_the_template_as_go_decoded_it() {
        let t = default_pod_template(&json!({"spec": {"containers": [null], "volumes": [null],
            "securityContext": {"runAsUser": 9_007_199_254_740_993_i64}}}));
        assert_eq!(
            t["spec"]["containers"][0],
            json!({"name": "", "imagePullPolicy": "Always", "resources": {}, "terminationMessagePath": "/dev/termination-log",
                   "terminationMessagePolicy": "File"})
        );
        assert_eq!(t["spec"]["volumes"][0], json!({"name": "", "emptyDir": {}}));
        assert_eq!(t["spec"]["securityContext"]["runAsUser"], json!(9_007_199_254_740_993_i64));
        for no_spec in [json!({"metadata": {}}), json!({"spec": null}), json!(null)] {
            let t = default_pod_template(&no_spec);
            assert_eq!(t["spec"]["dnsPolicy"], "ClusterFirst", "{no_spec}");
            assert_eq!(t["spec"]["schedulerName"], "default-scheduler", "{no_spec}");
        }
    }

    /// On raw JSON, values Kruise could not decode are left for the apiserver to refuse.
    #[test]
    fn values_of_the_wrong_type_are_left_alone() {
        for mut spec in [json!("x"), json!(5), json!({"containers": "x", "volumes": [1, null], "overhead": [1]})] {
            let before = spec.clone();
            set_default_pod_spec(&mut spec);
            if before.is_object() {
                assert_eq!(spec["containers"], before["containers"]);
                assert_eq!(spec["volumes"], before["volumes"]);
                assert_eq!(spec["overhead"], before["overhead"]);
            } else {
                assert_eq!(spec, before);
            }
        }
    }
}
