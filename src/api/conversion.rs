//! Conversion between `apps.kruise.io/v1alpha1` (stored) and `v1beta1` CloneSets, on the JSON
//! objects the apiserver sends the conversion webhook.
//!
//! The mapping is Kruise's (`cloneset_conversion.go`): the rolling-update settings move under
//! `rollingUpdate`, the update type splits into `type` and `podUpdatePolicy`, `disablePVCReuse`
//! inverts into `enablePVCReuse`, the image pre-download annotations become fields. Everything
//! else (metadata, template, status) is passed through untouched, so the stored template, and
//! with it every revision name, is the bytes the user wrote.
//!
//! Kruise's mapping loses a few things one version cannot say (a `podUpdatePolicy` under
//! `OnDelete`, an empty `inPlaceUpdateStrategy`, `excludePreparingDelete` without its label).
//! Where a plain conversion would not convert back to the same object, the parts it moves are
//! kept in the [`STASH`] annotation, as Kubernetes' own conversions keep fields in annotations;
//! converting back restores them while they still describe the object, and ignores them once
//! the object was changed through the other version.

use serde_json::{Map, Value, json};

use super::keys;

pub(crate) const GROUP: &str = "apps.kruise.io";
pub const V1ALPHA1: &str = "apps.kruise.io/v1alpha1";
pub const V1BETA1: &str = "apps.kruise.io/v1beta1";

/// Annotation holding the moved parts of the version an object was converted from, when the
/// plain mapping would lose them (JSON: `{"apiVersion", "scaleStrategy", "updateStrategy",
/// "labels", "annotations"}`; absent keys as null).
pub const STASH: &str = "cloneset-operator.dev/converted-from";

/// The one label and the annotations whose meaning is a v1beta1 field.
const MOVED_ANNOTATIONS: [&str; 3] =
    [keys::IMAGE_PREDOWNLOAD_PARALLELISM, keys::IMAGE_PREDOWNLOAD_TIMEOUT_SECONDS, keys::IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS];

/// Fields of v1alpha1's `updateStrategy` that live under v1beta1's `rollingUpdate`.
const ROLLING_FIELDS: [&str; 7] =
    ["partition", "maxUnavailable", "maxSurge", "paused", "priorityStrategy", "scatterStrategy", "inPlaceUpdateStrategy"];

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConversionError {
    #[error("unsupported apiVersion {0:?}: expected apps.kruise.io/v1alpha1 or apps.kruise.io/v1beta1")]
    UnsupportedVersion(String),
    #[error("object is not a JSON object")]
    NotAnObject,
}

/// Converts one CloneSet to `desired` (`apps.kruise.io/v1alpha1` or `/v1beta1`).
pub fn convert(object: &Value, desired: &str) -> Result<Value, ConversionError> {
    let from = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    for v in [from, desired] {
        if v != V1ALPHA1 && v != V1BETA1 {
            return Err(ConversionError::UnsupportedVersion(v.to_string()));
        }
    }
    if !object.is_object() {
        return Err(ConversionError::NotAnObject);
    }
    if from == desired {
        return Ok(object.clone());
    }
    let mut source = object.clone();
    let stash = take_stash(&mut source);
    let forward = |parts: &Parts| if desired == V1BETA1 { to_beta(parts) } else { to_alpha(parts) };
    let backward = |parts: &Parts| if desired == V1BETA1 { to_alpha(parts) } else { to_beta(parts) };
    let normal_source = |parts: &Parts| if desired == V1BETA1 { parts.defaulted_alpha() } else { parts.defaulted_beta() };

    let parts = Parts::of(&source);
    let restored = stash.filter(|s| s.api_version == desired).map(|s| s.parts).filter(|candidate| {
        // Still this object's other form: it converts to exactly what we were given.
        normal_source(&backward(candidate)) == normal_source(&parts)
    });
    let (converted, keep) = match restored {
        // Shown as Kruise shows a v1beta1 CloneSet: its rolling-update settings filled in.
        Some(p) if desired == V1BETA1 => (p.with_rolling_update_defaults(), None),
        Some(p) => (p, None),
        None => {
            let converted = forward(&parts);
            let lossless = normal_source(&backward(&converted)) == normal_source(&parts);
            (converted, (!lossless).then(|| Stash { api_version: from.to_string(), parts: parts.clone() }))
        }
    };
    let mut out = source;
    out["apiVersion"] = json!(desired);
    converted.write(&mut out);
    if let Some(stash) = keep {
        set_meta(&mut out, "annotations", STASH, Some(stash.to_json().to_string()));
    }
    Ok(out)
}

