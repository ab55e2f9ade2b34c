# Sourced by the hack/kind scripts: paths, pins, progress and freshness stamps.
# Everything is built offline from Debian packages and Go modules (docs/kind.md).
# shellcheck shell=bash disable=SC2034  # its pins and names are used by the scripts sourcing it
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KIND_WORK=${KIND_WORK:-$REPO/.kind}          # git-ignored: binaries, rootfs, stamps, kubeconfigs
KIND_BIN=$KIND_WORK/bin
mkdir -p "$KIND_BIN"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
export PATH=$KIND_BIN:$REPO/.tools/bin:$PATH

# Pins of the shared node components. kind v0.33.0 ships the same containerd and runc
# (images/base/Dockerfile); crictl and CoreDNS are the newest the Go module proxy serves.
KIND_VERSION=v0.33.0
CONTAINERD_VERSION=v2.3.4
RUNC_VERSION=v1.4.3
CRICTL_VERSION=v1.37.0
COREDNS_VERSION=v1.14.6
DEBIAN_SUITE=bookworm   # systemd 252 still boots on cgroup v1 hosts (kind's trixie base does not)
IMAGE_PREFIX=dra-fake-kind   # local image names: never pushed, never pulled
# The Dockerfile's offline bases (hack/kind/driver-image.sh builds them with debootstrap) and the
# build arguments that use them with the wheels in build/wheels instead of a package index.
PYTHON_BASE=$IMAGE_PREFIX/python:3.11-$DEBIAN_SUITE
NATIVE_BASE=$IMAGE_PREFIX/native:$DEBIAN_SUITE
OFFLINE_BUILD_ARGS=(--build-arg "PYTHON_IMAGE=$PYTHON_BASE" --build-arg "NATIVE_IMAGE=$NATIVE_BASE" --build-arg PIP_OFFLINE=1)

_t0=$(date +%s)
log() { printf '[%s %4ss] %s\n' "${LOG_NAME:-kind}" "$(( $(date +%s) - _t0 ))" "$*"; }
die() { log "error: $*" >&2; exit 1; }

# fresh NAME KEY: true when NAME was last built from exactly KEY (a hash of its inputs).
fresh() { [ "${FORCE:-}" != 1 ] && [ "$(cat "$KIND_WORK/stamps/${1//[\/:]/_}" 2>/dev/null)" = "$2" ]; }
stamp() { mkdir -p "$KIND_WORK/stamps"; echo "$2" > "$KIND_WORK/stamps/${1//[\/:]/_}"; }
key() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }
# Hash of files (base name, mode, content), for stamps that depend on scripts or config files. Not the
# path as given: a script run as hack/kind/x.sh and as $REPO/hack/kind/x.sh must give one key.
files_key() { (for f in "$@"; do printf '%s %s\n' "${f##*/}" "$(stat -c %a "$f")"; cat "$f"; done) | sha256sum | cut -c1-16; }

# docker build with the classic builder (Debian's docker 20.10 has no BuildKit); quiet unless it fails.
docker_build() {
  local out
  out=$(DOCKER_BUILDKIT=0 docker build "$@" 2>&1) || { echo "$out" >&2; return 1; }
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# Kubernetes release for a minor ("1.33") or a full version ("1.33.13" / "v1.33.13"), and the
# Go module it is built from: e2e/kind/k8s/<minor> per minor, e2e/cluster for the local control
# plane's own release (its binaries are then shared with make cluster-build).
k8s_module() {
  local want=${1#v} dir version
  for dir in "$REPO/e2e/cluster" "$REPO"/e2e/kind/k8s/*/; do
    dir=${dir%/}
    [ -f "$dir/K8S_VERSION" ] || continue
    version=$(cat "$dir/K8S_VERSION")
    if [ "${version#v}" = "$want" ] || [ "$(minor_of "$version")" = "$want" ]; then
      echo "$dir $version"; return 0
    fi
  done
  return 1
}
minor_of() { local v=${1#v}; echo "${v%.*}"; }
# Directory of a module version in the module cache (downloaded if needed).
go_mod_dir() {
  (cd "$REPO/e2e/cluster" && go mod download -json "$1") | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}
k8s_versions() { # every pinned release, oldest first
  cat "$REPO"/e2e/kind/k8s/*/K8S_VERSION "$REPO/e2e/cluster/K8S_VERSION" | sort -V -u
}
