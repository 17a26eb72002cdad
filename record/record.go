// Package record is the format of shimd's durable records in containerd, shared by
// sandboxes and containers: the labels shimd puts on its containerd containers, the
// versioned JSON extensions that hold the CRI metadata, and their codecs. It imports
// none of shimd's packages and makes no calls (package ctrd writes records).
package record

import (
	"encoding/json"
	"fmt"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Labels of shimd's containerd containers (namespace of shimd's own).
const (
	// LabelKind says what a containerd container is to shimd: KindSandbox (a pod's
	// pause container) or KindContainer.
	LabelKind     = "io.shimd.kind"
	KindSandbox   = "sandbox"
	KindContainer = "container"
	// LabelName is the CRI name the record was reserved under.
	LabelName = "io.shimd.name"
	// LabelPhase of a sandbox: PhaseCreating until RunPodSandbox has finished.
	LabelPhase    = "io.shimd.phase"
	PhaseCreating = "creating"
	PhaseCreated  = "created"
	// LabelSandbox of a container names its sandbox.
	LabelSandbox = "io.shimd.sandbox"
)

// Put stores v as JSON in extension name (type URL typeURL) of c and sets labels.
func Put(c *containers.Container, name, typeURL string, v any, labels map[string]string) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s record: %w", name, err)
	}
	if c.Extensions == nil {
		c.Extensions = map[string]typeurl.Any{}
	}
	c.Extensions[name] = &anypb.Any{TypeUrl: typeURL, Value: data}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	for k, val := range labels {
		c.Labels[k] = val
	}
	return nil
}

// Get decodes extension name of c into v, which must carry a JSON "version" field
// equal to version.
func Get(c containers.Container, name string, version int, v any) error {
	ext, ok := c.Extensions[name]
	if !ok {
		return fmt.Errorf("container %s has no %s extension", c.ID, name)
	}
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(ext.GetValue(), &head); err != nil {
		return fmt.Errorf("decode %s record %s: %w", name, c.ID, err)
	}
	if head.Version != version {
		return fmt.Errorf("%s record %s: unsupported version %d", name, c.ID, head.Version)
	}
	if err := json.Unmarshal(ext.GetValue(), v); err != nil {
		return fmt.Errorf("decode %s record %s: %w", name, c.ID, err)
	}
	return nil
}

// Patch sets one top-level field of extension name, keeping every other field (also
// those this version of shimd does not know).
func Patch(c *containers.Container, name, field string, raw json.RawMessage) error {
	ext, ok := c.Extensions[name]
	if !ok {
		return fmt.Errorf("container %s has no %s extension", c.ID, name)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(ext.GetValue(), &fields); err != nil {
		return fmt.Errorf("decode %s record %s: %w", name, c.ID, err)
	}
	fields[field] = raw
	data, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	c.Extensions[name] = &anypb.Any{TypeUrl: ext.GetTypeUrl(), Value: data}
	return nil
}

// MarshalProto is the protojson form of m for a record field; nil for a nil m (the
// field is then left out).
func MarshalProto(m proto.Message) (json.RawMessage, error) {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil, nil
	}
	return protojson.Marshal(m)
}

// UnmarshalProto decodes a record field written by MarshalProto into a new message
// from newM; an absent field gives the zero T (nil).
func UnmarshalProto[T proto.Message](raw json.RawMessage, newM func() T) (T, error) {
	var zero T
	if len(raw) == 0 {
		return zero, nil
	}
	m := newM()
	if err := protojson.Unmarshal(raw, m); err != nil {
		return zero, err
	}
	return m, nil
}
