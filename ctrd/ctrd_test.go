package ctrd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/shimd/shimd/record"
)

// scriptedTasks is containerd's task service answering from a script: each call
// takes the next answer for its method (nil: success), as gRPC statuses.
type scriptedTasks struct {
	tasks.TasksClient
	script map[string][]error
	calls  []string
}

func (s *scriptedTasks) answer(method string) error {
	s.calls = append(s.calls, method)
	q := s.script[method]
	if len(q) == 0 {
		return errgrpc.ToGRPC(fmt.Errorf("unexpected %s: %w", method, errdefs.ErrNotImplemented))
	}
	s.script[method] = q[1:]
	return errgrpc.ToGRPC(q[0])
}

func (s *scriptedTasks) Kill(_ context.Context, req *tasks.KillRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	if req.Signal != 9 || !req.All {
		return nil, fmt.Errorf("kill %d all=%v, want SIGKILL to all", req.Signal, req.All)
	}
	return &emptypb.Empty{}, s.answer("Kill")
}

func (s *scriptedTasks) Wait(context.Context, *tasks.WaitRequest, ...grpc.CallOption) (*tasks.WaitResponse, error) {
	return &tasks.WaitResponse{}, s.answer("Wait")
}

func (s *scriptedTasks) Delete(context.Context, *tasks.DeleteTaskRequest, ...grpc.CallOption) (*tasks.DeleteResponse, error) {
	return &tasks.DeleteResponse{}, s.answer("Delete")
}

func (s *scriptedTasks) Get(context.Context, *tasks.GetRequest, ...grpc.CallOption) (*tasks.GetResponse, error) {
	return &tasks.GetResponse{}, s.answer("Get")
}

var (
	notFound = fmt.Errorf("task x: %w", errdefs.ErrNotFound)
	running  = fmt.Errorf("cannot delete a running task: %w", errdefs.ErrFailedPrecondition)
	closed   = errors.New("ttrpc: closed")
)

// KillDeleteTask and DeleteExitedTask make the fewest calls in the common cases and
// still end with the task gone, or an error, in the others.
func TestKillDeleteTask(t *testing.T) {
	tests := []struct {
		name      string
		exited    bool // DeleteExitedTask instead of KillDeleteTask
		script    map[string][]error
		wantCalls []string
		wantErr   string
	}{
		{name: "running task", script: map[string][]error{"Kill": {nil}, "Wait": {nil}, "Delete": {nil}},
			wantCalls: []string{"Kill", "Wait", "Delete"}},
		{name: "no task", script: map[string][]error{"Kill": {notFound}, "Delete": {notFound}},
			wantCalls: []string{"Kill", "Delete"}},
		{name: "exited task", script: map[string][]error{"Kill": {notFound}, "Delete": {nil}},
			wantCalls: []string{"Kill", "Delete"}},
		{name: "kill answers NotFound while the process is still exiting",
			script:    map[string][]error{"Kill": {notFound}, "Delete": {running, nil}, "Wait": {nil}},
			wantCalls: []string{"Kill", "Delete", "Wait", "Delete"}},
		{name: "shim gone under the kill, task gone", script: map[string][]error{"Kill": {closed}, "Get": {notFound}},
			wantCalls: []string{"Kill", "Get"}},
		{name: "shim gone under the kill, task still there", script: map[string][]error{"Kill": {closed}, "Get": {nil}},
			wantCalls: []string{"Kill", "Get"}, wantErr: "kill task x: ttrpc: closed"},
		{name: "wait fails", script: map[string][]error{"Kill": {nil}, "Wait": {closed}},
			wantCalls: []string{"Kill", "Wait"}, wantErr: "wait for task x"},
		{name: "exited: one call", exited: true, script: map[string][]error{"Delete": {nil}},
			wantCalls: []string{"Delete"}},
		{name: "exited: none there", exited: true, script: map[string][]error{"Delete": {notFound}},
			wantCalls: []string{"Delete"}},
		{name: "exited: still running after all", exited: true,
			script:    map[string][]error{"Delete": {running, nil}, "Kill": {nil}, "Wait": {nil}},
			wantCalls: []string{"Delete", "Kill", "Wait", "Delete"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := &scriptedTasks{script: tt.script}
			var err error
			if tt.exited {
				err = DeleteExitedTask(context.Background(), ts, "x")
			} else {
				err = KillDeleteTask(context.Background(), ts, "x")
			}
			if tt.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.wantErr)
			}
			require.Equal(t, tt.wantCalls, ts.calls)
		})
	}
}

// recordingStore is containerd's container store, keeping what Update and Create got.
type recordingStore struct {
	containers.Store
	got   containers.Container
	paths []string
}

func (r *recordingStore) Update(_ context.Context, c containers.Container, paths ...string) (containers.Container, error) {
	r.got, r.paths = c, paths
	return c, nil
}

func (r *recordingStore) Create(_ context.Context, c containers.Container) (containers.Container, error) {
	r.got = c
	return c, nil
}

// Update names, as field paths, only the extension and the labels it writes: the
// rest of the record, other labels included, stays containerd's.
func TestUpdate(t *testing.T) {
	r := &recordingStore{}
	require.NoError(t, Update(context.Background(), r, "id1", "io.shimd.sandbox", "io.shimd/sandbox.v1",
		map[string]any{"version": 1}, map[string]string{record.LabelPhase: record.PhaseCreated, record.LabelKind: record.KindSandbox}))
	sort.Strings(r.paths)
	require.Equal(t, []string{"extensions.io.shimd.sandbox", "labels." + record.LabelKind, "labels." + record.LabelPhase}, r.paths)
	require.Equal(t, "id1", r.got.ID)
	require.JSONEq(t, `{"version":1}`, string(r.got.Extensions["io.shimd.sandbox"].GetValue()))
	require.Equal(t, record.PhaseCreated, r.got.Labels[record.LabelPhase])
}

// CreateContainer applies the options and refuses a record without a runtime.
func TestCreateContainer(t *testing.T) {
	r := &recordingStore{}
	require.NoError(t, CreateContainer(context.Background(), r, "c1", WithSnapshotKey("overlayfs", "c1"),
		func(_ context.Context, _ *client.Client, c *containers.Container) error {
			c.Runtime.Name = "io.containerd.runc.v2"
			return nil
		}))
	require.Equal(t, "c1", r.got.ID)
	require.Equal(t, "overlayfs", r.got.Snapshotter)
	require.Equal(t, "c1", r.got.SnapshotKey)
	err := CreateContainer(context.Background(), r, "c2")
	require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
}
