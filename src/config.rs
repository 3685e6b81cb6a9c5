//! Controller settings and Kruise-compatible flags. Values are parsed once in `main` and passed
//! down; nothing reads flags or the environment later.

use std::time::Duration;

use crate::core::gates::{FeatureGates, KRUISE_GATES, NOT_IMPLEMENTED_GATES, Stage};

/// Go's `strconv.ParseBool`, which Kruise's flags and gates use.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (true or false)")),
    }
}

/// `--feature-gates` as given: the CloneSet gates in effect, and what was said about the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GateSettings {
    pub gates: FeatureGates,
    /// Gates set on the command line (by name or by `AllAlpha`/`AllBeta`) that change nothing
    /// here, with their values, in Kruise's order.
    pub without_effect: Vec<(&'static str, bool)>,
    /// [`NOT_IMPLEMENTED_GATES`] that are on.
    pub not_implemented: Vec<&'static str>,
}

impl GateSettings {
    /// Parses Kruise's `--feature-gates` syntax, `A=true,B=false`, as component-base does:
    /// unknown names are an error; `AllAlpha=<v>` / `AllBeta=<v>` set every alpha / beta gate
    /// not named explicitly (explicit values win whatever their position); a name given twice
    /// takes its last value.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut explicit: Vec<(&'static str, bool)> = Vec::new();
        let (mut all_alpha, mut all_beta) = (None, None);
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').ok_or_else(|| format!("--feature-gates: {part:?} is not NAME=true|false"))?;
            let name = name.trim();
            let value = parse_go_bool(value.trim()).map_err(|e| format!("--feature-gates: {name}: {e}"))?;
            match name {
                "AllAlpha" => all_alpha = Some(value),
                "AllBeta" => all_beta = Some(value),
                _ => {
                    let Some(known) = KRUISE_GATES.iter().find(|g| g.name == name) else {
                        return Err(format!("--feature-gates: unrecognized feature gate {name:?} (Kruise v1.9.0's gates are accepted)"));
                    };
                    explicit.retain(|(n, _)| *n != known.name);
                    explicit.push((known.name, value));
                }
            }
        }
        let mut out = Self::default();
        for g in KRUISE_GATES {
            let value = match explicit.iter().find(|(n, _)| *n == g.name) {
                Some((_, v)) => Some(*v),
                None => match g.stage {
                    Stage::Alpha => all_alpha,
                    Stage::Beta => all_beta,
                },
            };
            let Some(value) = value else { continue };
            if !g.set(&mut out.gates, value) {
                out.without_effect.push((g.name, value));
            }
            if value && NOT_IMPLEMENTED_GATES.contains(&g.name) {
                out.not_implemented.push(g.name);
            }
        }
        Ok(out)
    }
}

/// Parses Go-style durations used by Kruise's flags: `300ms`, `5m`, `1h30m`, `90s`.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("invalid duration {s:?}: unknown unit {unit:?}")),
        };
        total += value * scale;
        rest = tail;
    }
    Ok(Duration::from_secs_f64(total))
}

/// How a flag's value is written, as Go's `flag`/`pflag` types read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagKind {
    /// `--name`, `--name=true|false` (Go's `ParseBool` spellings); never `--name false`.
    Bool,
    Int,
    Uint,
    /// A Go duration (`90s`, `1m30s`).
    Duration,
    Text,
}

impl FlagKind {
    /// Checks `value` the way Go would parse it, so a typo fails here as it would in Kruise.
    pub fn check(self, value: &str) -> Result<(), String> {
        match self {
            Self::Bool => parse_go_bool(value).map(|_| ()),
            Self::Int => value.parse::<i64>().map(|_| ()).map_err(|_| format!("{value:?} is not an integer")),
            Self::Uint => value.parse::<u64>().map(|_| ()).map_err(|_| format!("{value:?} is not a non-negative integer")),
            Self::Duration => parse_go_duration(value).map(|_| ()),
            Self::Text => Ok(()),
        }
    }
}

