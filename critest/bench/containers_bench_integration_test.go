//go:build integration

package bench

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

const (
	benchBusybox = "docker.io/library/busybox:latest"
	bench50MB    = "docker.io/shimd/bench:50mb"
	pullRounds   = 5
)

// BenchmarkPull pulls a ~50 MB image of 6 layers from the local registry, then
// removes it, pullRounds times per runtime, interleaved.
func BenchmarkPull(b *testing.B) {
	p := newPair(b)
	for round := -1; round < pullRounds; round++ {
		for _, tg := range []*target{p.shimd, p.cd} {
			tg.timed(b, round, "PullImage", func(ctx context.Context) error {
				_, err := tg.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: bench50MB}})
				return err
			})
			tg.timed(b, round, "RemoveImage", func(ctx context.Context) error {
				_, err := tg.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: bench50MB}})
				return err
			})
		}
	}
	report(b, fmt.Sprintf("image pull of %s (~50 MB, 6 layers): %d rounds per runtime, interleaved", bench50MB, pullRounds),
		[]string{"PullImage", "RemoveImage"}, p.shimd, p.cd)
}

// BenchmarkContainerLifecycle creates, starts, execs in, stops and removes a busybox
// container in one pod per runtime, rounds times, interleaved.
func BenchmarkContainerLifecycle(b *testing.B) {
	p := newPair(b)
	for _, tg := range []*target{p.shimd, p.cd} {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := tg.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: benchBusybox}})
		cancel()
		require.NoError(b, err, tg.name)
	}
	pods := map[*target]*runtimeapi.PodSandboxConfig{}
	ids := map[*target]string{}
	for _, tg := range []*target{p.shimd, p.cd} {
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "ctr-" + tg.name, Namespace: "bench", Uid: fmt.Sprintf("ctr-%s-%d", tg.name, os.Getpid())},
			Linux:    &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{}},
		}
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		resp, err := tg.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		cancel()
		require.NoError(b, err, tg.name)
		pods[tg], ids[tg] = cfg, resp.PodSandboxId
	}
	cops := []string{"CreateContainer", "StartContainer", "ExecSync", "Exec", "StopContainer", "RemoveContainer"}
	for round := -warmup; round < rounds; round++ {
		for _, tg := range []*target{p.shimd, p.cd} {
			tg.containerRound(b, round, ids[tg], pods[tg])
		}
	}
	for _, tg := range []*target{p.shimd, p.cd} {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := tg.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: ids[tg]})
		require.NoError(b, err)
		_, err = tg.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: ids[tg]})
		require.NoError(b, err)
		cancel()
	}
	report(b, fmt.Sprintf("container lifecycle (busybox, one pod): %d rounds per runtime after %d warm-up, interleaved", rounds, warmup),
		cops, p.shimd, p.cd)
}

func (tg *target) containerRound(b *testing.B, round int, podID string, pod *runtimeapi.PodSandboxConfig) {
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", round+warmup)},
		Image:    &runtimeapi.ImageSpec{Image: benchBusybox},
		Command:  []string{"sleep", "3600"},
		Linux:    &runtimeapi.LinuxContainerConfig{},
	}
	var id string
	tg.timed(b, round, "CreateContainer", func(ctx context.Context) error {
		resp, err := tg.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: pod})
		id = resp.GetContainerId()
		return err
	})
	tg.timed(b, round, "StartContainer", func(ctx context.Context) error {
		_, err := tg.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		return err
	})
	tg.timed(b, round, "ExecSync", func(ctx context.Context) error {
		resp, err := tg.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: 30})
		if err == nil && resp.ExitCode != 0 {
			err = fmt.Errorf("exit code %d", resp.ExitCode)
		}
		return err
	})
	// Exec round trip of `true` as the kubelet does it: the Exec RPC for a URL, then
	// the SPDY stream to the streaming server until the exit status.
	tg.timed(b, round, "Exec", func(ctx context.Context) error {
		resp, err := tg.rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
		if err != nil {
			return err
		}
		u, err := url.Parse(resp.Url)
		if err != nil {
			return err
		}
		exec, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
		if err != nil {
			return err
		}
		return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
	})
	tg.timed(b, round, "StopContainer", func(ctx context.Context) error {
		_, err := tg.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0})
		return err
	})
	tg.timed(b, round, "RemoveContainer", func(ctx context.Context) error {
		_, err := tg.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		return err
	})
}

