package load

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// DensityOptions configure a density run: Count idle sandboxes with one
// session each, one command run in every one.
type DensityOptions struct {
	Limbs    string
	Provider string // docker (the default) or local
	Count    int    // sandboxes (default 100)
	Parallel int    // creates at once (default 4)
	Log      io.Writer
}

// FillStep is the create rate over one step of the fill.
type FillStep struct {
	Sandboxes int     `json:"sandboxes"` // created so far
	Seconds   float64 `json:"seconds"`   // since the fill's start
	PerSecond float64 `json:"per_second"`
	Create    Latency `json:"create"` // create-to-first-command of this step's sandboxes
}

// DensityReport is what a density run measured. Memory per sandbox is
// the host's (MemAvailable before and after the fill: containers, shims,
// their init, limbsd and bash, the page cache they brought in) and the
// sum of the sandboxes' memory cgroups.
type DensityReport struct {
	Provider string     `json:"provider"`
	Machine  string     `json:"machine"`
	Count    int        `json:"count"`
	Created  int        `json:"created"`
	Answered int        `json:"answered"` // sandboxes whose command answered with its token
	Seconds  float64    `json:"seconds"`  // the fill
	Steps    []FillStep `json:"steps"`
	Create   Latency    `json:"create"`

	HostMiBPerSandbox   float64  `json:"host_mib_per_sandbox"`
	CgroupMiBPerSandbox float64  `json:"cgroup_mib_per_sandbox"`     // usage, page cache included
	CgroupRSSMiBPerSB   float64  `json:"cgroup_rss_mib_per_sandbox"` // its rss (v1) or anon (v2) part
	LimbsdRSSMiB        float64  `json:"limbsd_rss_mib"`             // mean of the limbsds
	ServeMiBPerSandbox  float64  `json:"serve_mib_per_sandbox"`      // serve's RSS growth
	ProcessesPerSandbox float64  `json:"processes_per_sandbox"`      // in its cgroup
	HostProcessesPerSB  float64  `json:"host_processes_per_sandbox"` // every new process on the host (shims too)
	FDsPerSandbox       float64  `json:"fds_per_sandbox"`            // its processes' descriptors
	ServeFDsPerSandbox  float64  `json:"serve_fds_per_sandbox"`
	Measured            int      `json:"measured"` // sandboxes whose cgroup was read
	RemoveSeconds       float64  `json:"remove_seconds"`
	Leftovers           []string `json:"leftovers,omitempty"`
	Problems            []string `json:"problems,omitempty"`
	Pass                bool     `json:"pass"`
}

// Density fills a serve of its own with idle sandboxes, measures them,
// and removes them all, also when ctx is cancelled (Ctrl-C) midway.
func Density(ctx context.Context, opts DensityOptions) (*DensityReport, error) {
	if opts.Provider == "" {
		opts.Provider = "docker"
	}
	if opts.Count <= 0 {
		opts.Count = 100
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	r := &run{opts: Options{Provider: opts.Provider, Log: opts.Log}, tokens: map[string]int{}, started: time.Now()}
	r.logf = func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "%6.1fs  %s\n", time.Since(r.started).Seconds(), fmt.Sprintf(format, args...))
		}
	}
	// Serve's cap on sandboxes (256 by default) is lifted to the count.
	sv, err := startServe(ctx, opts.Limbs, opts.Provider, "--max-sandboxes", strconv.Itoa(max(opts.Count, 1)))
	if sv == nil {
		return nil, err
	}
	r.sv = sv
	r.ctl = sv.client("").Sandboxes()
	if err != nil {
		r.teardown(ctx)
		return nil, err
	}
	rep := &DensityReport{Provider: opts.Provider, Count: opts.Count, Machine: machine()}
	memBefore, procsBefore := memAvailableKiB(), processCount()
	serveRSS0, serveFDs0 := rssKiB(sv.pid()), fdCount(sv.pid())

	step := max(1, opts.Count/10)
	jobs := make(chan int)
	var mu sync.Mutex // guards the fields below
	var ids []string
	var all, stepLat []time.Duration
	var problems []string
	answered := 0
	start := time.Now()
	lastStep, lastN := start, 0
	var wg sync.WaitGroup
	for range opts.Parallel {
		wg.Go(func() {
			for i := range jobs {
				t0 := time.Now()
				id, err := r.densityOne(ctx, i)
				d := time.Since(t0)
				mu.Lock()
				if id != "" {
					ids = append(ids, id)
				}
				if err != nil {
					if len(problems) < 10 && ctx.Err() == nil {
						problems = append(problems, err.Error())
					}
				} else {
					answered++
					all = append(all, d)
					stepLat = append(stepLat, d)
				}
				if n := len(ids); n-lastN >= step || (n == opts.Count && n > lastN) {
					now := time.Now()
					fs := FillStep{Sandboxes: n, Seconds: now.Sub(start).Seconds(), PerSecond: float64(n-lastN) / now.Sub(lastStep).Seconds(), Create: summarize(stepLat)}
					rep.Steps = append(rep.Steps, fs)
					r.logf("%d sandboxes: %.2f creates/s over the last %d, create-to-first-command p50 %.0f ms, p99 %.0f ms", n, fs.PerSecond, n-lastN, fs.Create.P50, fs.Create.P99)
					lastStep, lastN, stepLat = now, n, nil
				}
				mu.Unlock()
			}
		})
	}
