package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/pod"
)

// Hand-written fakes of what the runtime service uses, with error injection, for the
// unit tests of CreateContainer's undo and StartContainer's failure. They hold what
// the code under test made, so that a test can see that a failure left nothing.
// An interface method a fake does not implement panics (the embedded interface is
// nil): the code under test called something the test did not expect.

// fakeContainerd stands in for the containerd client (containerdAPI).
type fakeContainerd struct {
	mu         sync.Mutex
	nextLease  int
	leases     map[string]bool // live leases
	snapshots  map[string]bool // writable layers (active snapshots) by key
	committed  map[string]bool // image layers by chain id
	containers map[string]*fakeContainer

	// Errors to inject.
	newContainerErr, newTaskErr, startErr, prepareErr error
	// loadTaskErr, if set, answers every load of a task (a shim that does not
	// answer containerd's state call in time).
	loadTaskErr error
	// failDeletes is how many container deletes still fail (Unavailable).
	failDeletes int
	// kill, if set, answers a task's Kill.
	kill func(t *fakeTask, sig syscall.Signal) error
	// afterStart, if set, runs in a task's Start after the process started and
	// before the task's state is read for the answer (containerd's order).
	afterStart func(t *fakeTask)
}

func newFakeContainerd() *fakeContainerd {
	return &fakeContainerd{leases: map[string]bool{}, snapshots: map[string]bool{}, committed: map[string]bool{}, containers: map[string]*fakeContainer{}}
}

func (f *fakeContainerd) WithLease(ctx context.Context, _ ...leases.Opt) (context.Context, func(context.Context) error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextLease++
	id := fmt.Sprintf("lease-%d", f.nextLease)
	f.leases[id] = true
	return leases.WithLease(ctx, id), func(context.Context) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.leases, id)
		return nil
	}, nil
}

func (f *fakeContainerd) SnapshotService(string) snapshots.Snapshotter { return fakeSnapshotter{f: f} }

func (f *fakeContainerd) GetImage(context.Context, string) (client.Image, error) {
	return nil, fmt.Errorf("fake: no image store: %w", errdefs.ErrNotImplemented)
}

// Create writes a container record (ctrd.CreateContainer).
func (cs fakeContainers) Create(_ context.Context, rec containers.Container) (containers.Container, error) {
	f := cs.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.newContainerErr != nil {
		return containers.Container{}, f.newContainerErr
	}
	if _, ok := f.containers[rec.ID]; ok {
		return containers.Container{}, fmt.Errorf("container %s: %w", rec.ID, errdefs.ErrAlreadyExists)
	}
	f.containers[rec.ID] = &fakeContainer{f: f, id: rec.ID}
	return rec, nil
}

func (f *fakeContainerd) LoadContainer(_ context.Context, id string) (client.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return nil, fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

// state lists what exists, for assertions: "lease-1", "snapshot <key>", "container <id>",
// "task <id>".
func (f *fakeContainerd) state() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id := range f.leases {
		out = append(out, id)
	}
	for key := range f.snapshots {
		out = append(out, "snapshot "+key)
	}
	for id, c := range f.containers {
		out = append(out, "container "+id)
		if c.task != nil {
			out = append(out, "task "+id)
		}
	}
	return out
}

type fakeSnapshotter struct {
	snapshots.Snapshotter
	f *fakeContainerd
}

func (s fakeSnapshotter) Stat(_ context.Context, key string) (snapshots.Info, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.f.committed[key] {
		return snapshots.Info{Name: key, Kind: snapshots.KindCommitted}, nil
	}
	if s.f.snapshots[key] {
		return snapshots.Info{Name: key, Kind: snapshots.KindActive}, nil
	}
	return snapshots.Info{}, fmt.Errorf("snapshot %s: %w", key, errdefs.ErrNotFound)
}

