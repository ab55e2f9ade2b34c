#!/usr/bin/env bash
# Build the local control plane from the pinned Go modules in e2e/cluster into e2e/cluster/bin:
# etcd, kube-apiserver, kube-scheduler, kube-controller-manager and our dra-kubelet harness.
# Reuses the default Go module and build caches; prints progress and elapsed time; fails loudly.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mod="$here/e2e/cluster"
version=$(cat "$mod/K8S_VERSION")
major=${version#v}; major=${major%%.*}
minor=${version#v*.}; minor=${minor%%.*}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
targets=(
  "dra-kubelet=./cmd/dra-kubelet"
  "etcd=go.etcd.io/etcd/server/v3"
  "kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
  "kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager"
)
cd "$mod"
mkdir -p bin
# Inputs of the build: when unchanged since the last successful build, there is nothing to do.
stamp=$( (cat go.mod go.sum K8S_VERSION; find cmd -type f -name '*.go' | sort | xargs cat; go version; echo "$ldflags") | sha256sum | cut -c1-16)
if [ "${FORCE:-}" != 1 ] && [ "$(cat bin/.stamp 2>/dev/null)" = "$stamp" ] && [ -x bin/dra-kubelet ]; then
  echo "cluster-build: binaries in e2e/cluster/bin are up to date ($version; FORCE=1 rebuilds)"; exit 0
fi
rm -f bin/.stamp
start=$(date +%s)
echo "cluster-build: Kubernetes $version with $(go version | cut -d' ' -f3), $(nproc) cores; caches: $(go env GOMODCACHE) $(go env GOCACHE)"
go mod download
i=0
for t in "${targets[@]}"; do
  i=$((i + 1))
  name=${t%%=*}; pkg=${t#*=}
  t0=$(date +%s)
  printf '[%d/%d] %-24s ' "$i" "${#targets[@]}" "$name"
  # -v lists packages as they compile: count them as progress on a single line.
  if ! go build -v -trimpath -ldflags "$ldflags" -o "bin/$name" "$pkg" 2> "bin/.$name.log"; then
    echo "FAILED"; echo "---- go build $pkg ----" >&2; grep -v '^[a-z0-9./_-]*$' "bin/.$name.log" >&2 || cat "bin/.$name.log" >&2
    exit 1
  fi
  echo "ok  $(wc -l < "bin/.$name.log") packages compiled, $(( $(date +%s) - t0 ))s"
done
echo "$stamp" > bin/.stamp
echo "cluster-build: done in $(( $(date +%s) - start ))s; binaries: $(du -sh bin | cut -f1); GOCACHE $(du -sh "$(go env GOCACHE)" 2>/dev/null | cut -f1), GOMODCACHE $(du -sh "$(go env GOMODCACHE)" 2>/dev/null | cut -f1)"
