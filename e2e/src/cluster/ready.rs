//! Ports and readiness: free ports, and waiting for the apiserver, the nodes and the service
//! accounts.

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::nodes::real::{self};

pub(super) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(super) fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

pub(super) async fn wait_tcp(port: u16, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("nothing listens on 127.0.0.1:{port} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A client for the kubeconfig at `path` (not the ambient KUBECONFIG).
pub async fn client_for(path: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

/// Polls `/readyz` until it answers `ok`.
pub async fn wait_ready(kubeconfig: &Path, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_err = String::from("not tried");
    while Instant::now() < deadline {
        match client_for(kubeconfig).await {
            Ok(client) => {
                let req = http_get("/readyz");
                match client.request_text(req).await {
                    Ok(body) if body.trim() == "ok" => return Ok(()),
                    Ok(body) => last_err = body,
                    Err(e) => last_err = e.to_string(),
                }
            }
            Err(e) => last_err = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("apiserver /readyz not ok after {timeout:?}: {last_err}")
}

pub(super) fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).expect("static request")
}

/// Waits for a Ready simulated node, `real_nodes` Ready real nodes, and the `default`
/// ServiceAccount (the controller-manager creates it; pods cannot be created in a namespace
/// before it exists).
pub(super) async fn wait_nodes_and_service_accounts(kubeconfig: &Path, real_nodes: usize, timeout: Duration) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::{Node, ServiceAccount};
    let client = client_for(kubeconfig).await?;
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let sas: kube::Api<ServiceAccount> = kube::Api::namespaced(client, "default");
    let deadline = Instant::now() + timeout;
    loop {
        let listed = nodes.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
        let is_real = |n: &Node| n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(real::LABEL));
        let ready = |real: bool| listed.iter().filter(|n| is_real(n) == real && crate::node_is_ready(n)).count();
        let (sim, real) = (ready(false), ready(true));
        let sa = sas.get_opt("default").await.ok().flatten().is_some();
        if sim > 0 && real == real_nodes && sa {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "after {timeout:?}: {sim} Ready simulated nodes, {real} of {real_nodes} real nodes Ready, default ServiceAccount present: {sa}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
