package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/limbs-dev/limbs/internal/perf/load"
)

func init() {
	benchModes["load"] = command{summary: "concurrent clients over sandboxes through limbs serve; every output checked", run: func(ctx context.Context, args []string) int {
		return runBenchLoad(ctx, "load", args)
	}}
	benchModes["faults"] = command{summary: "the load while limbsd, containers and limbs serve are killed; every command accounted for", run: func(ctx context.Context, args []string) int {
		return runBenchLoad(ctx, "faults", args)
	}}
	benchModes["soak"] = command{summary: "the load for a long time, RSS and open files sampled; their slopes must be flat", run: func(ctx context.Context, args []string) int {
		return runBenchLoad(ctx, "soak", args)
	}}
}

// benchBinary is the limbs that runs the bench's own limbs serve: this
// executable (its limbsd next to it).
func benchBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding this executable: %w; run bin/limbs from make build", err)
	}
	return exe, nil
}

func runBenchLoad(ctx context.Context, mode string, args []string) int {
	verb := "bench " + mode
	fs := flag.NewFlagSet("limbs "+verb, flag.ContinueOnError)
	opts := load.Options{Faults: mode == "faults"}
	defDuration := time.Minute
	switch mode {
	case "faults":
		defDuration = 2 * time.Minute
	case "soak":
		defDuration = 10 * time.Minute
	}
	fs.StringVar(&opts.Provider, "provider", "docker", "docker or local (a bubblewrap sandbox on this host)")
	fs.IntVar(&opts.Clients, "clients", 64, "concurrent clients, each with a session of its own")
	fs.IntVar(&opts.Sandboxes, "sandboxes", 8, "sandboxes the clients share (client i in sandbox i mod N)")
	fs.DurationVar(&opts.Duration, "duration", defDuration, "how long clients start new commands")
	fs.DurationVar(&opts.Timeout, "timeout", time.Minute, "a command not ended by then counts as hung")
	fs.Int64Var(&opts.Seed, "seed", 1, "seed of the choices of commands and faults")
	fs.Int64Var(&opts.MemoryMB, "memory-mb", 0, "memory limit of each sandbox (default: the provider's; 256 for faults)")
	jsonPath := fs.String("json", "", "also write the report as JSON to FILE")
	var kinds string
	if mode == "faults" {
		fs.DurationVar(&opts.FaultGap, "fault-gap", 0, "mean time between faults, after each one's recovery (default duration/12)")
		fs.BoolVar(&opts.Overlap, "overlap", false, "inject each fault without waiting for the recovery of the one before")
		fs.StringVar(&kinds, "kinds", "", "comma-separated fault kinds (default all: "+strings.Join(load.FaultKinds("docker"), ",")+")")
	}
	if mode == "soak" {
		fs.DurationVar(&opts.Sample, "sample", 10*time.Second, "how often RSS and open files are sampled")
	}
	if code, ok := parseFlagsOnly(fs, args, verb); !ok {
		return code
	}
	if kinds != "" {
		opts.FaultKinds = strings.Split(kinds, ",")
	}
	if mode == "soak" && opts.Sample <= 0 {
		fmt.Fprintln(os.Stderr, "limbs bench soak: --sample must be more than 0, such as 10s")
		return 2
	}
	bin, err := benchBinary()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs %s: %v\n", verb, err)
		return 1
	}
	opts.Limbs = bin
	opts.Log = os.Stderr
	// Ctrl-C ends the load; the sandboxes are removed before the exit.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	rep, err := load.Run(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs %s: %v\n", verb, err)
		return 1
	}
	rep.Print(os.Stdout)
	if *jsonPath != "" {
		if err := writeJSONFile(*jsonPath, rep); err != nil {
			fmt.Fprintf(os.Stderr, "limbs %s: %v\n", verb, err)
			return 1
		}
	}
	if !rep.Pass {
		return 1
	}
	return 0
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	return nil
}
