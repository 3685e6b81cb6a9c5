#!/usr/bin/env bash
# The e2e stage of `make test`: the network guard installed, a local control plane of the stage's
# own (with REAL_NODES real nodes), every e2e test against it, the operator's requests checked
# against the chart's RBAC, the control plane stopped and the host checked for anything it left,
# then the guard's count checked and the guard removed, whatever the outcome. Everything the stage runs must be built beforehand: while the guard is
# on, nothing can be downloaded.
#
# Usage: e2e-stage.sh LOCAL_CLUSTER_BINARY CLUSTER_DIR      (env CARGO, default cargo; REAL_NODES, default 0;
#        E2E_TESTS, default every e2e test file: the names of the files under e2e/tests to run)
set -uo pipefail

local_cluster=$1
cluster_dir=$2
cargo=${CARGO:-cargo}
real_nodes=${REAL_NODES:-0}
guard=(bash "$(dirname "$0")/net-guard.sh")
start=$(date +%s)

test_args=()
guarded=0
if "${guard[@]}" available; then
  # Real nodes' pods live on the run's own bridges (csobr0, csobr1, ...).
  "${guard[@]}" install --allow-interface 'csobr+' || exit 1
  guarded=1
  trap '"${guard[@]}" remove' EXIT
  trap 'exit 130' INT TERM HUP
else
  cat >&2 <<'EOF'
################################################################################################
make test: THE NETWORK GUARD IS OFF. It needs root and iptables (see the messages above). The
e2e stage runs without it: a packet sent off this machine would go unnoticed, and the guard's
own test is reported as ignored.
################################################################################################
EOF
fi
# The tests that need root (the guard's own, and every one on a real node) are #[ignore]d with
# their reason, and run only here when this run has what they need.
if [ $guarded = 1 ] && [ "$real_nodes" -gt 0 ]; then
  test_args=(--include-ignored)
else
  echo "make test: the tests that need root and a real node are reported as ignored, with their reason (root: $([ "$(id -u)" = 0 ] && echo yes || echo no), REAL_NODES=$real_nodes)" >&2
fi
# The tests with kruise-daemon need its binary, which this project never builds (it is
# OpenKruise's): they run only when CLONESET_E2E_KRUISE_DAEMON names one.
if [ -z "${CLONESET_E2E_KRUISE_DAEMON:-}" ]; then
  test_args+=(--skip with_kruise_daemon_)
  echo "make test: with_kruise_daemon_* not run: CLONESET_E2E_KRUISE_DAEMON names no kruise-daemon binary (docs/development.md)" >&2
fi

# The release under test (K8S_VERSION, else the newest supported), and its kubectl first on PATH
# for the tests and scripts that run one: within the version skew kubectl supports.
source "$(dirname "$0")/kubernetes-versions.sh"
K8S_VERSION=$(k8s_release "${K8S_VERSION:-}") || exit 1
export K8S_VERSION
kubernetes_bin=$(bash "$(dirname "$0")/build-k8s.sh" kubectl) || exit 1
export PATH="$kubernetes_bin:$PATH"
echo "make test: e2e against Kubernetes $K8S_VERSION" >&2
# The tests whose expectation holds on other releases only (e2e/src/versions.rs), each named
# with its reason: never passed in silence.
skips=$("$local_cluster" version-skips) || exit 1
while IFS=$'\t' read -r test why; do
  [ -n "$test" ] || continue
  test_args+=(--skip "$test")
  echo "make test: skipped on Kubernetes $K8S_VERSION: $test: $why" >&2
done <<<"$skips"

before=$(mktemp)
"$local_cluster" host-snapshot >"$before"
kc=$("$local_cluster" --dir "$cluster_dir" up --test-profile --real-nodes "$real_nodes" | sed -n 's/^export KUBECONFIG=//p')
if [ -z "$kc" ]; then
  echo "make test: the local control plane did not start; logs in $cluster_dir/logs" >&2
  "$local_cluster" --dir "$cluster_dir" down
  exit 1
fi

rc=0
targets=(--test '*')
audit_args=()
if [ -n "${E2E_TESTS:-}" ]; then
  targets=()
  for t in $E2E_TESTS; do targets+=(--test "$t"); done
  audit_args=(--subset)
  echo "make test: only these e2e test files: $E2E_TESTS" >&2
fi
CLONESET_E2E_KUBECONFIG=$kc "$cargo" test -p e2e "${targets[@]}" --no-fail-fast -- ${test_args[@]+"${test_args[@]}"} || rc=$?
# Every request the operator sent in the tests above (it ran with the chart's ServiceAccount and
# RBAC throughout) against what the chart grants, both ways.
if ! RUST_LIB_BACKTRACE=0 "$local_cluster" --dir "$cluster_dir" rbac-audit ${audit_args[@]+"${audit_args[@]}"}; then
  echo "make test: the chart's RBAC and the operator's requests differ (above)" >&2
  rc=1
fi
"$local_cluster" --dir "$cluster_dir" down
if [ $rc -ne 0 ]; then echo "make test: e2e failed; component logs kept in $cluster_dir/logs" >&2; fi
# Whatever the tests and the control plane started, mounted or added to the network is gone.
if ! "$local_cluster" host-snapshot --compare "$before"; then
  echo "make test: the e2e stage left the above on this machine" >&2
  rc=1
fi
rm -f "$before"

if [ $guarded = 1 ] && ! "${guard[@]}" report; then
  echo "make test: packets tried to leave this machine during the e2e stage (destinations above)" >&2
  rc=1
fi
echo "make test: e2e stage on Kubernetes $K8S_VERSION took $(($(date +%s) - start))s"
exit $rc
