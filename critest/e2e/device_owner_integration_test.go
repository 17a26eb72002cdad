//go:build integration

package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// TestDeviceOwnershipFromSecurityContext gives a container of uid 1000 and gid 2000
// a device node only root may open on the node (a char device 1:3, like /dev/null,
// made 0600 root:root for the test): with device_ownership_from_security_context
// the container's node belongs to 1000:2000 and the container opens it; without it,
// the node is root's and the open is refused. The node's own file is unchanged.
func TestDeviceOwnershipFromSecurityContext(t *testing.T) {
	requireRoot(t)
	node := filepath.Join(t.TempDir(), "private-null")
	require.NoError(t, unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
	require.NoError(t, os.Chmod(node, 0o600))
	const probe = `stat -c '%u %g %a' /dev/priv; if ( exec 3<>/dev/priv ) 2>/dev/null; then echo open=yes; else echo open=no; fi`
	for _, tc := range []struct {
		name, extra, want string
	}{
		{"on", "device_ownership_from_security_context = true\n", "1000 2000 600\nopen=yes\n"},
		{"off", "", "0 0 600\nopen=no\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: tc.extra}})
			pull(t, env, busyboxImage)
			rs := env.Shimd.Runtime(t)
			p := newPod(t, rs, "devowner")
			c := p.container("probe", "sleep", "3600")
			c.Devices = []*runtimeapi.Device{{HostPath: node, ContainerPath: "/dev/priv", Permissions: "rw"}}
			c.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
			c.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: 2000}
			id := p.run(c)
			resp, err := execSync(t, rs, id, 30, "sh", "-c", probe)
			require.NoError(t, err)
			t.Logf("%s: %q, stderr %q", tc.name, resp.Stdout, resp.Stderr)
			require.Equal(t, tc.want, string(resp.Stdout))
			stopRemove(t, rs, p.id)
			var st unix.Stat_t
			require.NoError(t, unix.Stat(node, &st))
			require.Equal(t, [3]uint32{0, 0, unix.S_IFCHR | 0o600}, [3]uint32{st.Uid, st.Gid, st.Mode}, "the node's file unchanged")
		})
	}
}
