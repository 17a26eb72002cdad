package nri

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// specGen applies the edits of NRI's spec generator (nri/pkg/runtime-tools/generate)
// to an OCI spec directly, with the semantics of runtime-tools' generator: env and
// hugepage limits replace an entry of the same key, devices one of the same path,
// mounts are removed by destination.
type specGen struct{ s *specs.Spec }

func (g *specGen) Spec() *specs.Spec { return g.s }

func (g *specGen) process() *specs.Process {
	if g.s.Process == nil {
		g.s.Process = &specs.Process{}
	}
	return g.s.Process
}

func (g *specGen) linux() *specs.Linux {
	if g.s.Linux == nil {
		g.s.Linux = &specs.Linux{}
	}
	return g.s.Linux
}

func (g *specGen) resources() *specs.LinuxResources {
	if g.linux().Resources == nil {
		g.s.Linux.Resources = &specs.LinuxResources{}
	}
	return g.s.Linux.Resources
}

func (g *specGen) cpu() *specs.LinuxCPU {
	if g.resources().CPU == nil {
		g.s.Linux.Resources.CPU = &specs.LinuxCPU{}
	}
	return g.s.Linux.Resources.CPU
}

func (g *specGen) memory() *specs.LinuxMemory {
	if g.resources().Memory == nil {
		g.s.Linux.Resources.Memory = &specs.LinuxMemory{}
	}
	return g.s.Linux.Resources.Memory
}

func (g *specGen) hooks() *specs.Hooks {
	if g.s.Hooks == nil {
		g.s.Hooks = &specs.Hooks{}
	}
	return g.s.Hooks
}

func (g *specGen) AddAnnotation(key, value string) {
	if g.s.Annotations == nil {
		g.s.Annotations = map[string]string{}
	}
	g.s.Annotations[key] = value
}

func (g *specGen) RemoveAnnotation(key string) { delete(g.s.Annotations, key) }

func (g *specGen) AddDevice(d specs.LinuxDevice) {
	l := g.linux()
	for i := range l.Devices {
		if l.Devices[i].Path == d.Path {
			l.Devices[i] = d
			return
		}
	}
	l.Devices = append(l.Devices, d)
}

func (g *specGen) RemoveDevice(path string) {
	if g.s.Linux == nil {
		return
	}
	out := g.s.Linux.Devices[:0]
	for _, d := range g.s.Linux.Devices {
		if d.Path != path {
			out = append(out, d)
		}
	}
	g.s.Linux.Devices = out
}

var nsTypes = map[string]specs.LinuxNamespaceType{
	"network": specs.NetworkNamespace, "pid": specs.PIDNamespace, "mount": specs.MountNamespace,
	"ipc": specs.IPCNamespace, "uts": specs.UTSNamespace, "user": specs.UserNamespace,
	"cgroup": specs.CgroupNamespace, "time": specs.TimeNamespace,
}

func nsType(ns string) (specs.LinuxNamespaceType, error) {
	if t, ok := nsTypes[ns]; ok {
		return t, nil
	}
	if t := specs.LinuxNamespaceType(ns); t != "" {
		for _, known := range nsTypes {
			if known == t {
				return t, nil
			}
		}
	}
	return "", fmt.Errorf("unknown namespace type %q", ns)
}

func (g *specGen) AddOrReplaceLinuxNamespace(ns, path string) error {
	t, err := nsType(ns)
	if err != nil {
		return err
	}
	l := g.linux()
	for i := range l.Namespaces {
		if l.Namespaces[i].Type == t {
			l.Namespaces[i].Path = path
			return nil
		}
	}
	l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: t, Path: path})
	return nil
}

func (g *specGen) RemoveLinuxNamespace(ns string) error {
	t, err := nsType(ns)
	if err != nil {
		return err
	}
	if g.s.Linux == nil {
		return nil
	}
	out := g.s.Linux.Namespaces[:0]
	for _, n := range g.s.Linux.Namespaces {
		if n.Type != t {
			out = append(out, n)
		}
	}
	g.s.Linux.Namespaces = out
	return nil
}

func (g *specGen) AddPreStartHook(h specs.Hook) {
	g.hooks().Prestart = append(g.hooks().Prestart, h) //nolint:staticcheck // NRI still hands them out
}

