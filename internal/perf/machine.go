package perf

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine is what the numbers were measured on.
type Machine struct {
	Cores     int        `json:"cores"`
	CPU       string     `json:"cpu,omitempty"`
	MemoryMiB int64      `json:"memory_mib"`
	Kernel    string     `json:"kernel"`
	Docker    string     `json:"docker,omitempty"` // the engine's version; empty: none answered
	Load      [3]float64 `json:"load"`             // load average at the start (1, 5, 15 min)
	Go        string     `json:"go"`
	Time      time.Time  `json:"time"`
}

// ReadMachine reads the machine from /proc and the Docker engine's
// version from `docker version` (within 10 s; none if it does not answer).
func ReadMachine(ctx context.Context) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Time: time.Now().UTC()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				m.MemoryMiB = kb / 1024
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	m.Load = LoadAverage()
	m.Docker = DockerVersion(ctx)
	return m
}

// LoadAverage is /proc/loadavg's three figures.
func LoadAverage() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}

// DockerVersion is the engine's server version, or "" when no engine
// answers within 10 s.
func DockerVersion(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// String is the machine in one line, for a table's header.
func (m Machine) String() string {
	docker := m.Docker
	if docker == "" {
		docker = "none"
	}
	cpu := ""
	if m.CPU != "" {
		cpu = " (" + m.CPU + ")"
	}
	return fmt.Sprintf("%d cores%s, %.1f GiB, Linux %s, Docker %s, load %.2f %.2f %.2f, %s, %s",
		m.Cores, cpu, float64(m.MemoryMiB)/1024, m.Kernel, docker, m.Load[0], m.Load[1], m.Load[2], m.Go, m.Time.Format(time.RFC3339))
}
