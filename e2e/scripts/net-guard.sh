#!/usr/bin/env bash
# The network guard of `make test`: while it is installed, every packet this machine would send to
# an address outside loopback (or out of an interface named with --allow-interface, such as the
# network namespaces a run creates) is dropped and counted, and its destination remembered.
#
#   net-guard.sh available            exit 0 when the guard can be installed here (root, iptables)
#   net-guard.sh install [--allow-interface IF]...
#                                     install it (a stale guard is replaced); installs Debian's
#                                     iptables first when it is missing
#   net-guard.sh report               print the count and the destinations; exit 1 when not zero
#   net-guard.sh remove               remove it (says nothing when there is none)
#
# It is an iptables chain (IPv4 and IPv6) jumped to first from OUTPUT and FORWARD, so it covers
# every interface, the default route's among them, and packets routed for namespaces on this
# host. The destinations are kept by the `recent` match in /proc/net/xt_recent/. Everything is
# per network namespace: run it under `ip netns exec NS` to guard a namespace instead.
#
# Not counted: IPv6 neighbour discovery and multicast listener reports (ICMPv6 133-136, 143),
# which the kernel sends on its own to link-local and multicast addresses and which open no
# connection.
set -euo pipefail

CHAIN=CLONESET-NET-GUARD
RECENT4=cloneset_net_guard4
RECENT6=cloneset_net_guard6

say() { echo "net-guard: $*" >&2; }

# Both families: `tables 4 ...` and `tables 6 ...`.
tables() {
  local family=$1
  shift
  if [ "$family" = 4 ]; then iptables -w "$@"; else ip6tables -w "$@"; fi
}

ensure_iptables() {
  command -v iptables >/dev/null && command -v ip6tables >/dev/null && return 0
  say "iptables is missing; installing Debian's iptables"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null ||
    { say "could not install iptables"; return 1; }
}

available() {
  if [ "$(id -u)" != 0 ]; then
    say "not root: the guard needs CAP_NET_ADMIN"
    return 1
  fi
  ensure_iptables || return 1
  # The kernel must accept the chain (a container without netfilter would not).
  iptables -w -N "$CHAIN-PROBE" 2>/dev/null && iptables -w -X "$CHAIN-PROBE" ||
    { say "this kernel refuses iptables chains"; return 1; }
}

installed() { iptables -w -nL "$CHAIN" >/dev/null 2>&1; }

remove() {
  local family hook
  command -v iptables >/dev/null || return 0
  for family in 4 6; do
    for hook in OUTPUT FORWARD; do
      while tables "$family" -D "$hook" -j "$CHAIN" 2>/dev/null; do :; done
    done
    tables "$family" -F "$CHAIN" 2>/dev/null || true
    tables "$family" -X "$CHAIN" 2>/dev/null || true
  done
}

install() {
  local allow=() family iface
  while [ $# -gt 0 ]; do
    case "$1" in
      --allow-interface) allow+=("$2"); shift 2 ;;
      *) say "unknown argument $1"; exit 2 ;;
    esac
  done
  available || exit 1
  if installed; then
    say "replacing a guard left installed by an earlier run"
  fi
  remove
  for family in 4 6; do
    tables "$family" -N "$CHAIN"
    tables "$family" -A "$CHAIN" -o lo -j RETURN
    for iface in ${allow[@]+"${allow[@]}"}; do
      tables "$family" -A "$CHAIN" -o "$iface" -j RETURN
    done
    if [ "$family" = 6 ]; then
      for type in 133 134 135 136 143; do
        tables 6 -A "$CHAIN" -p ipv6-icmp --icmpv6-type "$type" -j RETURN
      done
      tables 6 -A "$CHAIN" -m recent --name "$RECENT6" --rdest --set
    else
      tables 4 -A "$CHAIN" -m recent --name "$RECENT4" --rdest --set
    fi
    tables "$family" -A "$CHAIN" -j DROP
    tables "$family" -I OUTPUT 1 -j "$CHAIN"
    tables "$family" -I FORWARD 1 -j "$CHAIN"
  done
  say "installed: packets to anywhere but loopback${allow[*]:+ and ${allow[*]}} are dropped and counted"
}

# Packets the DROP rule of one family has seen.
dropped() {
  tables "$1" -nvxL "$CHAIN" 2>/dev/null | awk '$3 == "DROP" { n += $1 } END { print n + 0 }'
}

report() {
  if ! installed; then
    say "not installed"
    return 2
  fi
  local n4 n6 list
  n4=$(dropped 4)
  n6=$(dropped 6)
  if [ "$((n4 + n6))" = 0 ]; then
    say "0 packets to outside the machine (IPv4 0, IPv6 0)"
    return 0
  fi
  say "$((n4 + n6)) packets to outside the machine were dropped (IPv4 $n4, IPv6 $n6); destinations:"
  for list in "$RECENT4" "$RECENT6"; do
    [ -r "/proc/net/xt_recent/$list" ] || continue
    # Lines read `src=ADDR ttl: T last_seen: J oldest_pkt: K ...`; with --rdest ADDR is the destination.
    sed -n 's/^src=\([^ ]*\).*oldest_pkt: \([0-9]*\).*/  \1 (packets recorded: \2)/p' "/proc/net/xt_recent/$list" >&2
  done
  return 1
}

case "${1:-}" in
  available) available ;;
  install) shift; install "$@" ;;
  report) report ;;
  remove)
    if command -v iptables >/dev/null && installed; then
      remove
      say "removed"
    fi ;;
  *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
