//go:build integration

package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/kubelet"
)

// ServiceRange is the cluster's service IP range: virtual addresses only (no
// kube-proxy runs), inside the test range like the pods'.
const ServiceRange = "198.19.240.0/24"

// Binary is a control-plane binary hack/tools.sh builds beside the kubelet.
func Binary(name string) string { return filepath.Join(filepath.Dir(kubelet.Binary()), name) }

// Binaries are the programs a cluster needs besides the kubelet.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// Options configures Start.
type Options struct {
	// RuntimeEndpoint is shimd's CRI endpoint (unix://...). Required.
	RuntimeEndpoint string
	// NodeName of the one node. Empty: "shimd-e2e-node".
	NodeName string
	// KubeletConfig entries replace the kubelet's defaults (see kubelet.Options.Config).
	KubeletConfig map[string]any
	// NodeIP is the node's address: not loopback (the kubelet refuses it), e.g. the
	// test network's gateway on the host. Required.
	NodeIP string
	// APIPort is the API server's port on 127.0.0.1; 0: a free one.
	APIPort int
	// KubeletDir holds the kubelet's root dir, config and logs (kubelet.Options.Dir);
	// empty: a new base directory. Its filesystem is the kubelet's nodefs.
	KubeletDir string
	// ExternalKubelet: no kubelet is started; the caller runs one elsewhere (a
	// virtual machine) with KubeletKubeconfig and waits with WaitNodeReady.
	ExternalKubelet bool
	// KubeletVerbosity is the kubelet's --v (kubelet.Options.Verbosity); 0: 2.
	KubeletVerbosity int
}

// Cluster is etcd, an API server, a controller manager, a scheduler and a kubelet on
// shimd, all on loopback, with certificates and kubeconfigs in Dir.
type Cluster struct {
	Dir        string
	Server     string // https://127.0.0.1:PORT
	Kubeconfig string // cluster-admin
	NodeName   string

	Etcd, APIServer, ControllerManager, Scheduler *harness.Daemon
	Kubelet                                       *kubelet.Kubelet

	pki  *pki
	http *http.Client // as cluster-admin
}

