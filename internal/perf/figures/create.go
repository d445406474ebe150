package figures

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/perf"
	"github.com/limbs-dev/limbs/internal/wire"
)

// coldCreate is a create the warm pool cannot serve: the pool's
// sandboxes have the default limits, this one a memory limit of its own.
func coldCreate(image string) wire.CreateSandbox {
	return wire.CreateSandbox{Image: image, MemoryMB: 1024}
}

// firstCommand is what `limbs exec --sandbox ID true` does on a new
// sandbox: session main, made on first use, then the command.
func firstCommand(ctx context.Context, sb *perf.Sandbox) error {
	c := sb.Client
	if _, err := c.GetSession(ctx, "main"); errors.Is(err, wire.ErrNotFound) {
		if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"}); err != nil && !errors.Is(err, wire.ErrConflict) {
			return fmt.Errorf("sandbox %s: creating session main: %w", sb.ID, err)
		}
	} else if err != nil {
		return fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	zero := 0.0
	r, err := c.Exec(ctx, "main", wire.Exec{Command: "true", YieldAfter: &zero})
	if err == nil && (r.Status != wire.StatusExited || r.ExitCode == nil || *r.ExitCode != 0) {
		err = fmt.Errorf("status %s", r.Status)
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: the first command: %w", sb.ID, err)
	}
	return nil
}

// createOnce creates a sandbox through s and runs its first command,
// returning the time both took and the sandbox (nil if the create
// failed). It times what a client does and nothing else: not
// Serve.NewSandbox, whose lookup of the container (a `docker ps`, about
// 100 ms on a loaded host) no client makes, so the sandbox returned has
// no Container.
func createOnce(ctx context.Context, s *perf.Serve, req wire.CreateSandbox) (time.Duration, *perf.Sandbox, error) {
	t0 := time.Now()
	r, err := s.Ctl.Sandboxes().Create(ctx, req)
	if err != nil {
		return time.Since(t0), nil, fmt.Errorf("creating a sandbox through limbs serve: %w", err)
	}
	sb := &perf.Sandbox{ID: r.ID, Client: s.Ctl.Sandbox(r.ID)}
	err = firstCommand(ctx, sb)
	return time.Since(t0), sb, err
}

// create: create-to-first-command, cold (a new container) alternating
// with `docker run --rm IMAGE true`, then from the warm pool.
func (e *env) create(ctx context.Context) error {
	const g = "create"
	s, err := e.dockerServe(ctx)
	if err != nil {
		return err
	}
	rm := func(sb *perf.Sandbox) {
		if sb != nil {
			_ = s.Remove(context.WithoutCancel(ctx), sb.ID)
		}
	}
	e.progress("%s: cold creates and docker run --rm, alternating (%d each)", g, e.o.Creates)
	var cold, run []time.Duration
	for range e.o.Creates {
		d, sb, err := createOnce(ctx, s, coldCreate(e.o.Image))
		rm(sb)
		if err != nil {
			return err
		}
		cold = append(cold, d)
		r, err := perf.DockerRun(ctx, e.o.Image, 1)
		if err != nil {
			return err
		}
		run = append(run, r...)
	}
	e.progress("%s: creates from the warm pool (%d)", g, e.o.Creates)
	var warm []time.Duration
	for range e.o.Creates {
		if err := waitPool(ctx, s, e.o.Image); err != nil {
			return err
		}
		d, sb, err := createOnce(ctx, s, wire.CreateSandbox{Image: e.o.Image})
		rm(sb)
		if err != nil {
			return err
		}
		warm = append(warm, d)
	}
	if err := waitPool(ctx, s, e.o.Image); err != nil {
		return err
	}
	runKey := "create/docker-run"
	e.rep.Add(ms(runKey, g, "docker run --rm IMAGE true", run, ""))
	e.rep.Add(ms("create/cold", g, "cold: create through limbs serve to the first command's result", cold, runKey))
	e.rep.Add(ms("create/warm", g, "warm pool: create to the first command's result", warm, runKey))
	c, _ := e.rep.Row("create/cold")
	e.rep.Target("cold create vs docker run --rm IMAGE true", "<= 1.10x (p50)", fmt.Sprintf("%.2fx (%s vs %s ms)", c.Ratio, perf.Num(c.P50), perf.Num(c.P50/c.Ratio)), c.Ratio <= 1.10)
	w, _ := e.rep.Row("create/warm")
	e.rep.Target("warm create, p50", "< 50 ms", perf.Num(w.P50)+" ms", w.P50 < 50)
	return nil
}

// concurrent: n creates at once, each to its first command's result; all
// must succeed. The sandboxes are removed after each n, 8 at a time.
func (e *env) concurrent(ctx context.Context) error {
	const g = "concurrent"
	s, err := e.dockerServe(ctx)
	if err != nil {
		return err
	}
	for _, n := range e.o.Concurrent {
		e.progress("%s: %d creates at once", g, n)
		var wg sync.WaitGroup
		d := make([]time.Duration, n)
		sbs := make([]*perf.Sandbox, n)
		errs := make([]error, n)
		t0 := time.Now()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				defer cancel()
				d[i], sbs[i], errs[i] = createOnce(cctx, s, coldCreate(e.o.Image))
			}()
		}
		wg.Wait()
		total := time.Since(t0)
		e.progress("%s: removing the %d sandboxes", g, n)
		removeAll(context.WithoutCancel(ctx), s, sbs)
		failed := 0
		var first error
		var ok []time.Duration
		for i, err := range errs {
			if err != nil {
				failed++
				first = cmpErr(first, err)
				continue
			}
			ok = append(ok, d[i])
		}
		key := fmt.Sprintf("concurrent/%d", n)
		row := ms(key, g, fmt.Sprintf("%d creates at once, each to its first command", n), ok, "")
		row.Note = fmt.Sprintf("%d/%d succeeded", n-failed, n)
		e.rep.Add(row)
		e.rep.Add(perf.Row{Key: key + "/total", Group: g, Name: fmt.Sprintf("%d creates at once, until the last answered", n), Unit: "s", Stats: perf.Once(total.Seconds())})
		if n == 100 || n == e.o.Concurrent[len(e.o.Concurrent)-1] {
			e.rep.Target(fmt.Sprintf("%d concurrent creates", n), "all succeed", fmt.Sprintf("%d/%d", n-failed, n), failed == 0)
		}
		if first != nil {
			e.rep.Note("%d creates at once: %d failed; the first error: %v", n, failed, first)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := waitPool(ctx, s, e.o.Image); err != nil {
			return err
		}
	}
	return nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// removeAll removes the sandboxes, 8 at a time.
func removeAll(ctx context.Context, s *perf.Serve, sbs []*perf.Sandbox) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, sb := range sbs {
		if sb == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_ = s.Remove(ctx, sb.ID)
		}()
	}
	wg.Wait()
}
