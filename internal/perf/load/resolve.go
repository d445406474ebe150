package load

import (
	"context"
	"encoding/json"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// cmdEvents is what a sandbox's event log says of one command.
type cmdEvents struct {
	session, command string
	started          bool
	finished         *wire.CommandFinishedData
}

// commandLog reads the command events of a sandbox's log and indexes
// them by the token their text holds.
func (r *run) commandLog(ctx context.Context, id string) map[string]*cmdEvents {
	byToken := map[string]*cmdEvents{}
	byCmd := map[string]*cmdEvents{}
	var from uint64
	for page := 0; page < 1000; page++ {
		list, err := r.ctl.Events(ctx, id, client.EventsQuery{From: from, Types: "command.*"})
		if err != nil {
			break
		}
		for _, ev := range list.Events {
			key := ev.Session + "/" + ev.Command
			switch ev.Type {
			case wire.EventCommandStarted:
				var d wire.CommandStartedData
				_ = json.Unmarshal(ev.Data, &d)
				ce := &cmdEvents{session: ev.Session, command: ev.Command, started: true}
				byCmd[key] = ce
				for _, t := range tokenRE.FindAllString(d.Text, -1) {
					byToken[t] = ce
				}
			case wire.EventCommandFinished:
				var d wire.CommandFinishedData
				_ = json.Unmarshal(ev.Data, &d)
				if ce := byCmd[key]; ce != nil {
					ce.finished = &d
				}
			}
		}
		if len(list.Events) == 0 || list.Next <= from {
			break
		}
		from = list.Next
	}
	return byToken
}

// resolve accounts for the commands whose end was answered on a
// connection that went (serve killed, the client hung up): the event log
// says whether each ran, ended or was lost, and the output stream holds
// what it printed. It also notes what the log says of every failed one.
func (r *run) resolve(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	r.mu.Lock()
	var todo []*record
	for _, rec := range r.records {
		if rec.outcome != OutcomeOK && rec.kind != KindFile {
			todo = append(todo, rec)
		}
	}
	r.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	logs := map[string]map[string]*cmdEvents{}
	// The follower may be behind: read again until each is known
	// (a start and an end), at most 30 s.
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := false
		for _, id := range r.ids {
			logs[id] = r.commandLog(ctx, id)
		}
		for _, rec := range todo {
			if ce := logs[rec.sandbox][rec.token]; ce == nil || ce.finished == nil {
				missing = true
			}
		}
		if !missing || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, rec := range todo {
		ce := logs[rec.sandbox][rec.token]
		note := "the event log has no start of it"
		switch {
		case ce != nil && ce.finished != nil:
			note = "the event log has it " + ce.finished.Status
			if ce.finished.Reason != "" {
				note += " (" + ce.finished.Reason + ")"
			}
		case ce != nil:
			note = "the event log has its start but no end"
		}
		if rec.outcome == OutcomeFailed && rec.reason == "unresolved" {
			switch {
			case ce == nil:
				rec.reason = "not_started"
			case ce.finished == nil:
				rec.outcome, rec.reason = OutcomeHung, "started, never ended"
			case ce.finished.Status == wire.StatusLost:
				rec.reason = "lost"
			default:
				c := r.sv.client("/sandboxes/" + rec.sandbox)
				raw, err := streamOutput(ctx, c, rec.session, ce.finished.OffsetStart, ce.finished.OffsetEnd)
				c.HTTPClient().CloseIdleConnections()
				if err != nil {
					rec.reason = "ended; its output is not readable: " + err.Error()
					break
				}
				if raw == expected(rec.kind, rec.token) {
					rec.outcome, rec.reason = OutcomeOK, ""
					rec.resumed += "; output read back from the stream"
				} else if f := r.foreign(rec, raw); f != "" {
					rec.outcome, rec.reason = OutcomeWrong, f
					rec.output = raw
				} else {
					rec.outcome, rec.reason = OutcomeWrong, "the stream of its output differs from the command's own"
					rec.output = raw
				}
			}
		}
		if rec.outcome != OutcomeOK {
			rec.note = note
		}
	}
}
