//! The network guard of `make test` (`e2e/scripts/net-guard.sh`), proven without ever aiming at a
//! real outside address: two network namespaces of this test's own joined by a veth pair, one
//! standing for this machine ("inside") and one for the world ("outside"). The guard is installed
//! inside exactly as `make test` installs it on the host; deliberate connections to the outside
//! must then be dropped, counted and named, while loopback keeps working. Without the guard the
//! same connections get through, so the test fails if the guard stops dropping.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const INSIDE_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const OUTSIDE_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const INSIDE_V6: Ipv6Addr = Ipv6Addr::new(0xfd42, 0x6e67, 0, 0, 0, 0, 0, 1);
const OUTSIDE_V6: Ipv6Addr = Ipv6Addr::new(0xfd42, 0x6e67, 0, 0, 0, 0, 0, 2);

fn guard_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/net-guard.sh")
}

/// Runs a command; returns its exit code and what it printed (stdout, then stderr).
fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn ok(args: &[&str]) -> String {
    let (code, text) = run(args);
    assert_eq!(code, 0, "{} failed:\n{text}", args.join(" "));
    text
}

/// The guard's own command run inside namespace `ns`.
fn guard(ns: &str, verb: &str) -> (i32, String) {
    run(&["ip", "netns", "exec", ns, "bash", guard_script().to_str().unwrap(), verb])
}

/// Runs `f` on a thread that has entered network namespace `ns`: sockets it creates stay there.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("namespace thread panicked")
}

/// A counter of `/proc/net/snmp` (`table` `Ip`, `Udp`, ...) or `/proc/net/snmp6` (`table` "")
/// as namespace `ns` sees it.
fn snmp(ns: &str, file: &'static str, table: &'static str, field: &'static str) -> u64 {
    in_netns(ns, move || {
        let text = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")).unwrap();
        if table.is_empty() {
            return text.lines().find_map(|l| l.strip_prefix(field)).map(|v| v.trim().parse().unwrap()).unwrap();
        }
        let mut rows = text.lines().filter(|l| l.starts_with(&format!("{table}: ")));
        let (names, values) = (rows.next().unwrap(), rows.next().unwrap());
        let i = names.split_whitespace().position(|n| n == field).unwrap();
        values.split_whitespace().nth(i).unwrap().parse().unwrap()
    })
}

/// Two namespaces and their veth pair, removed on drop whatever the outcome.
struct Namespaces {
    inside: String,
    outside: String,
    /// Whether `ip netns` had to make /run/netns a mount point (then drop unmounts it again).
    made_run_netns_mount: bool,
}

fn run_netns_is_a_mount() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default().lines().any(|l| l.split(' ').nth(4) == Some("/run/netns"))
}

impl Namespaces {
    fn create() -> Self {
        let id = std::process::id();
        let ns = Self {
            inside: format!("cso-guard-in-{id}"),
            outside: format!("cso-guard-out-{id}"),
            made_run_netns_mount: !run_netns_is_a_mount(),
        };
        let (veth_in, veth_out) = (format!("cgi{id}"), format!("cgo{id}"));
        ok(&["ip", "netns", "add", &ns.inside]);
        ok(&["ip", "netns", "add", &ns.outside]);
        ok(&["ip", "link", "add", &veth_in, "netns", &ns.inside, "type", "veth", "peer", "name", &veth_out, "netns", &ns.outside]);
        for (name, veth, v4, v6) in [(&ns.inside, &veth_in, INSIDE_V4, INSIDE_V6), (&ns.outside, &veth_out, OUTSIDE_V4, OUTSIDE_V6)] {
            ok(&["ip", "-n", name, "addr", "add", &format!("{v4}/24"), "dev", veth]);
            ok(&["ip", "-n", name, "addr", "add", &format!("{v6}/64"), "dev", veth, "nodad"]);
            ok(&["ip", "-n", name, "link", "set", veth, "up"]);
            ok(&["ip", "-n", name, "link", "set", "lo", "up"]);
        }
        // Inside, the outside is the default route, as the world is for this machine.
        ok(&["ip", "-n", &ns.inside, "route", "add", "default", "via", &OUTSIDE_V4.to_string()]);
        ok(&["ip", "-n", &ns.inside, "-6", "route", "add", "default", "via", &OUTSIDE_V6.to_string()]);
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and with it the other end.
        for ns in [&self.inside, &self.outside] {
            let _ = run(&["ip", "netns", "del", ns]);
        }
        let others_left = std::fs::read_dir("/run/netns").map(|mut d| d.next().is_some()).unwrap_or(false);
        if self.made_run_netns_mount && !others_left {
            let _ = run(&["umount", "/run/netns"]);
        }
    }
}

/// What one round of deliberate traffic from inside to outside achieved.
#[derive(Debug, PartialEq)]
struct Delivery {
    tcp_v4: bool,
    tcp_v6: bool,
    udp_v4: bool,
    udp_v6: bool,
}

