//go:build integration

package e2e

import (
	"errors"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// recvAll reads a server stream to its end and returns the ids it carried.
func recvAll[M any](t *testing.T, recv func() (M, error), ids func(M) []string) []string {
	t.Helper()
	var out []string
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			sort.Strings(out)
			return out
		}
		require.NoError(t, err)
		out = append(out, ids(m)...)
	}
}

func sorted(ids []string) []string { sort.Strings(ids); return ids }

func podIDs(m *runtimeapi.StreamPodSandboxesResponse) (ids []string) {
	for _, p := range m.PodSandboxes {
		ids = append(ids, p.Id)
	}
	return ids
}

// The streaming list RPCs of CRI v0.37 return what the List RPCs return, filters
// included.
func TestListStreams(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs, is := env.Shimd.Runtime(t), env.Shimd.Images(t)
	var pods []*podFixture
	for _, name := range []string{"lista", "listb"} {
		p := newPod(t, rs, name)
		p.run(p.container("app", "sleep", "3600"))
		pods = append(pods, p)
	}
	ctx := ctxT(t, time.Minute)

	list, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	require.NoError(t, err)
	var want []string
	for _, p := range list.Items {
		want = append(want, p.Id)
	}
	require.Len(t, want, 2)
	sp, err := rs.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{})
	require.NoError(t, err)
	require.Equal(t, sorted(want), recvAll(t, sp.Recv, podIDs))
	sp, err = rs.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{Filter: &runtimeapi.PodSandboxFilter{Id: pods[0].id}})
	require.NoError(t, err)
	require.Equal(t, []string{pods[0].id}, recvAll(t, sp.Recv, podIDs))

	cl, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	want = nil
	for _, c := range cl.Containers {
		want = append(want, c.Id)
	}
	require.Len(t, want, 2)
	sc, err := rs.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{})
	require.NoError(t, err)
	require.Equal(t, sorted(want), recvAll(t, sc.Recv, func(m *runtimeapi.StreamContainersResponse) (ids []string) {
		for _, c := range m.Containers {
			ids = append(ids, c.Id)
		}
		return ids
	}))
	scs, err := rs.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{})
	require.NoError(t, err)
	require.Equal(t, sorted(want), recvAll(t, scs.Recv, func(m *runtimeapi.StreamContainerStatsResponse) (ids []string) {
		for _, s := range m.ContainerStats {
			ids = append(ids, s.Attributes.GetId())
		}
		return ids
	}))
	sps, err := rs.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: pods[1].id}})
	require.NoError(t, err)
	require.Equal(t, []string{pods[1].id}, recvAll(t, sps.Recv, func(m *runtimeapi.StreamPodSandboxStatsResponse) (ids []string) {
		for _, s := range m.PodSandboxStats {
			ids = append(ids, s.Attributes.GetId())
		}
		return ids
	}))

	il, err := is.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	require.NoError(t, err)
	want = nil
	for _, i := range il.Images {
		want = append(want, i.Id)
	}
	require.NotEmpty(t, want)
	si, err := is.StreamImages(ctx, &runtimeapi.StreamImagesRequest{})
	require.NoError(t, err)
	require.Equal(t, sorted(want), recvAll(t, si.Recv, func(m *runtimeapi.StreamImagesResponse) (ids []string) {
		for _, i := range m.Images {
			ids = append(ids, i.Id)
		}
		return ids
	}))
	for _, p := range pods {
		stopRemove(t, rs, p.id)
	}
}
