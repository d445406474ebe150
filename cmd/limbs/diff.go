package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
)

func init() {
	commands["diff"] = command{summary: "show what changed in a sandbox between two checkpoints, or since one", run: runDiff}
}

func runDiff(ctx context.Context, args []string) int {
	return exitCode("diff", diffVerb(ctx, args))
}

func diffVerb(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("limbs diff", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: limbs diff SANDBOX [CHECKPOINT [CHECKPOINT|current]]

Lists the paths added (+), changed (~) and removed (-) from the first
checkpoint (default: the newest) to the second (default: current, what
the sandbox holds now), then a unified diff of the text files.

flags:
`)
		fs.PrintDefaults()
	}
	cc := controlFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	names := fs.Bool("name-only", false, "list the paths only")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	a := fs.Args()
	if len(a) < 1 || len(a) > 3 {
		return usageError{"usage: limbs diff SANDBOX [CHECKPOINT [CHECKPOINT|current]]"}
	}
	sbs, err := cc.client()
	if err != nil {
		return err
	}
	from, to := "", "current"
	if len(a) >= 2 {
		from = a[1]
	} else if from, err = newestCheckpoint(ctx, sbs, a[0]); err != nil {
		return err
	}
	if len(a) == 3 {
		to = a[2]
	}
	d, err := sbs.Diff(ctx, a[0], from, to)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(d)
	}
	for _, p := range d.Added {
		fmt.Println("+ " + safe(p))
	}
	for _, p := range d.Changed {
		fmt.Println("~ " + safe(p))
	}
	for _, p := range d.Removed {
		fmt.Println("- " + safe(p))
	}
	if !*names && d.Diff != "" {
		fmt.Println()
		// Line by line: the diff's newlines and tabs stay, every other
		// control character of the sandbox's files is escaped.
		for _, line := range strings.SplitAfter(d.Diff, "\n") {
			body, nl := strings.CutSuffix(line, "\n")
			fmt.Fprint(os.Stdout, strings.ReplaceAll(safe(body), `\t`, "\t"))
			if nl {
				fmt.Fprintln(os.Stdout)
			}
		}
	}
	return nil
}
