package figures

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/eventlog"
	"github.com/limbs-dev/limbs/internal/perf"
	"github.com/limbs-dev/limbs/internal/wire"
)

// events: the short form of the events benchmark (make bench-events):
// ingest rate into an event log next to marshal + write(2), and the
// latency of a command's events from limbsd's journal to a follower of
// limbs serve's log, next to a follower of limbsd's own journal.
func (e *env) events(ctx context.Context) error {
	const g = "events"
	e.progress("%s: ingest of %d events, 1 and 100 a call", g, e.o.Events)
	for _, batch := range []int{1, 100} {
		rate, floor, err := Ingest(e.o.Events, batch)
		if err != nil {
			return err
		}
		fk := fmt.Sprintf("events/ingest-floor/%d", batch)
		e.rep.Add(perf.Row{Key: fk, Group: g, Name: fmt.Sprintf("marshal + one write(2) a batch of %d (the floor)", batch), Unit: "events/s", Higher: true, Stats: perf.Once(floor)})
		e.rep.Add(perf.Row{Key: fmt.Sprintf("events/ingest/%d", batch), Group: g, Name: fmt.Sprintf("event log ingest, %d event(s) a call", batch), Unit: "events/s", Higher: true, Stats: perf.Once(rate), Baseline: fk})
	}
	l, err := e.daemon(ctx)
	if err != nil {
		return err
	}
	e.progress("%s: follow latency from limbsd's journal (%d commands)", g, e.o.FollowRounds)
	sid, err := l.Session(ctx, "events")
	if err != nil {
		return err
	}
	direct, err := followLimbsd(ctx, l.Client, sid, e.o.FollowRounds)
	if err != nil {
		return err
	}
	dk := "events/follow/limbsd"
	e.rep.Add(ms(dk, g, "command events to a follower of limbsd's journal", direct, ""))
	if err := e.dockerOK(ctx); err != nil {
		e.rep.Note("events: no follow latency through limbs serve: %v", err)
		return nil
	}
	sb, err := e.dockerSandbox(ctx)
	if err != nil {
		return err
	}
	via, err := followServe(ctx, e.serve, sb, e.o.FollowRounds)
	if err != nil {
		return err
	}
	e.rep.Add(ms("events/follow/serve", g, "command events to a follower of limbs serve's log (Docker)", via, dk))
	v, _ := e.rep.Row("events/follow/serve")
	e.rep.Target("follow latency through limbs serve, p99", "< 100 ms", perf.Num(v.P99)+" ms", v.P99 < 100)
	return nil
}

