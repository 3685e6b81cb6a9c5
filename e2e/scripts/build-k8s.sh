#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, and for real nodes kubelet
# and kube-proxy, of one pinned Kubernetes release from the Go module proxy, once, into a cache outside
# the repository keyed by version. A binary already in the cache is not built again.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module with a local
# path. We write a small wrapper module that requires it and points each staging module at its
# published v0.x release instead.
#
# Usage: build-k8s.sh [BINARY...]   (default: all six; prints the directory holding them)
# Env:   K8S_VERSION (a full version, or a minor of e2e/kubernetes-versions for its pinned patch;
#        default: the newest supported), CLONESET_CACHE_DIR (default ~/.cache/cloneset-operator)
set -euo pipefail
source "$(dirname "$0")/kubernetes-versions.sh"

K8S_VERSION=$(k8s_release "${K8S_VERSION:-}")
CACHE_ROOT="${CLONESET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cloneset-operator}"
OUT="$CACHE_ROOT/kubernetes/$K8S_VERSION"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
[ $# -gt 0 ] && BINARIES=("$@")

have_all() { for b in "${BINARIES[@]}"; do [ -x "$OUT/bin/$b" ] || return 1; done; }
if have_all; then
  echo "kubernetes $K8S_VERSION: reusing cached binaries in $OUT/bin" >&2
  echo "$OUT/bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-k8s: 'go' is not on PATH; Go 1.26.x is needed to build Kubernetes $K8S_VERSION" >&2; exit 1; }
# Go >= 1.27 turns on the jsonv2 experiment, and the apiserver of Kubernetes <= 1.36 then serves
# broken OpenAPI. Refuse early with a clear message rather than produce a subtly broken cluster.
go_minor=$(GOTOOLCHAIN=local go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "$go_minor" -ge 27 ]; then
  echo "build-k8s: Go $(GOTOOLCHAIN=local go env GOVERSION) is too new for Kubernetes $K8S_VERSION (jsonv2 breaks OpenAPI); use Go 1.26.x" >&2
  exit 1
fi

started=$(date +%s)
work="$OUT/src"
mkdir -p "$work" "$OUT/bin"
cd "$work"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

echo "build-k8s: building Kubernetes $K8S_VERSION in $work (first time only; takes several minutes)" >&2
if ! dl=$(GOFLAGS= go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>&1); then
  echo "build-k8s: the Go module proxy does not serve k8s.io/kubernetes@$K8S_VERSION:" >&2
  echo "$dl" | sed -n 's/.*"Error": *//p' | head -3 >&2
  echo "build-k8s: pick a patch it serves (GOFLAGS= go list -m -versions k8s.io/kubernetes)" >&2
  exit 1
fi
modfile="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod"
staging_version="v0.${K8S_VERSION#v1.}"
go_directive=$(awk '/^go /{print $2; exit}' "$modfile")

# A staging module's release of the same patch, or, where the proxy does not serve that one, the
# newest earlier patch of the same minor that it does serve (said, and kept in staging.txt).
# The sample-* modules are imported by nothing built here, so they are not checked.
staging_release() {
  local m=$1 v
  GOFLAGS= go mod download "$m@$staging_version" >/dev/null 2>&1 && { echo "$staging_version"; return; }
  for v in $(GOFLAGS= go list -m -versions "$m" 2>/dev/null | tr ' ' '\n' | grep -E "^${staging_version%.*}\.[0-9]+$" | sort -t. -k3,3nr); do
    [ "${v##*.}" -lt "${staging_version##*.}" ] || continue
    GOFLAGS= go mod download "$m@$v" >/dev/null 2>&1 && { echo "$v"; return; }
  done
  return 1
}
: >"$OUT/staging.txt"
replaces=""
for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$modfile"); do
  if [[ $m == k8s.io/sample-* ]]; then v=$staging_version
  elif ! v=$(staging_release "$m"); then
    echo "build-k8s: the Go module proxy serves no $m of ${staging_version%.*}.x up to $staging_version; Kubernetes $K8S_VERSION cannot be built here" >&2
    exit 1
  fi
  [ "$v" = "$staging_version" ] || echo "build-k8s: $m@$staging_version is not served; using $v, the newest earlier patch served" >&2
  echo "$m $v" >>"$OUT/staging.txt"
  replaces="$replaces
replace $m => $m $v"
done

{
  echo "module local/kube-build"
  echo
  echo "go $go_directive"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  # Every `k8s.io/x => ./staging/...` replace becomes `k8s.io/x => k8s.io/x v0.N.M`.
  echo "$replaces"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
# Minimal version selection keeps the release's own pinned dependency versions (its require list).
if ! go mod tidy >"$OUT/tidy.log" 2>&1; then
  echo "build-k8s: resolving modules failed; see $OUT/tidy.log:" >&2; tail -20 "$OUT/tidy.log" >&2; exit 1
fi

pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X $pkg.gitTreeState=clean"
for b in "${BINARIES[@]}"; do
  [ -x "$OUT/bin/$b" ] && continue
  t0=$(date +%s)
  if ! go build -trimpath -tags tools -ldflags "$ldflags" -o "$OUT/bin/$b.tmp" "k8s.io/kubernetes/cmd/$b" >"$OUT/build-$b.log" 2>&1; then
    echo "build-k8s: building $b failed; see $OUT/build-$b.log:" >&2
    tail -20 "$OUT/build-$b.log" >&2
    exit 1
  fi
  mv "$OUT/bin/$b.tmp" "$OUT/bin/$b"
  echo "build-k8s: built $b in $(( $(date +%s) - t0 ))s" >&2
done
echo "build-k8s: Kubernetes $K8S_VERSION built in $(( $(date +%s) - started ))s total" >&2
echo "$OUT/bin"
