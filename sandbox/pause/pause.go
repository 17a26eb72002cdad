// Package pause provides shimd's built-in pause image, so that a node with no
// registry access can still run pods.
//
// The image is built in memory, deterministically, from pause.bin: a static
// program (pause.c, built by the Makefile) that holds the sandbox's
// namespaces, reaps orphans as PID 1 of the pod, and exits 0 on SIGINT or
// SIGTERM. The same bytes give the same digests on every run and every node.
//
// Build returns the image's three blobs; Ensure and Importer put them into
// containerd (content store, image record, unpacked snapshot).
//
// The image is deliberately not named registry.k8s.io/pause: critest tests
// the upstream pause tags as distinct images, and the sandbox image must not
// share a name or digest with them.
package pause

//go:generate make -s pause.bin

import (
	"archive/tar"
	"bytes"
	_ "embed" // for pause.bin
	"encoding/json"
	"runtime"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

const (
	// Version is the version of the pause program and the tag of the image.
	// Keep it equal to VERSION in pause.c, and bump both when pause.bin
	// changes.
	Version = "1.0"
	// Ref is the name of the built-in image in containerd's image store.
	Ref = "localhost/shimd/pause:" + Version
	// PinnedLabel marks, on the containerd image record, an image that shimd
	// manages itself and that must not be garbage-collected or removed by
	// the kubelet (CRI's Image.pinned).
	PinnedLabel = "io.shimd.pinned"
	// PinnedValue is the value of PinnedLabel.
	PinnedValue = "pinned"

	// user is the unprivileged uid:gid the pause process runs as, the same
	// as the upstream pause image; numeric, so it needs no /etc/passwd.
	user = "65535:65535"
)

// binary is the static pause program, built by `make` from pause.c.
//
//go:embed pause.bin
var binary []byte

// epoch is the fixed time stamped on the image and its one file.
var epoch = time.Unix(0, 0).UTC()

// Blob is one content-addressed part of the image: its bytes and the
// descriptor that names them.
type Blob struct {
	Desc ocispec.Descriptor
	Data []byte
}

// Image is the built-in pause image: an OCI image manifest, its config and
// its single layer. The Data slices are shared; callers must not modify them.
type Image struct {
	Manifest Blob
	Config   Blob
	Layer    Blob
}

// Build returns the built-in pause image for linux/runtime.GOARCH. It does no
// I/O, and returns the same bytes on every call; they are computed once.
func Build() Image { return built() }

var built = sync.OnceValue(func() Image { return build(binary, runtime.GOARCH) })

// build makes the image from a pause binary for the given GOARCH.
//
// The layer is an uncompressed tar: it is a few KB and never crosses a
// network, so gzip would save nothing that matters, would cost a
// decompression on every unpack, and would tie the digest to the output of
// Go's compress/flate, which may change between Go releases. Uncompressed,
// the digest depends on the binary and this code only, and the layer digest
// is also its diff_id.
func build(bin []byte, goarch string) Image {
	layer := newBlob(ocispec.MediaTypeImageLayer, layerTar(bin))
	config := newBlob(ocispec.MediaTypeImageConfig, mustJSON(ocispec.Image{
		Created:  &epoch,
		Platform: ocispec.Platform{Architecture: goarch, OS: "linux"},
		Config: ocispec.ImageConfig{
			User:       user,
			Entrypoint: []string{"/pause"},
			WorkingDir: "/",
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.Desc.Digest}},
	}))
	manifest := newBlob(ocispec.MediaTypeImageManifest, mustJSON(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    config.Desc,
		Layers:    []ocispec.Descriptor{layer.Desc},
	}))
	return Image{Manifest: manifest, Config: config, Layer: layer}
}

// layerTar returns a tar holding only /pause: root-owned, mode 0755, fixed
// mtime, USTAR format so that no PAX records with times are added. runc
// creates the mount points (/proc, /dev, /sys) itself in the writable
// snapshot, as it does for the upstream pause image, which also holds only
// /pause.
func layerTar(bin []byte) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     "pause",
		Mode:     0o755,
		Size:     int64(len(bin)),
		ModTime:  epoch,
		Format:   tar.FormatUSTAR,
	}
	// Writes to a bytes.Buffer cannot fail; an error here is a bug.
	if err := tw.WriteHeader(hdr); err != nil {
		panic("pause: write tar header: " + err.Error())
	}
	if _, err := tw.Write(bin); err != nil {
		panic("pause: write tar body: " + err.Error())
	}
	if err := tw.Close(); err != nil {
		panic("pause: close tar: " + err.Error())
	}
	return buf.Bytes()
}

func newBlob(mediaType string, data []byte) Blob {
	return Blob{
		Desc: ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))},
		Data: data,
	}
}

// mustJSON marshals v, which is one of the fixed image-spec structs above;
// encoding/json writes struct fields in declaration order, so the bytes are
// stable.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("pause: marshal: " + err.Error())
	}
	return b
}
