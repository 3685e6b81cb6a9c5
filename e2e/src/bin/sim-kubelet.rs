//! The simulated kubelet as a process; the local control plane starts one.

use std::time::Duration;

use clap::Parser;
use e2e::nodes::simulated::{self, SimConfig, parse_duration};

#[derive(Parser, Debug)]
#[command(about = "Simulated kubelet: registers nodes and drives the status of their pods")]
struct Args {
    /// Kubeconfig of the cluster to serve.
    #[arg(long)]
    kubeconfig: std::path::PathBuf,
    /// Number of nodes to register.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Node name prefix; nodes are <prefix>-0, <prefix>-1, ...
    #[arg(long, default_value = "sim-node")]
    node_prefix: String,
    /// Time from scheduling until containers run (pod annotation sim.cloneset-operator.dev/startup-delay overrides).
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    startup_delay: Duration,
    /// Time from a container image change until the container restarted with it.
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    restart_delay: Duration,
    /// Cap on a deleted pod's termination grace period.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    max_grace_period: Duration,
    /// Images whose reference contains this string fail to pull.
    #[arg(long, default_value = "unpullable")]
    unpullable_marker: String,
    /// Two tags the simulated registry resolves to one digest, `IMAGE=OTHER` (repeatable): a pod
    /// of IMAGE reports OTHER's imageID.
    #[arg(long = "same-digest")]
    same_digest: Vec<String>,
    /// An image whose own process ends, `IMAGE=AFTER:CODE` (repeatable): a container of it that
    /// sets no `command` exits with CODE after AFTER and is restarted with the kubelet's back-off.
    #[arg(long = "exits")]
    exits: Vec<String>,
    /// An image whose own process listens, `IMAGE=PORT[,PORT...][@AFTER]` (repeatable): a
    /// readiness probe of another port of it never passes; one of these ports passes AFTER its
    /// start. Images not named pass every probe.
    #[arg(long = "serves")]
    serves: Vec<String>,
    /// Pod capacity of each node.
    #[arg(long, default_value_t = 2000)]
    pods_per_node: u32,
    /// Pods handled concurrently.
    #[arg(long, default_value_t = 16)]
    workers: u16,
    /// The kubelet version the nodes report (the control plane's).
    #[arg(long)]
    kubelet_version: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let a = Args::parse();
    let client = e2e::cluster::client_for(&a.kubeconfig).await?;
    let cfg = SimConfig {
        node_names: (0..a.nodes).map(|i| format!("{}-{i}", a.node_prefix)).collect(),
        startup_delay: a.startup_delay,
        restart_delay: a.restart_delay,
        max_grace_period: a.max_grace_period,
        unpullable_marker: a.unpullable_marker,
        same_digest: simulated::parse_same_digest(&a.same_digest).map_err(anyhow::Error::msg)?,
        exits: simulated::parse_exits(&a.exits).map_err(anyhow::Error::msg)?,
        serves: simulated::parse_serves(&a.serves).map_err(anyhow::Error::msg)?,
        pods_per_node: a.pods_per_node,
        workers: a.workers,
        kubelet_version: a.kubelet_version,
    };
    tracing::info!(?cfg, "simulated kubelet starting");
    simulated::run(client, cfg).await
}
