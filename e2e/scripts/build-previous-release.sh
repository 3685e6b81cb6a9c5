#!/usr/bin/env bash
# Builds the previous release (e2e/previous-release) as the upgrade test installs it: the operator
# binary from that commit's source, built the way its own Makefile built it (static, for the
# host's triple, with its revision), and that commit's charts, into
# target/previous-release/<version>. Built once per commit; run before the e2e stage, as it may
# fetch the crates that commit's Cargo.lock names.
#
# Usage: build-previous-release.sh     (prints the directory; env CARGO, default cargo)
set -euo pipefail

cd "$(dirname "$0")/../.."
cargo=${CARGO:-cargo}
read -r version commit < <(grep -v '^#' e2e/previous-release | awk 'NF {print $1, $2; exit}')
out="$PWD/target/previous-release/$version"

if [ -x "$out/cloneset-operator" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$commit" ]; then
  echo "previous release $version: reusing $out" >&2
  echo "$out"
  exit 0
fi
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "build-previous-release: commit $commit ($version) is not in this clone; a shallow clone needs 'git fetch --unshallow'" >&2
  exit 1
fi

started=$(date +%s)
rm -rf "$out"
mkdir -p "$out/src"
git archive "$commit" | tar -x -C "$out/src"
# Its own target directory: one shared with this checkout would mix the two builds of the same
# package. It starts with this checkout's compiled dependencies, hard-linked (those the two
# commits resolve alike are then not compiled again), but never this checkout's own crates, whose
# units have the same names: those are compiled from the release's source.
triple=${CARGO_BUILD_TARGET:-$(rustc -vV | sed -n 's/^host: //p')}
for dir in "debug" "$triple/debug"; do
  [ -d "target/$dir/.fingerprint" ] || continue
  for kind in .fingerprint build deps; do
    mkdir -p "$out/target/$dir/$kind"
    find "target/$dir/$kind" -mindepth 1 -maxdepth 1 \
      ! -name 'cloneset-operator-*' ! -name 'cloneset_operator-*' ! -name 'libcloneset_operator-*' \
      ! -name 'e2e-*' ! -name 'libe2e-*' -exec cp -al -t "$out/target/$dir/$kind/" {} +
  done
done
revision=$(git describe --always --abbrev=12 --exclude='*' "$commit")
(cd "$out/src" && CLONESET_OPERATOR_REVISION=$revision CARGO_TARGET_DIR="$out/target" CARGO_INCREMENTAL=0 \
  "$cargo" build --locked -p cloneset-operator --bin cloneset-operator)
cp "$out/target/$triple/debug/cloneset-operator" "$out/cloneset-operator"
# The binary says which commit it is: never this checkout's, built by mistake.
"$out/cloneset-operator" --version | grep -q "(revision $revision)" ||
  { echo "build-previous-release: $out/cloneset-operator is not $revision: $("$out/cloneset-operator" --version)" >&2; exit 1; }
cp -r "$out/src/charts" "$out/charts"
rm -rf "$out/target" "$out/src"
echo "$commit" >"$out/commit"
echo "previous release $version ($revision): built in $(($(date +%s) - started))s into $out" >&2
echo "$out"
