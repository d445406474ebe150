package load

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// rssKiB is VmRSS of pid from /proc (0 when it is gone).
func rssKiB(pid int) int64 {
	return statusField(pid, "VmRSS:")
}

func statusField(pid int, key string) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// fdCount is how many descriptors pid has open (0 when it is gone).
func fdCount(pid int) int {
	es, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0
	}
	return len(es)
}

// children are the child processes of pid (its main thread's).
func children(pid int) []int {
	p := strconv.Itoa(pid)
	b, _ := os.ReadFile("/proc/" + p + "/task/" + p + "/children")
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// descendants are every process below pid, depth first, at most 10,000.
func descendants(pid int) []int {
	var out []int
	stack := children(pid)
	for len(stack) > 0 && len(out) < 10000 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		out = append(out, p)
		stack = append(stack, children(p)...)
	}
	return out
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// processesMentioning lists the live processes whose command line holds s
// (a run's state dir: its serve, a local sandbox's limbsd or bwrap).
func processesMentioning(s string) []string {
	es, _ := os.ReadDir("/proc")
	var out []string
	self := os.Getpid()
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(s)) {
			continue
		}
		if st := statusState(pid); st == "Z" {
			continue // a zombie holds nothing; its parent reaps it
		}
		out = append(out, e.Name()+" "+strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " "))
	}
	return out
}

func statusState(pid int) string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "State:"); ok {
			return strings.Fields(rest)[0]
		}
	}
	return ""
}

// memAvailableKiB is MemAvailable from /proc/meminfo.
func memAvailableKiB() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// loadAverage is the 1-minute load average from /proc/loadavg.
func loadAverage() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// machine describes this host in one line: what the numbers were
// measured on (cores, memory, kernel, the load before the run).
func machine() string {
	var memKiB int64
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			memKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d cores, %.1f GiB, Linux %s, load average %.1f", runtime.NumCPU(), float64(memKiB)/(1<<20), strings.TrimSpace(string(kernel)), loadAverage())
}
