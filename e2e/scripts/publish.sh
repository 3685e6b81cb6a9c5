#!/usr/bin/env bash
# Publishes a release `make release` gathered: the image and both charts pushed to an OCI
# registry, each signed with cosign by its digest, and the SBOM attached to the image as a
# signed CycloneDX attestation; the references, by digest, go to RELEASE_DIR/published.txt.
# `make publish` runs it; the e2e test of a published release runs it against the test registry.
#
# Usage: publish.sh RELEASE_DIR VERSION REGISTRY
#        REGISTRY is host[:port]/path: the image goes to REGISTRY/cloneset-operator:VERSION, each
#        chart to oci://REGISTRY/charts/<chart> with its version.
# Env:   COSIGN_KEY       the key to sign with (a file or a KMS URI); unset, cosign signs keylessly
#                         (an OIDC identity, as the hosted release workflow has)
#        COSIGN_PASSWORD  the key's passphrase (cosign reads it)
#        TLOG=0           no transparency log entry (a key, and no Rekor in reach)
#        PLAIN_HTTP=1     a registry without TLS (the test registry on loopback)
#        COSIGN, HELM     the binaries (default: the pinned ones, built once into the cache)
set -euo pipefail

dir=$1 version=$2 registry=${3%/}
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -n "$registry" ] || { echo "publish: name the registry: make publish REGISTRY=host/path" >&2; exit 1; }
sbom="$dir/cloneset-operator-$version.cdx.json"
# The images the release workflow's builders made, one per architecture
# (cloneset-operator-<version>-<arch>.oci.tar), go out as one index over them; else the one image
# `make release` built here.
shopt -s nullglob
per_arch=("$dir/cloneset-operator-$version"-*.oci.tar)
image_archive="$dir/cloneset-operator-$version.oci.tar" all=()
if [ ${#per_arch[@]} -gt 0 ]; then
  image_archive="$dir/.cloneset-operator-$version-index.oci.tar" all=(--all)
  "${LOCAL_CLUSTER:?the local-cluster binary (make publish names it)}" image-index \
    --reference "docker.io/library/cloneset-operator:$version" --out "$image_archive" "${per_arch[@]}"
fi
for f in "$image_archive" "$sbom" "$dir/cloneset-operator-$version.tgz" "$dir/cloneset-operator-migrate-$version.tgz"; do
  [ -f "$f" ] || { echo "publish: $f is missing: run \`make release\` first" >&2; exit 1; }
done
helm=${HELM:-$(bash "$root/e2e/scripts/build-helm.sh")}
cosign=${COSIGN:-$root/e2e/scripts/cosign.sh}

skopeo_tls=() helm_tls=() cosign_opts=()
if [ "${PLAIN_HTTP:-0}" = 1 ]; then
  skopeo_tls=(--dest-tls-verify=false) helm_tls=(--plain-http) cosign_opts=(--allow-http-registry --allow-insecure-registry)
fi
[ -z "${COSIGN_KEY:-}" ] || cosign_opts+=(--key "$COSIGN_KEY")
[ "${TLOG:-1}" = 1 ] || cosign_opts+=(--tlog-upload=false)

out="$dir/published.txt"
: >"$out"
# The image, with the digest the registry serves it under.
skopeo copy --quiet "${all[@]}" "${skopeo_tls[@]}" --digestfile "$dir/.image-digest" \
  "oci-archive:$image_archive" "docker://$registry/cloneset-operator:$version"
image="$registry/cloneset-operator@$(cat "$dir/.image-digest")"
rm -f "$dir/.image-digest" "$dir/.cloneset-operator-$version-index.oci.tar"
# --recursive: an index and each architecture's image, whichever digest a node pulls by.
"$cosign" sign --yes --recursive "${cosign_opts[@]}" "$image" >&2
"$cosign" attest --yes "${cosign_opts[@]}" --type cyclonedx --predicate "$sbom" "$image" >&2
echo "image $image" >>"$out"

# Each chart; helm push prints the digest it pushed.
for chart in cloneset-operator cloneset-operator-migrate; do
  pushed=$("$helm" push "$dir/$chart-$version.tgz" "oci://$registry/charts" "${helm_tls[@]}" 2>&1)
  digest=$(echo "$pushed" | sed -n 's/^Digest: //p')
  [ -n "$digest" ] || { echo "publish: helm push printed no digest for $chart:" >&2; echo "$pushed" >&2; exit 1; }
  "$cosign" sign --yes "${cosign_opts[@]}" "$registry/charts/$chart@$digest" >&2
  echo "chart oci://$registry/charts/$chart@$digest" >>"$out"
done
echo "publish: cloneset-operator $version published to $registry, signed:" >&2
cat "$out"
