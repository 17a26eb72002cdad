// Command nriplugin is an NRI plugin for shimd's tests, written with the NRI
// library's plugin stub (github.com/containerd/nri/pkg/stub) as the sample plugins
// of the NRI repository are. Its configuration (JSON: the -config flag for a plugin
// that connects to the socket itself, or the drop-in file of a plugin shimd starts)
// chooses what it does:
//
//	log     append one JSON line per event (and per synchronization) to this file
//	inject  adjust containers annotated nri.test/inject: env, a mount, a device,
//	        a CDI device, an annotation; raise the memory limit of an UpdateContainerResources of
//	        a container annotated nri.test/bump by 1 MiB; ask for an unsolicited
//	        memory limit update after a container annotated nri.test/update starts
//	hang    never answer RunPodSandbox and CreateContainer
//	crash   exit when asked about RunPodSandbox
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"golang.org/x/sys/unix"
)

type config struct {
	Name        string `json:"name"`
	Log         string `json:"log"`
	Inject      bool   `json:"inject"`
	Hang        bool   `json:"hang"`
	Crash       bool   `json:"crash"`
	MountSource string `json:"mount_source"`
	DeviceHost  string `json:"device_host"`
	CDIDevice   string `json:"cdi_device"`
}

type plugin struct {
	stub stub.Stub
	mu   sync.Mutex
	cfg  config
}

type entry struct {
	Event      string            `json:"event"`
	Pod        string            `json:"pod,omitempty"`
	Container  string            `json:"container,omitempty"`
	Pods       []string          `json:"pods,omitempty"`
	Containers []string          `json:"containers,omitempty"`
	Memory     int64             `json:"memory,omitempty"`
	Env        []string          `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}

func (p *plugin) log(e entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.Log == "" {
		return
	}
	f, err := os.OpenFile(p.cfg.Log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(e)
	f.Write(append(b, '\n'))
}

func (p *plugin) Configure(_ context.Context, cfg, runtime, version string) (api.EventMask, error) {
	if cfg != "" {
		var c config
		if err := json.Unmarshal([]byte(cfg), &c); err != nil {
			return 0, fmt.Errorf("config: %w", err)
		}
		p.mu.Lock()
		p.cfg = c
		p.mu.Unlock()
	}
	p.log(entry{Event: "Configure", Labels: map[string]string{"runtime": runtime, "version": version}})
	return 0, nil // every event the plugin implements
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	e := entry{Event: "Synchronize"}
	for _, pod := range pods {
		e.Pods = append(e.Pods, pod.GetId())
	}
	for _, c := range ctrs {
		e.Containers = append(e.Containers, c.GetId())
	}
	p.log(e)
	return nil, nil
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.log(entry{Event: "RunPodSandbox", Pod: pod.GetId(), Labels: pod.GetLabels()})
	switch {
	case p.cfg.Crash:
		os.Exit(3)
	case p.cfg.Hang:
		time.Sleep(time.Hour)
	}
	return nil
}

func (p *plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, res *api.LinuxResources) error {
	p.log(entry{Event: "UpdatePodSandbox", Pod: pod.GetId(), Memory: memory(res)})
	return nil
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.log(entry{Event: "StopPodSandbox", Pod: pod.GetId()})
	return nil
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.log(entry{Event: "RemovePodSandbox", Pod: pod.GetId()})
	return nil
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.log(entry{Event: "CreateContainer", Pod: pod.GetId(), Container: c.GetId(), Env: c.GetEnv(), Memory: memory(c.GetLinux().GetResources())})
	if p.cfg.Hang {
		time.Sleep(time.Hour)
	}
	if !p.cfg.Inject || c.GetAnnotations()["nri.test/inject"] == "" {
		return nil, nil, nil
	}
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("NRI_INJECTED", p.cfg.Name)
	adj.AddAnnotation("nri.test/injected-by", p.cfg.Name)
	if p.cfg.CDIDevice != "" {
		adj.AddCDIDevice(&api.CDIDevice{Name: p.cfg.CDIDevice})
	}
	if p.cfg.MountSource != "" {
		adj.AddMount(&api.Mount{Source: p.cfg.MountSource, Destination: "/nri-data", Type: "bind", Options: []string{"bind", "ro"}})
	}
	if p.cfg.DeviceHost != "" {
		var st unix.Stat_t
		if err := unix.Stat(p.cfg.DeviceHost, &st); err != nil {
			return nil, nil, err
		}
		adj.AddDevice(&api.LinuxDevice{Path: "/dev/nri-null", Type: "c",
			Major: int64(unix.Major(uint64(st.Rdev))), Minor: int64(unix.Minor(uint64(st.Rdev))), FileMode: api.FileMode(0o666)})
	}
	return adj, nil, nil
}

func (p *plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.log(entry{Event: "PostCreateContainer", Pod: pod.GetId(), Container: c.GetId()})
	return nil
}

func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.log(entry{Event: "StartContainer", Pod: pod.GetId(), Container: c.GetId()})
	return nil
}

func (p *plugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.log(entry{Event: "PostStartContainer", Pod: pod.GetId(), Container: c.GetId()})
	if p.cfg.Inject && c.GetAnnotations()["nri.test/update"] != "" {
		id := c.GetId()
		go func() { // not from inside the runtime's request
			u := &api.ContainerUpdate{ContainerId: id}
			u.SetLinuxMemoryLimit(48 << 20)
			failed, err := p.stub.UpdateContainers([]*api.ContainerUpdate{u})
			p.log(entry{Event: "UpdateContainers", Container: id, Memory: 48 << 20, Labels: map[string]string{"err": fmt.Sprint(err), "failed": fmt.Sprint(len(failed))}})
		}()
	}
	return nil
}

func (p *plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.log(entry{Event: "UpdateContainer", Pod: pod.GetId(), Container: c.GetId(), Memory: memory(res)})
	if !p.cfg.Inject || c.GetAnnotations()["nri.test/bump"] == "" || memory(res) == 0 {
		return nil, nil
	}
	u := &api.ContainerUpdate{ContainerId: c.GetId()}
	u.SetLinuxMemoryLimit(memory(res) + 1<<20)
	return []*api.ContainerUpdate{u}, nil
}

func (p *plugin) PostUpdateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.log(entry{Event: "PostUpdateContainer", Pod: pod.GetId(), Container: c.GetId()})
	return nil
}

func (p *plugin) StopContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.log(entry{Event: "StopContainer", Pod: pod.GetId(), Container: c.GetId()})
	return nil, nil
}

func (p *plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.log(entry{Event: "RemoveContainer", Pod: pod.GetId(), Container: c.GetId()})
	return nil
}

func memory(r *api.LinuxResources) int64 {
	if v := r.GetMemory().GetLimit().Get(); v != nil {
		return *v
	}
	return 0
}

func main() {
	socket := flag.String("socket", "", "shimd's NRI socket (a plugin shimd starts gets its connection instead)")
	name := flag.String("name", "", "plugin name (a plugin shimd starts gets it from shimd)")
	idx := flag.String("idx", "50", "plugin index")
	cfgJSON := flag.String("config", "", "configuration (JSON)")
	flag.Parse()
	p := &plugin{}
	if *cfgJSON != "" {
		if err := json.Unmarshal([]byte(*cfgJSON), &p.cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	opts := []stub.Option{stub.WithOnClose(func() { os.Exit(0) })}
	if *socket != "" {
		opts = append(opts, stub.WithSocketPath(*socket), stub.WithPluginName(*name), stub.WithPluginIdx(*idx))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	p.stub = s
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
