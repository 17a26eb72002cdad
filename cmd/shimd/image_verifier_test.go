package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
)

// TestImageVerifierFromConfig runs real verifier scripts through the verifier the
// registry keys make: what they are given, a refusal, the count limit and the timeout.
func TestImageVerifierFromConfig(t *testing.T) {
	v, err := imageVerifier(RegistryConfig{})
	require.NoError(t, err)
	require.Nil(t, v, "image_verifier_dir \"\": none")

	dir := t.TempDir()
	got := filepath.Join(t.TempDir(), "args")
	script := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	}
	// 10-record keeps its arguments and stdin and allows; 20-policy refuses "denied"
	// repositories; 30-slow sleeps for "slow" ones.
	script("10-record", `echo "$@" > `+got+`; cat >> `+got+`; echo recorded`)
	script("20-policy", `case "$2" in *denied*) echo "unsigned image"; exit 3;; esac; echo ok`)
	script("30-slow", `case "$2" in *slow*) sleep 30;; esac; echo fast`)
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("m"), Size: 1}
	ctx := context.Background()

	v, err = imageVerifier(RegistryConfig{ImageVerifierDir: dir, MaxImageVerifiers: -1, ImageVerifierTimeout: Duration(time.Second)})
	require.NoError(t, err)
	j, err := v.VerifyImage(ctx, "registry.example/app:1", desc)
	require.NoError(t, err)
	require.True(t, j.OK, j.Reason)
	require.Equal(t, "10-record => recorded, 20-policy => ok, 30-slow => fast", j.Reason)
	args, err := os.ReadFile(got)
	require.NoError(t, err)
	require.Equal(t, "-name registry.example/app:1 -digest "+desc.Digest.String()+" -stdin-media-type application/vnd.oci.descriptor.v1+json\n"+
		`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"`+desc.Digest.String()+`","size":1}`+"\n", string(args))

	j, err = v.VerifyImage(ctx, "registry.example/denied:1", desc)
	require.NoError(t, err)
	require.False(t, j.OK)
	require.Equal(t, "verifier 20-policy rejected image (exit code 3): unsigned image", j.Reason)

	// image_verifier_timeout (1 s) kills the verifier in its 30 s sleep.
	_, err = v.VerifyImage(ctx, "registry.example/slow:1", desc)
	require.ErrorContains(t, err, "failed to call verifier 30-slow")
	require.ErrorContains(t, err, "signal: killed")

	// A file that is not executable blocks every pull, as in containerd.
	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "README"), []byte("verifiers\n"), 0o644))
	v2, err := imageVerifier(RegistryConfig{ImageVerifierDir: other, MaxImageVerifiers: 10, ImageVerifierTimeout: Duration(time.Second)})
	require.NoError(t, err)
	_, err = v2.VerifyImage(ctx, "registry.example/app:1", desc)
	require.ErrorContains(t, err, "failed to call verifier README")

	// Only the first two run: the slow one does not.
	v, err = imageVerifier(RegistryConfig{ImageVerifierDir: dir, MaxImageVerifiers: 2, ImageVerifierTimeout: Duration(time.Second)})
	require.NoError(t, err)
	j, err = v.VerifyImage(ctx, "registry.example/slow:1", desc)
	require.NoError(t, err)
	require.True(t, j.OK)
	require.Equal(t, "10-record => recorded, 20-policy => ok", j.Reason)
}
