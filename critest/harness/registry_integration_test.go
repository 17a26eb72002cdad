//go:build integration

package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// mirrorResolver resolves upstream names through the hosts.toml files in
// dir, client-side, as containerd's own tools do; it works the same
// against containerd 1.6 and 2.x.
func mirrorResolver(ctx context.Context, dir string, creds func(string) (string, string, error)) remotes.Resolver {
	return docker.NewResolver(docker.ResolverOptions{Hosts: config.ConfigureHosts(ctx,
		config.HostOptions{HostDir: config.HostDirFromRoot(dir), Credentials: creds})})
}

// TestRegistryMirrorPull pulls images by their upstream names (by tag and
// by digest) through hosts.toml mirrors into the harness containerd, checks
// the image set's identities, and runs the stand-ins with runc.
func TestRegistryMirrorPull(t *testing.T) {
	requireRoot(t)
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	cd := harness.StartContainerd(t, harness.ContainerdOptions{})
	hosts := cd.Dir() + "/hosts"
	reg.WriteHostsDir(t, hosts)
	cl := cd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resolver := mirrorResolver(ctx, hosts, nil)

	bbDigest := reg.Digest(t, "registry.k8s.io/e2e-test-images/busybox:1.29-2")
	pulled := map[string]client.Image{}
	for _, ref := range []string{
		"docker.io/library/busybox:latest",
		"registry.k8s.io/e2e-test-images/busybox@" + bbDigest,
		"registry.k8s.io/pause:3.9",
		"registry.k8s.io/e2e-test-images/nginx:1.14-2",
		"gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64:latest",
		"registry.k8s.io/e2e-test-images/httpd:2.4.39-4",
		"registry.k8s.io/e2e-test-images/nonewprivs:1.3",
		"gcr.io/k8s-staging-cri-tools/test-image-predefined-group:latest",
	} {
		start := time.Now()
		img, err := cl.Pull(ctx, ref, client.WithResolver(resolver), client.WithPullUnpack)
		require.NoError(t, err, "pull %s", ref)
		want := bbDigest
		if !strings.Contains(ref, "@") {
			want = reg.Digest(t, ref)
		}
		require.Equal(t, want, img.Target().Digest.String(), ref)
		t.Logf("pulled %s -> %s in %s", ref, img.Target().Digest, time.Since(start).Round(time.Millisecond))
		pulled[ref] = img
	}

	// Identities critest relies on.
	require.Equal(t, reg.Digest(t, "registry.k8s.io/pause:3.9"), reg.Digest(t, "k8s.gcr.io/pause:3.9"))
	require.NotEqual(t, reg.Digest(t, "registry.k8s.io/pause:3.9"), reg.Digest(t, "registry.k8s.io/pause:3.10"))
	cri := "gcr.io/k8s-staging-cri-tools/"
	require.Equal(t, reg.Digest(t, cri+"test-image-tags:1"), reg.Digest(t, cri+"test-image-tags:2"))
	require.Equal(t, reg.Digest(t, cri+"test-image-tags:1"), reg.Digest(t, cri+"test-image-tags:3"))
	distinct := map[string]bool{}
	for _, n := range []string{"test-image-1", "test-image-2", "test-image-3", "test-image-latest", "test-image-tag:test", "test-image-tag:all"} {
		distinct[reg.Digest(t, cri+n)] = true
	}
	require.Len(t, distinct, 6)

	// A name the image set lacks is "not found" at once with hermetic mirrors.
	hermetic := cd.Dir() + "/hermetic"
	reg.WriteHermeticHostsDir(t, hermetic)
	_, _, err := mirrorResolver(ctx, hermetic, nil).Resolve(ctx, "docker.io/library/no-such-image:1")
	require.True(t, errdefs.IsNotFound(err), "want not found, got %v", err)

	r := runner{t: t, ctx: ctx, cl: cl, cd: cd}
	t.Run("busybox", func(t *testing.T) {
		r.t = t
		out := r.run(pulled["docker.io/library/busybox:latest"], oci.WithProcessArgs("sh", "-c",
			`sleep 30 & sleep 0.2; pgrep sleep && ipcs && id nobody && ls /bin/ls && `+
				`stat -c '%i %h' /bin/ls /bin/busybox; `+
				// The applets are links to busybox: more than one name, the same bytes. (The
				// inode numbers, printed above, matched in every run but one under heavy
				// load on this overlayfs; the link count does not depend on the mount.)
				`test "$(stat -c %h /bin/ls)" -gt 1 && cmp -s /bin/ls /bin/busybox && echo hard-linked`))
		for _, want := range []string{"Shared Memory Segments", "uid=65534(nobody)", "/bin/ls\n", "hard-linked"} {
			require.Contains(t, out, want)
		}
		// sh passes variables whose names are not shell names on to its children, as
		// upstream busybox does (Debian's sanitizes them away).
		out = r.run(pulled["docker.io/library/busybox:latest"], oci.WithProcessArgs("sh", "-c", "env"), oci.WithEnv([]string{"data-1=value-1"}))
		require.Contains(t, out, "data-1=value-1\n")
	})
	t.Run("nonewprivs", func(t *testing.T) {
		r.t = t
		img := pulled["registry.k8s.io/e2e-test-images/nonewprivs:1.3"]
		require.Equal(t, "Effective uid: 1000\n", r.run(img, oci.WithUserID(1000), oci.WithNoNewPrivileges))
		require.Equal(t, "Effective uid: 0\n", r.run(img, oci.WithUserID(1000), allowNewPrivileges))
	})
	t.Run("predefined-group", func(t *testing.T) {
		r.t = t
		out := r.run(pulled["gcr.io/k8s-staging-cri-tools/test-image-predefined-group:latest"], oci.WithProcessArgs("sh", "-c", "id -u; id default-user"))
		require.Equal(t, "1000\nuid=1000(default-user) gid=1000(default-user) groups=1000(default-user),50000(group-defined-in-image)\n", out)
	})
	t.Run("hostnet-nginx", func(t *testing.T) {
		r.t = t
		s := r.start(pulled["gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64:latest"], oci.WithHostNamespace(specs.NetworkNamespace))
		require.Eventually(t, func() bool {
			resp, err := http.Get("http://127.0.0.1:12003/")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 20*time.Second, 100*time.Millisecond)
		require.Equal(t, "1\n", s.exec("cat", "/var/run/nginx.pid"))
		require.Contains(t, s.exec("cat", "/proc/1/cmdline"), "nginx: master process")
		require.Equal(t, "1\n", s.exec("pidof", "nginx"))
		s.stop(syscall.SIGQUIT)
	})
	t.Run("httpd", func(t *testing.T) {
		r.t = t
		s := r.start(pulled["registry.k8s.io/e2e-test-images/httpd:2.4.39-4"], oci.WithAddedCapabilities([]string{"CAP_NET_ADMIN"}))
		require.Contains(t, s.exec("sh", "-c", "ip link set lo up && sleep 0.2 && wget -qO- http://127.0.0.1/"), "It works!")
		s.stop(syscall.SIGWINCH)
		require.Contains(t, s.stderr.String(), "httpd")
	})
}

func allowNewPrivileges(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	s.Process.NoNewPrivileges = false
	return nil
}

// runner runs images as containers with the tools' runc and a private runc root.
type runner struct {
	t   *testing.T
	ctx context.Context
	cl  *client.Client
	cd  *harness.Containerd
	n   int
}

type started struct {
	r              *runner
	task           client.Task
	exit           <-chan client.ExitStatus
	stdout, stderr *bytes.Buffer
}

func (r *runner) start(img client.Image, opts ...oci.SpecOpts) *started {
	t := r.t
	r.n++
	id := fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "-"), r.n, time.Now().UnixNano())
	tools := harness.Tools()
	ctr, err := r.cl.NewContainer(r.ctx, id, client.WithImage(img), client.WithNewSnapshot(id, img),
		client.WithRuntime("io.containerd.runc.v2", &runcoptions.Options{BinaryName: tools.Runc, Root: r.cd.Dir() + "/runc"}),
		client.WithNewSpec(append([]oci.SpecOpts{oci.WithImageConfig(img)}, opts...)...))
	require.NoError(t, err)
	s := &started{r: r, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	s.task, err = ctr.NewTask(r.ctx, cio.NewCreator(cio.WithStreams(nil, s.stdout, s.stderr)))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = s.task.Delete(ctx, client.WithProcessKill)
		_ = ctr.Delete(ctx, client.WithSnapshotCleanup)
	})
	s.exit, err = s.task.Wait(r.ctx)
	require.NoError(t, err)
	require.NoError(t, s.task.Start(r.ctx))
	return s
}

