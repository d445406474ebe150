package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Desired states of a sandbox.
const (
	desireRunning = "running"
	desireStopped = "stopped"
)

// entry is one sandbox the control plane manages.
type entry struct {
	// op serialises lifecycle operations (create, start, stop, remove,
	// recover) on this sandbox; it is held across provider calls.
	op sync.Mutex
	// calls holds the api.calls answered and not yet recorded, which the
	// sandbox.deleted of its removal waits for (recordCall).
	calls callGate

	// Guarded by Plane.mu.
	rec     store.Record
	removed bool
	// removing is set while Remove runs: the death the removal causes
	// (which the provider reports) is not one to recover from.
	removing bool
	// unprimed marks a new pool sandbox whose default session is still
	// starting: it is not handed out yet.
	unprimed bool
	// recovering is set while a recovery runs, so that a second report of
	// the same death does not start another.
	recovering bool

	// Built once: the provider and token never change.
	tr     *client.Transport
	daemon *Daemon
	token  string
}

func (e *entry) closeIdle() {
	if e.tr != nil {
		e.tr.CloseIdleConnections()
	}
}

// lookup finds a client-visible sandbox by id or name.
func (s *Plane) lookup(idOrName string) (*entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.sandboxes[idOrName]; ok && e.rec.Pool == "" {
		return e, nil
	}
	for _, e := range s.sandboxes {
		if e.rec.Pool == "" && e.rec.Name == idOrName {
			return e, nil
		}
	}
	return nil, fmt.Errorf("sandbox %q: %w; list them with `limbs sandbox ls`", idOrName, wire.ErrNotFound)
}

// record returns a copy of e's record.
func (s *Plane) record(e *entry) store.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.rec
}

// update changes e's record and persists it with the events that say what
// happened, in one transaction, before the change shows in memory: whoever
// sees the new status sees its event. It fails with errGone when the
// sandbox was removed meanwhile.
func (s *Plane) update(e *entry, change func(r *store.Record), evs ...wire.Event) (store.Record, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	r, removed := e.rec, e.removed
	s.mu.Unlock()
	if removed {
		return r, fmt.Errorf("sandbox %s: %w", r.ID, errGone)
	}
	change(&r)
	r.UpdatedAt = time.Now().UTC()
	// The events first: whoever sees the new status finds its event.
	s.logEvents(r.ID, evs...)
	if err := s.db.Put(r); err != nil {
		return r, fmt.Errorf("saving sandbox %s in the registry: %w", r.ID, err)
	}
	s.mu.Lock()
	e.rec = r
	s.mu.Unlock()
	s.followStatus(e, r.Status)
	return r, nil
}

// event appends to the sandbox's event log when no record changes with
// it.
func (s *Plane) event(id string, typ wire.EventType, reason, message string) {
	s.logEvents(id, newEvent(typ, reason, message))
}

// add registers a new entry, refusing a name already in use.
func (s *Plane) add(rec store.Record) (*entry, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if rec.Pool == "" {
		if err := s.checkRoom(); err != nil {
			return nil, err
		}
		if other := s.named(rec.Name); other != nil {
			return nil, fmt.Errorf("a sandbox named %q exists already (%s); pick another name or remove it: %w", rec.Name, other.ID, wire.ErrConflict)
		}
	}
	if err := s.db.Put(rec); err != nil {
		return nil, fmt.Errorf("saving sandbox %s in the registry: %w", rec.ID, err)
	}
	s.logSandbox(rec)
	e := s.newEntry(rec)
	s.mu.Lock()
	s.sandboxes[rec.ID] = e
	s.mu.Unlock()
	return e, nil
}

// named returns the client-visible sandbox whose name or id is name, if
// any. s.writeMu is held, so no name changes meanwhile.
func (s *Plane) named(name string) *store.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.sandboxes {
		if e.rec.Pool == "" && (e.rec.Name == name || e.rec.ID == name) {
			r := e.rec
			return &r
		}
	}
	return nil
}

// forget drops e from memory and the registry; its event log says why
// (sandbox.deleted with reason) and is kept for the retention of deleted
// sandboxes.
func (s *Plane) forget(e *entry, reason string) error {
	// A call answered before the removal is recorded before it.
	e.calls.wait(2 * time.Second)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	e.removed = true
	delete(s.sandboxes, e.rec.ID)
	id := e.rec.ID
	s.mu.Unlock()
	e.closeIdle()
	s.unfollow(id, true)
	s.logEvents(id, newEvent(wire.EventSandboxDeleted, reason, ""))
	s.markDeleted(id)
	return s.db.Delete(id)
}

