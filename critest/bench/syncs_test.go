package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSyncCounts(t *testing.T) {
	// perf 6.1's -x, output, with the comment lines it writes to -o files.
	out := "# started on Thu Nov 26 22:40:01 2026\n\n" +
		"1834,,syscalls:sys_enter_fdatasync,20011803423,100.00,,\n" +
		"12,,syscalls:sys_enter_fsync,20011803423,100.00,,\n"
	c, err := parseSyncCounts(out)
	require.NoError(t, err)
	require.Equal(t, syncCounts{fdatasync: 1834, fsync: 12}, c)
	require.Equal(t, "containerd: 1834 fdatasync (9.2 per pod), 12 fsync (0.1 per pod)", c.line("containerd", 200))

	c, err = parseSyncCounts("<not counted>,,syscalls:sys_enter_fdatasync,0,100.00,,\n0,,syscalls:sys_enter_fsync,1,100.00,,\n")
	require.NoError(t, err)
	require.Equal(t, syncCounts{}, c)

	_, err = parseSyncCounts("1,,syscalls:sys_enter_fdatasync,1,100.00,,\n")
	require.ErrorContains(t, err, "1 of the 2 events")
	_, err = parseSyncCounts("x,,syscalls:sys_enter_fdatasync,1,,\n0,,syscalls:sys_enter_fsync,1,,\n")
	require.ErrorContains(t, err, `count "x"`)
}
