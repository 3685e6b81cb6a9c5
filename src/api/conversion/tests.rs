use serde_json::{Value, json};

use super::*;

fn cloneset(api_version: &str, metadata: Value, spec_extra: Value) -> Value {
    let mut spec = json!({
        "replicas": 3,
        "selector": {"matchLabels": {"app": "sample"}},
        "template": {"metadata": {"labels": {"app": "sample"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]}},
    });
    if let (Some(dst), Value::Object(extra)) = (spec.as_object_mut(), spec_extra) {
        dst.extend(extra);
    }
    json!({"apiVersion": api_version, "kind": "CloneSet", "metadata": metadata, "spec": spec, "status": {"replicas": 3, "updateRevision": "sample-d4d4fb5bd"}})
}

fn both_ways(alpha: &Value, beta: &Value) {
    assert_eq!(&convert(alpha, V1BETA1).unwrap(), beta, "v1alpha1 → v1beta1");
    assert_eq!(&convert(beta, V1ALPHA1).unwrap(), alpha, "v1beta1 → v1alpha1");
}

#[test]
fn a_stored_in_place_cloneset_reads_as_its_v1beta1_twin() {
    let alpha = cloneset(
        V1ALPHA1,
        json!({"name": "sample", "annotations": {keys::IMAGE_PREDOWNLOAD_PARALLELISM: "10", keys::IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS: "3"}}),
        json!({
            "scaleStrategy": {"disablePVCReuse": true, "podsToDelete": ["sample-abcde"]},
            "updateStrategy": {"type": "InPlaceIfPossible", "partition": 3, "maxUnavailable": "20%", "maxSurge": 0, "inPlaceUpdateStrategy": {"gracePeriodSeconds": 10}},
        }),
    );
    let beta = cloneset(
        V1BETA1,
        json!({"name": "sample", "annotations": {keys::IMAGE_PREDOWNLOAD_PARALLELISM: "10", keys::IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS: "3"}}),
        json!({
            "scaleStrategy": {"podsToDelete": ["sample-abcde"]},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "partition": 3, "maxUnavailable": "20%", "maxSurge": 0, "podUpdatePolicy": "InPlaceIfPossible",
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": 10, "imagePreDownloadParallelism": 10, "imagePreDownloadMinUpdatedReadyPods": 3},
            }},
        }),
    );
    both_ways(&alpha, &beta);
}

#[test]
fn pvc_reuse_keeps_its_meaning_across_the_inverted_default() {
    let alpha = cloneset(
        V1ALPHA1,
        json!({"name": "a"}),
        json!({"scaleStrategy": {}, "updateStrategy": {"type": "ReCreate", "partition": 0, "maxUnavailable": "20%", "maxSurge": 0}}),
    );
    let beta = convert(&alpha, V1BETA1).unwrap();
    assert_eq!(beta["spec"]["scaleStrategy"], json!({"enablePVCReuse": true}), "a v1alpha1 CloneSet reuses PVCs");
    let new_beta = cloneset(V1BETA1, json!({"name": "b"}), json!({"scaleStrategy": {"enablePVCReuse": false}}));
    let stored = convert(&new_beta, V1ALPHA1).unwrap();
    assert_eq!(stored["spec"]["scaleStrategy"], json!({"disablePVCReuse": true}), "a new v1beta1 CloneSet does not");
}

#[test]
fn exclude_preparing_delete_is_stored_as_the_label_and_reads_back_without_it() {
    let beta = cloneset(
        V1BETA1,
        json!({"name": "a", "labels": {"team": "x"}}),
        json!({
            "scaleStrategy": {"enablePVCReuse": true, "excludePreparingDelete": true},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": "20%", "maxSurge": 0, "podUpdatePolicy": "ReCreate"}},
        }),
    );
    let alpha = convert(&beta, V1ALPHA1).unwrap();
    assert_eq!(alpha["metadata"]["labels"][keys::SCALING_EXCLUDE_PREPARING_DELETE], "true", "the controller reads the label");
    assert_eq!(convert(&alpha, V1BETA1).unwrap(), beta);

    let labelled = cloneset(V1ALPHA1, json!({"name": "a", "labels": {keys::SCALING_EXCLUDE_PREPARING_DELETE: "true"}}), json!({}));
    let beta = convert(&labelled, V1BETA1).unwrap();
    assert_eq!(beta["spec"]["scaleStrategy"]["excludePreparingDelete"], true);
    assert!(beta["metadata"]["annotations"].get(STASH).is_none(), "nothing lost, nothing stashed: {beta}");
}

