package ctrd

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/sandbox"
	"github.com/containerd/errdefs"

	"github.com/shimd/shimd/record"
)

// SandboxStore writes, lists and removes shimd's records in containerd's sandbox
// store: a pod's under its pause container's id (package sandbox), a container's
// under its own (package container), told apart by their record.LabelKind. shimd
// uses the store on containerd 2.x only (1.6 has none; 1.7's is not used): until
// Detect has found 2.x, and on 1.x, every call does nothing.
type SandboxStore struct {
	client  *client.Client
	enabled atomic.Bool
}

// NewSandboxStore is the store of c; nil c makes one that does nothing (unit tests).
func NewSandboxStore(c *client.Client) *SandboxStore { return &SandboxStore{client: c} }

// Detect tells from containerd's version whether shimd uses its sandbox store.
func (s *SandboxStore) Detect(ctx context.Context) error {
	if s.client == nil {
		return nil
	}
	v, err := s.client.Version(ctx)
	if err != nil {
		return fmt.Errorf("containerd version: %w", err)
	}
	s.enabled.Store(!strings.HasPrefix(strings.TrimPrefix(v.Version, "v"), "1."))
	return nil
}

// Enabled tells whether records are written (Detect found containerd 2.x).
func (s *SandboxStore) Enabled() bool { return s.enabled.Load() }

// Create writes the record sb; what is recorded ("pod", "container") names it in
// the error.
func (s *SandboxStore) Create(ctx context.Context, what string, sb sandbox.Sandbox) error {
	if !s.Enabled() {
		return nil
	}
	if _, err := s.client.SandboxStore().Create(ctx, sb); err != nil {
		return fmt.Errorf("record %s %s in containerd's sandbox store: %w", what, sb.ID, err)
	}
	return nil
}

// Delete removes the record of id; a missing one is fine.
func (s *SandboxStore) Delete(ctx context.Context, what, id string) error {
	if !s.Enabled() {
		return nil
	}
	if err := s.client.SandboxStore().Delete(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove %s %s from containerd's sandbox store: %w", what, id, err)
	}
	return nil
}

// List returns shimd's records of kind (record.KindSandbox, record.KindContainer).
func (s *SandboxStore) List(ctx context.Context, kind string) ([]sandbox.Sandbox, error) {
	if !s.Enabled() {
		return nil, nil
	}
	list, err := s.client.SandboxStore().List(ctx, fmt.Sprintf("labels.%q==%s", record.LabelKind, kind))
	if err != nil {
		return nil, fmt.Errorf("list containerd's sandbox store: %w", err)
	}
	return list, nil
}
