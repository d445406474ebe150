package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
)

func init() {
	commands["rollback"] = command{summary: "put a sandbox's files and sessions back as a checkpoint has them", run: runRollback}
}

func runRollback(ctx context.Context, args []string) int {
	return exitCode("rollback", rollbackVerb(ctx, args))
}

func rollbackVerb(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("limbs rollback", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: limbs rollback SANDBOX [CHECKPOINT]

Restores CHECKPOINT (default: the newest) into SANDBOX: deleted files come
back, new ones go, modes and symlinks are as they were, and the recorded
sessions get new shells in their recorded cwd and environment (programs
running in them are ended). CHECKPOINT may be another sandbox's, as
SANDBOX/CHECKPOINT.

flags:
`)
		fs.PrintDefaults()
	}
	cc := controlFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	a := fs.Args()
	if len(a) < 1 || len(a) > 2 {
		return usageError{"usage: limbs rollback SANDBOX [CHECKPOINT]"}
	}
	sbs, err := cc.client()
	if err != nil {
		return err
	}
	cp := ""
	if len(a) == 2 {
		cp = a[1]
	} else if cp, err = newestCheckpoint(ctx, sbs, a[0]); err != nil {
		return err
	}
	res, err := sbs.Restore(ctx, a[0], cp)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(res)
	}
	fmt.Printf("restored %s: %d written (%s), %d removed, frozen %d ms, %d ms; sessions %s\n", safe(res.Checkpoint), res.Written, humanBytes(res.Bytes), res.Removed, res.FrozenMS, res.DurationMS, safe(strings.Join(res.Sessions, " ")))
	return nil
}
