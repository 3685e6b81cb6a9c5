#!/usr/bin/env bash
# Builds one pinned Helm v3 release from the Go module proxy, once, into a cache outside the
# repository keyed by version (the chart tests and `helm lint` use it; no Helm download needed).
#
# Usage: build-helm.sh            (prints the path of the helm binary)
# Env:   HELM_VERSION (default below), CLONESET_CACHE_DIR (default ~/.cache/cloneset-operator)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${CLONESET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cloneset-operator}"
OUT="$CACHE_ROOT/helm/$HELM_VERSION"

if [ -x "$OUT/helm" ]; then
  echo "helm $HELM_VERSION: reusing $OUT/helm" >&2
  echo "$OUT/helm"
  exit 0
fi

command -v go >/dev/null || { echo "build-helm: 'go' is not on PATH; Go 1.26.x is needed to build Helm $HELM_VERSION" >&2; exit 1; }

started=$(date +%s)
mkdir -p "$OUT"
# Concurrent callers (several test binaries) build once: the first takes the lock, the others
# wait and then reuse its binary.
exec 9>"$OUT/.lock"
flock 9
if [ -x "$OUT/helm" ]; then
  echo "$OUT/helm"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
# The Kubernetes version Helm assumes for `helm template`/`helm lint` comes from its client-go
# module, like Helm's own Makefile does; the version string makes `helm version` truthful.
modfile="$(GOFLAGS= go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')"
client_go=$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$modfile")
k8s_minor=$(echo "$client_go" | cut -d. -f2)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
if [ -n "$k8s_minor" ]; then
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
  done
fi

echo "build-helm: building Helm $HELM_VERSION (first time only; takes a few minutes)" >&2
tmp=$(mktemp -d "$OUT/gobin.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! GOBIN="$tmp" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >"$OUT/build.log" 2>&1; then
  echo "build-helm: building helm failed; see $OUT/build.log:" >&2
  tail -20 "$OUT/build.log" >&2
  exit 1
fi
mv "$tmp/helm" "$OUT/helm"
echo "build-helm: Helm $HELM_VERSION built in $(( $(date +%s) - started ))s" >&2
echo "$OUT/helm"