/// Every other flag `kruise-manager` v1.9.0 registers (its main.go, its controllers' `init`s,
/// klog's and component-base's logging flags): none has a meaning here (no other controllers,
/// no webhook, no pprof, logs always go to stderr), so each is accepted with Kruise's syntax and
/// named once in the start-up log.
pub const KRUISE_FLAGS_WITHOUT_EFFECT: &[(&str, FlagKind)] = &[
    ("allow-privileged", FlagKind::Bool),
    ("enable-pprof", FlagKind::Bool),
    ("pprof-addr", FlagKind::Text),
    ("webhook-initialize-timeout", FlagKind::Duration),
    ("default-ttlseconds-for-always-nodeimage", FlagKind::Int),
    ("ws-enabled-versioned-status", FlagKind::Text),
    ("protection-log-path", FlagKind::Text),
    ("disable-no-deepcopy", FlagKind::Bool),
    ("assign-bcj-pods-by-scheduler", FlagKind::Bool),
    ("assign-pods-by-scheduler", FlagKind::Bool),
    ("nodeimage-creation-delay", FlagKind::Duration),
    ("advancedcronjob-workers", FlagKind::Int),
    ("broadcastjob-workers", FlagKind::Int),
    ("crr-workers", FlagKind::Int),
    ("daemonset-workers", FlagKind::Int),
    ("imagepulljob-workers", FlagKind::Int),
    ("nodeimage-workers", FlagKind::Int),
    ("nodepodprobe-workers", FlagKind::Int),
    ("persistentpodstate-workers", FlagKind::Int),
    ("podprobemarker-workers", FlagKind::Int),
    ("podunavailablebudget-workers", FlagKind::Int),
    ("resourcedistribution-workers", FlagKind::Int),
    ("sidecarset-workers", FlagKind::Int),
    ("sidecarterminator-workers", FlagKind::Int),
    ("statefulset-workers", FlagKind::Int),
    ("uniteddeployment-workers", FlagKind::Int),
    ("workloadspread-workers", FlagKind::Int),
    // component-base logging (Kruise calls logsapi.AddFlags)
    ("log-flush-frequency", FlagKind::Duration),
    ("vmodule", FlagKind::Text),
    ("log-text-split-stream", FlagKind::Bool),
    ("log-text-info-buffer-size", FlagKind::Text),
    ("log-json-split-stream", FlagKind::Bool),
    ("log-json-info-buffer-size", FlagKind::Text),
    // klog (klog.InitFlags)
    ("logtostderr", FlagKind::Bool),
    ("alsologtostderr", FlagKind::Bool),
    ("log_dir", FlagKind::Text),
    ("log_file", FlagKind::Text),
    ("log_file_max_size", FlagKind::Uint),
    ("add_dir_header", FlagKind::Bool),
    ("skip_headers", FlagKind::Bool),
    ("skip_log_headers", FlagKind::Bool),
    ("one_output", FlagKind::Bool),
    ("stderrthreshold", FlagKind::Text),
    ("log_backtrace_at", FlagKind::Text),
];

/// Kruise's own manager arguments, which must start this operator unchanged (unit and e2e
/// tests feed them): openkruise/charts versions/kruise/1.9.0-alpha.3 templates/manager.yaml with
/// its values.yaml defaults (the newest 1.9 chart; 1.9.0-alpha.4 adds the rest-config flags).
pub const KRUISE_CHART_ARGS: &[&str] = &[
    "--enable-leader-election",
    "--metrics-addr=:8080",
    "--health-probe-addr=:8000",
    "--logtostderr=true",
    "--leader-election-namespace=kruise-system",
    "--v=4",
    "--feature-gates=ImagePullJobGate=true",
    "--sync-period=0",
    "--rest-config-qps=30",
    "--rest-config-burst=50",
];

/// openkruise/kruise v1.9.0 config/manager/manager.yaml, which its scripts/deploy_kind.sh
/// installs for Kruise's e2e runs.
pub const KRUISE_E2E_ARGS: &[&str] = &[
    "--enable-leader-election",
    "--logtostderr=true",
    "--v=5",
    "--feature-gates=AllAlpha=true,AllBeta=true,EnableExternalCerts=false,TemplateNoDefaults=false",
];

/// The retry backoff of the work queue: controller-runtime's default rate limiter with Kruise's
/// `--rate-limiter-*` flags (the larger of a per-key exponential backoff and an overall bucket).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryLimits {
    /// `--rate-limiter-base-delay`: a key's first retry waits this long, doubling per failure.
    pub base_delay: Duration,
    /// `--rate-limiter-max-delay`: the per-key backoff's cap.
    pub max_delay: Duration,
    /// `--rate-limiter-qps`: retries per second over all keys.
    pub qps: f64,
    /// `--rate-limiter-bucket-size`: retries allowed at once above that rate.
    pub burst: u32,
}

impl Default for RetryLimits {
    /// Kruise's defaults (`pkg/util/ratelimiter`).
    fn default() -> Self {
        Self { base_delay: Duration::from_millis(5), max_delay: Duration::from_secs(1000), qps: 10.0, burst: 100 }
    }
}

/// Where `--metrics-addr` / `--health-probe-addr` listen: Go's `host:port` with an optional
/// empty host (`:8080` listens on every interface); `0` turns the server off, as in
/// controller-runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    Disabled,
    /// Every interface.
    Any {
        port: u16,
    },
    /// An IP address (IPv6 without brackets) or a host name.
    Host {
        host: String,
        port: u16,
    },
}

