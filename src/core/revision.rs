//! ControllerRevision data, hash and name, byte-compatible with OpenKruise v1.9.0.
//!
//! * data: `{"spec":{"template":{"$patch":"replace",...}}}`, the template as Go encodes it
//!   ([`super::gojson`]);
//! * hash: FNV-1 (not 1a), 32 bits, over the data followed by the decimal collision count, printed
//!   in decimal and safe-encoded digit by digit (k8s `history.HashControllerRevision`);
//! * name: `<cloneset>-<hash>` with the CloneSet name cut to 223 bytes (`history.ControllerRevisionName`);
//! * `kruise.io/cloneset-volumeclaimtemplate-hash`: [`volume_claim_templates_hash`].

use serde_json::{Map, Value};

use super::gojson;

/// The longest CloneSet-name prefix kept in a revision name.
pub(crate) const REVISION_NAME_PREFIX_MAX: usize = 223;

/// The directive Kruise puts into the recorded template so that applying the revision as a
/// strategic-merge patch replaces the template wholesale.
const PATCH_KEY: &str = "$patch";

#[derive(Debug, thiserror::Error)]
pub enum RevisionDataError {
    #[error("revision data is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("revision data has no spec.template object")]
    NoTemplate,
}

/// The exact bytes Kruise stores as `ControllerRevision.data` for a CloneSet with this
/// `spec.template` (as read from the apiserver).
pub fn revision_data(template: &Value) -> Vec<u8> {
    let mut template = gojson::normalize_pod_template(template);
    if let Value::Object(map) = &mut template {
        map.insert(PATCH_KEY.into(), Value::String("replace".into()));
    }
    let mut spec = Map::new();
    spec.insert("template".into(), template);
    let mut root = Map::new();
    root.insert("spec".into(), Value::Object(spec));
    gojson::encode_value(&Value::Object(root))
}

/// The `controller.kubernetes.io/hash` of revision data at a collision count.
pub fn hash_revision(data: &[u8], collision_count: i32) -> String {
    let hash = fnv1_32(&[data, collision_count.to_string().as_bytes()]);
    safe_encode(&hash.to_string())
}

/// The collision count, from `at_least` up, under which one of `data` hashes to revision `name`
/// of CloneSet `cloneset_name`; `at_least` when none does within a few. A revision named after a
/// hash collision keeps its count this way even when the status it is read against (from a cache
/// a moment behind the status write) still has the count from before the collision.
pub(crate) fn collision_count_naming(cloneset_name: &str, name: &str, data: &[&[u8]], at_least: i32) -> i32 {
    const SEARCHED: i32 = 16;
    (at_least..at_least.saturating_add(SEARCHED))
        .find(|n| data.iter().any(|d| revision_name(cloneset_name, &hash_revision(d, *n)) == name))
        .unwrap_or(at_least)
}

/// `<cloneset>-<hash>`, the CloneSet name cut to [`REVISION_NAME_PREFIX_MAX`] bytes. Go cuts bytes;
/// object names are ASCII, and a cut inside a multi-byte character backs off to the character start.
pub fn revision_name(cloneset_name: &str, hash: &str) -> String {
    let mut end = cloneset_name.len().min(REVISION_NAME_PREFIX_MAX);
    while !cloneset_name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", &cloneset_name[..end])
}

/// The pod template recorded in revision data, without the `"$patch"` directive: what applying the
/// revision (a strategic-merge patch with `$patch: replace`) puts into `spec.template`.
pub fn template_from_revision_data(data: &[u8]) -> Result<Value, RevisionDataError> {
    let mut root: Value = serde_json::from_slice(data)?;
    let template = root.get_mut("spec").and_then(|s| s.get_mut("template")).map(Value::take);
    match template {
        Some(Value::Object(mut map)) => {
            map.remove(PATCH_KEY);
            Ok(Value::Object(map))
        }
        _ => Err(RevisionDataError::NoTemplate),
    }
}