// Start brings the cluster up and waits until the node is Ready and the default
// service account exists. Cleanups stop everything by PID.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	for _, b := range Binaries {
		if _, err := os.Stat(Binary(b)); err != nil {
			t.Skipf("no %s: build the control plane with hack/tools.sh cluster (make e2e-cluster)", Binary(b))
		}
	}
	if opts.NodeName == "" {
		opts.NodeName = "shimd-e2e-node"
	}
	if ip := net.ParseIP(opts.NodeIP); ip == nil || ip.IsLoopback() {
		harness.Fatalf(t, "cluster: Options.NodeIP %q: want a non-loopback address", opts.NodeIP)
	}
	c := &Cluster{Dir: harness.NewBaseDir(t), NodeName: opts.NodeName}
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		harness.Fatalf(t, "cluster: %v", err)
	}
	c.pki = p
	port := func() int { return kubelet.FreePort(t) }
	apiPort := opts.APIPort
	if apiPort == 0 {
		apiPort = port()
	}
	c.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	must := func(err error) {
		if err != nil {
			t.Helper()
			harness.Fatalf(t, "cluster: %v", err)
		}
	}
	must(p.issue("apiserver", "kube-apiserver", nil, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "198.19.240.1"))
	must(p.issue("admin", "shimd-e2e-admin", []string{"system:masters"}))
	must(p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}))
	must(p.issue("controller-manager", "system:kube-controller-manager", nil))
	must(p.issue("scheduler", "system:kube-scheduler", nil))
	must(p.issue("kubelet", "system:node:"+opts.NodeName, []string{"system:nodes"}))
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	for _, u := range []string{"admin", "controller-manager", "scheduler", "kubelet"} {
		must(p.kubeconfig(filepath.Join(c.Dir, u+".kubeconfig"), u, c.Server))
	}
	c.http, err = c.adminClient()
	must(err)

	// etcd
	clientURL := "http://127.0.0.1:" + strconv.Itoa(port())
	peerURL := "http://127.0.0.1:" + strconv.Itoa(port())
	c.Etcd = harness.StartDaemon(t, "etcd", Binary("etcd"), []string{
		"--name", "e2e", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e=" + peerURL, "--unsafe-no-fsync", "--log-level", "warn",
	}, filepath.Join(c.Dir, "etcd.log"), time.Minute, func() error { return httpOK(http.DefaultClient, clientURL+"/health") })

	// kube-apiserver
	pk := p.path
	c.APIServer = harness.StartDaemon(t, "kube-apiserver", Binary("kube-apiserver"), []string{
		"--etcd-servers", clientURL,
		// It listens on loopback only, and advertises the node's address: the
		// endpoint reconciler of v1.35+ refuses a loopback one (the kubernetes
		// Service's endpoints may not be loopback), and no kube-proxy routes the
		// Service here anyway.
		"--bind-address", "127.0.0.1", "--advertise-address", opts.NodeIP, "--secure-port", strconv.Itoa(apiPort),
		"--cert-dir", filepath.Join(c.Dir, "apiserver-certs"),
		"--tls-cert-file", pk("apiserver.crt"), "--tls-private-key-file", pk("apiserver.key"),
		"--client-ca-file", pk("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", pk("sa.pub"), "--service-account-signing-key-file", pk("sa.key"),
		"--service-cluster-ip-range", ServiceRange,
		"--authorization-mode", "Node,RBAC",
		"--kubelet-client-certificate", pk("apiserver-kubelet-client.crt"), "--kubelet-client-key", pk("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP",
		"--allow-privileged=true", "--profiling=false", "--v", "1",
	}, filepath.Join(c.Dir, "kube-apiserver.log"), 2*time.Minute, func() error { return httpOK(c.http, c.Server+"/readyz") })

	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed serving certs of the components
	cmPort, schedPort := port(), port()
	c.ControllerManager = harness.StartDaemon(t, "kube-controller-manager", Binary("kube-controller-manager"), []string{
		"--kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--authentication-kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--authorization-kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(cmPort),
		"--cert-dir", filepath.Join(c.Dir, "cm-certs"),
		"--service-account-private-key-file", pk("sa.key"), "--root-ca-file", pk("ca.crt"),
		"--cluster-signing-cert-file", pk("ca.crt"), "--cluster-signing-key-file", pk("ca.key"),
		"--use-service-account-credentials=true", "--service-cluster-ip-range", ServiceRange, "--v", "1",
	}, filepath.Join(c.Dir, "kube-controller-manager.log"), time.Minute,
		func() error { return httpOK(insecure, "https://127.0.0.1:"+strconv.Itoa(cmPort)+"/healthz") })
	c.Scheduler = harness.StartDaemon(t, "kube-scheduler", Binary("kube-scheduler"), []string{
		"--kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--authentication-kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--authorization-kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(schedPort), "--v", "1",
	}, filepath.Join(c.Dir, "kube-scheduler.log"), time.Minute,
		func() error { return httpOK(insecure, "https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz") })

	if !opts.ExternalKubelet {
		kdir := opts.KubeletDir
		if kdir == "" {
			kdir = harness.NewBaseDir(t)
		}
		c.Kubelet = kubelet.Start(t, kubelet.Options{
			Dir:             kdir,
			RuntimeEndpoint: opts.RuntimeEndpoint,
			NodeName:        opts.NodeName,
			Kubeconfig:      filepath.Join(c.Dir, "kubelet.kubeconfig"),
			Config:          opts.KubeletConfig,
			NodeIP:          opts.NodeIP,
			Verbosity:       opts.KubeletVerbosity,
		})
		c.WaitNodeReady(t, 3*time.Minute)
	}
	c.WaitFor(t, 2*time.Minute, "the default service account", func() error {
		_, err := c.Kubectl(t, "get", "serviceaccount", "default", "-n", "default")
		return err
	})
	return c
}

// WaitNodeReady waits until the node reports Ready.
func (c *Cluster) WaitNodeReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	c.WaitFor(t, timeout, "node "+c.NodeName+" Ready", func() error {
		out, err := c.Kubectl(t, "get", "node", c.NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if out != "True" {
			return fmt.Errorf("Ready=%q", out)
		}
		return nil
	})
}

// KubeletKubeconfig is the node's kubeconfig with its certificates inline, for a
// kubelet that reaches the API server at server (https://HOST:PORT, HOST one of
// the serving certificate's names: 127.0.0.1, localhost, kubernetes, ...).
func (c *Cluster) KubeletKubeconfig(server string) ([]byte, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(c.pki.path(name))
		return base64.StdEncoding.EncodeToString(b), err
	}
	ca, err1 := read("ca.crt")
	crt, err2 := read("kubelet.crt")
	key, err3 := read("kubelet.key")
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	return json.MarshalIndent(map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "e2e",
		"clusters": []any{map[string]any{"name": "e2e", "cluster": map[string]any{"server": server, "certificate-authority-data": ca}}},
		"users":    []any{map[string]any{"name": "kubelet", "user": map[string]any{"client-certificate-data": crt, "client-key-data": key}}},
		"contexts": []any{map[string]any{"name": "e2e", "context": map[string]any{"cluster": "e2e", "user": "kubelet"}}},
	}, "", "  ")
}

// adminClient is an HTTP client with the admin certificate that trusts the cluster CA.
func (c *Cluster) adminClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.pki.path("admin.crt"), c.pki.path("admin.key"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.pki.caCert)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12,
	}}}, nil
}

func httpOK(cl *http.Client, url string) error {
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// Kubectl runs kubectl as cluster-admin (timeout 2 minutes) and returns its trimmed
// stdout; a failure's error holds stderr.
func (c *Cluster) Kubectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return c.KubectlIn(t, nil, args...)
}

// KubectlIn is Kubectl with stdin.
func (c *Cluster) KubectlIn(t testing.TB, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := c.KubectlCmd(ctx, args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return strings.TrimSpace(out.String()), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// KubectlCmd is an unstarted kubectl command as cluster-admin.
func (c *Cluster) KubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, Binary("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+c.Dir) // kubectl's cache goes under $HOME/.kube
	return cmd
}

// Apply applies a manifest (YAML or JSON) as cluster-admin.
func (c *Cluster) Apply(t testing.TB, manifest string) {
	t.Helper()
	if out, err := c.KubectlIn(t, strings.NewReader(manifest), "apply", "-f", "-"); err != nil {
		harness.Fatalf(t, "%v\n%s", err, out)
	}
}

// WaitFor polls check every second until it returns nil or timeout passes.
func (c *Cluster) WaitFor(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			harness.Fatalf(t, "cluster: %s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(time.Second)
	}
}
