package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// SlowFS is a loopback FUSE filesystem over a backing directory, served by the test
// process, that sleeps a configurable delay before each operation that changes the
// disk: write, fsync, create, mkdir, rename, unlink and rmdir. Reads, lookups and
// attributes are not delayed. It stands in for a slow disk (a device-mapper delay
// target needs dm-delay, which test machines lack; FUSE needs only /dev/fuse and root).
type SlowFS struct {
	// Dir is the mount point, Backing the directory that holds the files.
	Dir, Backing string

	server  *fuse.Server
	delay   atomic.Int64 // nanoseconds
	delayed atomic.Int64 // operations delayed so far

	mu      sync.Mutex
	pending map[uint64]string // "op path" of operations sleeping now
	seq     uint64
}

// MountSlowFS mounts a SlowFS on dir (which must exist) over backing, with delay per
// changing operation, as root with allow_other (shimd, runc and containers reach it).
// A cleanup unmounts it, lazily, if the test has not (Unmount).
func MountSlowFS(t testing.TB, dir, backing string, delay time.Duration) *SlowFS {
	t.Helper()
	s := &SlowFS{Dir: dir, Backing: backing, pending: map[uint64]string{}}
	s.delay.Store(int64(delay))
	lr := &fs.LoopbackRoot{Path: backing, NewNode: s.newNode}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		t.Fatalf("harness: slowfs: %v", err)
	}
	lr.Dev = uint64(st.Dev)
	lr.RootNode = s.newNode(lr, nil, "", &st)
	sec := time.Second
	server, err := fs.Mount(dir, lr.RootNode, &fs.Options{
		EntryTimeout: &sec, AttrTimeout: &sec, NegativeTimeout: &sec,
		MountOptions: fuse.MountOptions{
			DirectMount: true, AllowOther: true, FsName: backing, Name: "slowfs",
		},
	})
	if err != nil {
		t.Fatalf("harness: mount slowfs on %s: %v", dir, err)
	}
	s.server = server
	t.Cleanup(func() { _ = s.Unmount() })
	return s
}

// SetDelay changes the delay of each later operation.
func (s *SlowFS) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// Delayed is how many operations have been delayed so far.
func (s *SlowFS) Delayed() int64 { return s.delayed.Load() }

// Pending lists the operations sleeping now, as "op path" (path relative to the
// mount point), sorted.
func (s *SlowFS) Pending() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.pending))
	for _, p := range s.pending {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Unmount detaches the filesystem (lazily: a process still holding a file there keeps
// it until it lets go) and stops serving it once the kernel has let go. Twice is fine.
func (s *SlowFS) Unmount() error {
	if s.server == nil {
		return nil
	}
	err := unix.Unmount(s.Dir, unix.MNT_DETACH)
	if err != nil && err != unix.EINVAL {
		return fmt.Errorf("unmount slowfs %s: %w", s.Dir, err)
	}
	// The serve loop ends when the kernel closes the connection.
	done := make(chan struct{})
	go func() { s.server.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("slowfs %s: still served 30s after unmount", s.Dir)
	}
	s.server = nil
	return nil
}

// slow sleeps the delay before operation op on path (relative to the root).
func (s *SlowFS) slow(ctx context.Context, op, path string) {
	d := time.Duration(s.delay.Load())
	if d <= 0 {
		return
	}
	s.delayed.Add(1)
	s.mu.Lock()
	s.seq++
	key := s.seq
	s.pending[key] = op + " " + path
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, key)
		s.mu.Unlock()
	}()
	// Not cut short by an interrupted caller: a disk finishes what it was given.
	time.Sleep(d)
}

func (s *SlowFS) newNode(root *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
	return &slowNode{LoopbackNode: fs.LoopbackNode{RootData: root}, fs: s}
}

// slowNode is a loopback node whose changing operations are delayed.
type slowNode struct {
	fs.LoopbackNode
	fs *SlowFS
}

var (
	_ fs.NodeCreater  = (*slowNode)(nil)
	_ fs.NodeOpener   = (*slowNode)(nil)
	_ fs.NodeMkdirer  = (*slowNode)(nil)
	_ fs.NodeRenamer  = (*slowNode)(nil)
	_ fs.NodeUnlinker = (*slowNode)(nil)
	_ fs.NodeRmdirer  = (*slowNode)(nil)
)

func (n *slowNode) rel(name string) string {
	return filepath.Join(n.Path(n.Root()), name)
}

func (n *slowNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.fs.slow(ctx, "create", n.rel(name))
	ino, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if fh != nil {
		fh = &slowFile{LoopbackFile: fh.(*fs.LoopbackFile), fs: n.fs, path: n.rel(name)}
	}
	return ino, fh, fl, errno
}

func (n *slowNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if fh != nil {
		fh = &slowFile{LoopbackFile: fh.(*fs.LoopbackFile), fs: n.fs, path: n.rel("")}
	}
	return fh, fl, errno
}

func (n *slowNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.slow(ctx, "mkdir", n.rel(name))
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *slowNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.fs.slow(ctx, "rename", n.rel(name))
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

func (n *slowNode) Unlink(ctx context.Context, name string) syscall.Errno {
	n.fs.slow(ctx, "unlink", n.rel(name))
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *slowNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.fs.slow(ctx, "rmdir", n.rel(name))
	return n.LoopbackNode.Rmdir(ctx, name)
}

// slowFile is a loopback file handle whose writes and fsyncs are delayed.
type slowFile struct {
	*fs.LoopbackFile
	fs   *SlowFS
	path string
}

var (
	_ fs.FileWriter  = (*slowFile)(nil)
	_ fs.FileFsyncer = (*slowFile)(nil)
)

func (f *slowFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.fs.slow(ctx, "write", f.path)
	return f.LoopbackFile.Write(ctx, data, off)
}

func (f *slowFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f.fs.slow(ctx, "fsync", f.path)
	return f.LoopbackFile.Fsync(ctx, flags)
}

// PassthroughFd says no: with FUSE passthrough the kernel would write to the backing
// file itself, past the delay.
func (f *slowFile) PassthroughFd() (int, bool) { return -1, false }

// SlowFSAvailable says why a SlowFS cannot be mounted here, or "" if it can.
func SlowFSAvailable() string {
	if os.Geteuid() != 0 {
		return "slowfs needs root"
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Sprintf("slowfs needs /dev/fuse: %v", err)
	}
	return ""
}
