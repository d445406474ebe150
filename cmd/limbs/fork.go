package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/limbs-dev/limbs/internal/wire"
)

func init() {
	commands["fork"] = command{summary: "start N independent sandboxes from a sandbox's checkpoint", run: runFork}
}

func runFork(ctx context.Context, args []string) int {
	return exitCode("fork", forkVerb(ctx, args))
}

func forkVerb(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("limbs fork", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: limbs fork SANDBOX [--count N] [--checkpoint CP]

Creates N sandboxes like SANDBOX (its image and limits; from the warm pool
when it matches) and restores a checkpoint into each, in parallel: CP, or
a new checkpoint taken now. Each is independent: what one writes, no other
sees. Prints their ids and the disk their workspaces use.

flags:
`)
		fs.PrintDefaults()
	}
	cc := controlFlags(fs)
	count := fs.Int("count", 1, "how many sandboxes")
	cp := fs.String("checkpoint", "", "the checkpoint to start from (default: a new one)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"usage: limbs fork SANDBOX [--count N] [--checkpoint CP]"}
	}
	sbs, err := cc.client()
	if err != nil {
		return err
	}
	res, err := sbForkCall(ctx, sbs, fs.Arg(0), *count, *cp)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(res)
	}
	for _, sb := range res.Sandboxes {
		fmt.Printf("%s\t%s\n", sb.ID, safe(sb.Name))
	}
	if res.Shared {
		fmt.Printf("%d sandboxes from %s in %d ms; their workspaces share one copy of it, copy-on-write (%s written now)\n", len(res.Sandboxes), safe(res.Checkpoint), res.DurationMS, humanBytes(res.DiskBytes))
	} else {
		fmt.Printf("%d sandboxes from %s in %d ms; their workspaces use %s\n", len(res.Sandboxes), safe(res.Checkpoint), res.DurationMS, humanBytes(res.DiskBytes))
	}
	return nil
}

func sbForkCall(ctx context.Context, sbs interface {
	Fork(context.Context, string, wire.Fork) (wire.Forked, error)
}, sb string, n int, cp string) (wire.Forked, error) {
	return sbs.Fork(ctx, sb, wire.Fork{Count: n, Checkpoint: cp})
}
