package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/eventlog"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The follower of limbsd's journal: one goroutine per sandbox whose limbsd
// runs, from the moment the sandbox becomes running (created, started,
// recovered, adopted by a restarted limbs serve; warm pool ones too) until
// it is stopped or removed or the Plane closes. It follows limbsd's
// GET /v1/events?follow=true&output=bytes through the sandbox's own
// transport (the provider's Dial), from the journal position the event log
// keeps (Log.Upstream), and hands what it reads to Log.Ingest in batches,
// so that commands no client waited for and output no client read are in
// the log too. It reconnects with a capped, jittered backoff when limbsd
// restarts or the connection drops. See docs/events.md, "The follower".

const (
	followBackoffMin = 100 * time.Millisecond
	followBackoffMax = 5 * time.Second
	// followIdle: limbsd sends a keep-alive after 25 s of silence; a
	// stream silent for longer is dead, and is dialled again.
	followIdle = 60 * time.Second
	// A batch handed to Ingest: what is already read, up to these bounds.
	followBatchEvents = 1000
	followBatchBytes  = 4 << 20
	// followWindow: limbsd writes the follower's stream at most once in
	// this window (batch_ms), the first event after a quiet spell at
	// once. A stream written per event cost each command a wake-up of
	// limbs serve and an Ingest, a tenth of its round trip through limbs
	// serve; an event now reaches the log at most this much later.
	followWindow = 20 * time.Millisecond
)

// EventObserver is told what the followers ingest: the commands that
// ended and the output of the sessions (from the journal's
// command.finished and output events, so each is counted once whoever
// asked for it, and those no client waited for too) and how far each
// sandbox's log is behind its journal. *metrics.Metrics is one. Its
// methods must not block.
type EventObserver interface {
	CommandFinished(sandbox, command, status string, took time.Duration)
	Output(n int64)
	EventLogLag(sandbox string, events uint64, age time.Duration)
	ForgetSandbox(sandbox string)
}

// ObserveEvents has o told of what the followers ingest from now on.
func (s *Plane) ObserveEvents(o EventObserver) { s.observer.Store(&o) }

func (s *Plane) eventObserver() EventObserver {
	if p := s.observer.Load(); p != nil {
		return *p
	}
	return nil
}

