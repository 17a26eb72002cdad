//go:build integration

package kubelet

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shimd/shimd/critest/harness"
)

// Options configures Start.
type Options struct {
	// Dir holds the kubelet's root dir, config, certs, static pod dir, pod
	// logs and log file. Required; keep it short.
	Dir string
	// RuntimeEndpoint is shimd's CRI endpoint (unix://...). Required.
	RuntimeEndpoint string
	// NodeName for --hostname-override.
	NodeName string
	// FeatureGates for the KubeletConfiguration.
	FeatureGates map[string]bool
	// Kubeconfig, if set, connects the kubelet to an API server (critest/cluster):
	// it registers its node and runs the pods the scheduler binds to it.
	Kubeconfig string
	// Config entries replace those of the KubeletConfiguration the test writes.
	Config map[string]any
	// NodeIP is the node's address (--node-ip) and the one its API listens on. Empty:
	// 127.0.0.1, which a standalone kubelet accepts; a kubelet that registers its node
	// refuses a loopback address, so a cluster gives the CNI bridge's gateway address.
	NodeIP string
	// Port is the authenticated API's port for the first start; 0: a free one.
	// Taken by then, the kubelet gets a free one (Start).
	Port int
	// Verbosity is the kubelet's --v; 0: 2. At 4 its log has each sync loop
	// iteration's kind (housekeeping with its duration, SYNC, RECONCILE).
	Verbosity int
}

// Kubelet is a standalone kubelet started by Start.
type Kubelet struct {
	opts Options

	RootDir     string // --root-dir (bind-mounted onto itself by the kubelet)
	ManifestDir string // staticPodPath
	PodLogsDir  string // podLogsDir (instead of /var/log/pods)
	ConfigPath  string
	LogPath     string
	Port        int // authenticated API (https; anonymous allowed)
	ReadOnly    int // read-only API (http)
	Healthz     int

	client *http.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start takes the host-wide kubelet lock, saves what the kubelet changes on
// the host, writes the config and starts the kubelet, and waits until its
// API answers. Cleanup stops it by PID, unmounts its root dir, removes the
// cgroups, log symlinks and device-plugin files it created, restores the
// sysctls and releases the lock.
func Start(t testing.TB, opts Options) *Kubelet {
	t.Helper()
	harness.Tools().Require(t, Binary())
	if opts.Dir == "" || opts.RuntimeEndpoint == "" {
		t.Fatal("kubelet: Options.Dir and RuntimeEndpoint are required")
	}
	if opts.NodeName == "" {
		opts.NodeName = "shimd-e2e-node"
	}
	if opts.NodeIP == "" {
		opts.NodeIP = "127.0.0.1"
	}
	lockHost(t)
	restore := saveHost(t)
	t.Cleanup(restore)

	k := &Kubelet{
		opts:        opts,
		RootDir:     filepath.Join(opts.Dir, "root"),
		ManifestDir: filepath.Join(opts.Dir, "manifests"),
		PodLogsDir:  filepath.Join(opts.Dir, "pods-logs"),
		ConfigPath:  filepath.Join(opts.Dir, "kubelet.json"),
		LogPath:     filepath.Join(opts.Dir, "kubelet.log"),
		client: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // the kubelet's self-signed serving cert
		},
	}
	for _, d := range []string{k.RootDir, k.ManifestDir, k.PodLogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("kubelet: %v", err)
		}
	}
	if err := makeRShared(k.RootDir); err != nil {
		t.Fatalf("kubelet: %v", err)
	}
	k.newPorts(t)
	if opts.Port != 0 {
		k.Port = opts.Port
		if err := k.writeConfig(); err != nil {
			t.Fatalf("kubelet: %v", err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet: last lines of %s:\n%s", k.LogPath, k.LogTail(80, ""))
			t.Logf("kubelet: last error lines of %s:\n%s", k.LogPath, k.LogTail(40, "E"))
		}
		if k.Stop() {
			t.Logf("kubelet: needed SIGKILL to stop")
		}
		k.unmountRoot(t)
	})
	k.Start(t)
	return k
}

// makeRShared makes dir a shared mount of its own, as the kubelet's root dir is on a
// node whose / is shared (systemd's default). The kubelet starts by making its root
// dir's mount rshared, and where that mount is not shared it bind-mounts the dir
// onto itself, in one goroutine, while another creates its pod-resources socket in
// the dir and renames it into place: a rename whose two paths are looked up on
// either side of that new mount fails with EXDEV, and the kubelet exits ("failed to
// move temporary file to addr .../pod-resources/kubelet.sock ... invalid
// cross-device link"; a CI run's TestKubelet137Features; k3s-io/k3s#4042). This
// machine's / is private, so the kubelet always took that path. unmountRoot undoes
// the mount with the kubelet's own.
func makeRShared(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mount %s onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return fmt.Errorf("make %s rshared: %w", dir, err)
	}
	return nil
}

// NodeName is the node name static pods are suffixed with.
func (k *Kubelet) NodeName() string { return k.opts.NodeName }

