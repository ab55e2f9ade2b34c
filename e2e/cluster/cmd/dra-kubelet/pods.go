package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
)

// CDIAnnotation holds, per container, the CDI device IDs the kubelet would pass to the runtime.
const CDIAnnotation = "dra-fake.dev/cdi-devices"

// Reasons as the kubelet records them.
const (
	reasonFailedPrepare   = "FailedPrepareDynamicResources"
	reasonFailedUnprepare = "FailedUnprepareDynamicResources"
	reasonFailedCDI       = "Failed"
	reasonStarted         = "Started"
)

// podWorker plays the kubelet's pod lifecycle without containers: prepare → "start" → unprepare.
type podWorker struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	nodeName string
	paths    nodePaths
	dra      *dra.Manager
	exec     *execManager // containers run as local processes (exec.go)

	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	store    cache.Store // ready before the DRA manager starts: its reconcile loop calls activePods
	queue    workqueue.TypedRateLimitingInterface[types.UID]

	mu      sync.Mutex
	known   map[types.UID]*v1.Pod // last seen version, to unprepare pods that vanished
	started map[types.UID]bool    // prepared and reported Running
}

func newPodWorker(client kubernetes.Interface, recorder record.EventRecorder, nodeName string, paths nodePaths) *podWorker {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}))
	informer := factory.Core().V1().Pods().Informer()
	return &podWorker{
		client: client, recorder: recorder, nodeName: nodeName, paths: paths,
		factory: factory, informer: informer, store: informer.GetStore(),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](
			500*time.Millisecond, 30*time.Second)),
		known:   map[types.UID]*v1.Pod{},
		started: map[types.UID]bool{},
		exec:    newExecManager(client, filepath.Dir(paths.pods)),
	}
}

// activePods is what the DRA manager's reconcile loop keeps prepared: pods not yet finished.
func (w *podWorker) activePods() []*v1.Pod {
	var active []*v1.Pod
	for _, obj := range w.store.List() {
		pod := obj.(*v1.Pod)
		if !isFinished(pod) {
			active = append(active, pod)
		}
	}
	return active
}

func isFinished(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

func (w *podWorker) run(ctx context.Context) error {
	informer := w.informer
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if pod, ok := obj.(*v1.Pod); ok {
			w.mu.Lock()
			w.known[pod.UID] = pod
			w.mu.Unlock()
			w.queue.Add(pod.UID)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	w.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	go func() { <-ctx.Done(); w.queue.ShutDown() }()
	var wg sync.WaitGroup
	for range podSyncWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.syncNext(ctx) {
			}
		}()
	}
	wg.Wait()
	return nil
}

// podSyncWorkers: the kubelet syncs each pod in its own goroutine, so a pod whose prepare waits
// (a ComputeDomain channel retries until its node's IMEX daemon pod is Ready) holds up no other
// pod; the work queue never hands one pod to two workers.
const podSyncWorkers = 8

// syncNext syncs one queued pod; false once the queue is shut down.
func (w *podWorker) syncNext(ctx context.Context) bool {
	uid, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(uid)
	if err := w.sync(ctx, uid); err != nil {
		klog.FromContext(ctx).Info("pod sync failed, will retry", "podUID", uid, "err", err)
		w.queue.AddRateLimited(uid)
	} else {
		w.queue.Forget(uid)
	}
	return true
}

func (w *podWorker) current(uid types.UID) (*v1.Pod, bool) {
	w.mu.Lock()
	last := w.known[uid]
	w.mu.Unlock()
	if last == nil {
		return nil, false
	}
	obj, exists, err := w.store.Get(last)
	if err != nil || !exists {
		return last, false
	}
	pod := obj.(*v1.Pod)
	if pod.UID != uid { // same name, new pod
		return last, false
	}
	return pod, true
}

func (w *podWorker) sync(ctx context.Context, uid types.UID) error {
	pod, exists := w.current(uid)
	if pod == nil {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", uid)
	ctx = klog.NewContext(ctx, logger)
	if !exists || pod.DeletionTimestamp != nil || isFinished(pod) {
		return w.stop(ctx, pod, exists && pod.DeletionTimestamp != nil)
	}
	w.mu.Lock()
	started := w.started[uid]
	w.mu.Unlock()
	if started {
		return nil
	}
	return w.start(ctx, pod)
}

func (w *podWorker) start(ctx context.Context, pod *v1.Pod) error {
	if err := w.dra.PrepareResources(ctx, pod); err != nil {
		w.recorder.Event(pod, v1.EventTypeWarning, reasonFailedPrepare, err.Error())
		return err
	}
	record := podRecord{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Containers: map[string]containerRecord{}}
	ids := map[string][]string{}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		info, err := w.dra.GetResources(pod, c)
		if err != nil {
			w.recorder.Event(pod, v1.EventTypeWarning, reasonFailedPrepare, err.Error())
			return err
		}
		names := []string{}
		for _, d := range info.CDIDevices {
			names = append(names, d.Name)
		}
		edits, err := resolveCDI(w.paths.cdi, names)
		if err != nil {
			msg := fmt.Sprintf("Error: failed to create containerd container: CDI device injection failed: %v", err)
			w.recorder.Event(pod, v1.EventTypeWarning, reasonFailedCDI, msg)
			return err
		}
		ids[c.Name] = names
		record.Containers[c.Name] = edits
	}
	if err := writeJSON(w.recordPath(pod), record); err != nil {
		return err
	}
	if err := w.annotate(ctx, pod, ids); err != nil {
		return err
	}
	if err := w.setRunning(ctx, pod, w.exec.notReadyAtStart(pod)); err != nil {
		return err
	}
	w.exec.start(ctx, pod, record)
	w.mu.Lock()
	w.started[pod.UID] = true
	w.mu.Unlock()
	for _, c := range pod.Spec.Containers {
		w.recorder.Eventf(pod, v1.EventTypeNormal, reasonStarted, "Started container %s (simulated)", c.Name)
	}
	klog.FromContext(ctx).Info("pod started", "cdiDevices", ids)
	return nil
}

