// Package figures is the table of `limbs bench`: every figure limbs
// promises measured in one run next to its baseline (round trips,
// throughput, sandbox creates, memory, the event log), with the targets
// of acceptance 2 of issue 17 as PASS/FAIL lines. Run measures the groups
// asked for and returns a perf.Report; the CLI prints it, writes it as
// JSON and compares it with an older one.
//
// One goroutine runs the groups one after another (a group's own workers
// are bounded and joined before it returns), so that no measure competes
// with another for the machine's cores. Everything it starts is removed
// before Run returns, also when ctx is cancelled (Ctrl-C). It must never
// assert a duration: the targets are printed, not tested.
package figures

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/limbs-dev/limbs/internal/perf"
)

// Groups are the groups of figures, in the order Run measures them.
var Groups = []string{"roundtrip", "throughput", "create", "concurrent", "density", "events"}

// Options say what Run measures and how many times. The defaults
// (Defaults) keep a whole run under 10 minutes on a 2-core machine.
type Options struct {
	Limbs  string // the limbs binary (it runs `limbs serve`)
	Limbsd string // the static limbsd binary
	Image  string // the sandboxes' image

	Only []string // groups to measure (none: all but Skip)
	Skip []string

	Rounds     int // round trips through limbs, and of the raw PTY floor
	MCPRounds  int // MCP tool calls
	ExecRounds int // docker exec, a new process each
	PollRounds int // tmux polling and waiting for silence: ~0.5 s each

	MiB            int // output of one throughput command
	ThroughputRuns int // runs of each throughput case
	Sessions       int // sessions at once in the other case

	Creates    int   // cold, warm and docker run creates each
	Concurrent []int // creates at once

	IdleSessions  int // extra idle sessions for limbsd's RSS per session
	IdleSandboxes int // idle sandboxes for serve's RSS and host memory per sandbox

	Events       int // events ingested per case
	FollowRounds int // commands whose events are followed

	Progress io.Writer // a line per step; nil: none
}

// Defaults are the counts of a full run.
func Defaults() Options {
	return Options{
		Image:  "limbs/base:latest",
		Rounds: 300, MCPRounds: 100, ExecRounds: 10, PollRounds: 5,
		MiB: 50, ThroughputRuns: 5, Sessions: 8,
		Creates: 5, Concurrent: []int{20, 50, 100},
		IdleSessions: 10, IdleSandboxes: 10,
		Events: 50_000, FollowRounds: 50,
	}
}

// Run measures the groups o asks for and returns their report. An error
// of one group is a note of the report and the next group runs; the
// errors are returned joined, with the report. An interrupted run (ctx
// done) returns what it has and ctx's error.
func Run(ctx context.Context, o Options) (*perf.Report, error) {
	for _, g := range append(slices.Clone(o.Only), o.Skip...) {
		if !slices.Contains(Groups, g) {
			return nil, fmt.Errorf("no group %q; the groups are %s", g, strings.Join(Groups, ", "))
		}
	}
	start := time.Now()
	e := &env{o: o, rep: &perf.Report{Machine: perf.ReadMachine(ctx), Started: start.UTC()}}
	defer e.close()
	run := map[string]func(context.Context) error{
		"roundtrip": e.roundTrip, "throughput": e.throughput, "create": e.create,
		"concurrent": e.concurrent, "density": e.density, "events": e.events,
	}
	var errs []error
	for _, g := range Groups {
		if len(o.Only) > 0 && !slices.Contains(o.Only, g) || slices.Contains(o.Skip, g) {
			continue
		}
		if err := ctx.Err(); err != nil {
			break
		}
		e.progress("%s", g)
		if err := run[g](ctx); err != nil && ctx.Err() == nil {
			e.rep.Note("%s: %v", g, err)
			e.progress("%s: %v", g, err)
			errs = append(errs, fmt.Errorf("%s: %w", g, err))
		}
	}
	e.rep.Took = time.Since(start).Seconds()
	if err := ctx.Err(); err != nil {
		return e.rep, err
	}
	return e.rep, errors.Join(errs...)
}

// env holds what the groups share, started on first use and stopped by
// close in the reverse order.
type env struct {
	o       Options
	rep     *perf.Report
	limbsd  *perf.Limbsd
	serve   *perf.Serve   // Docker provider, a warm pool of one
	sb      *perf.Sandbox // a Docker sandbox of serve, for round trips
	closers []func()
	docker  error // why Docker figures cannot be measured; checked once
	checked bool
}

func (e *env) progress(format string, args ...any) {
	if e.o.Progress != nil {
		fmt.Fprintf(e.o.Progress, "limbs bench: "+format+"\n", args...)
	}
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

// daemon is a limbsd on a Unix socket of the host.
func (e *env) daemon(ctx context.Context) (*perf.Limbsd, error) {
	if e.limbsd != nil {
		return e.limbsd, nil
	}
	l, err := perf.StartLimbsd(ctx, e.o.Limbsd)
	if err != nil {
		return nil, err
	}
	e.limbsd = l
	e.closers = append(e.closers, l.Close)
	return l, nil
}

// dockerOK says why the Docker figures cannot be measured, or nil.
func (e *env) dockerOK(ctx context.Context) error {
	if !e.checked {
		e.checked = true
		e.docker = perf.DockerReady(ctx, e.o.Image)
	}
	return e.docker
}

// dockerServe is a limbs serve with the Docker provider and a warm pool of
// one, once that pool is ready.
func (e *env) dockerServe(ctx context.Context) (*perf.Serve, error) {
	if e.serve != nil {
		return e.serve, nil
	}
	if err := e.dockerOK(ctx); err != nil {
		return nil, err
	}
	s, err := perf.StartServe(ctx, perf.ServeOptions{Limbs: e.o.Limbs, Limbsd: e.o.Limbsd, Provider: "docker", Pool: map[string]int{e.o.Image: 1}})
	if err != nil {
		return nil, err
	}
	e.serve = s
	e.closers = append(e.closers, s.Close)
	return s, waitPool(ctx, s, e.o.Image)
}

// waitPool waits (two minutes at most) for the warm pool to be ready, so
// that its refill does not compete with what is measured next.
func waitPool(ctx context.Context, s *perf.Serve, image string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := s.PoolReady(ctx, image)
		if err == nil && n >= 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool of %s was not ready within 2 minutes (%v); limbs serve says:\n%s", image, err, s.Logs())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dockerSandbox is a Docker sandbox of dockerServe (not from the pool)
// with a warm session main.
func (e *env) dockerSandbox(ctx context.Context) (*perf.Sandbox, error) {
	if e.sb != nil {
		return e.sb, nil
	}
	s, err := e.dockerServe(ctx)
	if err != nil {
		return nil, err
	}
	sb, err := s.NewSandbox(ctx, coldCreate(e.o.Image))
	if err != nil {
		return nil, err
	}
	if err := firstCommand(ctx, sb); err != nil {
		return nil, err
	}
	e.sb = sb
	return sb, nil
}

// ms is a row of latencies in ms.
func ms(key, group, name string, d []time.Duration, baseline string) perf.Row {
	return perf.Row{Key: key, Group: group, Name: name, Unit: "ms", Stats: perf.Summarize(perf.Millis(d)), Baseline: baseline}
}
