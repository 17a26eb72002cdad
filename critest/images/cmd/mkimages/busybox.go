package main

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The busybox every stand-in image is based on: Debian bookworm's source
// package, built with upstream's defconfig plus a static link. Debian's
// own busybox-static is configured differently (its sh runs a built-in ls
// and it has no pgrep or ipcs), so it does not serve.
const (
	busyboxSourceVersion = "1:1.35.0-4+deb12u1"
	busyboxDsc           = "busybox_1.35.0-4+deb12u1.dsc"
	busyboxDscSHA256     = "9c01fe128b0eeded371c70e37d474fdb5055f71b5d0a778db44c6b0c62d3a7fa"
	// busyboxRecipe changes whenever the steps below change, so that the
	// cache key does.
	busyboxRecipe = "defconfig+static v2"
)

// busyboxConfig is set on top of "make defconfig". Static: the image has
// no libc. defconfig already uses busybox's own passwd/group functions
// (CONFIG_USE_BB_PWD_GRP), so "id nobody" needs no NSS modules.
// FEATURE_DI_ENV_HACK: Debian reverts upstream's ash change that keeps
// environment variables whose names are not shell names ("data-1=value-1")
// for the children of sh, and puts it back behind this option; upstream
// busybox (the e2e tests' busybox 1.37 image) keeps them, and Kubernetes'
// e2e tests check "sh -c env" for such variables from a ConfigMap.
var busyboxConfig = []string{"CONFIG_STATIC=y", "CONFIG_FEATURE_DI_ENV_HACK=y"}

const debSrcFile = "/etc/apt/sources.list.d/shimd-deb-src.sources"

const debSrcEntry = `# Added by shimd's critest/images/cmd/mkimages: busybox is built from
# Debian's source package (apt-get source busybox).
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`

// busyboxKey hashes everything the binary depends on: the source package,
// the configuration, the recipe, the compiler and the static libc.
func busyboxKey() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n", busyboxSourceVersion, busyboxDscSHA256, busyboxRecipe, strings.Join(busyboxConfig, "\n"))
	for _, args := range [][]string{{"gcc", "--version"}, {"dpkg-query", "-W", "-f", "${Version}", "libc6-dev"}} {
		out, err := exec.Command(args[0], args[1:]...).Output()
		if err != nil {
			return "", fmt.Errorf("%s: %w (apt-get install build-essential)", strings.Join(args, " "), err)
		}
		line, _, _ := strings.Cut(string(out), "\n")
		fmt.Fprintf(h, "%s\n", line)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// busybox returns the static binary, building it unless the cache has it.
// cache is /var/cache/shimd/images: the binary goes to busybox-<key>/, the
// downloaded source package to src/ (kept, so a rebuild needs no network).
func busybox(cache string, logf func(string, ...any)) (string, error) {
	key, err := busyboxKey()
	if err != nil {
		return "", err
	}
	out := filepath.Join(cache, "busybox-"+key, "busybox")
	if _, err := os.Stat(out); err == nil {
		logf("busybox: cached %s", out)
		return out, nil
	}
	logf("busybox: building %s from Debian's source package (about 2 minutes)", busyboxSourceVersion)
	srcDir := filepath.Join(cache, "src")
	if err := fetchBusyboxSource(srcDir, logf); err != nil {
		return "", err
	}
	// A fixed build directory: paths can end up in the binary. dpkg-source
	// also links the upstream tarball beside it, so give it its own parent.
	work := filepath.Join(cache, "build-busybox")
	build := filepath.Join(work, "busybox-1.35.0")
	if err := os.RemoveAll(work); err != nil {
		return "", err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := run(srcDir, "dpkg-source", "-x", busyboxDsc, build); err != nil {
		return "", err
	}
	epoch, err := exec.Command("dpkg-parsechangelog", "-l", filepath.Join(build, "debian/changelog"), "-STimestamp").Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-parsechangelog: %w", err)
	}
	// SOURCE_DATE_EPOCH fixes the build date busybox prints.
	env := append(os.Environ(), "SOURCE_DATE_EPOCH="+strings.TrimSpace(string(epoch)), "LC_ALL=C")
	steps := [][]string{
		{"make", "defconfig"},
		{"sh", "-c", configScript()},
		{"make", "-j" + fmt.Sprint(jobs()), "busybox"},
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir, cmd.Env = build, env
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("busybox: %s: %w\n%s", strings.Join(s, " "), err, tail(b, 30))
		}
	}
	bin := filepath.Join(build, "busybox")
	if err := checkStatic(bin); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	if err := copyFile(bin, out+".tmp"); err != nil {
		return "", err
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return "", err
	}
	logf("busybox: cached %s", out)
	return out, nil
}

// configScript turns busyboxConfig on in .config and lets kconfig settle
// dependent options.
func configScript() string {
	var b strings.Builder
	for _, kv := range busyboxConfig {
		name, _, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "sed -i -e '/^%s=/d' -e '/^# %s is not set/d' .config && echo '%s' >> .config && ", name, name, kv)
	}
	b.WriteString("yes '' | make oldconfig >/dev/null")
	for _, kv := range busyboxConfig {
		fmt.Fprintf(&b, " && grep -qx '%s' .config", kv)
	}
	return b.String()
}

// fetchBusyboxSource downloads the pinned source package into dir unless
// it is there, adding a deb-src entry for bookworm first if apt has none.
func fetchBusyboxSource(dir string, logf func(string, ...any)) error {
	dsc := filepath.Join(dir, busyboxDsc)
	if ok, _ := fileSHA256(dsc, busyboxDscSHA256); ok {
		return nil
	}
	for _, tool := range []string{"dpkg-source", "make", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing: apt-get install dpkg-dev build-essential", tool)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	get := func() error {
		return run(dir, "apt-get", "source", "--download-only", "busybox="+busyboxSourceVersion)
	}
	if err := get(); err != nil {
		logf("busybox: apt-get source failed (%v); adding %s and running apt-get update", err, debSrcFile)
		if err := os.WriteFile(debSrcFile, []byte(debSrcEntry), 0o644); err != nil {
			return err
		}
		if err := run(dir, "apt-get", "update"); err != nil {
			return err
		}
		if err := get(); err != nil {
			return err
		}
	}
	if ok, err := fileSHA256(dsc, busyboxDscSHA256); !ok {
		return fmt.Errorf("%s does not have the pinned sha256 %s (%v)", dsc, busyboxDscSHA256, err)
	}
	return nil
}

// checkStatic fails unless bin is an ELF executable without an interpreter.
func checkStatic(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", bin)
		}
	}
	return nil
}

func fileSHA256(path, want string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]) == want, nil
}

// busyboxApplets lists the applets the binary was built with.
func busyboxApplets(bin string) ([]string, error) {
	out, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", bin, err)
	}
	return strings.Fields(string(out)), nil
}

func run(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(b, 30))
	}
	return nil
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
