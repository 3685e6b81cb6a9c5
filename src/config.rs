//! Controller settings and Kruise-compatible flags. Values are parsed once in `main` and passed
//! down; nothing reads flags or the environment later.

use std::time::Duration;

/// Kruise's feature gates that change CloneSet behaviour, with Kruise's production defaults (all off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// Pods' `controller-revision-hash` carries only the hash.
    pub cloneset_short_hash: bool,
    /// Raising partition rolls pods back to the current revision.
    pub cloneset_partition_rollback: bool,
    /// PreparingUpdate pods count as updated when scaling.
    pub preparing_update_as_update: bool,
    /// A volumeClaimTemplates change forces recreate (not for InPlaceOnly).
    pub recreate_pod_when_change_vct: bool,
    /// Resources can be updated in place.
    pub in_place_workload_vertical_scaling: bool,
    /// Timed-out scale expectations are dropped instead of blocking the CloneSet.
    pub force_delete_timeout_expectation: bool,
    /// The pod template is hashed (and pods are built from it) as written, without the
    /// Kubernetes defaults Kruise's webhook fills in.
    pub template_no_defaults: bool,
}

/// Where a gate's value lives in [`FeatureGates`].
type GateField = fn(&mut FeatureGates) -> &mut bool;

/// Gate names exactly as Kruise spells them, with where each lives.
const GATES: &[(&str, GateField)] = &[
    ("CloneSetShortHash", |g| &mut g.cloneset_short_hash),
    ("CloneSetPartitionRollback", |g| &mut g.cloneset_partition_rollback),
    ("PreparingUpdateAsUpdate", |g| &mut g.preparing_update_as_update),
    ("RecreatePodWhenChangeVCTInCloneSetGate", |g| &mut g.recreate_pod_when_change_vct),
    ("InPlaceWorkloadVerticalScaling", |g| &mut g.in_place_workload_vertical_scaling),
    ("ForceDeleteTimeoutExpectationGate", |g| &mut g.force_delete_timeout_expectation),
    ("TemplateNoDefaults", |g| &mut g.template_no_defaults),
];

/// Kruise gates this operator accepts but which do not change anything here (no kruise-daemon,
/// no pod webhook, no other workloads): accepted so Kruise's flag values can be reused unchanged.
const ACCEPTED_WITHOUT_EFFECT: &[&str] = &[
    "AllAlpha",
    "AllBeta",
    "PreDownloadImageForInPlaceUpdate",
    "CloneSetEventHandlerOptimization",
    "PodUnavailableBudgetUpdateGate",
    "KruisePodReadinessGate",
    "ResourcesDeletionProtection",
    "InPlaceUpdateEnvFromMetadata",
    "KruiseDaemon",
    "EnableExternalCerts",
];

impl FeatureGates {
    /// Parses Kruise's `--feature-gates` syntax: `A=true,B=false`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut gates = Self::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').ok_or_else(|| format!("--feature-gates: {part:?} is not NAME=true|false"))?;
            let value: bool =
                value.trim().parse().map_err(|_| format!("--feature-gates: {name}={value:?}: the value must be true or false"))?;
            let name = name.trim();
            if let Some((_, field)) = GATES.iter().find(|(n, _)| *n == name) {
                *field(&mut gates) = value;
            } else if !ACCEPTED_WITHOUT_EFFECT.contains(&name) {
                let known: Vec<&str> = GATES.iter().map(|(n, _)| *n).collect();
                return Err(format!("--feature-gates: unknown gate {name:?}; CloneSet gates are {}", known.join(", ")));
            }
        }
        Ok(gates)
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

/// The tracing filter for `-v N` (klog's verbosity, 0–5), used when `RUST_LOG` is not set:
/// 0–1 info; 2 adds this operator's debug lines; 3 debug everywhere (kube's requests too);
/// 4 adds this operator's trace lines; 5 trace everywhere.
pub fn verbosity_filter(v: u8) -> &'static str {
    match v {
        0 | 1 => "info",
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_use_kruise_syntax_and_defaults() {
        assert_eq!(FeatureGates::parse("").unwrap(), FeatureGates::default());
        let g = FeatureGates::parse("CloneSetShortHash=true, CloneSetPartitionRollback=true,AllAlpha=false").unwrap();
        assert!(g.cloneset_short_hash && g.cloneset_partition_rollback && !g.preparing_update_as_update);
        assert!(!g.template_no_defaults, "Kruise defaults templates unless told not to");
        assert!(FeatureGates::parse("TemplateNoDefaults=true").unwrap().template_no_defaults);
        let err = FeatureGates::parse("NoSuchGate=true").unwrap_err();
        assert!(err.contains("--feature-gates") && err.contains("NoSuchGate"), "{err}");
        assert!(FeatureGates::parse("CloneSetShortHash").unwrap_err().contains("NAME=true|false"));
        assert!(FeatureGates::parse("CloneSetShortHash=yes").unwrap_err().contains("true or false"));
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
