//go:build integration

package kubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/shimd/shimd/critest/harness"
)

// cdiDevicePlugin is a kubelet device plugin with one device that it hands out as a
// CDI device name (ContainerAllocateResponse.cdi_devices), as GPU device plugins do.
type cdiDevicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	cdiName string
}

func (p *cdiDevicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *cdiDevicePlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: []*pluginapi.Device{{ID: "dev0", Health: pluginapi.Healthy}}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *cdiDevicePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			CdiDevices: []*pluginapi.CDIDevice{{Name: p.cdiName}},
		})
	}
	return resp, nil
}

// startDevicePlugin serves the plugin in the kubelet's device plugin directory and
// registers resource with the kubelet. The kubelet empties that directory when its
// device manager starts, which may be after it answers: a socket that went is
// served anew before the next try.
func startDevicePlugin(t *testing.T, resourceName, cdiName string) {
	t.Helper()
	endpoint := fmt.Sprintf("shimd-e2e-%d.sock", os.Getpid())
	sock := filepath.Join(pluginapi.DevicePluginPath, endpoint)
	var servers []*grpc.Server
	t.Cleanup(func() {
		for _, srv := range servers {
			srv.Stop()
		}
		os.Remove(sock)
	})
	Eventually(t, time.Minute, "device plugin registered with the kubelet", func() error {
		if _, err := os.Stat(sock); err != nil {
			l, err := net.Listen("unix", sock)
			if err != nil {
				return err
			}
			srv := grpc.NewServer()
			pluginapi.RegisterDevicePluginServer(srv, &cdiDevicePlugin{cdiName: cdiName})
			go srv.Serve(l)
			servers = append(servers, srv)
		}
		conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resourceName,
		}); err != nil {
			return err
		}
		time.Sleep(time.Second) // the kubelet dials back; the socket must still be there
		if _, err := os.Stat(sock); err != nil {
			return fmt.Errorf("socket removed after registration: %w", err)
		}
		return nil
	})
}

// TestKubeletCDIDevicePlugin: a pod asks for an extended resource of a device
// plugin that answers Allocate with a CDI device name; the kubelet passes it in
// ContainerConfig.cdi_devices and shimd injects the device of the CDI spec file
// (a device node copied from /dev/null and an env variable) into the container.
func TestKubeletCDIDevicePlugin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kubelet e2e test needs root")
	}
	if _, err := os.Stat(Binary()); err != nil {
		t.Skipf("no kubelet at %s: build it with hack/tools.sh kubelet (make e2e-kubelet)", Binary())
	}
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	hosts := filepath.Join(harness.NewBaseDir(t), "hosts")
	reg.WriteHermeticHostsDir(t, hosts)
	env := harness.New(t, harness.Options{
		Shimd:       harness.ShimdOptions{ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n", hosts)},
		LeakTimeout: time.Minute,
	})
	null := filepath.Join(harness.NewBaseDir(t), "null")
	if err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	spec := fmt.Sprintf("cdiVersion: \"0.6.0\"\nkind: test.shimd.io/kubelet\ndevices:\n- name: dev0\n  containerEdits:\n"+
		"    env: [\"SHIMD_CDI_DEVICE=dev0\"]\n    deviceNodes:\n    - path: /dev/cdi-null\n      hostPath: %s\n", null)
	if err := os.WriteFile(filepath.Join(env.Shimd.CDISpecDir(), "kubelet.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &e2e{env: env, rt: env.Shimd.Runtime(t), pods: []string{"cdi"}}
	s.k = Start(t, Options{Dir: harness.NewBaseDir(t), RuntimeEndpoint: env.Shimd.Endpoint(), NodeName: "shimd-e2e-node"})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet log:\n%s", s.k.LogTail(30, ""))
			s.k.Stop()
			s.forceRemovePods(t)
		}
	})
	const resourceName = "shimd.test/cdi-null"
	startDevicePlugin(t, resourceName, "test.shimd.io/kubelet=dev0")

	user := shell("user", BusyboxImage, "echo device=$SHIMD_CDI_DEVICE; test -c /dev/cdi-null && echo x > /dev/cdi-null && echo node-ok; exec sleep 3600")
	user.Resources.Limits = corev1.ResourceList{resourceName: resource.MustParse("1")}
	s.k.WritePod(t, newPod("cdi", user))
	Eventually(t, 3*time.Minute, "the container sees the CDI device", func() error {
		out, err := s.k.ContainerLogs("cdi", "user", LogOptions{})
		if err != nil {
			return err
		}
		if !strings.Contains(out, "device=dev0\nnode-ok") {
			return fmt.Errorf("log %q", out)
		}
		return nil
	})
	ctrs, err := s.rt.ListContainers(ctxT(t, time.Minute), &runtimeapi.ListContainersRequest{})
	if err != nil || len(ctrs.Containers) != 1 {
		harness.Fatalf(t, "containers: %v %v", ctrs, err)
	}
	s.stepTeardown(t)
}
