package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A StartContainer that fails leaves the container EXITED with reason StartError and
// exit code 128 (what the kubelet expects, not CREATED), in memory and in its status
// file; it deletes the task it made, closes the container's log file, publishes
// STOPPED and answers with the error's class: FailedPrecondition for a command the
// image cannot run, else the runtime's own.
func TestStartContainerFailure(t *testing.T) {
	const notFound = `failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: ` +
		`error during container init: exec: "/nope": stat /nope: no such file or directory: unknown`
	tests := []struct {
		name    string
		inject  func(f *fakeContainerd)
		class   func(error) bool
		wantErr string
	}{
		{
			name:   "task cannot be made",
			inject: func(f *fakeContainerd) { f.newTaskErr = fmt.Errorf("fake shim: %w", errdefs.ErrUnavailable) },
			class:  errdefs.IsUnavailable, wantErr: "create task: fake shim",
		},
		{
			name:   "command not found",
			inject: func(f *fakeContainerd) { f.newTaskErr = errors.New(notFound) },
			class:  errdefs.IsFailedPrecondition, wantErr: `its command cannot be run: exec: "/nope": stat /nope: no such file or directory`,
		},
		{
			name:   "task made, start fails",
			inject: func(f *fakeContainerd) { f.startErr = errors.New("fake: OCI runtime start failed") },
			class:  func(err error) bool { return !errdefs.IsFailedPrecondition(err) }, wantErr: "start task: fake: OCI runtime start failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			ts := newTestService(t)
			resp, err := ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("c"), SandboxConfig: ts.sb.Config})
			require.NoError(t, err)
			id := resp.ContainerId
			c, err := ts.containers.get(id)
			require.NoError(t, err)
			events, cancel := ts.events.hub.subscribe()
			defer cancel()
			tt.inject(ts.ctrd)

			_, err = ts.Start(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
			require.Error(t, err)
			require.ErrorContains(t, err, tt.wantErr)
			require.True(t, tt.class(err), "error class of %v", err)

			st := c.Status()
			require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, st.State)
			require.Equal(t, int32(128), st.ExitCode)
			require.Equal(t, "StartError", st.Reason)
			require.Equal(t, err.Error(), st.Message)
			require.NotZero(t, st.FinishedAt)
			require.False(t, st.Starting)
			onDisk, rerr := ts.dirs.readStatus(id)
			require.NoError(t, rerr)
			require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, onDisk.State, "status file")
			require.Equal(t, "StartError", onDisk.Reason, "status file")

			require.ElementsMatch(t, []string{"snapshot " + id, "container " + id}, ts.ctrd.state(), "the task is deleted")
			logPath := filepath.Join(ts.logDir, "c.log")
			require.Eventually(t, func() bool { return !slices.Contains(openFiles(t), logPath) }, 5*time.Second, 10*time.Millisecond,
				"the log file is closed")
			select {
			case <-c.exited:
			default:
				t.Fatal("exited is not closed: StopContainer would wait for an exit that never comes")
			}
			require.Empty(t, dirEntries(t, ts.dirs.fifoDir(id)), "the FIFOs are removed")
			select {
			case ev := <-events:
				require.Equal(t, id, ev.ContainerId)
				require.Equal(t, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, ev.ContainerEventType)
			case <-time.After(time.Second):
				t.Fatal("no STOPPED event")
			}

			// The container does not start again.
			_, err = ts.Start(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
			require.True(t, errdefs.IsFailedPrecondition(err), "second start: %v", err)
		})
	}
}

// openFiles lists the paths this process has open.
func openFiles(t *testing.T) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var out []string
	for _, fd := range fds {
		if p, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// A command that ends at once: its exit is told while StartContainer still waits
// for containerd's answer to the task's start (which reads the task's state after
// starting it). The start succeeds; the exit is recorded after it, and the task is
// deleted only then.
func TestStartContainerExitToldDuringStart(t *testing.T) {
	ctx := context.Background()
	ts := newTestService(t)
	resp, err := ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("quick"), SandboxConfig: ts.sb.Config})
	require.NoError(t, err)
	id := resp.ContainerId
	c, err := ts.containers.get(id)
	require.NoError(t, err)
	deletedEarly := false
	ts.ctrd.afterStart = func(task *fakeTask) {
		task.closeFIFOs() // the process ended: its output is complete
		ts.exits.TaskExit(id, id, 0, time.Now())
		// Give the exit's recording every chance to delete the task now.
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) && !deletedEarly {
			ts.ctrd.mu.Lock()
			deletedEarly = ts.ctrd.containers[id].task == nil
			ts.ctrd.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}
	_, err = ts.Start(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	require.NoError(t, err)
	require.False(t, deletedEarly, "the task was deleted before its start returned")
	ts.finishing.Wait()
	st := c.Status()
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, st.State)
	require.Equal(t, "Completed", st.Reason)
	require.Equal(t, int32(0), st.ExitCode)
	require.NotZero(t, st.StartedAt)
	require.LessOrEqual(t, st.StartedAt, st.FinishedAt)
	require.False(t, st.Starting)
	require.ElementsMatch(t, []string{"snapshot " + id, "container " + id}, ts.ctrd.state(), "the task is deleted after the start")
}
