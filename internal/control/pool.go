package control

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// pool keeps sandboxes created and started ahead of demand, per image, with
// the default provider and default limits. Pool members live in the registry
// like any sandbox, with Record.Pool set to their image, and are invisible
// to clients until a create claims one.
type pool struct {
	s    *Plane
	want map[string]int
	kick chan struct{}
}

func newPool(s *Plane, want map[string]int) *pool {
	return &pool{s: s, want: want, kick: make(chan struct{}, 1)}
}

func (p *pool) start(ctx context.Context) {
	p.s.wg.Add(1)
	go func() {
		defer p.s.wg.Done()
		p.run(ctx)
	}()
}

// refill asks the background loop to top the pool up.
func (p *pool) refill() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// claim hands over a ready pool sandbox matching rec (a validated create
// request) or nil. Only plain requests match: the pool's image, the default
// provider, default limits, no env and no workspace, because those are fixed
// when a sandbox is created.
func (p *pool) claim(rec store.Record) (store.Record, bool) {
	if rec.Lower != "" {
		return store.Record{}, false
	}
	return p.take(rec, "taken from the warm pool")
}

// claimFork hands over a ready pool sandbox for a fork whose workspace
// the caller then mounts over the pool sandbox's (Plane.forkFromPool):
// the record names the tree as its lower layer, mounted.
//
// A fork's limits are its source's as recorded, with the provider's
// defaults filled in: they match a pool sandbox whose recorded limits are
// the same.
func (p *pool) claimFork(rec store.Record) (store.Record, bool) {
	if rec.Lower == "" {
		return store.Record{}, false
	}
	rec.LowerMounted = true
	return p.take(rec, "taken from the warm pool for a fork")
}

func (p *pool) take(rec store.Record, why string) (store.Record, bool) {
	s := p.s
	plain := rec.Limits == (wire.Limits{Network: wire.NetworkNone})
	if rec.Provider != s.opts.DefaultProvider || !plain && rec.Lower == "" || len(rec.Env) > 0 || rec.Workspace != "" {
		return store.Record{}, false
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	defer p.refill()
	if s.named(rec.Name) != nil || s.checkRoom() != nil {
		return store.Record{}, false // let the normal path report the conflict or the cap
	}
	s.mu.Lock()
	var e *entry
	if p.want[rec.Image] > 0 {
		for _, c := range s.sandboxes {
			if c.rec.Pool == rec.Image && c.rec.Status == wire.SandboxRunning && !c.removed && !c.unprimed && (plain || c.rec.Limits == rec.Limits) {
				e = c
				break
			}
		}
	}
	var r store.Record
	if e != nil {
		r = e.rec
	}
	s.mu.Unlock()
	if e == nil {
		return store.Record{}, false
	}
	r.Pool = ""
	if rec.Name != rec.ID { // a name was asked for
		r.Name = rec.Name
	} else {
		r.Name = r.ID
	}
	r.CreatedAt = rec.CreatedAt
	r.UpdatedAt = rec.CreatedAt
	r.Lower, r.LowerMounted = rec.Lower, rec.LowerMounted
	if r.LowerMounted {
		r.Status = wire.SandboxCreating // until the fork is restored
	}
	s.logEvents(r.ID, newEvent(wire.EventSandboxClaimed, "", why))
	s.logSandbox(r)
	if err := s.db.Put(r); err != nil {
		s.log.Warn("claiming a pool sandbox", "sandbox", r.ID, "err", err)
		return store.Record{}, false
	}
	s.mu.Lock()
	e.rec = r
	s.mu.Unlock()
	return r, true
}

// run creates pool sandboxes until each image has its count, and removes
// members of pools no longer asked for. Failures back off so that a broken
// image does not spin.
func (p *pool) run(ctx context.Context) {
	backoff := time.Second
	p.refill()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		for {
			image, extra := p.next()
			if image == "" && extra == nil {
				break
			}
			var err error
			if extra != nil {
				err = p.s.remove(ctx, extra)
			} else {
				err = p.add(ctx, image)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.s.log.Warn("keeping the warm pool failed; retrying later", "image", image, "err", err, "retry_in", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, time.Minute)
				continue
			}
			backoff = time.Second
		}
	}
}

// next says what the pool lacks (an image to create) or has too much of (a
// member to remove), or neither. A failed member is replaced, not waited
// for: it holds no one's work.
func (p *pool) next() (string, *entry) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.want == nil {
		return "", nil // drained
	}
	members := map[string][]*entry{}
	var failed *entry
	for _, e := range s.sandboxes {
		switch {
		case e.rec.Pool == "":
		case e.rec.Status == wire.SandboxFailed:
			failed = e
		default:
			members[e.rec.Pool] = append(members[e.rec.Pool], e)
		}
	}
	images := make([]string, 0, len(p.want))
	for im := range p.want {
		images = append(images, im)
	}
	sort.Strings(images)
	for _, im := range images {
		if len(members[im]) < p.want[im] {
			return im, nil
		}
	}
	if failed != nil {
		return "", failed
	}
	for im, es := range members {
		if len(es) <= p.want[im] {
			continue
		}
		for _, e := range es {
			if e.rec.Status != wire.SandboxCreating {
				return "", e
			}
		}
	}
	return "", nil
}

func (p *pool) add(ctx context.Context, image string) error {
	rec, err := p.s.validate(wire.CreateSandbox{Image: image})
	if err != nil {
		return err
	}
	rec.Pool = image
	rec.Name = "pool-" + rec.ID
	e, err := p.s.add(rec)
	if err != nil {
		return err
	}
	p.s.mu.Lock()
	e.unprimed = true
	p.s.mu.Unlock()
	if _, err = p.s.provision(ctx, e); err != nil {
		return err
	}
	// The first session of a fresh sandbox is its slowest step (the shell
	// starts from cold caches): start the one clients use by default now.
	if err := e.startSession(ctx, defaultSession); err != nil {
		p.s.log.Warn("starting the default session of a pool sandbox", "sandbox", rec.ID, "err", err)
	}
	p.s.mu.Lock()
	e.unprimed = false
	p.s.mu.Unlock()
	return nil
}

// defaultSession is the session the CLI uses when none is named.
const defaultSession = "main"

// DrainPool stops filling the warm pool and removes its unclaimed
// sandboxes. Without it, pool sandboxes outlive the Plane like any other
// and the next one on the same state dir re-adopts them.
func (s *Plane) DrainPool(ctx context.Context) error {
	s.mu.Lock()
	s.pool.want = nil
	var members []*entry
	for _, e := range s.sandboxes {
		if e.rec.Pool != "" {
			members = append(members, e)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, e := range members {
		if err := s.remove(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PoolReady counts the pool sandboxes of image ready to be claimed.
func (s *Plane) PoolReady(image string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.sandboxes {
		if e.rec.Pool == image && e.rec.Status == wire.SandboxRunning && !e.unprimed {
			n++
		}
	}
	return n
}