// Prepare makes the writable layer; it has no mounts, so the code under test
// "mounts" an empty directory (which needs no root).
func (s fakeSnapshotter) Prepare(_ context.Context, key, parent string, _ ...snapshots.Opt) ([]mount.Mount, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.f.prepareErr != nil {
		return nil, s.f.prepareErr
	}
	if !s.f.committed[parent] {
		return nil, fmt.Errorf("parent %s: %w", parent, errdefs.ErrNotFound)
	}
	if s.f.snapshots[key] {
		return nil, fmt.Errorf("snapshot %s: %w", key, errdefs.ErrAlreadyExists)
	}
	s.f.snapshots[key] = true
	return nil, nil
}

func (s fakeSnapshotter) Remove(_ context.Context, key string) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if !s.f.snapshots[key] {
		return fmt.Errorf("snapshot %s: %w", key, errdefs.ErrNotFound)
	}
	delete(s.f.snapshots, key)
	return nil
}

// fakeContainer is a containerd container; Delete leaves its snapshot to the
// caller (as a delete without WithSnapshotCleanup would).
type fakeContainer struct {
	client.Container
	f    *fakeContainerd
	id   string
	task *fakeTask // guarded by f.mu
}

func (c *fakeContainer) ID() string { return c.id }

// Task loads the task; with attach, it attaches to the task's FIFOs as the
// client does.
func (c *fakeContainer) Task(_ context.Context, attach cio.Attach) (client.Task, error) {
	c.f.mu.Lock()
	t, err := c.task, c.f.loadTaskErr
	c.f.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case t == nil:
		return nil, fmt.Errorf("no running task found: task %s not found: %w", c.id, errdefs.ErrNotFound)
	case attach != nil:
		fifos := cio.NewFIFOSet(cio.Config{Stdout: t.stdout, Stderr: t.stderr}, nil)
		if _, err := attach(fifos); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (c *fakeContainer) Delete(context.Context, ...client.DeleteOpts) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.task != nil {
		return fmt.Errorf("container %s has a task: %w", c.id, errdefs.ErrFailedPrecondition)
	}
	if c.f.failDeletes > 0 {
		c.f.failDeletes--
		return fmt.Errorf("fake: delete container %s: %w", c.id, errdefs.ErrUnavailable)
	}
	delete(c.f.containers, c.id)
	return nil
}

// fakeTasks is containerd's task service (ctrd.NewTask and StartTask use it). Its
// errors are gRPC statuses, as the real service's are.
type fakeTasks struct {
	tasks.TasksClient
	f *fakeContainerd
}

func (f *fakeContainerd) TaskService() tasks.TasksClient { return fakeTasks{f: f} }

// fakeContainers is containerd's container store: Delete, as fakeContainer.Delete.
type fakeContainers struct {
	containers.Store
	f *fakeContainerd
}

func (f *fakeContainerd) ContainerService() containers.Store { return fakeContainers{f: f} }

