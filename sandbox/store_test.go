package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

func TestStoreReserveWaitsForFirstRun(t *testing.T) {
	s := newStore()
	r1, fresh := s.reserve("pod")
	require.True(t, fresh)
	r2, fresh := s.reserve("pod")
	require.False(t, fresh, "a retry joins the running Run")
	got := make(chan string, 1)
	go func() { id, _ := r2.wait(context.Background()); got <- id }()
	sb := &Sandbox{ID: "0123", Name: "pod", CreatedAt: time.Now()}
	s.finish("pod", r1, sb, nil)
	require.Equal(t, "0123", <-got)
	_, fresh = s.reserve("pod")
	require.False(t, fresh, "a finished Run keeps its name until Remove")
	s.delete(sb)
	_, fresh = s.reserve("pod")
	require.True(t, fresh)
}

func TestStoreFailedRunFreesName(t *testing.T) {
	s := newStore()
	r, _ := s.reserve("pod")
	s.finish("pod", r, nil, errors.New("boom"))
	_, err := r.wait(context.Background())
	require.EqualError(t, err, "boom")
	_, fresh := s.reserve("pod")
	require.True(t, fresh)
}

func TestStoreGet(t *testing.T) {
	s := newStore()
	s.add(&Sandbox{ID: "abc111", Name: "a"})
	s.add(&Sandbox{ID: "abc222", Name: "b"})
	sb, err := s.get("abc1")
	require.NoError(t, err)
	require.Equal(t, "abc111", sb.ID)
	_, err = s.get("abc")
	require.True(t, errdefs.IsInvalidArgument(err), "ambiguous prefix: %v", err)
	_, err = s.get("zzz")
	require.True(t, errdefs.IsNotFound(err))
	_, err = s.get("")
	require.True(t, errdefs.IsInvalidArgument(err))
}

func TestIsID(t *testing.T) {
	require.True(t, isID(pod.NewID()))
	require.False(t, isID("cni-1234"))
	require.False(t, isID("ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"))
}

// An undo stack runs in reverse, every undo even after one failed, and says
// whether one failed (Run then leaves the sandbox to the cleanup queue).
func TestUndoStackRun(t *testing.T) {
	var order []int
	var u undoStack
	for i := 0; i < 3; i++ {
		u.push(func(context.Context) error {
			order = append(order, i)
			if i == 1 {
				return errors.New("shim busy")
			}
			return nil
		})
	}
	require.True(t, u.run(context.Background(), "sandbox x"))
	require.Equal(t, []int{2, 1, 0}, order)
	order = nil
	require.False(t, undoStack{func(context.Context) error { order = append(order, 9); return nil }}.run(context.Background(), "sandbox y"))
	require.Equal(t, []int{9}, order)
}

// A pod's file paths: those of its layout, the host's /dev/shm for a pod in the
// node's IPC namespace, and the same on every later call (they are reckoned once).
func TestFilesIn(t *testing.T) {
	l := layout{root: "/var/lib/shimd", state: "/run/shimd"}
	sb := &Sandbox{ID: "abc", Config: &runtimeapi.PodSandboxConfig{}}
	want := pod.Files{Hostname: "/var/lib/shimd/sandboxes/abc/hostname", Hosts: "/var/lib/shimd/sandboxes/abc/hosts",
		ResolvConf: "/var/lib/shimd/sandboxes/abc/resolv.conf", Shm: "/run/shimd/sandboxes/abc/shm"}
	require.Equal(t, want, sb.filesIn(l))
	require.Equal(t, want, sb.filesIn(l))

	host := &Sandbox{ID: "def", Config: &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{
		SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}}}}}
	require.Equal(t, "/dev/shm", host.filesIn(l).Shm)
}

// A list trusts a pause-less pod's pins for pinCheckEvery after it last found them
// mounted; PodSandboxStatus (State) checks them on every call.
func TestListStateChecksPinsAtMostOncePerPeriod(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "netns") // not a namespace: the pin is gone
	now := time.Now()

	sb := &Sandbox{ID: "pl1", Pauseless: true, NetNSPath: gone, state: pod.Ready}
	require.Equal(t, pod.NotReady, sb.listState(now), "never checked: checked now")

	sb = &Sandbox{ID: "pl2", Pauseless: true, NetNSPath: gone, state: pod.Ready}
	sb.pinsChecked.Store(now.Add(-pinCheckEvery / 2).UnixNano())
	require.Equal(t, pod.Ready, sb.listState(now), "checked within the period: trusted")
	require.Equal(t, pod.NotReady, sb.listState(now.Add(pinCheckEvery)), "the period over: checked again")
	require.Equal(t, pod.NotReady, sb.listState(now), "NOTREADY stays")

	sb = &Sandbox{ID: "pl3", Pauseless: true, NetNSPath: gone, state: pod.Ready}
	sb.pinsChecked.Store(now.UnixNano())
	require.Equal(t, pod.NotReady, sb.State(), "State checks on every call")
	require.Equal(t, pod.NotReady, sb.listState(now))

	withPause := &Sandbox{ID: "p", NetNSPath: gone, state: pod.Ready}
	require.Equal(t, pod.Ready, withPause.listState(now), "a pod with a pause has no pins")
}
