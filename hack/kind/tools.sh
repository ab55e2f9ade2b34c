#!/usr/bin/env bash
# The shared node and host binaries, built from Go modules into .kind/bin (once per pin):
# kind, containerd + ctr + containerd-shim-runc-v2, runc, crictl, CoreDNS, and pause (C, from the
# Kubernetes module). Nothing is downloaded but Go modules.
LOG_NAME=kind-tools
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
goversion=$(go version | cut -d' ' -f3)

# hack/kind/tools.sh [NAME...]: only those (e.g. kind for e2e/kind/run.sh).
only=" $* "
# build NAME KEY CMD...: run CMD unless NAME was built from KEY; log the time it took.
build() {
  local name=$1 k=$2; shift 2
  if [ "$only" != "  " ] && [[ $only != *" $name "* ]]; then return 0; fi
  if fresh "tool-$name" "$k"; then return 0; fi
  local t0; t0=$(date +%s)
  log "building $name"
  "$@" || die "building $name failed"
  stamp "tool-$name" "$k"
  log "built $name in $(( $(date +%s) - t0 ))s"
}

build kind "$(key "$KIND_VERSION" "$goversion")" \
  env CGO_ENABLED=0 GOBIN="$KIND_BIN" go install -trimpath "sigs.k8s.io/kind@$KIND_VERSION"

cd_pkgs=()
for c in containerd ctr containerd-shim-runc-v2; do
  cd_pkgs+=("github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION")
done
build containerd "$(key "$CONTAINERD_VERSION" "$goversion")" \
  env CGO_ENABLED=0 GOBIN="$KIND_BIN" go install -trimpath -tags "no_btrfs no_devmapper no_zfs" \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" "${cd_pkgs[@]}"

# runc needs cgo and libseccomp (Debian's libseccomp-dev on the host, libseccomp2 in the node).
[ -f /usr/include/seccomp.h ] || die "runc needs libseccomp-dev (apt-get install libseccomp-dev)"
build runc "$(key "$RUNC_VERSION" "$goversion")" \
  env CGO_ENABLED=1 GOBIN="$KIND_BIN" go install -trimpath -tags seccomp \
  -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@$RUNC_VERSION"

build crictl "$(key "$CRICTL_VERSION" "$goversion")" \
  env CGO_ENABLED=0 GOBIN="$KIND_BIN" go install -trimpath -ldflags "-s -w" \
  "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"

build coredns "$(key "$COREDNS_VERSION" "$goversion")" \
  env CGO_ENABLED=0 GOBIN="$KIND_BIN" go install -trimpath -ldflags "-s -w" \
  "github.com/coredns/coredns@$COREDNS_VERSION"

# pause: Kubernetes' own C source, from the module of the local control plane's release.
k8s=$(cat "$REPO/e2e/cluster/K8S_VERSION")
pause_src=$(go_mod_dir "k8s.io/kubernetes@$k8s")/build/pause/linux/pause.c
build pause "$(key "$k8s" "$(gcc --version | head -1)")" \
  gcc -Os -Wall -Werror -static -DVERSION=dra-fake-kind -o "$KIND_BIN/pause" "$pause_src"
log "tools ready in .kind/bin: ${*:-kind containerd ctr containerd-shim-runc-v2 runc crictl coredns pause}"
