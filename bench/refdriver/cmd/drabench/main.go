// Command drabench drives a DRA kubelet plugin over its unix socket with the kubelet's own
// generated gRPC client (k8s.io/kubelet/pkg/apis/dra/v1), the same way for every driver, and
// measures the floor of this machine (an empty gRPC round trip, one fsync'd atomic write).
//
//	drabench prepare --socket S --claims claims.json --concurrency 16 --rounds 3
//	drabench empty   [--socket S] --n 2000      (no socket: an in-process no-op server)
//	drabench fsync   --dir D --n 200 --size 4096
//	drabench create  --server URL --token T --ca F --jobs jobs.json --concurrency 16
//
// Every subcommand prints one JSON object on stdout. Errors (a failed RPC, a claim error)
// exit non-zero: benchmarks fail on errors, never on timing.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

type claimRef struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "drabench: "+format+"\n", args...)
	os.Exit(1)
}

func dial(socket string) *grpc.ClientConn {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		die("dial %s: %v", socket, err)
	}
	return conn
}

func emit(v any) {
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		die("encode: %v", err)
	}
}

// phase runs fn(claim) for every claim with `workers` concurrent callers and returns the
// per-call latencies (seconds) and the wall time of the phase.
func phase(claims []claimRef, workers int, fn func(claimRef) error) ([]float64, float64) {
	lat := make([]float64, len(claims))
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				if err := fn(claims[i]); err != nil {
					once.Do(func() { firstErr = err })
				}
				lat[i] = time.Since(t0).Seconds()
			}
		}()
	}
	for i := range claims {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		die("%v", firstErr)
	}
	return lat, time.Since(start).Seconds()
}

func cmdPrepare(args []string) {
	fs := flag.NewFlagSet("prepare", flag.ExitOnError)
	socket := fs.String("socket", "", "the plugin's DRA socket")
	claimsFile := fs.String("claims", "", "JSON list of {uid, namespace, name}")
	workers := fs.Int("concurrency", 1, "concurrent callers")
	rounds := fs.Int("rounds", 1, "prepare-all then unprepare-all rounds")
	timeout := fs.Duration("timeout", 60*time.Second, "per-call deadline")
	statFiles := fs.String("stat", "", "comma-separated files whose sizes are recorded while every claim is prepared")
	_ = fs.Parse(args)
	raw, err := os.ReadFile(*claimsFile)
	if err != nil {
		die("%v", err)
	}
	var claims []claimRef
	if err := json.Unmarshal(raw, &claims); err != nil {
		die("%s: %v", *claimsFile, err)
	}
	conn := dial(*socket)
	defer conn.Close()
	c := drapb.NewDRAPluginClient(conn)
	pb := func(r claimRef) []*drapb.Claim {
		return []*drapb.Claim{{Namespace: r.Namespace, Uid: r.UID, Name: r.Name}}
	}
	prepare := func(r claimRef) error {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		resp, err := c.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: pb(r)})
		if err != nil {
			return fmt.Errorf("NodePrepareResources %s/%s: %w", r.Namespace, r.Name, err)
		}
		res := resp.Claims[r.UID]
		if res == nil || res.Error != "" || len(res.Devices) == 0 {
			return fmt.Errorf("NodePrepareResources %s/%s: result %v", r.Namespace, r.Name, res)
		}
		return nil
	}
	unprepare := func(r claimRef) error {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		resp, err := c.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: pb(r)})
		if err != nil {
			return fmt.Errorf("NodeUnprepareResources %s/%s: %w", r.Namespace, r.Name, err)
		}
		if res := resp.Claims[r.UID]; res == nil || res.Error != "" {
			return fmt.Errorf("NodeUnprepareResources %s/%s: result %v", r.Namespace, r.Name, res)
		}
		return nil
	}
	out := map[string]any{"claims": len(claims), "concurrency": *workers, "rounds": *rounds}
	var prep, unprep []float64
	var prepWall, unprepWall float64
	for i := 0; i < *rounds; i++ {
		l, w := phase(claims, *workers, prepare)
		prep, prepWall = append(prep, l...), prepWall+w
		if *statFiles != "" {
			sizes := map[string]int64{}
			for _, path := range strings.Split(*statFiles, ",") {
				if info, err := os.Stat(path); err == nil {
					sizes[path] = info.Size()
				}
			}
			out["prepared_file_bytes"] = sizes
		}
		l, w = phase(claims, *workers, unprepare)
		unprep, unprepWall = append(unprep, l...), unprepWall+w
	}
	out["prepare_seconds"], out["prepare_wall_seconds"] = prep, prepWall
	out["unprepare_seconds"], out["unprepare_wall_seconds"] = unprep, unprepWall
	emit(out)
}

type noopServer struct {
	drapb.UnimplementedDRAPluginServer
}

func (noopServer) NodePrepareResources(context.Context, *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	return &drapb.NodePrepareResourcesResponse{}, nil
}