/// The parts of a CloneSet the conversion moves; everything else is copied as is.
#[derive(Clone, Debug, PartialEq)]
struct Parts {
    scale_strategy: Option<Value>,
    update_strategy: Option<Value>,
    exclude_label: Option<String>,
    annotations: [Option<String>; 3],
}

impl Parts {
    fn of(object: &Value) -> Self {
        let spec = object.get("spec");
        let meta = |kind: &str, key: &str| object["metadata"][kind].get(key).and_then(Value::as_str).map(str::to_string);
        Parts {
            scale_strategy: spec.and_then(|s| s.get("scaleStrategy")).cloned(),
            update_strategy: spec.and_then(|s| s.get("updateStrategy")).cloned(),
            exclude_label: meta("labels", keys::SCALING_EXCLUDE_PREPARING_DELETE),
            annotations: MOVED_ANNOTATIONS.map(|k| meta("annotations", k)),
        }
    }

    fn write(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            for (key, value) in [("scaleStrategy", &self.scale_strategy), ("updateStrategy", &self.update_strategy)] {
                match value {
                    Some(v) => spec.insert(key.into(), v.clone()),
                    None => spec.remove(key),
                };
            }
        }
        set_meta(object, "labels", keys::SCALING_EXCLUDE_PREPARING_DELETE, self.exclude_label.clone());
        for (key, value) in MOVED_ANNOTATIONS.iter().zip(&self.annotations) {
            set_meta(object, "annotations", key, value.clone());
        }
    }

    /// What the apiserver's v1alpha1 schema defaults make of these parts.
    fn defaulted_alpha(&self) -> Self {
        let mut p = self.clone();
        let us = p.update_strategy.get_or_insert_with(|| json!({}));
        if let Some(us) = us.as_object_mut() {
            default_key(us, "type", json!("ReCreate"));
            if us["type"] == "" {
                us.insert("type".into(), json!("ReCreate"));
            }
            default_rolling(us);
        }
        p.scale_strategy.get_or_insert_with(|| json!({}));
        drop_false(&mut p.scale_strategy, "disablePVCReuse");
        p
    }

    /// What v1beta1's schema defaults, and Kruise's v1beta1 defaulting of a `RollingUpdate`
    /// without settings, make of these parts.
    fn defaulted_beta(&self) -> Self {
        let mut p = self.with_rolling_update_defaults();
        p.scale_strategy.get_or_insert_with(|| json!({}));
        drop_false(&mut p.scale_strategy, "enablePVCReuse");
        drop_false(&mut p.scale_strategy, "excludePreparingDelete");
        p
    }

    /// Kruise's v1beta1 defaulting of the update strategy: a `RollingUpdate` (the default type)
    /// gets its settings filled in, as a v1alpha1 CloneSet read as v1beta1 shows them.
    fn with_rolling_update_defaults(&self) -> Self {
        let mut p = self.clone();
        let us = p.update_strategy.get_or_insert_with(|| json!({}));
        if let Some(us) = us.as_object_mut() {
            if us.get("type").is_none_or(|t| t == "") {
                us.insert("type".into(), json!("RollingUpdate"));
            }
            if us["type"] == "RollingUpdate" && us.get("rollingUpdate").is_none() {
                us.insert("rollingUpdate".into(), json!({}));
            }
            if let Some(ru) = us.get_mut("rollingUpdate").and_then(Value::as_object_mut) {
                if ru.get("podUpdatePolicy").is_none_or(|t| t == "") {
                    ru.insert("podUpdatePolicy".into(), json!("ReCreate"));
                }
                default_rolling(ru);
            }
        }
        p
    }
}

fn default_key(map: &mut Map<String, Value>, key: &str, value: Value) {
    map.entry(key).or_insert(value);
}

fn default_rolling(map: &mut Map<String, Value>) {
    default_key(map, "partition", json!(0));
    default_key(map, "maxUnavailable", json!("20%"));
    default_key(map, "maxSurge", json!(0));
    if map.get("paused") == Some(&json!(false)) {
        map.remove("paused");
    }
}

fn drop_false(v: &mut Option<Value>, key: &str) {
    if let Some(map) = v.as_mut().and_then(Value::as_object_mut)
        && map.get(key) == Some(&json!(false))
    {
        map.remove(key);
    }
}