feed:
	for i := range opts.Count {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	rep.Seconds = time.Since(start).Seconds()
	rep.Created, rep.Answered = len(ids), answered
	rep.Create = summarize(all)
	r.ids = ids
	if ctx.Err() == nil && len(ids) > 0 {
		// Let the page cache and the daemons settle before reading.
		time.Sleep(2 * time.Second)
		n := float64(len(ids))
		rep.HostMiBPerSandbox = float64(memBefore-memAvailableKiB()) / 1024 / n
		rep.HostProcessesPerSB = float64(processCount()-procsBefore) / n
		rep.ServeMiBPerSandbox = float64(rssKiB(sv.pid())-serveRSS0) / 1024 / n
		rep.ServeFDsPerSandbox = float64(fdCount(sv.pid())-serveFDs0) / n
		if opts.Provider != "local" {
			r.measureCgroups(ctx, rep)
		}
	}
	r.logf("removing every sandbox of this serve (%d fully created)", len(ids))
	t0 := time.Now()
	left, _ := r.teardown(ctx)
	rep.RemoveSeconds = time.Since(t0).Seconds()
	rep.Leftovers = left
	rep.Problems = problems
	if ctx.Err() != nil {
		rep.Problems = append(rep.Problems, "interrupted")
	}
	if rep.Answered != opts.Count {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d of %d sandboxes answered their command", rep.Answered, opts.Count))
	}
	if len(left) > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d things left over", len(left)))
	}
	rep.Pass = len(rep.Problems) == 0
	return rep, nil
}

// densityOne creates sandbox i with a session and runs one command in it.
// The id is returned whenever the sandbox exists, so that it is removed.
func (r *run) densityOne(ctx context.Context, i int) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	sb, err := r.ctl.Create(cctx, wire.CreateSandbox{Name: fmt.Sprintf("density-%d", i)})
	if err != nil {
		return "", fmt.Errorf("creating sandbox %d: %w", i, err)
	}
	c := r.sv.client("/sandboxes/" + sb.ID)
	defer c.HTTPClient().CloseIdleConnections()
	if _, err := c.CreateSession(cctx, wire.CreateSession{Name: "main"}); err != nil {
		return sb.ID, fmt.Errorf("sandbox %s: creating its session: %w", sb.ID, err)
	}
	tok := newCommandToken()
	res, err := c.Exec(cctx, "main", wire.Exec{Command: "echo " + tok, Timeout: 60})
	if err != nil {
		return sb.ID, fmt.Errorf("sandbox %s: its command: %w", sb.ID, err)
	}
	if res.Output != tok+"\n" {
		return sb.ID, fmt.Errorf("sandbox %s: its command printed %q, want %q", sb.ID, res.Output, tok+"\n")
	}
	return sb.ID, nil
}

