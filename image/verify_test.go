package image

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/imageverifier"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
)

// fakeVerifier answers every image with judgement and err, and counts its calls.
type fakeVerifier struct {
	mu        sync.Mutex
	calls     []string // name@digest
	judgement *imageverifier.Judgement
	err       error
}

func (f *fakeVerifier) VerifyImage(_ context.Context, name string, desc ocispec.Descriptor) (*imageverifier.Judgement, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+"@"+desc.Digest.String())
	return f.judgement, f.err
}

// TestVerifyFirst dispatches a root with two children through verifyFirst, as a pull
// does: the verifier judges the root only, before the inner handler sees anything,
// and a refusal or a missing judgement ends the pull with its class.
func TestVerifyFirst(t *testing.T) {
	root := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("manifest"), Size: 8}
	children := []ocispec.Descriptor{
		{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromString("config"), Size: 6},
		{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromString("layer"), Size: 5},
	}
	const name = "registry.example/app:1"
	for _, tc := range []struct {
		name     string
		verifier *fakeVerifier
		class    func(error) bool
		message  string
		handled  int // descriptors the inner handler saw
	}{
		{"allowed", &fakeVerifier{judgement: &imageverifier.Judgement{OK: true, Reason: "10-sig => signed"}}, nil, "", 3},
		{"refused", &fakeVerifier{judgement: &imageverifier.Judgement{Reason: "verifier 20-policy rejected image (exit code 1): unsigned"}},
			errdefs.IsPermissionDenied, "the image verifiers refused " + name + "@" + root.Digest.String() + ": verifier 20-policy rejected image (exit code 1): unsigned", 0},
		{"no judgement", &fakeVerifier{err: errors.New("failed to call verifier 30-slow: signal: killed")},
			errdefs.IsFailedPrecondition, "the image verifiers gave no judgement on " + name + "@" + root.Digest.String() + ", so it is not pulled: failed to call verifier 30-slow: signal: killed", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var handled []digest.Digest
			inner := images.HandlerFunc(func(_ context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
				mu.Lock()
				defer mu.Unlock()
				handled = append(handled, desc.Digest)
				if desc.Digest == root.Digest {
					return children, nil
				}
				return nil, nil
			})
			err := images.Dispatch(context.Background(), verifyFirst(tc.verifier, name, inner), nil, root)
			require.Equal(t, []string{name + "@" + root.Digest.String()}, tc.verifier.calls, "judged once, the root only")
			require.Len(t, handled, tc.handled)
			if tc.class == nil {
				require.NoError(t, err)
				require.Equal(t, root.Digest, handled[0], "the root first")
				return
			}
			require.Error(t, err)
			require.True(t, tc.class(err), "class of %v", err)
			require.Contains(t, err.Error(), tc.message)
		})
	}
}