func (g *specGen) AddPostStartHook(h specs.Hook) {
	g.hooks().Poststart = append(g.hooks().Poststart, h)
}
func (g *specGen) AddPostStopHook(h specs.Hook) { g.hooks().Poststop = append(g.hooks().Poststop, h) }

func (g *specGen) AddProcessEnv(name, value string) {
	p := g.process()
	kv := name + "=" + value
	for i, e := range p.Env {
		if len(e) > len(name) && e[:len(name)+1] == name+"=" || e == name {
			p.Env[i] = kv
			return
		}
	}
	p.Env = append(p.Env, kv)
}

func (g *specGen) ClearProcessEnv() {
	if g.s.Process != nil {
		g.s.Process.Env = nil
	}
}

func (g *specGen) SetProcessArgs(args []string) { g.process().Args = args }

func (g *specGen) SetProcessOOMScoreAdj(adj int) { g.process().OOMScoreAdj = &adj }

func (g *specGen) AddLinuxResourcesDevice(allow bool, devType string, major, minor *int64, access string) {
	r := g.resources()
	r.Devices = append(r.Devices, specs.LinuxDeviceCgroup{Allow: allow, Type: devType, Major: major, Minor: minor, Access: access})
}

func (g *specGen) AddLinuxResourcesHugepageLimit(pageSize string, limit uint64) {
	r := g.resources()
	for i := range r.HugepageLimits {
		if r.HugepageLimits[i].Pagesize == pageSize {
			r.HugepageLimits[i].Limit = limit
			return
		}
	}
	r.HugepageLimits = append(r.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: pageSize, Limit: limit})
}

func (g *specGen) AddLinuxResourcesUnified(key, val string) {
	r := g.resources()
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified[key] = val
}

func (g *specGen) AddMount(m specs.Mount) { g.s.Mounts = append(g.s.Mounts, m) }

func (g *specGen) ClearMounts() { g.s.Mounts = nil }

func (g *specGen) Mounts() []specs.Mount { return g.s.Mounts }

func (g *specGen) RemoveMount(dest string) {
	out := g.s.Mounts[:0]
	for _, m := range g.s.Mounts {
		if m.Destination != dest {
			out = append(out, m)
		}
	}
	g.s.Mounts = out
}

func (g *specGen) AddLinuxSysctl(key, value string) {
	l := g.linux()
	if l.Sysctl == nil {
		l.Sysctl = map[string]string{}
	}
	l.Sysctl[key] = value
}

func (g *specGen) RemoveLinuxSysctl(key string) {
	if g.s.Linux != nil {
		delete(g.s.Linux.Sysctl, key)
	}
}

func (g *specGen) SetLinuxCgroupsPath(path string)      { g.linux().CgroupsPath = path }
func (g *specGen) SetLinuxResourcesCPUCpus(cpus string) { g.cpu().Cpus = cpus }
func (g *specGen) SetLinuxResourcesCPUMems(mems string) { g.cpu().Mems = mems }
func (g *specGen) SetLinuxResourcesCPUPeriod(p uint64)  { g.cpu().Period = &p }
func (g *specGen) SetLinuxResourcesCPUQuota(q int64)    { g.cpu().Quota = &q }
func (g *specGen) SetLinuxResourcesCPUShares(s uint64)  { g.cpu().Shares = &s }
func (g *specGen) SetLinuxResourcesCPURealtimePeriod(p uint64) {
	g.cpu().RealtimePeriod = &p
}
func (g *specGen) SetLinuxResourcesCPURealtimeRuntime(t int64) { g.cpu().RealtimeRuntime = &t }
func (g *specGen) SetLinuxResourcesMemoryLimit(l int64)        { g.memory().Limit = &l }
func (g *specGen) SetLinuxResourcesMemorySwap(s int64)         { g.memory().Swap = &s }

func (g *specGen) SetLinuxRootPropagation(rp string) error {
	switch rp {
	case "", "private", "rprivate", "slave", "rslave", "shared", "rshared", "unbindable", "runbindable":
		g.linux().RootfsPropagation = rp
		return nil
	}
	return fmt.Errorf("rootfs propagation %q is not valid", rp)
}
