//go:build integration

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Replays of published vulnerabilities of containerd's CRI plugin, CRI-O and their
// shims that a CRI request triggers, or that a container reaches on the node
// (docs/operating.md, "Security"). Each test fails on the vulnerable behaviour.

// nobody is the unprivileged host user the tests act as.
const nobody = 65534

// asNobody runs a perl script as uid/gid 65534 without supplementary groups and
// returns its output.
func asNobody(t *testing.T, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command("perl", append([]string{"-e", script}, args...)...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// unixSocket is a line of /proc/net/unix.
type unixSocket struct {
	inode     string
	path      string // "@name" for an abstract socket
	listening bool
}

func parseProcNetUnix(data string) []unixSocket {
	var out []unixSocket
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 7 || f[0] == "Num" {
			continue
		}
		s := unixSocket{inode: f[6], listening: f[3] == "00010000"}
		if len(f) > 7 {
			s.path = f[7]
		}
		out = append(out, s)
	}
	return out
}

// socketInodes are the inodes of the sockets the processes hold.
func socketInodes(pids ...int) map[string]int {
	out := map[string]int{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				out[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = pid
			}
		}
	}
	return out
}

// connectScript connects to each unix socket path given ("@name" abstract) and
// prints "<path> ok" or "<path> <errno text>".
const connectScript = `use Socket;
for my $p (@ARGV) {
  socket(my $s, PF_UNIX, SOCK_STREAM, 0) or die "socket: $!";
  my $a = $p; $a =~ s/^@/\0/;
  if (connect($s, pack_sockaddr_un($a))) { print "$p ok\n" } else { print "$p $!\n" }
  close($s);
}`

// CVE-2020-15257: containerd-shim listened on an abstract unix socket, which every
// process in the host's network namespace can reach whatever its mount namespace or
// uid: a host-network container could drive the shim and so run anything as root. No
// socket that containerd, its shims or shimd listen on may be abstract, and none may
// be connectable by an unprivileged host user; a host-network container running as
// non-root sees none of them.
func TestCVE_2020_15257_ShimSocketsFromHostNetwork(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pcfg := podConfig("hostnet")
	pcfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
	pod := newPodOf(t, rs, pcfg)
	cfg := pod.container("c", "sleep", "3600")
	cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: nobody}
	id := pod.run(cfg)

	shims, err := harness.ShimPIDs(env.Containerd.Address())
	require.NoError(t, err)
	require.NotEmpty(t, shims, "no shim found: the test proves nothing")
	pids := append([]int{env.Shimd.PID(), env.Containerd.PID()}, shims...)
	owned := socketInodes(pids...)
	host, err := os.ReadFile("/proc/self/net/unix")
	require.NoError(t, err)
	var paths []string
	for _, s := range parseProcNetUnix(string(host)) {
		if pid, ok := owned[s.inode]; ok && s.listening && s.path != "" {
			require.False(t, strings.HasPrefix(s.path, "@"), "process %d listens on the abstract socket %s", pid, s.path)
			paths = append(paths, s.path)
		}
	}
	require.NotEmpty(t, paths, "no listening socket found: the test proves nothing")
	t.Logf("listening sockets of shimd, containerd and %d shims: %q", len(shims), paths)
	for _, line := range strings.Split(strings.TrimSpace(asNobody(t, connectScript, paths...)), "\n") {
		require.NotRegexp(t, ` ok$`, line, "an unprivileged host user connects to a daemon's socket")
	}

	// From the container: /proc/net/unix of the host's network namespace.
	out, err := execSync(t, rs, id, 10, "cat", "/proc/net/unix")
	require.NoError(t, err)
	for _, s := range parseProcNetUnix(string(out.Stdout)) {
		if pid, ok := owned[s.inode]; ok && strings.HasPrefix(s.path, "@") {
			t.Errorf("the host-network container sees process %d's abstract socket %s", pid, s.path)
		}
	}
	stopRemove(t, rs, pod.id)
}

