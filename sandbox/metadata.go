package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The sandbox record lives in containerd: the pause container carries these labels and
// a versioned JSON extension. There is no other durable store.
const (
	LabelKind   = "io.shimd.kind"
	KindSandbox = "sandbox"
	LabelName   = "io.shimd.name"
	LabelPhase  = "io.shimd.phase"
	// LabelSandbox is the label of a container record naming its sandbox.
	LabelSandbox     = "io.shimd.sandbox"
	PhaseCreating    = "creating" // Run has not finished; recovery undoes such a sandbox
	PhaseCreated     = "created"
	extensionName    = "io.shimd.sandbox"
	extensionTypeURL = "io.shimd/sandbox.v1"
	recordVersion    = 1
)

// record is the durable form of a Sandbox (extension io.shimd.sandbox, version 1).
type record struct {
	Version        int             `json:"version"`
	Name           string          `json:"name"`
	Config         json.RawMessage `json:"config"`
	RuntimeHandler string          `json:"runtime_handler"`
	CreatedAt      time.Time       `json:"created_at"`
	NetNSPath      string          `json:"netns_path,omitempty"`
	IPs            []string        `json:"ips,omitempty"`
	// Overhead and Resources are the pod-level limits of the last
	// UpdatePodSandboxResources (protojson of LinuxContainerResources).
	Overhead  json.RawMessage `json:"overhead,omitempty"`
	Resources json.RawMessage `json:"resources,omitempty"`
}

func encodeRecord(sb *Sandbox) (*anypb.Any, error) {
	cfg, err := protojson.Marshal(sb.Config)
	if err != nil {
		return nil, fmt.Errorf("encode sandbox config: %w", err)
	}
	rec := record{
		Version: recordVersion, Name: sb.Name, Config: cfg, RuntimeHandler: sb.RuntimeHandler,
		CreatedAt: sb.CreatedAt, NetNSPath: sb.NetNSPath, IPs: sb.IPs,
	}
	overhead, resources := sb.PodResources()
	if rec.Overhead, err = encodeResources(overhead); err != nil {
		return nil, err
	}
	if rec.Resources, err = encodeResources(resources); err != nil {
		return nil, err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: extensionTypeURL, Value: data}, nil
}

func decodeRecord(c containers.Container) (*Sandbox, error) {
	ext, ok := c.Extensions[extensionName]
	if !ok {
		return nil, fmt.Errorf("container %s has no %s extension", c.ID, extensionName)
	}
	var rec record
	if err := json.Unmarshal(ext.GetValue(), &rec); err != nil {
		return nil, fmt.Errorf("decode sandbox record %s: %w", c.ID, err)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("sandbox record %s: unsupported version %d", c.ID, rec.Version)
	}
	cfg := &runtimeapi.PodSandboxConfig{}
	if err := protojson.Unmarshal(rec.Config, cfg); err != nil {
		return nil, fmt.Errorf("decode sandbox config %s: %w", c.ID, err)
	}
	sb := &Sandbox{
		ID: c.ID, Name: rec.Name, Config: cfg, RuntimeHandler: rec.RuntimeHandler,
		CreatedAt: rec.CreatedAt, NetNSPath: rec.NetNSPath, IPs: rec.IPs, state: StateNotReady,
	}
	var err error
	if sb.overhead, err = decodeResources(rec.Overhead); err != nil {
		return nil, fmt.Errorf("decode sandbox overhead %s: %w", c.ID, err)
	}
	if sb.resources, err = decodeResources(rec.Resources); err != nil {
		return nil, fmt.Errorf("decode sandbox resources %s: %w", c.ID, err)
	}
	return sb, nil
}

// encodeResources and decodeResources map nil to an absent field and back.
func encodeResources(r *runtimeapi.LinuxContainerResources) (json.RawMessage, error) {
	if r == nil {
		return nil, nil
	}
	return protojson.Marshal(r)
}

func decodeResources(raw json.RawMessage) (*runtimeapi.LinuxContainerResources, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	r := &runtimeapi.LinuxContainerResources{}
	return r, protojson.Unmarshal(raw, r)
}

// withRecord stores the record and phase label on a container being created.
func withRecord(sb *Sandbox, phase string) client.NewContainerOpts {
	return func(_ context.Context, _ *client.Client, c *containers.Container) error {
		return setRecord(c, sb, phase)
	}
}

// updateRecord rewrites the record and phase label of an existing container.
func updateRecord(sb *Sandbox, phase string) client.UpdateContainerOpts {
	return func(_ context.Context, _ *client.Client, c *containers.Container) error {
		return setRecord(c, sb, phase)
	}
}

func setRecord(c *containers.Container, sb *Sandbox, phase string) error {
	ext, err := encodeRecord(sb)
	if err != nil {
		return err
	}
	if c.Extensions == nil {
		c.Extensions = map[string]typeurl.Any{}
	}
	c.Extensions[extensionName] = ext
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	c.Labels[LabelKind] = KindSandbox
	c.Labels[LabelName] = sb.Name
	c.Labels[LabelPhase] = phase
	return nil
}