// Ingest puts n realistic journal events into a fresh event log, batch a
// call as limbs serve's follower hands them over, and the same events
// marshalled and written with one write(2) a batch to a file on the same
// disk; it returns both rates in events/s.
func Ingest(n, batch int) (rate, floor float64, err error) {
	dir, err := os.MkdirTemp("", "limbs-bench-events-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	evs := journalEvents(n)
	l, err := eventlog.Open(eventlog.Options{Dir: filepath.Join(dir, "events"), MaxSize: -1})
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	for i := 0; i < n; i += batch {
		if _, err := l.Ingest("sb_bench", "j_bench", evs[i:min(n, i+batch)]...); err != nil {
			l.Close()
			return 0, 0, err
		}
	}
	took := time.Since(t0)
	l.Close()
	f, err := os.Create(filepath.Join(dir, "floor.jsonl"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var buf []byte
	t0 = time.Now()
	for i := 0; i < n; i += batch {
		buf = buf[:0]
		for _, ev := range evs[i:min(n, i+batch)] {
			line, err := json.Marshal(ev)
			if err != nil {
				return 0, 0, err
			}
			buf = append(append(buf, line...), '\n')
		}
		if _, err := f.Write(buf); err != nil {
			return 0, 0, err
		}
	}
	ft := time.Since(t0)
	return float64(n) / took.Seconds(), float64(n) / ft.Seconds(), nil
}

// journalEvents makes n realistic events of limbsd's journal: commands of
// one session, each a command.started, three output events with their
// bytes (contiguous, so that the log coalesces them) and a
// command.finished.
func journalEvents(n int) []wire.Event {
	evs := make([]wire.Event, 0, n)
	var off int64
	now := time.Now().UTC()
	raw := func(v any) json.RawMessage { d, _ := json.Marshal(v); return d }
	out := []byte(strings.Repeat("total 48\ndrwxr-xr-x  5 user user 4096 Dec  2 02:27 src\n", 8))
	for c := 0; len(evs) < n; c++ {
		cmd := "c_" + strconv.Itoa(c)
		started := uint64(len(evs) + 1)
		evs = append(evs, wire.Event{Seq: started, Time: now, Session: "s_1", Command: cmd, Type: wire.EventCommandStarted, Source: wire.SourceAPI,
			Data: raw(wire.CommandStartedData{Text: "ls -l src", Cwd: "/workspace", Via: "exec", OffsetStart: off})})
		start := off
		for range 3 {
			if len(evs) == n {
				break
			}
			evs = append(evs, wire.Event{Seq: uint64(len(evs) + 1), Time: now, Session: "s_1", Command: cmd, Type: wire.EventOutput,
				Data: raw(wire.OutputData{Offset: off, Size: int64(len(out)), Bytes: out})})
			off += int64(len(out))
		}
		if len(evs) == n {
			break
		}
		zero := 0
		evs = append(evs, wire.Event{Seq: uint64(len(evs) + 1), Time: now, Session: "s_1", Command: cmd, Type: wire.EventCommandFinished, Source: wire.SourceAPI, Cause: started,
			Data: raw(wire.CommandFinishedData{Status: "exited", ExitCode: &zero, Cwd: "/workspace", DurationMs: 3, OffsetStart: start, OffsetEnd: off})})
	}
	return evs
}

// arrivals records when each command's events arrive at a follower:
// arrival minus the time limbsd stamped on the event (one host, one
// clock).
// Events from before the follower started (the log's history, whose
// command ids other sessions may reuse) are left out.
type arrivals struct {
	since time.Time
	mu    sync.Mutex               // guards at
	at    map[string]time.Duration // "COMMAND TYPE" -> latency
	sig   chan struct{}
}

func newArrivals() *arrivals {
	return &arrivals{since: time.Now(), at: map[string]time.Duration{}, sig: make(chan struct{}, 1)}
}

func (a *arrivals) note(ev wire.Event) {
	if ev.Type != wire.EventCommandStarted && ev.Type != wire.EventCommandFinished || ev.Time.Before(a.since) {
		return
	}
	d := time.Since(ev.Time)
	a.mu.Lock()
	a.at[ev.Command+" "+string(ev.Type)] = d
	a.mu.Unlock()
	select {
	case a.sig <- struct{}{}:
	default:
	}
}

// wait returns the latencies of a command's two events once both came
// (10 s at most).
func (a *arrivals) wait(ctx context.Context, command string) ([]time.Duration, error) {
	deadline := time.After(10 * time.Second)
	for {
		a.mu.Lock()
		s, ok1 := a.at[command+" "+string(wire.EventCommandStarted)]
		f, ok2 := a.at[command+" "+string(wire.EventCommandFinished)]
		a.mu.Unlock()
		if ok1 && ok2 {
			return []time.Duration{s, f}, nil
		}
		select {
		case <-a.sig:
		case <-deadline:
			return nil, fmt.Errorf("the events of command %s never reached the follower within 10 s", command)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// followRounds runs rounds+1 commands through exec (the first untimed)
// and collects the latencies of their events at a.
func followRounds(ctx context.Context, a *arrivals, exec func(string) (wire.Result, error), rounds int) ([]time.Duration, error) {
	var out []time.Duration
	for i := range rounds + 1 {
		r, err := exec("echo latency " + strconv.Itoa(i))
		if err != nil {
			return out, err
		}
		d, err := a.wait(ctx, r.CommandID)
		if err != nil {
			return out, err
		}
		if i > 0 {
			out = append(out, d...)
		}
	}
	return out, nil
}

func execer(ctx context.Context, c *client.Client, session string) func(string) (wire.Result, error) {
	zero := 0.0
	return func(command string) (wire.Result, error) {
		return c.Exec(ctx, session, wire.Exec{Command: command, YieldAfter: &zero})
	}
}

// followLimbsd follows limbsd's journal directly.
func followLimbsd(ctx context.Context, c *client.Client, session string, rounds int) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	es, err := c.FollowEvents(ctx, 1, false)
	if err != nil {
		return nil, err
	}
	a := newArrivals()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer es.Close()
		for {
			ev, err := es.Next()
			if err != nil {
				return
			}
			a.note(ev)
		}
	}()
	defer func() { cancel(); <-done }()
	return followRounds(ctx, a, execer(ctx, c, session), rounds)
}

// followServe follows limbs serve's log of a sandbox.
func followServe(ctx context.Context, s *perf.Serve, sb *perf.Sandbox, rounds int) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := newArrivals()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Ctl.Sandboxes().FollowEvents(ctx, sb.ID, client.EventsQuery{Types: "command.*"}, func(ev wire.Event) error {
			a.note(ev)
			return nil
		})
	}()
	defer func() { cancel(); <-done }()
	return followRounds(ctx, a, execer(ctx, sb.Client, "main"), rounds)
}
