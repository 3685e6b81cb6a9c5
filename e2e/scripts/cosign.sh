#!/usr/bin/env bash
# Runs the pinned cosign (sigstore's signing tool), built once from the Go module proxy into the
# cache: `make publish` signs a release with it, and the e2e test of a published release makes
# its key and verifies with it what docs/install.md has a platform team verify.
#
# Usage: cosign.sh ARGS...   (cosign's own arguments)
set -euo pipefail
COSIGN_VERSION="${COSIGN_VERSION:-v2.6.5}"
bin=$(bash "$(dirname "$0")/build-go-tool.sh" github.com/sigstore/cosign/v2/cmd/cosign "$COSIGN_VERSION" \
  "-X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION")
exec "$bin" "$@"
