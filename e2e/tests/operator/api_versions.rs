//! Both versions of the CloneSet API (the CRD serving v1beta1 beside v1alpha1, which the default
//! install does not do), converted by the operator's own webhook: each v1beta1/v1alpha1 pair of
//! openkruise.io's CloneSet manual (the conversion corpus' copies) applies,
//! reads back through the other version as its twin and runs the same revision; and reads through
//! v1beta1 keep working while the webhook replaces its certificate; `OnDelete` updates a pod only
//! when it is deleted.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e::testenv::{FakeKruise, Operator, OperatorOptions, TestNamespace, free_local_addr, install_api, wait_until};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const CRD: &str = "clonesets.apps.kruise.io";

/// Each pair of examples in openkruise.io's CloneSet manual, as whole objects in both versions
/// (the inputs of the conversion corpus, tests/golden/conversion-kruise-master), by pair name
/// (`manual-03-pvc-reuse`): (name, v1beta1 object, v1alpha1 object). Each twin gets its own name,
/// the pair one app label of its own, two replicas, and neither status nor a namespace.
fn manual_pairs() -> Vec<(String, Value, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/conversion-kruise-master/in");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".v1beta1.json").map(str::to_string))
        .filter(|n| n.starts_with("manual-"))
        .collect();
    names.sort();
    let read = |file: String| -> Value { serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap() };
    names
        .into_iter()
        .map(|name| {
            let short = name.split('-').take(2).collect::<Vec<_>>().join("-"); // manual-03
            let prepare = |mut obj: Value, twin: &str| {
                let app = json!({"app": short});
                obj["metadata"] = json!({
                    "name": format!("{short}-{twin}"),
                    "labels": obj["metadata"]["labels"].clone(),
                    "annotations": obj["metadata"]["annotations"].clone(),
                });
                obj.as_object_mut().unwrap().remove("status");
                obj["spec"]["replicas"] = json!(2);
                obj["spec"]["selector"] = json!({"matchLabels": app});
                obj["spec"]["template"]["metadata"]["labels"] = app;
                obj
            };
            let (beta, alpha) = (read(format!("{name}.v1beta1.json")), read(format!("{name}.v1alpha1.json")));
            (name, prepare(beta, "b"), prepare(alpha, "a"))
        })
        .collect()
}

fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

fn manifest(version: &str, name: &str, fragment: &Value) -> DynamicObject {
    let mut obj = json!({
        "apiVersion": format!("apps.kruise.io/{version}"), "kind": "CloneSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "sample"}},
            "template": {"metadata": {"labels": {"app": "sample"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]}},
        },
    });
    merge(&mut obj, fragment);
    serde_json::from_value(obj).expect("a CloneSet manifest")
}

/// What twins share: the spec and, read as v1alpha1 (where some settings are labels and
/// annotations), Kruise's labels and annotations. Read as v1beta1, the twin written as v1alpha1
/// still carries the label and annotations it was written with; the other does not.
///
/// PVC reuse is the one setting the manual's twins differ in by design: v1beta1 does not reuse
/// PVCs unless told to, v1alpha1 does unless told not to. It is compared only where a pair sets it.
fn twin_view(obj: &DynamicObject, with_metadata: bool, pvc_reuse: bool) -> Value {
    let mut spec = obj.data["spec"].clone();
    if let Some(scale) = spec["scaleStrategy"].as_object_mut() {
        // Names that are no pods leave the list once the operator has looked, twin by twin.
        scale.remove("podsToDelete");
        if !pvc_reuse {
            scale.remove("disablePVCReuse");
            scale.remove("enablePVCReuse");
        }
    }
    if !with_metadata {
        return json!({"spec": spec});
    }
    let mut labels = obj.metadata.labels.clone().unwrap_or_default();
    labels.retain(|k, _| k.starts_with("apps.kruise.io/"));
    let mut annotations = obj.metadata.annotations.clone().unwrap_or_default();
    annotations.retain(|k, _| k.starts_with("apps.kruise.io/"));
    json!({"spec": spec, "labels": labels, "annotations": annotations})
}

