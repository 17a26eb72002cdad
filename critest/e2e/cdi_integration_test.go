//go:build integration

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// cdiFixture is a CDI vendor "test.shimd.io/dev" whose devices are a mknod copy of
// /dev/null (char 1:3), an env variable and a read-only bind mount of a directory
// holding one file.
type cdiFixture struct {
	null, data string
}

func newCDIFixture(t *testing.T) cdiFixture {
	dir := t.TempDir()
	f := cdiFixture{null: filepath.Join(dir, "null"), data: filepath.Join(dir, "data")}
	require.NoError(t, unix.Mknod(f.null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	require.NoError(t, os.MkdirAll(f.data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.data, "hello"), []byte("from cdi\n"), 0o644))
	return f
}

// spec is a CDI spec file defining the named devices, each with its own env
// variable; device "devnull" also has the device node, device "data" the mount.
// (Not "null": YAML reads that as no name.)
func (f cdiFixture) spec(names ...string) string {
	var b strings.Builder
	b.WriteString("cdiVersion: \"0.6.0\"\nkind: test.shimd.io/dev\ncontainerEdits:\n  env: [\"CDI_VENDOR=test\"]\ndevices:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "- name: %s\n  containerEdits:\n    env: [\"CDI_DEV_%s=1\"]\n", n, strings.ToUpper(n))
		switch n {
		case "devnull":
			fmt.Fprintf(&b, "    deviceNodes:\n    - path: /dev/cdi-null\n      hostPath: %s\n", f.null)
		case "data":
			fmt.Fprintf(&b, "    mounts:\n    - hostPath: %s\n      containerPath: /cdi-data\n      options: [\"ro\", \"bind\", \"nosuid\", \"nodev\"]\n", f.data)
		}
	}
	return b.String()
}

func writeCDISpec(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
}

// CDI devices from cdi_devices and from cdi.k8s.io/ annotations reach the container:
// the device node (usable), the env and the mount. The spec files are written after
// shimd started and changed while it runs (the cache watches its directory). An
// unknown or ambiguous device is InvalidArgument naming it, and nothing is created.
func TestCDIDevices(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	dir := env.Shimd.CDISpecDir()
	fix := newCDIFixture(t)
	writeCDISpec(t, dir, "test.yaml", fix.spec("devnull"))
	p := newPod(t, rs, "cdi")

	// An unknown device: refused before anything is made.
	bad := p.container("unknown", "sleep", "3600")
	bad.CDIDevices = []*runtimeapi.CDIDevice{{Name: "test.shimd.io/dev=devnull"}, {Name: "test.shimd.io/dev=data"}}
	_, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: bad, SandboxConfig: p.cfg})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), `unknown CDI device "test.shimd.io/dev=data"`)
	require.NotContains(t, status.Convert(err).Message(), `"test.shimd.io/dev=devnull"`)
	// The same through an annotation.
	bad = p.container("unknown-annotation", "sleep", "3600")
	bad.Annotations = map[string]string{"cdi.k8s.io/test": "test.shimd.io/dev=gone"}
	_, err = rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: bad, SandboxConfig: p.cfg})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), `"test.shimd.io/dev=gone"`)
	list, err := rs.ListContainers(ctxT(t, time.Minute), &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	require.Empty(t, list.Containers, "a refused CreateContainer left a container")

	// The spec file grows a device while shimd runs: the watch picks it up.
	writeCDISpec(t, dir, "test.yaml", fix.spec("devnull", "data"))
	cfg := p.container("devices", "sleep", "3600")
	cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "test.shimd.io/dev=devnull"}}
	cfg.Annotations = map[string]string{"cdi.k8s.io/test": "test.shimd.io/dev=data"}
	var id string
	require.Eventually(t, func() bool {
		resp, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: cfg, SandboxConfig: p.cfg})
		if err != nil {
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			return false
		}
		id = resp.ContainerId
		return true
	}, 10*time.Second, 100*time.Millisecond, "the new device never resolved")
	p.start(id)
	out, err := execSync(t, rs, id, 30, "sh", "-c",
		"test -c /dev/cdi-null && echo written > /dev/cdi-null && echo node-ok; "+
			"echo vendor=$CDI_VENDOR null=$CDI_DEV_DEVNULL data=$CDI_DEV_DATA; cat /cdi-data/hello; "+
			"touch /cdi-data/x 2>/dev/null || echo mount-ro")
	require.NoError(t, err)
	require.Equal(t, int32(0), out.ExitCode, "stdout %s stderr %s", out.Stdout, out.Stderr)
	require.Equal(t, "node-ok\nvendor=test null=1 data=1\nfrom cdi\nmount-ro\n", string(out.Stdout), "stderr: %s", out.Stderr)

	// Two spec files of the same directory define one device: ambiguous.
	writeCDISpec(t, dir, "again.yaml", fix.spec("devnull"))
	dup := p.container("ambiguous", "sleep", "3600")
	dup.CDIDevices = []*runtimeapi.CDIDevice{{Name: "test.shimd.io/dev=devnull"}}
	require.Eventually(t, func() bool {
		resp, cerr := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: dup, SandboxConfig: p.cfg})
		if cerr == nil {
			// Made before the watcher saw the new file: remove it and ask again.
			_, rerr := rs.RemoveContainer(ctxT(t, time.Minute), &runtimeapi.RemoveContainerRequest{ContainerId: resp.ContainerId})
			require.NoError(t, rerr)
			return false
		}
		err = cerr
		return true
	}, 10*time.Second, 100*time.Millisecond, "the conflicting spec file was never noticed")
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), `CDI device "test.shimd.io/dev=devnull" is ambiguous`)
	list, err = rs.ListContainers(ctxT(t, time.Minute), &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	require.Len(t, list.Containers, 1)
	stopRemove(t, rs, p.id)
}
