package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/record"
)

// The sandbox record lives in containerd: the pause container carries shimd's labels
// (package record) and a versioned JSON extension. There is no other durable store.
const (
	LabelKind     = record.LabelKind
	KindSandbox   = record.KindSandbox
	LabelName     = record.LabelName
	LabelPhase    = record.LabelPhase
	LabelSandbox  = record.LabelSandbox
	PhaseCreating = record.PhaseCreating // Run has not finished; recovery undoes such a sandbox
	PhaseCreated  = record.PhaseCreated

	extensionName    = "io.shimd.sandbox"
	extensionTypeURL = "io.shimd/sandbox.v1"
	recordVersion    = 1
)

// sandboxRecord is the durable form of a Sandbox (extension io.shimd.sandbox, version 1).
type sandboxRecord struct {
	Version        int             `json:"version"`
	Name           string          `json:"name"`
	Config         json.RawMessage `json:"config"`
	RuntimeHandler string          `json:"runtime_handler"`
	CreatedAt      time.Time       `json:"created_at"`
	NetNSPath      string          `json:"netns_path,omitempty"`
	IPs            []string        `json:"ips,omitempty"`
	// Pauseless: the pod runs without a pause process (pauseless.go).
	Pauseless bool `json:"pauseless,omitempty"`
	// SharedRootfs: the pause container runs from Options.PauseRootfs, with no
	// snapshot (an older record, without it, names a snapshot).
	SharedRootfs bool `json:"shared_rootfs,omitempty"`
	// SELinux: the pod's process and mount labels, so that a restart keeps its
	// MCS level (Recover reserves it again).
	ProcessLabel string `json:"selinux_process_label,omitempty"`
	MountLabel   string `json:"selinux_mount_label,omitempty"`
	// Overhead and Resources are the pod-level limits of the last
	// UpdatePodSandboxResources (protojson of LinuxContainerResources).
	Overhead  json.RawMessage `json:"overhead,omitempty"`
	Resources json.RawMessage `json:"resources,omitempty"`
}

func newResources() *runtimeapi.LinuxContainerResources { return &runtimeapi.LinuxContainerResources{} }

func encodeRecord(sb *Sandbox) (sandboxRecord, error) {
	cfg, err := protojson.Marshal(sb.Config)
	if err != nil {
		return sandboxRecord{}, fmt.Errorf("encode sandbox config: %w", err)
	}
	rec := sandboxRecord{
		Version: recordVersion, Name: sb.Name, Config: cfg, RuntimeHandler: sb.RuntimeHandler,
		CreatedAt: sb.CreatedAt, NetNSPath: sb.NetNSPath, IPs: sb.IPs, Pauseless: sb.Pauseless,
		SharedRootfs: sb.SharedRootfs,
		ProcessLabel: sb.ProcessLabel, MountLabel: sb.MountLabel,
	}
	overhead, resources := sb.PodResources()
	if rec.Overhead, err = record.MarshalProto(overhead); err != nil {
		return rec, err
	}
	rec.Resources, err = record.MarshalProto(resources)
	return rec, err
}

func decodeRecord(c containers.Container) (*Sandbox, error) {
	var rec sandboxRecord
	if err := record.Get(c, extensionName, recordVersion, &rec); err != nil {
		return nil, err
	}
	cfg := &runtimeapi.PodSandboxConfig{}
	if err := protojson.Unmarshal(rec.Config, cfg); err != nil {
		return nil, fmt.Errorf("decode sandbox config %s: %w", c.ID, err)
	}
	sb := &Sandbox{
		ID: c.ID, Name: rec.Name, Config: cfg, RuntimeHandler: rec.RuntimeHandler,
		CreatedAt: rec.CreatedAt, NetNSPath: rec.NetNSPath, IPs: rec.IPs, Pauseless: rec.Pauseless,
		SharedRootfs: rec.SharedRootfs,
		ProcessLabel: rec.ProcessLabel, MountLabel: rec.MountLabel, state: pod.NotReady,
	}
	var err error
	if sb.overhead, err = record.UnmarshalProto(rec.Overhead, newResources); err != nil {
		return nil, fmt.Errorf("decode sandbox overhead %s: %w", c.ID, err)
	}
	if sb.resources, err = record.UnmarshalProto(rec.Resources, newResources); err != nil {
		return nil, fmt.Errorf("decode sandbox resources %s: %w", c.ID, err)
	}
	return sb, nil
}

// withRecord stores the record and phase label on a container being created.
func withRecord(sb *Sandbox, phase string) client.NewContainerOpts {
	return func(_ context.Context, _ *client.Client, c *containers.Container) error {
		return setRecord(c, sb, phase)
	}
}

// updateRecord rewrites the record and phase label of the pod's existing container,
// in one call to containerd.
func (m *Manager) updateRecord(ctx context.Context, sb *Sandbox, phase string) error {
	rec, err := encodeRecord(sb)
	if err != nil {
		return err
	}
	return ctrd.Update(ctx, m.opts.Client.ContainerService(), sb.ID, extensionName, extensionTypeURL, rec, recordLabels(sb, phase))
}

func setRecord(c *containers.Container, sb *Sandbox, phase string) error {
	rec, err := encodeRecord(sb)
	if err != nil {
		return err
	}
	return record.Put(c, extensionName, extensionTypeURL, rec, recordLabels(sb, phase))
}

func recordLabels(sb *Sandbox, phase string) map[string]string {
	return map[string]string{LabelKind: KindSandbox, LabelName: sb.Name, LabelPhase: phase}
}
