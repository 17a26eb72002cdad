package main

import (
	"encoding/json"
	"fmt"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Docker schema 2 media types (the registry and containerd accept both
// these and OCI's; upstream's e2e images use these).
const (
	dockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	dockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerConfig   = "application/vnd.docker.container.image.v1+json"
	dockerLayer    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

// format is how an image is published.
type format int

const (
	ociManifest  format = iota // one OCI image manifest
	ociIndex                   // an OCI index with one linux/amd64 manifest
	dockerV2                   // one Docker schema 2 manifest
	dockerV2List               // a Docker manifest list with one linux/amd64 manifest
)

// image is one image of the set, published under one or more names.
type image struct {
	// Names are the upstream references that all point at this image.
	Names []string
	// Doc says what it is, for -list and the README.
	Doc    string
	Layers []*layer
	Config ocispec.ImageConfig
	Format format
}

// blob is content to push, with its media type.
type blob struct {
	MediaType string
	Digest    digest.Digest
	Data      []byte
}

func newBlob(mediaType string, data []byte) blob {
	return blob{MediaType: mediaType, Digest: digest.FromBytes(data), Data: data}
}

// published is an image rendered to what the registry stores.
type published struct {
	Layers   []blob
	Config   blob
	Manifest blob  // the platform manifest
	Index    *blob // the index or list naming Manifest, if any
}

// Top is what the image's names point at.
func (p published) Top() blob {
	if p.Index != nil {
		return *p.Index
	}
	return p.Manifest
}

var amd64 = ocispec.Platform{Architecture: "amd64", OS: "linux"}

// render builds the config, manifest and (for index formats) index of img.
// The first name is recorded in the label org.shimd.image, so that two
// images with the same layers and settings still get distinct IDs; an
// image published under several names has one ID.
func render(img *image) (published, error) {
	if len(img.Names) == 0 {
		return published{}, fmt.Errorf("image without a name")
	}
	docker := img.Format == dockerV2 || img.Format == dockerV2List
	cfg := img.Config
	labels := map[string]string{"org.shimd.image": img.Names[0]}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	cfg.Labels = labels

	oc := ocispec.Image{
		Created:  &epoch,
		Author:   "shimd critest/images",
		Platform: amd64,
		Config:   cfg,
		RootFS:   ocispec.RootFS{Type: "layers"},
	}
	var p published
	layerType, configType, manifestType, indexType := ocispec.MediaTypeImageLayerGzip,
		ocispec.MediaTypeImageConfig, ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageIndex
	if docker {
		layerType, configType, manifestType, indexType = dockerLayer, dockerConfig, dockerManifest, dockerList
	}
	for _, l := range img.Layers {
		oc.RootFS.DiffIDs = append(oc.RootFS.DiffIDs, l.DiffID)
		oc.History = append(oc.History, ocispec.History{Created: &epoch, CreatedBy: l.Comment})
		p.Layers = append(p.Layers, blob{MediaType: layerType, Digest: l.Digest, Data: l.Blob})
	}
	cb, err := json.Marshal(oc)
	if err != nil {
		return p, err
	}
	p.Config = newBlob(configType, cb)

	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: manifestType,
		Config:    descriptor(p.Config),
	}
	for _, l := range p.Layers {
		m.Layers = append(m.Layers, descriptor(l))
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return p, err
	}
	p.Manifest = newBlob(manifestType, mb)

	if img.Format == ociIndex || img.Format == dockerV2List {
		d := descriptor(p.Manifest)
		d.Platform = &amd64
		ix := ocispec.Index{
			Versioned: specs.Versioned{SchemaVersion: 2},
			MediaType: indexType,
			Manifests: []ocispec.Descriptor{d},
		}
		ib, err := json.Marshal(ix)
		if err != nil {
			return p, err
		}
		b := newBlob(indexType, ib)
		p.Index = &b
	}
	return p, nil
}

func descriptor(b blob) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: b.MediaType, Digest: b.Digest, Size: int64(len(b.Data))}
}