/// The `kruise.io/cloneset-volumeclaimtemplate-hash` Kruise v1.9.0 writes on a revision for a
/// CloneSet's `spec.volumeClaimTemplates` (as read from the apiserver; give it
/// [`super::defaults::default_volume_claim_templates`] of them where Kruise's webhook would have
/// defaulted them). `""` without templates; otherwise each template's name and spec only, stable-sorted
/// by name, encoded as Go's `json.Marshal([]PersistentVolumeClaim)`, and that byte slice hashed with
/// FNV-1a (32 bits) in the text Kubernetes' `DeepHashObject` prints for it (`([]uint8)[91 123 …]`),
/// in decimal. Checked against Go in `tests/revision_golden.rs`.
pub fn volume_claim_templates_hash(templates: &Value) -> String {
    const PVC: &str = "k8s.io/api/core/v1.PersistentVolumeClaim";
    let Some(claims) = names_and_specs(templates) else { return String::new() };
    let mut json = vec![b'['];
    for (i, (name, spec)) in claims.into_iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        let claim = serde_json::json!({"metadata": {"name": name}, "spec": spec});
        json.extend(gojson::encode_typed(PVC, &claim).expect("the schema describes PersistentVolumeClaim"));
    }
    json.push(b']');
    let printed: Vec<String> = json.iter().map(u8::to_string).collect();
    let text = format!("([]uint8)[{}]", printed.join(" "));
    fnv1a_32(text.as_bytes()).to_string()
}

/// The VCT hash this operator recorded on revisions before it hashed like Kruise (up to commit
/// 66daf67): FNV-1a over serde's JSON of the (name, spec) pairs sorted by name, for
/// templates as serde writes `Vec<PersistentVolumeClaim>`. Kept to recognise those revisions.
pub fn legacy_volume_claim_templates_hash(templates: &Value) -> String {
    let Some(claims) = names_and_specs(templates) else { return String::new() };
    fnv1a_32(&serde_json::to_vec(&claims).unwrap_or_default()).to_string()
}

/// Each claim template's name (`""` when missing) and spec (`null` when missing), stable-sorted by
/// name bytewise; `None` without templates.
fn names_and_specs(templates: &Value) -> Option<Vec<(String, Value)>> {
    let templates = templates.as_array().filter(|t| !t.is_empty())?;
    let mut claims: Vec<(String, Value)> = templates
        .iter()
        .map(|t| {
            let name = t.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
            (name, t.get("spec").cloned().unwrap_or(Value::Null))
        })
        .collect();
    claims.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Some(claims)
}

const FNV_OFFSET_BASIS: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

