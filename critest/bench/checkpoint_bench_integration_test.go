//go:build integration

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// checkpointRounds: a 512 MiB dump is written each round, twice.
var checkpointRounds = envInt("BENCH_CHECKPOINT_ROUNDS", 5)

// BenchmarkCheckpoint times CheckpointContainer of a busybox container and of one
// holding 512 MiB of touched memory, through shimd and through containerd's own CRI
// plugin, on the same containerd, runc and CRIU, rounds interleaved. Restore is
// timed on shimd only: containerd 2.4's CRI plugin has no restore (CreateContainer
// from a checkpoint). The checkpoint archive of each round is deleted at once.
func BenchmarkCheckpoint(b *testing.B) {
	if out, err := exec.Command("criu", "check").CombinedOutput(); err != nil {
		b.Skipf("criu check: %v: %s (hack/tools.sh criu)", err, out)
	}
	p := newPair(b)
	dir := b.TempDir()
	const hog = `BEGIN { s = sprintf("%536870912s", ""); print "ready"; fflush(); while (1) system("sleep 1") }`
	type side struct {
		podID  string
		pod    *runtimeapi.PodSandboxConfig
		small  string
		big    string
		target *target
	}
	var sides []*side
	for _, tg := range []*target{p.shimd, p.cd} {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := tg.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: benchBusybox}})
		require.NoError(b, err, tg.name)
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: "cp-" + tg.name, Namespace: "bench", Uid: fmt.Sprintf("cp-%s-%d", tg.name, os.Getpid())},
			LogDirectory: b.TempDir(),
			Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{}},
		}
		resp, err := tg.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		require.NoError(b, err, tg.name)
		s := &side{podID: resp.PodSandboxId, pod: cfg, target: tg}
		run := func(name string, cmd ...string) string {
			c, err := tg.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: s.podID, SandboxConfig: cfg, Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: benchBusybox},
				Command: cmd, LogPath: name + ".log", Linux: ownPidNS()}})
			require.NoError(b, err, tg.name)
			_, err = tg.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
			require.NoError(b, err, tg.name)
			return c.ContainerId
		}
		s.small = run("small", "sleep", "3600")
		s.big = run("big", "awk", hog)
		cancel()
		deadline := time.Now().Add(time.Minute)
		for {
			data, _ := os.ReadFile(filepath.Join(cfg.LogDirectory, "big.log"))
			if strings.Contains(string(data), "ready") {
				break
			}
			require.True(b, time.Now().Before(deadline), "%s: the 512 MiB container never got ready", tg.name)
			time.Sleep(100 * time.Millisecond)
		}
		sides = append(sides, s)
	}
	checkpoint := func(s *side, round int, op, id string) string {
		loc := filepath.Join(dir, fmt.Sprintf("%s-%s-%d.tar", s.target.name, op, round+warmup))
		s.target.timed(b, round, op, func(ctx context.Context) error {
			_, err := s.target.rt.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: loc})
			return err
		})
		return loc
	}
	for round := -warmup; round < checkpointRounds; round++ {
		for _, s := range sides {
			small := checkpoint(s, round, "checkpoint busybox", s.small)
			if s.target == p.shimd {
				// Restore into the same pod: create from the archive, then start.
				cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "restored", Attempt: uint32(round + warmup)},
					Image: &runtimeapi.ImageSpec{Image: small}, Command: []string{"sleep", "3600"}, Linux: ownPidNS()}
				var id string
				s.target.timed(b, round, "restore busybox", func(ctx context.Context) error {
					resp, err := s.target.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: s.podID, Config: cfg, SandboxConfig: s.pod})
					if err != nil {
						return err
					}
					id = resp.ContainerId
					_, err = s.target.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
					return err
				})
				ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
				_, err := s.target.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
				cancel()
				require.NoError(b, err)
			}
			require.NoError(b, os.Remove(small))
			require.NoError(b, os.Remove(checkpoint(s, round, "checkpoint 512 MiB", s.big)))
		}
	}
	for _, s := range sides {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := s.target.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.podID})
		require.NoError(b, err)
		_, err = s.target.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.podID})
		require.NoError(b, err)
		cancel()
	}
	report(b, fmt.Sprintf("checkpoint (CRIU %s): %d rounds per runtime after %d warm-up, interleaved", criuVersion(), checkpointRounds, warmup),
		[]string{"checkpoint busybox", "checkpoint 512 MiB"}, p.shimd, p.cd)
	fmt.Printf("restore busybox (CreateContainer from the archive + StartContainer), shimd p50 %.1f ms, p90 %.1f ms; containerd 2.4's CRI plugin cannot restore\n",
		ms(percentile(p.shimd.samples["restore busybox"], 50)), ms(percentile(p.shimd.samples["restore busybox"], 90)))
}

// ownPidNS gives a container a PID namespace of its own: CRIU restores a process
// with its process ids, which the checkpointed container, still running, holds in a
// namespace shared with the pod.
func ownPidNS() *runtimeapi.LinuxContainerConfig {
	return &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}}}
}

func criuVersion() string {
	out, err := exec.Command("criu", "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "Version: ")
}
