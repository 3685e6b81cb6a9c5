use anyhow::Context as _;
use std::sync::Arc;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use cloneset_operator::api::crd;
use cloneset_operator::build_info;
use cloneset_operator::client::{self, RateLimit};
use cloneset_operator::config::{self, ControllerConfig, FlagKind, GateSettings, ListenAddr, RetryLimits};
use cloneset_operator::controller;
use cloneset_operator::kruise_guard::KruiseGuard;
use cloneset_operator::leader::{self, ElectionConfig, LeaderElector};
use cloneset_operator::metrics::Metrics;
use cloneset_operator::pod_cache::protobuf::{JSON_CONTENT_TYPE, PROTOBUF_CONTENT_TYPE};
use cloneset_operator::server::{self, Health};
use cloneset_operator::telemetry::{self, LogFormat};
use cloneset_operator::webhook;

/// An OpenKruise-compatible CloneSet operator.
///
/// With no subcommand it runs the controller against the cluster named by `KUBECONFIG`,
/// the current kubeconfig context, or the in-cluster service account.
#[derive(Parser, Debug)]
#[command(name = "cloneset-operator", version = build_info::version_line(), about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    run: RunArgs,

    /// Log line format: text or json.
    #[arg(global = true, long = "logging-format", value_enum, default_value = "text")]
    logging_format: LogFormat,

    /// Log verbosity (klog's -v): 0-1 info, 2 this operator's debug lines, 3 debug, 4 this
    /// operator's trace lines, 5 and above trace. RUST_LOG, when set, takes precedence.
    #[arg(global = true, short = 'v', long = "v", default_value_t = 0, allow_negative_numbers = true)]
    verbosity: i32,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (the default).
    Run,
    /// Print the CloneSet CustomResourceDefinition as YAML.
    Crd {
        /// Serve apps.kruise.io/v1beta1 too, converted by the operator's webhook through the
        /// Service cloneset-system/cloneset-operator-webhook (see docs/v1beta1.md).
        #[arg(long)]
        with_v1beta1: bool,
    },
    /// Print the ValidatingAdmissionPolicies (and bindings) that validate CloneSet pod templates and
    /// warn about template fields newer than Kubernetes 1.32.
    AdmissionPolicy,
    /// Print the ValidatingAdmissionPolicy (and binding) that enforces the
    /// `policy.kruise.io/delete-protection` label (Kruise's ResourcesDeletionProtection gate).
    DeletionProtectionPolicy,
    /// Take CloneSets over from OpenKruise's Helm release, or with --to-kruise give them back (see
    /// docs/migrating-from-kruise.md).
    Migrate(MigrateArgs),
}

