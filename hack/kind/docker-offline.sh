#!/usr/bin/env bash
# hack/kind/docker-offline.sh ARGS...: docker, for CONTAINER_TOOL of `make release` on a machine
# without a registry (hack/kind/previous-release.sh). `docker build` gets the offline bases that
# make kind-images built and installs from build/wheels (the classic builder, as lib.sh's
# docker_build); every other command is docker's as given.
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
if [ "${1:-}" = build ]; then
  shift
  export DOCKER_BUILDKIT=0
  set -- build "${OFFLINE_BUILD_ARGS[@]}" "$@"
fi
exec docker "$@"