// walkScript lists, as far as the caller may read, the directories given (depth 6),
// and says of each other path given whether it exists for the caller.
const walkScript = `my ($n, @a) = @ARGV; my @roots = @a[0..$n-1]; my @probe = @a[$n..$#a];
sub walk { my ($d, $depth) = @_; return if $depth > 6;
  opendir(my $h, $d) or return; my @e = grep { $_ ne "." && $_ ne ".." } readdir($h); closedir($h);
  for my $e (@e) { my $p = "$d/$e"; print "SEEN $p\n"; walk($p, $depth + 1) if -d $p && ! -l $p; } }
walk($_, 0) for @roots;
for my $p (@probe) { print "PROBE $p ", (-e $p ? "visible" : "hidden: $!"), "\n"; }`

// CVE-2021-41103: containerd's state and snapshot directories let any host user
// traverse into container root filesystems and run their setuid programs. shimd's
// root and state directories must be at most traversable (0711) by others, nothing
// below them writable by others, and no container's root filesystem, image volume or
// pod shm reachable by an unprivileged host user.
func TestCVE_2021_41103_StateDirsReachableByOthers(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "perms")
	cfg := pod.container("c", "sleep", "3600")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/v", Readonly: true, Image: &runtimeapi.ImageSpec{Image: busyboxImage}}}
	id := pod.run(cfg)

	roots := []string{env.Shimd.RootDir(), env.Shimd.StateDir()}
	for _, dir := range roots {
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		require.Zero(t, fi.Mode().Perm()&0o066, "%s is %s: others may list or write it", dir, fi.Mode())
		require.NoError(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil || p == dir {
				return nil
			}
			if fi.IsDir() && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
				t.Errorf("%s is %s: writable by others", p, fi.Mode())
			}
			if mounted, _ := isMountPoint(p); mounted && fi.IsDir() {
				return filepath.SkipDir // a container's tree: its own modes
			}
			return nil
		}))
	}
	// What an unprivileged user reaches: shimd's and containerd's directories made
	// reachable from / (as /var/lib and /run are), then walked and probed as nobody.
	for _, d := range []string{env.Base, filepath.Dir(env.Shimd.RootDir()), env.Containerd.Dir()} {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(d, fi.Mode().Perm()|0o111))
	}
	probes := []string{filepath.Join(env.Containerd.State(), "io.containerd.runtime.v2.task", env.Namespace, id, "rootfs", "bin", "busybox")}
	vols, _ := filepath.Glob(filepath.Join(env.Shimd.StateDir(), "*", "*", "*", "bin", "busybox"))
	require.NotEmpty(t, vols, "the image volume was not found: the test proves nothing")
	probes = append(probes, vols...)
	for _, p := range probes {
		_, err := os.Stat(p)
		require.NoError(t, err, "root sees %s", p)
	}
	// Directories whose names are known: traversable at most, never listed.
	for _, dir := range []string{"sandboxes", "containers", "image-volumes"} {
		for _, top := range roots {
			if _, err := os.Stat(filepath.Join(top, dir)); err == nil {
				roots = append(roots, filepath.Join(top, dir))
			}
		}
	}
	walkRoots := append(roots, env.Containerd.Root(), env.Containerd.State())
	out := asNobody(t, walkScript, append([]string{strconv.Itoa(len(walkRoots))}, append(walkRoots, probes...)...)...)
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "SEEN ") && strings.HasSuffix(line, "/bin/busybox"):
			t.Errorf("an unprivileged host user reaches a container's files: %s", line)
		case strings.HasPrefix(line, "SEEN "):
			t.Errorf("an unprivileged host user lists a daemon's directory: %s", line)
		case strings.HasPrefix(line, "PROBE ") && strings.HasSuffix(line, " visible"):
			t.Errorf("an unprivileged host user reaches a container's files: %s", line)
		}
	}
	stopRemove(t, rs, pod.id)
}

// isMountPoint tells whether p is a mount point (its device differs from its parent's).
func isMountPoint(p string) (bool, error) {
	var a, b syscall.Stat_t
	if err := syscall.Lstat(p, &a); err != nil {
		return false, err
	}
	if err := syscall.Lstat(filepath.Dir(p), &b); err != nil {
		return false, err
	}
	return a.Dev != b.Dev, nil
}

