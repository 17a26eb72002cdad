package image

import (
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

// Ref is a normalised image reference.
type Ref struct {
	// Name is the full reference: docker.io/library/busybox:latest, or name@digest.
	Name string
	// Repo is the repository without tag or digest: docker.io/library/busybox.
	Repo string
	// Tag and Digest are set when the reference had them.
	Tag    string
	Digest digest.Digest
}

// ParseRef normalises a user's reference as docker does: busybox becomes
// docker.io/library/busybox:latest; name:tag@digest keeps the digest.
func ParseRef(s string) (Ref, error) {
	if s == "" {
		return Ref{}, fmt.Errorf("image reference is empty: %w", errdefs.ErrInvalidArgument)
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return Ref{}, fmt.Errorf("image reference %q: %v: %w", s, err, errdefs.ErrInvalidArgument)
	}
	r := Ref{Repo: named.Name()}
	if d, ok := named.(reference.Digested); ok {
		r.Digest = d.Digest()
	}
	if t, ok := named.(reference.Tagged); ok {
		r.Tag = t.Tag()
	}
	switch {
	case r.Digest != "":
		r.Name = r.Repo + "@" + r.Digest.String()
	case r.Tag != "":
		r.Name = r.Repo + ":" + r.Tag
	default:
		r.Tag = "latest"
		r.Name = r.Repo + ":latest"
	}
	return r, nil
}

// Host is the registry host of the reference.
func (r Ref) Host() string { return reference.Domain(mustNamed(r.Repo)) }

func mustNamed(repo string) reference.Named {
	n, err := reference.ParseNormalizedNamed(repo)
	if err != nil {
		return nil
	}
	return n
}

// isImageID tells whether s is an image id (sha256:<64 hex>) or a bare 64-hex id.
func isImageID(s string) (digest.Digest, bool) {
	if !strings.HasPrefix(s, "sha256:") && len(s) == 64 {
		s = "sha256:" + s
	}
	d, err := digest.Parse(s)
	return d, err == nil
}
