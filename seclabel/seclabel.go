// Package seclabel gives pods and containers their SELinux labels, as containerd's
// CRI plugin (enable_selinux) and CRI-O do: each pod gets a process label with an
// MCS level of its own ("s0:c12,c345"), reserved while the pod exists, and the
// matching mount label, which its relabelled volumes, its /dev/shm and its hosts,
// hostname and resolv.conf files carry. Two pods' processes, with different levels,
// cannot reach each other's files even when both run as container_t.
//
// The labels come from go-selinux (github.com/opencontainers/selinux): the default
// process and file types from the policy's contexts/lxc_contexts, the levels from
// its in-process MCS allocator. A Labeler of a node without SELinux (or with
// enable_selinux off) hands out empty labels and does nothing, so shimd behaves as
// if this package were not there.
package seclabel

import (
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/selinux/go-selinux"
	"github.com/opencontainers/selinux/go-selinux/label"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Labels are a pod's or a container's SELinux labels ("" = none: SELinux is off).
type Labels struct {
	// Process is the label its processes run under (OCI process.selinuxLabel),
	// e.g. "system_u:system_r:container_t:s0:c12,c345".
	Process string
	// Mount is the label of its files: the mounts runc makes (tmpfs, mqueue) and
	// the volumes relabelled for it (OCI linux.mountLabel), e.g.
	// "system_u:object_r:container_file_t:s0:c12,c345".
	Mount string
}

// Labeler allocates labels and relabels files. Its zero value is not usable: use
// New or Disabled.
type Labeler struct {
	enabled bool
	// levels are the pods (by id) holding each MCS level: two pods that ask the same
	// level (the kubelet gives a level to pods that share a volume) both hold it, and
	// it is released to the allocator when the last one goes (containerd counts them
	// in internal/cri/store/label). By id, a recovery that runs again holds nothing
	// twice.
	mu     sync.Mutex
	levels map[string]map[string]bool
	// The go-selinux calls, replaced in tests.
	initLabels func(opts []string) (process, mount string, err error)
	reserve    func(label string) error
	release    func(label string)
	chcon      func(path, label string) error
}

// Disabled is a Labeler of a node without SELinux: empty labels, no relabelling.
func Disabled() *Labeler { return &Labeler{levels: map[string]map[string]bool{}} }

// New returns the node's Labeler. With want false, or a kernel without SELinux, it is
// Disabled, and go-selinux is switched off for the whole process (as containerd does
// when enable_selinux is false), so that nothing in shimd's libraries labels anything.
func New(want bool) *Labeler {
	if !want || !selinux.GetEnabled() {
		selinux.SetDisabled()
		return Disabled()
	}
	return &Labeler{
		enabled: true, levels: map[string]map[string]bool{},
		initLabels: label.InitLabels, reserve: selinux.ReserveLabelV2, release: selinux.ReleaseLabel,
		chcon: func(path, l string) error { return label.Relabel(path, l, false) },
	}
}

// Enabled tells whether pods and containers get labels.
func (l *Labeler) Enabled() bool { return l != nil && l.enabled }

// Enforcing tells whether the kernel enforces the policy (for Status); false when
// the Labeler is disabled.
func (l *Labeler) Enforcing() bool {
	return l.Enabled() && selinux.EnforceMode() == selinux.Enforcing
}

// Pod allocates a pod's labels from its SELinuxOptions (nil: the policy's default
// container type and a fresh MCS level) and holds the level until Release. The
// error wraps errdefs.ErrInvalidArgument for bad options.
func (l *Labeler) Pod(id string, opts *runtimeapi.SELinuxOption) (Labels, error) {
	if !l.Enabled() {
		return Labels{}, nil
	}
	o, err := Options(opts, "config.linux.security_context.selinux_options")
	if err != nil {
		return Labels{}, err
	}
	p, m, err := l.initLabels(o)
	if err != nil {
		return Labels{}, fmt.Errorf("SELinux labels of %v: %w", o, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// InitLabels has reserved the level in go-selinux; hold it here.
	l.hold(id, Level(p))
	return Labels{Process: p, Mount: m}, nil
}

// Reserve makes pod id hold the level of its recovered process label: a restart
// keeps each pod's level, and no new pod gets one of them.
func (l *Labeler) Reserve(id, process string) error {
	lv := Level(process)
	if !l.Enabled() || lv == "" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.levels[lv]) == 0 {
		if err := l.reserve(process); err != nil && !errors.Is(err, selinux.ErrMCSAlreadyExists) {
			return err
		}
	}
	l.hold(id, lv)
	return nil
}

// hold records that pod id holds level lv; l.mu is held.
func (l *Labeler) hold(id, lv string) {
	if lv == "" {
		return
	}
	if l.levels[lv] == nil {
		l.levels[lv] = map[string]bool{}
	}
	l.levels[lv][id] = true
}

// Release lets pod id go of its level (RemovePodSandbox, or a Run undone); the
// allocator may hand it out again once no pod holds it.
func (l *Labeler) Release(id, process string) {
	lv := Level(process)
	if !l.Enabled() || lv == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	holders := l.levels[lv]
	if !holders[id] {
		return
	}
	delete(holders, id)
	if len(holders) == 0 {
		delete(l.levels, lv)
		l.release(process)
	}
}

// Held is the number of pods holding the level of process.
func (l *Labeler) Held(process string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.levels[Level(process)])
}

// Container returns a container's labels: the pod's, with the fields its own
// SELinuxOptions set replacing the pod's. A container that sets no level keeps the
// pod's (CRI-O's rule; containerd gives a container that sets a type but no level
// a level of its own, which then cannot reach the pod's volumes). The pod holds
// the level; a level the container names itself is reserved in go-selinux's
// allocator until shimd restarts, so no pod is given it meanwhile.
func (l *Labeler) Container(podLabels Labels, opts *runtimeapi.SELinuxOption) (Labels, error) {
	if !l.Enabled() {
		return Labels{}, nil
	}
	own, err := Options(opts, "config.linux.security_context.selinux_options")
	if err != nil {
		return Labels{}, err
	}
	o, err := merge(podLabels.Process, own)
	if err != nil {
		return Labels{}, err
	}
	if len(o) == 0 { // the pod has no label (it cannot happen with SELinux on)
		return Labels{}, nil
	}
	p, m, err := l.initLabels(o)
	if err != nil {
		return Labels{}, fmt.Errorf("SELinux labels of %v: %w", o, err)
	}
	return Labels{Process: p, Mount: m}, nil
}

// merge is the pod's process label as InitLabels options (user, role, type,
// level), with own's replacing those it sets.
func merge(podProcess string, own []string) ([]string, error) {
	base, err := selinux.DupSecOpt(podProcess)
	if err != nil {
		return nil, fmt.Errorf("pod SELinux label %q: %w", podProcess, err)
	}
	set := map[string]bool{}
	for _, o := range own {
		set[key(o)] = true
	}
	var out []string
	for _, o := range base {
		if !set[key(o)] {
			out = append(out, o)
		}
	}
	return append(out, own...), nil
}

func key(opt string) string {
	for i := range len(opt) {
		if opt[i] == ':' {
			return opt[:i]
		}
	}
	return opt
}

// levelRE is the MLS range containerd and CRI-O accept: "s0", "s0-s0",
// "s0:c1,c2", "s0:c0.c1023".
var levelRE = regexp.MustCompile(`^s\d(-s\d)??(:c\d{1,4}(\.c\d{1,4})?(,c\d{1,4}(\.c\d{1,4})?)*)?$`)

// Options turns CRI SELinuxOptions into go-selinux's InitLabels options, in the
// order containerd gives them. A malformed level is an InvalidArgument naming field.
func Options(o *runtimeapi.SELinuxOption, field string) ([]string, error) {
	if o == nil {
		return nil, nil
	}
	if lv := o.GetLevel(); lv != "" && !levelRE.MatchString(lv) {
		return nil, fmt.Errorf("%s.level: %q is not an SELinux level (such as s0:c1,c2): %w", field, lv, errdefs.ErrInvalidArgument)
	}
	var out []string
	for _, kv := range [][2]string{{"user", o.GetUser()}, {"role", o.GetRole()}, {"type", o.GetType()}, {"level", o.GetLevel()}} {
		if kv[1] != "" {
			if err := plainField(kv[0], kv[1]); err != nil {
				return nil, fmt.Errorf("%s.%s: %w", field, kv[0], err)
			}
			out = append(out, kv[0]+":"+kv[1])
		}
	}
	return out, nil
}

// plainField refuses a user, role or type with a colon or a space: it would splice
// fields into the label.
func plainField(k, v string) error {
	if k == "level" {
		return nil // levelRE
	}
	for _, r := range v {
		if r == ':' || r == ' ' || r == ',' || r == '\n' {
			return fmt.Errorf("%q is not an SELinux identifier: %w", v, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Level is the MLS/MCS level of a label ("" when it has none): the fourth field on.
func Level(l string) string {
	n := 0
	for i := range len(l) {
		if l[i] == ':' {
			n++
			if n == 3 {
				return l[i+1:]
			}
		}
	}
	return ""
}

// Defaults are the policy's default container process and file labels, without a
// level (its contexts/lxc_contexts); "" when it has none or the Labeler is disabled.
func (l *Labeler) Defaults() (process, file string) {
	if !l.Enabled() {
		return "", ""
	}
	p, f := selinux.ContainerLabels() //nolint:staticcheck // the one way to read lxc_contexts
	selinux.ReleaseLabel(p)
	return withoutLevel(p), withoutLevel(f)
}

func withoutLevel(l string) string {
	if lv := Level(l); lv != "" {
		return l[:len(l)-len(lv)-1]
	}
	return l
}
