//! The host network real nodes need, created by `up` and removed by `down`: a bridge for their
//! pods (and their node IPs), a route that keeps the service range on that bridge, a forwarding
//! rule that drops whatever pods send anywhere else, and the apiserver's address on the bridge.
//! Addresses: [`crate::addresses::Bridged`].

use std::net::SocketAddr;

use anyhow::{Context as _, bail};

use crate::addresses::Bridged;
use crate::host::{run, run_quietly};

/// The forwarding chain of a slot: pods may reach their bridge and the host, nothing beyond.
fn chain(b: Bridged) -> String {
    format!("CSO-BRIDGE-{}", b.slot)
}

/// Claims the first slot whose bridge does not exist yet and creates it: the bridge with its
/// address and the further node IPs, the service range's route, the forwarding rule. The caller
/// holds the host-wide lock ([`crate::cluster::host_lock`]), so two `up`s never claim one slot.
pub fn create(real_nodes: usize) -> anyhow::Result<Bridged> {
    let existing = run("ip", &["-o", "link", "show"])?;
    let slot = (0..Bridged::SLOTS)
        .map(|slot| Bridged { slot })
        .find(|b| !existing.contains(&format!(": {}:", b.bridge_name())))
        .with_context(|| format!("all {} bridges csobr0..csobr{} exist: stop a control plane first", Bridged::SLOTS, Bridged::SLOTS - 1))?;
    let bridge = slot.bridge_name();
    let made = (|| -> anyhow::Result<()> {
        run("ip", &["link", "add", &bridge, "type", "bridge"])?;
        run("ip", &["addr", "add", &format!("{}/24", slot.bridge_ip()), "dev", &bridge])?;
        for n in 1..real_nodes {
            run("ip", &["addr", "add", &format!("{}/24", slot.node_ip(n)), "dev", &bridge])?;
        }
        run("ip", &["link", "set", &bridge, "up"])?;
        run("ip", &["route", "add", &slot.service_cidr(), "dev", &bridge])?;
        let chain = chain(slot);
        for iptables in ["iptables", "ip6tables"] {
            run(iptables, &["-w", "-N", &chain])?;
            run(iptables, &["-w", "-A", &chain, "-i", &bridge, "!", "-o", &bridge, "-j", "DROP"])?;
            run(iptables, &["-w", "-I", "FORWARD", "1", "-j", &chain])?;
        }
        Ok(())
    })();
    if let Err(e) = made {
        remove(slot);
        return Err(e.context(format!("creating bridge {bridge}")));
    }
    Ok(slot)
}

/// Removes what [`create`] made; what is already gone is skipped.
pub fn remove(b: Bridged) {
    let chain = chain(b);
    for iptables in ["iptables", "ip6tables"] {
        while run_quietly(iptables, &["-w", "-D", "FORWARD", "-j", &chain]) {}
        run_quietly(iptables, &["-w", "-F", &chain]);
        run_quietly(iptables, &["-w", "-X", &chain]);
    }
    run_quietly("ip", &["route", "del", &b.service_cidr()]);
    run_quietly("ip", &["link", "del", &b.bridge_name()]);
}

/// Relays TCP connections from `listen` to `to` until the process ends: pods reach the
/// apiserver, which listens on 127.0.0.1 only, at the bridge's address.
pub async fn forward(listen: SocketAddr, to: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("listening on {listen}"))?;
    loop {
        let (mut inbound, _) = listener.accept().await?;
        tokio::spawn(async move {
            let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await else { return };
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}

/// Fails unless this process may change the host's network (real nodes need root).
pub fn check_privileges() -> anyhow::Result<()> {
    if !crate::host::is_root() {
        bail!("real nodes need root (a bridge, routes, iptables rules, containerd and the kubelet); run as root or with --real-nodes 0");
    }
    Ok(())
}
