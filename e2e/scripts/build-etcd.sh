#!/usr/bin/env bash
# Builds one pinned etcd release from the Go module proxy, once, into a cache outside the
# repository keyed by version, and prints the binary's path. A binary already there is reused.
#
# Why not Debian's etcd-server: it is 3.4.23, and kube-apiserver serves streaming lists
# (watch-list, sendInitialEvents) only on an etcd with progress notifications (3.4.31+, 3.5.13+).
# go.etcd.io/etcd/server/v3 cannot be `go install`ed (its go.mod replaces its sibling modules
# with local paths), so a small wrapper module requires it and builds its main package.
#
# Usage: build-etcd.sh
# Env:   ETCD_VERSION (default: the one e2e/kubernetes-versions pins for K8S_VERSION, itself
#        defaulting to the newest supported Kubernetes), CLONESET_CACHE_DIR (default
#        ~/.cache/cloneset-operator)
set -euo pipefail
source "$(dirname "$0")/kubernetes-versions.sh"

ETCD_VERSION="${ETCD_VERSION:-$(etcd_release "$(k8s_release "${K8S_VERSION:-}")")}"
CACHE_ROOT="${CLONESET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cloneset-operator}"
OUT="$CACHE_ROOT/etcd/$ETCD_VERSION"
if [ -x "$OUT/bin/etcd" ]; then
  echo "etcd $ETCD_VERSION: reusing the cached binary in $OUT/bin" >&2
  echo "$OUT/bin/etcd"
  exit 0
fi
command -v go >/dev/null || { echo "build-etcd: 'go' is not on PATH; Go 1.26.x is needed to build etcd $ETCD_VERSION" >&2; exit 1; }

started=$(date +%s)
work="$OUT/src"
mkdir -p "$work" "$OUT/bin"
cd "$work"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "build-etcd: building etcd $ETCD_VERSION in $work (first time only)" >&2
GOFLAGS= go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null
modfile="$(go env GOMODCACHE)/cache/download/go.etcd.io/etcd/server/v3/@v/$ETCD_VERSION.mod"
go_directive=$(awk '/^go /{print $2; exit}' "$modfile")
printf 'module local/etcd-build\n\ngo %s\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$go_directive" "$ETCD_VERSION" > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
if ! go mod tidy >"$OUT/tidy.log" 2>&1; then
  echo "build-etcd: resolving modules failed; see $OUT/tidy.log:" >&2; tail -20 "$OUT/tidy.log" >&2; exit 1
fi
if ! go build -trimpath -tags tools -ldflags "-s -w" -o "$OUT/bin/etcd.tmp" go.etcd.io/etcd/server/v3 >"$OUT/build.log" 2>&1; then
  echo "build-etcd: building etcd failed; see $OUT/build.log:" >&2; tail -20 "$OUT/build.log" >&2; exit 1
fi
mv "$OUT/bin/etcd.tmp" "$OUT/bin/etcd"
echo "build-etcd: etcd $ETCD_VERSION built in $(( $(date +%s) - started ))s" >&2
echo "$OUT/bin/etcd"
