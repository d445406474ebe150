package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Recovery retries: a sandbox that cannot be started again after this many
// attempts stays failed until someone starts or removes it. The first retry
// waits recoverBackoff, each next one twice as long (a variable so that
// tests need not wait).
const recoverAttempts = 5

var recoverBackoff = time.Second

// reconcile loads the registry and matches it against what the providers
// report for this instance: known sandboxes are re-adopted, those the
// registry does not know are orphans of an earlier run and are removed.
// Nothing without this instance's label is ever looked at.
func (s *Plane) reconcile(ctx, bg context.Context) error {
	recs, err := s.db.List()
	if err != nil {
		return fmt.Errorf("reading the registry: %w", err)
	}
	for _, r := range recs {
		s.sandboxes[r.ID] = s.newEntry(r)
		s.logSandbox(r)
	}
	for name, p := range s.opts.Providers {
		insts, err := p.List(ctx, s.db.Instance())
		if err != nil {
			return fmt.Errorf("listing the sandboxes of provider %s: %w", name, err)
		}
		seen := map[string]bool{}
		for _, inst := range insts {
			seen[inst.ID] = true
			e, ok := s.sandboxes[inst.ID]
			if !ok || e.rec.Provider != name {
				s.log.Info("removing an orphan sandbox of an earlier run", "sandbox", inst.ID, "provider", name)
				if err := p.Remove(ctx, inst.ID); err != nil && !errors.Is(err, wire.ErrNotFound) {
					s.log.Warn("removing an orphan sandbox", "sandbox", inst.ID, "err", err)
				}
				continue
			}
			s.adopt(ctx, bg, p, e, inst)
		}
		for _, r := range recs {
			if r.Provider != name || seen[r.ID] {
				continue
			}
			e := s.sandboxes[r.ID]
			if r.Status == wire.SandboxCreating || r.Pool != "" {
				// An interrupted create (nobody got its id) or an idle
				// pool sandbox: nothing to keep.
				// What the provider made for it before the crash (a
				// directory) is the provider's to remove.
				if err := p.Remove(ctx, r.ID); err != nil && !errors.Is(err, wire.ErrNotFound) {
					s.log.Warn("removing what an interrupted create left", "sandbox", r.ID, "err", err)
				}
				_ = s.forget(e, "create_interrupted")
				continue
			}
			_, _ = s.update(e, func(r *store.Record) {
				r.Status = wire.SandboxFailed
				r.Reason = "missing"
				r.Message = fmt.Sprintf("the %s sandbox is gone (removed outside limbs?); remove it with `limbs sandbox rm %s`", name, r.ID)
			}, newEvent(wire.EventSandboxMissing, "missing", ""))
		}
	}
	for _, r := range recs {
		if _, ok := s.opts.Providers[r.Provider]; !ok {
			s.log.Warn("sandbox of a provider this limbs serve does not run; it is left alone", "sandbox", r.ID, "provider", r.Provider)
		}
	}
	return nil
}

// adopt takes back a sandbox this instance created before a restart.
func (s *Plane) adopt(ctx, bg context.Context, p Provider, e *entry, inst sandbox.Instance) {
	rec := e.rec
	switch {
	case rec.Status == wire.SandboxCreating:
		// Its create was interrupted: the client never got the id.
		s.log.Info("removing a sandbox whose create was interrupted", "sandbox", rec.ID)
		if err := p.Remove(ctx, rec.ID); err != nil && !errors.Is(err, wire.ErrNotFound) {
			s.log.Warn("removing a half-created sandbox", "sandbox", rec.ID, "err", err)
		}
		_ = s.forget(e, "create_interrupted")
	case rec.Desired == desireStopped:
		if inst.State.Running {
			if err := p.Stop(ctx, rec.ID); err != nil {
				s.log.Warn("stopping a sandbox that should be stopped", "sandbox", rec.ID, "err", err)
			}
		}
		_, _ = s.update(e, func(r *store.Record) { r.Status = wire.SandboxStopped })
	case inst.State.Running && e.healthy(ctx) == nil:
		_, _ = s.update(e, func(r *store.Record) { r.Status = wire.SandboxRunning }, newEvent(wire.EventSandboxAdopted, "", ""))
		s.log.Info("re-adopted a running sandbox", "sandbox", rec.ID)
	default:
		reason := inst.State.Reason
		if reason == "" && inst.State.Running {
			reason = "daemon_unreachable"
		} else if reason == "" {
			reason = "exited"
		}
		s.goRecover(bg, e, reason)
	}
}

