//! The Prometheus process collector's metrics (client_golang's `process_*`), read from /proc on
//! each scrape: CPU seconds, resident and virtual memory, open and maximum file descriptors, the
//! address-space limit and the start time. Parsing is pure; [`ProcessCollector`] only reads files.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second in /proc (Linux's fixed `USER_HZ`; Go's procfs assumes it too).
const USER_HZ: f64 = 100.0;

/// What `/proc/self/stat` says that the collector reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stat {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Start time after boot, in seconds.
    pub start_after_boot: f64,
    pub virtual_bytes: f64,
}

/// Parses `/proc/<pid>/stat` (the command name may contain spaces and parentheses: fields are
/// counted from the last `)`).
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state) of proc(5).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
    Some(Stat { cpu_seconds: (field(14)? + field(15)?) / USER_HZ, start_after_boot: field(22)? / USER_HZ, virtual_bytes: field(23)? })
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes.
pub(crate) fn parse_resident_bytes(status: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0)
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the epoch.
pub(crate) fn parse_boot_time(stat: &str) -> Option<f64> {
    stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()
}

/// The soft limit of a `/proc/<pid>/limits` row (`unlimited` as client_golang reports it, 2^64−1).
pub(crate) fn parse_soft_limit(limits: &str, row: &str) -> Option<f64> {
    let rest = limits.lines().find_map(|l| l.strip_prefix(row))?;
    match rest.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX as f64),
        n => n.parse().ok(),
    }
}

/// Encodes the `process_*` metrics of this process on each scrape; a file that cannot be read
/// leaves its metrics out of that scrape.
#[derive(Debug)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let mut gauge = |name: &str, help: &str, value: Option<f64>| -> Result<(), std::fmt::Error> {
            let Some(value) = value else { return Ok(()) };
            let metric = ConstGauge::new(value);
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
        };
        let stat = read("/proc/self/stat").as_deref().and_then(parse_stat);
        let limits = read("/proc/self/limits");
        let boot = read("/proc/stat").as_deref().and_then(parse_boot_time);
        let open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as f64);
        gauge("process_open_fds", "Number of open file descriptors.", open_fds)?;
        gauge(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            limits.as_deref().and_then(|l| parse_soft_limit(l, "Max open files")),
        )?;
        gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", stat.map(|s| s.virtual_bytes))?;
        gauge(
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            limits.as_deref().and_then(|l| parse_soft_limit(l, "Max address space")),
        )?;
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            read("/proc/self/status").as_deref().and_then(parse_resident_bytes),
        )?;
        gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            boot.zip(stat).map(|(b, s)| b + s.start_after_boot),
        )?;
        if let Some(stat) = stat {
            let cpu = ConstCounter::new(stat.cpu_seconds);
            // The encoder appends `_total`.
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                cpu.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis; utime 250, stime 50, starttime 12345,
        // vsize 104857600 (proc(5) fields 14, 15, 22, 23).
        let line = "4242 (my (odd) op) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 12345 104857600 2500 18446744073709551615";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat, Stat { cpu_seconds: 3.0, start_after_boot: 123.45, virtual_bytes: 104857600.0 });
        assert_eq!(parse_stat("4242 (truncated) S 1"), None);
    }

    #[test]
    fn status_limits_and_boot_time_parse() {
        assert_eq!(parse_resident_bytes("Name:\top\nVmSize:\t  102400 kB\nVmRSS:\t    9876 kB\n"), Some(9876.0 * 1024.0));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 1048576              files\n\
                      Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(parse_soft_limit(limits, "Max open files"), Some(1024.0));
        assert_eq!(parse_soft_limit(limits, "Max address space"), Some(u64::MAX as f64));
        assert_eq!(parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"), Some(1_700_000_000.0));
    }

    /// The collector reports this very process: its start is in the past, it has open files
    /// and resident memory, and it has used some CPU.
    #[test]
    fn the_collector_reports_this_process() {
        // Use a little CPU first: /proc counts it in 10 ms ticks.
        let busy = std::time::Instant::now();
        let mut x = 0u64;
        while busy.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |name: &str| -> f64 {
            let line = text.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("no {name} in\n{text}"));
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(started > now - 3600.0 && started <= now + 1.0, "start {started}, now {now}");
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_cpu_seconds_total") > 0.0);
        assert!(text.contains("# TYPE process_cpu_seconds counter"), "{text}");
    }
}
