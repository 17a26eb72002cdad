package container

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExecStartExitCode(t *testing.T) {
	const prefix = "OCI runtime exec failed: exec failed: unable to start container process: "
	tests := []struct {
		msg  string
		code uint32
		ok   bool
	}{
		{prefix + `exec: "/does-not-exist": stat /does-not-exist: no such file or directory: unknown`, 127, true},
		{prefix + `exec: "nope": executable file not found in $PATH: unknown`, 127, true},
		{prefix + `exec: "/etc/passwd": permission denied: unknown`, 126, true},
		{prefix + `exec: "/bin/x": exec format error: unknown`, 126, true},
		{"create task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: " +
			`error during container init: exec: "/does-not-exist": stat /does-not-exist: no such file or directory`, 127, true},
		{"cannot exec in a stopped state: unknown", 0, false},
		{prefix + "error setting cgroup config: no such file or directory", 0, false},
	}
	for _, tt := range tests {
		code, ok := execStartExitCode(errors.New(tt.msg))
		require.Equal(t, tt.ok, ok, tt.msg)
		require.Equal(t, tt.code, code, tt.msg)
	}
	require.Equal(t, `exec: "/x": stat /x: no such file or directory`,
		execStartMessage(errors.New(prefix+`exec: "/x": stat /x: no such file or directory: unknown`)))
}
