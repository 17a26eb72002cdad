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
)

// Per-pod files live in <root>/sandboxes/<id> (hostname, hosts, resolv.conf) and the
// pod's /dev/shm tmpfs in <state>/sandboxes/<id>/shm.

// Dir is the pod's directory of durable files.
func (m *Manager) Dir(id string) string { return filepath.Join(m.opts.RootDir, "sandboxes", id) }

// stateDir is the pod's directory of runtime state.
func (m *Manager) stateDir(id string) string { return filepath.Join(m.opts.StateDir, "sandboxes", id) }

// files are the paths of sb's files that its containers mount.
func (m *Manager) files(sb *Sandbox) pod.Files {
	return pod.Files{Hostname: m.hostnamePath(sb.ID), Hosts: m.hostsPath(sb.ID), ResolvConf: m.resolvConfPath(sb.ID), Shm: m.shmPath(sb)}
}

// shmPath is the pod's /dev/shm, "/dev/shm" when the pod uses the host IPC namespace.
func (m *Manager) shmPath(sb *Sandbox) string {
	if sb.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetIpc() == runtimeapi.NamespaceMode_NODE {
		return "/dev/shm"
	}
	return filepath.Join(m.stateDir(sb.ID), "shm")
}

// Paths of the files containers of this pod mount.
func (m *Manager) hostnamePath(id string) string   { return filepath.Join(m.Dir(id), "hostname") }
func (m *Manager) hostsPath(id string) string      { return filepath.Join(m.Dir(id), "hosts") }
func (m *Manager) resolvConfPath(id string) string { return filepath.Join(m.Dir(id), "resolv.conf") }

// writeFiles creates the pod's hostname, hosts and resolv.conf, and mounts its shm.
func (m *Manager) writeFiles(sb *Sandbox) (undo func(), err error) {
	undo = func() { m.removeFiles(sb.ID) }
	defer func() {
		if err != nil {
			undo()
		}
	}()
	if err := os.MkdirAll(m.Dir(sb.ID), 0o755); err != nil {
		return nil, fmt.Errorf("create sandbox dir: %w", err)
	}
	hostname := sb.Config.GetHostname()
	if sb.HostNetwork() || hostname == "" {
		if hostname, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("read node hostname: %w", err)
		}
	}
	files := map[string]string{
		m.hostnamePath(sb.ID):   hostname + "\n",
		m.hostsPath(sb.ID):      hostsFile(),
		m.resolvConfPath(sb.ID): ResolvConf(sb.Config.GetDnsConfig()),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", filepath.Base(path), err)
		}
	}
	if shm := m.shmPath(sb); shm != "/dev/shm" {
		if err := os.MkdirAll(shm, 0o700); err != nil {
			return nil, fmt.Errorf("create shm dir: %w", err)
		}
		opt := fmt.Sprintf("mode=1777,size=%d", DefaultShmSize)
		if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, opt); err != nil {
			return nil, fmt.Errorf("mount shm: %w", err)
		}
	}
	return undo, nil
}

// unmountShm releases the pod's /dev/shm; Stop does it, as the pod's IPC is over.
func (m *Manager) unmountShm(id string) error {
	shm := filepath.Join(m.stateDir(id), "shm")
	if err := unix.Unmount(shm, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount shm of sandbox %s: %w", id, err)
	}
	return nil
}

// removeFiles deletes everything the pod has on disk; missing files are fine.
func (m *Manager) removeFiles(id string) error {
	if err := m.unmountShm(id); err != nil {
		return err
	}
	var errs []error
	for _, dir := range []string{m.stateDir(id), m.Dir(id)} {
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
