package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ImportCheckpointImage imports, as another containerd client, an OCI image of one
// uncompressed layer that is the checkpoint archive, with the checkpoint
// annotations on its manifest, under name.
func ImportCheckpointImage(t testing.TB, env *Env, archivePath, name string) string {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			Fatalf(t, "checkpoint image %s: %v", name, err)
		}
	}
	layer, err := os.ReadFile(archivePath)
	must(err)
	blobs := map[digest.Digest][]byte{}
	add := func(b []byte) ocispec.Descriptor {
		d := digest.FromBytes(b)
		blobs[d] = b
		return ocispec.Descriptor{Digest: d, Size: int64(len(b))}
	}
	layerDesc := add(layer)
	layerDesc.MediaType = ocispec.MediaTypeImageLayer
	cfg, err := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: "amd64"},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDesc.Digest}},
	})
	must(err)
	cfgDesc := add(cfg)
	cfgDesc.MediaType = ocispec.MediaTypeImageConfig
	man, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cfgDesc, Layers: []ocispec.Descriptor{layerDesc},
		Annotations: map[string]string{
			"org.criu.checkpoint.container.name": "counter",
			"org.criu.checkpoint.engine.name":    "shimd",
		},
	})
	must(err)
	manDesc := add(man)
	manDesc.MediaType = ocispec.MediaTypeImageManifest
	manDesc.Annotations = map[string]string{images.AnnotationImageName: name}
	index, err := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{manDesc}})
	must(err)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	put := func(name string, b []byte) {
		must(tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(b)
		must(err)
	}
	put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	put("index.json", index)
	for d, b := range blobs {
		put("blobs/sha256/"+d.Encoded(), b)
	}
	must(tw.Close())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = namespaces.WithNamespace(ctx, env.Shimd.Namespace())
	imgs, err := env.Containerd.Client(t).Import(ctx, &buf)
	must(err)
	if len(imgs) != 1 || imgs[0].Name != name {
		Fatalf(t, "checkpoint image %s: imported %v", name, imgs)
	}
	return name
}
