package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/limbs-dev/limbs/internal/perf/load"
)

func init() {
	benchModes["density"] = command{summary: "fill a limbs serve with idle sandboxes; memory, processes and files per sandbox", run: runBenchDensity}
}

func runBenchDensity(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("limbs bench density", flag.ContinueOnError)
	opts := load.DensityOptions{}
	fs.IntVar(&opts.Count, "count", 100, "idle sandboxes to create, each with one session that runs one command")
	fs.IntVar(&opts.Parallel, "parallel", 4, "creates at once")
	fs.StringVar(&opts.Provider, "provider", "docker", "docker or local")
	jsonPath := fs.String("json", "", "also write the report as JSON to FILE")
	if code, ok := parseFlagsOnly(fs, args, "bench density"); !ok {
		return code
	}
	bin, err := benchBinary()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs bench density: %v\n", err)
		return 1
	}
	opts.Limbs = bin
	opts.Log = os.Stderr
	// Ctrl-C stops the fill; every sandbox made so far is removed.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	rep, err := load.Density(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs bench density: %v\n", err)
		return 1
	}
	rep.Print(os.Stdout)
	if *jsonPath != "" {
		if err := writeJSONFile(*jsonPath, rep); err != nil {
			fmt.Fprintf(os.Stderr, "limbs bench density: %v\n", err)
			return 1
		}
	}
	if !rep.Pass {
		return 1
	}
	return 0
}
