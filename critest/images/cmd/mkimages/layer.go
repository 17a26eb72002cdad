package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
)

// epoch is the modification time of every file and the creation time of
// every image: fixed, so that the same sources give the same digests.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// entry is one file of a layer.
type entry struct {
	Path     string // relative, without a leading slash: "bin/busybox"
	Type     byte   // tar.TypeReg, tar.TypeDir, tar.TypeLink or tar.TypeSymlink
	Mode     int64  // permission bits, with setuid/setgid/sticky
	UID, GID int
	Data     []byte // contents of a regular file
	Link     string // target of a hard link (a path in the same layer) or symlink
}

func file(p string, mode int64, data []byte) entry {
	return entry{Path: p, Type: tar.TypeReg, Mode: mode, Data: data}
}

func dir(p string, mode int64) entry { return entry{Path: p, Type: tar.TypeDir, Mode: mode} }

func hardlink(p, target string) entry { return entry{Path: p, Type: tar.TypeLink, Link: target} }

// layer is a gzip-compressed tar layer.
type layer struct {
	Blob    []byte        // the compressed tar, as pushed
	Digest  digest.Digest // of Blob
	DiffID  digest.Digest // of the uncompressed tar
	Comment string        // for the image history ("busybox 1.35.0 applets")
}

// buildLayer writes entries as a reproducible tar: parent directories are
// added (0755, root) where missing, entries are sorted by path, hard links
// come after every other entry (so their targets are already written), and
// owners, times and formats are fixed.
func buildLayer(comment string, entries []entry) (*layer, error) {
	entries, err := normalize(entries)
	if err != nil {
		return nil, err
	}
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range entries {
		hdr := &tar.Header{
			Typeflag: e.Type,
			Name:     e.Path,
			Mode:     e.Mode,
			Uid:      e.UID,
			Gid:      e.GID,
			ModTime:  epoch,
			Format:   tar.FormatPAX,
		}
		switch e.Type {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeReg:
			hdr.Size = int64(len(e.Data))
		case tar.TypeLink, tar.TypeSymlink:
			hdr.Linkname = e.Link
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer %q: %s: %w", comment, e.Path, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &layer{
		Blob:    gz.Bytes(),
		Digest:  digest.FromBytes(gz.Bytes()),
		DiffID:  digest.FromBytes(raw.Bytes()),
		Comment: comment,
	}, nil
}

// normalize checks entries, adds missing parent directories and orders
// them: everything but hard links sorted by path, then hard links sorted.
func normalize(in []entry) ([]entry, error) {
	byPath := map[string]entry{}
	for _, e := range in {
		p := path.Clean(strings.TrimPrefix(e.Path, "/"))
		if p == "." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("bad path %q", e.Path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("%s appears twice", p)
		}
		e.Path = p
		byPath[p] = e
	}
	for p := range byPath {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = dir(d, 0o755)
			}
		}
	}
	var out, links []entry
	for _, e := range byPath {
		if e.Type == tar.TypeLink {
			t, ok := byPath[e.Link]
			if !ok || t.Type != tar.TypeReg {
				return nil, fmt.Errorf("hard link %s: target %s is not a file of the layer", e.Path, e.Link)
			}
			// A link is the same inode: extractors (containerd's among
			// them) apply the link header's mode and owner to it.
			e.Mode, e.UID, e.GID = t.Mode, t.UID, t.GID
			links = append(links, e)
		} else {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	sort.Slice(links, func(i, j int) bool { return links[i].Path < links[j].Path })
	return append(out, links...), nil
}