/// Flags of `migrate`.
#[derive(Args, Debug)]
struct MigrateArgs {
    /// Print what would change and change nothing.
    #[arg(long = "dry-run")]
    dry_run: bool,
    /// Go back: once this operator has stopped, store every CloneSet's template with Kruise's
    /// defaults (so Kruise's manager keeps its revision) and give the CRD to Kruise's release.
    /// With --namespace, only that namespace's CloneSets, and the CRD left as it is. This
    /// operator's Lease is looked for in --leader-election-namespace (default here:
    /// cloneset-system, its chart's `installation.namespace`) under --leader-election-id.
    #[arg(long = "to-kruise")]
    to_kruise: bool,
    /// The Helm release that takes the CRD over (`helm install <name>`): this chart's, or with
    /// --to-kruise Kruise's [default: cloneset-operator; with --to-kruise, kruise].
    #[arg(long = "release-name")]
    release_name: Option<String>,
    /// The namespace of that release (`helm install --namespace`).
    #[arg(long = "release-namespace", default_value = "default")]
    release_namespace: String,
    /// Kruise's installation namespace (its chart's `installation.namespace`).
    #[arg(long = "kruise-namespace", default_value = "kruise-system", conflicts_with = "to_kruise")]
    kruise_namespace: String,
    /// How long to wait for the leader-election Lease (Kruise's; with --to-kruise, this operator's) to lapse.
    #[arg(long = "lease-timeout", default_value = "2m", value_parser = parse_duration)]
    lease_timeout: Duration,
    /// From a CRD storing CloneSets as v1beta1 (Kruise 2.0): the Service (namespace/name) of this
    /// operator's conversion webhook, which the CRD's conversion is pointed at (this chart's
    /// `<fullname>-webhook` in its `installation.namespace`).
    #[arg(long = "conversion-service", default_value = "cloneset-system/cloneset-operator-webhook", conflicts_with = "to_kruise")]
    conversion_service: String,
    /// Instead of --conversion-service: the URL of this operator's conversion webhook.
    #[arg(long = "conversion-url", conflicts_with = "to_kruise")]
    conversion_url: Option<String>,
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
    /// Kruise feature gates, e.g. `CloneSetShortHash=true,CloneSetPartitionRollback=true`; all of
    /// Kruise v1.9.0's gates, `AllAlpha` and `AllBeta` are accepted.
    #[arg(global = true, long = "feature-gates", default_value = "", value_parser = GateSettings::parse)]
    feature_gates: GateSettings,
    /// Only watch this namespace (default: all).
    #[arg(global = true, long = "namespace", default_value = "")]
    namespace: String,
    /// Do not count PreparingDelete pods as replicas, for every CloneSet.
    #[arg(global = true, long = "cloneset-scaling-exclude-preparing-delete", default_value = "false", value_parser = config::parse_go_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    exclude_preparing_delete: bool,
    /// How long the caches may take to list everything at start-up.
    #[arg(global = true, long = "controller-cache-sync-timeout", default_value = "2m", value_parser = parse_duration)]
    cache_sync_timeout: Option<Duration>,
    /// Queue every CloneSet this often (e.g. 10m); unset or 0: only on changes.
    #[arg(global = true, long = "sync-period", value_parser = parse_optional_duration)]
    sync_period: Option<Duration>,
    /// How the caches fill at start-up and after a watch expires: `auto` (a streaming list
    /// where the apiserver serves one, else lists of 100 objects a page), `true` or `false`.
    #[arg(global = true, long = "streaming-lists", default_value = "auto", value_parser = config::InitialLists::parse)]
    streaming_lists: config::InitialLists,
    /// The encoding pods are listed, watched and answered to writes in:
    /// `application/vnd.kubernetes.protobuf` (far cheaper for the apiserver to encode) or
    /// `application/json`. Other kinds are read as JSON.
    #[arg(global = true, long = "kube-api-content-type", default_value = PROTOBUF_CONTENT_TYPE, value_parser = [PROTOBUF_CONTENT_TYPE, JSON_CONTENT_TYPE])]
    kube_api_content_type: String,
    /// Fault injection for the chaos tests: drop this fraction (0 to 1) of the pod watch events
    /// before they reach the cache, as a lost event would.
    #[arg(global = true, long = "fault-drop-pod-events", default_value_t = 0.0, hide = true, value_parser = config::parse_fraction)]
    fault_drop_pod_events: f64,
    /// Client-side limit on apiserver requests per second (a token bucket on every request).
    /// Unset (and --rest-config-burst unset): no client-side limit, the apiserver's Priority and
    /// Fairness decides; negative: no limit; 0: client-go's default 5.
    #[arg(global = true, long = "rest-config-qps", allow_negative_numbers = true)]
    rest_config_qps: Option<i32>,
    /// Requests allowed at once above --rest-config-qps (the token bucket's size); given alone,
    /// the QPS is Kruise's 30. 0: client-go's default 10.
    #[arg(global = true, long = "rest-config-burst", value_parser = clap::value_parser!(i32).range(0..))]
    rest_config_burst: Option<i32>,
    /// Run only while holding a Lease, so several replicas can run with one active.
    #[arg(global = true, long = "enable-leader-election", default_value = "true", value_parser = config::parse_go_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    enable_leader_election: bool,
    /// Namespace of the leader-election Lease; empty: $POD_NAMESPACE, else the in-cluster
    /// namespace, else kube-system.
    #[arg(global = true, long = "leader-election-namespace", default_value = "")]
    leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(global = true, long = "leader-election-id", default_value = leader::LEASE_NAME)]
    leader_election_id: String,
    /// How long a standby waits, after the Lease last changed, before taking it.
    #[arg(global = true, long = "leader-election-lease-duration", default_value = "15s", value_parser = parse_duration)]
    leader_election_lease_duration: Duration,
    /// How long a leader keeps trying to renew before it stops.
    #[arg(global = true, long = "leader-election-renew-deadline", default_value = "10s", value_parser = parse_duration)]
    leader_election_renew_deadline: Duration,
    /// How often the Lease is renewed or tried.
    #[arg(global = true, long = "leader-election-retry-period", default_value = "2s", value_parser = parse_duration)]
    leader_election_retry_period: Duration,
    /// The lock object: only `leases` (client-go has no other since v0.27).
    #[arg(global = true, long = "leader-election-resource-lock", default_value = "leases", value_parser = ["leases"])]
    leader_election_resource_lock: String,
    /// The Lease of Kruise's manager, `<namespace>/<name>`: while its holder renews it, this
    /// operator stands by instead of reconciling. Empty: do not check.
    #[arg(global = true, long = "kruise-manager-lease", default_value = "kruise-system/kruise-manager", value_parser = check_lease_ref)]
    kruise_manager_lease: String,
    /// Base delay of a failed CloneSet's retry, doubling per consecutive failure.
    #[arg(global = true, long = "rate-limiter-base-delay", default_value = "5ms", value_parser = parse_duration)]
    rate_limiter_base_delay: Duration,
    /// Cap of that per-CloneSet retry delay.
    #[arg(global = true, long = "rate-limiter-max-delay", default_value = "1000s", value_parser = parse_duration)]
    rate_limiter_max_delay: Duration,
    /// Retries per second over all CloneSets.
    #[arg(global = true, long = "rate-limiter-qps", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    rate_limiter_qps: u32,
    /// Retries allowed at once above --rate-limiter-qps.
    #[arg(global = true, long = "rate-limiter-bucket-size", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    rate_limiter_bucket_size: u32,
    /// A kubeconfig file to use instead of $KUBECONFIG / ~/.kube/config / the in-cluster account.
    #[arg(global = true, long = "kubeconfig", default_value = "")]
    kubeconfig: String,
    /// Where /metrics is served (host:port; an empty host means every interface; 0 disables).
    #[arg(global = true, long = "metrics-addr", default_value = ":8080", value_parser = ListenAddr::parse)]
    metrics_addr: ListenAddr,
    /// Where /healthz and /readyz are served (host:port; an empty host means every interface; 0 disables).
    #[arg(global = true, long = "health-probe-addr", default_value = ":8000", value_parser = ListenAddr::parse)]
    health_probe_addr: ListenAddr,
    /// Where the CloneSet conversion webhook is served over TLS (host:port; an empty host means
    /// every interface; 0 disables). Every replica serves it, leader or not.
    #[arg(global = true, long = "webhook-addr", default_value = ":9876", value_parser = ListenAddr::parse)]
    webhook_addr: ListenAddr,
    /// A directory holding the webhook's tls.crt and tls.key (a mounted cert-manager Secret),
    /// reloaded when they change. Empty: each replica makes its own CA and certificate, adds the
    /// CA to the CRD's caBundle and rotates them.
    #[arg(global = true, long = "webhook-cert-dir", default_value = "")]
    webhook_cert_dir: String,
    /// The names (and IP addresses) the webhook's own certificate is valid for, comma-separated:
    /// the webhook Service's DNS names.
    #[arg(
        global = true,
        long = "webhook-hosts",
        value_delimiter = ',',
        default_value = "cloneset-operator-webhook.cloneset-system.svc,cloneset-operator-webhook.cloneset-system.svc.cluster.local"
    )]
    webhook_hosts: Vec<String>,
    /// How long the webhook's own certificates are valid; each is replaced two thirds into it.
    #[arg(global = true, long = "webhook-cert-validity", default_value = "2160h", value_parser = parse_duration)]
    webhook_cert_validity: Duration,
    /// Threads that run the operator's work; 0: one per CPU the process may use (its cgroup's
    /// CPU limit counts, so the chart's 500m gives one). Pod events arrive one at a time, and one
    /// thread spends less CPU on them than several that wake each other.
    #[arg(global = true, long = "threads", default_value_t = 1)]
    threads: usize,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    config::parse_go_duration(s)
}

