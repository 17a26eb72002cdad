// Package image implements the CRI ImageService on containerd's image, content and
// snapshot stores: pull (mirrors from hosts.toml, credentials, a no-progress timeout,
// shared concurrent pulls), list, status, remove and filesystem info. It imports none
// of shimd's other packages.
package image

import (
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/imageverifier"
	"github.com/containerd/platforms"
	"golang.org/x/sync/singleflight"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Options configures the image service.
type Options struct {
	Client *client.Client
	// Snapshotters maps runtime handler names to snapshotters; "" is the default's.
	Snapshotters map[string]string
	// ContainerFsDir, when set, holds the containers' writable layers: ImageFsInfo
	// reports its filesystem as the container filesystem (a split image filesystem).
	ContainerFsDir string
	// RegistryConfigPath is a directory of hosts.toml files in containerd's format.
	RegistryConfigPath string
	// NoProgressTimeout cancels a pull that receives no bytes for this long.
	NoProgressTimeout time.Duration
	// Pinned names images the kubelet must never garbage-collect (the sandbox image).
	Pinned []string
	// PinnedLabel marks image records as pinned (set on the built-in pause image).
	PinnedLabel string
	// PullObserver, if set, is told about every pull that ran (shared pulls once).
	PullObserver func(PullStats)
	// UnpackLayers is how many layers of a pull are extracted at once on a
	// snapshotter that can rebase (overlayfs on containerd 2.x); 0 is one per CPU,
	// 3 to 6; 1 applies each layer on its parent in turn (unpack_parallel.go).
	UnpackLayers int
	// Verifier judges each pull's image before it is fetched (verify.go); nil: none.
	Verifier imageverifier.ImageVerifier
}

// PullStats describes one finished pull, for metrics.
type PullStats struct {
	// Bytes received from registries (manifests, configs and layers).
	Bytes    int64
	Duration time.Duration
	// Err is nil for a pull that succeeded.
	Err error
}

// Service implements runtimeapi.ImageServiceServer.
type Service struct {
	runtimeapi.UnimplementedImageServiceServer
	opts     Options
	platform platforms.MatchComparer
	pulls    singleflight.Group
	listing  singleflight.Group // List's shared listings, by generation
	stats    singleflight.Group // unpackedFor's shared snapshot lookups

	// meta caches what shimd derives from an image's content, by manifest digest; it
	// never changes for a digest.
	mu   sync.Mutex
	meta map[string]*imageMeta

	snapshotters sync.Map // snapshotter name -> snapshotterFacts

	layerLocks keyedMutex // by snapshotter/chain id, while a layer is unpacked

	list listCache
}

// New makes the image service.
func New(opts Options) *Service {
	if opts.NoProgressTimeout == 0 {
		opts.NoProgressTimeout = 5 * time.Minute
	}
	return &Service{opts: opts, platform: platforms.Default(), meta: map[string]*imageMeta{}}
}

var _ runtimeapi.ImageServiceServer = (*Service)(nil)

// Pin marks an image name as pinned; call before serving.
func (s *Service) Pin(name string) { s.opts.Pinned = append(s.opts.Pinned, name) }

func (s *Service) snapshotter(handler string) string {
	if sn, ok := s.opts.Snapshotters[handler]; ok {
		return sn
	}
	return s.opts.Snapshotters[""]
}

func (s *Service) isPinned(name string, labels map[string]string) bool {
	if s.opts.PinnedLabel != "" && labels[s.opts.PinnedLabel] != "" {
		return true
	}
	for _, p := range s.opts.Pinned {
		if p == name {
			return true
		}
	}
	return false
}
