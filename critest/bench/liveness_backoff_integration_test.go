//go:build integration

package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/kubelet"
)

// livenessRestarts is how many probe-driven restarts TestKubeletLivenessBackoff
// watches on each runtime.
const livenessRestarts = 5

// TestKubeletLivenessBackoff: a container whose liveness probe always fails is
// restarted by a real kubelet with its crash-loop back-off, on shimd as on
// containerd's own CRI plugin (same containerd, runc and CNI, one kubelet at a time).
// The kubelet decides the back-off from the newest exited attempt it gets from the
// runtime, so a runtime that reports that attempt late, in another state, out of
// order or with a wrong finished_at makes it restart at once (issue 32: on shimd the
// fourth restart once came 6 s after the third). From the kubelet's /pods, each
// restart's delay (the new attempt's startedAt less the previous one's finishedAt,
// both as the kubelet reports them, to the second): the first two restarts have no
// back-off, the third waits 10 s, the fourth 20 s, the fifth 40 s.
func TestKubeletLivenessBackoff(t *testing.T) {
	if os.Getenv("SHIMD_LIVENESS_BACKOFF") != "1" {
		t.Skip("SHIMD_LIVENESS_BACKOFF is not 1 (make e2e-liveness-backoff sets it): about 4 minutes")
	}
	if _, err := os.Stat(kubelet.Binary()); err != nil {
		t.Skipf("no kubelet at %s: build it with hack/tools.sh kubelet", kubelet.Binary())
	}
	p := newPair(t)
	endpoints := map[*target]string{p.shimd: p.shimdEndpoint, p.cd: "unix://" + p.env.Containerd.Address()}
	delays := map[string][]time.Duration{}
	for _, tg := range []*target{p.shimd, p.cd} {
		// A subtest each: its kubelet's cleanup, which gives up the host-wide kubelet
		// lock, runs before the next runtime's kubelet starts.
		if !t.Run(tg.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			_, err := tg.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: benchBusybox}})
			cancel()
			require.NoError(t, err, tg.name)
			delays[tg.name] = tg.livenessDelays(t, kubelet.Options{Dir: harness.NewBaseDir(t), RuntimeEndpoint: endpoints[tg]})
		}) {
			return
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "liveness-probe restarts through kubelet %s: delay from an attempt's end to the next one's start\n", kubelet.Version())
	fmt.Fprintf(&out, "%-8s %10s %10s %6s\n", "restart", "shimd", "containerd", "want")
	for i := 0; i < livenessRestarts; i++ {
		fmt.Fprintf(&out, "%-8d %10s %10s %6s\n", i+1, delays["shimd"][i], delays["containerd"][i], backoffBefore(i))
	}
	t.Log("\n" + out.String())
	for name, ds := range delays {
		for i, d := range ds {
			// Reported to the second: a second of slack.
			if want := backoffBefore(i); d < want-time.Second {
				t.Errorf("%s: restart %d came %s after the previous attempt ended; the kubelet's back-off is %s", name, i+1, d, want)
			}
		}
	}
}

// backoffBefore is the kubelet's crash-loop back-off before restart i (0-based) of a
// container killed by its liveness probe: none for the first two (the back-off is
// judged from the attempt before the one just killed), then 10 s, doubling.
func backoffBefore(i int) time.Duration {
	if i < 2 {
		return 0
	}
	return 10 * time.Second << (i - 2)
}

// livenessDelays runs a kubelet on tg with a pod whose liveness probe always fails
// and returns, for each of the first livenessRestarts restarts, the time from the
// killed attempt's finishedAt to the new attempt's startedAt.
func (tg *target) livenessDelays(t *testing.T, opts kubelet.Options) []time.Duration {
	k := kubelet.Start(t, opts)
	t.Cleanup(func() {
		k.Stop()
		if err := tg.removeAllPods(); err != nil {
			t.Errorf("%s: remove the pods left: %v", tg.name, err)
		}
	})
	grace := int64(1)
	name := "liveness-" + tg.name
	k.WritePod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubelet.Namespace},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: benchBusybox, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"},
				LivenessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"false"}}},
					PeriodSeconds: 2, TimeoutSeconds: 1, FailureThreshold: 1,
				},
			}},
			DNSPolicy:                     corev1.DNSDefault,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
		},
	})
	var delays []time.Duration
	seen := int32(0)
	deadline := time.Now().Add(5 * time.Minute)
	for len(delays) < livenessRestarts {
		require.True(t, time.Now().Before(deadline), "%s: %d restarts after 5 minutes", tg.name, len(delays))
		time.Sleep(200 * time.Millisecond)
		pod, err := k.Pod(name)
		if err != nil || len(pod.Status.ContainerStatuses) == 0 {
			continue
		}
		cs := pod.Status.ContainerStatuses[0]
		if cs.RestartCount <= seen || cs.State.Running == nil || cs.LastTerminationState.Terminated == nil {
			continue
		}
		require.Equal(t, seen+1, cs.RestartCount, "%s: the restart count jumped from %d", tg.name, seen)
		seen = cs.RestartCount
		d := cs.State.Running.StartedAt.Sub(cs.LastTerminationState.Terminated.FinishedAt.Time)
		t.Logf("%s: restart %d, %s after the previous attempt ended (%s)", tg.name, seen, d, cs.LastTerminationState.Terminated.Reason)
		delays = append(delays, d)
	}
	k.RemovePod(t, name)
	tg.awaitPodGone(t)
	return delays
}
