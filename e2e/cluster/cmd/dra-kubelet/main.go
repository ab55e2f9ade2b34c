// Command dra-kubelet is a kubelet stand-in for one simulated node. It runs the kubelet's own
// plugin manager and DRA manager (k8s.io/kubernetes/pkg/kubelet/...), so DRA drivers are
// registered, prepared and unprepared by the real kubelet code, but no containers are started:
// a pod whose resources were prepared is reported Running, and the CDI devices each container
// would receive are resolved with the official CDI library and recorded for tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

type options struct {
	kubeconfig string
	nodeName   string
	stateDir   string
	cpu        string
	memory     string
	pods       string
	labels     string
}

func main() {
	var o options
	klog.InitFlags(nil)
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server (required)")
	flag.StringVar(&o.nodeName, "node-name", "", "name of the simulated node (required)")
	flag.StringVar(&o.stateDir, "state-dir", "", "node state directory; holds plugins_registry/, plugins/, cdi/, dra/ and pods/ (required)")
	flag.StringVar(&o.cpu, "cpu", "32", "cpu capacity of the node")
	flag.StringVar(&o.memory, "memory", "256Gi", "memory capacity of the node")
	flag.StringVar(&o.pods, "pods", "110", "pod capacity of the node")
	flag.StringVar(&o.labels, "labels", "", "extra node labels, k=v,k=v")
	flag.Parse()
	if o.kubeconfig == "" || o.nodeName == "" || o.stateDir == "" {
		fmt.Fprintln(os.Stderr, "dra-kubelet: --kubeconfig, --node-name and --state-dir are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "dra-kubelet failed")
		os.Exit(1)
	}
}

// nodePaths are the kubelet's directories, relocated under the node's state dir.
type nodePaths struct {
	registry, plugins, cdi, draState, pods string
}

func newNodePaths(stateDir string) (nodePaths, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nodePaths{}, err
	}
	p := nodePaths{
		registry: filepath.Join(abs, "plugins_registry"),
		plugins:  filepath.Join(abs, "plugins"),
		cdi:      filepath.Join(abs, "cdi"),
		draState: filepath.Join(abs, "dra"),
		pods:     filepath.Join(abs, "pods"),
	}
	for _, d := range []string{p.registry, p.plugins, p.cdi, p.draState, p.pods} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return p, err
		}
	}
	return p, nil
}

func parseLabels(s string) (map[string]string, error) {
	labels := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("label %q is not k=v", kv)
		}
		labels[k] = v
	}
	return labels, nil
}

func run(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx).WithValues("node", o.nodeName)
	ctx = klog.NewContext(ctx, logger)
	paths, err := newNodePaths(o.stateDir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	restConfig.UserAgent = "dra-kubelet/" + o.nodeName
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	extraLabels, err := parseLabels(o.labels)
	if err != nil {
		return err
	}

	node := &simulatedNode{client: client, name: o.nodeName, cpu: o.cpu, memory: o.memory, pods: o.pods, labels: extraLabels}
	if err := node.register(ctx); err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	go node.heartbeat(ctx)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: o.nodeName})

	pods := newPodWorker(client, recorder, o.nodeName, paths)

	// The kubelet's DRA manager, exactly as the kubelet's container manager wires it.
	draManager, err := dra.NewManager(logger, client, paths.draState)
	if err != nil {
		return fmt.Errorf("DRA manager: %w", err)
	}
	allSourcesReady := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if err := draManager.Start(ctx, pods.activePods, node.get, allSourcesReady); err != nil {
		return fmt.Errorf("start DRA manager: %w", err)
	}
	defer draManager.Stop()
	pods.dra = draManager
	go pods.followHealth(ctx)

	// The kubelet's plugin manager watches the registry dir and registers DRA plugins.
	pm := pluginmanager.NewPluginManager(paths.registry, recorder)
	pm.AddHandler(pluginwatcherapi.DRAPlugin, draManager.GetWatcherHandler())
	go pm.Run(ctx, allSourcesReady, ctx.Done())

	logger.Info("dra-kubelet running", "registry", paths.registry, "plugins", paths.plugins, "cdiRoot", paths.cdi)
	return pods.run(ctx)
}

// waitUntil polls cond until it returns true or the context ends.
func waitUntil(ctx context.Context, every time.Duration, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(every):
		}
	}
}
