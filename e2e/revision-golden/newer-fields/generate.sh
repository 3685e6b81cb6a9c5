#!/usr/bin/env bash
# Regenerates ../../../src/api/newer_pod_template_fields.json: the PodTemplateSpec fields newer
# than Kruise v1.9.0's Kubernetes 1.32, over the k8s.io/api of every supported minor after 1.32
# (e2e/kubernetes-versions), since a field one release serves and a later one removes can still
# be in a template written on that release. go.mod pins the newest; each other release is run
# from a copy of go.mod, so nothing here changes.
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false"
schema=../../../src/core/gojson_podtemplate_schema.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lists=()
for release in $(awk '!/^#/ && NF >= 3 && $1 != "1.32" {print $2}' ../../kubernetes-versions); do
  api="v0.${release#v1.}"
  cp go.mod "$work/go.mod"; cp go.sum "$work/go.sum"
  go get -modfile="$work/go.mod" "k8s.io/api@$api" >/dev/null 2>&1 ||
    { echo "generate.sh: the Go module proxy serves no k8s.io/api $api" >&2; exit 1; }
  go run -modfile="$work/go.mod" . "$schema" >"$work/$api.json"
  lists+=("$work/$api.json")
done
go run . -merge "${lists[@]}" >../../../src/api/newer_pod_template_fields.json
echo "generate.sh: src/api/newer_pod_template_fields.json from k8s.io/api ${lists[*]##*/}; now run make crds" >&2
