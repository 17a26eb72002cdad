package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// procInfo is one process from /proc.
type procInfo struct {
	PID, PPID int
	Cmdline   string
}

func (p procInfo) String() string {
	return fmt.Sprintf("pid %d (ppid %d): %s", p.PID, p.PPID, p.Cmdline)
}

// listProcs reads every process's cmdline and parent from /proc.
func listProcs() ([]procInfo, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		ppid := parseStatPPID(stat)
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		cmdline := strings.TrimSpace(string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
		if cmdline == "" {
			// Kernel thread or zombie: show the name from stat.
			if i, j := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')'); i >= 0 && j > i {
				cmdline = "[" + string(stat[i+1:j]) + "]"
			}
		}
		out = append(out, procInfo{PID: pid, PPID: ppid, Cmdline: cmdline})
	}
	return out, nil
}

// ParentPID is the parent of process pid, from /proc (0 if it is gone).
func ParentPID(pid int) int {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	return parseStatPPID(stat)
}

// Live tells whether process pid exists and is not a zombie (field 3 of
// /proc/PID/stat, after the command name, is not "Z").
func Live(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	j := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[j+1:]))
	return j >= 0 && len(f) > 0 && f[0] != "Z"
}

// parseStatPPID reads field 4 of /proc/PID/stat; the command name in
// parentheses may hold spaces and parentheses.
func parseStatPPID(stat []byte) int {
	j := bytes.LastIndexByte(stat, ')')
	if j < 0 {
		return 0
	}
	f := strings.Fields(string(stat[j+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// processesMatching returns the processes whose command line contains one
// of markers, other than this test process and the excluded daemons, plus all
// of their descendants (a shim's pause, runc and workload processes).
func processesMatching(markers []string, exclude []int) ([]procInfo, error) {
	procs, err := listProcs()
	if err != nil {
		return nil, err
	}
	skip := map[int]bool{os.Getpid(): true, 0: true}
	for _, pid := range exclude {
		skip[pid] = true
	}
	children := map[int][]procInfo{}
	for _, p := range procs {
		children[p.PPID] = append(children[p.PPID], p)
	}
	found := map[int]procInfo{}
	var walk func(p procInfo)
	walk = func(p procInfo) {
		if _, ok := found[p.PID]; ok || skip[p.PID] {
			return
		}
		found[p.PID] = p
		for _, c := range children[p.PID] {
			walk(c)
		}
	}
	for _, p := range procs {
		for _, m := range markers {
			if m != "" && strings.Contains(p.Cmdline, m) {
				walk(p)
				break
			}
		}
	}
	out := make([]procInfo, 0, len(found))
	for _, p := range found {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// ShimPIDs returns the pids of the containerd shims serving the containerd at address:
// the processes of a containerd-shim-* binary whose arguments hold "-address address".
// A shim's parent is not containerd (it daemonizes), so its arguments identify it.
func ShimPIDs(address string) ([]int, error) { return shimPIDs(address, "") }

// ShimPIDsOf returns those of ShimPIDs(address) started for task id ("-id id").
func ShimPIDsOf(address, id string) ([]int, error) { return shimPIDs(address, id) }

func shimPIDs(address, id string) ([]int, error) {
	procs, err := listProcs()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range procs {
		args := strings.Fields(p.Cmdline)
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim-") {
			continue
		}
		flags := map[string]string{}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" || args[i] == "-id" {
				flags[args[i]] = args[i+1]
			}
		}
		if flags["-address"] == address && (id == "" || flags["-id"] == id) {
			pids = append(pids, p.PID)
		}
	}
	sort.Ints(pids)
	return pids, nil
}