/// Serves v1beta1 through the webhook at `addr` (the operator runs beside the test, not behind a
/// Service) until dropped, then puts back the CRD every other test uses: while a CRD converts
/// through a webhook nobody answers, no namespace holding CloneSets can be deleted. One test of
/// this file at a time: the CRD is the cluster's.
struct ServingV1beta1(std::path::PathBuf, #[allow(dead_code)] tokio::sync::MutexGuard<'static, ()>);

static THE_CRD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl ServingV1beta1 {
    async fn through(client: &Client, addr: std::net::SocketAddr) -> Self {
        let lock = THE_CRD.lock().await;
        let mut def = serde_json::to_value(cloneset_operator::api::crd::crd_with_v1beta1()).unwrap();
        def["spec"]["conversion"]["webhook"]["clientConfig"] = json!({"url": format!("https://{addr}/convert")});
        e2e::testenv::apply_crd(client, &serde_json::from_value(def).unwrap()).await.unwrap();
        ServingV1beta1(e2e::testenv::kubeconfig().await.unwrap(), lock)
    }
}

impl Drop for ServingV1beta1 {
    fn drop(&mut self) {
        let kubeconfig = self.0.clone();
        // Also when the test failed. The test's runtime is blocked here, and its clients with it:
        // a runtime and a client of its own.
        let restored = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                let client = e2e::cluster::client_for(&kubeconfig).await?;
                e2e::testenv::apply_crd(&client, &cloneset_operator::api::crd::crd()).await
            })
        })
        .join();
        if !matches!(restored, Ok(Ok(()))) {
            eprintln!("the CloneSet CRD still serves v1beta1 through this test's operator: {restored:?}");
        }
    }
}

