// Command vmctl starts, drives and stops the test VM (critest/vm) from a shell;
// the Makefile's vm-cgroupv2, vm-shell and vm-stop targets call it.
//
//	vmctl -dir DIR [-cgroup-driver systemd|cgroupfs] up   # build, boot, provision
//	vmctl -dir DIR -image IMG [-share TAG=PATH[:ro]]... start
//	vmctl -dir DIR run 'command'      # exit status is the command's
//	vmctl -dir DIR shell              # one guest command per line read
//	vmctl -dir DIR console 'command'  # through the serial console, when the agent is stuck
//	vmctl -dir DIR stop
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shimd/shimd/critest/vm"
)

type shares []vm.Share

func (s *shares) String() string { return fmt.Sprint(*s) }

func (s *shares) Set(v string) error {
	tag, path, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want TAG=PATH[:ro], got %q", v)
	}
	path, ro := strings.CutSuffix(path, ":ro")
	*s = append(*s, vm.Share{Tag: tag, Path: path, ReadOnly: ro})
	return nil
}

func main() {
	dir := flag.String("dir", "/var/tmp/shimd-vm", "the VM's directory")
	image := flag.String("image", "", "image directory (critest/vm/image.sh prints it)")
	mem := flag.Int("memory", 4096, "guest memory in MiB")
	cpus := flag.Int("cpus", 0, "guest CPUs (default: the host's, at most 4)")
	driver := flag.String("cgroup-driver", "systemd", "shimd's cgroup driver in the guest (up)")
	seLinux := flag.Bool("selinux", false, "boot the SELinux guest, enforcing, with enable_selinux (up)")
	var sh shares
	flag.Var(&sh, "share", "TAG=PATH[:ro], repeatable")
	flag.Parse()
	if flag.NArg() < 1 {
		fatal(fmt.Errorf("usage: vmctl [flags] up|start|run CMD|shell|console CMD|stop"))
	}
	ctx := context.Background()
	switch flag.Arg(0) {
	case "start":
		t0 := time.Now()
		v, err := vm.Start(ctx, vm.Config{Image: *image, Dir: *dir, Shares: sh, MemoryMiB: *mem, CPUs: *cpus})
		fatal(err)
		fmt.Printf("vmctl: guest up in %.1f s (qemu pid %d, console log %s/%s)\n", time.Since(t0).Seconds(), v.PID(), *dir, vm.ConsoleLog)
		v.Close()
	case "up":
		v, err := vm.Up(ctx, vm.UpConfig{Dir: *dir, CgroupDriver: *driver, Log: os.Stdout, MemoryMiB: *mem, CPUs: *cpus, SELinux: *seLinux})
		fatal(err)
		fmt.Printf("vmctl: guest ready, qemu pid %d; a shell: vmctl -dir %s shell, or the serial console %s\n", v.PID(), *dir, v.ConsolePath())
		v.Close()
	case "run":
		v, err := vm.Attach(*dir)
		fatal(err)
		code, err := v.Run(ctx, strings.Join(flag.Args()[1:], " "), os.Stdout)
		fatal(err)
		os.Exit(code)
	case "shell":
		v, err := vm.Attach(*dir)
		fatal(err)
		in := bufio.NewScanner(os.Stdin)
		for fmt.Fprint(os.Stderr, "shimd-vm# "); in.Scan(); fmt.Fprint(os.Stderr, "shimd-vm# ") {
			if code, err := v.Run(ctx, in.Text(), os.Stdout); err != nil || code != 0 {
				fmt.Fprintf(os.Stderr, "[exit %d %v]\n", code, err)
			}
		}
	case "console":
		v, err := vm.Attach(*dir)
		fatal(err)
		out, err := v.ConsoleRun(strings.Join(flag.Args()[1:], " "), time.Minute)
		fmt.Print(out)
		fatal(err)
	case "stop":
		v, err := vm.Attach(*dir)
		fatal(err)
		fatal(v.Stop(time.Minute))
	default:
		fatal(fmt.Errorf("unknown command %q", flag.Arg(0)))
	}
}

func fatal(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmctl:", err)
		os.Exit(1)
	}
}
