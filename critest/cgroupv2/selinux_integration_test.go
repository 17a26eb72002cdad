//go:build integration

package cgroupv2

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The SELinux tests run in the SELinux guest (SHIMD_VM_SELINUX=1, make e2e-selinux):
// Debian's kernel booted with SELinux enforcing, the reference policy with its
// container module and critest/vm/selinux/shimd_container.te, shimd with
// enable_selinux = true. containerd and runc run in init_t, which that guest makes
// permissive, and shimd in initrc_t (shimLabel); the containers run in container_t,
// which is enforced and MCS-constrained, so what the tests see denied is SELinux's
// doing.

func requireSELinux(t *testing.T) {
	t.Helper()
	requireGuest(t)
	if !seLinux {
		t.Skip("SHIMD_VM_SELINUX=1 boots the SELinux guest (make e2e-selinux)")
	}
}

// ctrWith creates and starts a sleeping busybox container in p whose config has the
// extra JSON fields given (each preceded by a comma).
func (p *pod) ctrWith(name, extra string) string {
	cfg := file(p.t, "ctr-"+p.id[:12]+"-"+name+".json", fmt.Sprintf(`{"metadata":{"name":%q},"image":{"image":%q},
		"command":["sleep","100000"],"log_path":"%s.log"%s}`, name, busybox, name, extra))
	id := sh(p.t, fmt.Sprintf("crictl create %s %s %s", p.id, cfg, p.config))
	sh(p.t, "crictl start "+id+" >/dev/null")
	return id
}

// seLabels are the SELinux labels of a container's init, seen from the node, and of
// a process exec'd into it.
func seLabels(t *testing.T, id string) (initLabel, execLabel string) {
	pid := sh(t, `crictl inspect -o go-template --template '{{.info.pid}}' `+id)
	return sh(t, "tr -d '\\0' </proc/"+pid+"/attr/current"), sh(t, "crictl exec "+id+" cat /proc/self/attr/current | tr -d '\\0'")
}

// shimLabel is the SELinux label of the process a container's init runs under: its
// shim, started by containerd, which ran runc. A container given no label inherits
// it (containerd's own label), whatever shimd's is: in this guest containerd, from
// the unlabelled 9p share, runs in init_t, and shimd, installed in /usr/local/bin
// (bin_t), in initrc_t, where the reference policy puts a program of bin_t that
// init_t starts.
func shimLabel(t *testing.T, id string) string {
	pid := sh(t, `crictl inspect -o go-template --template '{{.info.pid}}' `+id)
	ppid := sh(t, "ps -o ppid= -p "+pid+" | tr -d ' '")
	require.Equal(t, "containerd-shim", sh(t, "cut -c1-15 /proc/"+ppid+"/comm"), "the parent of container %s's init", id)
	label := sh(t, "tr -d '\\0' </proc/"+ppid+"/attr/current")
	require.NotContains(t, label, "container_t", "the shim of container %s", id)
	return label
}

// seLevel is the MCS level of a label: "s0:c1,c2" of "u:r:t:s0:c1,c2".
func seLevel(label string) string {
	f := strings.SplitN(label, ":", 4)
	if len(f) < 4 {
		return ""
	}
	return f[3]
}

// fileLabel is the SELinux label of a file of the guest.
func fileLabel(t *testing.T, path string) string { return sh(t, "stat -c %C "+path) }

// crictl info says SELinux is on, and the kernel enforces it.
func TestSELinuxInfo(t *testing.T) {
	requireSELinux(t)
	require.Equal(t, "Enforcing", sh(t, "getenforce"))
	var info struct {
		SELinux struct {
			Enabled, Enforcing      bool
			ProcessLabel, FileLabel string
			Note                    string
		} `json:"selinux"`
	}
	out := sh(t, "crictl info")
	require.NoError(t, json.Unmarshal([]byte(out), &info), out)
	require.True(t, info.SELinux.Enabled, out)
	require.True(t, info.SELinux.Enforcing, out)
	require.Equal(t, "system_u:system_r:container_t", info.SELinux.ProcessLabel)
	require.Equal(t, "system_u:object_r:container_file_t", info.SELinux.FileLabel)
	t.Logf("crictl info: selinux %+v", info.SELinux)
}