/// FNV-1a, 32 bits: xor, then multiply.
fn fnv1a_32(bytes: &[u8]) -> u32 {
    let mut hash = FNV_OFFSET_BASIS;
    for byte in bytes {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// FNV-1, 32 bits: multiply, then xor (FNV-1a does it the other way round).
fn fnv1_32(parts: &[&[u8]]) -> u32 {
    let mut hash = FNV_OFFSET_BASIS;
    for byte in parts.iter().flat_map(|p| p.iter()) {
        hash = hash.wrapping_mul(FNV_PRIME);
        hash ^= u32::from(*byte);
    }
    hash
}

/// apimachinery's `rand.SafeEncodeString`: each character indexes an alphabet without vowels, so the
/// decimal digits 0-9 become `4 5 6 7 8 9 b c d f`.
fn safe_encode(s: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.chars().map(|c| char::from(ALPHABET[c as usize % ALPHABET.len()])).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SAMPLE_DATA: &str = concat!(
        r#"{"spec":{"template":{"$patch":"replace","metadata":{"creationTimestamp":null,"labels":{"app":"sample"}},"#,
        r#""spec":{"containers":[{"image":"nginx:alpine","name":"nginx","resources":{}}]}}}}"#
    );

    fn sample_template() -> Value {
        json!({"metadata": {"labels": {"app": "sample"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]}})
    }

    /// The template encoded as given: Kruise's name for it when its webhook leaves templates
    /// alone (`TemplateNoDefaults`); defaulted, the same manifest is `sample-d4d4fb5bd`
    /// (tests/kruise_revisions.rs).
    #[test]
    fn known_answer() {
        let data = revision_data(&sample_template());
        assert_eq!(String::from_utf8(data.clone()).unwrap(), SAMPLE_DATA);
        let hash = hash_revision(&data, 0);
        assert_eq!(hash, "597d4cb8fd");
        assert_eq!(revision_name("sample", &hash), "sample-597d4cb8fd");
    }

    #[test]
    fn a_revision_named_after_a_collision_gives_its_count_back() {
        let (data, other) = (SAMPLE_DATA.as_bytes(), b"other".as_slice());
        let named = |n| revision_name("sample", &hash_revision(data, n));
        assert_eq!(collision_count_naming("sample", &named(0), &[data], 0), 0);
        assert_eq!(collision_count_naming("sample", &named(2), &[other, data], 0), 2, "either data may name it");
        assert_eq!(collision_count_naming("sample", &named(2), &[data], 1), 2);
        assert_eq!(collision_count_naming("sample", &named(1), &[data], 3), 3, "never below what is known");
        assert_eq!(collision_count_naming("sample", "sample-unrelated", &[data], 1), 1);
    }

    #[test]
    fn collision_count_is_appended_in_decimal() {
        let data = SAMPLE_DATA.as_bytes();
        assert_eq!(hash_revision(data, 1), "597d4cb8ff");
        assert_eq!(fnv1_32(&[data, b"0"]), 1_538_076_498);
        assert_eq!(fnv1_32(&[data, b"10"]), fnv1_32(&[data, b"1", b"0"]));
        assert_ne!(hash_revision(data, 10), hash_revision(data, 1));
    }

    #[test]
    fn fnv1_is_not_fnv1a() {
        assert_eq!(fnv1_32(&[]), 0x811c_9dc5);
        // Published FNV-1 32-bit test vectors.
        assert_eq!(fnv1_32(&[b"a"]), 0x050c_5d7e);
        assert_eq!(fnv1_32(&[b"foobar"]), 0x31f0_b262);
    }

    #[test]
    fn safe_encoding_maps_digits() {
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
        assert_eq!(safe_encode("1538076498"), "597d4cb8fd");
    }

    #[test]
    fn name_prefix_is_truncated_to_223_bytes() {
        let long = "a".repeat(300);
        let name = revision_name(&long, "597d4cb8fd");
        assert_eq!(name, format!("{}-597d4cb8fd", "a".repeat(223)));
        let exact = "b".repeat(223);
        assert_eq!(revision_name(&exact, "4"), format!("{exact}-4"));
        let multibyte = format!("{}é", "c".repeat(222));
        assert_eq!(revision_name(&multibyte, "4"), format!("{}-4", "c".repeat(222)));
    }

    #[test]
    fn template_round_trips_through_revision_data() {
        let data = revision_data(&sample_template());
        let template = template_from_revision_data(&data).unwrap();
        assert_eq!(
            template,
            json!({"metadata": {"creationTimestamp": null, "labels": {"app": "sample"}},
                   "spec": {"containers": [{"image": "nginx:alpine", "name": "nginx", "resources": {}}]}})
        );
        // Recording the recovered template again gives the same bytes.
        assert_eq!(revision_data(&template), data);
        assert!(matches!(template_from_revision_data(b"{\"spec\":{}}"), Err(RevisionDataError::NoTemplate)));
        assert!(matches!(template_from_revision_data(b"not json"), Err(RevisionDataError::Json(_))));
    }

    #[test]
    fn a_literal_patch_directive_is_replaced() {
        let mut template = sample_template();
        template["$patch"] = json!("merge");
        assert_eq!(revision_data(&template), SAMPLE_DATA.as_bytes());
    }
}
