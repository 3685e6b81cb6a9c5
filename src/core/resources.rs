//! Container resources for in-place vertical scaling (InPlaceWorkloadVerticalScaling): quantities
//! compared by value, the pod QoS class a template gives, and whether the kubelet reports the
//! resources a pod's spec asks for.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

/// The resources Kubernetes can resize in place (and the only ones the QoS class counts).
pub(crate) const RESIZABLE: [&str; 2] = ["cpu", "memory"];

/// A quantity's value in nano-units (`1` is 10⁹, `1m` is 10⁶, `1Ki` is 1024·10⁹), exact for
/// anything a container asks for; `None` when it is not a quantity or too large.
pub(crate) fn quantity_nanos(s: &str) -> Option<i128> {
    let s = s.trim();
    let (negative, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let number_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let mut mantissa: i128 = 0;
    for d in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa.checked_mul(10)?.checked_add(i128::from(d - b'0'))?;
    }
    // value = mantissa · 10^(exp10 − len(fraction)) · 2^exp2, in nano-units: exp10 + 9.
    let (exp2, exp10): (u32, i32) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        e => (0, e.strip_prefix(['e', 'E'])?.parse().ok()?),
    };
    let mut value = mantissa.checked_mul(1i128.checked_shl(exp2)?)?;
    let scale = exp10 + 9 - i32::try_from(fraction.len()).ok()?;
    if scale >= 0 {
        value = value.checked_mul(10i128.checked_pow(scale as u32)?)?;
    } else {
        // Below a nano-unit: Kubernetes rounds up.
        let divisor = 10i128.checked_pow(scale.unsigned_abs())?;
        value = (value + divisor - 1) / divisor;
    }
    Some(if negative { -value } else { value })
}

/// A quantity as JSON spells it: a string, or a number in a template written as YAML.
fn json_quantity(v: &Value) -> Option<i128> {
    match v {
        Value::String(s) => quantity_nanos(s),
        Value::Number(n) => quantity_nanos(&n.to_string()),
        _ => None,
    }
}

/// Two quantities of the same amount (`1` and `1000m`).
pub(crate) fn same_quantity(a: &Quantity, b: &Quantity) -> bool {
    a.0 == b.0 || quantity_nanos(&a.0).is_some_and(|v| quantity_nanos(&b.0) == Some(v))
}

/// Two resource lists with the same resources, each the same amount (`1` equals `1000m`). An
/// absent list and an empty one are the same.
pub(crate) fn same_resource_list(a: Option<&BTreeMap<String, Quantity>>, b: Option<&BTreeMap<String, Quantity>>) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len() && a.iter().all(|(k, q)| b.get(k).is_some_and(|other| same_quantity(q, other)))
}

/// The pod QoS class (`Guaranteed`, `Burstable`, `BestEffort`) of a pod spec as JSON, as the
/// kubelet computes it from its containers' and init containers' cpu and memory. `None` when a
/// quantity does not parse.
pub(crate) fn qos_class(spec: &Value) -> Option<&'static str> {
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"].into_iter().flat_map(|k| spec.get(k).and_then(Value::as_array).into_iter().flatten());
    for c in containers {
        let resources = c.get("resources");
        for (name, v) in resources.and_then(|r| r.get("requests")).and_then(Value::as_object).into_iter().flatten() {
            let Some(name) = RESIZABLE.into_iter().find(|r| r == name) else { continue };
            let q = json_quantity(v)?;
            if q > 0 {
                *requests.entry(name).or_default() += q;
            }
        }
        let mut limits_found = Vec::new();
        for (name, v) in resources.and_then(|r| r.get("limits")).and_then(Value::as_object).into_iter().flatten() {
            let Some(name) = RESIZABLE.into_iter().find(|r| r == name) else { continue };
            let q = json_quantity(v)?;
            if q > 0 {
                limits_found.push(name);
                *limits.entry(name).or_default() += q;
            }
        }
        if !RESIZABLE.iter().all(|r| limits_found.contains(r)) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return Some("BestEffort");
    }
    if guaranteed && requests.iter().all(|(k, q)| limits.get(k) == Some(q)) && requests.len() == limits.len() {
        return Some("Guaranteed");
    }
    Some("Burstable")
}