/// Kruise's `--sync-period`: a Go duration, or empty for none.
fn parse_optional_duration(s: &str) -> Result<Duration, String> {
    if s.is_empty() { Ok(Duration::ZERO) } else { config::parse_go_duration(s) }
}

/// `<namespace>/<name>`, or empty for none.
fn check_lease_ref(s: &str) -> Result<String, String> {
    match s.split_once('/') {
        _ if s.is_empty() => Ok(String::new()),
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => Ok(s.to_string()),
        _ => Err(format!("{s:?} is not <namespace>/<name>")),
    }
}

/// A kruise-manager flag with no meaning here: parsed with Kruise's syntax, hidden from --help.
fn compat_arg(name: &'static str, kind: FlagKind) -> Arg {
    let arg = Arg::new(name)
        .long(name)
        .global(true)
        .hide(true)
        .action(ArgAction::Set)
        .value_parser(move |v: &str| kind.check(v).map(|()| v.to_string()));
    if kind == FlagKind::Bool { arg.num_args(0..=1).require_equals(true).default_missing_value("true") } else { arg }
}

/// Parses the command line as Go's flag packages would: every kruise-manager flag is known, and
/// a flag given twice takes its last value.
fn parse_args<I, T>(args: I) -> Result<(Cli, ArgMatches), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut command = Cli::command().args_override_self(true);
    for (name, kind) in config::KRUISE_FLAGS_WITHOUT_EFFECT {
        command = command.arg(compat_arg(name, *kind));
    }
    let mut matches = command.try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches_mut(&mut matches)?;
    Ok((cli, matches))
}

