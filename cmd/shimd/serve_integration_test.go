//go:build integration

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/containerd/log"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/sandbox/pause"
)

func TestMain(m *testing.M) { harness.Main(m) }

// Every goroutine shimd starts has an owner that stops it: after serve returns, the
// goroutine count is back at what it was before serve started. The services run
// in-process on the harness's real containerd, runc and CNI network, through a pod
// lifecycle with a container, and are shut down once with the pod and its container
// running (their output copies, the event monitor, the CNI watch, the endpoints)
// and once after the next serve (which recovers them) has removed them.
func TestServeStopsItsGoroutines(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("integration tests need root")
	}
	e := harness.New(t, harness.Options{NoShimd: true})
	cfg := DefaultConfig()
	cfg.LogLevel = "warn"
	cfg.Socket = filepath.Join(e.Base, "shimd.sock")
	cfg.RootDir, cfg.StateDir = filepath.Join(e.Base, "root"), filepath.Join(e.Base, "state")
	cfg.Containerd.Address, cfg.Containerd.Namespace = e.Containerd.Address(), e.Namespace
	cfg.CNI = CNIConfig{ConfDir: filepath.Join(e.Base, "net.d"), BinDirs: []string{harness.CNIBinDir}, CacheDir: filepath.Join(e.Base, "cni-cache")}
	cfg.Runtimes = map[string]RuntimeConfig{"runc": {Type: "io.containerd.runc.v2", BinaryName: e.Tools.Runc, Root: filepath.Join(e.Base, "runc")}}
	cfg.Debug.Address = filepath.Join(e.Base, "debug.sock")
	cfg.Metrics.Address = "127.0.0.1:0"
	require.NoError(t, cfg.Validate())
	require.NoError(t, log.SetLevel(cfg.LogLevel))

	baseline := goruntime.NumGoroutine()

	// First run: a pod and a container, left running at shutdown.
	var podID, ctrID string
	withServe(t, cfg, func(rs runtimeapi.RuntimeServiceClient) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pod := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: "goroutines", Namespace: "e2e", Uid: "uid-goroutines"},
			LogDirectory: filepath.Join(e.Base, "logs"),
			Linux:        &runtimeapi.LinuxPodSandboxConfig{},
		}
		run, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod})
		require.NoError(t, err)
		podID = run.PodSandboxId
		// The pause image (imported by RunPodSandbox) serves as the container's image:
		// no registry needed.
		create, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, SandboxConfig: pod, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: pause.Ref}, LogPath: "c.log",
		}})
		require.NoError(t, err)
		ctrID = create.ContainerId
		_, err = rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctrID})
		require.NoError(t, err)
		st, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
		require.NoError(t, err)
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, st.Status.State)
	})
	requireGoroutinesBackTo(t, baseline, "after a shutdown with a pod running")

	// Second run: recovery adopts them; a stop ends the container (its exit is
	// recorded by the event monitor), then everything is removed.
	withServe(t, cfg, func(rs runtimeapi.RuntimeServiceClient) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		st, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
		require.NoError(t, err)
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, st.Status.State, "recovered")
		_, err = rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctrID, Timeout: 10})
		require.NoError(t, err)
		st, err = rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
		require.NoError(t, err)
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, st.Status.State)
		_, err = rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctrID})
		require.NoError(t, err)
		_, err = rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID})
		require.NoError(t, err)
		_, err = rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID})
		require.NoError(t, err)
	})
	requireGoroutinesBackTo(t, baseline, "after a shutdown with nothing running")
}

// withServe runs serve until use returns (with a CRI client once recovery is done),
// then cancels it and waits for it to return.
func withServe(t *testing.T, cfg Config, use func(rs runtimeapi.RuntimeServiceClient)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, func(time.Duration) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-served:
		t.Fatalf("serve returned before it was ready: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("recovery not done after a minute")
	}
	conn, err := grpc.NewClient("unix://"+cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	func() {
		defer conn.Close()
		use(runtimeapi.NewRuntimeServiceClient(conn))
	}()
	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("serve did not return within a minute of its context's end")
	}
}

// requireGoroutinesBackTo waits briefly for goroutines that are ending (a closed
// connection's readers) and fails with the stacks of those left over.
func requireGoroutinesBackTo(t *testing.T, baseline int, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for goruntime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := goruntime.NumGoroutine(); n > baseline {
		var stacks bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Fatalf("%s: %d goroutines, %d before serve started; all goroutines now:\n%s", when, n, baseline, stacks.String())
	}
}