// run starts img, waits for it to exit 0 and returns its stdout.
func (r *runner) run(img client.Image, opts ...oci.SpecOpts) string {
	s := r.start(img, opts...)
	st := s.wait(30 * time.Second)
	require.Zero(r.t, st.ExitCode(), "stdout %q stderr %q", s.stdout, s.stderr)
	return s.stdout.String()
}

func (s *started) wait(timeout time.Duration) client.ExitStatus {
	select {
	case st := <-s.exit:
		return st
	case <-time.After(timeout):
		s.r.t.Fatalf("container still running after %s; stdout %q stderr %q", timeout, s.stdout, s.stderr)
	}
	return client.ExitStatus{}
}

// stop sends sig (the image's stop signal) and expects a clean exit.
func (s *started) stop(sig syscall.Signal) {
	require.NoError(s.r.t, s.task.Kill(s.r.ctx, sig))
	st := s.wait(10 * time.Second)
	require.Zero(s.r.t, st.ExitCode(), "exit after %v; stderr %q", sig, s.stderr)
}

// exec runs args in the container and returns its stdout.
func (s *started) exec(args ...string) string {
	t := s.r.t
	spec, err := s.task.Spec(s.r.ctx)
	require.NoError(t, err)
	pspec := *spec.Process
	pspec.Args = args
	pspec.Terminal = false
	var out, errb bytes.Buffer
	s.r.n++
	p, err := s.task.Exec(s.r.ctx, fmt.Sprintf("exec-%d", s.r.n), &pspec, cio.NewCreator(cio.WithStreams(nil, &out, &errb)))
	require.NoError(t, err)
	defer p.Delete(s.r.ctx)
	exit, err := p.Wait(s.r.ctx)
	require.NoError(t, err)
	require.NoError(t, p.Start(s.r.ctx))
	st := <-exit
	p.IO().Wait()
	require.Zero(t, st.ExitCode(), "%v: stderr %q", args, errb.String())
	return out.String()
}

