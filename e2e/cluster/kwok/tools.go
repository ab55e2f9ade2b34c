//go:build tools

// Package tools pins KWOK's controller (sigs.k8s.io/kwok/cmd/kwok), built by hack/kwok-build.sh into
// e2e/cluster/bin/kwok: it plays the kubelet of `dra-fake fleet`'s nodes (docs/local-cluster.md).
// A module of its own: KWOK pins its own Kubernetes libraries, apart from the control plane's.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
