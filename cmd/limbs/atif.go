package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/limbs-dev/limbs/internal/atif"
)

// atifTrajectory is the trajectory limbs export --format atif writes
// (internal/atif).
type atifTrajectory = atif.Trajectory

// exportATIF writes the run of limbs agent in a sandbox's event log as
// an ATIF trajectory (limbs export --format atif).
func exportATIF(ctx context.Context, cc *controlConn, sandbox, run, out string) error {
	c, err := cc.client()
	if err != nil {
		return err
	}
	events, err := fetchEvents(ctx, c.Client(), sandbox, 0)
	if err != nil {
		return err
	}
	t, err := atif.Build(events, run)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", sandbox, err)
	}
	write := func(w io.Writer) error { return atif.Write(w, t) }
	if out == "" {
		return write(os.Stdout)
	}
	return writeFileAtomic(out, write)
}
