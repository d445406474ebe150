// Command limbs is the host side of limbs: the CLI that drives a limbsd
// (directly or through `limbs serve`), the control plane, and the tools built
// on them. It stays thin: flags, wiring and exit codes; the work lives in
// internal/.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/limbs-dev/limbs/internal/sysmon"
)

// command is one verb of the CLI. It returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) int
}

// commands is filled by the init functions of the files of this package,
// one file a verb (exec.go, shell.go, cp.go, serve.go, ...).
var commands = map[string]command{}

// awakeVerbs start themselves again with the Go runtime's sysmon kept
// awake (internal/sysmon): limbs serve, on the path of every forwarded
// command, and limbs bench, whose own Go client times the round trips
// (asleep, its wake-ups were 30-75 µs of each on a 2-core VM, a cost of
// the measuring client and not of limbs; docs/bench.md). Both live long;
// the other verbs are over before it would pay.
var awakeVerbs = map[string]bool{"serve": true, "bench": true}

func main() {
	// First thing, before the signal handler: a SIGTERM now ends the
	// process as it would any program starting.
	if len(os.Args) > 1 && awakeVerbs[os.Args[1]] {
		sysmon.Awake()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "limbs: unknown command %q; run 'limbs help' for the list\n", args[0])
		return 2
	}
	return c.run(ctx, args[1:])
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: limbs COMMAND [flags] [args]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'limbs COMMAND -h' for a command's flags.")
}
