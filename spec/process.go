package spec

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/pkg/oci"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultPath is the PATH a container gets when neither image nor config sets one.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func processOpts(in Input) ([]oci.SpecOpts, error) {
	args, err := processArgs(in.Config, in.Image)
	if err != nil {
		return nil, err
	}
	cwd, err := workingDir(in.Config, in.Image)
	if err != nil {
		return nil, err
	}
	env, err := mergeEnv(in)
	if err != nil {
		return nil, err
	}
	hostname := ""
	if !hostNetwork(in) {
		hostname = in.SandboxConfig.GetHostname()
	}
	sc := in.Config.GetLinux().GetSecurityContext()
	user := in.User
	return []oci.SpecOpts{optFunc(func(s *specs.Spec) {
		s.Process.Args = args
		s.Process.Cwd = cwd
		s.Process.Env = env
		s.Process.Terminal = in.Config.GetTty()
		s.Hostname = hostname
		s.Process.User = specs.User{
			UID: user.UID, GID: user.GID,
			AdditionalGids: append([]uint32(nil), user.AdditionalGIDs...),
		}
		s.Process.NoNewPrivileges = sc.GetNoNewPrivs()
		// No rlimits: the process inherits the shim's, as with containerd's CRI plugin
		// (raising one above the hard limit fails without CAP_SYS_RESOURCE).
		s.Process.Rlimits = nil
		// Read-only rootfs: the rootfs is mounted read-only, other mounts keep their own
		// mode (containerd's choice; docker makes them all read-only).
		s.Root.Readonly = sc.GetReadonlyRootfs()
	})}, nil
}

// processArgs merges the config's command and args with the image's entrypoint and
// cmd as Kubernetes defines it:
//
//	command  args  -> process
//	   -      -       entrypoint + cmd
//	   -      A       entrypoint + A
//	   C      -       C            (the image's cmd is dropped too)
//	   C      A       C + A
//
// An entrypoint of [""] (docker's way to clear it) counts as none.
func processArgs(cfg *runtimeapi.ContainerConfig, img ocispec.ImageConfig) ([]string, error) {
	command, args := cfg.GetCommand(), cfg.GetArgs()
	if len(command) == 0 {
		if len(img.Entrypoint) != 1 || img.Entrypoint[0] != "" {
			if err := noNULInImage("image.entrypoint", img.Entrypoint); err != nil {
				return nil, err
			}
			command = img.Entrypoint
		}
		if len(args) == 0 {
			if err := noNULInImage("image.cmd", img.Cmd); err != nil {
				return nil, err
			}
			args = img.Cmd
		}
	}
	out := append(append([]string{}, command...), args...)
	if len(out) == 0 {
		return nil, invalid("config.command", "no command: neither the config nor the image gives one")
	}
	return out, nil
}

// workingDir is the config's, else the image's, else "/"; it must be absolute.
func workingDir(cfg *runtimeapi.ContainerConfig, img ocispec.ImageConfig) (string, error) {
	field, dir, refuse := "config.working_dir", cfg.GetWorkingDir(), invalid
	if dir == "" {
		// The image's own: a bad one is the image's fault, not the request's.
		field, dir, refuse = "image.working_dir", img.WorkingDir, badImage
	}
	switch {
	case dir == "":
		return "/", nil
	case strings.IndexByte(dir, 0) >= 0:
		return "", refuse(field, "%q holds a NUL byte", dir)
	case !path.IsAbs(dir):
		return "", refuse(field, "%q is not absolute", dir)
	}
	dir = path.Clean(dir)
	if dir == "/proc" || strings.HasPrefix(dir, "/proc/") {
		// /proc/self/fd/N, /proc/1/cwd: where a runtime's leaked descriptor leads to
		// the host's filesystem (runc's CVE-2024-21626). No process works there.
		return "", refuse(field, "%q is in /proc", dir)
	}
	return dir, nil
}

// What runc refuses of the image's own process fields only when it starts the
// container, with an error only its text explains, is refused at create as the
// image's fault (FailedPrecondition naming the image's field), and only for the fields
// the process gets: a NUL in the entrypoint, cmd or working dir (the kernel ends
// strings there; Go's exec refuses them), an env entry that is not NAME=VALUE with a
// name and no NUL (runc: "invalid environment variable").

func noNULInImage(field string, list []string) error {
	for i, a := range list {
		if strings.IndexByte(a, 0) >= 0 {
			return badImage(fmt.Sprintf("%s[%d]", field, i), "%q holds a NUL byte", a)
		}
	}
	return nil
}

// imageEnvEntry judges the image's env entry i, kv.
func imageEnvEntry(i int, kv string) error {
	field := fmt.Sprintf("image.env[%d]", i)
	k, _, ok := strings.Cut(kv, "=")
	switch {
	case !ok:
		return badImage(field, "%q is not NAME=VALUE", kv)
	case k == "":
		return badImage(field, "%q has no name", kv)
	case strings.IndexByte(kv, 0) >= 0:
		return badImage(field, "%q holds a NUL byte", kv)
	}
	return nil
}

// mergeEnv gives the config's envs precedence over the image's, and both over the
// defaults (PATH, and HOSTNAME from the pod). Order: the image's keys as the image
// lists them (overridden in place), then the config's new keys in order, then the
// defaults not set by either.
func mergeEnv(in Input) ([]string, error) {
	var (
		env       []string
		index     = map[string]int{}
		fromImage = map[string]int{} // key -> index in the image's env, while the image's entry stands
	)
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		delete(fromImage, k)
		if i, ok := index[k]; ok {
			env[i] = kv
			return
		}
		index[k] = len(env)
		env = append(env, kv)
	}
	for i, kv := range in.Image.Env {
		set(kv)
		k, _, _ := strings.Cut(kv, "=")
		fromImage[k] = i
	}
	for i, e := range in.Config.GetEnvs() {
		if e.GetKey() == "" || strings.Contains(e.GetKey(), "=") {
			return nil, invalid(fmt.Sprintf("config.envs[%d].key", i), "%q is not a variable name", e.GetKey())
		}
		set(e.GetKey() + "=" + string(e.GetValue()))
	}
	for _, i := range slices.Sorted(maps.Values(fromImage)) {
		if err := imageEnvEntry(i, in.Image.Env[i]); err != nil {
			return nil, err
		}
	}
	defaults := []string{defaultPath}
	if h := in.SandboxConfig.GetHostname(); h != "" {
		defaults = append(defaults, "HOSTNAME="+h)
	}
	for _, kv := range defaults {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := index[k]; !ok {
			set(kv)
		}
	}
	return env, nil
}