func (cs fakeContainers) Delete(ctx context.Context, id string) error {
	cs.f.mu.Lock()
	c, ok := cs.f.containers[id]
	cs.f.mu.Unlock()
	if !ok {
		return fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return c.Delete(ctx)
}

// Kill signals the task with the injected kill; without one, a kill succeeds.
func (ts fakeTasks) Kill(ctx context.Context, req *tasks.KillRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	t, err := ts.task(req.ContainerID)
	if err != nil {
		return nil, err
	}
	if ts.f.kill == nil {
		return &emptypb.Empty{}, nil
	}
	if err := t.Kill(ctx, syscall.Signal(req.Signal)); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	return &emptypb.Empty{}, nil
}

// Get answers whether the task exists.
func (ts fakeTasks) Get(_ context.Context, req *tasks.GetRequest, _ ...grpc.CallOption) (*tasks.GetResponse, error) {
	if _, err := ts.task(req.ContainerID); err != nil {
		return nil, err
	}
	return &tasks.GetResponse{}, nil
}

// Wait: the fake's processes have always exited once killed.
func (ts fakeTasks) Wait(_ context.Context, req *tasks.WaitRequest, _ ...grpc.CallOption) (*tasks.WaitResponse, error) {
	if _, err := ts.task(req.ContainerID); err != nil {
		return nil, err
	}
	return &tasks.WaitResponse{ExitStatus: 137}, nil
}

// Delete deletes the task as fakeTask.Delete does.
func (ts fakeTasks) Delete(ctx context.Context, req *tasks.DeleteTaskRequest, _ ...grpc.CallOption) (*tasks.DeleteResponse, error) {
	t, err := ts.task(req.ContainerID)
	if err != nil {
		return nil, err
	}
	if _, err := t.Delete(ctx); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	return &tasks.DeleteResponse{ID: req.ContainerID}, nil
}

func (ts fakeTasks) task(id string) (*fakeTask, error) {
	ts.f.mu.Lock()
	defer ts.f.mu.Unlock()
	c, ok := ts.f.containers[id]
	if !ok || c.task == nil {
		return nil, errgrpc.ToGRPC(fmt.Errorf("task %s: %w", id, errdefs.ErrNotFound))
	}
	return c.task, nil
}

// Create makes the task, which holds its stdout and stderr FIFOs open as a shim does
// until the task is deleted.
func (ts fakeTasks) Create(_ context.Context, req *tasks.CreateTaskRequest, _ ...grpc.CallOption) (*tasks.CreateTaskResponse, error) {
	ts.f.mu.Lock()
	c, ok := ts.f.containers[req.ContainerID]
	ts.f.mu.Unlock()
	if !ok {
		return nil, errgrpc.ToGRPC(fmt.Errorf("container %s: %w", req.ContainerID, errdefs.ErrNotFound))
	}
	t := &fakeTask{c: c, startErr: ts.f.startErr, stdout: req.Stdout, stderr: req.Stderr}
	for _, p := range []string{req.Stdout, req.Stderr} {
		if p == "" {
			continue
		}
		w, err := os.OpenFile(p, os.O_RDWR, 0) // O_RDWR: a FIFO's writer that never blocks
		if err != nil {
			t.closeFIFOs()
			return nil, errgrpc.ToGRPC(err)
		}
		t.fifos = append(t.fifos, w)
	}
	ts.f.mu.Lock()
	defer ts.f.mu.Unlock()
	if ts.f.newTaskErr != nil {
		t.closeFIFOs()
		return nil, errgrpc.ToGRPC(ts.f.newTaskErr)
	}
	c.task = t
	return &tasks.CreateTaskResponse{ContainerID: c.id, Pid: t.Pid()}, nil
}

func (ts fakeTasks) Start(_ context.Context, req *tasks.StartRequest, _ ...grpc.CallOption) (*tasks.StartResponse, error) {
	ts.f.mu.Lock()
	c, ok := ts.f.containers[req.ContainerID]
	ts.f.mu.Unlock()
	if !ok || c.task == nil {
		return nil, errgrpc.ToGRPC(fmt.Errorf("task %s: %w", req.ContainerID, errdefs.ErrNotFound))
	}
	t := c.task
	if err := t.Start(context.Background()); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if ts.f.afterStart != nil {
		ts.f.afterStart(t)
	}
	// containerd asks the shim for the started process's state: a task deleted
	// meanwhile fails the start.
	if _, err := ts.task(req.ContainerID); err != nil {
		return nil, err
	}
	return &tasks.StartResponse{Pid: t.Pid()}, nil
}

type fakeTask struct {
	client.Task
	c        *fakeContainer
	startErr error
	fifos    []*os.File // the shim's side of stdout and stderr
	// stdout and stderr are the FIFOs' paths.
	stdout, stderr string
}

func (t *fakeTask) closeFIFOs() {
	for _, f := range t.fifos {
		f.Close()
	}
}

func (t *fakeTask) ID() string  { return t.c.id }
func (t *fakeTask) Pid() uint32 { return 4242 }

func (t *fakeTask) Start(context.Context) error { return t.startErr }

// Status: a task that was not deleted runs.
func (t *fakeTask) Status(context.Context) (client.Status, error) {
	return client.Status{Status: client.Running}, nil
}

func (t *fakeTask) Kill(_ context.Context, sig syscall.Signal, _ ...client.KillOpts) error {
	if t.c.f.kill == nil {
		return errdefs.ErrNotImplemented
	}
	return t.c.f.kill(t, sig)
}

func (t *fakeTask) Delete(context.Context, ...client.ProcessDeleteOpts) (*client.ExitStatus, error) {
	t.c.f.mu.Lock()
	defer t.c.f.mu.Unlock()
	if t.c.task != t {
		return nil, fmt.Errorf("task %s: %w", t.c.id, errdefs.ErrNotFound)
	}
	t.c.task = nil
	t.closeFIFOs()
	return nil, nil
}

// fakePods holds READY pods (Pods); it runs none.
type fakePods struct {
	sbs map[string]*pod.Pod // tests change them in place
}

func (f *fakePods) Pod(id string) (pod.Pod, error) {
	if sb, ok := f.sbs[id]; ok {
		return *sb, nil
	}
	return pod.Pod{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
}

func (f *fakePods) PausePID(_ context.Context, id string) uint32 {
	if sb, ok := f.sbs[id]; ok {
		return sb.PID
	}
	return 0
}

func (f *fakePods) PodShimSocket(id string) (string, error) {
	return "", fmt.Errorf("shim of %s: %w", id, errdefs.ErrNotFound)
}

func (f *fakePods) Pods() []pod.Pod {
	var out []pod.Pod
	for _, sb := range f.sbs {
		out = append(out, *sb)
	}
	return out
}

// fakeImages has one image, "busybox", whose layers are unpacked in ctrd.
type fakeImages struct{ img *image.Image }

func (f fakeImages) Find(_ context.Context, ref string) (*image.Image, error) {
	if ref != "busybox" {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return f.img, nil
}

func (f fakeImages) SnapshotterRoot(context.Context, string) (string, error) {
	return "", errdefs.ErrNotImplemented
}

// testService is a Manager on fakes, with one READY sandbox (testService.sb) whose
// log directory is logDir.
type testService struct {
	*Manager
	ctrd   *fakeContainerd
	sb     *pod.Pod
	logDir string
}

// testLayer is the one layer of newTestService's image, and so its chain id.
var testLayer = "sha256:" + fmt.Sprintf("%064x", 1)

func newTestService(t *testing.T) *testService {
	t.Helper()
	dir := t.TempDir()
	ctrd := newFakeContainerd()
	layer := testLayer
	img := &image.Image{
		ID: "sha256:" + fmt.Sprintf("%064x", 2), Records: []string{"docker.io/library/busybox:latest"},
		Config: ocispec.Image{RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.Digest(layer)}}},
	}
	ctrd.committed[layer] = true // identity.ChainID of one layer is that layer
	logDir := filepath.Join(dir, "logs")
	id := pod.NewID()
	pods := filepath.Join(dir, "pods", id)
	sb := &pod.Pod{ID: id, PID: 1, NetNSPath: filepath.Join(dir, "netns"), Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "pod", Namespace: "default", Uid: "uid"},
		LogDirectory: logDir,
	}, Files: pod.Files{Hostname: pods + "/hostname", Hosts: pods + "/hosts", ResolvConf: pods + "/resolv.conf", Shm: pods + "/shm"}}
	s := newManager(Options{
		Pods:    &fakePods{sbs: map[string]*pod.Pod{sb.ID: sb}},
		Images:  fakeImages{img: img},
		RootDir: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state"),
		Namespace: "test", CgroupDriver: "cgroupfs", Handlers: pod.Handlers{Default: "runc", ByName: map[string]pod.Handler{
			"runc": {Type: "io.containerd.runc.v2", Snapshotter: "overlayfs"}}},
		Node: NodeInfo{CPUs: "0", MemoryNodes: "0"},
	}, ctrd)
	return &testService{Manager: s, ctrd: ctrd, sb: sb, logDir: logDir}
}

func containerConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"sleep", "60"},
		LogPath:  name + ".log",
	}
}

// useCleanups gives the manager a cleanup queue after the fact, as Options.Cleanups
// would have.
func (ts *testService) useCleanups(q *cleanup.Queue) {
	ts.opts.Cleanups = q
	ts.deleter.cleanups = q
}
