package image

import (
	"encoding/base64"
	"testing"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const dgst = "sha256:9700f9a2f5bf2c45f2f605a0bd3bce7cf37420ec9d3ed50ac2758413308766bf"

func TestParseRef(t *testing.T) {
	tests := []struct {
		in, name, repo, tag, digest, host string
	}{
		{"busybox", "docker.io/library/busybox:latest", "docker.io/library/busybox", "latest", "", "docker.io"},
		{"busybox:1.36", "docker.io/library/busybox:1.36", "docker.io/library/busybox", "1.36", "", "docker.io"},
		{"library/busybox", "docker.io/library/busybox:latest", "docker.io/library/busybox", "latest", "", "docker.io"},
		{"registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9", "registry.k8s.io/pause", "3.9", "", "registry.k8s.io"},
		{"127.0.0.1:5000/a/b:c", "127.0.0.1:5000/a/b:c", "127.0.0.1:5000/a/b", "c", "", "127.0.0.1:5000"},
		{"busybox@" + dgst, "docker.io/library/busybox@" + dgst, "docker.io/library/busybox", "", dgst, "docker.io"},
		{"gcr.io/x/y:tag@" + dgst, "gcr.io/x/y@" + dgst, "gcr.io/x/y", "tag", dgst, "gcr.io"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRef(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.name, r.Name)
			require.Equal(t, tt.repo, r.Repo)
			require.Equal(t, tt.tag, r.Tag)
			require.Equal(t, tt.digest, r.Digest.String())
			require.Equal(t, tt.host, r.Host())
		})
	}
	for _, bad := range []string{"", "Busybox", "a b", "busybox@sha256:short", "::"} {
		_, err := ParseRef(bad)
		require.True(t, errdefs.IsInvalidArgument(err), "%q: %v", bad, err)
	}
}

func TestCredentialsGoOnlyToTheirHost(t *testing.T) {
	ref, _ := ParseRef("127.0.0.1:5000/library/busybox:latest")
	creds := credentials(ref, &runtimeapi.AuthConfig{Username: "u", Password: "p"})
	u, p, err := creds("127.0.0.1:5000")
	require.NoError(t, err)
	require.Equal(t, []string{"u", "p"}, []string{u, p})
	u, p, _ = creds("mirror.example:443")
	require.Empty(t, u+p, "credentials must not go to another host")

	auth := base64.StdEncoding.EncodeToString([]byte("user:secret"))
	u, p, _ = credentials(ref, &runtimeapi.AuthConfig{Auth: auth})("127.0.0.1:5000")
	require.Equal(t, []string{"user", "secret"}, []string{u, p})
	u, p, _ = credentials(ref, &runtimeapi.AuthConfig{IdentityToken: "tok"})("127.0.0.1:5000")
	require.Equal(t, []string{"", "tok"}, []string{u, p})

	hub, _ := ParseRef("busybox")
	u, _, _ = credentials(hub, &runtimeapi.AuthConfig{Username: "u"})("registry-1.docker.io")
	require.Equal(t, "u", u, "docker.io credentials go to its API host")
	u, _, _ = credentials(hub, &runtimeapi.AuthConfig{Username: "u", ServerAddress: "https://other.io/v2/"})("registry-1.docker.io")
	require.Empty(t, u, "the server address decides")
	_, _, err = credentials(ref, &runtimeapi.AuthConfig{Auth: "%%%"})("127.0.0.1:5000")
	require.True(t, errdefs.IsInvalidArgument(err))
}

func TestMatch(t *testing.T) {
	a := &Image{ID: "sha256:aaaa1111" + dgst[15:], Records: []string{"docker.io/library/busybox:latest", "docker.io/library/busybox@" + dgst},
		RepoTags: []string{"docker.io/library/busybox:latest"}, RepoDigests: []string{"docker.io/library/busybox@" + dgst}}
	b := &Image{ID: "sha256:aaaa2222" + dgst[15:], Records: []string{"registry.k8s.io/pause:3.9"}, RepoTags: []string{"registry.k8s.io/pause:3.9"}}
	all := []*Image{a, b}
	tests := []struct {
		ref  string
		want *Image
	}{
		{"busybox", a},
		{"docker.io/library/busybox:latest", a},
		{"busybox@" + dgst, a},
		{a.ID, a},
		{a.ID[7:], a},
		{"aaaa1111", a},
		{"sha256:aaaa2", b},
		{"aaaa", nil}, // ambiguous
		{"registry.k8s.io/pause:3.9", b},
		{"registry.k8s.io/pause:3.10", nil},
		{"nginx", nil},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, match(all, tt.ref), tt.ref)
	}
}

func TestToCRIUser(t *testing.T) {
	tests := []struct {
		user     string
		uid      *int64
		username string
	}{
		{"", nil, ""},
		{"1002", ptr(1002), ""},
		{"www-data", nil, "www-data"},
		{"1003:1004", ptr(1003), ""},
		{"www-data:1004", nil, "www-data"},
	}
	for _, tt := range tests {
		img := &Image{ID: "sha256:x", Config: ocispec.Image{Config: ocispec.ImageConfig{User: tt.user}}}
		got := toCRI(img)
		if tt.uid == nil {
			require.Nil(t, got.Uid, tt.user)
		} else {
			require.Equal(t, *tt.uid, got.Uid.GetValue(), tt.user)
		}
		require.Equal(t, tt.username, got.Username, tt.user)
	}
}

func ptr(v int64) *int64 { return &v }
