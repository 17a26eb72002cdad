package container

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A CreateContainer of a name whose first CreateContainer still runs is the kubelet's
// retry of a call it gave up on: it waits for the first and gets its container, or
// takes the name afresh if the first failed; a caller that gives up first gets its
// deadline, and a container of that name with another config is AlreadyExists.
func TestReserveNameWaitsForCreateAtWork(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}}
	other := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Command: []string{"other"}}
	for _, tc := range []struct {
		name    string
		outcome func(s *Manager) // how the first CreateContainer ends
		want    string           // the retry's container; "" = it reserved the name itself
	}{
		{"first succeeds", func(s *Manager) {
			c := &Container{ID: "made", Name: "n", Config: cfg, exited: make(chan struct{})}
			c.status.State = runtimeapi.ContainerState_CONTAINER_CREATED
			s.containers.add(c)
		}, "made"},
		{"first fails", func(s *Manager) { s.containers.release("n") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Manager{containers: newContainerStore()}
			c, err := s.reserveName(context.Background(), "n", cfg)
			require.NoError(t, err)
			require.Nil(t, c)

			type result struct {
				c   *Container
				err error
			}
			retry := make(chan result, 1)
			go func() {
				c, err := s.reserveName(context.Background(), "n", cfg)
				retry <- result{c, err}
			}()
			select {
			case r := <-retry:
				t.Fatalf("the retry did not wait for the first CreateContainer: %v, %v", r.c, r.err)
			case <-time.After(50 * time.Millisecond):
			}
			tc.outcome(s)
			r := <-retry
			require.NoError(t, r.err)
			if tc.want == "" {
				require.Nil(t, r.c)
				_, err := s.containers.reserve("n")
				require.ErrorIs(t, err, errdefs.ErrAlreadyExists, "the retry holds the name")
				return
			}
			require.Equal(t, tc.want, r.c.ID)
			_, err = s.reserveName(context.Background(), "n", other)
			require.ErrorIs(t, err, errdefs.ErrAlreadyExists, "another config under the same name")
		})
	}

	t.Run("retry gives up first", func(t *testing.T) {
		s := &Manager{containers: newContainerStore()}
		_, err := s.reserveName(context.Background(), "n", cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err = s.reserveName(ctx, "n", cfg)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}
