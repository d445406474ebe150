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
)

// command is one verb of the CLI. It returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) int
}

// commands is filled by the init functions of the files of this package,
// one file a verb (exec.go, shell.go, cp.go, serve.go, ...).
var commands = map[string]command{}

func main() {
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