// measureCgroups reads each sandbox's memory cgroup, its processes and
// their descriptors.
func (r *run) measureCgroups(ctx context.Context, rep *DensityReport) {
	var usage, rss, limbsdRSS int64
	procs, fds, measured, limbsds := 0, 0, 0, 0
	for start := 0; start < len(r.ids); start += 100 {
		batch := r.ids[start:min(start+100, len(r.ids))]
		for _, init := range containerPIDs(ctx, batch) {
			dir, u, s := cgroupMem(init)
			if dir == "" {
				continue
			}
			measured++
			usage += u
			rss += s
			for _, p := range cgroupProcs(dir) {
				procs++
				fds += fdCount(p)
			}
			if l := limbsdOf(init); l != 0 {
				limbsdRSS += rssKiB(l)
				limbsds++
			}
		}
	}
	if measured == 0 {
		return
	}
	m := float64(measured)
	rep.Measured = measured
	rep.CgroupMiBPerSandbox = float64(usage) / (1 << 20) / m
	rep.CgroupRSSMiBPerSB = float64(rss) / (1 << 20) / m
	rep.ProcessesPerSandbox = float64(procs) / m
	rep.FDsPerSandbox = float64(fds) / m
	if limbsds > 0 {
		rep.LimbsdRSSMiB = float64(limbsdRSS) / 1024 / float64(limbsds)
	}
}

// processCount is how many processes the host runs.
func processCount() int {
	es, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range es {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// Print writes the report as tables.
func (rep *DensityReport) Print(w io.Writer) {
	fmt.Fprintf(w, "limbs bench density: %d idle %s sandboxes with one session each (%d created, %d answered their command), filled in %.1f s\n",
		rep.Count, rep.Provider, rep.Created, rep.Answered, rep.Seconds)
	fmt.Fprintf(w, "machine: %s at the start\n\n", rep.Machine)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sandboxes\tat s\tcreates/s\tp50 ms\tp99 ms\tmax ms\t")
	for _, s := range rep.Steps {
		fmt.Fprintf(tw, "%d\t%.1f\t%.2f\t%.0f\t%.0f\t%.0f\t\n", s.Sandboxes, s.Seconds, s.PerSecond, s.Create.P50, s.Create.P99, s.Create.Max)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ncreate-to-first-command (create, session, echo): p50 %.0f ms, p90 %.0f ms, p99 %.0f ms, max %.0f ms\n\n", rep.Create.P50, rep.Create.P90, rep.Create.P99, rep.Create.Max)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "per sandbox\t\n")
	fmt.Fprintf(tw, "  host memory (MemAvailable drop)\t%.1f MiB\n", rep.HostMiBPerSandbox)
	if rep.Measured > 0 {
		fmt.Fprintf(tw, "  memory cgroup usage (page cache included)\t%.1f MiB\n", rep.CgroupMiBPerSandbox)
		fmt.Fprintf(tw, "  memory cgroup rss\t%.1f MiB\n", rep.CgroupRSSMiBPerSB)
		fmt.Fprintf(tw, "  limbsd RSS (mean)\t%.1f MiB\n", rep.LimbsdRSSMiB)
		fmt.Fprintf(tw, "  processes in the sandbox\t%.1f\n", rep.ProcessesPerSandbox)
		fmt.Fprintf(tw, "  descriptors of those\t%.1f\n", rep.FDsPerSandbox)
	}
	fmt.Fprintf(tw, "  new host processes (shim included)\t%.1f\n", rep.HostProcessesPerSB)
	fmt.Fprintf(tw, "  limbs serve RSS\t%.2f MiB\n", rep.ServeMiBPerSandbox)
	fmt.Fprintf(tw, "  limbs serve descriptors\t%.1f\n", rep.ServeFDsPerSandbox)
	tw.Flush()
	fmt.Fprintf(w, "\nremoved in %.1f s\n", rep.RemoveSeconds)
	if len(rep.Leftovers) == 0 {
		fmt.Fprintln(w, "left over: nothing (containers and volumes of the instance, sandbox directories, processes)")
	} else {
		fmt.Fprintf(w, "left over:\n  %s\n", strings.Join(rep.Leftovers, "\n  "))
	}
	if rep.Pass {
		fmt.Fprintln(w, "PASS")
	} else {
		fmt.Fprintf(w, "FAIL:\n  %s\n", strings.Join(rep.Problems, "\n  "))
	}
}
