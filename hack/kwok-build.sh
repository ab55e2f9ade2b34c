#!/usr/bin/env bash
# Build KWOK's controller from its pinned Go module (e2e/cluster/kwok) into e2e/cluster/bin/kwok: it
# plays the kubelet of `dra-fake fleet`'s nodes (docs/local-cluster.md#kwok-fleets). A module of its
# own, because KWOK pins its own Kubernetes libraries, apart from the control plane's.
# Reuses the default Go module and build caches; nothing to do when its inputs are unchanged.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mod="$here/e2e/cluster/kwok"
bin="$here/e2e/cluster/bin"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
cd "$mod"
mkdir -p "$bin"
stamp=$( (cat go.mod go.sum; go version) | sha256sum | cut -c1-16)
if [ "${FORCE:-}" != 1 ] && [ "$(cat "$bin/.kwok.stamp" 2>/dev/null)" = "$stamp" ] && [ -x "$bin/kwok" ]; then
  echo "kwok-build: $bin/kwok is up to date (FORCE=1 rebuilds)"; exit 0
fi
rm -f "$bin/.kwok.stamp"
version=$(go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
start=$(date +%s)
echo "kwok-build: KWOK $version with $(go version | cut -d' ' -f3)"
go mod download
if ! go build -v -trimpath -ldflags "-s -w" -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok 2> "$bin/.kwok.log"; then
  echo "kwok-build: FAILED" >&2; grep -v '^[a-z0-9./_-]*$' "$bin/.kwok.log" >&2 || cat "$bin/.kwok.log" >&2
  exit 1
fi
echo "$stamp" > "$bin/.kwok.stamp"
echo "kwok-build: done in $(( $(date +%s) - start ))s, $(wc -l < "$bin/.kwok.log") packages compiled"
