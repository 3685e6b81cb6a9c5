use anyhow::Context as _;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use cloneset_operator::api::crd;
use cloneset_operator::client::{self, RateLimit};
use cloneset_operator::config::{self, ControllerConfig, FeatureGates, ListenAddr};
use cloneset_operator::controller;
use cloneset_operator::leader::{self, ElectionConfig, LeaderElector};
use cloneset_operator::metrics::Metrics;
use cloneset_operator::server::{self, Health};
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

    /// Log verbosity, 0-5 (klog's -v): 0-1 info, 2 this operator's debug lines, 3 debug, 4 this
    /// operator's trace lines, 5 trace. RUST_LOG, when set, takes precedence.
    #[arg(global = true, short = 'v', long = "v", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=5))]
    verbosity: u8,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (the default).
    Run,
    /// Print the CloneSet CustomResourceDefinition as YAML.
    Crd,
    /// Print the ValidatingAdmissionPolicy (and binding) that validates CloneSet pod templates.
    AdmissionPolicy,
    /// Print the ValidatingAdmissionPolicy (and binding) that enforces the
    /// `policy.kruise.io/delete-protection` label (Kruise's ResourcesDeletionProtection gate).
    DeletionProtectionPolicy,
    /// Take CloneSets over from OpenKruise's Helm release (see the README's "Migrating from Kruise").
    Migrate(MigrateArgs),
}

/// Flags of `migrate`.
#[derive(Args, Debug)]
struct MigrateArgs {
    /// Print what would change and change nothing.
    #[arg(long = "dry-run")]
    dry_run: bool,
    /// The Helm release of this chart that takes the CRD over (`helm install <name>`).
    #[arg(long = "release-name", default_value = "cloneset-operator")]
    release_name: String,
    /// The namespace of that release (`helm install --namespace`).
    #[arg(long = "release-namespace", default_value = "default")]
    release_namespace: String,
    /// Kruise's installation namespace (its chart's `installation.namespace`).
    #[arg(long = "kruise-namespace", default_value = "kruise-system")]
    kruise_namespace: String,
    /// How long to wait for Kruise's leader-election Lease to lapse.
    #[arg(long = "lease-timeout", default_value = "2m", value_parser = parse_duration)]
    lease_timeout: Duration,
}

/// Flags of the controller, with Kruise's names and defaults.
#[derive(Args, Debug)]
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
    /// Queue every CloneSet this often (e.g. 10m); unset or 0: only on changes.
    #[arg(global = true, long = "sync-period", value_parser = parse_duration)]
    sync_period: Option<Duration>,
    /// Client-side limit on apiserver requests per second (a token bucket on every request).
    #[arg(global = true, long = "rest-config-qps", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    rest_config_qps: u32,
    /// Requests allowed at once above --rest-config-qps (the token bucket's size).
    #[arg(global = true, long = "rest-config-burst", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    rest_config_burst: u32,
    /// Run only while holding a Lease, so several replicas can run with one active.
    #[arg(global = true, long = "enable-leader-election", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    enable_leader_election: bool,
    /// Namespace of the leader-election Lease `cloneset-operator-leader`; empty: $POD_NAMESPACE,
    /// else the in-cluster namespace, else kube-system.
    #[arg(global = true, long = "leader-election-namespace", default_value = "")]
    leader_election_namespace: String,
    /// Where /metrics is served (host:port; an empty host means every interface; 0 disables).
    #[arg(global = true, long = "metrics-addr", default_value = ":8080", value_parser = ListenAddr::parse)]
    metrics_addr: ListenAddr,
    /// Where /healthz and /readyz are served (host:port; an empty host means every interface; 0 disables).
    #[arg(global = true, long = "health-probe-addr", default_value = ":8000", value_parser = ListenAddr::parse)]
    health_probe_addr: ListenAddr,
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
            sync_period: self.sync_period.filter(|p| !p.is_zero()),
        }
    }

    fn rate_limit(&self) -> RateLimit {
        RateLimit { qps: f64::from(self.rest_config_qps), burst: self.rest_config_burst }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(cli.logging_format, config::verbosity_filter(cli.verbosity));
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
        Command::DeletionProtectionPolicy => {
            print!("{}", crd::generated_deletion_protection_file()?);
            Ok(())
        }
        Command::Migrate(args) => migrate(args).await,
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let shutdown = shutdown_signal()?;
    let config = args.controller_config();
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());

    // Probes and metrics first: a port that cannot be bound is a bad flag, reported at once.
    if let Some(listener) = listen("--metrics-addr", &args.metrics_addr).await? {
        tokio::spawn(server::serve_metrics(listener, metrics.clone()));
    }
    if let Some(listener) = listen("--health-probe-addr", &args.health_probe_addr).await? {
        tokio::spawn(server::serve_health(listener, health.clone()));
    }

    let kube_config = kube::Config::infer()
        .await
        .context("no usable Kubernetes configuration (set KUBECONFIG, a current context, or run in a cluster)")?;
    let client = client::build(kube_config.clone(), args.rate_limit(), metrics.clone()).context("building the Kubernetes client")?;
    let version = client.apiserver_version().await.context("cannot reach the Kubernetes apiserver")?;
    tracing::info!(server_version = %version.git_version, platform = %version.platform, "connected to Kubernetes");

    let elector = if args.enable_leader_election {
        let election = ElectionConfig::new(leader::resolve_namespace(&args.leader_election_namespace), leader::new_identity());
        // Its own token bucket, so renewals never wait behind the controller's writes.
        let lease_client = client::build(kube_config, args.rate_limit(), metrics.clone()).context("building the leader-election client")?;
        Some(LeaderElector::new(lease_client, election))
    } else {
        tracing::info!("leader election disabled (--enable-leader-election=false): this instance always leads");
        None
    };

    let runtime = controller::Runtime { metrics, health, elector };
    controller::run(client, config, runtime, shutdown).await?;
    tracing::info!("shut down");
    Ok(())
}

async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    use cloneset_operator::migrate::{self, Release, apply};
    let kube_config = kube::Config::infer().await.context("no usable Kubernetes configuration (set KUBECONFIG or a current context)")?;
    let client = kube::Client::try_from(kube_config).context("building the Kubernetes client")?;
    let opts = apply::Options {
        target: Release { name: args.release_name, namespace: args.release_namespace },
        kruise_namespace: args.kruise_namespace,
        dry_run: args.dry_run,
        lease_timeout: args.lease_timeout,
    };
    let prefix = if opts.dry_run { "migrate (dry run): " } else { "migrate: " };
    let steps = apply::run(&client, &opts, &mut |line| println!("{prefix}{line}")).await?;
    match (migrate::changes(&steps), opts.dry_run) {
        (0, _) => println!("{prefix}nothing to change: already migrated"),
        (n, true) => println!("{prefix}{n} change(s) to make; run again without --dry-run"),
        (n, false) => println!("{prefix}done, {n} change(s); now `helm install {}` this chart", opts.target.name),
    }
    Ok(())
}

/// Binds a server's address, or `None` when the flag disables it.
async fn listen(flag: &str, addr: &ListenAddr) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    if *addr == ListenAddr::Disabled {
        return Ok(None);
    }
    let listener = server::bind(addr).await.with_context(|| format!("{flag}={addr}: cannot listen"))?;
    let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(flag, addr = %local, "listening");
    Ok(Some(listener))
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
