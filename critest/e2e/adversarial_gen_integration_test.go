//go:build integration

package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// attack is one malformed request: the RPC, what is wrong with it, and the call.
type attack struct {
	rpc, desc string
	call      func(ctx context.Context) error
}

// fuzzer builds malformed requests from a deterministic source. Strings are valid
// UTF-8 (protobuf refuses to marshal others on the client); bytes fields are binary.
type fuzzer struct {
	r                *rand.Rand
	podID, ctrID     string // a READY pod and a running container
	closedRegistry   string // 127.0.0.1:PORT with nothing listening
	rs               runtimeapi.RuntimeServiceClient
	is               runtimeapi.ImageServiceClient
	huge             string
	hugeBinaryString string
	baits            int // runcBait's configs so far, for unique names
}

func newFuzzer(seed uint64, rs runtimeapi.RuntimeServiceClient, is runtimeapi.ImageServiceClient, podID, ctrID, closed string) *fuzzer {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	f := &fuzzer{r: r, rs: rs, is: is, podID: podID, ctrID: ctrID, closedRegistry: closed, huge: strings.Repeat("A", 1<<20)}
	var b strings.Builder
	for b.Len() < 256<<10 {
		b.WriteRune(rune(r.IntN(0x2FFFF)))
	}
	f.hugeBinaryString = strings.ToValidUTF8(b.String(), "?")
	return f
}

var nastyStrings = []string{
	"", " ", "\x00", "a\x00b", "..", "../../../../etc/passwd", "/proc/self/root/etc", "/dev/zero", "/", "//", "/tmp/../../",
	"x;IP=198.19.77.250", "a=b;c=d", "$(reboot)", "`id`", "%s%n%x", "\n\r\t", "\u202e\ufeff", "💥", "CAP_ALL",
	"-1", "0-99999", "k8s.io", "docker.io/library/busybox:latest", "sha256:", "sha256:" + strings.Repeat("0", 64),
}

// str is a nasty string: from the list, huge, binary-ish, or random runes.
func (f *fuzzer) str() string {
	switch f.r.IntN(10) {
	case 0:
		return f.huge
	case 1:
		return strings.ToValidUTF8(f.hugeBinaryString[:f.r.IntN(4096)], "")
	case 2:
		n := f.r.IntN(64)
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteRune(rune(f.r.IntN(0x800)))
		}
		return strings.ToValidUTF8(b.String(), "")
	}
	return nastyStrings[f.r.IntN(len(nastyStrings))]
}

func (f *fuzzer) strs() []string {
	out := make([]string, f.r.IntN(4))
	for i := range out {
		out[i] = f.str()
	}
	return out
}

func (f *fuzzer) binary() []byte {
	b := make([]byte, f.r.IntN(512))
	for i := range b {
		b[i] = byte(f.r.IntN(256))
	}
	return b
}

// id is an unknown, malformed, huge or real (pod or container, possibly the wrong kind) id.
func (f *fuzzer) id() string {
	switch f.r.IntN(6) {
	case 0:
		return f.podID
	case 1:
		return f.ctrID
	case 2:
		return fmt.Sprintf("%064x", f.r.Uint64())
	case 3:
		return f.podID[:1+f.r.IntN(8)]
	}
	return f.str()
}

func (f *fuzzer) labels() map[string]string {
	n := f.r.IntN(4)
	if f.r.IntN(20) == 0 {
		n = 10000
	}
	m := make(map[string]string, n)
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("k%d", i)+f.nastyShort()] = f.nastyShort()
	}
	return m
}

func (f *fuzzer) nastyShort() string { return nastyStrings[f.r.IntN(len(nastyStrings))] }

func (f *fuzzer) i64() int64 {
	return []int64{0, -1, -2, 1, 1 << 62, -1 << 63, 1<<63 - 1, 1000, 2}[f.r.IntN(9)]
}

func (f *fuzzer) resources() *runtimeapi.LinuxContainerResources {
	if f.r.IntN(4) == 0 {
		return nil
	}
	return &runtimeapi.LinuxContainerResources{
		CpuPeriod: f.i64(), CpuQuota: f.i64(), CpuShares: f.i64(), MemoryLimitInBytes: f.i64(),
		OomScoreAdj: f.i64(), CpusetCpus: f.str(), CpusetMems: f.str(), MemorySwapLimitInBytes: f.i64(),
		Unified:        map[string]string{f.str(): f.str()},
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: f.str(), Limit: uint64(f.i64())}},
	}
}

