package seclabel

import (
	"errors"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fake is a Labeler whose go-selinux calls are recorded: InitLabels hands out
// "u:r:t:s0:c1,cN" with N counting up, or the level the options name.
type fake struct {
	*Labeler
	n                  int
	reserved, released []string
	chconed            map[string]string
	chconErr           error
}

func newFake() *fake {
	f := &fake{chconed: map[string]string{}}
	f.Labeler = &Labeler{enabled: true, levels: map[string]map[string]bool{},
		initLabels: func(opts []string) (string, string, error) {
			f.n++
			p := map[string]string{"user": "system_u", "role": "system_r", "type": "container_t", "level": "s0:c1,c" + string(rune('0'+f.n))}
			m := map[string]string{"user": "system_u", "role": "object_r", "type": "container_file_t"}
			for _, o := range opts {
				k, v := key(o), o[len(key(o))+1:]
				p[k] = v
			}
			m["level"] = p["level"]
			return p["user"] + ":" + p["role"] + ":" + p["type"] + ":" + p["level"],
				m["user"] + ":" + m["role"] + ":" + m["type"] + ":" + m["level"], nil
		},
		reserve: func(l string) error { f.reserved = append(f.reserved, l); return nil },
		release: func(l string) { f.released = append(f.released, l) },
		chcon: func(path, l string) error {
			if f.chconErr != nil {
				return f.chconErr
			}
			f.chconed[path] = l
			return nil
		},
	}
	return f
}

func TestOptions(t *testing.T) {
	o, err := Options(nil, "f")
	require.NoError(t, err)
	require.Empty(t, o)
	o, err = Options(&runtimeapi.SELinuxOption{User: "u", Role: "r", Type: "t", Level: "s0:c1,c2"}, "f")
	require.NoError(t, err)
	require.Equal(t, []string{"user:u", "role:r", "type:t", "level:s0:c1,c2"}, o)
	for _, lv := range []string{"s0", "s0-s0", "s0:c0.c1023", "s0:c1,c2,c5.c9"} {
		_, err := Options(&runtimeapi.SELinuxOption{Level: lv}, "f")
		require.NoError(t, err, lv)
	}
	for _, bad := range []*runtimeapi.SELinuxOption{
		{Level: "s0:c1,c2:x"}, {Level: "c1"}, {Level: "s0:c12345"},
		{Type: "container_t:s0"}, {User: "a b"}, {Role: "r,x"},
	} {
		_, err := Options(bad, "f")
		require.Error(t, err, "%v", bad)
		require.True(t, errdefs.IsInvalidArgument(err), "%v: %v", bad, err)
	}
}

func TestLevel(t *testing.T) {
	require.Equal(t, "s0:c1,c2", Level("system_u:system_r:container_t:s0:c1,c2"))
	require.Equal(t, "s0", Level("u:r:t:s0"))
	require.Equal(t, "", Level("u:r:t"))
	require.Equal(t, "", Level(""))
	require.Equal(t, "u:r:t", withoutLevel("u:r:t:s0:c1,c2"))
}

func TestMerge(t *testing.T) {
	// A container that sets only a type keeps the pod's user, role and level.
	got, err := merge("system_u:system_r:container_t:s0:c1,c2", []string{"type:spc_t"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"user:system_u", "role:system_r", "type:spc_t", "level:s0:c1,c2"}, got)
	got, err = merge("system_u:system_r:container_t:s0:c1,c2", nil)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"user:system_u", "role:system_r", "type:container_t", "level:s0:c1,c2"}, got)
	got, err = merge("", []string{"level:s0:c3,c4"})
	require.NoError(t, err)
	require.Equal(t, []string{"level:s0:c3,c4"}, got)
}

func TestPodLevelsCounted(t *testing.T) {
	f := newFake()
	a, err := f.Pod("a", nil)
	require.NoError(t, err)
	b, err := f.Pod("b", nil)
	require.NoError(t, err)
	require.NotEqual(t, Level(a.Process), Level(b.Process), "two pods, two levels")
	require.Equal(t, Level(a.Process), Level(a.Mount))

	// Two pods that name the same level share it; it goes back at the last release.
	s1, err := f.Pod("s1", &runtimeapi.SELinuxOption{Level: "s0:c7,c8"})
	require.NoError(t, err)
	s2, err := f.Pod("s2", &runtimeapi.SELinuxOption{Level: "s0:c7,c8"})
	require.NoError(t, err)
	require.Equal(t, "s0:c7,c8", Level(s1.Process))
	require.Equal(t, 2, f.Held(s1.Process))
	f.Release("s1", s1.Process)
	require.Empty(t, f.released)
	f.Release("s1", s1.Process) // once more: s2 still holds it
	require.Empty(t, f.released)
	f.Release("s2", s2.Process)
	require.Equal(t, []string{s2.Process}, f.released)
	f.Release("s2", s2.Process) // once more: nothing
	require.Len(t, f.released, 1)

	f.Release("a", a.Process)
	require.Equal(t, 0, f.Held(a.Process))
	require.Equal(t, 1, f.Held(b.Process))

	_, err = f.Pod("bad", &runtimeapi.SELinuxOption{Level: "bad"})
	require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
}