func (w *podWorker) stop(ctx context.Context, pod *v1.Pod, deleteFromAPI bool) error {
	w.exec.stop(pod.UID) // containers stop before their resources are unprepared
	if err := w.dra.UnprepareResources(ctx, pod); err != nil {
		w.recorder.Event(pod, v1.EventTypeWarning, reasonFailedUnprepare, err.Error())
		return err
	}
	if err := os.Remove(w.recordPath(pod)); err != nil && !os.IsNotExist(err) {
		return err
	}
	if deleteFromAPI {
		// The kubelet's status manager finishes a graceful deletion once containers are gone.
		err := w.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	w.mu.Lock()
	delete(w.started, pod.UID)
	if !deleteFromAPI && !isFinished(pod) {
		delete(w.known, pod.UID)
	}
	w.mu.Unlock()
	klog.FromContext(ctx).Info("pod stopped, resources unprepared")
	return nil
}

func (w *podWorker) recordPath(pod *v1.Pod) string {
	return filepath.Join(w.paths.pods, fmt.Sprintf("%s_%s_%s.json", pod.Namespace, pod.Name, pod.UID))
}

func (w *podWorker) annotate(ctx context.Context, pod *v1.Pod, ids map[string][]string) error {
	value, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{CDIAnnotation: string(value)}}})
	if err != nil {
		return err
	}
	_, err = w.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (w *podWorker) setRunning(ctx context.Context, pod *v1.Pod, notReady map[string]bool) error {
	cur, err := w.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if cur.UID != pod.UID {
		return fmt.Errorf("pod was replaced")
	}
	now := metav1.Now()
	cur.Status.Phase = v1.PodRunning
	cur.Status.HostIP = "127.0.0.1"
	cur.Status.HostIPs = []v1.HostIP{{IP: "127.0.0.1"}}
	cur.Status.PodIP = "127.0.0.1"
	cur.Status.PodIPs = []v1.PodIP{{IP: "127.0.0.1"}}
	if cur.Status.StartTime == nil {
		cur.Status.StartTime = &now
	}
	cur.Status.Conditions = setConditions(cur.Status.Conditions, now,
		v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady, v1.PodScheduled)
	for i := range cur.Status.Conditions { // exec'd containers become Ready by their probe (exec.go)
		if t := cur.Status.Conditions[i].Type; len(notReady) > 0 && (t == v1.ContainersReady || t == v1.PodReady) {
			cur.Status.Conditions[i].Status = v1.ConditionFalse
		}
	}
	cur.Status.ContainerStatuses = nil
	for _, c := range cur.Spec.Containers {
		cur.Status.ContainerStatuses = append(cur.Status.ContainerStatuses, v1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: !notReady[c.Name], Started: new(bool),
			ContainerID: "dra-kubelet://" + string(pod.UID) + "/" + c.Name,
			State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		})
		*cur.Status.ContainerStatuses[len(cur.Status.ContainerStatuses)-1].Started = true
	}
	// As the kubelet's status manager: the devices' health from the plugins' health streams.
	w.dra.UpdateAllocatedResourcesStatus(klog.FromContext(ctx), cur, &cur.Status)
	_, err = w.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err
}

// followHealth rewrites the device health in the status of the pods a plugin's health stream
// names (the DRA manager's Updates channel), as the kubelet's sync loop does on such an update.
func (w *podWorker) followHealth(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case update := <-w.dra.Updates():
			for _, uid := range update.PodUIDs {
				if err := w.refreshHealth(ctx, types.UID(uid)); err != nil {
					logger.Info("device health not written to the pod status", "podUID", uid, "err", err)
				}
			}
		}
	}
}

func (w *podWorker) refreshHealth(ctx context.Context, uid types.UID) error {
	w.mu.Lock()
	started := w.started[uid]
	w.mu.Unlock()
	pod, exists := w.current(uid)
	if !started || !exists {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := w.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != uid {
			return err
		}
		w.dra.UpdateAllocatedResourcesStatus(klog.FromContext(ctx), cur, &cur.Status)
		_, err = w.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func setConditions(conds []v1.PodCondition, now metav1.Time, types ...v1.PodConditionType) []v1.PodCondition {
	for _, t := range types {
		found := false
		for i := range conds {
			if conds[i].Type == t {
				found = true
				if conds[i].Status != v1.ConditionTrue {
					conds[i].Status, conds[i].LastTransitionTime, conds[i].Reason, conds[i].Message = v1.ConditionTrue, now, "", ""
				}
			}
		}
		if !found {
			conds = append(conds, v1.PodCondition{Type: t, Status: v1.ConditionTrue, LastTransitionTime: now})
		}
	}
	return conds
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