// watch turns provider events into recoveries.
func (s *Plane) watch(ctx context.Context, evs <-chan sandbox.Event) {
	for {
		var ev sandbox.Event
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ev, ok = <-evs:
			if !ok {
				return
			}
		}
		s.mu.Lock()
		e := s.sandboxes[ev.ID]
		s.mu.Unlock()
		if e == nil {
			continue
		}
		switch ev.Kind {
		case sandbox.EventOOM:
			// A process was killed for memory; the sandbox may live on.
			// The provider folds it into the reason of a death it causes.
			s.event(ev.ID, wire.EventSandboxOOM, "oom_killed", "a process in the sandbox was killed: out of memory")
		case sandbox.EventDied:
			reason := ev.Reason
			if reason == "" {
				reason = "exited"
			}
			s.goRecover(ctx, e, reason)
		}
	}
}

// goRecover marks a sandbox that stopped on its own as failed, at once, so
// that no one reads its old status meanwhile, and brings it back in the
// background. A sandbox already being recovered, stopped on purpose or
// still being created is left alone.
func (s *Plane) goRecover(ctx context.Context, e *entry, reason string) {
	s.mu.Lock()
	busy := e.recovering || e.removed || e.removing || e.rec.Desired != desireRunning || e.rec.Status == wire.SandboxCreating
	if !busy {
		e.recovering = true
	}
	s.mu.Unlock()
	if busy {
		return
	}
	when := time.Now().UTC().Format(time.RFC3339)
	rec, err := s.update(e, func(r *store.Record) {
		r.Status = wire.SandboxFailed
		r.Reason = reason
		r.Message = fmt.Sprintf("recovering after %s at %s; retry in a few seconds", reason, when)
	}, newEvent(wire.EventSandboxDied, reason, ""))
	if err != nil {
		s.doneRecovering(e)
		return // removed meanwhile
	}
	e.closeIdle()
	s.log.Warn("sandbox stopped on its own; bringing it back", "sandbox", rec.ID, "reason", reason)
	if rec.Pool != "" {
		s.pool.refill() // a failed pool sandbox is replaced
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.doneRecovering(e)
		s.recover(ctx, e, reason, when)
	}()
}

func (s *Plane) doneRecovering(e *entry) {
	s.mu.Lock()
	e.recovering = false
	s.mu.Unlock()
}

// recover brings back a sandbox that stopped on its own. limbsd restores its
// sessions (cwd and exported environment) from its state dir when it starts
// again; the sandbox's status says what happened meanwhile. The lifecycle
// lock is held per attempt, not across the backoff, so that a stop or a
// remove meanwhile wins.
func (s *Plane) recover(ctx context.Context, e *entry, reason, when string) {
	backoff := recoverBackoff
	for attempt := 1; ; attempt++ {
		done, err := s.recoverAttempt(ctx, e, reason, when)
		if done {
			return
		}
		s.log.Warn("restarting a sandbox failed", "sandbox", s.record(e).ID, "attempt", attempt, "err", err)
		// A link or a foreign file in the sandbox's directories stays
		// there: say so at once instead of retrying.
		if attempt == recoverAttempts || ctx.Err() != nil || errors.Is(err, sandbox.ErrUnsafe) || errors.Is(err, sandbox.ErrImpostor) {
			_, _ = s.update(e, func(r *store.Record) {
				r.Message = fmt.Sprintf("stopped (%s) at %s and could not be restarted: %v; try `limbs sandbox start %s` or remove it", reason, when, err, r.ID)
			}, newEvent(wire.EventSandboxRecoveryFailed, reason, err.Error()))
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// recoverAttempt makes one attempt; done is true when there is nothing more
// to do (recovered, or no longer wanted).
func (s *Plane) recoverAttempt(ctx context.Context, e *entry, reason, when string) (done bool, err error) {
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	rec, gone := e.rec, e.removed || e.removing
	s.mu.Unlock()
	if gone || rec.Desired != desireRunning || rec.Status == wire.SandboxCreating {
		return true, nil // removed, stopped on purpose, or a create still owns it
	}
	p, err := s.provider(rec.Provider)
	if err != nil {
		return true, nil
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = p.Start(sctx, rec.ID)
	if err == nil {
		err = s.waitReady(sctx, e)
	}
	if err == nil && rec.LowerMounted {
		// A fork from the warm pool: its workspace went with the
		// container's last run.
		err = s.mountLower(sctx, rec, "restart")
	}
	cancel()
	if err != nil {
		return false, err
	}
	msg := fmt.Sprintf("recovered after %s at %s", reason, when)
	if _, err := s.update(e, func(r *store.Record) {
		r.Status = wire.SandboxRunning
		r.Reason = reason
		r.Message = msg
	}, newEvent(wire.EventSandboxRecovered, reason, msg)); err != nil {
		return true, nil
	}
	s.log.Info("sandbox recovered", "sandbox", rec.ID, "reason", reason)
	return true, nil
}