/// Connects over TCP and sends a UDP datagram to the outside, in both families, and reports
/// which of them the outside received.
fn send_to_outside(ns: &Namespaces) -> Delivery {
    let listeners = in_netns(&ns.outside, || {
        let tcp = [SocketAddr::from((OUTSIDE_V4, 0)), SocketAddr::from((OUTSIDE_V6, 0))].map(|a| TcpListener::bind(a).unwrap());
        let udp = [SocketAddr::from((OUTSIDE_V4, 0)), SocketAddr::from((OUTSIDE_V6, 0))].map(|a| UdpSocket::bind(a).unwrap());
        (tcp, udp)
    });
    let (tcp, udp) = listeners;
    let targets = (tcp.each_ref().map(|l| l.local_addr().unwrap()), udp.each_ref().map(|s| s.local_addr().unwrap()));
    in_netns(&ns.inside, move || {
        for addr in targets.0 {
            let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
        }
        for addr in targets.1 {
            let s = UdpSocket::bind(SocketAddr::new(
                if addr.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() },
                0,
            ))
            .unwrap();
            let _ = s.send_to(b"guard probe", addr);
        }
    });
    let accepted = |l: &TcpListener| {
        l.set_nonblocking(true).unwrap();
        accept_within(l, Duration::from_millis(500))
    };
    let received = |s: &UdpSocket| {
        s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        s.recv(&mut [0u8; 64]).is_ok()
    };
    Delivery { tcp_v4: accepted(&tcp[0]), tcp_v6: accepted(&tcp[1]), udp_v4: received(&udp[0]), udp_v6: received(&udp[1]) }
}

fn accept_within(l: &TcpListener, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match l.accept() {
            Ok(_) => return true,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return false,
        }
    }
}

/// Sends rounds until all of them get through: a new veth pair takes a moment to carry IPv6.
fn outside_reachable(ns: &Namespaces) -> Result<(), Delivery> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match send_to_outside(ns) {
            ALL => return Ok(()),
            partial if Instant::now() > deadline => return Err(partial),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

const ALL: Delivery = Delivery { tcp_v4: true, tcp_v6: true, udp_v4: true, udp_v6: true };
const NONE: Delivery = Delivery { tcp_v4: false, tcp_v6: false, udp_v4: false, udp_v6: false };

#[test]
#[ignore = "needs root (network namespaces, iptables): `make test` runs it when it can install the network guard"]
fn the_guard_drops_counts_and_names_every_packet_leaving_the_machine() {
    let ns = Namespaces::create();
    assert_eq!(outside_reachable(&ns), Ok(()), "without the guard the outside must be reachable, or this test proves nothing");

    let (code, text) = guard(&ns.inside, "install");
    assert_eq!(code, 0, "install failed:\n{text}");
    assert_eq!(guard(&ns.inside, "report"), (0, "net-guard: 0 packets to outside the machine (IPv4 0, IPv6 0)\n".into()));

    let ipv4_in_before = snmp(&ns.outside, "snmp", "Ip", "InReceives");
    let udp6_in_before = snmp(&ns.outside, "snmp6", "", "Udp6InDatagrams");
    assert_eq!(send_to_outside(&ns), NONE, "the guard let a connection out");
    // Not one packet arrived: the outside's own counters did not move. (IPv6 counts neighbour
    // discovery, which the guard lets through, so only its UDP counter is compared.)
    assert_eq!(snmp(&ns.outside, "snmp", "Ip", "InReceives"), ipv4_in_before, "an IPv4 packet reached the outside");
    assert_eq!(snmp(&ns.outside, "snmp6", "", "Udp6InDatagrams"), udp6_in_before, "a UDP datagram reached the outside over IPv6");

    // Loopback stays open while the guard is on.
    let local = in_netns(&ns.inside, || {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let connected = TcpStream::connect_timeout(&l.local_addr().unwrap(), Duration::from_secs(2)).is_ok();
        connected && l.accept().is_ok()
    });
    assert!(local, "the guard blocked loopback");

    let (code, report) = guard(&ns.inside, "report");
    assert_eq!(code, 1, "a guard that dropped packets must fail the report:\n{report}");
    let counted: Vec<u64> = ["IPv4 ", "IPv6 "]
        .iter()
        .map(|family| report.split(family).nth(1).and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next()).unwrap().parse().unwrap())
        .collect();
    // Each family: at least the TCP SYN and the UDP datagram.
    assert!(counted.iter().all(|n| *n >= 2), "counts {counted:?} in:\n{report}");
    // Destinations are listed one a line, first thing on it (IPv6 written out in full).
    let named: Vec<IpAddr> = report.lines().filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect();
    assert_eq!(named, [IpAddr::from(OUTSIDE_V4), IpAddr::from(OUTSIDE_V6)], "destinations in:\n{report}");

    let (code, text) = guard(&ns.inside, "remove");
    assert_eq!(code, 0, "{text}");
    assert_eq!(guard(&ns.inside, "report").0, 2, "the guard is still installed after remove");
    let rules = ok(&["ip", "netns", "exec", &ns.inside, "iptables", "-S"]) + &ok(&["ip", "netns", "exec", &ns.inside, "ip6tables", "-S"]);
    assert!(!rules.contains("CLONESET-NET-GUARD"), "remove left rules behind:\n{rules}");
    assert_eq!(outside_reachable(&ns), Ok(()), "after remove the outside must be reachable again");
}
