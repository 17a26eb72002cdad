//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

const (
	adversarialSeed     = 20261123
	adversarialRequests = 3600
	adversarialCallers  = 8
)

// TestAdversarialRequests sends thousands of malformed requests (nil sub-messages,
// huge and binary strings, path traversal, NUL bytes, unknown and wrong-kind ids, 10k
// labels) to every RPC of both services from concurrent callers. shimd must stay up
// (same PID, no panic in its log), answer each with a deliberate code (never Unknown
// or Internal) and leave nothing behind.
func TestAdversarialRequests(t *testing.T) {
	requireRoot(t)
	// Random host paths must not become directories on this host: shimd refuses
	// a missing one here, as the CRI words it (the baits count on that too).
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: "reject_absent_mount_sources = true\n"}})
	pull(t, env, busyboxImage)
	rs, is := env.Shimd.Runtime(t), env.Shimd.Images(t)
	pod := newPod(t, rs, "target")
	ctr := pod.run(pod.container("victim", "sleep", "100000"))
	// Before the harness's leak check (cleanups run last first), also when an
	// assertion below fails: the leak check then reports only what shimd left.
	t.Cleanup(func() { removeEverything(t, rs) })
	pid := env.Shimd.PID()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close())

	f := newFuzzer(adversarialSeed, rs, is, pod.id, ctr, closed)
	attacks := make([]attack, 0, adversarialRequests)
	for len(attacks) < adversarialRequests {
		attacks = append(attacks, f.next()...)
	}
	type result struct {
		a    attack
		code codes.Code
		msg  string
	}
	results := make([]result, len(attacks))
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < adversarialCallers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := attacks[i].call(ctx)
				cancel()
				results[i] = result{a: attacks[i], code: status.Code(err), msg: status.Convert(err).Message()}
			}
		}()
	}
	for i := range attacks {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d requests in %s", len(attacks), time.Since(start).Round(time.Millisecond))

	byCode := map[codes.Code]int{}
	var bad []string
	for _, r := range results {
		byCode[r.code]++
		deliberate := r.code != codes.Unknown && r.code != codes.Internal &&
			(r.code != codes.DeadlineExceeded || r.a.rpc == "ExecSync")
		if !deliberate {
			bad = append(bad, fmt.Sprintf("%s (%s): %s: %.300s", r.a.rpc, r.a.desc, r.code, r.msg))
		}
	}
	codesSeen := make([]string, 0, len(byCode))
	for c, n := range byCode {
		codesSeen = append(codesSeen, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(codesSeen)
	t.Logf("answers by code: %s", strings.Join(codesSeen, " "))
	baits := map[codes.Code]int{}
	for _, r := range results {
		if r.a.rpc == "CreateContainer+StartContainer" {
			baits[r.code]++
		}
	}
	t.Logf("runc baits (create, then start if created): %v", baits)

	require.Equal(t, pid, env.Shimd.PID(), "shimd restarted")
	_, err = rs.Version(ctxT(t, 10*time.Second), &runtimeapi.VersionRequest{})
	require.NoError(t, err, "shimd answers after the barrage")
	logData, err := os.ReadFile(env.Shimd.LogPath())
	require.NoError(t, err)
	require.NotContains(t, string(logData), "panic", "shimd's log shows a panic")
	sort.Strings(bad)
	require.Empty(t, bad, "%d requests got no deliberate code:\n%s", len(bad), strings.Join(firstN(bad, 60), "\n"))
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... and %d more", len(s)-n))
	}
	return s
}

// removeEverything stops and removes every pod (and so every container) the barrage
// or the test made, so that the leak check finds nothing.
func removeEverything(t *testing.T, rs runtimeapi.RuntimeServiceClient) {
	t.Helper()
	for _, p := range listPods(t, rs, nil) {
		stopRemove(t, rs, p.Id)
	}
	list, err := rs.ListContainers(ctxT(t, 30*time.Second), &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	require.Empty(t, list.Containers)
}