#[test]
fn on_delete_keeps_its_rolling_settings_through_the_stash() {
    let beta = cloneset(
        V1BETA1,
        json!({"name": "a"}),
        json!({"updateStrategy": {"type": "OnDelete", "rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "partition": 0, "maxUnavailable": "20%", "maxSurge": 0}}}),
    );
    let alpha = convert(&beta, V1ALPHA1).unwrap();
    assert_eq!(alpha["spec"]["updateStrategy"], json!({"type": "OnDelete", "partition": 0, "maxUnavailable": "20%", "maxSurge": 0}));
    assert!(alpha["metadata"]["annotations"][STASH].is_string(), "{alpha}");
    assert_eq!(convert(&alpha, V1BETA1).unwrap(), beta);
}

#[test]
fn a_stash_the_object_no_longer_matches_is_ignored_and_dropped() {
    let beta = cloneset(
        V1BETA1,
        json!({"name": "a"}),
        json!({"updateStrategy": {"type": "OnDelete", "rollingUpdate": {"podUpdatePolicy": "InPlaceOnly"}}}),
    );
    let mut alpha = convert(&beta, V1ALPHA1).unwrap();
    // Changed through v1alpha1 (kubectl kruise speaks v1alpha1).
    alpha["spec"]["updateStrategy"] = json!({"type": "ReCreate", "partition": 2, "maxUnavailable": "20%", "maxSurge": 0});
    let back = convert(&alpha, V1BETA1).unwrap();
    assert_eq!(
        back["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2, "maxUnavailable": "20%", "maxSurge": 0, "podUpdatePolicy": "ReCreate"}})
    );
    assert!(back["metadata"].get("annotations").is_none(), "{back}");
}

#[test]
fn metadata_template_and_status_pass_through_byte_for_byte() {
    let mut alpha = cloneset(V1ALPHA1, json!({"name": "a", "uid": "u", "resourceVersion": "7", "labels": {"x": "y"}}), json!({}));
    alpha["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "500m"}, "unknownToSchema": {"kept": 1.5}});
    alpha["status"]["conditions"] = json!([{"type": "Progressing", "status": "True", "reason": "CloneSetAvailable"}]);
    let beta = convert(&alpha, V1BETA1).unwrap();
    for path in ["/metadata", "/spec/template", "/spec/selector", "/spec/replicas", "/status"] {
        assert_eq!(alpha.pointer(path), beta.pointer(path), "{path}");
    }
}

#[test]
fn unknown_versions_are_refused() {
    let obj = json!({"apiVersion": "apps.kruise.io/v2", "kind": "CloneSet"});
    assert_eq!(convert(&obj, V1BETA1), Err(ConversionError::UnsupportedVersion("apps.kruise.io/v2".into())));
    let alpha = cloneset(V1ALPHA1, json!({"name": "a"}), json!({}));
    assert!(convert(&alpha, "apps/v1").is_err());
    assert_eq!(convert(&alpha, V1ALPHA1).unwrap(), alpha);
}

mod properties {
    //! Round trips over generated objects: whatever one version says, the other says it too, and
    //! converting back gives the object again (up to the defaults the apiserver fills in).
    use proptest::option;
    use proptest::prelude::*;
    use proptest::sample::select;
    use serde_json::{Map, Value, json};

    use super::super::*;

    fn int_or_string() -> impl Strategy<Value = Value> {
        prop_oneof![(0i64..20).prop_map(|n| json!(n)), select(vec!["0%", "20%", "33.3%", "100%"]).prop_map(|s| json!(s))]
    }

    fn object(fields: Vec<(&'static str, BoxedStrategy<Option<Value>>)>) -> impl Strategy<Value = Value> {
        let (names, values): (Vec<_>, Vec<_>) = fields.into_iter().unzip();
        values.prop_map(move |vs| {
            let mut map = Map::new();
            for (name, v) in names.iter().zip(vs) {
                if let Some(v) = v {
                    map.insert((*name).into(), v);
                }
            }
            Value::Object(map)
        })
    }

    fn some<S: Strategy<Value = Value> + 'static>(s: S) -> BoxedStrategy<Option<Value>> {
        option::of(s).boxed()
    }

    fn rolling_fields(image: bool) -> Vec<(&'static str, BoxedStrategy<Option<Value>>)> {
        let mut in_place = vec![("gracePeriodSeconds", some((0i64..30).prop_map(|n| json!(n))))];
        if image {
            in_place.push(("imagePreDownloadParallelism", some(prop_oneof![(0i64..20).prop_map(|n| json!(n)), Just(json!("7"))])));
            in_place.push(("imagePreDownloadTimeoutSeconds", some((0i64..900).prop_map(|n| json!(n)))));
            in_place.push(("imagePreDownloadMinUpdatedReadyPods", some((0i64..9).prop_map(|n| json!(n)))));
        }
        vec![
            ("partition", some(int_or_string())),
            ("maxUnavailable", some(int_or_string())),
            ("maxSurge", some(int_or_string())),
            ("paused", some(any::<bool>().prop_map(|b| json!(b)))),
            ("priorityStrategy", some(Just(json!({"weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"k": "v"}}}]})))),
            ("scatterStrategy", some(prop_oneof![Just(json!([])), Just(json!([{"key": "zone", "value": "a"}]))])),
            ("inPlaceUpdateStrategy", some(object(in_place))),
        ]
    }

    fn metadata() -> impl Strategy<Value = Value> {
        let label = option::of(select(vec!["true", "false", "yes"]));
        let annotation = || option::of(select(vec!["10", "05", "50%", "", "abc", "3"]));
        (label, annotation(), annotation(), annotation(), any::<bool>()).prop_map(|(l, a, b, c, other)| {
            let mut meta = json!({"name": "x", "namespace": "ns", "labels": {"app": "x"}, "annotations": {}});
            if let Some(l) = l {
                meta["labels"][keys::SCALING_EXCLUDE_PREPARING_DELETE] = json!(l);
            }
            for (key, value) in MOVED_ANNOTATIONS.iter().zip([a, b, c]) {
                if let Some(v) = value {
                    meta["annotations"][*key] = json!(v);
                }
            }
            if other {
                meta["annotations"]["kubernetes.io/change-cause"] = json!("rollout");
            }
            meta
        })
    }

    fn with(api_version: &str, meta: Value, scale: Option<Value>, update: Option<Value>) -> Value {
        let mut spec =
            json!({"replicas": 2, "selector": {"matchLabels": {"app": "x"}}, "template": {"metadata": {"labels": {"app": "x"}}}});
        if let Some(s) = scale {
            spec["scaleStrategy"] = s;
        }
        if let Some(u) = update {
            spec["updateStrategy"] = u;
        }
        json!({"apiVersion": api_version, "kind": "CloneSet", "metadata": meta, "spec": spec, "status": {"replicas": 2}})
    }

    fn alpha() -> impl Strategy<Value = Value> {
        let scale = object(vec![
            ("podsToDelete", some(Just(json!(["x-abcde"])))),
            ("maxUnavailable", some(int_or_string())),
            ("disablePVCReuse", some(any::<bool>().prop_map(|b| json!(b)))),
        ]);
        let mut update = rolling_fields(false);
        update.push(("type", some(select(vec!["", "ReCreate", "InPlaceIfPossible", "InPlaceOnly", "OnDelete"]).prop_map(|t| json!(t)))));
        (metadata(), option::of(scale), option::of(object(update))).prop_map(|(m, s, u)| with(V1ALPHA1, m, s, u))
    }

    fn beta() -> impl Strategy<Value = Value> {
        let scale = object(vec![
            ("podsToDelete", some(Just(json!(["x-abcde"])))),
            ("maxUnavailable", some(int_or_string())),
            ("enablePVCReuse", some(any::<bool>().prop_map(|b| json!(b)))),
            ("excludePreparingDelete", some(any::<bool>().prop_map(|b| json!(b)))),
        ]);
        let mut rolling = rolling_fields(true);
        rolling.push(("podUpdatePolicy", some(select(vec!["", "ReCreate", "InPlaceIfPossible", "InPlaceOnly"]).prop_map(|t| json!(t)))));
        let update = object(vec![
            ("type", some(select(vec!["", "RollingUpdate", "OnDelete"]).prop_map(|t| json!(t)))),
            ("rollingUpdate", some(object(rolling))),
        ]);
        (metadata(), option::of(scale), option::of(update)).prop_map(|(m, s, u)| with(V1BETA1, m, s, u))
    }

    /// The object as the apiserver holds it: its version's defaults filled in, without the
    /// stash (bookkeeping a conversion adds or drops as needed).
    fn defaulted(object: &Value) -> Value {
        let mut out = object.clone();
        set_meta(&mut out, "annotations", STASH, None);
        let parts = Parts::of(object);
        let parts = if object["apiVersion"] == V1ALPHA1 { parts.defaulted_alpha() } else { parts.defaulted_beta() };
        parts.write(&mut out);
        out
    }

    fn other(v: &Value) -> &'static str {
        if v["apiVersion"] == V1ALPHA1 { V1BETA1 } else { V1ALPHA1 }
    }

    fn round_trip(x: &Value) -> Result<(), TestCaseError> {
        let there = convert(x, other(x)).unwrap();
        prop_assert_eq!(&there["apiVersion"], &json!(other(x)));
        let stash = there["metadata"]["annotations"].get(STASH).and_then(Value::as_str).map(|s| serde_json::from_str::<Value>(s).unwrap());
        if let Some(stash) = &stash {
            prop_assert_eq!(&stash["apiVersion"], &x["apiVersion"], "a stash records where the object came from");
        }
        let back = convert(&there, x["apiVersion"].as_str().unwrap()).unwrap();
        prop_assert_eq!(defaulted(&back), defaulted(x), "\nthere: {}", there);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn a_v1alpha1_cloneset_survives_a_trip_through_v1beta1(a in alpha()) {
            round_trip(&a)?;
            // As stored, the trip gives back the same object; an OnDelete one may come back
            // without the rolling-update defaults v1beta1 does not carry for it, which the
            // apiserver fills in again.
            let stored = defaulted(&a);
            let back = convert(&convert(&stored, V1BETA1).unwrap(), V1ALPHA1).unwrap();
            if stored["spec"]["updateStrategy"]["type"] == "OnDelete" {
                prop_assert_eq!(defaulted(&back), stored);
            } else {
                prop_assert_eq!(back, stored);
            }
        }

        #[test]
        fn a_v1beta1_cloneset_survives_a_trip_through_v1alpha1(b in beta()) {
            round_trip(&b)?;
            let stored = defaulted(&b);
            let back = convert(&convert(&stored, V1ALPHA1).unwrap(), V1BETA1).unwrap();
            prop_assert_eq!(back, stored);
        }

        /// A stash left by an earlier conversion never outweighs what the object says now.
        #[test]
        fn a_change_made_through_the_other_version_wins_over_a_stash(b in beta(), a in alpha()) {
            let mut stored = convert(&defaulted(&b), V1ALPHA1).unwrap();
            stored["spec"]["updateStrategy"] = a["spec"].get("updateStrategy").cloned().unwrap_or(json!({}));
            stored["spec"]["scaleStrategy"] = a["spec"].get("scaleStrategy").cloned().unwrap_or(json!({}));
            round_trip(&stored)?;
        }
    }
}
