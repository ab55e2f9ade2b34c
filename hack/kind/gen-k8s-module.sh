#!/usr/bin/env bash
# hack/kind/gen-k8s-module.sh vX.Y.Z: create (or move to a new patch release) the Go module
# e2e/kind/k8s/<minor> from which the kind node image of that minor is built: the release's
# kubeadm, kubelet, kubectl, kube-proxy, control plane and the etcd server its go.mod pins.
LOG_NAME=kind-gen
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
version=${1:?usage: gen-k8s-module.sh vX.Y.Z}; version=v${version#v}
dir=$REPO/e2e/kind/k8s/$(minor_of "$version")
mkdir -p "$dir"; cd "$dir"
[ -f go.mod ] || go mod init "github.com/dra-fake/dra-fake/e2e/kind/k8s/$(minor_of "$version")" 2>/dev/null
go mod edit -go=1.26.0
cat > tools.go <<GO
//go:build tools

// Package tools pins the Kubernetes $(minor_of "$version") commands of the kind node image
// (hack/kind/node-image.sh), so that go mod tidy keeps exactly their versions.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
"$REPO/hack/gen-k8s-replaces.sh" "$version" "$dir"
# etcd: the server release k8s.io/kubernetes itself requires (its integration tests run it).
# shellcheck disable=SC2016  # $1/$2 are awk's
etcd=$(go mod download -json "k8s.io/kubernetes@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])' \
  | xargs awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}')
[ -n "$etcd" ] && go mod edit -require "go.etcd.io/etcd/server/v3@$etcd"
go mod tidy
log "e2e/kind/k8s/$(minor_of "$version"): k8s.io/kubernetes $version, etcd ${etcd:-as resolved}"
