//! The control plane itself: garbage collection (from the real controller-manager) and the
//! operator binary connecting to it.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use e2e::testenv::{self, TestNamespace, wait_deleted, watch_until};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, PostParams};
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
        .args(["--metrics-addr=0", "--health-probe-addr=0"])
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
    assert!(connected.contains(&format!("server_version={}", e2e::cluster::DEFAULT_K8S_VERSION)), "logs the server version: {connected}");
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
