//go:build integration

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Replays of published vulnerabilities of CRI-O and containerd that a field of a CRI
// request triggers: sysctl values, environment, annotations (docs/operating.md,
// "Security"). Each test fails on the vulnerable behaviour.

// CVE-2022-0811 ("cr8escape", CRI-O): a sysctl value holding '+' smuggled a second
// key=value pair (kernel.core_pattern, not namespaced) into what pinns wrote, which
// set the host's core pattern: a container's crash then ran a program as root on the
// host. Such values must be refused (InvalidArgument) and the host unchanged.
func TestCVE_2022_0811_SysctlValueSmuggling(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	before, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	require.NoError(t, err)
	payload := "|/tmp/cve-2022-0811 %p"
	for _, v := range []string{
		"1+kernel.core_pattern=" + payload,
		"1 kernel.core_pattern=" + payload,
		"1\nkernel.core_pattern=" + payload,
		"1=kernel.core_pattern",
		"+kernel.core_pattern=" + payload,
	} {
		for _, k := range []string{"kernel.shm_rmid_forced", "net.ipv4.ip_unprivileged_port_start"} {
			cfg := podConfig("sysctl")
			cfg.Linux.Sysctls = map[string]string{k: v}
			_, err := rs.RunPodSandbox(ctxT(t, time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg})
			requireRefused(t, env, nil, err, k)
		}
	}
	require.Empty(t, listPods(t, rs, nil))
	after, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "the host's kernel.core_pattern changed")
}

// CVE-2022-4318 (CRI-O): for a uid without a passwd entry CRI-O added one to the
// container's /etc/passwd with the HOME variable as home directory; a HOME holding a
// newline added a second line: a user of uid 0 with no password. Nothing the request
// says may add a line to the image's /etc/passwd.
func TestCVE_2022_4318_HomeNewlineInPasswd(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "passwd")
	plain := pod.run(pod.container("plain", "sleep", "3600"))
	want, err := execSync(t, rs, plain, 10, "cat", "/etc/passwd")
	require.NoError(t, err)
	require.NotEmpty(t, want.Stdout)
	evil := "/home/x\nevil::0:0:evil:/:/bin/sh\n"
	cfg := pod.container("evil", "sleep", "3600")
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "HOME", Value: []byte(evil)}, {Key: "USER", Value: []byte("x\nevil2::0:0::/:/bin/sh")}}
	cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 4242}
	id, err := createOrRefuse(t, pod, cfg)
	if err != nil {
		t.Logf("refused: %v", err)
	} else {
		pod.start(id)
		got, err := execSync(t, rs, id, 10, "cat", "/etc/passwd")
		require.NoError(t, err)
		require.Equal(t, string(want.Stdout), string(got.Stdout), "the container's /etc/passwd was changed")
	}
	stopRemove(t, rs, pod.id)
}

// CVE-2024-3154 (CRI-O): pod and container annotations reached the OCI spec, where
// runc reads some as instructions: "org.systemd.property.*" sets properties of the
// container's systemd unit (ExecStopPost= runs a host command as root),
// "org.criu.config" names a CRIU configuration (action scripts) for checkpoints.
// None of the annotations runc calls potentially unsafe may reach a spec.
func TestCVE_2024_3154_AnnotationsReachRuntime(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	evil := map[string]string{
		"org.systemd.property.ExecStopPost": "['/bin/sh', '-c', 'touch /tmp/cve-2024-3154']",
		"org.systemd.property.CollectMode":  "'inactive-or-failed'",
		"org.criu.config":                   "/tmp/cve-2024-3154.conf",
		"bundle":                            "/tmp",
	}
	pcfg := podConfig("annotations")
	pcfg.Annotations = evil
	pod := newPodOf(t, rs, pcfg)
	cfg := pod.container("c", "sleep", "3600")
	cfg.Annotations = evil
	id, err := createOrRefuse(t, pod, cfg)
	if err != nil {
		t.Logf("refused: %v", err)
		stopRemove(t, rs, pod.id)
		return
	}
	pod.start(id)
	ctx := namespaces.WithNamespace(ctxT(t, time.Minute), env.Namespace)
	cl := env.Containerd.Client(t)
	for _, cid := range []string{pod.id, id} {
		c, err := cl.LoadContainer(ctx, cid)
		require.NoError(t, err)
		spec, err := c.Spec(ctx)
		require.NoError(t, err)
		for k := range spec.Annotations {
			require.False(t, unsafeAnnotation(k), "annotation %s reached the OCI spec of %s", k, cid)
		}
	}
	stopRemove(t, rs, pod.id)
}

// unsafeAnnotation: runc features' potentiallyUnsafeConfigAnnotations (runc 1.2+).
func unsafeAnnotation(k string) bool {
	return k == "bundle" || k == "org.criu.config" || strings.HasPrefix(k, "org.systemd.property.")
}

// CVE-2025-0750 (CRI-O): paths built from pod fields went outside the pod's log
// directory ("../"), and CRI-O unmounted or linked what they named on the host. A
// container's log path must stay in its pod's log directory: one with "..", or an
// absolute one, is refused and nothing is created outside.
func TestCVE_2025_0750_LogPathTraversal(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "logpath")
	hostDir := t.TempDir()
	before := containerdIDs(t, env)
	for _, p := range []string{
		strings.Repeat("../", 24) + strings.TrimPrefix(hostDir, "/") + "/evil.log",
		"x/../../evil.log",
		hostDir + "/evil.log",
	} {
		cfg := pod.container("c", "sleep", "3600")
		cfg.LogPath = p
		_, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.id, Config: cfg, SandboxConfig: pod.cfg})
		requireRefused(t, env, before, err, "config.log_path")
	}
	requireEmptyDir(t, hostDir, "a log path")
	entries, err := os.ReadDir(filepath.Dir(pod.logDir))
	require.NoError(t, err)
	for _, e := range entries {
		require.NotEqual(t, "evil.log", e.Name(), "a log was created beside the pod's log directory")
	}
	stopRemove(t, rs, pod.id)
}