// Start starts the kubelet (again) and waits up to 60s until /healthz and
// /pods answer. A kubelet that exits because one of its ports was taken
// between FreePort and its bind gets new ports, twice at most.
func (k *Kubelet) Start(t testing.TB) {
	t.Helper()
	for try := 1; ; try++ {
		exited, log, err := k.startOnce(t)
		if err == nil {
			return
		}
		if exited && harness.AddrInUse(log) && try < 3 {
			t.Logf("kubelet: a port was taken before the kubelet bound it, new ports for try %d: %s", try+1, lineWith(log, "address already in use"))
			k.newPorts(t)
			continue
		}
		// The error lines first: a CI log keeps the head of a long message.
		t.Fatalf("%v; its error lines:\n%s\nits last lines:\n%s", err, k.LogTail(20, "E"), k.LogTail(60, ""))
	}
}

// newPorts picks the kubelet's three ports and writes them into its config.
func (k *Kubelet) newPorts(t testing.TB) {
	t.Helper()
	for _, p := range []*int{&k.Port, &k.ReadOnly, &k.Healthz} {
		*p = FreePort(t)
	}
	if err := k.writeConfig(); err != nil {
		t.Fatalf("kubelet: %v", err)
	}
}

// startOnce starts the kubelet and waits for it. When it fails, exited says
// whether the kubelet exited, and log is what it wrote since it started.
func (k *Kubelet) startOnce(t testing.TB) (exited bool, log string, err error) {
	t.Helper()
	k.mu.Lock()
	if k.cmd != nil && !closed(k.done) {
		k.mu.Unlock()
		t.Fatalf("kubelet: already running as pid %d", k.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(k.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		k.mu.Unlock()
		t.Fatalf("kubelet: %v", err)
	}
	var from int64
	if st, err := logf.Stat(); err == nil {
		from = st.Size()
	}
	bin := Binary()
	fmt.Fprintf(logf, "\n===== test: kubelet starting at %s: %s %q\n", time.Now().Format(time.RFC3339Nano), bin, k.args())
	cmd := exec.Command(bin, k.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		k.mu.Unlock()
		t.Fatalf("kubelet: start: %v", err)
	}
	done := make(chan struct{})
	k.cmd, k.done = cmd, done
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	k.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for {
		err := k.ready()
		if err == nil {
			return false, "", nil
		}
		if closed(done) {
			return true, k.logSince(from), fmt.Errorf("kubelet exited before it was ready (%v)", cmd.ProcessState)
		}
		if time.Now().After(deadline) {
			return false, k.logSince(from), fmt.Errorf("kubelet not ready after 60s: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// logSince is the kubelet's log from byte offset from on.
func (k *Kubelet) logSince(from int64) string {
	b, err := os.ReadFile(k.LogPath)
	if err != nil || from > int64(len(b)) {
		return ""
	}
	return string(b[from:])
}

// lineWith is the last line of s that contains sub.
func lineWith(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}

func (k *Kubelet) ready() error {
	resp, err := k.client.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", k.Healthz))
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s: %s", resp.Status, b)
	}
	_, err = k.Get("/pods")
	return err
}

// PID of the running kubelet, or 0.
func (k *Kubelet) PID() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil || closed(k.done) {
		return 0
	}
	return k.cmd.Process.Pid
}

// Stop sends SIGTERM to the kubelet's PID, SIGKILL after 20s, and waits. It
// reports whether SIGKILL was needed.
func (k *Kubelet) Stop() (killed bool) {
	k.mu.Lock()
	cmd, done := k.cmd, k.done
	k.mu.Unlock()
	if cmd == nil || closed(done) {
		return false
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return false
	case <-time.After(20 * time.Second):
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	return true
}

// unmountRoot undoes the kubelet's bind mount of its root dir onto itself
// (and anything still mounted below it), deepest first.
func (k *Kubelet) unmountRoot(t testing.TB) {
	for i := 0; i < 10; i++ {
		points := mountPointsUnder(k.RootDir)
		if len(points) == 0 {
			return
		}
		sort.Slice(points, func(a, b int) bool { return len(points[a]) > len(points[b]) })
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				t.Logf("kubelet: unmount %s: %v", p, err)
			}
		}
	}
	if left := mountPointsUnder(k.RootDir); len(left) > 0 {
		t.Errorf("kubelet: still mounted under %s: %v", k.RootDir, left)
	}
}

// Get does a GET on the authenticated API (https, anonymous) and returns the
// body; a status other than 200 is an error.
func (k *Kubelet) Get(path string) ([]byte, error) {
	resp, err := k.client.Get(k.URL() + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// URL is the authenticated API's base URL, https://NODEIP:PORT.
func (k *Kubelet) URL() string {
	return "https://" + net.JoinHostPort(k.opts.NodeIP, strconv.Itoa(k.Port))
}

// LogTail returns the last n lines of the kubelet log; with prefix, only
// lines that start with it (klog severity: "E", "W").
func (k *Kubelet) LogTail(n int, prefix string) string {
	b, err := os.ReadFile(k.LogPath)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if prefix == "" || strings.HasPrefix(l, prefix) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FreePort returns a TCP port that nothing listens on, outside the kernel's
// ephemeral range (harness.FreeTCPPort says why).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := harness.FreeTCPPort()
	if err != nil {
		t.Fatalf("kubelet: %v", err)
	}
	return p
}

func closed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}
