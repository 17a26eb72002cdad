package container

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/spec"
)

// The checks of CreateContainer that need the host or the image's files. What they
// refuse, runc would refuse at StartContainer, after the container was made, with an
// error only its text explains (gRPC Unknown). The checks that need nothing but the
// request are in runtime/validate*.go.

// checkHostPaths: the source of every bind mount must exist on the host when the
// container is made, else runc fails its start with an error only its text explains.
// A missing one is made as a directory (0755, root's, its missing parents too), as
// containerd's CRI plugin, CRI-O and Docker do: manifests rely on it (flannel's
// DaemonSet mounts /run/flannel with no hostPath type, before flanneld makes it).
// With reject (config key reject_absent_mount_sources) a missing source is NotFound
// naming the field instead, as the CRI's api.proto words it ("If the hostPath
// doesn't exist, then runtimes should report error"): a hostPath volume that may be
// missing then takes type DirectoryOrCreate or FileOrCreate, for which the kubelet
// creates it. A source under a file, a dangling symlink, a symlink loop or a name too
// long is refused either way.
func checkHostPaths(cfg *runtimeapi.ContainerConfig, reject bool) error {
	for i, m := range cfg.GetMounts() {
		hp := m.GetHostPath()
		if hp == "" {
			continue // an image volume (or a mount the spec builder refuses)
		}
		_, err := os.Stat(hp)
		if err != nil && !reject && errors.Is(err, fs.ErrNotExist) {
			// MkdirAll refuses a dangling symlink (it exists, and is no
			// directory): the error stays the missing target's.
			if mkErr := os.MkdirAll(hp, 0o755); mkErr == nil {
				_, err = os.Stat(hp)
			} else {
				err = fmt.Errorf("%w; not made: %v", err, mkErr)
			}
		}
		if err != nil {
			return fmt.Errorf("config.mounts[%d].host_path %s: %w", i, quote(hp), spec.ClassifyPathError(err))
		}
	}
	return nil
}

// treePath is a path runc looks up in the container's tree at start, and fails on if a
// file stands where a directory must be: the working directory (made if missing; it
// must be a directory itself) and the masked and read-only paths (skipped if missing;
// they may end at a file).
type treePath struct {
	field, path string
	fileOK      bool // the last name may be a file
	fromImage   bool // the image's own (its working dir): FailedPrecondition, not the request's fault
}

// treePaths are the request's paths, and the image's working directory (imageWD) when
// the request sets none: the process starts there, so runc makes it as well.
func treePaths(cfg *runtimeapi.ContainerConfig, imageWD string) []treePath {
	var out []treePath
	switch wd := cfg.GetWorkingDir(); {
	case wd != "":
		out = append(out, treePath{field: "config.working_dir", path: wd})
	case imageWD != "":
		out = append(out, treePath{field: "image.working_dir", path: imageWD, fromImage: true})
	}
	sc := cfg.GetLinux().GetSecurityContext()
	for name, list := range map[string][]string{"masked_paths": sc.GetMaskedPaths(), "readonly_paths": sc.GetReadonlyPaths()} {
		for i, p := range list {
			out = append(out, treePath{field: fmt.Sprintf("config.linux.security_context.%s[%d]", name, i), path: p, fileOK: true})
		}
	}
	return out
}

// mayNeedRootfs: some tree path may lie in the image's rootfs and was not found sound
// in this image (chain id) before, so the writable layer is prepared before the
// container record. The kubelet's masked and read-only paths are all in /proc and
// /sys, which the image does not hold.
func (tc *treeCache) mayNeedRootfs(chainID string, cfg *runtimeapi.ContainerConfig, imageWD string) bool {
	return slices.ContainsFunc(treePaths(cfg, imageWD), func(p treePath) bool {
		c := path.Clean(p.path)
		return !under(c, "/proc") && !under(c, "/sys") && !tc.has(chainID, treePath{path: c, fileOK: p.fileOK})
	})
}

// checkTreePaths judges the tree paths against the container as runc will build it
// (treePathsOutsideImage), and those left in the image's rootfs in the writable layer
// (rootfs, mounted read-only, and only for paths not found sound in this image
// before). A file where a directory must be is InvalidArgument naming the field, or
// FailedPrecondition naming image.working_dir when the image's own working directory
// is one.
func (tc *treeCache) checkTreePaths(ctx context.Context, chainID string, cfg *runtimeapi.ContainerConfig, imageWD string, sp *specs.Spec, rootfs []mount.Mount) error {
	inImage, err := treePathsOutsideImage(cfg, imageWD, sp)
	if err != nil {
		return err
	}
	inImage = slices.DeleteFunc(inImage, func(p treePath) bool { return tc.has(chainID, p) })
	if len(inImage) == 0 || len(rootfs) == 0 {
		return nil
	}
	var found error
	if err := mount.WithReadonlyTempMount(ctx, rootfs, func(root string) error {
		found = checkInImage(root, inImage)
		return nil
	}); err != nil {
		return fmt.Errorf("mount the writable layer to check paths: %w", err)
	}
	if found == nil {
		tc.add(chainID, inImage)
	}
	return found
}

// treeCache keeps, by chain id, the paths found sound in an image: its files never
// change, and a container's writable layer starts empty. At most treeCacheSize.
type treeCache struct {
	mu sync.Mutex
	ok map[treeKey]bool
}

type treeKey struct {
	chainID, path string
	fileOK        bool
}

const treeCacheSize = 4096

func (c *treeCache) has(chainID string, p treePath) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok[treeKey{chainID, p.path, p.fileOK}]
}

func (c *treeCache) add(chainID string, paths []treePath) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok == nil || len(c.ok)+len(paths) > treeCacheSize {
		c.ok = map[treeKey]bool{} // start again: a check costs one mount
	}
	for _, p := range paths {
		c.ok[treeKey{chainID, p.path, p.fileOK}] = true
	}
}