// Each pod runs under container_t with an MCS level of its own, its containers and
// the processes exec'd into them under the same; its hosts, hostname, resolv.conf
// and /dev/shm carry its mount label, and so do the files a container makes in
// /dev/shm.
func TestSELinuxPodLabels(t *testing.T) {
	requireSELinux(t)
	a, b := newPod(t, "se-a"), newPod(t, "se-b")
	ca1, ca2, cb := a.ctrWith("one", ""), a.ctrWith("two", ""), b.ctrWith("one", "")
	levels := map[string]string{}
	for name, id := range map[string]string{"a1": ca1, "a2": ca2, "b": cb} {
		initLabel, execLabel := seLabels(t, id)
		require.True(t, strings.HasPrefix(initLabel, "system_u:system_r:container_t:s0:c"), "%s: %s", name, initLabel)
		require.Equal(t, initLabel, execLabel, "%s: an exec'd process has its container's label", name)
		levels[name] = seLevel(initLabel)
		t.Logf("container %s: %s", name, initLabel)
	}
	require.Equal(t, levels["a1"], levels["a2"], "the containers of a pod share its level")
	require.NotEqual(t, levels["a1"], levels["b"], "two pods, two levels")

	mountLabel := "system_u:object_r:container_file_t:" + levels["a1"]
	for _, f := range []string{"hosts", "hostname", "resolv.conf"} {
		require.Equal(t, mountLabel, fileLabel(t, "/var/lib/shimd/sandboxes/"+a.id+"/"+f), f)
	}
	shm := "/run/shimd/sandboxes/" + a.id + "/shm"
	require.Equal(t, mountLabel, fileLabel(t, shm))
	require.Contains(t, sh(t, "grep ' "+shm+" ' /proc/mounts"), `context="`+mountLabel+`"`)
	sh(t, "crictl exec "+ca1+" sh -c 'echo x >/dev/shm/f'")
	require.Equal(t, mountLabel, fileLabel(t, shm+"/f"))
}

// SELinuxOptions of the pod give its level (and so its containers'); a malformed
// level is refused; a privileged container runs under the runtime's own label.
func TestSELinuxOptions(t *testing.T) {
	requireSELinux(t)
	p := newPodLinux(t, "se-opts", `,"security_context":{"privileged":true,"selinux_options":{"level":"s0:c7,c8"}}`)
	c := p.ctrWith("c", "")
	initLabel, _ := seLabels(t, c)
	require.Equal(t, "system_u:system_r:container_t:s0:c7,c8", initLabel)
	own := p.ctrWith("own", `,"linux":{"security_context":{"selinux_options":{"level":"s0:c9,c10"}}}`)
	initLabel, _ = seLabels(t, own)
	require.Equal(t, "system_u:system_r:container_t:s0:c9,c10", initLabel, "a container's own level")
	priv := p.ctrWith("priv", `,"linux":{"security_context":{"privileged":true}}`)
	initLabel, _ = seLabels(t, priv)
	require.Equal(t, shimLabel(t, priv), initLabel, "privileged: its shim's label")
	t.Logf("privileged container: %s", initLabel)

	cfg := file(t, "pod-se-bad.json", `{"metadata":{"name":"se-bad","namespace":"cgroupv2","uid":"se-bad"},
		"linux":{"security_context":{"selinux_options":{"level":"s0:c1,c2:x"}}}}`)
	code, out := shCode(t, "crictl runp "+cfg+" 2>&1")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "InvalidArgument", out)
}

// A pod in the node's PID namespace gets no labels (CRI-O's rule): its containers run
// under the runtime's label, and its files keep theirs.
func TestSELinuxHostNamespaces(t *testing.T) {
	requireSELinux(t)
	p := newPodLinux(t, "se-hostpid", `,"security_context":{"namespace_options":{"pid":2}}`)
	c := p.ctrWith("c", `,"linux":{"security_context":{"namespace_options":{"pid":2}}}`)
	initLabel, execLabel := seLabels(t, c)
	runtimeLabel := shimLabel(t, c)
	require.Equal(t, runtimeLabel, initLabel)
	require.Equal(t, runtimeLabel, execLabel)
	require.NotContains(t, fileLabel(t, "/var/lib/shimd/sandboxes/"+p.id+"/hosts"), "container_file_t")
	t.Logf("host PID pod: container %s, hosts %s", initLabel, fileLabel(t, "/var/lib/shimd/sandboxes/"+p.id+"/hosts"))
}