func (f *fuzzer) nsMode() runtimeapi.NamespaceMode { return runtimeapi.NamespaceMode(f.r.IntN(6) - 1) }

// podConfig is a pod config with one or more things wrong (or nil parts).
func (f *fuzzer) podConfig() *runtimeapi.PodSandboxConfig {
	if f.r.IntN(10) == 0 {
		return nil
	}
	cfg := podConfig("adv")
	switch f.r.IntN(12) {
	case 0:
		cfg.Metadata = nil
	case 1:
		cfg.Metadata.Name = f.str()
	case 2:
		cfg.Metadata.Namespace = f.str()
	case 3:
		cfg.Metadata.Uid = f.str()
	case 4:
		cfg.Hostname = f.str()
	case 5:
		cfg.LogDirectory = f.str()
	case 6:
		cfg.DnsConfig = &runtimeapi.DNSConfig{Servers: f.strs(), Searches: f.strs(), Options: f.strs()}
	case 7:
		cfg.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol(f.r.IntN(5)), ContainerPort: int32(f.i64()), HostPort: int32(f.i64()), HostIp: f.str()}}
	case 8:
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: f.str(), Sysctls: map[string]string{f.str(): f.str()}}
	case 9:
		cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: f.nsMode(), Pid: f.nsMode(), Ipc: f.nsMode(), TargetId: f.id(),
				UsernsOptions: &runtimeapi.UserNamespace{Mode: f.nsMode(), Uids: []*runtimeapi.IDMapping{{HostId: uint32(f.i64()), Length: uint32(f.i64())}}}},
			RunAsUser: &runtimeapi.Int64Value{Value: f.i64()}, SupplementalGroups: []int64{f.i64()}, Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: f.str()}}
	case 10:
		cfg.Linux.Overhead, cfg.Linux.Resources = f.resources(), f.resources()
		cfg.Metadata.Name = "" // stays invalid: nothing is created
	default:
		cfg.Metadata.Name = f.str()
		cfg.Labels, cfg.Annotations = f.labels(), f.labels()
	}
	return cfg
}

// containerConfig is a container config with one or more things wrong.
func (f *fuzzer) containerConfig() *runtimeapi.ContainerConfig {
	if f.r.IntN(10) == 0 {
		return nil
	}
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "adv"}, Image: &runtimeapi.ImageSpec{Image: busyboxImage},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{}}}
	switch f.r.IntN(14) {
	case 12:
		cfg.StopSignal = runtimeapi.Signal(f.r.Int32N(200) - 50)
	case 13:
		// A host path the machine has, so that the options are what is judged.
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: "/tmp", ContainerPath: "/m", Readonly: f.r.IntN(2) == 0,
			MountOptions: append(f.strs(), []string{"noexec", "rw", "rshared", "bind", "size=1", "ro", "nosymfollow"}[f.r.IntN(7)])}}
	case 0:
		cfg.Metadata = nil
	case 1:
		cfg.Metadata.Name = f.str()
	case 2:
		cfg.Image = &runtimeapi.ImageSpec{Image: f.str()}
	case 3:
		cfg.LogPath = f.str()
	case 4:
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: f.str(), ContainerPath: f.str(), Propagation: runtimeapi.MountPropagation(f.r.IntN(5))}}
	case 5:
		cfg.Devices = []*runtimeapi.Device{{HostPath: f.str(), ContainerPath: f.str(), Permissions: f.str()}}
	case 6:
		cfg.Linux.Resources = f.resources()
		cfg.Metadata.Name = "bad name" // stays invalid
	case 7:
		cfg.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: f.strs(), DropCapabilities: append(f.strs(), "NOPE")}
	case 8:
		cfg.Command, cfg.Args, cfg.WorkingDir = f.strs(), f.strs(), f.str()+"\x00"
	case 9:
		cfg.Envs = []*runtimeapi.KeyValue{{Key: f.str() + "=", Value: f.binary()}}
	case 10:
		cfg.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_ProfileType(f.r.IntN(5)), LocalhostRef: f.str()}
		cfg.Linux.SecurityContext.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_ProfileType(f.r.IntN(5)), LocalhostRef: f.str()}
		cfg.Metadata.Name = "-" // stays invalid
	default:
		cfg.Metadata.Name = f.str()
		cfg.Labels, cfg.Annotations = f.labels(), f.labels()
	}
	return cfg
}