impl ListenAddr {
    /// Parses `host:port`, `:port`, `[ipv6]:port`, or `0`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "0" {
            return Ok(Self::Disabled);
        }
        let bad = |why: &str| format!("{s:?} is not host:port ({why}); e.g. :8080 or 127.0.0.1:8080, or 0 to disable");
        let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        let port: u16 = port.parse().map_err(|_| bad("the port must be a number from 0 to 65535"))?;
        if host.is_empty() {
            return Ok(Self::Any { port });
        }
        if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            let ip: std::net::Ipv6Addr = v6.parse().map_err(|_| bad("invalid IPv6 address"))?;
            return Ok(Self::Host { host: ip.to_string(), port });
        }
        if host.contains(':') {
            return Err(bad("an IPv6 address needs brackets"));
        }
        let is_label = |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if host.parse::<std::net::Ipv4Addr>().is_err() && !host.split('.').all(is_label) {
            return Err(bad("invalid host"));
        }
        Ok(Self::Host { host: host.to_string(), port })
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Disabled => f.write_str("0"),
            Self::Any { port } => write!(f, ":{port}"),
            Self::Host { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Self::Host { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// The tracing filter for `-v N` (klog's verbosity; 5 and above are all trace), used when `RUST_LOG` is not set:
/// 0–1 info; 2 adds this operator's debug lines; 3 debug everywhere (kube's requests too);
/// 4 adds this operator's trace lines; 5 trace everywhere.
pub fn verbosity_filter(v: i32) -> &'static str {
    match v {
        ..=1 => "info",
        2 => "info,cloneset_operator=debug",
        3 => "debug",
        4 => "debug,cloneset_operator=trace",
        _ => "trace",
    }
}

/// Everything the controller needs to know about how it was started.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    pub workers: usize,
    pub expectation_timeout: Duration,
    pub gates: FeatureGates,
    /// Watch one namespace only (empty: all).
    pub namespace: Option<String>,
    /// `--cloneset-scaling-exclude-preparing-delete`.
    pub exclude_preparing_delete: bool,
    /// Time allowed for the caches' first list.
    pub cache_sync_timeout: Duration,
    /// `--sync-period`: queue every CloneSet this often (none: only on changes).
    pub sync_period: Option<Duration>,
    /// `--rate-limiter-*`: how failed CloneSets are retried.
    pub retry: RetryLimits,
    /// `--streaming-lists`: how the caches list.
    pub initial_lists: InitialLists,
    /// `--fault-drop-pod-events` (chaos tests only): the fraction of pod watch events dropped.
    pub drop_pod_events: f64,
}

/// A fraction from 0 to 1.
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s}: expected a fraction from 0 to 1")),
    }
}

/// How the caches fill at start-up and after a watch expires (`--streaming-lists`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitialLists {
    /// Streaming lists where the apiserver serves them (checked once at start-up), else paged.
    #[default]
    Auto,
    /// A watch with `sendInitialEvents` (KEP-3157): the apiserver sends the objects one by one
    /// from its watch cache instead of building one large list response.
    Streaming,
    /// Lists of 100 objects a page.
    Paged,
}

