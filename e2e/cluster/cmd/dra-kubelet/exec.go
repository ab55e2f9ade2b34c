package main

// Running selected containers as local processes. No container runtime exists here, so a pod's
// behaviour is normally only simulated ("Running" once prepared). Some pods must really act,
// e.g. the ComputeDomain IMEX daemon (`dra-fake imex-daemon run`), which registers itself in the
// API server and gates other pods. For containers whose command[0] is listed with --exec, this
// harness starts the command as a local process with the environment a runtime would give it
// (container env incl. downward-API fields, the CDI env of its prepared claims, --exec-env), runs
// its readinessProbe exec command to set the container's Ready status, restarts it with
// CrashLoopBackOff-like delays when it exits, and stops it (SIGTERM, then SIGKILL) when the pod
// stops. CDI mounts cannot be made without a mount namespace; they are passed as
// DRA_KUBELET_MOUNTS (JSON [{containerPath, hostPath}]) for the program to map paths.
// docs/computedomain.md describes the contract.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

var (
	execCommands repeated
	execEnv      repeated
	execDir      string
)

func init() {
	flag.Var(&execCommands, "exec", "run containers whose command[0] is NAME as local processes: NAME=ARGV PREFIX (space-separated; repeatable)")
	flag.Var(&execEnv, "exec-env", "KEY=VALUE added to the environment of exec'd containers (repeatable)")
	flag.StringVar(&execDir, "exec-dir", "", "working directory of exec'd containers")
}

const (
	mountsEnv       = "DRA_KUBELET_MOUNTS"
	restartBackoff  = 10 * time.Second
	maxBackoff      = 60 * time.Second
	probeTimeout    = 10 * time.Second
	stopGracePeriod = 10 * time.Second
)

// execMounts is one CDI mount as the program sees it.
type execMount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
}

type execContainer struct {
	pod       types.NamespacedName
	podUID    types.UID
	name      string
	argv      []string
	probe     []string // readiness probe argv (mapped), nil: ready while running
	period    time.Duration
	env       []string
	logPath   string
	pidPath   string
	cancel    context.CancelFunc
	done      chan struct{}
	mu        sync.Mutex
	proc      *os.Process
	restarts  int32
	ready     bool
	running   bool
	lastExit  int32
	reportedR bool
}

type execManager struct {
	client kubernetes.Interface
	dir    string
	mu     sync.Mutex
	byPod  map[types.UID][]*execContainer
}

func newExecManager(client kubernetes.Interface, stateDir string) *execManager {
	return &execManager{client: client, dir: filepath.Join(stateDir, "exec"), byPod: map[types.UID][]*execContainer{}}
}

// mapped returns the local argv for a container command, or nil if no --exec entry matches.
func mapped(command []string) []string {
	if len(command) == 0 {
		return nil
	}
	for _, e := range execCommands {
		name, prefix, ok := strings.Cut(e, "=")
		if ok && filepath.Base(command[0]) == name {
			return append(strings.Fields(prefix), command[1:]...)
		}
	}
	return nil
}

// manages reports which containers of the pod would be exec'd and start not ready.
func (m *execManager) notReadyAtStart(pod *v1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		if mapped(append(append([]string{}, c.Command...), c.Args...)) != nil {
			out[c.Name] = true
		}
	}
	return out
}

func fieldValue(pod *v1.Pod, path string) (string, bool) {
	switch path {
	case "metadata.name":
		return pod.Name, true
	case "metadata.namespace":
		return pod.Namespace, true
	case "metadata.uid":
		return string(pod.UID), true
	case "spec.nodeName":
		return pod.Spec.NodeName, true
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, true
	case "status.podIP", "status.hostIP":
		return "127.0.0.1", true
	}
	return "", false
}

// start launches the pod's exec'd containers (once per pod).
func (m *execManager) start(ctx context.Context, pod *v1.Pod, rec podRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byPod[pod.UID]; ok {
		return
	}
	var list []*execContainer
	for _, c := range pod.Spec.Containers {
		argv := mapped(append(append([]string{}, c.Command...), c.Args...))
		if argv == nil {
			continue
		}
		env := append([]string{}, os.Environ()...)
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
				env = append(env, e.Name+"="+e.Value)
			case e.ValueFrom.FieldRef != nil:
				if v, ok := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath); ok {
					env = append(env, e.Name+"="+v)
				}
			}
		}
		cr := rec.Containers[c.Name]
		env = append(env, cr.Env...)
		var mounts []execMount
		for _, mt := range cr.Mounts {
			mounts = append(mounts, execMount{ContainerPath: mt.Destination, HostPath: mt.Source})
		}
		if data, err := json.Marshal(mounts); err == nil && len(mounts) > 0 {
			env = append(env, mountsEnv+"="+string(data))
		}
		env = append(env, execEnv...)
		ec := &execContainer{
			pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, podUID: pod.UID, name: c.Name,
			argv: argv, env: env, period: 10 * time.Second, done: make(chan struct{}),
		}
		base := fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, c.Name)
		ec.logPath = filepath.Join(m.dir, base+".log")
		ec.pidPath = filepath.Join(m.dir, base+".pid")
		if p := c.ReadinessProbe; p != nil && p.Exec != nil {
			ec.probe = mapped(p.Exec.Command)
			if p.PeriodSeconds > 0 {
				ec.period = time.Duration(p.PeriodSeconds) * time.Second
			}
		}
		cctx, cancel := context.WithCancel(context.Background())
		ec.cancel = cancel
		list = append(list, ec)
		go m.supervise(klog.NewContext(cctx, klog.FromContext(ctx).WithValues("container", c.Name)), ec)
	}
	m.byPod[pod.UID] = list
}

