use anyhow::Context as _;
use clap::{Parser, Subcommand};
use cloneset_operator::api::crd;
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

    /// Log line format: text or json.
    #[arg(long = "logging-format", value_enum, default_value = "text", global = true)]
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(cli.logging_format, "info");
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => run().await,
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

async fn run() -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("no usable Kubernetes configuration (set KUBECONFIG, a current context, or run in a cluster)")?;
    let version = client.apiserver_version().await.context("cannot reach the Kubernetes apiserver")?;
    tracing::info!(server_version = %version.git_version, platform = %version.platform, "connected to Kubernetes");
    shutdown_signal().await;
    tracing::info!("shutting down");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
