//go:build integration

package e2e

import (
	"archive/tar"
	"os"
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

// Replays of published vulnerabilities where an image's layers or config reach out
// of the container's root filesystem, at unpack or at start (docs/operating.md,
// "Security"). Each test fails on the vulnerable behaviour.

// CVE-2021-32760: containerd's unpacker applied a hard link entry's mode with chmod,
// which followed a symbolic link the same layer had planted to a host path: pulling
// an image changed the mode of a host file. The host file must keep its mode and
// owner after the pull.
func TestCVE_2021_32760_ChmodThroughSymlinkInLayer(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	target := filepath.Join(t.TempDir(), "host-file")
	require.NoError(t, os.WriteFile(target, []byte("host data\n"), 0o600))
	require.NoError(t, os.Chmod(filepath.Dir(target), 0o755))

	// The link and the hard link in one layer, and in two.
	one := busyboxBase(t)
	one.addLayer(t,
		tarEntry{Name: "cve-link", Type: tar.TypeSymlink, Link: target, Mode: 0o777},
		tarEntry{Name: "cve-hardlink", Type: tar.TypeLink, Link: "cve-link", Mode: 0o4777, UID: 4242, GID: 4242},
	)
	two := busyboxBase(t)
	two.addLayer(t, tarEntry{Name: "cve-link", Type: tar.TypeSymlink, Link: target, Mode: 0o777})
	two.addLayer(t, tarEntry{Name: "cve-hardlink", Type: tar.TypeLink, Link: "cve-link", Mode: 0o4777, UID: 4242, GID: 4242})
	rs := env.Shimd.Runtime(t)
	for i, img := range []*cveImage{one, two} {
		ref := cr.push(t, img, "cve/chmod-symlink", strconv.Itoa(i))
		_, err := env.Shimd.Images(t).PullImage(ctxT(t, 5*time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		t.Logf("pull %s: %v", ref, err)
		if err != nil {
			continue
		}
		// Unpacking happens at pull or at the first container: create one too.
		pod := newPod(t, rs, "chmod")
		cfg := pod.container("c", "sleep", "3600")
		cfg.Image.Image = ref
		t.Logf("created %s", pod.create(cfg))
		stopRemove(t, rs, pod.id)
	}
	fi, err := os.Stat(target)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode(), "the host file's mode changed through a link in a layer")
	st := fi.Sys().(*syscall.Stat_t)
	require.Equal(t, uint32(0), st.Uid, "the host file's owner changed through a link in a layer")
}

// CVE-2022-23648: containerd's CRI plugin copied an image's VOLUME paths from the
// rootfs without keeping them in it: "/../../../../<host dir>" copied a host
// directory into the container. shimd ignores image volumes; the host directory's
// content must not be visible in the container, at the cleaned path or any other.
func TestCVE_2022_23648_ImageVolumePathEscapesRootfs(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	secretDir := t.TempDir()
	const secret = "host-secret-7d1c2a"
	require.NoError(t, os.WriteFile(filepath.Join(secretDir, "secret"), []byte(secret+"\n"), 0o644))

	img := busyboxBase(t)
	up := strings.Repeat("/..", 24)
	img.Config.Config.Volumes = map[string]struct{}{
		up + secretDir:           {},
		"/vol/" + up + secretDir: {},
		"/cve-vol":               {}, // through the symlink below
	}
	img.addLayer(t, tarEntry{Name: "cve-vol", Type: tar.TypeSymlink, Link: up + secretDir, Mode: 0o777})
	ref := cr.push(t, img, "cve/volumes", "v1")
	pull(t, env, ref)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "volumes")
	cfg := pod.container("c", "sleep", "3600")
	cfg.Image.Image = ref
	id, err := createOrRefuse(t, pod, cfg)
	if err != nil {
		t.Logf("refused: %v", err)
		stopRemove(t, rs, pod.id)
		return
	}
	pod.start(id)
	for _, p := range []string{secretDir + "/secret", "/vol" + secretDir + "/secret", "/cve-vol/secret"} {
		out, err := execSync(t, rs, id, 10, "cat", p)
		require.NoError(t, err)
		require.NotContains(t, string(out.Stdout), secret, "host file %s is readable in the container at %s", secretDir, p)
	}
	out, err := execSync(t, rs, id, 30, "grep", "-rl", secret, "/vol", "/tmp", "/cve-vol/", secretDir)
	require.NoError(t, err)
	require.NotContains(t, string(out.Stdout), "secret", "host file is in the container: %s", out.Stdout)
	stopRemove(t, rs, pod.id)
}

// CVE-2025-31133 (runc): an image whose /dev/null is a symbolic link (to
// /proc/sys/kernel/core_pattern) had runc bind-mount the link's target over the
// masked paths, writable: a write to /proc/sysrq-trigger in the container set the
// host's core pattern. The host's core pattern must not change, whatever the
// container writes to its masked paths.
func TestCVE_2025_31133_DevNullSymlinkInImage(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	before, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	require.NoError(t, err)
	t.Cleanup(func() {
		if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(now) != string(before) {
			_ = os.WriteFile("/proc/sys/kernel/core_pattern", before, 0o644)
		}
	})
	img := busyboxBase(t)
	img.addLayer(t,
		tarEntry{Name: "dev/", Type: tar.TypeDir, Mode: 0o755},
		tarEntry{Name: "dev/null", Type: tar.TypeSymlink, Link: "/proc/sys/kernel/core_pattern", Mode: 0o777},
	)
	ref := cr.push(t, img, "cve/devnull", "v1")
	pull(t, env, ref)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "devnull")
	cfg := pod.container("c")
	cfg.Image.Image = ref
	cfg.Command = []string{"sh", "-c", "for p in /proc/sysrq-trigger /proc/kcore /proc/timer_list /proc/keys /proc/latency_stats /proc/sched_debug /proc/scsi /sys/firmware; do echo '|/tmp/cve-2025-31133 %p' > $p; done; echo END-OF-TEST; exec sleep 3600"}
	id, err := createOrRefuse(t, pod, cfg)
	if err == nil {
		_, err = rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: id})
		t.Logf("start: %v", err)
		if err == nil {
			waitLog(t, filepath.Join(pod.logDir, cfg.LogPath), "END-OF-TEST")
		}
	}
	after, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "the host's core pattern changed")
	stopRemove(t, rs, pod.id)
}

