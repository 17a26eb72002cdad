package image

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// credentials returns the request's credentials for host, and only for the host they
// belong to: the auth's server address, or else the image's own registry.
func credentials(ref Ref, auth *runtimeapi.AuthConfig) func(host string) (string, string, error) {
	return func(host string) (string, string, error) {
		if auth == nil || !authHost(ref, auth, host) {
			return "", "", nil
		}
		if auth.GetIdentityToken() != "" {
			return "", auth.GetIdentityToken(), nil
		}
		user, pass := auth.GetUsername(), auth.GetPassword()
		if auth.GetAuth() != "" {
			dec, err := base64.StdEncoding.DecodeString(auth.GetAuth())
			if err != nil {
				return "", "", fmt.Errorf("auth: not base64: %w", errdefs.ErrInvalidArgument)
			}
			u, p, ok := strings.Cut(string(dec), ":")
			if !ok {
				return "", "", fmt.Errorf("auth: not user:password: %w", errdefs.ErrInvalidArgument)
			}
			user, pass = u, p
		}
		return user, pass, nil
	}
}

// authHost tells whether credentials for ref may go to host.
func authHost(ref Ref, auth *runtimeapi.AuthConfig, host string) bool {
	want := ref.Host()
	if sa := auth.GetServerAddress(); sa != "" {
		sa = strings.TrimPrefix(strings.TrimPrefix(sa, "https://"), "http://")
		want, _, _ = strings.Cut(sa, "/")
	}
	if want == "docker.io" || want == "index.docker.io" {
		return host == "registry-1.docker.io" || host == "docker.io"
	}
	return host == want
}

// progress counts bytes received by a pull, so a watchdog can cancel a stalled one.
// It also counts the bytes, for PullObserver.
type progress struct {
	last  atomic.Int64
	bytes atomic.Int64
}

func (p *progress) mark() { p.last.Store(time.Now().UnixNano()) }

func (p *progress) idle() time.Duration { return time.Since(time.Unix(0, p.last.Load())) }

// transport marks progress on every read of a response body, and adds a registry
// token as a bearer header for the host it belongs to.
type transport struct {
	base      http.RoundTripper
	progress  *progress
	tokenHost func(string) bool
	token     string
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.token != "" && t.tokenHost(req.URL.Host) && req.Header.Get("Authorization") == "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	t.progress.mark()
	resp, err := t.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = &progressBody{ReadCloser: resp.Body, p: t.progress}
	}
	return resp, err
}

type progressBody struct {
	io.ReadCloser
	p *progress
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.p.mark()
		b.p.bytes.Add(int64(n))
	}
	return n, err
}

// resolver builds a docker resolver with the hosts.toml mirrors, the request's
// credentials and progress tracking.
func (s *Service) resolver(ctx context.Context, ref Ref, auth *runtimeapi.AuthConfig, p *progress) remotes.Resolver {
	opts := config.HostOptions{
		Credentials: credentials(ref, auth),
		UpdateClient: func(c *http.Client) error {
			base := c.Transport
			if base == nil {
				base = http.DefaultTransport
			}
			c.Transport = &transport{base: base, progress: p, token: auth.GetRegistryToken(),
				tokenHost: func(h string) bool { return authHost(ref, auth, h) }}
			return nil
		},
	}
	if s.opts.RegistryConfigPath != "" {
		opts.HostDir = config.HostDirFromRoot(s.opts.RegistryConfigPath)
	}
	return docker.NewResolver(docker.ResolverOptions{Hosts: config.ConfigureHosts(ctx, opts)})
}
