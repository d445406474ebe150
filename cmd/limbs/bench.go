package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/limbs-dev/limbs/internal/perf"
	"github.com/limbs-dev/limbs/internal/perf/figures"
)

// `limbs bench` with no mode: the table (internal/perf/figures).
func init() {
	benchModes[""] = command{
		summary: "every figure next to its baseline, in one table",
		run:     runBenchTable,
	}
}

func runBenchTable(ctx context.Context, args []string) int {
	o := figures.Defaults()
	fs := flag.NewFlagSet("limbs bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: limbs bench [flags]\n\nMeasures limbs next to its baselines in one run and prints the table (docs/bench.md).\nGroups: %s.\n\nflags:\n", strings.Join(figures.Groups, ", "))
		fs.PrintDefaults()
	}
	jsonOut := fs.String("json", "", "also write the results as JSON to `FILE`")
	compare := fs.String("compare", "", "print this run next to an older one's JSON `FILE` (from --json), with the change of each figure")
	only := fs.String("only", "", "measure only these `GROUPS` (comma-separated)")
	skip := fs.String("skip", "", "skip these `GROUPS` (comma-separated)")
	limbsdPath := fs.String("limbsd", "", "static limbsd binary (default: limbsd next to this executable, else on PATH)")
	fs.StringVar(&o.Image, "image", o.Image, "the Docker sandboxes' image")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "round trips through limbsd, limbs serve and the raw PTY, per command")
	fs.IntVar(&o.MCPRounds, "mcp-rounds", o.MCPRounds, "MCP shell_run calls per command")
	fs.IntVar(&o.ExecRounds, "exec-rounds", o.ExecRounds, "docker exec rounds per command")
	fs.IntVar(&o.PollRounds, "poll-rounds", o.PollRounds, "tmux polling and wait-for-silence rounds per command (about 0.5 s each)")
	fs.IntVar(&o.MiB, "mib", o.MiB, "MiB of output of each throughput command")
	fs.IntVar(&o.ThroughputRuns, "throughput-runs", o.ThroughputRuns, "runs of each throughput case (one session, and --sessions at once)")
	fs.IntVar(&o.Sessions, "sessions", o.Sessions, "sessions printing at once in the second throughput case")
	fs.IntVar(&o.Creates, "creates", o.Creates, "cold, warm and docker run creates each")
	concurrent := fs.String("concurrent", "20,50,100", "`COUNTS` of creates at once (comma-separated)")
	fs.IntVar(&o.IdleSessions, "idle-sessions", o.IdleSessions, "extra idle sessions for limbsd's RSS per session")
	fs.IntVar(&o.IdleSandboxes, "idle-sandboxes", o.IdleSandboxes, "idle sandboxes for limbs serve's RSS and the host memory per sandbox")
	fs.IntVar(&o.Events, "events", o.Events, "events ingested per event log case")
	fs.IntVar(&o.FollowRounds, "follow-rounds", o.FollowRounds, "commands whose events are followed")
	if code, ok := parseFlagsOnly(fs, args, "bench"); !ok {
		return code
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"rounds", o.Rounds}, {"mcp-rounds", o.MCPRounds}, {"exec-rounds", o.ExecRounds}, {"poll-rounds", o.PollRounds},
		{"mib", o.MiB}, {"throughput-runs", o.ThroughputRuns}, {"sessions", o.Sessions}, {"creates", o.Creates},
		{"idle-sessions", o.IdleSessions}, {"idle-sandboxes", o.IdleSandboxes}, {"events", o.Events}, {"follow-rounds", o.FollowRounds}} {
		if n.v < 1 || n.v > 1_000_000 {
			fmt.Fprintf(os.Stderr, "limbs bench: --%s %d: give a count from 1 to 1000000\n", n.name, n.v)
			return 2
		}
	}
	o.Concurrent = nil
	for _, f := range strings.Split(*concurrent, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1000 {
			fmt.Fprintf(os.Stderr, "limbs bench: --concurrent %q: give counts from 1 to 1000, such as 20,50,100\n", *concurrent)
			return 2
		}
		o.Concurrent = append(o.Concurrent, n)
	}
	o.Only, o.Skip = groups(*only), groups(*skip)
	var old *perf.Report
	if *compare != "" {
		var err error
		if old, err = perf.ReadReport(*compare); err != nil {
			fmt.Fprintf(os.Stderr, "limbs bench: --compare: %v\n", err)
			return 2
		}
	}
	var err error
	if o.Limbsd, err = findLimbsd(*limbsdPath); err != nil {
		fmt.Fprintf(os.Stderr, "limbs bench: %v\n", err)
		return 1
	}
	if o.Limbs, err = os.Executable(); err != nil {
		fmt.Fprintf(os.Stderr, "limbs bench: finding this executable (it runs limbs serve): %v\n", err)
		return 1
	}
	o.Progress = os.Stderr
	// Ctrl-C stops the run: what it started is removed, then it exits. The
	// processes it starts are in process groups of their own, out of the
	// terminal's reach, so that they are stopped in order.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	rep, runErr := figures.Run(ctx, o)
	if rep == nil {
		fmt.Fprintf(os.Stderr, "limbs bench: %v\n", runErr)
		return 2
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "limbs bench: interrupted; what it started is removed; the figures so far:")
	}
	rep.Print(os.Stdout)
	if *jsonOut != "" {
		if err := rep.WriteFile(*jsonOut); err != nil {
			fmt.Fprintf(os.Stderr, "limbs bench: --json: %v\n", err)
			return 1
		}
	}
	if old != nil {
		fmt.Println()
		perf.Compare(os.Stdout, old, rep)
	}
	switch {
	case ctx.Err() != nil:
		return 130
	case runErr != nil:
		fmt.Fprintf(os.Stderr, "limbs bench: some figures could not be measured (notes above): %v\n", runErr)
		return 1
	}
	return 0
}

// groups splits a comma-separated list of groups.
func groups(s string) []string {
	var out []string
	for _, g := range strings.Split(s, ",") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	return out
}
