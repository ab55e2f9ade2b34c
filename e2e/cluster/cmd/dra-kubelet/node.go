package main

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// simulatedNode registers a Ready Node and keeps its heartbeat fresh, as the kubelet's node
// status manager does (simplified: one Ready condition, no real resource accounting).
type simulatedNode struct {
	client                  kubernetes.Interface
	name, cpu, memory, pods string
	labels                  map[string]string
}

func (n *simulatedNode) get(ctx context.Context) (*v1.Node, error) {
	return n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
}

func (n *simulatedNode) resources() (v1.ResourceList, error) {
	list := v1.ResourceList{}
	for name, value := range map[v1.ResourceName]string{v1.ResourceCPU: n.cpu, v1.ResourceMemory: n.memory, v1.ResourcePods: n.pods} {
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", name, value, err)
		}
		list[name] = q
	}
	return list, nil
}

func (n *simulatedNode) register(ctx context.Context) error {
	res, err := n.resources()
	if err != nil {
		return err
	}
	labels := map[string]string{
		"kubernetes.io/hostname": n.name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"dra-fake.dev/harness":   "dra-kubelet",
	}
	for k, v := range n.labels {
		labels[k] = v
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels}}
	if _, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// Labels of an existing node are merged (the real kubelet reconciles its own labels too).
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := n.get(ctx)
		if err != nil {
			return err
		}
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		for k, v := range labels {
			cur.Labels[k] = v
		}
		// The TaintNodesByCondition admission plugin adds not-ready on create; no node
		// lifecycle controller runs to remove it, so the "kubelet" does once it is Ready.
		var taints []v1.Taint
		for _, t := range cur.Spec.Taints {
			if t.Key != v1.TaintNodeNotReady && t.Key != v1.TaintNodeUnreachable {
				taints = append(taints, t)
			}
		}
		cur.Spec.Taints = taints
		_, err = n.client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return err
	}
	return n.updateStatus(ctx, res)
}

func (n *simulatedNode) updateStatus(ctx context.Context, res v1.ResourceList) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := n.get(ctx)
		if err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status.Capacity = res
		cur.Status.Allocatable = res
		cur.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}, {Type: v1.NodeHostName, Address: n.name}}
		cur.Status.NodeInfo.KubeletVersion = "dra-kubelet"
		cur.Status.NodeInfo.OperatingSystem = "linux"
		cur.Status.NodeInfo.Architecture = "amd64"
		ready := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			Message: "dra-kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}
		replaced := false
		for i, c := range cur.Status.Conditions {
			if c.Type == v1.NodeReady {
				if c.Status == v1.ConditionTrue {
					ready.LastTransitionTime = c.LastTransitionTime
				}
				cur.Status.Conditions[i] = ready
				replaced = true
			}
		}
		if !replaced {
			cur.Status.Conditions = append(cur.Status.Conditions, ready)
		}
		_, err = n.client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func (n *simulatedNode) heartbeat(ctx context.Context) {
	res, _ := n.resources()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(40 * time.Second):
		}
		if err := n.updateStatus(ctx, res); err != nil {
			klog.FromContext(ctx).Error(err, "node heartbeat failed")
		}
	}
}
