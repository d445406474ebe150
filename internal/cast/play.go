package cast

import (
	"context"
	"fmt"
	"io"
	"time"
)

// PlayOptions set how Play paces a recording.
type PlayOptions struct {
	// Speed divides every pause (2: twice as fast); 0 or less: 1.
	Speed float64
	// MaxIdle, when positive, caps each pause (as recorded, before Speed).
	MaxIdle time.Duration
	// SizeHint writes the terminal's size (XTWINOPS CSI 8;ROWS;COLS t, which
	// terminals that allow it obey) at the start and at each resize.
	SizeHint bool
	// Now and Sleep are the clock; nil: the real one. Sleep waits d or
	// until ctx ends. Tests pass their own.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Play writes the recording's output to w with its timing, scaled by
// Speed and with pauses capped at MaxIdle, until its end or until ctx
// ends (then it returns ctx's error). The bytes are the session's own,
// in order, unchanged.
func Play(ctx context.Context, w io.Writer, r *Recording, o PlayOptions) error {
	speed := o.Speed
	if speed <= 0 {
		speed = 1
	}
	sleep := o.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	if o.SizeHint {
		if _, err := fmt.Fprintf(w, "\x1b[8;%d;%dt", r.Rows, r.Cols); err != nil {
			return err
		}
	}
	// Pauses add up on a schedule from the start, so that the time each
	// write takes does not pile up as drift.
	begin := now()
	var due, prev time.Duration
	for _, f := range r.Frames {
		if f.Kind != Output && !(f.Kind == Resize && o.SizeHint) {
			continue
		}
		gap := f.At - prev
		prev = f.At
		if o.MaxIdle > 0 && gap > o.MaxIdle {
			gap = o.MaxIdle
		}
		due += time.Duration(float64(gap) / speed)
		if d := due - now().Sub(begin); d > 0 {
			if err := sleep(ctx, d); err != nil {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		data := f.Data
		if f.Kind == Resize {
			var cols, rows int
			if _, err := fmt.Sscanf(string(f.Data), "%dx%d", &cols, &rows); err != nil || !validSize(cols, rows) {
				continue
			}
			data = fmt.Appendf(nil, "\x1b[8;%d;%dt", rows, cols)
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