/// v1alpha1 → v1beta1, as Kruise maps it.
fn to_beta(alpha: &Parts) -> Parts {
    let mut scale = alpha.scale_strategy.as_ref().and_then(Value::as_object).cloned().unwrap_or_default();
    let disable = scale.remove("disablePVCReuse").is_some_and(|v| v == true);
    if !disable {
        scale.insert("enablePVCReuse".into(), json!(true));
    }
    if alpha.exclude_label.as_deref() == Some("true") {
        scale.insert("excludePreparingDelete".into(), json!(true));
    }

    let us = alpha.update_strategy.as_ref().and_then(Value::as_object).cloned().unwrap_or_default();
    let alpha_type = us.get("type").and_then(Value::as_str).unwrap_or_default();
    let mut update = Map::new();
    if alpha_type == "OnDelete" {
        update.insert("type".into(), json!("OnDelete"));
    } else {
        let policy = match alpha_type {
            "InPlaceIfPossible" | "InPlaceOnly" => alpha_type,
            _ => "ReCreate",
        };
        let mut rolling = Map::new();
        for key in ROLLING_FIELDS {
            if let Some(v) = us.get(key).filter(|v| !is_go_zero(key, v)) {
                rolling.insert(key.into(), v.clone());
            }
        }
        rolling.insert("podUpdatePolicy".into(), json!(policy));
        match in_place_to_beta(us.get("inPlaceUpdateStrategy"), &alpha.annotations) {
            Some(ip) => rolling.insert("inPlaceUpdateStrategy".into(), ip),
            None => rolling.remove("inPlaceUpdateStrategy"),
        };
        update.insert("type".into(), json!("RollingUpdate"));
        update.insert("rollingUpdate".into(), Value::Object(rolling));
    }
    Parts {
        scale_strategy: Some(Value::Object(scale)),
        update_strategy: Some(Value::Object(update)),
        exclude_label: alpha.exclude_label.clone(),
        annotations: alpha.annotations.clone(),
    }
}

/// v1beta1 → v1alpha1, as Kruise maps it, except that `excludePreparingDelete: true` sets the
/// v1alpha1 label (Kruise drops it; the stored form must say it for the controller to honour it).
fn to_alpha(beta: &Parts) -> Parts {
    let mut scale = beta.scale_strategy.as_ref().and_then(Value::as_object).cloned().unwrap_or_default();
    let enable = scale.remove("enablePVCReuse").is_some_and(|v| v == true);
    let exclude = scale.remove("excludePreparingDelete").is_some_and(|v| v == true);
    if !enable {
        scale.insert("disablePVCReuse".into(), json!(true));
    }
    let mut exclude_label = beta.exclude_label.clone();
    if exclude {
        exclude_label = Some("true".into());
    }

    let us = beta.update_strategy.as_ref().and_then(Value::as_object).cloned().unwrap_or_default();
    let rolling = us.get("rollingUpdate").and_then(Value::as_object);
    let alpha_type = if us.get("type").and_then(Value::as_str) == Some("OnDelete") {
        "OnDelete"
    } else {
        let policy = rolling.and_then(|r| r.get("podUpdatePolicy")).and_then(Value::as_str);
        policy.filter(|p| matches!(*p, "InPlaceIfPossible" | "InPlaceOnly")).unwrap_or("ReCreate")
    };
    let mut update = Map::new();
    update.insert("type".into(), json!(alpha_type));
    let mut annotations = beta.annotations.clone();
    if let Some(rolling) = rolling {
        for key in ROLLING_FIELDS {
            if let Some(v) = rolling.get(key).filter(|v| !is_go_zero(key, v)) {
                update.insert(key.into(), v.clone());
            }
        }
        match in_place_to_alpha(rolling.get("inPlaceUpdateStrategy"), &mut annotations) {
            Some(ip) => update.insert("inPlaceUpdateStrategy".into(), ip),
            None => update.remove("inPlaceUpdateStrategy"),
        };
    }
    Parts { scale_strategy: Some(Value::Object(scale)), update_strategy: Some(Value::Object(update)), exclude_label, annotations }
}

/// Values Go's `omitempty` leaves out when Kruise re-encodes the converted struct.
fn is_go_zero(key: &str, v: &Value) -> bool {
    match key {
        "paused" => v == &json!(false),
        "scatterStrategy" => v.as_array().is_some_and(Vec::is_empty),
        _ => v.is_null(),
    }
}

/// v1alpha1's `inPlaceUpdateStrategy` (grace period only) plus the image pre-download
/// annotations, as v1beta1's `inPlaceUpdateStrategy`. Unparsable annotations stay annotations.
fn in_place_to_beta(src: Option<&Value>, annotations: &[Option<String>; 3]) -> Option<Value> {
    let set = |i: usize| annotations[i].as_deref().filter(|s| !s.is_empty());
    if src.is_none_or(Value::is_null) && (0..3).all(|i| set(i).is_none()) {
        return None;
    }
    let mut dst = Map::new();
    if let Some(g) = src.and_then(|s| s.get("gracePeriodSeconds")).filter(|g| *g != &json!(0)) {
        dst.insert("gracePeriodSeconds".into(), g.clone());
    }
    if let Some(p) = set(0) {
        dst.insert("imagePreDownloadParallelism".into(), parse_int_or_string(p));
    }
    if let Some(t) = set(1).and_then(|s| s.parse::<i32>().ok()) {
        dst.insert("imagePreDownloadTimeoutSeconds".into(), json!(t));
    }
    if let Some(m) = set(2).and_then(|s| s.parse::<i32>().ok()) {
        dst.insert("imagePreDownloadMinUpdatedReadyPods".into(), json!(m));
    }
    Some(Value::Object(dst))
}

