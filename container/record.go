package container

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/record"
	"github.com/shimd/shimd/spec"
)

// A container's durable record is its containerd container: labels and a versioned
// JSON extension written once at create. Its mutable status (state, pid, exit code,
// reason, times) lives in <root>/containers/<id>/status.json, replaced atomically.
const (
	containerExtension   = "io.shimd.container"
	containerExtTypeURL  = "io.shimd/container.v1"
	containerRecordVer   = 1
	statusFileName       = "status.json"
	gcRefImageLabel      = "containerd.io/gc.ref.content.image"
	containerDirName     = "containers"
	containerFIFODirName = "fifo"
)

type containerRecord struct {
	Version     int             `json:"version"`
	Name        string          `json:"name"`
	SandboxID   string          `json:"sandbox_id"`
	Config      json.RawMessage `json:"config"`
	ImageID     string          `json:"image_id"`
	ImageName   string          `json:"image_name"`
	ImageRef    string          `json:"image_ref"`
	LogPath     string          `json:"log_path,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	Snapshotter string          `json:"snapshotter"`
	StopSignal  string          `json:"stop_signal,omitempty"`
	User        spec.User       `json:"user"`
	// WritableDir is the split writable layer's directory (writable.go).
	WritableDir string `json:"writable_dir,omitempty"`
	// Resources are the limits of the last UpdateContainerResources (protojson of
	// LinuxContainerResources); absent: the config's.
	Resources json.RawMessage `json:"resources,omitempty"`
}

func withContainerRecord(c *Container, imageTarget string) client.NewContainerOpts {
	return func(_ context.Context, _ *client.Client, rec *containers.Container) error {
		cfg, err := protojson.Marshal(c.Config)
		if err != nil {
			return fmt.Errorf("encode container config: %w", err)
		}
		return record.Put(rec, containerExtension, containerExtTypeURL, containerRecord{
			Version: containerRecordVer, Name: c.Name, SandboxID: c.SandboxID, Config: cfg,
			ImageID: c.ImageID, ImageName: c.ImageName, ImageRef: c.ImageRef, LogPath: c.LogPath,
			CreatedAt: c.CreatedAt, Snapshotter: c.Snapshotter, StopSignal: c.StopSignal, User: c.User,
			WritableDir: c.WritableDir,
		}, map[string]string{
			record.LabelKind: record.KindContainer, record.LabelSandbox: c.SandboxID, record.LabelName: c.Name,
			// Keeps the image's content while the container exists, even if the image is removed.
			gcRefImageLabel: imageTarget,
		})
	}
}

func decodeContainerRecord(rec containers.Container) (*Container, error) {
	var r containerRecord
	if err := record.Get(rec, containerExtension, containerRecordVer, &r); err != nil {
		return nil, err
	}
	cfg := &runtimeapi.ContainerConfig{}
	if err := protojson.Unmarshal(r.Config, cfg); err != nil {
		return nil, fmt.Errorf("decode container config %s: %w", rec.ID, err)
	}
	c := &Container{
		ID: rec.ID, Name: r.Name, SandboxID: r.SandboxID, Config: cfg, ImageID: r.ImageID,
		ImageName: r.ImageName, ImageRef: r.ImageRef, LogPath: r.LogPath, CreatedAt: r.CreatedAt,
		Snapshotter: r.Snapshotter, StopSignal: r.StopSignal, User: r.User, exited: make(chan struct{}),
		WritableDir: r.WritableDir,
	}
	res, err := record.UnmarshalProto(r.Resources, func() *runtimeapi.LinuxContainerResources { return &runtimeapi.LinuxContainerResources{} })
	if err != nil {
		return nil, fmt.Errorf("decode container resources %s: %w", rec.ID, err)
	}
	c.resources = res
	return c, nil
}

// recordResources writes res into the record as the container's current limits.
func recordResources(rec *containers.Container, res *runtimeapi.LinuxContainerResources) error {
	raw, err := protojson.Marshal(res)
	if err != nil {
		return err
	}
	return record.Patch(rec, containerExtension, "resources", raw)
}

// dirs are where containers' status files (under the root dir) and stdio FIFOs
// (under the state dir) live.
type dirs struct{ root, state string }

func (d dirs) containerDir(id string) string {
	return filepath.Join(d.root, containerDirName, id)
}

// writeStatus persists the container's status atomically (temp file + rename). It
// survives a crash of shimd (the page cache does); after a crash of the node there are
// no containers to report on, so it is not fsynced.
func writeStatus(dir string, st containerStatus) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".status-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	tmp.Close()
	if err := os.Rename(tmp.Name(), filepath.Join(dir, statusFileName)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

func (d dirs) readStatus(id string) (containerStatus, error) {
	var st containerStatus
	data, err := os.ReadFile(filepath.Join(d.containerDir(id), statusFileName))
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(data, &st)
}
