//! The local control plane's address plan: every address it hands out (Service ClusterIPs,
//! simulated nodes' InternalIPs, simulated pods' IPs) is in the loopback range 127.0.0.0/8.
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