/// The Kruise-only flags given on the command line, as `name=value`.
fn given_compat_flags(matches: &ArgMatches) -> Vec<String> {
    let sub = matches.subcommand().map(|(_, m)| m);
    config::KRUISE_FLAGS_WITHOUT_EFFECT
        .iter()
        .filter_map(|(name, _)| {
            let value = sub.and_then(|m| m.get_one::<String>(name)).or_else(|| matches.get_one::<String>(name))?;
            Some(format!("--{name}={value}"))
        })
        .collect()
}

impl RunArgs {
    fn controller_config(&self) -> ControllerConfig {
        let d = ControllerConfig::default();
        ControllerConfig {
            workers: usize::from(self.cloneset_workers.max(1)),
            expectation_timeout: self.expectation_timeout.unwrap_or(d.expectation_timeout),
            gates: self.feature_gates.gates,
            namespace: (!self.namespace.is_empty()).then(|| self.namespace.clone()),
            exclude_preparing_delete: self.exclude_preparing_delete,
            cache_sync_timeout: self.cache_sync_timeout.unwrap_or(d.cache_sync_timeout),
            sync_period: self.sync_period.filter(|p| !p.is_zero()),
            initial_lists: self.streaming_lists,
            drop_pod_events: self.fault_drop_pod_events,
            retry: RetryLimits {
                base_delay: self.rate_limiter_base_delay,
                max_delay: self.rate_limiter_max_delay,
                qps: f64::from(self.rate_limiter_qps),
                burst: self.rate_limiter_bucket_size,
            },
        }
    }

    /// `--kruise-manager-lease` as (namespace, name); `None` when empty.
    fn kruise_lease(&self) -> Option<(&str, &str)> {
        self.kruise_manager_lease.split_once('/')
    }

    fn election(&self) -> Result<ElectionConfig, String> {
        let cfg = ElectionConfig {
            lease_name: self.leader_election_id.clone(),
            lease_duration: self.leader_election_lease_duration,
            renew_deadline: self.leader_election_renew_deadline,
            retry_period: self.leader_election_retry_period,
            ..ElectionConfig::new(leader::resolve_namespace(&self.leader_election_namespace), leader::new_identity())
        };
        cfg.validate().map(|()| cfg)
    }

    fn pods_in_protobuf(&self) -> bool {
        self.kube_api_content_type == PROTOBUF_CONTENT_TYPE
    }

    fn rate_limit(&self) -> Option<RateLimit> {
        RateLimit::from_flags(self.rest_config_qps, self.rest_config_burst)
    }
}