// specOf builds the provider spec of a record.
func (s *Plane) specOf(r store.Record) sandbox.Spec {
	return sandbox.Spec{
		ID:             r.ID,
		Name:           r.Name,
		Image:          r.Image,
		Instance:       s.db.Instance(),
		Cpus:           r.Limits.Cpus,
		MemoryMB:       r.Limits.MemoryMB,
		Pids:           r.Limits.Pids,
		Network:        sandbox.Network(r.Limits.Network),
		Env:            r.Env,
		Workspace:      r.Workspace,
		User:           r.Limits.User,
		ReadOnlyRoot:   r.Limits.ReadOnlyRoot,
		TmpMB:          r.Limits.TmpMB,
		Token:          r.Token,
		WorkspaceLower: r.Lower,

		MaxDiskMB:        cmp.Or(r.Limits.MaxDiskMB, s.opts.MaxDiskMB),
		MaxSessionDiskMB: cmp.Or(r.Limits.MaxSessionDiskMB, s.opts.MaxSessionDiskMB),
	}
}

// validate checks a create request and returns the record it asks for.
func (s *Plane) validate(req wire.CreateSandbox) (store.Record, error) {
	p, err := s.provider(req.Provider)
	if err != nil {
		return store.Record{}, err
	}
	switch req.Network {
	case "":
		req.Network = wire.NetworkNone
	case wire.NetworkNone, wire.NetworkBridge:
	default:
		return store.Record{}, fmt.Errorf("network %q: use \"none\" or \"bridge\": %w", req.Network, wire.ErrBadRequest)
	}
	if req.Cpus < 0 || req.MemoryMB < 0 || req.Pids < 0 || req.TmpMB < 0 || req.MaxDiskMB < 0 || req.MaxSessionDiskMB < 0 {
		return store.Record{}, fmt.Errorf("negative limit in cpus/memory_mb/pids/tmp_mb/max_disk_mb/max_session_disk_mb: use 0 for the default: %w", wire.ErrBadRequest)
	}
	if err := s.checkRequest(&req); err != nil {
		return store.Record{}, err
	}
	if req.Image == "" && p.Name() == s.opts.DefaultProvider {
		req.Image = s.opts.DefaultImage
	}
	id := newID("sb_")
	name := req.Name
	if name == "" {
		name = id
	}
	now := time.Now().UTC()
	return store.Record{
		ID:       id,
		Name:     name,
		Provider: p.Name(),
		Image:    req.Image,
		Limits: wire.Limits{
			Cpus: req.Cpus, MemoryMB: req.MemoryMB, Pids: req.Pids, Network: req.Network,
			TmpMB: req.TmpMB, ReadOnlyRoot: req.ReadOnlyRoot, User: req.User,
			MaxDiskMB: req.MaxDiskMB, MaxSessionDiskMB: req.MaxSessionDiskMB,
		},
		Env:       req.Env,
		SecretEnv: req.SecretEnv,
		Workspace: req.Workspace,
		Status:    wire.SandboxCreating,
		Desired:   desireRunning,
		Token:     newToken(),
		CreatedAt: now,
		UpdatedAt: now,
	}, nil
}

// Create creates a sandbox, from the warm pool when one matches. A
// provider's warning about it (no isolation, ignored limits) is in Message.
func (s *Plane) Create(ctx context.Context, req wire.CreateSandbox) (wire.Sandbox, error) {
	return s.createOver(ctx, req, "")
}

// createOver creates a sandbox whose workspace, when lower is set, is a
// copy-on-write view of the checkpoint tree lower (a fork).
func (s *Plane) createOver(ctx context.Context, req wire.CreateSandbox, lower string) (wire.Sandbox, error) {
	rec, err := s.validate(req)
	if err != nil {
		return wire.Sandbox{}, err
	}
	rec.Lower = lower
	if r, ok := s.pool.claim(rec); ok {
		s.log.Info("sandbox created from the warm pool", "sandbox", r.ID, "name", r.Name)
		return toWire(r), nil
	}
	e, err := s.add(rec)
	if err != nil {
		return wire.Sandbox{}, err
	}
	r, err := s.provision(ctx, e)
	if err != nil {
		return wire.Sandbox{}, err
	}
	return toWire(r), nil
}

