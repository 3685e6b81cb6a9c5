use anyhow::Context as _;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use cloneset_operator::api::crd;
use cloneset_operator::config::{self, ControllerConfig, FeatureGates};
use cloneset_operator::controller;
use cloneset_operator::telemetry::{self, LogFormat};

/// An OpenKruise-compatible CloneSet operator.
///
/// With no subcommand it runs the controller against the cluster named by `KUBECONFIG`,
/// the current kubeconfig context, or the in-cluster service account.
#[derive(Parser, Debug)]
#[command(name = "cloneset-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    run: RunArgs,

    /// Log line format: text or json.
    #[arg(global = true, long = "logging-format", value_enum, default_value = "text")]
    logging_format: LogFormat,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (the default).
    Run,
    /// Print the CloneSet CustomResourceDefinition as YAML.
    Crd,
    /// Print the ValidatingAdmissionPolicy (and binding) that validates CloneSet pod templates.
    AdmissionPolicy,
}

/// Flags of the controller, with Kruise's names and defaults.
#[derive(Args, Debug, Default)]
struct RunArgs {
    /// Number of CloneSets reconciled concurrently.
    #[arg(global = true, long = "cloneset-workers", default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    cloneset_workers: u16,
    /// How long to wait for the cache to show our own writes before counting a leak.
    #[arg(global = true, long = "expectation-timeout", default_value = "5m", value_parser = parse_duration)]
    expectation_timeout: Option<Duration>,
    /// Kruise feature gates, e.g. `CloneSetShortHash=true,CloneSetPartitionRollback=true`.
    #[arg(global = true, long = "feature-gates", default_value = "", value_parser = FeatureGates::parse)]
    feature_gates: Option<FeatureGates>,
    /// Only watch this namespace (default: all).
    #[arg(global = true, long = "namespace", default_value = "")]
    namespace: String,
    /// Do not count PreparingDelete pods as replicas, for every CloneSet.
    #[arg(global = true, long = "cloneset-scaling-exclude-preparing-delete", default_value_t = false)]
    exclude_preparing_delete: bool,
    /// How long the caches may take to list everything at start-up.
    #[arg(global = true, long = "controller-cache-sync-timeout", default_value = "2m", value_parser = parse_duration)]
    cache_sync_timeout: Option<Duration>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    config::parse_go_duration(s)
}

impl RunArgs {
    fn controller_config(&self) -> ControllerConfig {
        let d = ControllerConfig::default();
        ControllerConfig {
            workers: usize::from(self.cloneset_workers.max(1)),
            expectation_timeout: self.expectation_timeout.unwrap_or(d.expectation_timeout),
            gates: self.feature_gates.unwrap_or_default(),
            namespace: (!self.namespace.is_empty()).then(|| self.namespace.clone()),
            exclude_preparing_delete: self.exclude_preparing_delete,
            cache_sync_timeout: self.cache_sync_timeout.unwrap_or(d.cache_sync_timeout),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(cli.logging_format, "info");
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => run(cli.run).await,
        Command::Crd => {
            print!("{}", crd::generated_crd_file()?);
            Ok(())
        }
        Command::AdmissionPolicy => {
            print!("{}", crd::generated_policy_file()?);
            Ok(())
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let shutdown = shutdown_signal()?;
    let config = args.controller_config();
    let client = kube::Client::try_default()
        .await
        .context("no usable Kubernetes configuration (set KUBECONFIG, a current context, or run in a cluster)")?;
    let version = client.apiserver_version().await.context("cannot reach the Kubernetes apiserver")?;
    tracing::info!(server_version = %version.git_version, platform = %version.platform, "connected to Kubernetes");
    controller::run(client, config, shutdown).await?;
    tracing::info!("shut down");
    Ok(())
}

/// Registers SIGINT and SIGTERM handlers now (so a signal during start-up is not fatal) and
/// resolves when either arrives.
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
