package network

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The test binary plays runsc when FAKE_RUNSC is set: "runsc --root R [flags]
// port-forward --stream SOCK ID PORT" connects to SOCK and, for port 80, writes the
// id, root and flag it got, then exits 0; for any other port it exits 1 as runsc
// does when the Sentry cannot connect.
func TestMain(m *testing.M) {
	if os.Getenv("FAKE_RUNSC") == "1" {
		fakeRunsc(os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

func fakeRunsc(args []string) {
	// --root R --platform=systrap port-forward --stream SOCK ID PORT
	if len(args) != 8 || args[0] != "--root" || args[3] != "port-forward" || args[4] != "--stream" {
		fmt.Fprintf(os.Stderr, "unexpected arguments %q\n", args)
		os.Exit(2)
	}
	c, err := net.Dial("unix", args[5])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if args[7] != "80" {
		fmt.Fprintln(os.Stderr, "running container: doStream: PortForward: connection refused")
		os.Exit(1)
	}
	fmt.Fprintf(c, "%s %s %s", args[6], args[1], args[2])
	c.Close()
}

func TestRunscDialSandbox(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	t.Setenv("FAKE_RUNSC", "1")
	dir := t.TempDir()
	r := Runsc{Binary: self, Root: "/run/runsc/ns", Flags: []string{"--platform=systrap"}, SocketDir: filepath.Join(dir, "pf")}

	conn, err := r.DialSandbox(context.Background(), "pod1", 80)
	require.NoError(t, err)
	got, err := io.ReadAll(conn)
	require.NoError(t, err)
	conn.Close()
	require.Equal(t, "pod1 /run/runsc/ns --platform=systrap", string(got))

	_, err = r.DialSandbox(context.Background(), "pod1", 81)
	require.ErrorContains(t, err, "connect to port 81 in the gVisor sandbox pod1: running container: doStream: PortForward: connection refused")

	ents, err := os.ReadDir(r.SocketDir)
	require.NoError(t, err)
	require.Empty(t, ents, "no socket file is left")

	r.Binary = filepath.Join(dir, "missing-runsc")
	_, err = r.DialSandbox(context.Background(), "pod1", 80)
	require.ErrorContains(t, err, "port-forward")
}

func TestSandboxRoot(t *testing.T) {
	require.Equal(t, "/run/containerd/runsc/shimd", SandboxRoot("", "shimd"))
	require.Equal(t, "/var/run/gvisor/k8s", SandboxRoot("/var/run/gvisor", "k8s"))
}
