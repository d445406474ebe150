package docker

import (
	"context"
	"strconv"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/limbs-dev/limbs/internal/sandbox"
)

// oomWindow is how recent an "oom" event must be for the next exit of the
// same container to count as caused by it.
const oomWindow = 10 * time.Second

// Events streams what happens to the provider's sandboxes, from the
// engine's event stream filtered by the managed label. The stream
// reconnects by itself when the engine restarts and then sends a "resync"
// event, since what happened meanwhile may be lost. The channel closes
// when ctx ends.
//
// A "died" event's Reason is "stopped" for a clean exit (Stop, docker stop),
// "oom_killed" when the memory limit killed limbsd or the init, and
// "daemon_exited" for anything else (kill -9 of limbsd, a crash).
func (p *Provider) Events(ctx context.Context) (<-chan sandbox.Event, error) {
	// One ping up front so that a caller learns now, not never, that there
	// is no engine.
	if _, err := p.cli.Ping(ctx, client.PingOptions{}); err != nil {
		return nil, engineErr("watching docker events", err)
	}
	out := make(chan sandbox.Event, 64)
	go p.watch(ctx, out)
	return out, nil
}

func (p *Provider) watch(ctx context.Context, out chan<- sandbox.Event) {
	defer close(out)
	f := client.Filters{}.
		Add("type", string(events.ContainerEventType)).
		Add("label", sandbox.LabelManaged+"=true").
		Add("event", string(events.ActionStart), string(events.ActionDie), string(events.ActionOOM), string(events.ActionDestroy))
	oomAt := map[string]time.Time{} // container id -> last oom event
	var last int64                  // TimeNano of the last event passed on
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		since := ""
		if last > 0 {
			// Resume from the last event seen, not from now, so that a
			// reconnect loses as little as the engine keeps; the engine
			// counts in seconds, so the replayed part is skipped below.
			since = strconv.FormatInt(last/1e9, 10)
		}
		res := p.cli.Events(ctx, client.EventsListOptions{Filters: f, Since: since})
	read:
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-res.Err:
				if ctx.Err() == nil {
					p.log.Warn("docker event stream ended; reconnecting", "err", err)
				}
				break read
			case m := <-res.Messages:
				backoff = 100 * time.Millisecond
				if m.TimeNano != 0 && m.TimeNano <= last {
					continue // replayed after a reconnect
				}
				last = max(last, m.TimeNano)
				ev, ok := translate(m, oomAt)
				if !ok {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
		// Wait for the engine to answer again before reconnecting, and say
		// so once it does.
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := p.cli.Ping(pctx, client.PingOptions{})
			cancel()
			if err == nil {
				break
			}
		}
		select {
		case out <- sandbox.Event{Kind: sandbox.EventResync, Time: time.Now()}:
		case <-ctx.Done():
			return
		}
	}
}

// translate turns one engine event into a sandbox event, tracking oom
// events so that the next die of that container can be attributed to it.
func translate(m events.Message, oomAt map[string]time.Time) (sandbox.Event, bool) {
	id := m.Actor.Attributes[sandbox.LabelSandbox]
	if id == "" {
		return sandbox.Event{}, false
	}
	t := time.Unix(0, m.TimeNano)
	if m.TimeNano == 0 {
		t = time.Unix(m.Time, 0)
	}
	ev := sandbox.Event{ID: id, Time: t}
	switch m.Action {
	case events.ActionStart:
		delete(oomAt, m.Actor.ID)
		ev.Kind = sandbox.EventStarted
	case events.ActionOOM:
		oomAt[m.Actor.ID] = t
		ev.Kind, ev.Reason = sandbox.EventOOM, ReasonOOMKilled
	case events.ActionDie:
		code, err := strconv.Atoi(m.Actor.Attributes["exitCode"])
		if err != nil {
			code = -1
		}
		last, seen := oomAt[m.Actor.ID]
		oomNow := seen && t.Sub(last) < oomWindow && code == 137
		delete(oomAt, m.Actor.ID)
		ev.Kind, ev.Reason = sandbox.EventDied, exitReason(code, false, oomNow)
	case events.ActionDestroy:
		delete(oomAt, m.Actor.ID)
		ev.Kind, ev.Reason = sandbox.EventRemoved, ReasonRemoved
	default:
		return sandbox.Event{}, false
	}
	return ev, true
}
