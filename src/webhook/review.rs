//! The ConversionReview exchange (`apiextensions.k8s.io/v1`): a request's objects converted to
//! its `desiredAPIVersion`, or a failed result naming the object that could not be.

use serde_json::{Value, json};

use crate::api::conversion;

/// Answers one ConversionReview body. An unreadable review gets an error (the apiserver then
/// fails the read or write it was serving, with our message).
pub(crate) fn answer(body: &[u8]) -> Result<Value, String> {
    let review: Value = serde_json::from_slice(body).map_err(|e| format!("not a ConversionReview: {e}"))?;
    let request = review.get("request").ok_or("ConversionReview has no request")?;
    let uid = request.get("uid").and_then(Value::as_str).ok_or("ConversionReview request has no uid")?;
    let desired = request.get("desiredAPIVersion").and_then(Value::as_str).ok_or("ConversionReview request has no desiredAPIVersion")?;
    let objects = request.get("objects").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let converted: Result<Vec<Value>, String> = objects
        .iter()
        .map(|o| {
            conversion::convert(o, desired).map_err(|e| {
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                let namespace = o["metadata"]["namespace"].as_str().unwrap_or_default();
                format!("converting CloneSet {namespace}/{name} to {desired}: {e}")
            })
        })
        .collect();
    let response = match converted {
        Ok(objects) => json!({"uid": uid, "convertedObjects": objects, "result": {"status": "Success"}}),
        Err(message) => json!({"uid": uid, "result": {"status": "Failure", "message": message}}),
    };
    Ok(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_every_object_and_echoes_the_uid() {
        let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {
            "uid": "0f6c", "desiredAPIVersion": "apps.kruise.io/v1beta1",
            "objects": [
                {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "a"}, "spec": {"updateStrategy": {"type": "InPlaceOnly", "partition": 1}}},
                {"apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet", "metadata": {"name": "b"}, "spec": {}},
            ],
        }});
        let out = answer(body.to_string().as_bytes()).unwrap();
        assert_eq!(out["response"]["uid"], "0f6c");
        assert_eq!(out["response"]["result"]["status"], "Success");
        let objs = out["response"]["convertedObjects"].as_array().unwrap();
        assert_eq!(objs.len(), 2);
        assert!(objs.iter().all(|o| o["apiVersion"] == "apps.kruise.io/v1beta1"));
        assert_eq!(objs[0]["spec"]["updateStrategy"]["rollingUpdate"]["podUpdatePolicy"], "InPlaceOnly");
    }

    #[test]
    fn a_failed_object_fails_the_review_with_its_name() {
        let body = json!({"request": {"uid": "1", "desiredAPIVersion": "apps.kruise.io/v2", "objects": [
            {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "a", "namespace": "ns"}},
        ]}});
        let out = answer(body.to_string().as_bytes()).unwrap();
        assert_eq!(out["response"]["result"]["status"], "Failure");
        let message = out["response"]["result"]["message"].as_str().unwrap();
        assert!(message.contains("ns/a") && message.contains("apps.kruise.io/v2"), "{message}");
        assert!(answer(b"{}").is_err());
    }
}