/// jemalloc, for its smaller footprint and fewer CPU cycles per pod event (see `heap`).
#[global_allocator]
static ALLOCATOR: cloneset_operator::heap::Allocator = cloneset_operator::heap::Allocator {};

fn main() -> anyhow::Result<()> {
    let (cli, matches) = parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    runtime(cli.run.threads)?.block_on(run_command(cli, matches))
}

/// The async runtime, with `threads` workers (0: tokio's default, one per CPU the process may
/// use). Pod events arrive one by one on a large cluster, and with several workers much of an
/// event's CPU goes to waking a parked worker and parking it again (see docs/performance.md).
fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if threads > 0 {
        builder.worker_threads(threads);
    }
    builder.enable_all().build()
}

async fn run_command(cli: Cli, matches: ArgMatches) -> anyhow::Result<()> {
    telemetry::init(cli.logging_format, config::verbosity_filter(cli.verbosity));
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => {
            let ignored = given_compat_flags(&matches);
            if !ignored.is_empty() {
                tracing::info!(flags = %ignored.join(" "), "kruise-manager flags accepted for compatibility; they have no effect here");
            }
            run(cli.run).await
        }
        Command::Crd { with_v1beta1 } => {
            print!("{}", if with_v1beta1 { crd::generated_crd_with_v1beta1_file()? } else { crd::generated_crd_file()? });
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
        Command::Migrate(args) => migrate(args, cli.run).await,
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let shutdown = shutdown_signal()?;
    let config = args.controller_config();
    let election = args.election().map_err(anyhow::Error::msg)?;
    log_gates(&args.feature_gates);
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());

    // Probes and metrics first: a port that cannot be bound is a bad flag, reported at once.
    if let Some(listener) = listen("--metrics-addr", &args.metrics_addr).await? {
        tokio::spawn(server::serve_metrics(listener, metrics.clone()));
    }
    if let Some(listener) = listen("--health-probe-addr", &args.health_probe_addr).await? {
        tokio::spawn(server::serve_health(listener, health.clone()));
    }

    let kube_config = kube_config(&args.kubeconfig).await?;
    match args.rate_limit() {
        Some(l) => tracing::info!(qps = l.qps, burst = l.burst, "client-side rate limit (--rest-config-qps / --rest-config-burst)"),
        None => {
            tracing::info!("no client-side rate limit: the apiserver's Priority and Fairness decides; 429s are retried after Retry-After")
        }
    }
    let client = client::build(kube_config.clone(), args.rate_limit(), metrics.clone(), args.pods_in_protobuf())
        .context("building the Kubernetes client")?;
    let version = client.apiserver_version().await.context("cannot reach the Kubernetes apiserver")?;
    tracing::info!(server_version = %version.git_version, platform = %version.platform, "connected to Kubernetes");

    if let Some(listener) = listen("--webhook-addr", &args.webhook_addr).await? {
        let source = if args.webhook_cert_dir.is_empty() {
            webhook::CertSource::SelfSigned {
                hosts: args.webhook_hosts.clone(),
                validity: args.webhook_cert_validity,
                crd: <cloneset_operator::api::CloneSet as kube::CustomResourceExt>::crd_name().to_string(),
                identity: election.identity.clone(),
            }
        } else {
            webhook::CertSource::Files(args.webhook_cert_dir.clone().into())
        };
        tokio::spawn(webhook::run(listener, source, client.clone(), health.clone()));
    }
    let guard = args.kruise_lease().map(|(ns, name)| KruiseGuard::new(client.clone(), ns, name, &election.identity, election.retry_period));
    let elector = if args.enable_leader_election {
        // Its own token bucket and connections, so renewals never wait behind the controller's
        // writes; rebuilt after a renewal that went unanswered.
        let (limit, lease_metrics) = (args.rate_limit(), metrics.clone());
        let connect = move || client::build(kube_config.clone(), limit, lease_metrics.clone(), false);
        let lease_client = connect().context("building the leader-election client")?;
        Some(LeaderElector::new(lease_client, election).reconnecting(connect))
    } else {
        tracing::info!("leader election disabled (--enable-leader-election=false): this instance always leads");
        None
    };

    let runtime = controller::Runtime { metrics, health, elector, guard };
    tokio::spawn(cloneset_operator::heap::trim_periodically());
    controller::run(client, config, runtime, shutdown).await?;
    tracing::info!("shut down");
    Ok(())
}

