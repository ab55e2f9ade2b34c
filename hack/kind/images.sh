#!/usr/bin/env bash
# hack/kind/images.sh VERSION...: everything a kind cluster of these Kubernetes releases needs, built
# offline (make kind-images K8S=...). Shared parts are built once and reused; a second run with
# nothing changed only checks stamps and images.
LOG_NAME=kind-images
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
[ $# -gt 0 ] || set -- "$(cat "$REPO/e2e/cluster/K8S_VERSION")"
here=$(dirname "$0")
"$here/tools.sh"
"$here/host.sh" setup
"$here/node-base.sh"
for version in "$@"; do "$here/node-image.sh" "$version"; done
"$here/driver-image.sh"
"$here/kwok-image.sh"
log "images ready: $(docker images --format '{{.Repository}}:{{.Tag}} ({{.Size}})' \
  | grep -E "^($IMAGE_PREFIX/(node|kwok):|dra-fake:kind|dra-fake-shell:|dra-fake-nvml-consumers:)" | tr '\n' ' ')"
