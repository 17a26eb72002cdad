//go:build integration

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// next returns one malformed request for each RPC of both services.
func (f *fuzzer) next() []attack {
	rs := f.rs
	id, sid := f.id(), f.id()
	// Everything random is drawn here, not in the calls: they run on other goroutines.
	version, verbose, flag, location := f.str(), f.r.IntN(2) == 0, f.r.IntN(2) == 0, f.str()
	annotations, timeout := f.labels(), int64(f.r.IntN(3))
	var out []attack
	add := func(rpc, desc string, call func(ctx context.Context) error) {
		out = append(out, attack{rpc: rpc, desc: desc, call: call})
	}
	add("Version", "version "+q(version), func(ctx context.Context) error {
		_, err := rs.Version(ctx, &runtimeapi.VersionRequest{Version: version})
		return err
	})
	podCfg, handler := f.podConfig(), []string{"", "runc", "kata", "../runc"}[f.r.IntN(4)]
	add("RunPodSandbox", "config "+summary(podCfg)+" handler "+q(handler), func(ctx context.Context) error {
		_, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: handler})
		return err
	})
	unknown := f.unknownID()
	add("StopPodSandbox", "id "+q(unknown), func(ctx context.Context) error {
		_, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: unknown})
		return err
	})
	add("RemovePodSandbox", "id "+q(unknown), func(ctx context.Context) error {
		_, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: unknown})
		return err
	})
	add("PodSandboxStatus", "id "+q(sid), func(ctx context.Context) error {
		_, err := rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sid, Verbose: verbose})
		return err
	})
	podFilter := f.podFilter()
	add("ListPodSandbox", "filter", func(ctx context.Context) error {
		_, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: podFilter})
		return err
	})
	add("StreamPodSandboxes", "filter", func(ctx context.Context) error {
		return drain(rs.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{Filter: podFilter}))
	})
	ctrCfg, sbCfg := f.containerConfig(), f.podConfig()
	add("CreateContainer", "pod "+q(sid)+" config "+summary(ctrCfg), func(ctx context.Context) error {
		_, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sid, Config: ctrCfg, SandboxConfig: sbCfg})
		return err
	})
	bait := f.runcBait()
	add("CreateContainer+StartContainer", "config "+summary(bait), func(ctx context.Context) error {
		resp, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: f.podID, Config: bait})
		if err != nil {
			return err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, _ = rs.RemoveContainer(rctx, &runtimeapi.RemoveContainerRequest{ContainerId: resp.ContainerId})
		}()
		_, err = rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
		return err
	})
	baitRes := f.baitResources()
	add("UpdateContainerResources", "running container, memory "+summary(baitRes), func(ctx context.Context) error {
		_, err := rs.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: f.ctrID, Linux: baitRes})
		return err
	})
	add("StartContainer", "id "+q(unknown), func(ctx context.Context) error {
		_, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: unknown})
		return err
	})
	add("StopContainer", "id "+q(unknown), func(ctx context.Context) error {
		_, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: unknown, Timeout: timeout})
		return err
	})
	add("RemoveContainer", "id "+q(unknown), func(ctx context.Context) error {
		_, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: unknown})
		return err
	})
	ctrFilter := &runtimeapi.ContainerFilter{Id: f.str(), PodSandboxId: f.str(), LabelSelector: f.labels(),
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState(f.r.IntN(7) - 1)}}
	add("ListContainers", "filter", func(ctx context.Context) error {
		_, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: ctrFilter})
		return err
	})
	add("StreamContainers", "filter", func(ctx context.Context) error {
		return drain(rs.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: ctrFilter}))
	})
	add("ContainerStatus", "id "+q(id), func(ctx context.Context) error {
		_, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
		return err
	})
	res := f.resources()
	add("UpdateContainerResources", "id "+q(id)+" resources", func(ctx context.Context) error {
		_, err := rs.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: res,
			Annotations: annotations})
		return err
	})
	add("ReopenContainerLog", "id "+q(id), func(ctx context.Context) error {
		_, err := rs.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
		return err
	})
	cmd := f.strs()
	add("ExecSync", "id "+q(id)+" cmd "+q(cmd...), func(ctx context.Context) error {
		_, err := rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: timeout})
		return err
	})
	add("Exec", "id "+q(id), func(ctx context.Context) error {
		_, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: cmd, Tty: true, Stdin: true, Stdout: flag, Stderr: true})
		return err
	})
	add("Attach", "id "+q(id), func(ctx context.Context) error {
		_, err := rs.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdout: flag, Tty: verbose})
		return err
	})
	port := int32(f.i64())
	add("PortForward", "pod "+q(sid), func(ctx context.Context) error {
		_, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sid, Port: []int32{port, -1, 0}})
		return err
	})
	add("ContainerStats", "id "+q(id), func(ctx context.Context) error {
		_, err := rs.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
		return err
	})
	statsFilter := &runtimeapi.ContainerStatsFilter{Id: f.str(), PodSandboxId: f.str(), LabelSelector: f.labels()}
	add("ListContainerStats", "filter", func(ctx context.Context) error {
		_, err := rs.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: statsFilter})
		return err
	})
	add("StreamContainerStats", "filter", func(ctx context.Context) error {
		return drain(rs.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{Filter: statsFilter}))
	})
	add("PodSandboxStats", "id "+q(sid), func(ctx context.Context) error {
		_, err := rs.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: sid})
		return err
	})
	sbStatsFilter := &runtimeapi.PodSandboxStatsFilter{Id: f.str(), LabelSelector: f.labels()}
	add("ListPodSandboxStats", "filter", func(ctx context.Context) error {
		_, err := rs.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: sbStatsFilter})
		return err
	})
	add("StreamPodSandboxStats", "filter", func(ctx context.Context) error {
		return drain(rs.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{Filter: sbStatsFilter}))
	})
	cidr := "bad/" + f.str()
	add("UpdateRuntimeConfig", "cidr "+q(cidr), func(ctx context.Context) error {
		_, err := rs.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{
			NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}}})
		return err
	})
	add("Status", "verbose", func(ctx context.Context) error {
		_, err := rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: verbose})
		return err
	})
	add("CheckpointContainer", "id "+q(id), func(ctx context.Context) error {
		_, err := rs.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: location})
		return err
	})
	add("ListMetricDescriptors", "", func(ctx context.Context) error {
		_, err := rs.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{})
		return err
	})
	add("ListPodSandboxMetrics", "", func(ctx context.Context) error {
		_, err := rs.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
		return err
	})
	add("RuntimeConfig", "", func(ctx context.Context) error {
		_, err := rs.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
		return err
	})
	over, podRes := f.resources(), f.resources()
	add("UpdatePodSandboxResources", "pod "+q(sid), func(ctx context.Context) error {
		_, err := rs.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: sid, Overhead: over, Resources: podRes})
		return err
	})
	return append(out, f.imageAttacks()...)
}

