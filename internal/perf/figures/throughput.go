package figures

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/perf"
	"github.com/limbs-dev/limbs/internal/wire"
)

// producer prints mib MiB of text lines in large blocks.
func producer(mib int) string {
	return fmt.Sprintf("yes 'the quick brown fox jumps over the lazy dog 0123456789 the quick brown fox' | head -c %d", mib<<20)
}

// throughput: MiB/s of one command printing o.MiB through limbsd's API,
// in one session and in o.Sessions at once, next to the same producer
// read by as many raw PTY read loops at once. Each run of limbs and of the
// floor alternate, so that both see the same machine.
func (e *env) throughput(ctx context.Context) error {
	const g = "throughput"
	l, err := e.daemon(ctx)
	if err != nil {
		return err
	}
	for _, n := range []int{1, e.o.Sessions} {
		// As many runs with many sessions as with one: a single run of
		// the busiest case swung its ratio by a fifth from one bench to
		// the next.
		runs := e.o.ThroughputRuns
		sessions := make([]string, n)
		for i := range sessions {
			if sessions[i], err = l.Session(ctx, fmt.Sprintf("tp%d-%d", n, i)); err != nil {
				return err
			}
		}
		e.progress("%s: %d MiB in %d session(s) at once, %d run(s), and as many raw PTY loops", g, e.o.MiB, n, runs)
		var api, raw []float64
		total := float64(n * e.o.MiB)
		for range runs {
			d, err := rawLoops(ctx, n, e.o.MiB)
			if err != nil {
				return err
			}
			raw = append(raw, total/d.Seconds())
			if d, err = apiOutput(ctx, l.Client, sessions, e.o.MiB); err != nil {
				return err
			}
			api = append(api, total/d.Seconds())
		}
		what := "1 session"
		if n > 1 {
			what = fmt.Sprintf("%d sessions at once", n)
		}
		rawKey := fmt.Sprintf("throughput/raw-pty/%d", n)
		apiKey := fmt.Sprintf("throughput/limbsd-api/%d", n)
		e.rep.Add(perf.Row{Key: rawKey, Group: g, Name: fmt.Sprintf("raw PTY read loop, %s (%d MiB each)", what, e.o.MiB), Unit: "MiB/s", Higher: true, Stats: perf.Summarize(raw)})
		e.rep.Add(perf.Row{Key: apiKey, Group: g, Name: fmt.Sprintf("limbs exec via limbsd's API, %s (%d MiB each)", what, e.o.MiB), Unit: "MiB/s", Higher: true, Stats: perf.Summarize(api), Baseline: rawKey})
		a, _ := e.rep.Row(apiKey)
		e.rep.Target("throughput, "+what+", vs the raw PTY loop", ">= 0.80", fmt.Sprintf("%.2f (%s vs %s MiB/s)", a.Ratio, perf.Num(a.P50), perf.Num(a.P50/a.Ratio)), a.Ratio >= 0.8)
	}
	return nil
}

// rawLoops runs n producers on n raw PTYs at once, each read to its end
// by a goroutine of its own, and returns the time until the last ended.
func rawLoops(ctx context.Context, n, mib int) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, got, err := perf.ReadLoop(ctx, producer(mib))
			if err == nil && got < int64(mib)<<20 {
				err = fmt.Errorf("the raw PTY loop read %d bytes of %d", got, int64(mib)<<20)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	for _, err := range errs {
		if err != nil {
			return d, err
		}
	}
	return d, nil
}

// apiOutput runs the producer in each session at once through the API
// and returns the time until the last result arrived.
func apiOutput(ctx context.Context, c *client.Client, sessions []string, mib int) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, len(sessions))
	t0 := time.Now()
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			yield := 60.0
			r, err := c.Exec(ctx, s, wire.Exec{Command: producer(mib), YieldAfter: &yield})
			for range 10 { // 10 minutes at most
				if err != nil || r.Status != wire.StatusRunning {
					break
				}
				r, err = c.Wait(ctx, s, wire.Wait{YieldAfter: &yield})
			}
			if err == nil && (r.Status != wire.StatusExited || r.OutputBytes < int64(mib)<<20) {
				err = fmt.Errorf("the producer in session %s: status %s, %d bytes of output; want exited and %d", s, r.Status, r.OutputBytes, int64(mib)<<20)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	for _, err := range errs {
		if err != nil {
			return d, err
		}
	}
	return d, nil
}