// CVE-2022-24769 (containerd, Moby) and CVE-2022-27652 (CRI-O): containers started
// with a non-empty inheritable capability set, so a program with inheritable file
// capabilities gained them across execve, past the bounding set a non-root user
// should be held to. The inheritable and ambient sets must be empty, for plain,
// privileged, non-root and capability-adding containers and their exec processes,
// unless ambient capabilities are asked for, and then hold exactly those.
func TestCVE_2022_24769_InheritableCapabilities(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pcfg := podConfig("caps")
	pcfg.Linux.SecurityContext.Privileged = true
	pod := newPodOf(t, rs, pcfg)
	for _, tt := range []struct {
		name    string
		set     func(sc *runtimeapi.LinuxContainerSecurityContext)
		inh     string
		ambient string
	}{
		{"default", func(*runtimeapi.LinuxContainerSecurityContext) {}, "0000000000000000", "0000000000000000"},
		{"privileged", func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.Privileged = true }, "0000000000000000", "0000000000000000"},
		{"non-root", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
		}, "0000000000000000", "0000000000000000"},
		{"add-all", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"ALL"}}
		}, "0000000000000000", "0000000000000000"},
		// CAP_NET_BIND_SERVICE is bit 10.
		{"ambient-asked", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
			sc.Capabilities = &runtimeapi.Capability{AddAmbientCapabilities: []string{"NET_BIND_SERVICE"}}
		}, "0000000000000400", "0000000000000400"},
	} {
		cfg := pod.container(tt.name)
		tt.set(cfg.Linux.SecurityContext)
		f := statusFields(t, pod, cfg)
		require.Equal(t, tt.inh, f["CapInh"], "%s: inheritable set", tt.name)
		require.Equal(t, tt.ambient, f["CapAmb"], "%s: ambient set", tt.name)
		ids := listContainerIDs(t, rs, tt.name)
		out, err := execSync(t, rs, ids, 10, "grep", "-E", "^Cap(Inh|Amb)", "/proc/self/status")
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("CapInh:\t%s\nCapAmb:\t%s\n", tt.inh, tt.ambient), string(out.Stdout), "%s: exec process", tt.name)
	}
	stopRemove(t, rs, pod.id)
}

// listContainerIDs is the id of the one container named name.
func listContainerIDs(t *testing.T, rs runtimeapi.RuntimeServiceClient, name string) string {
	t.Helper()
	resp, err := rs.ListContainers(ctxT(t, 30*time.Second), &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	for _, c := range resp.Containers {
		if c.Metadata.Name == name {
			return c.Id
		}
	}
	t.Fatalf("no container %s", name)
	return ""
}

// CVE-2024-21626 ("Leaky Vessels", runc): runc leaked a host directory descriptor
// into the container's init, so a working directory of /proc/self/fd/N put the
// process in the host's filesystem. No working directory a request or an image gives
// may let the container read a host file.
func TestCVE_2024_21626_WorkingDirLeakedFD(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	pull(t, env, busyboxImage)
	markerDir := t.TempDir()
	require.NoError(t, os.Chmod(markerDir, 0o755))
	const secret = "host-secret-21626"
	require.NoError(t, os.WriteFile(filepath.Join(markerDir, "marker"), []byte(secret+"\n"), 0o644))
	rel := strings.Repeat("../", 24) + strings.TrimPrefix(markerDir, "/") + "/marker"
	script := fmt.Sprintf("cat %s %s/marker 2>&1; echo END-OF-TEST; exec sleep 3600", rel, markerDir)

	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "leaky")
	check := func(name string, cfg *runtimeapi.ContainerConfig) {
		cfg.Command = []string{"sh", "-c", script}
		id, err := createOrRefuse(t, pod, cfg)
		if err != nil {
			t.Logf("%s: refused at create: %v", name, err)
			return
		}
		if _, err := rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
			t.Logf("%s: refused at start: %v", name, err)
			return
		}
		log := waitLog(t, filepath.Join(pod.logDir, cfg.LogPath), "END-OF-TEST")
		require.NotContains(t, log, secret, "%s: the container reads a host file", name)
	}
	for fd := 3; fd <= 12; fd++ {
		cfg := pod.container("wd-" + strconv.Itoa(fd))
		cfg.WorkingDir = fmt.Sprintf("/proc/self/fd/%d", fd)
		check(cfg.WorkingDir, cfg)
	}
	img := busyboxBase(t)
	img.Config.Config.WorkingDir = "/proc/self/fd/7"
	ref := cr.push(t, img, "cve/leaky", "v1")
	pull(t, env, ref)
	cfg := pod.container("image-wd")
	cfg.Image.Image = ref
	check("image working dir /proc/self/fd/7", cfg)
	stopRemove(t, rs, pod.id)
}
