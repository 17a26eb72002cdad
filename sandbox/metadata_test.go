package sandbox

import (
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestRecordRoundTrip(t *testing.T) {
	sb := &Sandbox{
		ID: "abc", Name: "p_ns_uid_0", RuntimeHandler: "runc", CreatedAt: time.Unix(1700000000, 5).UTC(),
		NetNSPath: "/run/shimd/netns/abc", IPs: []string{"198.18.0.7"},
		ProcessLabel: "u:r:container_t:s0:c1,c2", MountLabel: "u:object_r:container_file_t:s0:c1,c2",
		Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "uid"}, Hostname: "p"},
	}
	for _, withResources := range []bool{false, true} {
		if withResources {
			sb.overhead = &runtimeapi.LinuxContainerResources{CpuShares: 10}
			sb.resources = &runtimeapi.LinuxContainerResources{CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20}
		}
		c := containers.Container{ID: sb.ID}
		if err := setRecord(&c, sb, PhaseCreated); err != nil {
			t.Fatal(err)
		}
		if c.Labels[LabelPhase] != PhaseCreated || c.Labels[LabelKind] != KindSandbox {
			t.Fatalf("labels %v", c.Labels)
		}
		c.Extensions = map[string]typeurl.Any{extensionName: c.Extensions[extensionName]}
		got, err := decodeRecord(c)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != sb.Name || got.RuntimeHandler != sb.RuntimeHandler || !got.CreatedAt.Equal(sb.CreatedAt) ||
			got.NetNSPath != sb.NetNSPath || got.ProcessLabel != sb.ProcessLabel || got.MountLabel != sb.MountLabel || len(got.IPs) != 1 || got.IPs[0] != sb.IPs[0] || !proto.Equal(got.Config, sb.Config) {
			t.Fatalf("round trip: %+v", got)
		}
		o, r := got.PodResources()
		if !proto.Equal(o, sb.overhead) || !proto.Equal(r, sb.resources) {
			t.Fatalf("resources %v %v, want %v %v", o, r, sb.overhead, sb.resources)
		}
	}
}
