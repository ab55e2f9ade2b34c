//go:build tools

// Package tools pins the upstream commands built by `make cluster-build`, so that
// `go mod tidy` keeps them (and exactly their versions) in go.mod and go.sum.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