// follower is the follow of one sandbox's journal.
type follower struct {
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// followStatus starts or stops the follower of e for its new status:
// running starts it, stopped stops it (a failed sandbox keeps it: it
// reconnects once the sandbox is recovered).
func (s *Plane) followStatus(e *entry, status string) {
	switch status {
	case wire.SandboxRunning:
		s.follow(e)
	case wire.SandboxStopped:
		s.unfollow(e.daemon.id, false)
	}
}

// follow starts the follower of e unless one runs. One stopped a moment
// ago may still be finishing its last Ingest: the new one waits for it.
func (s *Plane) follow(e *entry) {
	if s.opts.NoEventFollow {
		return
	}
	id := e.daemon.id
	s.followMu.Lock()
	defer s.followMu.Unlock()
	old := s.followers[id]
	if s.followClosed || (old != nil && !old.stopped) {
		return
	}
	ctx, cancel := context.WithCancel(s.bg)
	f := &follower{cancel: cancel, done: make(chan struct{})}
	s.followers[id] = f
	s.followWG.Add(1)
	go func() {
		defer s.followWG.Done()
		defer close(f.done)
		defer cancel()
		if old != nil {
			select {
			case <-old.done:
			case <-ctx.Done():
				return
			}
		}
		s.runFollower(ctx, e)
		s.followMu.Lock()
		if s.followers[id] == f {
			delete(s.followers, id)
		}
		s.followMu.Unlock()
	}()
}

// followStopWait bounds how long a removal waits for its follower's last
// Ingest, so that no journal event lands after sandbox.deleted.
const followStopWait = 10 * time.Second

// unfollow stops the follower of sandbox id (a stop does not wait: Close
// waits for all); gone drops it for good (the sandbox was removed) once
// it has ended.
func (s *Plane) unfollow(id string, gone bool) {
	s.followMu.Lock()
	f := s.followers[id]
	if f != nil {
		f.stopped = true
		f.cancel()
		if gone {
			delete(s.followers, id)
		}
	}
	s.followMu.Unlock()
	if !gone {
		return
	}
	if f != nil {
		select {
		case <-f.done:
		case <-time.After(followStopWait):
			s.log.Warn("the follower of a removed sandbox's journal did not end in time", "sandbox", id)
		}
	}
	if o := s.eventObserver(); o != nil {
		o.ForgetSandbox(id)
	}
}

// stopFollowers stops every follower and waits for them: each ends its
// current Ingest and its connection, so this is bounded.
func (s *Plane) stopFollowers() {
	s.followMu.Lock()
	s.followClosed = true
	for _, f := range s.followers {
		f.cancel()
	}
	s.followMu.Unlock()
	s.followWG.Wait()
}

// runFollower follows until ctx ends, reconnecting with a capped backoff
// with jitter; a connection that delivered events resets the backoff.
func (s *Plane) runFollower(ctx context.Context, e *entry) {
	id := e.daemon.id
	// The sandbox's own transport and limbsd token, without the masking
	// of Daemon.RoundTrip: Ingest masks the secrets in what it writes.
	cl := client.NewOver(e.tr, e.token)
	backoff := followBackoffMin
	for failures := 0; ctx.Err() == nil; {
		progress, err := s.followOnce(ctx, id, cl)
		if ctx.Err() != nil {
			return
		}
		if progress {
			backoff, failures = followBackoffMin, 0
		}
		failures++
		// Quiet while limbsd restarts (a recovery takes seconds); loud
		// when it stays away.
		lvl := s.log.Debug
		if failures == 20 || failures%200 == 0 {
			lvl = s.log.Warn
		}
		lvl("following limbsd's journal: reconnecting", "sandbox", id, "err", err, "failures", failures)
		d := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		backoff = min(backoff*2, followBackoffMax)
	}
}

// followOnce follows one connection to its end. progress says whether it
// ingested anything.
func (s *Plane) followOnce(ctx context.Context, id string, cl *client.Client) (progress bool, err error) {
	up, err := s.events.Upstream(id)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from := uint64(1)
	if up.Journal != "" {
		from = up.Seq + 1
	}
	es, err := cl.FollowEventsBatched(ctx, from, true, followWindow)
	if err != nil && up.Journal != "" && errors.Is(err, wire.ErrBadRequest) {
		// A from past the journal's end: limbsd has another journal, with
		// fewer events than the one we followed. Ask which.
		l, lerr := cl.Events(ctx, 1, 1, false)
		if lerr != nil {
			return false, errors.Join(err, lerr)
		}
		if l.Journal == up.Journal {
			return false, err
		}
		es, err = nil, nil
	}
	if err != nil {
		return false, err
	}
	if es != nil && up.Journal != "" && es.Info.Journal != up.Journal {
		es.Close()
		es = nil
	}
	if es == nil {
		es, err = cl.FollowEventsBatched(ctx, 1, true, followWindow)
		if err != nil {
			return false, err
		}
		s.journalChanged(id, up, es.Info.Journal)
	}
	defer es.Close()
	journal := es.Info.Journal
	var head uint64 // the journal's last seq as far as we know
	if es.Info.Next > 0 {
		head = es.Info.Next - 1
	}
	last := from - 1
	if es.Info.Journal != up.Journal {
		last = 0
	}
	o := s.eventObserver()
	if o != nil {
		o.EventLogLag(id, head-min(head, last), 0)
	}
	idle := time.AfterFunc(followIdle, cancel)
	defer idle.Stop()
	var batch []wire.Event
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		evs, err := s.events.Ingest(id, journal, batch...)
		if err != nil {
			return fmt.Errorf("ingesting limbsd's journal into the event log: %w", err)
		}
		progress = true
		lastEv := batch[len(batch)-1]
		last = lastEv.Seq
		batch, size = nil, 0
		if o = s.eventObserver(); o != nil {
			observe(o, id, evs)
			var age time.Duration
			behind := head - min(head, last)
			if behind > 0 {
				age = time.Since(lastEv.Time)
			}
			o.EventLogLag(id, behind, age)
		}
		return nil
	}
	for {
		ev, err := es.Next()
		if err != nil {
			if ferr := flush(); ferr != nil {
				s.log.Warn("following limbsd's journal", "sandbox", id, "err", ferr)
			}
			if ctx.Err() != nil {
				return progress, fmt.Errorf("no event nor keep-alive for %s", followIdle)
			}
			return progress, err
		}
		idle.Reset(followIdle)
		batch = append(batch, ev)
		size += 128 + len(ev.Data)
		head = max(head, ev.Seq)
		// Read on while whole lines are waiting; ingest when none is, so
		// a quiet stream is ingested at once and a busy one in batches.
		if len(batch) < followBatchEvents && size < followBatchBytes && es.Buffered() {
			continue
		}
		if err := flush(); err != nil {
			s.log.Warn("following limbsd's journal", "sandbox", id, "err", err)
			return progress, err
		}
	}
}

// journalChanged records that limbsd's journal is another than the one
// followed so far (limbsd lost its state): the log keeps the old events
// and goes on with the new journal's from its seq 1.
func (s *Plane) journalChanged(id string, up eventlog.Upstream, journal string) {
	if up.Journal == "" {
		return
	}
	reason := fmt.Sprintf("limbsd's journal is now %s, no longer %s: limbsd lost its state (its state directory was wiped or recreated); events %s recorded after its seq %d are not in this log, and %s's follow from its seq 1", journal, up.Journal, up.Journal, up.Seq, journal)
	s.log.Warn("limbsd's journal changed; following the new one from its start", "sandbox", id, "old", up.Journal, "new", journal, "old_seq", up.Seq)
	d, _ := json.Marshal(wire.GapData{From: up.Seq + 1, To: 1, Reason: reason})
	s.logEvents(id, wire.Event{Time: time.Now().UTC(), Type: wire.EventGap, Source: wire.SourceSystem, Data: d})
}

// observe counts the commands that ended and the output in evs, events
// of the log just ingested.
func observe(o EventObserver, id string, evs []wire.Event) {
	for _, ev := range evs {
		switch ev.Type {
		case wire.EventCommandFinished:
			var d wire.CommandFinishedData
			if json.Unmarshal(ev.Data, &d) == nil {
				o.CommandFinished(id, ev.Command, d.Status, time.Duration(d.DurationMs)*time.Millisecond)
			}
		case wire.EventOutput:
			var d struct {
				Size int64 `json:"size"`
			}
			if json.Unmarshal(ev.Data, &d) == nil {
				o.Output(d.Size)
			}
		}
	}
}