// treePathsOutsideImage judges a path under a bind mount against the mount's host
// source, one in /dev against the device nodes runc makes, one on another kernel
// filesystem (proc, sysfs, tmpfs...) not at all, and returns the rest, cleaned: they
// are in the image's rootfs.
func treePathsOutsideImage(cfg *runtimeapi.ContainerConfig, imageWD string, s *specs.Spec) ([]treePath, error) {
	var inImage []treePath
	for _, p := range treePaths(cfg, imageWD) {
		clean := path.Clean(p.path)
		m := coveringMount(s.Mounts, clean)
		switch {
		case m == nil:
			p.path = clean
			inImage = append(inImage, p)
		case m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind"):
			if err := checkInBindSource(p, m, strings.TrimPrefix(clean, path.Clean(m.Destination))); err != nil {
				return nil, err
			}
		case path.Clean(m.Destination) == "/dev":
			if err := checkInDev(p, s, clean); err != nil {
				return nil, err
			}
		}
	}
	return inImage, nil
}

// checkInImage walks each path in the image's rootfs, mounted at root.
func checkInImage(root string, paths []treePath) error {
	for _, p := range paths {
		if err := walkTree(tree{root: root, at: "/", what: "a file in the image", follow: true}, p, p.path); err != nil {
			return err
		}
	}
	return nil
}

// coveringMount is the mount whose destination is path p or holds it: the deepest, and
// of equals the last (it is mounted over the others). nil for the image's rootfs.
func coveringMount(mounts []specs.Mount, p string) *specs.Mount {
	var best *specs.Mount
	for i := range mounts {
		d := path.Clean(mounts[i].Destination)
		if d == "/" || !under(p, d) {
			continue
		}
		if best == nil || len(d) >= len(path.Clean(best.Destination)) {
			best = &mounts[i]
		}
	}
	return best
}

// under: p is dir or inside it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// checkInBindSource judges the part of a path below a bind mount's destination in its
// host source. A missing source is left to checkHostPaths.
func checkInBindSource(p treePath, m *specs.Mount, rest string) error {
	fi, err := os.Stat(m.Source)
	if err != nil {
		return nil
	}
	if !fi.IsDir() {
		if rest == "" && p.fileOK {
			return nil
		}
		return notADirectory(p, m.Destination, "a file mounted from the host")
	}
	// Symlinks in a host directory are not followed here: runc resolves them in the
	// container, which this check does not model.
	return walkTree(tree{root: m.Source, at: m.Destination, what: "a file in the host directory mounted at " + m.Destination}, p, rest)
}

// runcDevices are the nodes and links runc makes in a container's /dev (besides the
// config's devices): /dev/fd links to a directory, the others are files.
var runcDevices = []string{"null", "zero", "full", "random", "urandom", "tty", "ptmx", "console", "stdin", "stdout", "stderr", "core"}

func checkInDev(p treePath, s *specs.Spec, clean string) error {
	nodes := make([]string, 0, len(runcDevices))
	for _, d := range runcDevices {
		nodes = append(nodes, "/dev/"+d)
	}
	if s.Linux != nil {
		for _, d := range s.Linux.Devices {
			nodes = append(nodes, path.Clean(d.Path))
		}
	}
	for _, n := range nodes {
		switch {
		case clean == n && p.fileOK:
		case under(clean, n):
			return notADirectory(p, n, "a device node")
		}
	}
	return nil
}

// tree is a directory of the host seen at container path at.
type tree struct {
	root, at, what string
	follow         bool // follow symlinks inside root; else a walk stops at one, accepting
}

// walkTree looks up rel (a path below t.at) in t name by name, as the kernel would
// with t.root as "/": a symlink is followed inside root, ".." stops at root, a missing
// name ends the walk (runc makes the working directory, skips a missing mask). A file
// before the last name, or as the last name where a directory must be, is
// InvalidArgument.
func walkTree(t tree, p treePath, rel string) error {
	const maxLinks = 40 // the kernel's MAXSYMLINKS
	names := strings.Split(rel, "/")
	var done []string // the resolved directories below root
	links := 0
	for len(names) > 0 {
		name := names[0]
		names = names[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		cur := append(slices.Clone(done), name)
		full := filepath.Join(t.root, filepath.Join(cur...))
		fi, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: look up %s: %w", p.field, quote(p.path), spec.ClassifyPathError(err))
		}
		last := !slices.ContainsFunc(names, func(n string) bool { return n != "" && n != "." })
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if !t.follow {
				return nil
			}
			if links++; links > maxLinks {
				return invalid(p.field, "%s: too many levels of symbolic links", quote(p.path))
			}
			target, err := os.Readlink(full)
			if err != nil {
				return fmt.Errorf("%s: read link in %s: %w", p.field, quote(p.path), err)
			}
			if strings.HasPrefix(target, "/") {
				done = nil
			}
			names = append(strings.Split(target, "/"), names...)
		case fi.IsDir():
			done = cur
		case last && p.fileOK:
			return nil
		default:
			return notADirectory(p, path.Join(append([]string{t.at}, cur...)...), t.what)
		}
	}
	return nil
}

func notADirectory(p treePath, at, what string) error {
	msg := fmt.Sprintf("%s: %s is %s, not a directory", quote(p.path), quote(at), what)
	if at == path.Clean(p.path) {
		msg = fmt.Sprintf("%s is %s, not a directory", quote(p.path), what)
	}
	if p.fromImage {
		return fmt.Errorf("%s: %s: %w", p.field, msg, errdefs.ErrFailedPrecondition)
	}
	return invalid(p.field, "%s", msg)
}
