package record

import (
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type testRecord struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
}

func TestPutGetPatch(t *testing.T) {
	c := &containers.Container{ID: "c1"}
	require.NoError(t, Put(c, "io.test", "io.test/t.v1", testRecord{Version: 1, Name: "n"}, map[string]string{LabelKind: KindContainer}))
	require.Equal(t, KindContainer, c.Labels[LabelKind])

	var got testRecord
	require.NoError(t, Get(*c, "io.test", 1, &got))
	require.Equal(t, "n", got.Name)
	require.ErrorContains(t, Get(*c, "io.test", 2, &got), "unsupported version 1")
	require.ErrorContains(t, Get(*c, "io.other", 1, &got), "has no io.other extension")

	require.NoError(t, Patch(c, "io.test", "extra", []byte(`{"a":1}`)))
	require.NoError(t, Get(*c, "io.test", 1, &got))
	require.Equal(t, "n", got.Name, "other fields kept")
	require.Contains(t, string(c.Extensions["io.test"].GetValue()), `"extra":{"a":1}`)
	require.Equal(t, "io.test/t.v1", c.Extensions["io.test"].GetTypeUrl())
}

func TestProtoFields(t *testing.T) {
	raw, err := MarshalProto((*runtimeapi.LinuxContainerResources)(nil))
	require.NoError(t, err)
	require.Nil(t, raw, "nil is an absent field")
	back, err := UnmarshalProto(raw, func() *runtimeapi.LinuxContainerResources { return &runtimeapi.LinuxContainerResources{} })
	require.NoError(t, err)
	require.Nil(t, back)

	raw, err = MarshalProto(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20})
	require.NoError(t, err)
	back, err = UnmarshalProto(raw, func() *runtimeapi.LinuxContainerResources { return &runtimeapi.LinuxContainerResources{} })
	require.NoError(t, err)
	require.EqualValues(t, 1<<20, back.MemoryLimitInBytes)
}