// A volume with selinux_relabel gets its pod's mount label: the pod's containers read
// it, another pod's container mounting the same directory cannot (EACCES: another
// MCS level). Relabelling a node directory is refused.
func TestSELinuxRelabelledVolume(t *testing.T) {
	requireSELinux(t)
	dir := "/srv/se-vol"
	sh(t, "rm -rf "+dir+" && mkdir -p "+dir)
	t.Cleanup(func() { sh(t, "rm -rf "+dir) })
	mount := func(relabel bool) string {
		return fmt.Sprintf(`,"mounts":[{"container_path":"/vol","host_path":%q,"selinux_relabel":%t}]`, dir, relabel)
	}
	a, b := newPod(t, "se-vol-a"), newPod(t, "se-vol-b")
	writer := a.ctrWith("writer", mount(true))
	sh(t, "crictl exec "+writer+" sh -c 'echo secret >/vol/f'")
	aLevel := seLevel(sh(t, "crictl exec "+writer+" cat /proc/self/attr/current | tr -d '\\0'"))
	require.Equal(t, "system_u:object_r:container_file_t:"+aLevel, fileLabel(t, dir))
	require.Equal(t, "system_u:object_r:container_file_t:"+aLevel, fileLabel(t, dir+"/f"))

	reader := a.ctrWith("reader", mount(false))
	require.Equal(t, "secret", sh(t, "crictl exec "+reader+" cat /vol/f"), "the pod's other container reads it")

	other := b.ctrWith("other", mount(false))
	code, out := shCode(t, "crictl exec "+other+" cat /vol/f 2>&1")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "Permission denied", "another pod cannot read it")
	t.Logf("the other pod: %s", strings.SplitN(out, "\n", 2)[0])

	cfg := file(t, "ctr-se-etc.json", fmt.Sprintf(`{"metadata":{"name":"etc"},"image":{"image":%q},"command":["true"],
		"mounts":[{"container_path":"/x","host_path":"/etc","selinux_relabel":true}]}`, busybox))
	code, out = shCode(t, fmt.Sprintf("crictl create %s %s %s 2>&1", b.id, cfg, b.config))
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "InvalidArgument", out)
	require.Equal(t, "system_u:object_r:etc_t:s0", fileLabel(t, "/etc"), "/etc keeps its label")
}

// A restart of shimd keeps each pod's level: a container created after it in an
// old pod gets the pod's level, a new pod another.
func TestSELinuxRestartKeepsLevel(t *testing.T) {
	requireSELinux(t)
	p := newPod(t, "se-restart")
	before, _ := seLabels(t, p.ctrWith("before", ""))
	sh(t, "systemctl restart shimd && for i in $(seq 120); do crictl version >/dev/null 2>&1 && break; sleep 1; done")
	after, _ := seLabels(t, p.ctrWith("after", ""))
	require.Equal(t, before, after, "the pod's level survives the restart")
	fresh, _ := seLabels(t, newPod(t, "se-fresh").ctrWith("c", ""))
	require.NotEqual(t, seLevel(before), seLevel(fresh))
	t.Logf("before %s, after %s, a new pod %s", before, after, fresh)
}

// With enable_selinux off (as on every node by default), nothing is labelled: the
// containers run under the runtime's label and another pod reads a volume
// "relabelled" for the first. The same checks as above then fail, which is what
// shows that they test shimd's labelling.
func TestSELinuxOffLabelsNothing(t *testing.T) {
	requireSELinux(t)
	restart := "systemctl restart shimd && for i in $(seq 120); do crictl version >/dev/null 2>&1 && break; sleep 1; done"
	sh(t, "sed -i 's/^enable_selinux = true/enable_selinux = false/' /etc/shimd/config.toml && "+restart)
	t.Cleanup(func() {
		sh(t, "sed -i 's/^enable_selinux = false/enable_selinux = true/' /etc/shimd/config.toml && "+restart)
	})
	dir := "/srv/se-off"
	sh(t, "rm -rf "+dir+" && mkdir -p "+dir)
	t.Cleanup(func() { sh(t, "rm -rf "+dir) })
	before := fileLabel(t, dir)
	mount := func(relabel bool) string {
		return fmt.Sprintf(`,"mounts":[{"container_path":"/vol","host_path":%q,"selinux_relabel":%t}]`, dir, relabel)
	}
	a, b := newPod(t, "se-off-a"), newPod(t, "se-off-b")
	writer := a.ctrWith("writer", mount(true))
	sh(t, "crictl exec "+writer+" sh -c 'echo open >/vol/f'")
	require.Equal(t, before, fileLabel(t, dir), "not relabelled")
	initLabel, _ := seLabels(t, writer)
	require.NotContains(t, initLabel, "container_t")
	require.Equal(t, "open", sh(t, "crictl exec "+b.ctrWith("other", mount(false))+" cat /vol/f"))
	var info struct {
		SELinux struct{ Enabled bool } `json:"selinux"`
	}
	require.NoError(t, json.Unmarshal([]byte(sh(t, "crictl info")), &info))
	require.False(t, info.SELinux.Enabled)
	t.Logf("enable_selinux = false: container label %s, volume %s", initLabel, before)
}
