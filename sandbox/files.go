package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/seclabel"
)

// layout is where pods' things live on the host, and the file operations on them:
// per-pod files in <root>/sandboxes/<id> (hostname, hosts, resolv.conf), the pod's
// /dev/shm tmpfs in <state>/sandboxes/<id>/shm, and the pinned namespaces under
// <state>/{netns,userns,ipcns,utsns}. It knows nothing of containerd.
type layout struct {
	root, state string
	// sel labels the pod's files with its mount label (SELinux; a no-op without).
	sel *seclabel.Labeler
}

// dir is the pod's directory of durable files.
func (l layout) dir(id string) string { return filepath.Join(l.root, "sandboxes", id) }

// stateDir is the pod's directory of runtime state.
func (l layout) stateDir(id string) string { return filepath.Join(l.state, "sandboxes", id) }

// files are the paths of sb's files that its containers mount.
func (l layout) files(sb *Sandbox) pod.Files {
	return pod.Files{Hostname: l.hostnamePath(sb.ID), Hosts: l.hostsPath(sb.ID), ResolvConf: l.resolvConfPath(sb.ID), Shm: l.shmPath(sb)}
}

// shmPath is the pod's /dev/shm, "/dev/shm" when the pod uses the host IPC namespace.
func (l layout) shmPath(sb *Sandbox) string {
	if sb.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetIpc() == runtimeapi.NamespaceMode_NODE {
		return "/dev/shm"
	}
	return filepath.Join(l.stateDir(sb.ID), "shm")
}

// Paths of the files containers of this pod mount.
func (l layout) hostnamePath(id string) string   { return filepath.Join(l.dir(id), "hostname") }
func (l layout) hostsPath(id string) string      { return filepath.Join(l.dir(id), "hosts") }
func (l layout) resolvConfPath(id string) string { return filepath.Join(l.dir(id), "resolv.conf") }

// prepare makes the pods' directory in the root dir, once before any pod starts
// (Recover): other host users may traverse it but not list it (CVE-2021-41103), as a
// container in a user namespace reads its pod's files as one. An older shimd made it
// 0755.
func (l layout) prepare() error {
	pods := filepath.Join(l.root, "sandboxes")
	if err := os.MkdirAll(pods, 0o711); err != nil {
		return fmt.Errorf("create sandboxes dir: %w", err)
	}
	if err := os.Chmod(pods, 0o711); err != nil {
		return fmt.Errorf("sandboxes dir: %w", err)
	}
	return nil
}

// writeFiles creates the pod's hostname, hosts and resolv.conf, and mounts its shm.
func (l layout) writeFiles(sb *Sandbox) (_ func(), err error) {
	undo := func() { l.removeFiles(sb.ID) }
	defer func() {
		if err != nil {
			// Not the named result: every error return sets that to nil.
			undo()
		}
	}()
	if err := os.MkdirAll(l.dir(sb.ID), 0o755); err != nil {
		return nil, fmt.Errorf("create sandbox dir: %w", err)
	}
	hostname := sb.Config.GetHostname()
	if sb.HostNetwork() || hostname == "" {
		if hostname, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("read node hostname: %w", err)
		}
	}
	files := map[string]string{
		l.hostnamePath(sb.ID):   hostname + "\n",
		l.hostsPath(sb.ID):      hostsFile(),
		l.resolvConfPath(sb.ID): ResolvConf(sb.Config.GetDnsConfig()),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", filepath.Base(path), err)
		}
		// Labelled for the pod, as containerd relabels them for each container
		// (selinux_relabel) and CRI-O labels them at RunPodSandbox.
		if err := l.sel.Chcon(path, sb.MountLabel); err != nil {
			return nil, err
		}
	}
	if shm := l.shmPath(sb); shm != "/dev/shm" {
		if err := os.MkdirAll(shm, 0o700); err != nil {
			return nil, fmt.Errorf("create shm dir: %w", err)
		}
		// context=: every file in it carries the pod's mount label (CRI-O and
		// containerd mount it so).
		opt := l.sel.MountData(fmt.Sprintf("mode=1777,size=%d", DefaultShmSize), sb.MountLabel)
		if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, opt); err != nil {
			return nil, fmt.Errorf("mount shm: %w", err)
		}
	}
	return undo, nil
}

// unmountShm releases the pod's /dev/shm; Stop does it, as the pod's IPC is over.
func (l layout) unmountShm(id string) error {
	shm := filepath.Join(l.stateDir(id), "shm")
	if err := unix.Unmount(shm, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount shm of sandbox %s: %w", id, err)
	}
	return nil
}

// removeFiles deletes everything the pod has on disk; missing files are fine.
func (l layout) removeFiles(id string) error {
	if err := l.unmountShm(id); err != nil {
		return err
	}
	var errs []error
	for _, dir := range []string{l.stateDir(id), l.dir(id)} {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func hostsFile() string {
	return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
}

// ResolvConf renders the pod's resolv.conf from its DNS config only; the node's own
// resolver is never handed to pods.
func ResolvConf(dns *runtimeapi.DNSConfig) string {
	var b strings.Builder
	if s := dns.GetSearches(); len(s) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(s, " "))
	}
	for _, ns := range dns.GetServers() {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	if o := dns.GetOptions(); len(o) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(o, " "))
	}
	return b.String()
}
