#!/usr/bin/env bash
# Installs or upgrades the chart's Helm release that `make run` and `make deploy` share
# (`cloneset-operator`, its records in namespace default, the chart's objects in cloneset-system),
# so the two can follow each other in either order.
#
# The CloneSet CRD is taken only from nobody or from this release: one that another Helm release
# owns (Kruise's) or that was applied without Helm is left alone, with what to do, unless
# TAKE_OVER=1 says to take it: then `cloneset-operator migrate` moves it to this release (waiting
# for Kruise's manager to be gone), and an admission policy applied without Helm is adopted.
#
# Usage: chart-release.sh KUBECONFIG [helm upgrade arguments...]
# Env:   OPERATOR (the operator binary, for migrate), TAKE_OVER (0 or 1)
set -euo pipefail

kc=$1
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
release=cloneset-operator
release_ns=default
crd=clonesets.apps.kruise.io
helm=$(bash "$root/e2e/scripts/build-helm.sh")
export HELM_CACHE_HOME="$root/target/helm-home/cache" HELM_CONFIG_HOME="$root/target/helm-home/config" HELM_DATA_HOME="$root/target/helm-home/data"
k() { kubectl --kubeconfig "$kc" "$@"; }

# The Helm release an object belongs to (namespace/name), empty when none.
owner_of() {
  k get "$1" -o 'jsonpath={.metadata.annotations.meta\.helm\.sh/release-namespace}/{.metadata.annotations.meta\.helm\.sh/release-name}' 2>/dev/null |
    grep -v '^/$' || true
}

if k get crd "$crd" >/dev/null 2>&1; then
  owner=$(owner_of "crd/$crd")
  if [ "$owner" != "$release_ns/$release" ]; then
    if [ "${TAKE_OVER:-0}" != 1 ]; then
      if [ -n "$owner" ]; then who="Helm release $owner"; else who="no Helm release (applied with kubectl, or by another tool)"; fi
      cat >&2 <<MSG
chart-release: the CloneSet CRD ($crd) belongs to $who, not to this
project's release $release_ns/$release. Installing here would take every CloneSet on the cluster
over from whoever manages them now, so nothing was changed.
  - To take them over from Kruise, follow docs/migrating-from-kruise.md (scale Kruise's manager to 0 first).
  - If that is what you want here, run again with TAKE_OVER=1: it runs \`cloneset-operator migrate\`,
    which moves the CRD to this release once no Kruise manager runs.
MSG
      exit 1
    fi
    "${OPERATOR:?OPERATOR names the operator binary}" migrate --kubeconfig "$kc" --release-name "$release" --release-namespace "$release_ns"
  fi
fi
if [ "${TAKE_OVER:-0}" = 1 ]; then
  # The admission policies and bindings of an earlier `kubectl apply -f crds/`: ours, only unlabelled.
  for obj in validatingadmissionpolicy/clonesets.apps.kruise.io validatingadmissionpolicybinding/clonesets.apps.kruise.io \
    validatingadmissionpolicy/template-fields.clonesets.apps.kruise.io validatingadmissionpolicybinding/template-fields.clonesets.apps.kruise.io; do
    if k get "$obj" >/dev/null 2>&1 && [ -z "$(owner_of "$obj")" ]; then
      k label --overwrite "$obj" app.kubernetes.io/managed-by=Helm >/dev/null
      k annotate --overwrite "$obj" meta.helm.sh/release-name="$release" meta.helm.sh/release-namespace="$release_ns" >/dev/null
      echo "chart-release: $obj adopted into Helm release $release_ns/$release" >&2
    fi
  done
fi
"$helm" upgrade --install "$release" "$root/charts/cloneset-operator" --namespace "$release_ns" --kubeconfig "$kc" "$@" >/dev/null
echo "chart-release: Helm release $release_ns/$release installed ($*)" >&2