impl InitialLists {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "true" => Ok(Self::Streaming),
            "false" => Ok(Self::Paged),
            other => Err(format!("{other}: expected auto, true or false")),
        }
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
            gates: FeatureGates::default(),
            namespace: None,
            exclude_preparing_delete: false,
            cache_sync_timeout: Duration::from_secs(120),
            sync_period: None,
            retry: RetryLimits::default(),
            initial_lists: InitialLists::Auto,
            drop_pod_events: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_use_kruise_syntax_and_defaults() {
        assert_eq!(GateSettings::parse("").unwrap(), GateSettings::default());
        let g = GateSettings::parse("CloneSetShortHash=true, CloneSetPartitionRollback=true,AllAlpha=false").unwrap().gates;
        assert!(g.cloneset_short_hash && g.cloneset_partition_rollback && !g.preparing_update_as_update);
        assert!(!g.template_no_defaults, "Kruise defaults templates unless told not to");
        assert!(GateSettings::parse("TemplateNoDefaults=true").unwrap().gates.template_no_defaults);
        let err = GateSettings::parse("NoSuchGate=true").unwrap_err();
        assert!(err.contains("--feature-gates") && err.contains("NoSuchGate"), "{err}");
        assert!(GateSettings::parse("CloneSetShortHash").unwrap_err().contains("NAME=true|false"));
        assert!(GateSettings::parse("CloneSetShortHash=yes").unwrap_err().contains("true or false"));
        // Go's ParseBool spellings.
        assert!(GateSettings::parse("CloneSetShortHash=1").unwrap().gates.cloneset_short_hash);
        assert!(GateSettings::parse("CloneSetShortHash=True").unwrap().gates.cloneset_short_hash);
        assert!(
            !GateSettings::parse("CloneSetShortHash=true,CloneSetShortHash=F").unwrap().gates.cloneset_short_hash,
            "the last value wins"
        );
    }

    #[test]
    fn every_kruise_v1_9_0_gate_is_accepted() {
        assert_eq!(KRUISE_GATES.len(), 34);
        for g in KRUISE_GATES {
            assert!(GateSettings::parse(&format!("{}=true", g.name)).is_ok(), "{}", g.name);
        }
        // Kruise's chart default, and a gate spelled as Kruise's Go constant rather than its flag name.
        let chart = GateSettings::parse("ImagePullJobGate=true").unwrap();
        assert_eq!((chart.gates, chart.without_effect), (FeatureGates::default(), vec![("ImagePullJobGate", true)]));
        assert!(GateSettings::parse("EnhancedLivenessProbeGate=true").is_err(), "Kruise's flag name is EnhancedLivenessProbe");
    }

    #[test]
    fn all_alpha_and_all_beta_set_the_gates_of_their_stage_unless_named() {
        // Kruise's e2e install (config/manager/manager.yaml at v1.9.0).
        let e2e = GateSettings::parse("AllAlpha=true,AllBeta=true,EnableExternalCerts=false,TemplateNoDefaults=false").unwrap();
        let on = FeatureGates {
            cloneset_short_hash: true,
            cloneset_partition_rollback: true,
            preparing_update_as_update: true,
            recreate_pod_when_change_vct: true,
            in_place_workload_vertical_scaling: true,
            force_delete_timeout_expectation: true,
            template_no_defaults: false,
            in_place_update_env_from_metadata: true,
        };
        assert_eq!(e2e.gates, on);
        assert!(e2e.without_effect.contains(&("EnableExternalCerts", false)) && e2e.without_effect.contains(&("PodWebhook", true)));
        assert!(e2e.not_implemented.is_empty(), "{:?}", e2e.not_implemented);
        // Explicit values win wherever they stand.
        assert!(!GateSettings::parse("CloneSetShortHash=false,AllAlpha=true").unwrap().gates.cloneset_short_hash);
        assert!(GateSettings::parse("AllAlpha=false,CloneSetShortHash=true").unwrap().gates.cloneset_short_hash);
        // AllBeta alone turns no CloneSet gate on: InPlaceUpdateEnvFromMetadata is on already.
        assert_eq!(GateSettings::parse("AllBeta=true").unwrap().gates, FeatureGates::default());
        assert!(!GateSettings::parse("InPlaceUpdateEnvFromMetadata=false").unwrap().gates.in_place_update_env_from_metadata);
        assert_eq!(GateSettings::parse("AllAlpha=true").unwrap().gates, FeatureGates { template_no_defaults: true, ..on });
    }

    #[test]
    fn kruise_only_flag_values_are_checked_as_go_parses_them() {
        assert_eq!(FlagKind::Bool.check("true"), Ok(()));
        assert!(FlagKind::Bool.check("yes").is_err());
        assert!(FlagKind::Int.check("-3").is_ok() && FlagKind::Int.check("three").is_err());
        assert!(FlagKind::Uint.check("1800").is_ok() && FlagKind::Uint.check("-1").is_err());
        assert!(FlagKind::Duration.check("1m30s").is_ok() && FlagKind::Duration.check("90").is_err());
        assert!(FlagKind::Text.check("anything").is_ok());
    }

    #[test]
    fn listen_addresses_are_go_host_port() {
        assert_eq!(ListenAddr::parse(":8080").unwrap(), ListenAddr::Any { port: 8080 });
        assert_eq!(ListenAddr::parse("127.0.0.1:0").unwrap(), ListenAddr::Host { host: "127.0.0.1".into(), port: 0 });
        assert_eq!(ListenAddr::parse("[::1]:8000").unwrap(), ListenAddr::Host { host: "::1".into(), port: 8000 });
        assert_eq!(ListenAddr::parse("localhost:9").unwrap(), ListenAddr::Host { host: "localhost".into(), port: 9 });
        assert_eq!(ListenAddr::parse("0").unwrap(), ListenAddr::Disabled);
        for bad in ["8080", ":http", ":70000", "::1:80", "a b:80", "[nope]:80", ""] {
            assert!(ListenAddr::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(ListenAddr::parse("[::1]:8000").unwrap().to_string(), "[::1]:8000");
        assert_eq!(ListenAddr::parse(":8080").unwrap().to_string(), ":8080");
    }

    #[test]
    fn verbosity_maps_onto_tracing_levels() {
        assert_eq!(verbosity_filter(0), "info");
        assert_eq!(verbosity_filter(2), "info,cloneset_operator=debug");
        assert_eq!(verbosity_filter(5), "trace");
        assert_eq!(verbosity_filter(10), "trace", "klog accepts any level");
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_go_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_go_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_go_duration("5 minutes").is_err());
        assert!(parse_go_duration("").is_err());
    }
}