func (f *fuzzer) imageAttacks() []attack {
	is := f.is
	ref := f.imageRef()
	spec := &runtimeapi.ImageSpec{Image: ref, RuntimeHandler: []string{"", "runc", "nope"}[f.r.IntN(3)], Annotations: f.labels()}
	if f.r.IntN(8) == 0 {
		spec = nil
	}
	auth := &runtimeapi.AuthConfig{Username: f.str(), Password: f.str(), Auth: f.str(), ServerAddress: f.str(), IdentityToken: f.str(), RegistryToken: f.str()}
	if f.r.IntN(3) == 0 {
		auth = nil
	}
	filter, sbCfg := &runtimeapi.ImageFilter{Image: spec}, f.podConfig()
	return []attack{
		{"PullImage", "ref " + q(ref), func(ctx context.Context) error {
			_, err := is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, Auth: auth, SandboxConfig: sbCfg})
			return err
		}},
		{"ImageStatus", "ref " + q(ref), func(ctx context.Context) error {
			_, err := is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec, Verbose: true})
			return err
		}},
		{"RemoveImage", "ref " + q(ref), func(ctx context.Context) error {
			_, err := is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec})
			return err
		}},
		{"ListImages", "filter", func(ctx context.Context) error {
			_, err := is.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: filter})
			return err
		}},
		{"StreamImages", "filter", func(ctx context.Context) error {
			return drain(is.StreamImages(ctx, &runtimeapi.StreamImagesRequest{Filter: filter}))
		}},
		{"ImageFsInfo", "", func(ctx context.Context) error {
			_, err := is.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
			return err
		}},
	}
}

// unknownID is an id that names nothing (Stop and Remove of it must succeed) or is
// malformed; the test's own pod and container are kept.
func (f *fuzzer) unknownID() string {
	for {
		if id := f.id(); id == "" || (!strings.HasPrefix(f.podID, id) && !strings.HasPrefix(f.ctrID, id)) {
			return id
		}
	}
}

func (f *fuzzer) podFilter() *runtimeapi.PodSandboxFilter {
	if f.r.IntN(5) == 0 {
		return nil
	}
	return &runtimeapi.PodSandboxFilter{Id: f.str(), LabelSelector: f.labels(),
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState(f.r.IntN(4) - 1)}}
}

// q quotes values for a failure report, each cut to 40 bytes.
func q(v ...string) string {
	out := ""
	for _, s := range v {
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		out += fmt.Sprintf("%q ", s)
	}
	return out
}

func summary(m proto.Message) string {
	if !m.ProtoReflect().IsValid() {
		return "nil"
	}
	s := prototext.Format(m)
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}
