package perf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PSS is a process's proportional set size (its private pages plus its
// share of the pages it shares), in bytes: what summing several processes
// without counting shared libraries twice needs.
func PSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(ln, "Pss:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/smaps_rollup has no Pss", pid)
}

// Proc is one process of a tree, by its name in /proc/PID/comm.
type Proc struct {
	PID  int
	Comm string
	RSS  int64
	PSS  int64
}

// Tree is pid and its descendants, read from /proc.
func Tree(pid int) []Proc {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, err := ppid(p); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []Proc
	queue := []int{pid}
	for len(queue) > 0 && len(out) < 10000 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, readProc(p))
		queue = append(queue, children[p]...)
	}
	return out
}

func readProc(pid int) Proc {
	p := Proc{PID: pid}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		p.Comm = strings.TrimSpace(string(b))
	}
	p.RSS, _ = RSS(pid)
	p.PSS, _ = PSS(pid)
	return p
}

// ppid is the parent of pid, from /proc/PID/stat (the command name in
// parentheses may hold spaces: the fields after its last ")").
func ppid(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return strconv.Atoi(f[1])
}

// ContainerMemory is the host memory of one Docker container.
type ContainerMemory struct {
	Shim  Proc   // containerd-shim, the parent of the container's init
	Procs []Proc // the container's init and its descendants
	// PSS sums the PSS of the shim and of every process of the container.
	PSS int64
	// Cgroup is the container's memory cgroup usage (page cache included),
	// 0 when it cannot be read.
	Cgroup int64
}

// Find returns the first process of the container named comm.
func (m ContainerMemory) Find(comm string) (Proc, bool) {
	for _, p := range m.Procs {
		if p.Comm == comm {
			return p, true
		}
	}
	return Proc{}, false
}

// MemoryOf reads a running container's processes from /proc (the host's:
// it needs to run as root, or as the engine's user) and its cgroup.
func MemoryOf(ctx context.Context, container string) (ContainerMemory, error) {
	out, err := docker(ctx, "inspect", "--format", "{{.State.Pid}}", container)
	if err != nil {
		return ContainerMemory{}, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || pid <= 0 {
		return ContainerMemory{}, fmt.Errorf("container %s has no init pid (%q): is it running?", container, out)
	}
	m := ContainerMemory{Procs: Tree(pid)}
	if pp, err := ppid(pid); err == nil {
		m.Shim = readProc(pp)
	}
	m.PSS = m.Shim.PSS
	for _, p := range m.Procs {
		m.PSS += p.PSS
	}
	m.Cgroup = cgroupMemory(pid)
	return m, nil
}

// cgroupMemory reads the memory cgroup of pid: v2's memory.current, else
// v1's memory.usage_in_bytes.
func cgroupMemory(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0
	}
	for _, ln := range strings.Split(string(b), "\n") {
		f := strings.SplitN(ln, ":", 3)
		if len(f) != 3 || strings.Contains(f[2], "..") {
			continue
		}
		var path string
		switch {
		case f[0] == "0" && f[1] == "":
			path = filepath.Join("/sys/fs/cgroup", f[2], "memory.current")
		case strings.Contains(","+f[1]+",", ",memory,"):
			path = filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.usage_in_bytes")
		default:
			continue
		}
		if v, err := os.ReadFile(path); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			return n
		}
	}
	return 0
}