// provision asks the provider to create e (already in the registry with
// status creating). On failure everything made for it is removed.
func (s *Plane) provision(ctx context.Context, e *entry) (store.Record, error) {
	e.op.Lock()
	defer e.op.Unlock()
	rec := s.record(e)
	p, err := s.provider(rec.Provider)
	var note string
	if err == nil {
		spec := s.specOf(rec)
		if n, ok := p.(Noter); ok {
			note = n.Note(spec)
		}
		if note != "" {
			s.log.Warn(note, "sandbox", rec.ID)
		}
		var inst sandbox.Instance
		inst, err = p.Create(ctx, spec)
		if err == nil {
			err = s.waitReady(ctx, e)
		}
		if err == nil {
			rec, err = s.update(e, func(r *store.Record) {
				r.ProviderID = inst.ProviderID
				r.Status = wire.SandboxRunning
				r.Message = note
				r.Limits = limitsInForce(p, spec, r.Limits)
			}, newEvent(wire.EventSandboxCreated, "", strings.TrimSpace(note+poolNote(rec))))
		}
	}
	if err != nil {
		// The client's context may be gone: clean up regardless.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if p != nil {
			if rerr := p.Remove(cctx, rec.ID); rerr != nil && !errors.Is(rerr, wire.ErrNotFound) {
				s.log.Warn("removing a sandbox whose create failed", "sandbox", rec.ID, "err", rerr)
			}
		}
		_ = s.forget(e, "create_failed")
		return rec, fmt.Errorf("creating sandbox with provider %s: %w", rec.Provider, err)
	}
	s.log.Info("sandbox created", "sandbox", rec.ID, "name", rec.Name, "provider", rec.Provider)
	return rec, nil
}

// remove deletes a sandbox and everything made for it.
func (s *Plane) remove(ctx context.Context, e *entry) error {
	// Before the lock: a recovery waiting for it must find the sandbox
	// being removed, and a death reported meanwhile must start none.
	s.mu.Lock()
	e.removing = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		e.removing = false
		s.mu.Unlock()
	}()
	e.op.Lock()
	defer e.op.Unlock()
	rec := s.record(e)
	if p, err := s.provider(rec.Provider); err == nil {
		if err := p.Remove(ctx, rec.ID); err != nil && !errors.Is(err, wire.ErrNotFound) {
			return fmt.Errorf("removing sandbox %s: %w", rec.ID, err)
		}
	} else {
		return fmt.Errorf("removing sandbox %s: its provider %s is not available: start limbs serve with it, then remove again: %w", rec.ID, rec.Provider, wire.ErrUnavailable)
	}
	s.log.Info("sandbox removed", "sandbox", rec.ID)
	return s.forget(e, "removed")
}

// stop stops a sandbox; it stays stopped until start.
func (s *Plane) stop(ctx context.Context, e *entry) (store.Record, error) {
	e.op.Lock()
	defer e.op.Unlock()
	rec, err := s.update(e, func(r *store.Record) { r.Desired = desireStopped })
	if err != nil {
		return rec, err
	}
	p, err := s.provider(rec.Provider)
	if err != nil {
		return rec, err
	}
	if err := p.Stop(ctx, rec.ID); err != nil {
		return rec, fmt.Errorf("stopping sandbox %s: %w", rec.ID, err)
	}
	e.closeIdle()
	return s.update(e, func(r *store.Record) {
		r.Status = wire.SandboxStopped
		r.Reason, r.Message = "", ""
	}, newEvent(wire.EventSandboxStopped, "", ""))
}

// start starts a stopped (or failed) sandbox.
func (s *Plane) start(ctx context.Context, e *entry) (store.Record, error) {
	e.op.Lock()
	defer e.op.Unlock()
	rec, err := s.update(e, func(r *store.Record) { r.Desired = desireRunning })
	if err != nil {
		return rec, err
	}
	p, err := s.provider(rec.Provider)
	if err != nil {
		return rec, err
	}
	if err := p.Start(ctx, rec.ID); err != nil {
		return rec, fmt.Errorf("starting sandbox %s: %w", rec.ID, err)
	}
	if err := s.waitReady(ctx, e); err != nil {
		return rec, fmt.Errorf("starting sandbox %s: %w", rec.ID, err)
	}
	if rec.LowerMounted {
		// A fork from the warm pool: its workspace is a mount in the
		// container, gone with the container's last run.
		if err := s.mountLower(ctx, rec, "restart"); err != nil {
			return rec, fmt.Errorf("starting sandbox %s: %w", rec.ID, err)
		}
	}
	return s.update(e, func(r *store.Record) {
		r.Status = wire.SandboxRunning
		r.Reason, r.Message = "", ""
	}, newEvent(wire.EventSandboxStarted, "", ""))
}

func poolNote(r store.Record) string {
	if r.Pool != "" {
		return " (for the warm pool)"
	}
	return ""
}

func toWire(r store.Record) wire.Sandbox {
	return wire.Sandbox{
		ID:        r.ID,
		Name:      r.Name,
		Provider:  r.Provider,
		Image:     r.Image,
		Status:    r.Status,
		CreatedAt: r.CreatedAt,
		Limits:    r.Limits,
		Reason:    r.Reason,
		Message:   r.Message,
	}
}
