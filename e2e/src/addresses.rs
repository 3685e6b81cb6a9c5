//! The local control plane's address plan: every address it hands out (Service ClusterIPs,
//! simulated nodes' InternalIPs, simulated pods' IPs) is in the loopback range 127.0.0.0/8, or,
//! with real nodes, on a bridge the run creates ([`Bridged`]).
//!
//! Why loopback: a connection to any of them ends on this machine, whoever makes it (the
//! apiserver calling a webhook or proxying `kubectl logs`, a test, a user's tool), and that holds
//! without root, without a route or a firewall rule: `make run` changes nothing on the host. A
//! private range such as 10.96.0.0/16 is not routed here, so a connection to it follows the
//! default route off the machine.
//!
//! The apiserver accepts loopback for the service range, node addresses and pod IPs. It refuses
//! them in Endpoints and EndpointSlices, so a Service never lists simulated pods; with
//! `--enable-aggregator-routing` (see `cluster.rs`) a webhook or APIService backed by such a
//! Service fails inside the apiserver, before any dial.

use std::net::Ipv4Addr;

/// `--service-cluster-ip-range` of the apiserver and controller-manager.
pub const SERVICE_CIDR: &str = "127.96.0.0/16";
/// The ClusterIP of the `kubernetes` Service: the first address of [`SERVICE_CIDR`], named in
/// the apiserver's serving certificate.
pub const KUBERNETES_SERVICE_IP: &str = "127.96.0.1";
/// `--cluster-cidr` of the controller-manager: the block simulated pods' IPs come from.
pub const CLUSTER_CIDR: &str = "127.128.0.0/9";

/// First simulated node's InternalIP; node `i` has this plus `i`.
const FIRST_NODE_IP: Ipv4Addr = Ipv4Addr::new(127, 1, 0, 10);

/// The InternalIP of simulated node `index` (127.1.0.10, 127.1.0.11, ...).
pub fn node_ip(index: usize) -> Ipv4Addr {
    // 127.1.0.10 + index stays inside 127.1.0.0/16 for the first 65,000 nodes.
    Ipv4Addr::from(u32::from(FIRST_NODE_IP) + (index as u32 % 65_000))
}

/// The IP of the `n`-th pod started on simulated node `node`: node `k` draws from
/// 127.(128 + k mod 128).0.0/16, 250 addresses per third octet, .0 and .1 left out.
pub fn pod_ip(node: usize, n: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 128 + (node % 128) as u8, ((n / 250) % 256) as u8, (n % 250 + 2) as u8)
}

/// The addresses of a control plane with real nodes, which need what loopback cannot give: a
/// node IP the kubelet accepts (it refuses loopback), pod IPs in network namespaces, and a
/// service range pods can reach through kube-proxy (a pod's 127.0.0.0/8 is its own).
///
/// Everything is inside 198.18.0.0/15, the range RFC 2544 reserves for benchmarking, which no
/// network routes: control plane `slot` (one per running cluster on a host) has the bridge
/// `csobr<slot>` with 198.18.<slot>.1/24 (node IPs and pods), and the service range
/// 198.19.<16 × slot>.0/20, routed into that bridge. Nothing is routed beyond the bridge:
/// a forwarding rule drops what pods send elsewhere, and pods are not masqueraded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bridged {
    pub slot: u8,
}

impl Bridged {
    /// How many control planes with real nodes one host can run at once.
    pub const SLOTS: u8 = 16;

    pub fn bridge_name(self) -> String {
        format!("csobr{}", self.slot)
    }

    /// The bridge's own address: the pods' gateway, the first node's IP, and where pods reach
    /// the apiserver.
    pub fn bridge_ip(self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.slot, 1)
    }

    /// The bridge's subnet, from which pods of every real node take their IPs.
    pub fn pod_subnet(self) -> String {
        format!("198.18.{}.0/24", self.slot)
    }

    /// Real node `n`'s IP: the bridge's own for the first, further addresses on the bridge
    /// (198.18.<slot>.250, .251, ...) for the others.
    pub fn node_ip(self, n: usize) -> Ipv4Addr {
        if n == 0 { self.bridge_ip() } else { Ipv4Addr::new(198, 18, self.slot, 249 + n.min(5) as u8) }
    }

    /// The pod IPs real node `n` hands out: a block of 60 in the bridge's subnet.
    pub fn pod_range(self, n: usize) -> (Ipv4Addr, Ipv4Addr) {
        let start = 2 + 60 * n.min(3) as u8;
        (Ipv4Addr::new(198, 18, self.slot, start), Ipv4Addr::new(198, 18, self.slot, start + 59))
    }

    pub fn service_cidr(self) -> String {
        format!("198.19.{}.0/20", 16 * u16::from(self.slot))
    }

    pub fn kubernetes_service_ip(self) -> Ipv4Addr {
        Ipv4Addr::new(198, 19, 16 * self.slot, 1)
    }
}

