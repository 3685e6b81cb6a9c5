# Sourced by the build scripts: reads e2e/kubernetes-versions, the supported releases and their pins.
#   k8s_release [VERSION]   the Kubernetes release to build: VERSION as given when it is a full
#                           version (v1.33.2), the pinned patch of a minor (1.33 or v1.33), the
#                           newest supported release when empty
#   etcd_release VERSION    the etcd pinned for that Kubernetes release's minor (the newest
#                           supported one's for a minor the file does not list)
KUBERNETES_VERSIONS_FILE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/kubernetes-versions"

k8s_release() {
  local v=${1:-}
  if [ -z "$v" ]; then
    awk '!/^#/ && NF >= 3 {last = $2} END {print last}' "$KUBERNETES_VERSIONS_FILE"
  elif [[ $v =~ ^v?1\.[0-9]+$ ]]; then
    local pinned
    pinned=$(awk -v m="${v#v}" '!/^#/ && $1 == m {print $2}' "$KUBERNETES_VERSIONS_FILE")
    [ -n "$pinned" ] || { echo "Kubernetes ${v#v} is not in $KUBERNETES_VERSIONS_FILE; name a full version (v${v#v}.N) to build it anyway" >&2; return 1; }
    echo "$pinned"
  else
    echo "$v"
  fi
}

etcd_release() {
  local minor
  minor=$(echo "${1#v}" | cut -d. -f1,2)
  awk -v m="$minor" '!/^#/ && NF >= 3 {last = $3; if ($1 == m) found = $3} END {print (found != "" ? found : last)}' "$KUBERNETES_VERSIONS_FILE"
}