// stop terminates the pod's processes and waits for them.
func (m *execManager) stop(uid types.UID) {
	m.mu.Lock()
	list := m.byPod[uid]
	delete(m.byPod, uid)
	m.mu.Unlock()
	for _, ec := range list {
		ec.cancel()
		<-ec.done
	}
}

func (m *execManager) supervise(ctx context.Context, ec *execContainer) {
	defer close(ec.done)
	logger := klog.FromContext(ctx)
	_ = os.MkdirAll(m.dir, 0o750)
	backoff := restartBackoff
	for {
		exited := m.launch(ctx, ec)
		if exited == nil {
			m.report(ctx, ec)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		probeCtx, stopProbe := context.WithCancel(ctx)
		go m.probeLoop(probeCtx, ec)
		startedAt := time.Now()
		select {
		case <-ctx.Done():
			stopProbe()
			m.terminate(ec, exited)
			return
		case <-exited:
			stopProbe()
		}
		ec.mu.Lock()
		ec.running, ec.ready = false, false
		ec.restarts++
		ec.mu.Unlock()
		logger.Info("exec'd container exited, restarting after backoff", "exitCode", ec.lastExit, "backoff", backoff)
		m.report(ctx, ec)
		if time.Since(startedAt) > 10*time.Minute {
			backoff = restartBackoff
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// launch starts the process; the returned channel closes when it exits (nil: start failed).
func (m *execManager) launch(ctx context.Context, ec *execContainer) chan struct{} {
	logger := klog.FromContext(ctx)
	logFile, err := os.OpenFile(ec.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		logger.Error(err, "exec log file")
		return nil
	}
	cmd := exec.Command(ec.argv[0], ec.argv[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = ec.env, execDir, logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		logger.Error(err, "exec'd container failed to start", "argv", ec.argv)
		return nil
	}
	_ = os.WriteFile(ec.pidPath, []byte(fmt.Sprintf("%d\n", cmd.Process.Pid)), 0o640)
	ec.mu.Lock()
	ec.proc, ec.running, ec.ready = cmd.Process, true, ec.probe == nil
	ec.mu.Unlock()
	logger.Info("exec'd container started", "pid", cmd.Process.Pid, "argv", ec.argv, "log", ec.logPath)
	m.report(ctx, ec)
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		logFile.Close()
		code := int32(0)
		if exitErr, ok := err.(*exec.ExitError); ok {
			code = int32(exitErr.ExitCode())
		}
		ec.mu.Lock()
		ec.lastExit = code
		ec.mu.Unlock()
		close(exited)
	}()
	return exited
}

func (m *execManager) terminate(ec *execContainer, exited chan struct{}) {
	ec.mu.Lock()
	proc := ec.proc
	ec.mu.Unlock()
	if proc == nil {
		return
	}
	_ = proc.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(stopGracePeriod):
		_ = proc.Kill()
		<-exited
	}
	_ = os.Remove(ec.pidPath)
}

// probeLoop runs the readiness probe: every 500 ms until the first success (like a startup
// probe), then every periodSeconds; a change of the result updates the pod status.
func (m *execManager) probeLoop(ctx context.Context, ec *execContainer) {
	if ec.probe == nil {
		return
	}
	every := 500 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		cmd := exec.CommandContext(pctx, ec.probe[0], ec.probe[1:]...)
		cmd.Env, cmd.Dir = ec.env, execDir
		err := cmd.Run()
		cancel()
		if ctx.Err() != nil {
			return
		}
		ready := err == nil
		ec.mu.Lock()
		changed := ec.ready != ready
		ec.ready = ready
		ec.mu.Unlock()
		if changed {
			klog.FromContext(ctx).Info("readiness probe result changed", "ready", ready)
			m.report(ctx, ec)
		}
		if ready {
			every = ec.period
		}
	}
}

// report writes the container's state into the pod status (and the pod's Ready conditions).
func (m *execManager) report(ctx context.Context, ec *execContainer) {
	ec.mu.Lock()
	ready, running, restarts, lastExit := ec.ready, ec.running, ec.restarts, ec.lastExit
	ec.mu.Unlock()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := m.client.CoreV1().Pods(ec.pod.Namespace).Get(ctx, ec.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != ec.podUID || cur.Status.Phase != v1.PodRunning {
			return nil // replaced, or not yet reported Running (setRunning will)
		}
		now := metav1.Now()
		allReady := true
		for i := range cur.Status.ContainerStatuses {
			cs := &cur.Status.ContainerStatuses[i]
			if cs.Name == ec.name {
				cs.Ready, cs.RestartCount = ready, restarts
				started := running
				cs.Started = &started
				if running {
					cs.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}
					if cs.State.Running != nil && restarts == 0 && cur.Status.StartTime != nil {
						cs.State.Running.StartedAt = *cur.Status.StartTime
					}
				} else {
					cs.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
					cs.LastTerminationState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: lastExit, FinishedAt: now}}
				}
			}
			allReady = allReady && cs.Ready
		}
		status := v1.ConditionFalse
		if allReady {
			status = v1.ConditionTrue
		}
		for i := range cur.Status.Conditions {
			c := &cur.Status.Conditions[i]
			if (c.Type == v1.PodReady || c.Type == v1.ContainersReady) && c.Status != status {
				c.Status, c.LastTransitionTime = status, now
			}
		}
		_, err = m.client.CoreV1().Pods(ec.pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Info("pod status update failed", "err", err)
	}
}