// TestRegistryCRIPull pulls through containerd's own CRI plugin with the
// mirrors as its registry config_path, as critest does against containerd.
func TestRegistryCRIPull(t *testing.T) {
	requireRoot(t)
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	hosts := harness.NewBaseDir(t)
	reg.WriteHostsDir(t, hosts)
	cd := harness.StartContainerd(t, harness.ContainerdOptions{WithCRI: true, Namespace: "k8s.io", RegistryConfigPath: hosts})
	conn, err := grpc.NewClient("unix://"+cd.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	is := runtimeapi.NewImageServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	require.NoError(t, err)
	t.Logf("CRI plugin of %s %s, registry config_path %s", v.RuntimeName, v.RuntimeVersion, hosts)

	pull := func(ref string) *runtimeapi.Image {
		resp, err := is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		require.NoError(t, err, "CRI pull %s", ref)
		st, err := is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		require.NoError(t, err)
		require.NotNil(t, st.Image, ref)
		require.Equal(t, resp.ImageRef, st.Image.Id)
		t.Logf("CRI pulled %s: id %s tags %v digests %v user %v/%q", ref, st.Image.Id, st.Image.RepoTags,
			st.Image.RepoDigests, st.Image.Uid, st.Image.Username)
		return st.Image
	}
	const bb = "registry.k8s.io/e2e-test-images/busybox:1.29-2"
	img := pull(bb)
	require.Contains(t, img.RepoDigests, "registry.k8s.io/e2e-test-images/busybox@"+reg.Digest(t, bb))

	a, b := pull("registry.k8s.io/pause:3.9"), pull("k8s.gcr.io/pause:3.9")
	require.Equal(t, a.Id, b.Id)
	u := pull("gcr.io/k8s-staging-cri-tools/test-image-user-username-group")
	require.Equal(t, "www-data", u.Username)
	u = pull("gcr.io/k8s-staging-cri-tools/test-image-user-uid-group")
	require.Equal(t, int64(1003), u.Uid.GetValue())
}

// TestRegistryAuth checks htpasswd authentication, through a mirror, with
// right, wrong and missing credentials.
func TestRegistryAuth(t *testing.T) {
	requireRoot(t)
	reg := harness.StartRegistry(t, harness.RegistryOptions{Htpasswd: map[string]string{"alice": "wonderland"}})
	hosts := harness.NewBaseDir(t)
	reg.WriteHermeticHostsDir(t, hosts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	creds := func(user, pass string) func(string) (string, string, error) {
		return func(host string) (string, string, error) {
			if host != reg.Host() {
				return "", "", nil
			}
			return user, pass, nil
		}
	}
	const ref = "docker.io/library/busybox:latest"
	_, desc, err := mirrorResolver(ctx, hosts, creds("alice", "wonderland")).Resolve(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, reg.Digest(t, ref), desc.Digest.String())
	for _, c := range [][2]string{{"alice", "wrong"}, {"", ""}} {
		_, _, err = mirrorResolver(ctx, hosts, creds(c[0], c[1])).Resolve(ctx, ref)
		require.Error(t, err, "credentials %q", c)
		t.Logf("credentials %q: %v", c, err)
	}
}

// TestRegistryWritable pushes a new tag to a writable registry and checks
// that the shared image set does not see it.
func TestRegistryWritable(t *testing.T) {
	requireRoot(t)
	w := harness.StartRegistry(t, harness.RegistryOptions{Writable: true})
	ro := harness.StartRegistry(t, harness.RegistryOptions{})
	get := func(r *harness.Registry, method, tag string, body []byte, ctype string) (*http.Response, []byte) {
		req, err := http.NewRequest(method, r.URL()+"/v2/library/busybox/manifests/"+tag, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json")
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, manifest := get(w, http.MethodGet, "latest", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = get(w, http.MethodPut, "pushed-by-test", manifest, resp.Header.Get("Content-Type"))
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	resp, _ = get(w, http.MethodGet, "pushed-by-test", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = get(ro, http.MethodGet, "pushed-by-test", nil, "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = get(ro, http.MethodPut, "pushed-by-test", manifest, "application/vnd.oci.image.index.v1+json")
	require.NotEqual(t, http.StatusCreated, resp.StatusCode, "the shared registry must be read-only")
}
