//go:build tools

// Package tools pins the reference driver's kubelet plugin, built from its published Go module
// (sigs.k8s.io/dra-example-driver at the tag in go.mod) by bench/refdriver/build.sh.
package tools

import (
	_ "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin"
)
