#!/usr/bin/env bash
# Builds one pinned Go command from the Go module proxy (`go install PACKAGE@VERSION`), once,
# into the cache outside the repository keyed by name and version, as Helm is built
# (build-helm.sh); prints the binary's path. cosign (signing a release) and actionlint (the
# release workflow) come from here.
#
# Usage: build-go-tool.sh PACKAGE VERSION [go -ldflags value]
# Env:   CLONESET_CACHE_DIR (default ~/.cache/cloneset-operator)
set -euo pipefail

package=$1 version=$2 ldflags=${3:-}
name=$(basename "$package")
CACHE_ROOT="${CLONESET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cloneset-operator}"
out="$CACHE_ROOT/go-tools/$name-$version"

if [ ! -x "$out/$name" ]; then
  command -v go >/dev/null || { echo "build-go-tool: 'go' is not on PATH; Go 1.26.x is needed to build $name $version" >&2; exit 1; }
  mkdir -p "$out"
  exec 9>"$out/.lock"
  flock 9
  if [ ! -x "$out/$name" ]; then
    started=$(date +%s)
    echo "build-go-tool: building $name $version (first time only)" >&2
    tmp=$(mktemp -d "$out/gobin.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    if ! GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$tmp" \
      go install -trimpath -ldflags "-s -w $ldflags" "$package@$version" >"$out/build.log" 2>&1; then
      echo "build-go-tool: building $name failed; see $out/build.log:" >&2
      tail -20 "$out/build.log" >&2
      exit 1
    fi
    mv "$tmp/$name" "$out/$name"
    echo "build-go-tool: $name $version built in $(($(date +%s) - started))s" >&2
  fi
fi
echo "$out/$name"
