package vm

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Default places: the tool cache (containerd, runc, crictl, critest, kubelet; the
// image) and the offline image set, both shared read-only with the guest.
const (
	DefaultToolsDir = "/var/cache/shimd/tools"
	DefaultRegistry = "/var/cache/shimd/registry"
)

// UpConfig is a guest made ready for shimd's tests.
type UpConfig struct {
	// Dir is the VM's directory (sockets, logs, the share at Dir/share).
	Dir string
	// CgroupDriver is shimd's: "systemd" or "cgroupfs".
	CgroupDriver string
	// Log gets progress lines and the provisioning's output.
	Log io.Writer
	// MemoryMiB and CPUs as in Config.
	MemoryMiB, CPUs int
	// Forwards as in Config; provision.sh sets eth0 up at GuestIP.
	Forwards []Forward
	// Tap as in Config (without Forwards): provision.sh leaves eth0 alone.
	Tap string
	// SELinux boots the SELinux variant of the guest (image-selinux.sh), enforcing,
	// and turns shimd's enable_selinux on.
	SELinux bool
}

// seLinuxCmdline makes Debian's kernel (AppArmor by default) run SELinux, enforcing.
const seLinuxCmdline = "security=selinux selinux=1 enforcing=1"

// Up builds what the guest needs on the host (the image unless cached, the
// agent, `make install` of shimd into the share, the offline image set), boots it
// and provisions it (provision.sh): containerd and shimd run under systemd, crictl
// answers. Paths are the repository's: run it from inside the repository.
func Up(ctx context.Context, cfg UpConfig) (*VM, error) {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	step := func(format string, a ...any) { fmt.Fprintf(logw, "vm: "+format+"\n", a...) }
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	script, cmdline, provisionArg := "image.sh", "", ""
	if cfg.SELinux {
		script, cmdline, provisionArg = "image-selinux.sh", seLinuxCmdline, " selinux"
	}
	image, err := ensureImage(ctx, root, script, logw)
	if err != nil {
		return nil, err
	}
	step("image %s (%.0f s)", image, time.Since(t0).Seconds())
	share := filepath.Join(cfg.Dir, "share")
	if err := prepareShare(ctx, root, share, logw); err != nil {
		return nil, err
	}
	if err := run(ctx, root, logw, "go", "run", "./critest/images/cmd/mkimages", "-storage", DefaultRegistry); err != nil {
		return nil, fmt.Errorf("offline image set: %w", err)
	}
	t1 := time.Now()
	v, err := Start(ctx, Config{
		Image: image, Dir: cfg.Dir, MemoryMiB: cfg.MemoryMiB, CPUs: cfg.CPUs, Forwards: cfg.Forwards, Tap: cfg.Tap, Cmdline: cmdline,
		Shares: []Share{
			{Tag: "host", Path: share},
			{Tag: "tools", Path: DefaultToolsDir, ReadOnly: true},
			{Tag: "registry", Path: DefaultRegistry, ReadOnly: true},
		},
	})
	if err != nil {
		return nil, err
	}
	step("guest up in %.1f s (qemu pid %d)", time.Since(t1).Seconds(), v.PID())
	t2 := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	env := ""
	if cfg.Tap != "" {
		env = "SHIMD_VM_NET=bridged "
	}
	code, err := v.Run(pctx, env+"bash /mnt/host/provision.sh "+cfg.CgroupDriver+provisionArg, logw)
	if err == nil && code != 0 {
		err = fmt.Errorf("provision.sh: exit status %d", code)
	}
	if err != nil {
		v.Kill()
		return nil, fmt.Errorf("%w\n%s", err, v.tail())
	}
	step("containerd and shimd up in %.1f s", time.Since(t2).Seconds())
	return v, nil
}

// EnsureImage runs critest/vm/image.sh (a cached image returns at once) and
// returns the image directory.
func EnsureImage(ctx context.Context, root string, logw io.Writer) (string, error) {
	return ensureImage(ctx, root, "image.sh", logw)
}

// ensureImage runs an image script of critest/vm and returns the image directory.
func ensureImage(ctx context.Context, root, script string, logw io.Writer) (string, error) {
	var out strings.Builder
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "critest/vm", script), filepath.Join(DefaultToolsDir, "vm"))
	cmd.Stdout, cmd.Stderr = &out, logw
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("critest/vm/%s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

// prepareShare fills the guest's /mnt/host: bin/shimd-vm-agent (static),
// install/ (`make install` with DESTDIR) and provision.sh.
func prepareShare(ctx context.Context, root, share string, logw io.Writer) error {
	if err := os.RemoveAll(share); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(share, "bin"), 0o755); err != nil {
		return err
	}
	agent := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(share, "bin", "shimd-vm-agent"), "./critest/vm/agent")
	agent.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := runCmd(agent, root, logw); err != nil {
		return fmt.Errorf("build the agent: %w", err)
	}
	if err := run(ctx, root, logw, "make", "--no-print-directory", "install", "DESTDIR="+filepath.Join(share, "install")); err != nil {
		return fmt.Errorf("make install: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(root, "critest/vm/provision.sh"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(share, "provision.sh"), b, 0o755)
}

func run(ctx context.Context, dir string, logw io.Writer, name string, args ...string) error {
	return runCmd(exec.CommandContext(ctx, name, args...), dir, logw)
}

func runCmd(cmd *exec.Cmd, dir string, logw io.Writer) error {
	var out strings.Builder
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	_, _ = io.WriteString(logw, out.String())
	return nil
}

// repoRoot is the directory of the main module's go.mod, as the go command sees it
// from the working directory.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the shimd repository (go env GOMOD: %q, %v)", gomod, err)
	}
	return filepath.Dir(gomod), nil
}

// Leftovers is a guest script that lists what shimd or containerd still hold in
// the guest, one line each: pods, containers, pinned namespaces, shims, pod and
// container cgroups, overlay mounts. Nothing printed: nothing left.
const Leftovers = `crictl pods -q | sed 's/^/pod /'
crictl ps -aq | sed 's/^/container /'
ls /run/shimd/netns 2>/dev/null | sed 's/^/netns /'
pgrep -a containerd-shim | sed 's/^/shim /'
find /sys/fs/cgroup -type d \( -name 'shimd-*.scope' -o -name 'kubepods-*pod*' -o -path '*/kubepods/*/pod*' -o -path '*/shimd/*' \) | sed 's/^/cgroup /'
grep ' overlay ' /proc/mounts | grep -v ' / ' | sed 's/^/mount /'
true`