/// v1beta1's `inPlaceUpdateStrategy` as v1alpha1's, its image pre-download fields written to
/// `annotations`. Kruise drops a strategy without any setting; we also drop one whose only
/// settings became annotations.
fn in_place_to_alpha(src: Option<&Value>, annotations: &mut [Option<String>; 3]) -> Option<Value> {
    let src = src.and_then(Value::as_object)?;
    let field = |k: &str| src.get(k).filter(|v| !v.is_null());
    let grace = src.get("gracePeriodSeconds").filter(|g| *g != &json!(0));
    let image = ["imagePreDownloadParallelism", "imagePreDownloadTimeoutSeconds", "imagePreDownloadMinUpdatedReadyPods"];
    if grace.is_none() && image.iter().all(|k| field(k).is_none()) {
        return None;
    }
    for (i, key) in image.iter().enumerate() {
        if let Some(v) = field(key) {
            annotations[i] = Some(match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
    }
    // Kruise keeps an empty strategy here; the v1alpha1 twin the manual shows has none, and
    // converting back makes the same v1beta1 strategy either way.
    grace.map(|g| json!({"gracePeriodSeconds": g}))
}

/// `intstr.Parse`: an int32 when the whole string is one, else the string.
fn parse_int_or_string(s: &str) -> Value {
    match s.parse::<i32>() {
        Ok(n) => json!(n),
        Err(_) => json!(s),
    }
}

/// `metadata.<kind>[key] = value`, removing the key (and an emptied map) for `None`.
fn set_meta(object: &mut Value, kind: &str, key: &str, value: Option<String>) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        if value.is_some() {
            object["metadata"] = json!({});
            return set_meta(object, kind, key, value);
        }
        return;
    };
    match value {
        Some(v) => {
            let map = meta.entry(kind).or_insert_with(|| json!({}));
            if !map.is_object() {
                *map = json!({});
            }
            map[key] = json!(v);
        }
        None => {
            if let Some(map) = meta.get_mut(kind).and_then(Value::as_object_mut) {
                map.remove(key);
                if map.is_empty() {
                    meta.remove(kind);
                }
            }
        }
    }
}

struct Stash {
    api_version: String,
    parts: Parts,
}

impl Stash {
    fn to_json(&self) -> Value {
        let p = &self.parts;
        let mut annotations = Map::new();
        for (k, v) in MOVED_ANNOTATIONS.iter().zip(&p.annotations) {
            annotations.insert((*k).into(), json!(v));
        }
        json!({
            "apiVersion": self.api_version,
            "scaleStrategy": p.scale_strategy,
            "updateStrategy": p.update_strategy,
            "labels": {keys::SCALING_EXCLUDE_PREPARING_DELETE: p.exclude_label},
            "annotations": annotations,
        })
    }

    fn from_json(v: &Value) -> Option<Self> {
        let text = |v: &Value| match v {
            Value::Null => Some(None),
            Value::String(s) => Some(Some(s.clone())),
            _ => None,
        };
        let opt = |key: &str| v.get(key).filter(|x| !x.is_null()).cloned();
        let mut annotations: [Option<String>; 3] = Default::default();
        for (slot, k) in annotations.iter_mut().zip(MOVED_ANNOTATIONS) {
            *slot = text(v["annotations"].get(k)?)?;
        }
        Some(Stash {
            api_version: v.get("apiVersion")?.as_str()?.to_string(),
            parts: Parts {
                scale_strategy: opt("scaleStrategy"),
                update_strategy: opt("updateStrategy"),
                exclude_label: text(v["labels"].get(keys::SCALING_EXCLUDE_PREPARING_DELETE)?)?,
                annotations,
            },
        })
    }
}

/// Removes the stash annotation, returning it when it parses.
fn take_stash(object: &mut Value) -> Option<Stash> {
    let raw = object["metadata"]["annotations"].get(STASH)?.as_str()?.to_string();
    set_meta(object, "annotations", STASH, None);
    Stash::from_json(&serde_json::from_str(&raw).ok()?)
}

#[cfg(test)]
mod tests;