func TestReserveAfterRestart(t *testing.T) {
	f := newFake()
	p := "system_u:system_r:container_t:s0:c3,c9"
	require.NoError(t, f.Reserve("x", p))
	require.NoError(t, f.Reserve("y", p)) // a second pod of the same level
	require.NoError(t, f.Reserve("x", p)) // recovery run again: no second hold
	require.Equal(t, []string{p}, f.reserved, "reserved in go-selinux once")
	require.Equal(t, 2, f.Held(p))
	require.NoError(t, f.Reserve("z", ""))      // a pod made without SELinux
	require.NoError(t, f.Reserve("w", "u:r:t")) // no level
	require.Len(t, f.reserved, 1)
	f.Release("x", p)
	f.Release("y", p)
	require.Equal(t, []string{p}, f.released, "released when the last pod goes")
}

func TestContainer(t *testing.T) {
	f := newFake()
	podL, err := f.Pod("p", nil)
	require.NoError(t, err)
	c, err := f.Container(podL, nil)
	require.NoError(t, err)
	require.Equal(t, podL, c, "a container without options has its pod's labels")
	c, err = f.Container(podL, &runtimeapi.SELinuxOption{Type: "spc_t"})
	require.NoError(t, err)
	require.Equal(t, "system_u:system_r:spc_t:"+Level(podL.Process), c.Process, "the pod's level")
	c, err = f.Container(podL, &runtimeapi.SELinuxOption{Level: "s0:c5,c6"})
	require.NoError(t, err)
	require.Equal(t, "s0:c5,c6", Level(c.Process))
	require.Equal(t, "s0:c5,c6", Level(c.Mount))
	_, err = f.Container(podL, &runtimeapi.SELinuxOption{Level: "s0:x"})
	require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
	require.Equal(t, 1, f.Held(podL.Process), "containers take no hold of their own")
}

func TestRelabel(t *testing.T) {
	f := newFake()
	ml := "system_u:object_r:container_file_t:s0:c1,c2"
	require.NoError(t, f.Relabel("m", "/data/vol", ml))
	require.Equal(t, ml, f.chconed["/data/vol"])
	for _, p := range []string{"/", "/etc", "/usr/", "/var/lib", "/home", "/etc/../usr"} {
		err := f.Relabel("m", p, ml)
		require.True(t, errdefs.IsInvalidArgument(err), "%s: %v", p, err)
	}
	require.Len(t, f.chconed, 1, "refused paths are never touched")
	f.chconErr = syscall.ENOTSUP
	require.NoError(t, f.Relabel("m", "/nfs/vol", ml), "a filesystem without labels is left alone")
	f.chconErr = syscall.EPERM
	err := f.Relabel("m", "/x", ml)
	require.True(t, errors.Is(err, syscall.EPERM), "%v", err)
	require.NoError(t, f.Relabel("m", "/x", ""), "no mount label, nothing to do")
}

func TestDisabled(t *testing.T) {
	d := Disabled()
	require.False(t, d.Enabled())
	l, err := d.Pod("p", &runtimeapi.SELinuxOption{Level: "s0:c1,c2"})
	require.NoError(t, err)
	require.Equal(t, Labels{}, l)
	c, err := d.Container(l, &runtimeapi.SELinuxOption{Type: "t"})
	require.NoError(t, err)
	require.Equal(t, Labels{}, c)
	require.NoError(t, d.Reserve("p", "u:r:t:s0:c1,c2"))
	d.Release("p", "u:r:t:s0:c1,c2")
	require.NoError(t, d.Relabel("m", "/", "u:object_r:t:s0:c1,c2"), "nothing happens without SELinux")
	require.NoError(t, d.Chcon("/etc", "x"))
	require.Equal(t, "mode=1777", d.MountData("mode=1777", "u:object_r:t:s0:c1,c2"))
	var nilL *Labeler
	require.False(t, nilL.Enabled())
}

func TestMountData(t *testing.T) {
	f := newFake()
	require.Equal(t, `mode=1777,context="u:object_r:t:s0:c1,c2"`, f.MountData("mode=1777", "u:object_r:t:s0:c1,c2"))
}