// Paths that runc fails on at start unless shimd refuses them first: files of the
// busybox image and of the pod where a directory must be, paths through them, host
// paths and devices that are missing or under a file.
var (
	baitDirs    = []string{"/etc/passwd", "/bin/sh", "/etc/passwd/x", "/bin/sh/../sh/x", "/dev/zero", "/dev/null/x", "/etc/hosts", "/etc/resolv.conf/x", "/tmp", "/new/dir", "/"}
	baitMasks   = []string{"/etc/passwd/x", "/bin/sh/x", "/dev/zero/x", "/etc/hostname/x", "/proc/kcore", "/etc/passwd", "/nope/x", "/proc/a\x00b", "proc/sys"}
	baitHosts   = []string{"/nonexistent/shimd-bait", "/etc/passwd/x", "/dev/null/x", "/tmp", "/etc/hostname"}
	baitDevices = []string{"/dev/shimd-bait-missing", "/dev/null/x", "/etc/passwd/x", "/dev/null", "/dev/zero"}
)

// runcBait is a config for the test's pod, valid but for one thing runc refuses at
// start (a memory limit it cannot set, a swap limit the kernel refuses, a file where a
// directory must be, a masked path with a NUL, a missing host path or device), or
// valid outright. shimd must refuse it at create (InvalidArgument, NotFound) or start
// it: never answer Unknown at StartContainer.
func (f *fuzzer) runcBait() *runtimeapi.ContainerConfig {
	f.baits++
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("bait%d", f.baits)},
		Image: &runtimeapi.ImageSpec{Image: busyboxImage}, Command: []string{"true"},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: suiteNS()}}}
	pick := func(list []string) string {
		if f.r.IntN(5) == 0 {
			return f.nastyShort()
		}
		return list[f.r.IntN(len(list))]
	}
	memory := func() int64 {
		return []int64{0, 0, -1, 1, 4096, 3 << 20, 6<<20 - 1, 6 << 20, 64 << 20, 256 << 20}[f.r.IntN(10)]
	}
	sc := cfg.Linux.SecurityContext
	switch f.r.IntN(6) {
	case 0:
		cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: memory(), MemorySwapLimitInBytes: memory()}
	case 1:
		cfg.WorkingDir = pick(baitDirs)
	case 2:
		sc.MaskedPaths = []string{"/proc/kcore", pick(baitMasks)}
	case 3:
		sc.ReadonlyPaths = []string{pick(baitMasks), "/proc/sys"}
	case 4:
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: pick(baitHosts), ContainerPath: "/bait", Readonly: f.r.IntN(2) == 0}}
	default:
		cfg.Devices = []*runtimeapi.Device{{HostPath: pick(baitDevices), ContainerPath: "/dev/bait", Permissions: "rwm"}}
	}
	return cfg
}

// baitResources is an update of the test's running container (no memory limit of its
// own) that runc refuses, or a harmless one.
func (f *fuzzer) baitResources() *runtimeapi.LinuxContainerResources {
	v := []int64{0, -1, 1, 4096, 6 << 20, 64 << 20, 1 << 30}
	return &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: v[f.r.IntN(len(v))], MemorySwapLimitInBytes: v[f.r.IntN(len(v))]}
}

// imageRef is a reference that is malformed, missing from the local registry (through
// the hermetic mirrors of docker.io) or on a closed local port: never a host outside
// the machine, so that no name is looked up.
func (f *fuzzer) imageRef() string {
	switch f.r.IntN(5) {
	case 0:
		return "docker.io/library/nothere-" + fmt.Sprint(f.r.IntN(1000)) + ":" + fmt.Sprint(f.r.IntN(9))
	case 1:
		return f.closedRegistry + "/x/y:1"
	case 2:
		return "docker.io/library/busybox@sha256:" + fmt.Sprintf("%064x", f.r.Uint64())
	case 3:
		return "Invalid Ref " + f.nastyShort()
	}
	return "docker.io/library/" + f.str()
}

// drain reads a server stream to its end.
func drain[T any](s grpc.ServerStreamingClient[T], err error) error {
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}
