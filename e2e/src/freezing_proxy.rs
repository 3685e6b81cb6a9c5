//! A TCP proxy in front of the apiserver that can freeze the connections it holds: they stay open
//! and forward nothing in either direction, as behind a stuck load balancer or NAT, while
//! connections opened afterwards work. What a client sees is silence, never a reset.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, watch};

pub struct FreezingProxy {
    pub addr: SocketAddr,
    /// Bumped by [`FreezingProxy::freeze_open_connections`]; a connection accepted under an
    /// earlier value stops forwarding when it changes.
    epoch: watch::Sender<u64>,
    accepted: Arc<AtomicUsize>,
    /// Frozen connections, kept open until the proxy is dropped.
    held: Arc<Mutex<Vec<(TcpStream, TcpStream)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FreezingProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (epoch, _) = watch::channel(0u64);
        let accepted = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let (epoch, accepted, held) = (epoch.clone(), accepted.clone(), held.clone());
            tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let (rx, held) = (epoch.subscribe(), held.clone());
                    tokio::spawn(async move {
                        if let Ok(outbound) = TcpStream::connect(upstream).await {
                            forward(inbound, outbound, rx, held).await;
                        }
                    });
                }
            })
        };
        Ok(Self { addr, epoch, accepted, held, task })
    }

    /// Every connection open now goes silent for good; new ones are forwarded as before.
    pub fn freeze_open_connections(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Connections frozen so far (and still held open).
    pub async fn frozen(&self) -> usize {
        self.held.lock().await.len()
    }

    /// A copy of the kubeconfig at `from` whose server is this proxy (same scheme, CA and names,
    /// so TLS still verifies against the apiserver's certificate for 127.0.0.1).
    pub fn kubeconfig(&self, from: &Path, to: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(from).with_context(|| format!("reading {}", from.display()))?;
        let mut config: serde_json::Value = kubeconfig_json(&text)?;
        let clusters = config["clusters"].as_array_mut().context("a kubeconfig without clusters")?;
        for c in clusters {
            let server = c["cluster"]["server"].as_str().context("a cluster without a server")?;
            let uri: http::Uri = server.parse()?;
            let scheme = uri.scheme_str().unwrap_or("https");
            c["cluster"]["server"] = serde_json::json!(format!("{scheme}://{}", self.addr));
            crate::chart::absolute_ca(&mut c["cluster"], from);
        }
        std::fs::write(to, serde_json::to_vec_pretty(&config)?)?;
        Ok(())
    }
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A kubeconfig as JSON: kube's own reader, then back to JSON.
fn kubeconfig_json(text: &str) -> anyhow::Result<serde_json::Value> {
    let kc = kube::config::Kubeconfig::from_yaml(text)?;
    Ok(serde_json::to_value(kc)?)
}

/// Copies both ways until either side closes, or until the epoch moves past the one this
/// connection was accepted under; then parks both sockets, open and unread.
async fn forward(mut a: TcpStream, mut b: TcpStream, mut epoch: watch::Receiver<u64>, held: Arc<Mutex<Vec<(TcpStream, TcpStream)>>>) {
    let mine = *epoch.borrow_and_update();
    let (mut from_a, mut from_b) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        tokio::select! {
            n = a.read(&mut from_a) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => if b.write_all(&from_a[..n]).await.is_err() { return },
            },
            n = b.read(&mut from_b) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => if a.write_all(&from_b[..n]).await.is_err() { return },
            },
            changed = epoch.changed() => {
                if changed.is_err() || *epoch.borrow_and_update() != mine {
                    held.lock().await.push((a, b));
                    return;
                }
            }
        }
    }
}