func cmdEmpty(args []string) {
	fs := flag.NewFlagSet("empty", flag.ExitOnError)
	socket := fs.String("socket", "", "a DRA socket; empty: start a no-op Go server on a temp unix socket")
	n := fs.Int("n", 2000, "round trips")
	_ = fs.Parse(args)
	if *socket == "" {
		dir, err := os.MkdirTemp("", "drabench")
		if err != nil {
			die("%v", err)
		}
		defer os.RemoveAll(dir)
		*socket = filepath.Join(dir, "noop.sock")
		lis, err := net.Listen("unix", *socket)
		if err != nil {
			die("%v", err)
		}
		srv := grpc.NewServer()
		drapb.RegisterDRAPluginServer(srv, noopServer{})
		go func() { _ = srv.Serve(lis) }()
		defer srv.Stop()
	}
	conn := dial(*socket)
	defer conn.Close()
	c := drapb.NewDRAPluginClient(conn)
	lat := make([]float64, 0, *n)
	for i := 0; i < *n+50; i++ { // the first 50 warm the connection up and are not recorded
		t0 := time.Now()
		if _, err := c.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{}); err != nil {
			die("empty NodePrepareResources: %v", err)
		}
		if i >= 50 {
			lat = append(lat, time.Since(t0).Seconds())
		}
	}
	emit(map[string]any{"seconds": lat})
}

func cmdFsync(args []string) {
	fs := flag.NewFlagSet("fsync", flag.ExitOnError)
	dir := fs.String("dir", os.TempDir(), "directory to write in")
	n := fs.Int("n", 200, "writes")
	size := fs.Int("size", 4096, "bytes per write")
	_ = fs.Parse(args)
	data := make([]byte, *size)
	target := filepath.Join(*dir, "drabench-atomic.json")
	defer os.Remove(target)
	lat := make([]float64, 0, *n)
	for i := 0; i < *n; i++ {
		t0 := time.Now()
		f, err := os.CreateTemp(*dir, "tmp-drabench-*")
		if err != nil {
			die("%v", err)
		}
		if _, err := f.Write(data); err != nil {
			die("%v", err)
		}
		if err := f.Sync(); err != nil {
			die("%v", err)
		}
		if err := f.Close(); err != nil {
			die("%v", err)
		}
		if err := os.Rename(f.Name(), target); err != nil {
			die("%v", err)
		}
		lat = append(lat, time.Since(t0).Seconds())
	}
	emit(map[string]any{"seconds": lat})
}

// nodeJob is one simulated node for the bare-client ceiling: the Node, then its slices, whose
// owner reference names the node's UID (placeholder __NODE_UID__ in the slice bodies).
type nodeJob struct {
	Node   json.RawMessage   `json:"node"`
	Slices []json.RawMessage `json:"slices"`
}

func cmdCreate(args []string) {
	fs := flag.NewFlagSet("create", flag.ExitOnError)
	server := fs.String("server", "", "API server URL")
	token := fs.String("token", "", "bearer token")
	ca := fs.String("ca", "", "CA bundle of the API server")
	jobsFile := fs.String("jobs", "", "JSON list of {node, slices}")
	workers := fs.Int("concurrency", 16, "concurrent callers")
	sliceVersion := fs.String("slice-version", "v1", "resource.k8s.io version")
	_ = fs.Parse(args)
	raw, err := os.ReadFile(*jobsFile)
	if err != nil {
		die("%v", err)
	}
	var jobs []nodeJob
	if err := json.Unmarshal(raw, &jobs); err != nil {
		die("%s: %v", *jobsFile, err)
	}
	pem, err := os.ReadFile(*ca)
	if err != nil {
		die("%v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		MaxIdleConnsPerHost: *workers,
	}}
	var requests atomic.Int64
	call := func(method, path, ctype string, body []byte) []byte {
		req, err := http.NewRequest(method, *server+path, bytes.NewReader(body))
		if err != nil {
			die("%v", err)
		}
		req.Header.Set("Authorization", "Bearer "+*token)
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Accept", "application/json")
		requests.Add(1)
		resp, err := hc.Do(req)
		if err != nil {
			die("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			die("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}
	type nodeResp struct {
		Metadata struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"metadata"`
		Spec struct {
			Taints []map[string]any `json:"taints"`
		} `json:"spec"`
	}
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var node nodeResp
				if err := json.Unmarshal(call("POST", "/api/v1/nodes", "application/json", jobs[i].Node), &node); err != nil {
					die("%v", err)
				}
				if len(node.Spec.Taints) > 0 { // admission adds node.kubernetes.io/not-ready
					call("PATCH", "/api/v1/nodes/"+node.Metadata.Name, "application/merge-patch+json",
						[]byte(`{"spec":{"taints":null}}`))
				}
				for _, s := range jobs[i].Slices {
					body := strings.ReplaceAll(string(s), "__NODE_UID__", node.Metadata.UID)
					call("POST", "/apis/resource.k8s.io/"+*sliceVersion+"/resourceslices", "application/json", []byte(body))
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	emit(map[string]any{"wall_seconds": time.Since(start).Seconds(), "requests": requests.Load(), "nodes": len(jobs)})
}

func main() {
	if len(os.Args) < 2 {
		die("usage: drabench prepare|empty|fsync|create [flags]")
	}
	switch os.Args[1] {
	case "prepare":
		cmdPrepare(os.Args[2:])
	case "empty":
		cmdEmpty(os.Args[2:])
	case "fsync":
		cmdFsync(os.Args[2:])
	case "create":
		cmdCreate(os.Args[2:])
	default:
		die("unknown subcommand %q", os.Args[1])
	}
}