/// Starts an operator serving conversions at `addr` (for `127.0.0.1`, unless `extra` names a
/// certificate directory) with `extra` flags, and waits until `/readyz` says it can convert.
async fn converting_operator(ns: &str, addr: std::net::SocketAddr, extra: &[&str]) -> Operator {
    let webhook_addr = format!("--webhook-addr={addr}");
    let mut args = vec![webhook_addr.as_str(), "--webhook-hosts=127.0.0.1"];
    args.extend_from_slice(extra);
    let operator = Operator::start_with(ns, OperatorOptions::args(&args)).await.unwrap();
    wait_until(Duration::from_secs(60), "the operator to be ready to convert", || async { Ok(operator.probe("/readyz").await? == 200) })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", operator.log_tail(30)));
    // The apiserver takes up the caBundle the operator wrote into the CRD a moment later: until
    // then its conversions fail certificate checks. A dry-run v1beta1 create converts.
    let beta = e2e::testenv::clonesets_as(&e2e::testenv::client().await.unwrap(), ns, "v1beta1");
    let probe = manifest("v1beta1", "conversion-probe", &json!({}));
    let dry_run = PostParams { dry_run: true, ..Default::default() };
    wait_until(Duration::from_secs(60), "the apiserver to trust the operator's conversions", || async {
        Ok(beta.create(&dry_run, &probe).await.is_ok())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", operator.log_tail(30)));
    operator
}

fn ca_bundle(crd: &CustomResourceDefinition) -> Vec<u8> {
    let webhook = crd.spec.conversion.as_ref().and_then(|c| c.webhook.as_ref());
    webhook.and_then(|w| w.client_config.as_ref()).and_then(|c| c.ca_bundle.as_ref()).map(|b| b.0.clone()).unwrap_or_default()
}

fn certificates(bundle: &[u8]) -> BTreeSet<String> {
    String::from_utf8_lossy(bundle)
        .split("-----END CERTIFICATE-----")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn every_manual_pair_reads_as_its_twin_and_conversions_survive_a_certificate_rotation() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("api-versions").await.unwrap();
    let client = ns.client.clone();
    let addr = free_local_addr().unwrap();
    // First, so the operator's readiness waits for its CA in the bundle.
    let _v1beta1 = ServingV1beta1::through(&client, addr).await;
    // A short-lived certificate, so the replacement happens during the test.
    let validity = Duration::from_secs(45);
    let operator = converting_operator(
        &ns.name,
        addr,
        &[
            &format!("--webhook-cert-validity={}s", validity.as_secs()),
            "--enable-leader-election=true",
            &format!("--leader-election-namespace={}", ns.name),
        ],
    )
    .await;
    let started = Instant::now();

    let (alpha, beta) =
        (e2e::testenv::clonesets_as(&client, &ns.name, "v1alpha1"), e2e::testenv::clonesets_as(&client, &ns.name, "v1beta1"));
    let pairs = manual_pairs();
    assert_eq!(pairs.len(), 19, "every pair of the manual");
    let as_object = |v: &Value| -> DynamicObject { serde_json::from_value(v.clone()).unwrap() };
    for (name, b, a) in &pairs {
        beta.create(&PostParams::default(), &as_object(b)).await.unwrap_or_else(|e| panic!("{name} as v1beta1: {e}"));
        alpha.create(&PostParams::default(), &as_object(a)).await.unwrap_or_else(|e| panic!("{name} as v1alpha1: {e}"));
    }
    let twins =
        |b: &Value, a: &Value| (b["metadata"]["name"].as_str().unwrap().to_string(), a["metadata"]["name"].as_str().unwrap().to_string());
    for (name, b, a) in &pairs {
        let (b_name, a_name) = twins(b, a);
        for (api, with_metadata) in [(&alpha, true), (&beta, false)] {
            let created_as_beta = api.get(&b_name).await.unwrap();
            let created_as_alpha = api.get(&a_name).await.unwrap();
            let pvc_reuse = name.contains("pvc-reuse");
            assert_eq!(
                twin_view(&created_as_beta, with_metadata, pvc_reuse),
                twin_view(&created_as_alpha, with_metadata, pvc_reuse),
                "{name}, read as {:?}",
                created_as_beta.types
            );
        }
    }
    // The documented difference: a v1beta1 CloneSet that says nothing does not reuse PVCs, and
    // v1alpha1 readers see it as disablePVCReuse.
    assert_eq!(alpha.get("manual-01-b").await.unwrap().data["spec"]["scaleStrategy"]["disablePVCReuse"], true);
    assert_eq!(beta.get("manual-01-a").await.unwrap().data["spec"]["scaleStrategy"]["enablePVCReuse"], true);

    // Reads through v1beta1 go on while the webhook replaces its certificate two thirds into
    // its life: the CRD's caBundle gains the new CA before it is served, and no read fails.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let first = certificates(&ca_bundle(&crds.get(CRD).await.unwrap()));
    assert!(!first.is_empty(), "the operator's CA is in the bundle");
    let mut seen = first.clone();
    let mut reads = 0;
    while started.elapsed() < validity + Duration::from_secs(10) {
        beta.get("manual-01-b")
            .await
            .unwrap_or_else(|e| panic!("a v1beta1 read failed after {:?}: {e}\n{}", started.elapsed(), operator.log_tail(20)));
        reads += 1;
        seen.extend(certificates(&ca_bundle(&crds.get(CRD).await.unwrap())));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let last = certificates(&ca_bundle(&crds.get(CRD).await.unwrap()));
    assert!(seen.len() > first.len(), "a new CA was added during {reads} reads");
    assert!(last.is_disjoint(&first), "the first CA left the bundle once it expired");
    assert_eq!(operator.probe("/readyz").await.unwrap(), 200);

    // The same pods: both twins reach their replicas at the same revision hash.
    let revision = |obj: &DynamicObject| {
        obj.data["status"]["updateRevision"].as_str().unwrap_or_default().rsplit('-').next().unwrap_or_default().to_string()
    };
    for (name, b, a) in &pairs {
        let (b_name, a_name) = twins(b, a);
        wait_until(Duration::from_secs(90), &format!("{name}'s twins to run their pods"), || async {
            let (b, a) = (alpha.get(&b_name).await?, alpha.get(&a_name).await?);
            let ready = |o: &DynamicObject| o.data["status"]["readyReplicas"] == 2;
            Ok(ready(&b) && ready(&a) && !revision(&a).is_empty() && revision(&a) == revision(&b))
        })
        .await
        .unwrap();
    }

    on_delete_moves_only_deleted_pods(&client, &ns.name, &alpha, &beta).await;
    a_standby_converts_and_takes_over(&client, &ns.name, operator, &beta).await;
}

/// A second replica, standing by for the Lease, serves conversions with its own CA in the
/// bundle; when the leader dies, reads go on through it and it takes over reconciling.
async fn a_standby_converts_and_takes_over(client: &Client, ns: &str, mut leader: Operator, beta: &Api<DynamicObject>) {
    use kube::api::{Patch, PatchParams};
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let before = certificates(&ca_bundle(&crds.get(CRD).await.unwrap()));
    let addr = free_local_addr().unwrap();
    let standby = converting_operator(ns, addr, &["--enable-leader-election=true", &format!("--leader-election-namespace={ns}")]).await;
    assert_eq!(e2e::testenv::is_leader(&standby.metrics().await.unwrap()), Some(0.0), "it stands by");
    let with_standby = certificates(&ca_bundle(&crds.get(CRD).await.unwrap()));
    assert!(with_standby.len() > before.len() && with_standby.is_superset(&before), "its CA joined the leader's");

    // Conversions go to the standby alone from here on.
    let url = json!({"spec": {"conversion": {"webhook": {"clientConfig": {"url": format!("https://{addr}/convert")}}}}});
    crds.patch(CRD, &PatchParams::default(), &Patch::Merge(&url)).await.unwrap();
    let read = || async {
        let cs = beta
            .get("on-delete")
            .await
            .unwrap_or_else(|e| panic!("a v1beta1 read through the standby failed: {e}\n{}", standby.log_tail(20)));
        assert_eq!(cs.data["spec"]["updateStrategy"]["type"], "OnDelete");
    };
    for _ in 0..10 {
        read().await;
    }
    leader.kill();
    read().await;
    wait_until(Duration::from_secs(60), "the standby to take the Lease over", || async {
        Ok(e2e::testenv::is_leader(&standby.metrics().await?) == Some(1.0))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", standby.log_tail(30)));
    beta.patch("on-delete", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": 4}}))).await.unwrap();
    wait_until(Duration::from_secs(90), "the new leader to scale the CloneSet", || async {
        Ok(beta.get("on-delete").await?.data["status"]["readyReplicas"] == 4)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", standby.log_tail(30)));
}

/// `OnDelete`, which only v1beta1 can ask for: a new template changes no pod until one is
/// deleted; its replacement, and any pod a scale-up adds, come from the new revision.
async fn on_delete_moves_only_deleted_pods(client: &Client, ns: &str, alpha: &Api<DynamicObject>, beta: &Api<DynamicObject>) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
    let fragment = json!({
        "spec": {
            "selector": {"matchLabels": {"app": "on-delete"}},
            "template": {"metadata": {"labels": {"app": "on-delete"}}},
            "updateStrategy": {"type": "OnDelete"},
        }
    });
    beta.create(&PostParams::default(), &manifest("v1beta1", "on-delete", &fragment)).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selected = ListParams::default().labels("app=on-delete");
    let revision_of = |p: &Pod| p.labels().get("controller-revision-hash").cloned().unwrap_or_default();
    let settled = |ready: i64| {
        let alpha = alpha.clone();
        move || {
            let alpha = alpha.clone();
            async move {
                let cs = alpha.get("on-delete").await?;
                let observed = cs.data["status"]["observedGeneration"].as_i64() == cs.metadata.generation;
                Ok(observed && cs.data["status"]["readyReplicas"] == ready)
            }
        }
    };
    wait_until(Duration::from_secs(90), "the OnDelete CloneSet's 2 pods", settled(2)).await.unwrap();
    let read_as_alpha = alpha.get("on-delete").await.unwrap();
    assert_eq!(read_as_alpha.data["spec"]["updateStrategy"]["type"], "OnDelete");
    let before: Vec<Pod> = pods.list(&selected).await.unwrap().items;
    let old_revision = read_as_alpha.data["status"]["updateRevision"].as_str().unwrap().to_string();

    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}});
    beta.patch("on-delete", &PatchParams::default(), &Patch::Merge(&image)).await.unwrap();
    wait_until(Duration::from_secs(60), "the new revision to be observed", || async {
        let cs = alpha.get("on-delete").await?;
        Ok(cs.data["status"]["observedGeneration"].as_i64() == cs.metadata.generation
            && cs.data["status"]["updateRevision"].as_str() != Some(old_revision.as_str()))
    })
    .await
    .unwrap();
    let cs = alpha.get("on-delete").await.unwrap();
    assert_eq!(cs.data["status"]["updatedReplicas"], 0, "no pod was updated: {}", cs.data["status"]);
    let new_revision = cs.data["status"]["updateRevision"].as_str().unwrap().to_string();

    // Deleting one pod brings its replacement on the new revision; the other stays as it was
    // through every reconcile that took.
    let (deleted, kept) = (&before[0], &before[1]);
    pods.delete(&deleted.name_any(), &DeleteParams::default()).await.unwrap();
    wait_until(Duration::from_secs(90), "the deleted pod's replacement on the new revision", || async {
        let now = pods.list(&selected).await?.items;
        let on_new = now.iter().filter(|p| revision_of(p) == new_revision).count();
        let cs = alpha.get("on-delete").await?;
        Ok(now.len() == 2 && on_new == 1 && cs.data["status"]["readyReplicas"] == 2 && cs.data["status"]["updatedReplicas"] == 1)
    })
    .await
    .unwrap();
    let still = pods.get(&kept.name_any()).await.unwrap();
    assert_eq!(still.metadata.uid, kept.metadata.uid);
    assert_eq!(revision_of(&still), revision_of(kept), "the pod nobody deleted kept its revision");
    assert!(still.metadata.deletion_timestamp.is_none());

    // A write through v1alpha1, which refuses OnDelete at create, keeps it (the unchanged field
    // is not validated again), and the pod it adds is on the new revision.
    alpha.patch("on-delete", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": 3}}))).await.unwrap();
    wait_until(Duration::from_secs(90), "a third pod from the new revision", settled(3)).await.unwrap();
    let cs = alpha.get("on-delete").await.unwrap();
    assert_eq!(cs.data["status"]["updatedReplicas"], 2, "{}", cs.data["status"]);
    assert_eq!(pods.get(&kept.name_any()).await.unwrap().metadata.uid, kept.metadata.uid);
    let refused = alpha.create(&PostParams::default(), &manifest("v1alpha1", "on-delete-a", &fragment)).await;
    assert!(refused.is_err(), "v1alpha1 refuses OnDelete at create, as Kruise does");
}

/// While a (fake) Kruise manager leads, the operator reconciles nothing but serves conversions,
/// and is ready: a webhook Service without ready pods would fail every v1beta1 read, and every
/// namespace deletion, until Kruise stopped.
#[tokio::test]
async fn a_standby_for_kruise_serves_conversions_and_is_ready() {
    install_api().await.unwrap();
    let ns = TestNamespace::create("api-kruise-standby").await.unwrap();
    let client = ns.client.clone();
    let addr = free_local_addr().unwrap();
    let _v1beta1 = ServingV1beta1::through(&client, addr).await;
    let kruise = FakeKruise::start(&ns).await;
    let operator = converting_operator(&ns.name, addr, &[&format!("--kruise-manager-lease={}/kruise-manager", ns.name)]).await;
    // Ready means "can convert", which may come before its first look at Kruise's Lease.
    wait_until(Duration::from_secs(30), "the operator to stand by for Kruise", || async {
        Ok(operator.metrics().await?.lines().any(|l| l == "cloneset_operator_standing_by_for_kruise 1"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", operator.log_tail(30)));

    let beta = e2e::testenv::clonesets_as(&client, &ns.name, "v1beta1");
    beta.create(&PostParams::default(), &manifest("v1beta1", "web", &json!({"spec": {"replicas": 1}}))).await.unwrap();
    let read = beta.get("web").await.unwrap();
    assert_eq!(read.data["spec"]["updateStrategy"]["rollingUpdate"]["podUpdatePolicy"], "ReCreate", "{}", read.data);
    assert!(read.data["status"]["observedGeneration"].is_null(), "nothing reconciled while Kruise leads: {}", read.data["status"]);

    kruise.stop().await;
    wait_until(Duration::from_secs(60), "the operator to take over and run the pod", || async {
        Ok(beta.get("web").await?.data["status"]["readyReplicas"] == 1)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", operator.log_tail(30)));
    assert_eq!(operator.probe("/readyz").await.unwrap(), 200);
}

/// With `--webhook-cert-dir` (the chart's cert-manager mode) the webhook serves the certificate
/// in the directory and picks up a renewed one, as cert-manager renews it: the new CA joins the
/// CRD's bundle, the files change, the old CA leaves; reads through v1beta1 go on throughout.
#[tokio::test]
async fn a_certificate_from_a_directory_is_served_and_its_renewal_picked_up() {
    use cloneset_operator::webhook::certs;
    use k8s_openapi::ByteString;
    install_api().await.unwrap();
    let ns = TestNamespace::create("api-cert-dir").await.unwrap();
    let client = ns.client.clone();
    let addr = free_local_addr().unwrap();
    let _v1beta1 = ServingV1beta1::through(&client, addr).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let set_bundle = |pems: Vec<String>| {
        let crds = crds.clone();
        async move {
            let mut crd = crds.get(CRD).await.unwrap();
            let config = crd.spec.conversion.as_mut().and_then(|c| c.webhook.as_mut()).and_then(|w| w.client_config.as_mut()).unwrap();
            config.ca_bundle = Some(ByteString(pems.concat().into_bytes()));
            crds.replace(CRD, &PostParams::default(), &crd).await.unwrap();
        }
    };
    let dir = std::env::temp_dir().join(format!("cloneset-e2e-{}", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let hosts = ["127.0.0.1".to_string()];
    let write = |issued: &certs::Issued| {
        std::fs::write(dir.join("tls.crt"), &issued.cert_pem).unwrap();
        std::fs::write(dir.join("tls.key"), &issued.key_pem).unwrap();
    };
    let first = certs::issue(&hosts, now(), Duration::from_secs(3600), "first").unwrap();
    write(&first);
    set_bundle(vec![first.ca_pem.clone()]).await;
    let operator = converting_operator(&ns.name, addr, &[&format!("--webhook-cert-dir={}", dir.display())]).await;
    let beta = e2e::testenv::clonesets_as(&client, &ns.name, "v1beta1");
    beta.create(&PostParams::default(), &manifest("v1beta1", "web", &json!({}))).await.unwrap();
    let bundle_before = ca_bundle(&crds.get(CRD).await.unwrap());
    assert_eq!(bundle_before, first.ca_pem.as_bytes(), "the operator leaves the bundle to whoever manages the files");

    let second = certs::issue(&hosts, now(), Duration::from_secs(3600), "second").unwrap();
    set_bundle(vec![first.ca_pem.clone(), second.ca_pem.clone()]).await;
    write(&second);
    let loads = || std::fs::read_to_string(&operator.log).unwrap().matches("loaded its certificate").count();
    wait_until(Duration::from_secs(30), "the renewed certificate to be loaded", || async { Ok(loads() >= 2) })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", operator.log_tail(30)));
    set_bundle(vec![second.ca_pem.clone()]).await;
    // The apiserver picks the bundle up from its watch a moment after the write: reads over a
    // few seconds from then on all convert, so the served certificate is the renewed one.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        beta.get("web").await.unwrap_or_else(|e| panic!("a read failed with the renewed certificate: {e}\n{}", operator.log_tail(20)));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
