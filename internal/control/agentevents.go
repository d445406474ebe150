package control

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Bounds of one POST /v1/sandboxes/{id}/events.
const (
	// MaxAppendEvents is the most events one request appends.
	MaxAppendEvents = 1000
	// MaxAppendBody is the most bytes of one request's body.
	MaxAppendBody = 8 << 20
	// MaxAppendID is the most bytes of an event's session and command.
	MaxAppendID = 128
)

// agentTypes are the types a client may append: the agent's.
var agentTypes = map[wire.EventType]bool{
	wire.EventAgentRequest: true, wire.EventAgentMessage: true, wire.EventAgentToolCall: true,
	wire.EventAgentObservation: true, wire.EventAgentUsage: true, wire.EventAgentFinished: true,
}

// AppendAgentEvents appends events of limbs' agent to the log of a sandbox
// (not of a deleted one): through logEvents' one write path, so masked
// with the sandbox's secrets like every event. Their source is agent
// whatever they said; only the agent.* types are taken; Seq, Cause,
// Cursor and Sandbox are the log's. A time that is missing or ahead of
// the control plane's clock is the time of the append.
func (s *Plane) AppendAgentEvents(idOrName string, evs []wire.Event) (uint64, error) {
	if len(evs) > MaxAppendEvents {
		return 0, fmt.Errorf("%d events in one request; send at most %d a request: %w", len(evs), MaxAppendEvents, wire.ErrBadRequest)
	}
	e, err := s.lookup(idOrName)
	if err != nil {
		return 0, err
	}
	rec := s.record(e)
	id := rec.ID
	now := time.Now().UTC()
	out := make([]wire.Event, 0, len(evs))
	for i, ev := range evs {
		if !agentTypes[ev.Type] {
			return 0, fmt.Errorf("event %d has type %q; only the agent's types can be appended (%s): %w", i, ev.Type, agentTypeList(), wire.ErrBadRequest)
		}
		if len(ev.Session) > MaxAppendID || len(ev.Command) > MaxAppendID {
			return 0, fmt.Errorf("event %d: its session or command is longer than %d bytes; give the session's and the command's ids (s_..., c_...): %w", i, MaxAppendID, wire.ErrBadRequest)
		}
		if d := bytes.TrimSpace(ev.Data); len(d) > 0 && d[0] != '{' {
			return 0, fmt.Errorf("event %d: its data is not a JSON object; give the data of its type (docs/events.md): %w", i, wire.ErrBadRequest)
		}
		// The time a client gives is kept only between the sandbox's
		// creation and now: the log's order and a replay's timing do not
		// take a forged past or future.
		t := ev.Time.UTC()
		if t.IsZero() || t.After(now) {
			t = now
		}
		if created := rec.CreatedAt.UTC(); t.Before(created) {
			t = created
		}
		out = append(out, wire.Event{
			Time: t, Session: ev.Session, Command: ev.Command,
			Type: ev.Type, Source: wire.SourceAgent, Data: ev.Data,
		})
	}
	if len(out) == 0 {
		return s.events.Last(id), nil
	}
	got, err := s.events.Append(id, out...)
	if err != nil {
		s.log.Warn("recording the agent's events", "sandbox", id, "events", len(out), "err", err)
		return 0, fmt.Errorf("recording the agent's events of sandbox %s: %w", id, err)
	}
	return got[len(got)-1].Seq, nil
}

func agentTypeList() string {
	names := make([]string, 0, len(agentTypes))
	for _, t := range []wire.EventType{wire.EventAgentRequest, wire.EventAgentMessage, wire.EventAgentToolCall, wire.EventAgentObservation, wire.EventAgentUsage, wire.EventAgentFinished} {
		names = append(names, string(t))
	}
	return strings.Join(names, ", ")
}

func (s *Server) handleAppendEvents(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxAppendBody)
	var req wire.AppendEvents
	if err := wire.DecodeJSON(r, &req, false); err != nil {
		wire.WriteError(w, err)
		return
	}
	last, err := s.AppendAgentEvents(r.PathValue("id"), req.Events)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, wire.AppendedEvents{Last: last})
}