// requireEmptyDir fails unless dir is empty.
func requireEmptyDir(t *testing.T, dir, what string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Empty(t, names, "%s wrote into a host directory", what)
}

// CVE-2025-47290 (containerd 2.1.0): unpacking checked a path and then wrote it,
// so a layer whose entries went through a symbolic link it had planted (to a host
// directory) wrote files on the host at pull. The host directory must stay empty,
// whatever the links: absolute, relative past the root, in the same layer or the
// one below, with hard links to host files too.
func TestCVE_2025_47290_UnpackThroughSymlink(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	hostDir := t.TempDir()
	require.NoError(t, os.Chmod(hostDir, 0o777))
	hostFile := filepath.Join(t.TempDir(), "host-file")
	require.NoError(t, os.WriteFile(hostFile, []byte("host data\n"), 0o600))
	up := strings.Repeat("../", 24)
	file := func(name string) tarEntry {
		return tarEntry{Name: name, Type: tar.TypeReg, Mode: 0o4755, Data: []byte("#!/bin/sh\necho pwned\n")}
	}
	link := func(name, to string) tarEntry {
		return tarEntry{Name: name, Type: tar.TypeSymlink, Link: to, Mode: 0o777}
	}
	images := map[string][][]tarEntry{
		"abs-same-layer": {{link("a", hostDir), file("a/pwned")}},
		"rel-same-layer": {{link("r", up+strings.TrimPrefix(hostDir, "/")), file("r/pwned")}},
		"abs-two-layers": {{link("a", hostDir)}, {file("a/pwned"), {Name: "a/sub/", Type: tar.TypeDir, Mode: 0o755}}},
		"nested":         {{{Name: "d/", Type: tar.TypeDir, Mode: 0o755}, link("d/l", "../../"+up+strings.TrimPrefix(hostDir, "/"))}, {file("d/l/pwned")}},
		"hardlink-out":   {{{Name: "h", Type: tar.TypeLink, Link: up + strings.TrimPrefix(hostFile, "/"), Mode: 0o777}}},
		"hardlink-abs":   {{{Name: "h", Type: tar.TypeLink, Link: hostFile, Mode: 0o777}}},
	}
	rs := env.Shimd.Runtime(t)
	for name, layers := range images {
		img := busyboxBase(t)
		for _, l := range layers {
			img.addLayer(t, l...)
		}
		ref := cr.push(t, img, "cve/unpack", name)
		_, err := env.Shimd.Images(t).PullImage(ctxT(t, 5*time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		t.Logf("%s: pull: %v", name, err)
		if err == nil {
			pod := newPod(t, rs, "unpack")
			cfg := pod.container("c", "sleep", "3600")
			cfg.Image.Image = ref
			_, err := createOrRefuse(t, pod, cfg)
			t.Logf("%s: create: %v", name, err)
			stopRemove(t, rs, pod.id)
		}
		requireEmptyDir(t, hostDir, name)
		data, err := os.ReadFile(hostFile)
		require.NoError(t, err)
		require.Equal(t, "host data\n", string(data), "%s changed a host file", name)
	}
}

// CVE-2024-5154 (CRI-O): an image whose /etc is a symbolic link out of its root
// filesystem had CRI-O create /etc/mtab (and the pod's files) through it, on the
// host. Nothing shimd or runc prepares in the rootfs may land outside it.
func TestCVE_2024_5154_EtcSymlinkOutOfRootfs(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "etclink")
	up := strings.Repeat("../", 24)
	for i, target := range []string{"abs", "rel"} {
		hostDir := t.TempDir()
		require.NoError(t, os.Chmod(hostDir, 0o777))
		to := hostDir
		if target == "rel" {
			to = up + strings.TrimPrefix(hostDir, "/")
		}
		img := busyboxBase(t)
		img.addLayer(t,
			tarEntry{Name: "etc", Type: tar.TypeSymlink, Link: to, Mode: 0o777},
			tarEntry{Name: "run", Type: tar.TypeSymlink, Link: to, Mode: 0o777},
		)
		ref := cr.push(t, img, "cve/etclink", target)
		pull(t, env, ref)
		cfg := pod.container("c"+strconv.Itoa(i), "sleep", "3600")
		cfg.Image.Image = ref
		cfg.WorkingDir = "/run/work"
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/run/secrets/x"}}
		id, err := createOrRefuse(t, pod, cfg)
		if err == nil {
			_, err = rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: id})
			t.Logf("%s: start: %v", target, err)
			if err == nil {
				out, err := execSync(t, rs, id, 10, "sh", "-c", "echo x > /etc/cve-5154; ls /etc")
				require.NoError(t, err)
				t.Logf("%s: in the container: %s%s", target, out.Stdout, out.Stderr)
			}
		} else {
			t.Logf("%s: refused: %v", target, err)
		}
		requireEmptyDir(t, hostDir, target+" /etc link")
	}
	stopRemove(t, rs, pod.id)
}