/// `--kubeconfig` if given, else kube's inference ($KUBECONFIG, ~/.kube/config, in-cluster).
async fn kube_config(path: &str) -> anyhow::Result<kube::Config> {
    if path.is_empty() {
        return kube::Config::infer()
            .await
            .context("no usable Kubernetes configuration (set KUBECONFIG, a current context, or run in a cluster)");
    }
    let file = kube::config::Kubeconfig::read_from(path).with_context(|| format!("--kubeconfig={path}: cannot read it"))?;
    kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("--kubeconfig={path}: not a usable kubeconfig"))
}

/// Says once which of the given gates change nothing here.
fn log_gates(settings: &GateSettings) {
    if !settings.without_effect.is_empty() {
        let list: Vec<String> = settings.without_effect.iter().map(|(n, v)| format!("{n}={v}")).collect();
        tracing::info!(gates = %list.join(","), "Kruise feature gates without a CloneSet meaning here are ignored");
    }
    if !settings.not_implemented.is_empty() {
        tracing::warn!(gates = %settings.not_implemented.join(","), "feature gates turned on whose CloneSet behaviour is not implemented here: CloneSets behave as with them off");
    }
}

/// The operator's namespace in its chart by default (`installation.namespace`), where `migrate
/// --to-kruise` looks for its Lease unless `--leader-election-namespace` says otherwise.
const CHART_NAMESPACE: &str = "cloneset-system";

