//! The control plane itself: garbage collection (from the real controller-manager), the operator
//! binary connecting to it, and an address plan that keeps every connection on this machine.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use e2e::testenv::{self, TestNamespace, wait_deleted, watch_until};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service};
use kube::api::{DeleteParams, LogParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;

#[tokio::test]
async fn deleting_an_owner_removes_its_dependents() {
    let ns = TestNamespace::create("gc").await.unwrap();
    let cms: Api<ConfigMap> = ns.api();
    let pods: Api<Pod> = ns.api();
    let owner = cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap()).await.unwrap();
    let owner_ref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid().unwrap(), "controller": true, "blockOwnerDeletion": true}]);
    let dependent: Pod = serde_json::from_value(json!({
        "metadata": {"name": "dependent", "ownerReferences": owner_ref},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}], "terminationGracePeriodSeconds": 1},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &dependent).await.unwrap();
    let unrelated: Pod = serde_json::from_value(json!({
        "metadata": {"name": "unrelated"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &unrelated).await.unwrap();
    watch_until(&pods, "dependent", Duration::from_secs(60), |p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .await
        .unwrap();

    cms.delete("owner", &DeleteParams::background()).await.unwrap();
    wait_deleted(&pods, "dependent", Duration::from_secs(60)).await.unwrap();
    let survivor = pods.get("unrelated").await.expect("a pod without the owner survives");
    assert!(survivor.metadata.deletion_timestamp.is_none());
}

#[tokio::test]
async fn operator_binary_connects_and_stops_on_sigterm() {
    let kubeconfig = testenv::kubeconfig().await.unwrap();
    let bin = e2e::cluster::sibling_binary("cloneset-operator").expect("build the operator first (cargo build --workspace --bins)");
    let mut cmd = Command::new(bin);
    // Servers off: a developer's `make run` may hold the default ports while tests run.
    cmd.env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "info")
        .args(["--metrics-addr=0", "--health-probe-addr=0", "--webhook-addr=0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // Dies with the test process even if an assertion below fails first.
    unsafe {
        use std::os::unix::process::CommandExt as _;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let connected = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.contains("connected to Kubernetes") => break line,
            Ok(_) => continue,
            Err(e) => {
                let _ = child.kill();
                panic!("operator did not log a connection: {e}");
            }
        }
    };
    let version = e2e::versions::under_test();
    assert!(connected.contains(&format!("server_version={version}")), "logs the server version, the one under test: {connected}");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "operator did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "clean exit on SIGTERM: {status:?}");
}

/// The whole test bed runs the release under test (`K8S_VERSION`, e2e/kubernetes-versions): the
/// apiserver, every node's kubelet as it reports itself, and the kubectl the tests run.
#[tokio::test]
async fn apiserver_nodes_and_kubectl_are_of_the_release_under_test() {
    let version = e2e::versions::under_test();
    let client = testenv::client().await.unwrap();
    assert_eq!(client.apiserver_version().await.unwrap().git_version, version, "kube-apiserver");
    let nodes: Api<Node> = Api::all(client);
    let nodes = nodes.list(&Default::default()).await.unwrap();
    assert!(!nodes.items.is_empty());
    for node in &nodes {
        let info = node.status.as_ref().and_then(|s| s.node_info.as_ref()).expect("nodeInfo");
        assert_eq!(info.kubelet_version, version, "the kubelet of node {}", node.name_any());
    }
    let out = Command::new("kubectl").args(["version", "--client", "-o", "json"]).output().expect("kubectl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let client_version: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(client_version["clientVersion"]["gitVersion"], json!(version), "the kubectl on PATH");
}

fn loopback(ip: Option<&str>) -> bool {
    ip.and_then(|ip| ip.parse::<std::net::IpAddr>().ok()).is_some_and(|ip| ip.is_loopback())
}

/// Whether a connection to `ip` ends on this machine: a loopback address, an address of this
/// host, or one routed into a bridge the run created (real nodes' pods and Services).
fn stays_here(ip: Option<&str>) -> bool {
    let Some(ip) = ip else { return false };
    if loopback(Some(ip)) {
        return true;
    }
    let route = e2e::host::run("ip", &["route", "get", ip]).unwrap_or_default();
    route.starts_with("local ") || route.contains(" dev csobr")
}

/// Every address the local control plane hands out stays on this machine: on loopback, or with
/// real nodes on the run's own bridge. The apiserver's own connections to Services, nodes and
/// pods end here or fail before a dial: a webhook whose Service has no endpoints fails in the
/// apiserver, the pod proxy refuses a loopback pod, `kubectl logs` dials a loopback node.
/// (`make test`'s network guard counts any packet that leaves anyway.)
#[tokio::test]
async fn every_address_the_control_plane_hands_out_stays_on_this_machine() {
    let ns = TestNamespace::create("addr").await.unwrap();
    let client = ns.client.clone();
    let plan = testenv::cluster_state().await.unwrap().plan();
    let kubernetes = Api::<Service>::namespaced(client.clone(), "default").get("kubernetes").await.unwrap();
    assert_eq!(kubernetes.spec.unwrap().cluster_ip, Some(plan.kubernetes_service_ip()));
    assert!(stays_here(Some(&plan.kubernetes_service_ip())));
    let services: Api<Service> = ns.api();
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "no-endpoints"}, "spec": {"ports": [{"port": 443}]}})).unwrap();
    let svc = services.create(&PostParams::default(), &svc).await.unwrap();
    assert!(stays_here(svc.spec.as_ref().unwrap().cluster_ip.as_deref()), "ClusterIP {:?}", svc.spec.unwrap().cluster_ip);
    for node in Api::<Node>::all(client.clone()).list(&Default::default()).await.unwrap() {
        let addresses = node.status.and_then(|s| s.addresses).unwrap_or_default();
        let internal: Vec<_> = addresses.iter().filter(|a| a.type_ == "InternalIP").collect();
        assert!(
            !internal.is_empty() && internal.iter().all(|a| stays_here(Some(&a.address))),
            "node {}: {internal:?}",
            node.metadata.name.unwrap()
        );
    }

    let pods: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "labels": {"guarded-by": ns.name}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}], "terminationGracePeriodSeconds": 1},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let running =
        watch_until(&pods, "p", Duration::from_secs(60), |p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .await
            .unwrap();
    let status = running.status.unwrap();
    assert!(
        loopback(status.pod_ip.as_deref()) && loopback(status.host_ip.as_deref()),
        "pod {:?} on host {:?}",
        status.pod_ip,
        status.host_ip
    );

    let proxied =
        client.request_text(http::Request::get(format!("/api/v1/namespaces/{}/pods/p/proxy/", ns.name)).body(vec![]).unwrap()).await;
    assert!(proxied.as_ref().is_err_and(|e| e.to_string().contains("address not allowed")), "pod proxy: {proxied:?}");
    let logs = pods.logs("p", &LogParams::default()).await;
    assert!(logs.is_err(), "a simulated node served logs: {logs:?}");

    // A webhook for this test's pods only, backed by the Service without endpoints.
    let hooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let hook: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": ns.name},
        "webhooks": [{"name": "guard.e2e.cloneset-operator.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                      "failurePolicy": "Fail", "timeoutSeconds": 5,
                      "clientConfig": {"service": {"name": "no-endpoints", "namespace": ns.name, "port": 443}},
                      "objectSelector": {"matchLabels": {"guarded-by": ns.name}},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}],
    }))
    .unwrap();
    hooks.create(&PostParams::default(), &hook).await.unwrap();
    // Until the apiserver has seen the webhook, pods are admitted: create them until one is not.
    let mut probe = pod;
    probe.metadata.name = None;
    probe.metadata.generate_name = Some("q-".into());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let refused = loop {
        match pods.create(&PostParams::default(), &probe).await {
            Err(e) => break Some(e.to_string()),
            Ok(_) if std::time::Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Ok(_) => break None,
        }
    };
    hooks.delete(&ns.name, &DeleteParams::default()).await.unwrap();
    let refused = refused.expect("the webhook was never called");
    // Resolved on this machine, to no endpoint: said one way up to Kubernetes 1.32, another after.
    assert!(
        refused.contains(r#"no endpoints available for service "no-endpoints""#)
            || refused.contains(r#"endpoints "no-endpoints" not found"#),
        "{refused}"
    );
}