// podStartConfigs are the pod and container configs the kubelet sends for a pod with
// one busybox container that does not share its process namespace.
func podStartConfigs(name string) (*runtimeapi.PodSandboxConfig, *runtimeapi.ContainerConfig) {
	pod := &runtimeapi.PodSandboxConfig{
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "bench", Uid: fmt.Sprintf("%s-%d-%d", name, os.Getpid(), time.Now().UnixNano())},
		Hostname:  name,
		DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"198.18.255.53"}},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
		}},
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: benchBusybox},
		Command:  []string{"sleep", "3600"},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: pod.Linux.SecurityContext.NamespaceOptions,
		}},
	}
	return pod, cfg
}

// BenchmarkPodStart times what a kubelet waits for to start a one-container pod:
// RunPodSandbox, CreateContainer and StartContainer back to back, with the
// namespace options the kubelet sends for a pod that does not share its process
// namespace. The total is the pod-start latency; teardown is not timed.
func BenchmarkPodStart(b *testing.B) {
	p := newPair(b)
	for _, tg := range []*target{p.shimd, p.cd} {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := tg.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: benchBusybox}})
		cancel()
		require.NoError(b, err, tg.name)
	}
	// The floor's bundles come from a pod shimd started; it stays up (until the
	// cleanups) while the floor rounds use its mounts (hosts, resolv.conf, /dev/shm).
	// The floor starts the shim as containerd 2.x does (its bootstrap protocol); on 1.6
	// the pod starts are timed without it.
	var fl *floor
	if p.env.Containerd.MajorVersion() >= 2 {
		podID, ctrID := templatePod(b, p.shimd)
		fl = newFloor(b, p, p.shimdNS, podID, ctrID)
	}
	for round := -warmup; round < rounds; round++ {
		for _, tg := range []*target{p.shimd, p.cd} {
			tg.podStart(b, round)
		}
		if fl != nil {
			fl.round(b, round)
		}
	}
	report(b, fmt.Sprintf("pod start (busybox, one container): %d rounds per runtime after %d warm-up, interleaved with the floor (none on containerd 1.6)", rounds, warmup),
		[]string{"RunPodSandbox", "CreateContainer", "StartContainer", "PodStart"}, p.shimd, p.cd)
	if fl != nil {
		reportFloor(b, fl, p.shimd, p.cd)
	}
	reportSteps(b, p.shimdLog)
}

// BenchmarkPodStartRunsc is BenchmarkPodStart's pod start with the pods on gVisor
// (handler runsc, the same runsc and options for both; no floor), skipped without
// runsc (bash hack/tools.sh runsc).
func BenchmarkPodStartRunsc(b *testing.B) {
	p := newPairOn(b, harness.RunscHandler)
	for _, tg := range []*target{p.shimd, p.cd} {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := tg.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: benchBusybox}})
		cancel()
		require.NoError(b, err, tg.name)
	}
	for round := -warmup; round < rounds; round++ {
		for _, tg := range []*target{p.shimd, p.cd} {
			tg.podStart(b, round)
		}
	}
	report(b, fmt.Sprintf("pod start on runsc (busybox, one container): %d rounds per runtime after %d warm-up, interleaved", rounds, warmup),
		[]string{"RunPodSandbox", "CreateContainer", "StartContainer", "PodStart"}, p.shimd, p.cd)
}

func (tg *target) podStart(b *testing.B, round int) {
	pod, cfg := podStartConfigs(fmt.Sprintf("start-%s-%d", tg.name, round+warmup))
	var podID, id string
	start := time.Now()
	tg.timed(b, round, "RunPodSandbox", func(ctx context.Context) error {
		resp, err := tg.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod, RuntimeHandler: tg.handler})
		podID = resp.GetPodSandboxId()
		return err
	})
	tg.timed(b, round, "CreateContainer", func(ctx context.Context) error {
		resp, err := tg.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: pod})
		id = resp.GetContainerId()
		return err
	})
	tg.timed(b, round, "StartContainer", func(ctx context.Context) error {
		_, err := tg.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		return err
	})
	if round >= 0 {
		tg.samples["PodStart"] = append(tg.samples["PodStart"], time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_, err := tg.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID})
	require.NoError(b, err, tg.name)
	_, err = tg.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID})
	require.NoError(b, err, tg.name)
}
