//go:build integration

package cgroupv2

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// On a node with AppArmor (the guest runs Debian's kernel, which enables it, and has
// apparmor_parser), shimd loads its default profile at start and runs containers that
// ask RuntimeDefault or nothing under it, in enforce mode, as containerd and CRI-O
// do; Unconfined and privileged containers run unconfined. The profile's rules
// (containerd's template) deny what the capabilities alone would allow: a mount with
// CAP_SYS_ADMIN, a write to /proc/sys/kernel/core_pattern. Both are tried in an
// Unconfined container with the same capabilities, where they work, so the denial is
// AppArmor's (EACCES; missing capabilities give EPERM); the write puts back the value
// read, so the guest's core_pattern stays.
func TestAppArmorRuntimeDefault(t *testing.T) {
	requireGuest(t)
	require.Equal(t, "Y", sh(t, "cat /sys/module/apparmor/parameters/enabled"), "the guest's kernel enforces AppArmor")
	t.Log("guest: " + sh(t, "apparmor_parser --version | head -1"))

	// crictl info names the profile, and the kernel has it in enforce mode.
	var info struct {
		AppArmor struct {
			Enabled        bool   `json:"enabled"`
			DefaultProfile string `json:"defaultProfile"`
		} `json:"apparmor"`
	}
	out := sh(t, "crictl info")
	require.NoError(t, json.Unmarshal([]byte(out), &info), out)
	require.True(t, info.AppArmor.Enabled, out)
	require.Equal(t, "shimd-default", info.AppArmor.DefaultProfile, out)
	t.Logf("crictl info: apparmor %+v", info.AppArmor)
	require.Equal(t, "shimd-default (enforce)", sh(t, "grep '^shimd-default ' /sys/kernel/security/apparmor/profiles"))

	// A privileged pod, so that it may also hold a privileged container.
	p := newPodLinux(t, "apparmor", `,"security_context":{"privileged":true}`)
	// The containers are made at once (shAll): each crictl is seconds under emulation.
	const sysAdmin = `"capabilities":{"add_capabilities":["SYS_ADMIN"]}`
	ctrs := []struct{ name, securityContext string }{
		{"unset", `{` + sysAdmin + `}`},
		{"runtime-default", `{` + sysAdmin + `,"apparmor":{"profile_type":0}}`},
		{"deprecated", `{` + sysAdmin + `,"apparmor_profile":"runtime/default"}`},
		{"unconfined", `{` + sysAdmin + `,"apparmor":{"profile_type":1}}`},
		{"privileged", `{"privileged":true}`},
	}
	var scripts []string
	for _, c := range ctrs {
		cfg := file(t, "ctr-"+p.id[:12]+"-"+c.name+".json", fmt.Sprintf(`{"metadata":{"name":%q},"image":{"image":%q},
			"command":["sleep","100000"],"log_path":"%s.log","linux":{"security_context":%s}}`, c.name, busybox, c.name, c.securityContext))
		scripts = append(scripts, fmt.Sprintf("set -e\nid=$(crictl create %s %s %s)\ncrictl start $id >/dev/null\necho $id", p.id, cfg, p.config))
	}
	codes, outs := shAll(t, scripts...)
	for i, c := range ctrs {
		require.Equal(t, 0, codes[i], "container %s: %s", c.name, outs[i])
	}
	unset, runtimeDefault, deprecated, unconfined, privileged := outs[0], outs[1], outs[2], outs[3], outs[4]

	// The label of the container's init, seen from the node, and of a process
	// exec'd into it (its own /proc/self/attr/current).
	// All five read at once, each as two lines.
	labels := []struct{ name, id, want string }{
		{"unset", unset, "shimd-default (enforce)"},
		{"RuntimeDefault", runtimeDefault, "shimd-default (enforce)"},
		{"runtime/default", deprecated, "shimd-default (enforce)"},
		{"Unconfined", unconfined, "unconfined"},
		{"privileged", privileged, "unconfined"},
	}
	scripts = scripts[:0]
	for _, l := range labels {
		scripts = append(scripts, `set -e
pid=$(crictl inspect -o go-template --template '{{.info.pid}}' `+l.id+`)
cat /proc/$pid/attr/current
crictl exec `+l.id+` cat /proc/self/attr/current`)
	}
	codes, outs = shAll(t, scripts...)
	for i, l := range labels {
		require.Equal(t, 0, codes[i], "%s: the labels: %s", l.name, outs[i])
		initLabel, execLabel, ok := strings.Cut(outs[i], "\n")
		require.True(t, ok, "%s: two labels: %q", l.name, outs[i])
		require.Equal(t, l.want, initLabel, "%s: the container's init", l.name)
		require.Equal(t, l.want, execLabel, "%s: a process exec'd into it", l.name)
		t.Logf("%s: init %q, exec %q", l.name, initLabel, execLabel)
	}

	// What the profile denies, tried with CAP_SYS_ADMIN in each container.
	mount := func(id string) (int, string) {
		return shCode(t, "crictl exec "+id+" sh -c 'mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && umount /tmp/m' 2>&1")
	}
	// The write of the value just read: a no-op where it is allowed.
	corePattern := func(id string) (int, string) {
		return shCode(t, "crictl exec "+id+` sh -c 'v=$(cat /proc/sys/kernel/core_pattern) && echo "$v" > /proc/sys/kernel/core_pattern' 2>&1`)
	}
	before := sh(t, "cat /proc/sys/kernel/core_pattern")
	code, out := mount(unconfined)
	require.Equal(t, 0, code, "a mount with CAP_SYS_ADMIN, unconfined: %s", out)
	code, out = corePattern(unconfined)
	require.Equal(t, 0, code, "core_pattern rewritten, unconfined: %s", out)
	for name, id := range map[string]string{"unset": unset, "RuntimeDefault": runtimeDefault} {
		code, out := mount(id)
		require.NotEqual(t, 0, code, "%s: the profile denies mount", name)
		require.Contains(t, out, "Permission denied", "%s: EACCES is AppArmor's answer (capabilities give EPERM)", name)
		t.Logf("%s: mount: exit %d: %s", name, code, out)
		code, out = corePattern(id)
		require.NotEqual(t, 0, code, "%s: the profile denies the write", name)
		require.Contains(t, out, "Permission denied", name)
		t.Logf("%s: core_pattern: exit %d: %s", name, code, out)
	}
	// The kernel logs none of it: the template's "deny" rules are quiet.
	require.Equal(t, before, sh(t, "cat /proc/sys/kernel/core_pattern"))
}
