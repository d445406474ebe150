package dashboard

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/eventlog"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Summary is what the overview shows of a sandbox beyond its record,
// kept from the event stream of every sandbox since limbs serve started
// (a command started before is not known as current until it ends).
type Summary struct {
	// Current is the command running, if any.
	Current *Command `json:"current,omitempty"`
	// Last is the last command that ended.
	Last *Command `json:"last,omitempty"`
	// Failed counts the commands that ended with a non-zero exit code.
	Failed int `json:"failed_commands,omitempty"`
	// OOM is set once a process of the sandbox was killed for memory.
	OOM bool `json:"oom,omitempty"`
	// Agent is the reason the last run of limbs agent ended.
	Agent string `json:"agent,omitempty"`
	// Deleted is when it was deleted (for a sandbox that no longer is).
	Deleted *time.Time `json:"deleted,omitempty"`
	Name    string     `json:"name,omitempty"`
}

// Command is a command of the overview: its text (empty for a line typed
// on a terminal), session, cwd, start and, once ended, its exit.
type Command struct {
	Session  string    `json:"session"`
	ID       string    `json:"id"`
	Text     string    `json:"text"`
	Cwd      string    `json:"cwd,omitempty"`
	Started  time.Time `json:"started"`
	Status   string    `json:"status,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
}

// maxTextShown bounds a command's text kept for the overview.
const maxTextShown = 200

// trackedTypes are the events the tracker (and the overview's stream)
// reads.
const trackedTypes = "sandbox.*,command.started,command.finished,agent.finished"

// maxDeletedShown bounds the deleted sandboxes the overview lists.
const maxDeletedShown = 1000

// tracker follows the event stream of every sandbox from the head it
// found at start and keeps a Summary per sandbox.
type tracker struct {
	plane  *control.Plane
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	cursor  uint64 // the last cursor applied
	sums    map[string]*Summary
	deleted []string // ids of deleted sandboxes, oldest first
}

func newTracker(p *control.Plane, log *slog.Logger) *tracker {
	ctx, cancel := context.WithCancel(context.Background())
	t := &tracker{plane: p, log: log, cancel: cancel, done: make(chan struct{}), sums: map[string]*Summary{}}
	f, _ := eventlog.ParseFilter(trackedTypes)
	head := p.EventLog().Cursor()
	t.cursor = head
	rd := p.AllEvents(head+1, f)
	go t.run(ctx, rd)
	return t
}

func (t *tracker) close() {
	t.cancel()
	<-t.done
}

func (t *tracker) run(ctx context.Context, rd *eventlog.GlobalReader) {
	defer close(t.done)
	for ctx.Err() == nil {
		evs, err := rd.Read(1000)
		if err != nil {
			t.log.Warn("dashboard: reading the event stream", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		t.mu.Lock()
		for _, ev := range evs {
			t.apply(ev)
		}
		t.cursor = rd.Cursor()
		t.mu.Unlock()
		if len(evs) == 0 {
			if rd.Wait(ctx) != nil {
				return
			}
		}
	}
}

func (t *tracker) sum(id string) *Summary {
	s := t.sums[id]
	if s == nil {
		s = &Summary{}
		t.sums[id] = s
	}
	return s
}

// apply folds one event into its sandbox's summary; t.mu is held. The
// overview's script does the same with the events it follows.
func (t *tracker) apply(ev wire.Event) {
	if ev.Sandbox == "" {
		return
	}
	s := t.sum(ev.Sandbox)
	switch ev.Type {
	case wire.EventCommandStarted:
		var d wire.CommandStartedData
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		if len(d.Text) > maxTextShown {
			d.Text = d.Text[:maxTextShown]
		}
		s.Current = &Command{Session: ev.Session, ID: ev.Command, Text: d.Text, Cwd: d.Cwd, Started: ev.Time}
	case wire.EventCommandFinished:
		var d wire.CommandFinishedData
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		c := &Command{Session: ev.Session, ID: ev.Command, Cwd: d.Cwd, Status: d.Status, ExitCode: d.ExitCode}
		if cur := s.Current; cur != nil && cur.ID == ev.Command && cur.Session == ev.Session {
			c.Text, c.Started = cur.Text, cur.Started
			s.Current = nil
		}
		s.Last = c
		if d.ExitCode != nil && *d.ExitCode != 0 {
			s.Failed++
		}
	case wire.EventSandboxOOM:
		s.OOM = true
	case wire.EventSandboxStopped, wire.EventSandboxDied:
		s.Current = nil
	case wire.EventAgentFinished:
		var d wire.AgentFinishedData
		if json.Unmarshal(ev.Data, &d) == nil {
			s.Agent = d.Reason
		}
	case wire.EventSandboxDeleted:
		now := ev.Time
		s.Deleted, s.Current = &now, nil
		t.deleted = append(t.deleted, ev.Sandbox)
		if len(t.deleted) > maxDeletedShown {
			delete(t.sums, t.deleted[0])
			t.deleted = t.deleted[1:]
		}
	}
}

// Overview is the answer of GET /ui/overview: every sandbox with its
// summary, the deleted ones seen since limbs serve started (their logs
// may still be read within the retention), and the cursor of the global
// event stream the summaries are at: the overview follows
// GET /v1/events?follow=true from Cursor+1.
type Overview struct {
	Sandboxes []Row        `json:"sandboxes"`
	Deleted   []DeletedRow `json:"deleted"`
	Cursor    uint64       `json:"cursor"`
	Types     string       `json:"types"`
	Now       time.Time    `json:"now"`
}

// Row is one sandbox of the overview.
type Row struct {
	wire.Sandbox
	Summary *Summary `json:"summary,omitempty"`
}

// DeletedRow is one deleted sandbox of the overview.
type DeletedRow struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Deleted time.Time `json:"deleted"`
}

func (h *Handler) serveOverview(w http.ResponseWriter, r *http.Request) {
	sbs, err := h.opts.Plane.List(r.Context())
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	ov := Overview{Sandboxes: make([]Row, 0, len(sbs)), Deleted: []DeletedRow{}, Types: trackedTypes, Now: time.Now()}
	t := h.tracker
	t.mu.Lock()
	ov.Cursor = t.cursor
	for _, sb := range sbs {
		row := Row{Sandbox: sb}
		if s := t.sums[sb.ID]; s != nil {
			c := *s
			row.Summary = &c
		}
		ov.Sandboxes = append(ov.Sandboxes, row)
	}
	for i := len(t.deleted) - 1; i >= 0; i-- {
		id := t.deleted[i]
		if s := t.sums[id]; s != nil && s.Deleted != nil {
			ov.Deleted = append(ov.Deleted, DeletedRow{ID: id, Deleted: *s.Deleted})
		}
	}
	t.mu.Unlock()
	writeJSON(w, ov)
}
