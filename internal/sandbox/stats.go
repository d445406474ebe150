package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Stats is a sandbox's resource use at one moment, as its provider
// measured it (a provider's StatsProvider).
type Stats struct {
	// CPUNanos is the CPU time its processes used since the sandbox
	// started (cumulative: a rate needs two samples).
	CPUNanos uint64
	// MemoryBytes is the memory its processes use now; MemoryLimitBytes
	// its limit (0: none known).
	MemoryBytes      uint64
	MemoryLimitBytes uint64
	// Pids is how many processes (and threads, where the provider counts
	// them) it has.
	Pids uint64
	// Time is when the sample was taken.
	Time time.Time
}

// maxTreeProcs bounds how many processes TreeStats visits.
const maxTreeProcs = 4096

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture limbs runs on.
const clockTicks = 100

// TreeStats sums the CPU time and resident memory of process root and
// all its descendants, read from /proc (at most 4096 processes). It is
// how a provider whose sandboxes are host processes measures them.
func TreeStats(root int) (Stats, error) {
	st := Stats{Time: time.Now()}
	page := uint64(os.Getpagesize())
	queue := []int{root}
	for len(queue) > 0 && st.Pids < maxTreeProcs {
		pid := queue[0]
		queue = queue[1:]
		cpu, err := procCPU(pid)
		if err != nil {
			if pid == root {
				return Stats{}, err
			}
			continue // it exited meanwhile
		}
		st.Pids++
		st.CPUNanos += cpu
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 1 {
				rss, _ := strconv.ParseUint(f[1], 10, 64)
				st.MemoryBytes += rss * page
			}
		}
		// A child is listed under the thread that forked it (a Go
		// program's limbsd forks from any of its threads).
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
			if err != nil {
				continue
			}
			for _, s := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(s); err == nil && len(queue) < maxTreeProcs {
					queue = append(queue, c)
				}
			}
		}
	}
	return st, nil
}

// procCPU is the user and system CPU time of pid, in nanoseconds.
func procCPU(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	stt, _ := strconv.ParseUint(f[12], 10, 64)
	return (ut + stt) * (uint64(time.Second) / clockTicks), nil
}
