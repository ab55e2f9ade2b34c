//go:build tools

// Package tools pins the upstream commands built from this module, so that `go mod tidy` keeps
// them (and exactly their versions) in go.mod and go.sum: the local control plane of
// `make cluster-build`, and the kind node image of the same release (hack/kind/node-image.sh).
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
