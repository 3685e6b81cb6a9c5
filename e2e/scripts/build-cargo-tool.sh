#!/usr/bin/env bash
# Builds one pinned cargo subcommand from crates.io (its own Cargo.lock, `--locked`), once, into
# the cache outside the repository keyed by name and version, as the other tools the project
# needs are built; prints the binary's path.
#
# Usage: build-cargo-tool.sh NAME VERSION [cargo install arguments, e.g. --no-default-features]
# Env:   CLONESET_CACHE_DIR (default ~/.cache/cloneset-operator)
set -euo pipefail

name=$1 version=$2
shift 2
CACHE_ROOT="${CLONESET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cloneset-operator}"
out="$CACHE_ROOT/cargo-tools/$name-$version"
bin="$out/bin/$name"

if [ ! -x "$bin" ]; then
  mkdir -p "$out"
  exec 9>"$out/.lock"
  flock 9
  if [ ! -x "$bin" ]; then
    started=$(date +%s)
    # A tool for this machine: not the static, cross-named build the project's own binaries get.
    env -u CARGO_BUILD_TARGET -u CARGO_TARGET_DIR $(env | sed -n 's/^\(CARGO_TARGET_[A-Z0-9_]*_RUSTFLAGS\)=.*/-u \1/p') \
      cargo install --locked --quiet --root "$out" "$@" "$name@$version" >&2
    echo "$name $version: built in $(($(date +%s) - started))s into $out" >&2
  fi
fi
echo "$bin"
