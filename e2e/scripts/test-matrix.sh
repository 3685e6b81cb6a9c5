#!/usr/bin/env bash
# `make test-matrix`: the e2e stage (`make e2e`) on every supported Kubernetes minor
# (e2e/kubernetes-versions), one after the other, each leg's log and result kept in
# target/test-matrix/; then the table of every leg's latest result (passed, failed, skipped with
# its reason, time, date, revision) written into docs/compatibility.md between its markers.
#
# Usage: test-matrix.sh [MINOR...]     (default: every supported minor; a leg not run keeps its
#                                       last result in the table)
#        test-matrix.sh --table        (no leg: the table from the results kept, as after a run
#                                       that was stopped part-way)
set -uo pipefail
cd "$(dirname "$0")/../.."
source e2e/scripts/kubernetes-versions.sh

out=target/test-matrix
mkdir -p "$out"
table_only=false
if [ "${1:-}" = "--table" ]; then table_only=true; shift; fi
minors=("$@")
if ! $table_only && [ ${#minors[@]} -eq 0 ]; then
  mapfile -t minors < <(grep -v '^#' e2e/kubernetes-versions | awk 'NF {print $1}')
fi

rc=0
for minor in ${minors[@]+"${minors[@]}"}; do
  version=$(k8s_release "$minor") || exit 1
  log="$out/$minor.log"
  # The commit each leg builds (a change outside docs/ since it is said too).
  revision=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' 2>/dev/null || echo "+changes")
  echo "test-matrix: Kubernetes $version (log in $log)" >&2
  start=$(date +%s)
  make --no-print-directory e2e K8S_VERSION="$minor" >"$log" 2>&1
  leg_rc=$?
  seconds=$(($(date +%s) - start))
  # The table's time is the tests' own, not the first leg's build of that Kubernetes release.
  stage=$(sed -n 's/^make test: e2e stage on Kubernetes .* took \([0-9]*\)s$/\1/p' "$log" | tail -1)
  seconds=${stage:-$seconds}
  # Each test binary's summary line: "test result: ok. 12 passed; 0 failed; 3 ignored; ...".
  read -r passed failed ignored < <(awk '/^test result:/ {
      for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i }
    } END { print p + 0, f + 0, g + 0 }' "$log")
  skipped=$(grep -c '^make test: skipped on Kubernetes' "$log")
  failures=$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log" | sort -u | paste -sd, -)
  if [ $leg_rc -ne 0 ] && [ -z "$failures" ]; then
    failures=$(grep -m1 -E '^make test: (the chart|packets|the e2e stage left|the local control plane)' "$log" | sed 's/^make test: //')
    failures=${failures:-"make e2e exited $leg_rc (see $log)"}
  fi
  [ $leg_rc -eq 0 ] || rc=1
  {
    printf 'minor\t%s\nversion\t%s\netcd\t%s\nrc\t%s\npassed\t%s\nfailed\t%s\nskipped\t%s\nignored\t%s\nseconds\t%s\ndate\t%s\nrevision\t%s\nfailures\t%s\n' \
      "$minor" "$version" "$(etcd_release "$version")" "$leg_rc" "$passed" "$failed" "$skipped" "$ignored" "$seconds" \
      "$(date -u +%Y-%m-%d)" "$revision" "$failures"
    sed -n 's/^make test: skipped on Kubernetes [^:]*: /skip\t/p' "$log"
  } >"$out/$minor.result"
  echo "test-matrix: Kubernetes $version: exit $leg_rc, $passed passed, $failed failed, $skipped skipped, $ignored ignored, ${seconds}s" >&2
done

# The table, from every leg's latest result, oldest minor first.
field() { awk -F'\t' -v k="$1" '$1 == k {print $2; exit}' "$2"; }
table=$(mktemp)
{
  echo "| Kubernetes | etcd | Result | Passed | Failed | Skipped | Ignored | Time | Date | Revision |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for minor in $(grep -v '^#' e2e/kubernetes-versions | awk 'NF {print $1}'); do
    r="$out/$minor.result"
    if [ ! -f "$r" ]; then
      echo "| $minor | | not run | | | | | | | |"
      continue
    fi
    result="green"
    [ "$(field rc "$r")" = 0 ] || result="**red**: $(field failures "$r")"
    secs=$(field seconds "$r")
    printf '| %s | %s | %s | %s | %s | %s | %s | %dm%02ds | %s | %s |\n' "$(field version "$r")" "$(field etcd "$r")" "$result" \
      "$(field passed "$r")" "$(field failed "$r")" "$(field skipped "$r")" "$(field ignored "$r")" $((secs / 60)) $((secs % 60)) \
      "$(field date "$r")" "$(field revision "$r")"
  done
  echo
  echo "Skipped, and why (each test's reason, from e2e/src/versions.rs):"
  echo
  for minor in $(grep -v '^#' e2e/kubernetes-versions | awk 'NF {print $1}'); do
    r="$out/$minor.result"
    [ -f "$r" ] || continue
    awk -F'\t' -v m="$minor" '$1 == "skip" { split($2, a, ": "); t = a[1]; sub(/^[^:]*: /, "", $2); printf "- %s: `%s`: %s\n", m, t, $2 }' "$r"
  done
} >"$table"

doc=docs/compatibility.md
if ! grep -q '<!-- test-matrix:begin -->' "$doc"; then
  echo "test-matrix: $doc has no <!-- test-matrix:begin --> marker; the table is in $table" >&2
  exit 1
fi
awk -v table="$table" '
  /<!-- test-matrix:begin -->/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /<!-- test-matrix:end -->/ { skip = 0 }
  !skip' "$doc" >"$doc.new" && mv "$doc.new" "$doc"
rm -f "$table"
echo "test-matrix: table written to $doc" >&2
exit $rc
