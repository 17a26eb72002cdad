package cgroup

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDir(t *testing.T) {
	require.Equal(t, "/shimd/id1", Dir("", "id1", "cgroupfs", "shimd"))
	require.Equal(t, "/kubepods/pod1/id1", Dir("/kubepods/pod1", "id1", "cgroupfs", "shimd"))
	require.Equal(t, "", Dir("/kubepods.slice", "id1", "systemd", "shimd"))
	require.NoError(t, Remove(""), "no cgroup, nothing to do")
}
