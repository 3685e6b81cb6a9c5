#!/usr/bin/env bash
# Gathers one release of cloneset-operator into a directory: the image archive and the static
# binary that `make image` and `make dist` built, the binary's SBOM (from the dependency list it
# carries), both charts packaged by Helm, the release notes (the version's CHANGELOG.md section)
# and SHA256SUMS over them all. `make release` runs it.
#
# Usage: release.sh VERSION HOST_TRIPLE OUT_DIR
#        release.sh --sums DIR   (writes DIR/SHA256SUMS again, over every file in DIR: the release
#                                 workflow does, once it has put both architectures' files together)
# Env:   IMAGE_ARCHIVE, DIST_DIR, AUDITABLE2CDX (as the Makefile sets them)
set -euo pipefail

# SHA256SUMS over every other file of the directory, sorted.
sums() { (cd "$1" && find . -maxdepth 1 -type f ! -name 'SHA256SUMS*' -printf '%P\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS.new && mv SHA256SUMS.new SHA256SUMS); }
if [ "${1:-}" = --sums ]; then
  sums "$2"
  exit 0
fi

version=$1
triple=$2
out=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

# The release must have its dated CHANGELOG.md section: the notes are that section.
heading=$(grep -m1 -E "^## \[$version\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$" CHANGELOG.md || true)
if [ -z "$heading" ]; then
  echo "make release: CHANGELOG.md has no section '## [$version] - YYYY-MM-DD' (see docs/development.md#versioning-and-releases)" >&2
  exit 1
fi
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  echo "make release: the tree has uncommitted changes; a release is built from a commit" >&2
  exit 1
fi

# The lines of a CHANGELOG.md section, from below its heading to the next one.
section() { awk -v h="$1" '$0 == h {on = 1; next} on && /^## \[/ {exit} on {print}' CHANGELOG.md | sed -e '/./,$!d'; }

rm -rf "$out"
mkdir -p "$out"
if [ -n "$(section '## [Unreleased]' | tr -d '[:space:]')" ]; then
  # Changes after the version's section: what is built is not that release.
  if [ "${SNAPSHOT:-0}" != 1 ]; then
    echo "make release: CHANGELOG.md lists unreleased changes: cut the release first (a new version and its dated section), or SNAPSHOT=1 for a snapshot" >&2
    exit 1
  fi
  { echo "# cloneset-operator $version, snapshot of $(git rev-parse --short=12 HEAD): not a release"; echo
    echo "Changes since $version:"; echo; section '## [Unreleased]'; } > "$out/release-notes.md"
else
  { echo "# cloneset-operator $version (${heading#*] - })"; echo; section "$heading"; } > "$out/release-notes.md"
fi

# What is inside, for scanners and security teams: the crates the binary carries (cargo
# auditable), as a CycloneDX SBOM. A binary without the list is not released.
sbom="$out/cloneset-operator-$version.cdx.json"
if ! "${AUDITABLE2CDX:?}" "target/$triple/release/cloneset-operator" >"$sbom" 2>/dev/null ||
  ! grep -q '"name": *"kube-runtime"' "$sbom"; then
  echo "make release: $sbom names no kube-runtime: the binary carries no dependency list (not built by cargo auditable?)" >&2
  exit 1
fi

cp "${IMAGE_ARCHIVE:?}" "$out/"
cp "${DIST_DIR:?}/cloneset-operator-$version-$triple.tar.gz" "$out/"
helm=$(bash e2e/scripts/build-helm.sh)
for chart in charts/cloneset-operator charts/cloneset-operator-migrate; do
  "$helm" package "$chart" --destination "$out" >/dev/null
done

sums "$out"
digest=$(tar -xOf "$out/$(basename "$IMAGE_ARCHIVE")" index.json | grep -o '"digest":"sha256:[0-9a-f]*"' | head -1 | cut -d'"' -f4)
echo "make release: cloneset-operator $version in $out (image $digest)"
(cd "$out" && ls -l | tail -n +2)