/// Which plan a control plane runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    Loopback,
    Bridged(Bridged),
}

impl Plan {
    pub fn service_cidr(self) -> String {
        match self {
            Plan::Loopback => SERVICE_CIDR.into(),
            Plan::Bridged(b) => b.service_cidr(),
        }
    }

    pub fn kubernetes_service_ip(self) -> String {
        match self {
            Plan::Loopback => KUBERNETES_SERVICE_IP.into(),
            Plan::Bridged(b) => b.kubernetes_service_ip().to_string(),
        }
    }

    /// The address the apiserver advertises (the `kubernetes` Service's endpoint).
    pub fn advertise_address(self) -> String {
        match self {
            Plan::Loopback => "127.0.0.1".into(),
            Plan::Bridged(b) => b.bridge_ip().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_cidr(cidr: &str) -> (u32, u32) {
        let (ip, bits) = cidr.split_once('/').unwrap();
        let bits: u32 = bits.parse().unwrap();
        (u32::from(ip.parse::<Ipv4Addr>().unwrap()), if bits == 0 { 0 } else { u32::MAX << (32 - bits) })
    }

    fn within(ip: Ipv4Addr, cidr: &str) -> bool {
        let (net, mask) = parse_cidr(cidr);
        u32::from(ip) & mask == net
    }

    /// What keeps every connection to a simulated address on this machine.
    #[test]
    fn every_address_the_local_control_plane_hands_out_is_loopback() {
        for cidr in [SERVICE_CIDR, CLUSTER_CIDR] {
            let (net, mask) = parse_cidr(cidr);
            assert!(Ipv4Addr::from(net).is_loopback() && mask >= u32::MAX << 24, "{cidr} must lie inside 127.0.0.0/8");
        }
        assert!(within(KUBERNETES_SERVICE_IP.parse().unwrap(), SERVICE_CIDR));
        for node in [0, 1, 2, 127, 128, 999, 64_999, 65_000, 1_000_000] {
            let ip = node_ip(node);
            assert!(ip.is_loopback() && !within(ip, SERVICE_CIDR) && !within(ip, CLUSTER_CIDR), "node {node}: {ip}");
            for n in [0, 1, 249, 250, 64_000, u32::MAX] {
                let ip = pod_ip(node, n);
                assert!(ip.is_loopback() && within(ip, CLUSTER_CIDR), "node {node} pod {n}: {ip}");
                assert!(ip.octets()[3] >= 2, "node {node} pod {n}: {ip}");
            }
        }
    }

    /// What keeps real nodes' traffic inside the benchmarking range, one slot apart.
    #[test]
    fn bridged_addresses_stay_in_the_benchmarking_range_and_apart_per_slot() {
        let bench = |ip: Ipv4Addr| within(ip, "198.18.0.0/15");
        for slot in 0..Bridged::SLOTS {
            let b = Bridged { slot };
            assert!(bench(b.bridge_ip()) && within(b.bridge_ip(), &b.pod_subnet()));
            assert!(within(b.kubernetes_service_ip(), &b.service_cidr()) && bench(b.kubernetes_service_ip()));
            let (net, _) = parse_cidr(&b.service_cidr());
            assert!(bench(Ipv4Addr::from(net)) && !within(Ipv4Addr::from(net), &b.pod_subnet()));
            for n in 0..4 {
                let (first, last) = b.pod_range(n);
                assert!(within(first, &b.pod_subnet()) && within(last, &b.pod_subnet()) && first <= last);
                assert!(within(b.node_ip(n), &b.pod_subnet()) && !(first..=last).contains(&b.node_ip(n)));
            }
            let other = Bridged { slot: (slot + 1) % Bridged::SLOTS };
            assert!(!within(other.bridge_ip(), &b.pod_subnet()) && !within(other.kubernetes_service_ip(), &b.service_cidr()));
        }
        assert_eq!(Bridged { slot: 2 }.service_cidr(), "198.19.32.0/20");
    }

    #[test]
    fn nodes_and_their_first_pods_get_distinct_addresses() {
        assert_eq!(node_ip(0), Ipv4Addr::new(127, 1, 0, 10));
        assert_eq!(node_ip(300), Ipv4Addr::new(127, 1, 1, 54));
        assert_eq!(pod_ip(0, 0), Ipv4Addr::new(127, 128, 0, 2));
        assert_eq!(pod_ip(2, 251), Ipv4Addr::new(127, 130, 1, 3));
        let pods: std::collections::HashSet<_> = (0..3).flat_map(|node| (0..2_000).map(move |n| pod_ip(node, n))).collect();
        assert_eq!(pods.len(), 6_000);
    }
}