async fn migrate(args: MigrateArgs, run: RunArgs) -> anyhow::Result<()> {
    use cloneset_operator::migrate::{self, Release, apply, apply_to_kruise};
    if !args.to_kruise && !run.namespace.is_empty() {
        anyhow::bail!(
            "--namespace={}: only `migrate --to-kruise` works on one namespace; `migrate` takes the whole CRD over",
            run.namespace
        );
    }
    let kube_config = kube_config(&run.kubeconfig).await?;
    let client = kube::Client::try_from(kube_config).context("building the Kubernetes client")?;
    let dry_run = args.dry_run;
    let (command, target) = if args.to_kruise {
        ("migrate --to-kruise", args.release_name.unwrap_or_else(|| "kruise".into()))
    } else {
        ("migrate", args.release_name.unwrap_or_else(|| "cloneset-operator".into()))
    };
    let target = Release { name: target, namespace: args.release_namespace };
    let prefix = if dry_run { format!("{command} (dry run): ") } else { format!("{command}: ") };
    let mut say = |line: &str| println!("{prefix}{line}");
    let (steps, done, next) = if args.to_kruise {
        let opts = apply_to_kruise::ToKruiseOptions {
            operator_lease_namespace: if run.leader_election_namespace.is_empty() {
                CHART_NAMESPACE.to_string()
            } else {
                run.leader_election_namespace
            },
            operator_lease_name: run.leader_election_id,
            namespace: Some(run.namespace).filter(|n| !n.is_empty()),
            target,
            dry_run,
            lease_timeout: args.lease_timeout,
        };
        let steps = apply_to_kruise::run_to_kruise(&client, &opts, &mut say).await?;
        let next = format!("now start Kruise's manager (`helm upgrade {}` ...)", opts.target.name);
        (steps, "ready for Kruise's manager", next)
    } else {
        let conversion = match args.conversion_url {
            Some(url) => migrate::storage::ConversionTarget::Url(url),
            None => match args.conversion_service.split_once('/') {
                Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
                    migrate::storage::ConversionTarget::Service { namespace: namespace.into(), name: name.into() }
                }
                _ => anyhow::bail!("--conversion-service={}: expected <namespace>/<name>", args.conversion_service),
            },
        };
        let opts =
            apply::Options { target, kruise_namespace: args.kruise_namespace, dry_run, lease_timeout: args.lease_timeout, conversion };
        let steps = apply::run(&client, &opts, &mut say).await?;
        (steps, "already migrated", format!("now `helm install {}` this chart", opts.target.name))
    };
    match (migrate::changes(&steps), dry_run) {
        (0, _) => println!("{prefix}nothing to change: {done}"),
        (n, true) => println!("{prefix}{n} change(s) to make; run again without --dry-run"),
        (n, false) => println!("{prefix}done, {n} change(s); {next}"),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<(Cli, ArgMatches), clap::Error> {
        parse_args(std::iter::once("cloneset-operator").chain(args.iter().copied()))
    }

    #[test]
    fn one_thread_runs_the_operator_unless_told_otherwise() {
        let workers = |args: &[&str]| runtime(parse(args).unwrap().0.run.threads).unwrap().metrics().num_workers();
        assert_eq!(workers(&[]), 1);
        assert_eq!(workers(&["--threads=3"]), 3);
        // 0: tokio's default, one per CPU this process may use.
        assert_eq!(workers(&["--threads=0"]), std::thread::available_parallelism().unwrap().get());
    }

    #[test]
    fn pods_are_read_in_protobuf_unless_json_is_asked_for() {
        let protobuf = |args: &[&str]| parse(args).map(|(cli, _)| cli.run.pods_in_protobuf());
        assert!(protobuf(&[]).unwrap());
        assert!(protobuf(&["--kube-api-content-type=application/vnd.kubernetes.protobuf"]).unwrap());
        assert!(!protobuf(&["--kube-api-content-type=application/json"]).unwrap());
        assert!(protobuf(&["--kube-api-content-type=application/yaml"]).is_err());
    }

    #[test]
    fn migrate_to_kruise_takes_the_namespace_and_kruises_release() {
        let (cli, _) = parse(&["migrate", "--to-kruise", "--namespace=shop", "--dry-run"]).unwrap();
        let Some(Command::Migrate(args)) = cli.command else { panic!("not migrate") };
        assert!(args.to_kruise && args.dry_run);
        assert_eq!(cli.run.namespace, "shop");
        assert_eq!((args.release_name, cli.run.leader_election_namespace.as_str()), (None, ""));
        let (cli, _) = parse(&["migrate"]).unwrap();
        let Some(Command::Migrate(args)) = cli.command else { panic!("not migrate") };
        assert!(!args.to_kruise);
        assert_eq!(cli.run.namespace, "", "every namespace");
        assert!(parse(&["migrate", "--to-kruise", "--kruise-namespace=x"]).is_err(), "Kruise's namespace means nothing going back");
    }

    #[test]
    fn kruise_s_chart_and_e2e_arguments_parse() {
        let (cli, matches) = parse(config::KRUISE_CHART_ARGS).unwrap();
        assert!(cli.run.enable_leader_election);
        assert_eq!(cli.run.leader_election_namespace, "kruise-system");
        assert_eq!(cli.verbosity, 4);
        assert_eq!(cli.run.sync_period, Some(Duration::ZERO));
        assert_eq!(cli.run.controller_config().sync_period, None, "--sync-period=0: no periodic resync");
        assert_eq!(given_compat_flags(&matches), ["--logtostderr=true"]);
        let (cli, _) = parse(config::KRUISE_E2E_ARGS).unwrap();
        assert!(cli.run.controller_config().gates.cloneset_short_hash);
        assert_eq!(cli.verbosity, 5);
    }

    #[test]
    fn every_kruise_manager_flag_parses_with_go_syntax() {
        let mut args: Vec<String> = config::KRUISE_FLAGS_WITHOUT_EFFECT
            .iter()
            .map(|(name, kind)| match kind {
                FlagKind::Bool => format!("--{name}=false"),
                FlagKind::Int | FlagKind::Uint => format!("--{name}=2"),
                FlagKind::Duration => format!("--{name}=90s"),
                FlagKind::Text => format!("--{name}=x"),
            })
            .collect();
        args.extend(
            [
                "--cloneset-scaling-exclude-preparing-delete=true",
                "--leader-election-id=cs-leader",
                "--leader-election-lease-duration=30s",
                "--leader-election-renew-deadline=20s",
                "--leader-election-retry-period=4s",
                "--leader-election-resource-lock=leases",
                "--rate-limiter-base-delay=10ms",
                "--rate-limiter-max-delay=5m",
                "--rate-limiter-qps=20",
                "--rate-limiter-bucket-size=200",
                "--kubeconfig=/dev/null",
                "--controller-cache-sync-timeout=3m",
                "--expectation-timeout=2m",
                "--cloneset-workers=5",
                "--namespace=default",
                "--logging-format=json",
            ]
            .map(String::from),
        );
        let (cli, matches) = parse(&args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        assert_eq!(given_compat_flags(&matches).len(), config::KRUISE_FLAGS_WITHOUT_EFFECT.len());
        let run = &cli.run;
        assert!(run.exclude_preparing_delete);
        let election = run.election().unwrap();
        assert_eq!(
            (election.lease_name.as_str(), election.lease_duration, election.renew_deadline, election.retry_period),
            ("cs-leader", Duration::from_secs(30), Duration::from_secs(20), Duration::from_secs(4))
        );
        assert_eq!(
            run.controller_config().retry,
            RetryLimits { base_delay: Duration::from_millis(10), max_delay: Duration::from_secs(300), qps: 20.0, burst: 200 }
        );
        assert_eq!(run.kubeconfig, "/dev/null");
    }

    #[test]
    fn go_flag_rules_hold() {
        // Booleans: bare or with '='; a separate word is not a value (and is rejected here as a stray argument).
        assert!(!parse(&["--cloneset-scaling-exclude-preparing-delete=false"]).unwrap().0.run.exclude_preparing_delete);
        assert!(parse(&["--cloneset-scaling-exclude-preparing-delete"]).unwrap().0.run.exclude_preparing_delete);
        assert!(parse(&["--logtostderr", "false"]).is_err());
        // The last of a repeated flag wins, as with Go's flag package.
        assert_eq!(parse(&["--cloneset-workers=2", "--cloneset-workers=7"]).unwrap().0.run.cloneset_workers, 7);
        // Unknown flags and bad values still fail, naming the flag.
        assert!(parse(&["--no-such-flag=1"]).is_err());
        let err = parse(&["--daemonset-workers=many"]).unwrap_err().to_string();
        assert!(err.contains("daemonset-workers"), "{err}");
        assert!(parse(&["--leader-election-resource-lock=configmaps"]).is_err(), "client-go only has leases");
        assert!(parse(&["--leader-election-lease-duration=5s"]).unwrap().0.run.election().is_err(), "not longer than the renew deadline");
        // The Kruise guard's Lease: the default, another one, or none.
        assert_eq!(parse(&[]).unwrap().0.run.kruise_lease(), Some(("kruise-system", "kruise-manager")));
        assert_eq!(parse(&["--kruise-manager-lease="]).unwrap().0.run.kruise_lease(), None);
        assert!(parse(&["--kruise-manager-lease=no-slash"]).is_err());
    }

    #[test]
    fn the_client_side_limit_is_off_unless_a_rest_config_flag_is_given() {
        let limit = |args: &[&str]| parse(args).unwrap().0.run.rate_limit();
        assert_eq!(limit(&[]), None, "APF-first: no client-side bucket by default");
        assert_eq!(limit(&["--rest-config-qps=-1"]), None, "negative QPS turns it off, as in client-go");
        assert_eq!(limit(&["--rest-config-qps", "-1", "--rest-config-burst=80"]), None);
        // Kruise's meaning when given: the other flag keeps Kruise's default.
        assert_eq!(limit(&["--rest-config-qps=100"]), Some(RateLimit { qps: 100.0, burst: 50 }));
        assert_eq!(limit(&["--rest-config-burst=100"]), Some(RateLimit { qps: 30.0, burst: 100 }));
        assert_eq!(limit(config::KRUISE_CHART_ARGS), Some(RateLimit { qps: 30.0, burst: 50 }));
        // client-go's defaults for 0.
        assert_eq!(limit(&["--rest-config-qps=0", "--rest-config-burst=0"]), Some(RateLimit { qps: 5.0, burst: 10 }));
        let err = parse(&["--rest-config-burst=-1"]).unwrap_err().to_string();
        assert!(err.contains("rest-config-burst"), "{err}");
        assert!(parse(&["--rest-config-qps=2.5"]).is_err(), "an int flag, as in Kruise");
    }
}
