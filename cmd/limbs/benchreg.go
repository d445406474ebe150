package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
)

// benchModes are the modes of `limbs bench [MODE] [flags]`: "" is the
// table of every figure side by side with its baseline; the others (load,
// faults, soak, density) are registered by the init functions of their
// own files, as the verbs of commands are.
var benchModes = map[string]command{}

func init() {
	commands["bench"] = command{
		summary: "measure limbs next to its baselines; modes: load, faults, soak, density",
		run:     runBench,
	}
}

func runBench(ctx context.Context, args []string) int {
	mode := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		mode, args = args[0], args[1:]
	}
	m, ok := benchModes[mode]
	if !ok {
		names := make([]string, 0, len(benchModes))
		for n := range benchModes {
			if n != "" {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		if mode == "" {
			fmt.Fprintf(os.Stderr, "limbs bench: this build has no table; run one of the modes: %s\n", strings.Join(names, ", "))
		} else {
			fmt.Fprintf(os.Stderr, "limbs bench: unknown mode %q; the modes are: %s (or none, for the table)\n", mode, strings.Join(names, ", "))
		}
		return 2
	}
	return m.run(ctx, args)
}
