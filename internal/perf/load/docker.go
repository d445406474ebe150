package load

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The docker provider names a sandbox's container limbs-ID.
func containerName(id string) string { return "limbs-" + id }

func dockerCmd(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// containerPIDs maps each named sandbox's container to the host PID of
// its init (tini), 0 for one not running.
func containerPIDs(ctx context.Context, ids []string) map[string]int {
	out := map[string]int{}
	if len(ids) == 0 {
		return out
	}
	args := []string{"inspect", "-f", "{{.Name}} {{.State.Pid}}"}
	for _, id := range ids {
		args = append(args, containerName(id))
	}
	s, _ := dockerCmd(ctx, args...)
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		pid, _ := strconv.Atoi(f[1])
		out[strings.TrimPrefix(strings.TrimPrefix(f[0], "/"), "limbs-")] = pid
	}
	return out
}

// limbsdOf is the limbsd under a container's init (the process whose
// comm is limbsd among its children), 0 when there is none.
func limbsdOf(initPID int) int {
	if initPID <= 0 {
		return 0
	}
	if comm(initPID) == "limbsd" {
		return initPID
	}
	for _, c := range children(initPID) {
		if comm(c) == "limbsd" {
			return c
		}
	}
	return 0
}

// instanceObjects lists the containers and volumes labelled with a
// control plane instance id.
func instanceObjects(ctx context.Context, instance string) (containers, volumes []string, err error) {
	filter := "label=limbs.instance=" + instance
	c, err := dockerCmd(ctx, "ps", "-aq", "--filter", filter)
	if err != nil {
		return nil, nil, err
	}
	v, err := dockerCmd(ctx, "volume", "ls", "-q", "--filter", filter)
	if err != nil {
		return nil, nil, err
	}
	return strings.Fields(c), strings.Fields(v), nil
}

// sweep removes what the engine still holds of an instance: the last
// resort after a run that could not remove its sandboxes through serve.
func sweep(ctx context.Context, instance string) {
	containers, volumes, err := instanceObjects(ctx, instance)
	if err != nil {
		return
	}
	if len(containers) > 0 {
		_, _ = dockerCmd(ctx, append([]string{"rm", "-f", "-v"}, containers...)...)
	}
	if len(volumes) > 0 {
		_, _ = dockerCmd(ctx, append([]string{"volume", "rm", "-f"}, volumes...)...)
	}
}

// cgroupMem is the memory cgroup of pid: its directory, the memory it
// charges (v2 memory.current, or v1 memory.usage_in_bytes, page cache
// included) and the anonymous and mapped part of it (rss from
// memory.stat).
func cgroupMem(pid int) (dir string, usage, rss int64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", 0, 0
	}
	v2 := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = filepath.Join("/sys/fs/cgroup", f[2])
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				dir = filepath.Join("/sys/fs/cgroup/memory", f[2])
				return dir, readInt(filepath.Join(dir, "memory.usage_in_bytes")), statField(filepath.Join(dir, "memory.stat"), "total_rss")
			}
		}
	}
	if v2 == "" {
		return "", 0, 0
	}
	return v2, readInt(filepath.Join(v2, "memory.current")), statField(filepath.Join(v2, "memory.stat"), "anon")
}

func statField(path, key string) int64 {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n
		}
	}
	return 0
}

func readInt(path string) int64 {
	b, _ := os.ReadFile(path)
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

func cgroupProcs(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}
