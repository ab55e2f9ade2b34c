#!/usr/bin/env bash
# Build the reference driver's kubelet plugin from its published Go module (the tag pinned in
# go.mod; nothing vendored) and our drabench client into bench/refdriver/bin (git-ignored).
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p bin
go build -trimpath -o bin/dra-example-kubeletplugin sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin
go build -trimpath -o bin/drabench ./cmd/drabench