/// What a change of one container's `resources` (as JSON) resizes: the new cpu/memory values
/// that replace old ones. `None` when the change is more than that: a resource or list added or
/// removed, another resource changed, anything else in `resources` changed, or a value that is
/// no quantity. An unchanged container gives an empty result.
pub(crate) fn resize_of(old: Option<&Value>, new: Option<&Value>) -> Option<ResourceRequirements> {
    let mut out = ResourceRequirements::default();
    if old == new {
        return Some(out);
    }
    let (old, new) = (old?.as_object()?, new?.as_object()?);
    if old.len() != new.len() || old.keys().any(|k| !new.contains_key(k)) {
        return None;
    }
    for (field, old_value) in old {
        let new_value = &new[field];
        if old_value == new_value {
            continue;
        }
        let target = match field.as_str() {
            "limits" => &mut out.limits,
            "requests" => &mut out.requests,
            _ => return None,
        };
        let (o, n) = (old_value.as_object()?, new_value.as_object()?);
        if o.len() != n.len() || o.keys().any(|k| !n.contains_key(k)) {
            return None;
        }
        for (name, value) in n.iter().filter(|(k, v)| o.get(*k) != Some(v)) {
            if !RESIZABLE.contains(&name.as_str()) {
                return None;
            }
            json_quantity(value)?;
            let text = value.as_str().map_or_else(|| value.to_string(), str::to_string);
            target.get_or_insert_with(BTreeMap::new).insert(name.clone(), Quantity(text));
        }
    }
    Some(out)
}

/// Whether the kubelet reports every container running with the resources its spec asks for
/// (`status.containerStatuses[].resources`, which it fills once a resize is done).
pub(crate) fn resources_applied(pod: &Pod) -> bool {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    statuses.len() == containers.len()
        && statuses.iter().all(|s| {
            let (Some(c), Some(reported)) = (containers.iter().find(|c| c.name == s.name), s.resources.as_ref()) else { return false };
            let wanted = c.resources.clone().unwrap_or_default();
            same_resource_list(wanted.limits.as_ref(), reported.limits.as_ref())
                && same_resource_list(wanted.requests.as_ref(), reported.requests.as_ref())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_compare_by_value() {
        assert_eq!(quantity_nanos("1"), quantity_nanos("1000m"));
        assert_eq!(quantity_nanos("0.5"), quantity_nanos("500m"));
        assert_eq!(quantity_nanos("1Gi"), quantity_nanos("1024Mi"));
        assert_eq!(quantity_nanos("1.5Gi"), quantity_nanos("1536Mi"));
        assert_eq!(quantity_nanos("1e3"), quantity_nanos("1k"));
        assert_eq!(quantity_nanos("1E"), Some(10i128.pow(27)));
        assert_eq!(quantity_nanos("100u"), Some(100_000));
        assert!(quantity_nanos("1Xi").is_none() && quantity_nanos("").is_none() && quantity_nanos("1..2").is_none());
    }

    fn spec(resources: &[Value]) -> Value {
        let containers: Vec<Value> = resources.iter().enumerate().map(|(i, r)| json!({"name": format!("c{i}"), "resources": r})).collect();
        json!({"containers": containers})
    }

    #[test]
    fn qos_class_follows_the_kubelet() {
        let both = |cpu: &str, mem: &str| json!({"cpu": cpu, "memory": mem});
        assert_eq!(qos_class(&spec(&[json!({})])), Some("BestEffort"));
        assert_eq!(qos_class(&spec(&[json!({"requests": {"cpu": "100m"}})])), Some("Burstable"));
        let g = json!({"requests": both("1", "1Gi"), "limits": both("1000m", "1024Mi")});
        assert_eq!(qos_class(&spec(std::slice::from_ref(&g))), Some("Guaranteed"));
        assert_eq!(qos_class(&spec(&[g.clone(), json!({})])), Some("Burstable"), "one container without limits");
        assert_eq!(qos_class(&spec(&[json!({"requests": both("1", "1Gi"), "limits": both("2", "1Gi")})])), Some("Burstable"));
        assert_eq!(qos_class(&spec(&[json!({"requests": {"cpu": "0"}})])), Some("BestEffort"), "zero requests do not count");
    }

    #[test]
    fn a_resize_replaces_cpu_and_memory_values_only() {
        let old = json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m"}});
        let new = json!({"requests": {"cpu": "150m", "memory": "64Mi"}, "limits": {"cpu": "300m"}});
        let r = resize_of(Some(&old), Some(&new)).unwrap();
        assert_eq!(r.requests, Some(BTreeMap::from([("cpu".to_string(), Quantity("150m".into()))])));
        assert_eq!(r.limits, Some(BTreeMap::from([("cpu".to_string(), Quantity("300m".into()))])));
        assert_eq!(resize_of(Some(&old), Some(&old)), Some(ResourceRequirements::default()));
        let added = json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "1Gi"}});
        assert_eq!(resize_of(Some(&old), Some(&added)), None, "a limit added");
        assert_eq!(resize_of(None, Some(&old)), None, "resources added");
        let storage = |v: &str| json!({"requests": {"ephemeral-storage": v}});
        assert_eq!(resize_of(Some(&storage("1Gi")), Some(&storage("2Gi"))), None, "not resizable");
        assert_eq!(resize_of(Some(&json!({"requests": {"cpu": "1"}})), Some(&json!({"requests": {"cpu": "lots"}}))), None);
    }
}
