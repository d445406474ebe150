package control

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/eventlog"
	"github.com/limbs-dev/limbs/internal/secret"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The control plane's event log: every event it records about a sandbox
// (lifecycle, API calls, and what the follower of limbsd's journal
// ingests) goes through logEvents into one eventlog.Log under
// STATE_DIR/events, which outlives the sandbox for Options.EventsKeepDeleted.

// openEvents opens the event log and moves the events an older registry
// kept in its events bucket there (their seqs and times kept), once.
func (s *Plane) openEvents() error {
	l, err := eventlog.Open(eventlog.Options{
		Dir:         filepath.Join(s.opts.StateDir, "events"),
		MaxSize:     s.opts.EventsMaxSize,
		MaxAge:      s.opts.EventsMaxAge,
		KeepDeleted: s.opts.EventsKeepDeleted,
		Logger:      s.log,
	})
	if err != nil {
		return err
	}
	s.events = l
	ids, err := s.db.EventLogs()
	if err != nil {
		return fmt.Errorf("reading the registry's events: %w", err)
	}
	for _, id := range ids {
		if l.Last(id) == 0 {
			old, err := s.db.Events(id, 0)
			if err != nil {
				return fmt.Errorf("moving the registry's events to the event log: %w", err)
			}
			evs := make([]wire.Event, len(old))
			for i, e := range old {
				evs[i] = newEvent(wire.EventType("sandbox."+e.Kind), e.Reason, e.Message)
				evs[i].Time = e.Time
			}
			if len(evs) > 0 {
				if _, err := l.Append(id, evs...); err != nil {
					return fmt.Errorf("moving the registry's events of %s to the event log: %w", id, err)
				}
			}
		}
		// Once moved (this start or an interrupted earlier one), they go.
		if err := s.db.DeleteEvents(id); err != nil {
			return fmt.Errorf("dropping the registry's events of %s once moved: %w", id, err)
		}
	}
	return nil
}

// EventLog is the control plane's event log. The follower of limbsd's
// journal ingests into it (eventlog.Log.Ingest, which keeps the journal
// position with the events: Upstream says where to resume).
func (s *Plane) EventLog() *eventlog.Log { return s.events }

// newEvent is a lifecycle event of the control plane.
func newEvent(typ wire.EventType, reason, message string) wire.Event {
	ev := wire.Event{Time: time.Now().UTC(), Type: typ, Source: wire.SourceSystem}
	if reason != "" || message != "" {
		ev.Data, _ = json.Marshal(wire.SandboxData{Reason: reason, Message: message})
	}
	return ev
}

// logEvents is the one way the control plane records its events. A failure
// to record is logged, not fatal: the sandbox's work goes on.
func (s *Plane) logEvents(id string, evs ...wire.Event) {
	if len(evs) == 0 {
		return
	}
	if _, err := s.events.Append(id, evs...); err != nil {
		s.log.Warn("recording a sandbox event", "sandbox", id, "type", evs[0].Type, "err", err)
	}
}

// logSandbox tells the event log a sandbox's name (to find its log once it
// is deleted) and its secret values (masked from then on).
func (s *Plane) logSandbox(r store.Record) {
	var vals []string
	for _, k := range r.SecretEnv {
		if v := r.Env[k]; v != "" {
			vals = append(vals, v)
		}
	}
	if len(vals) > 0 {
		s.secrets.Put(r.ID, vals)
		if err := s.events.SetSecrets(r.ID, vals); err != nil {
			s.log.Warn("setting a sandbox's secrets in the event log", "sandbox", r.ID, "err", err)
		}
	}
	if err := s.events.SetName(r.ID, r.Name); err != nil {
		s.log.Warn("naming a sandbox's event log", "sandbox", r.ID, "err", err)
	}
}

func (s *Plane) markDeleted(id string) {
	if err := s.events.MarkDeleted(id, time.Now()); err != nil {
		s.log.Warn("marking a sandbox's event log deleted", "sandbox", id, "err", err)
	}
}

// checkSecretEnv checks that every secret_env entry names an env entry
// with a value long enough to mask.
func checkSecretEnv(req *wire.CreateSandbox) error {
	seen := map[string]bool{}
	out := req.SecretEnv[:0:0]
	for _, k := range req.SecretEnv {
		v, ok := req.Env[k]
		switch {
		case !ok:
			return fmt.Errorf("secret_env names %q, which is not in env; give its value in env: %w", k, wire.ErrBadRequest)
		case len(v) < secret.MinLen:
			return fmt.Errorf("secret_env %s: its value has %d bytes; a secret needs at least %d to be masked without masking common text: %w", k, len(v), secret.MinLen, wire.ErrBadRequest)
		case !seen[k]:
			seen[k] = true
			out = append(out, k)
		}
	}
	slices.Sort(out)
	req.SecretEnv = out
	return nil
}

// eventsOf resolves a sandbox's id or name to the id of its event log: a
// sandbox's, or a deleted sandbox's still within its retention.
func (s *Plane) eventsOf(idOrName string) (string, error) {
	if e, err := s.lookup(idOrName); err == nil {
		return s.record(e).ID, nil
	}
	if d, ok := s.events.FindDeleted(idOrName); ok {
		return d.ID, nil
	}
	keep := cmp.Or(s.opts.EventsKeepDeleted, eventlog.DefaultKeepDeleted)
	return "", fmt.Errorf("sandbox %q: no such sandbox, nor a deleted one whose events are still kept (they are for %s after deletion, limbs serve --events-keep-deleted); list them with `limbs sandbox ls`: %w", idOrName, keep, wire.ErrNotFound)
}

// MaxEventsPage is the most events one answer without follow holds; next
// says where to go on.
const MaxEventsPage = 10_000

// Events returns up to limit events (at most MaxEventsPage) of a sandbox
// (or of a deleted one within the retention) from seq from on, of the
// types f selects. Next in the answer is the from= that goes on.
func (s *Plane) Events(ctx context.Context, idOrName string, from uint64, f eventlog.Filter, limit int) (wire.EventList, error) {
	r, err := s.EventReader(idOrName, from, f)
	if err != nil {
		return wire.EventList{}, err
	}
	if limit <= 0 || limit > MaxEventsPage {
		limit = MaxEventsPage
	}
	evs, err := r.Read(limit)
	if err != nil {
		return wire.EventList{}, err
	}
	return wire.EventList{Events: nonNil(evs), Next: r.Next()}, nil
}

// EventReader returns a reader of a sandbox's events from seq from on, for
// reads that go on and follow (Read, then Wait).
func (s *Plane) EventReader(idOrName string, from uint64, f eventlog.Filter) (*eventlog.Reader, error) {
	id, err := s.eventsOf(idOrName)
	if err != nil {
		return nil, err
	}
	return s.events.NewReader(id, from, f), nil
}

// AllEvents returns a reader of every sandbox's events (warm pool ones
// included) from cursor from on.
func (s *Plane) AllEvents(from uint64, f eventlog.Filter) *eventlog.GlobalReader {
	return s.events.NewGlobalReader(max(from, 1)-1, f)
}

func nonNil(evs []wire.Event) []wire.Event {
	if evs == nil {
		return []wire.Event{}
	}
	return evs
}

// eventQuery is what GET .../events asks.
type eventQuery struct {
	from   uint64
	filter eventlog.Filter
	follow bool
	sse    bool
	limit  int
}

func parseEventQuery(r *http.Request) (eventQuery, error) {
	var q eventQuery
	v := r.URL.Query()
	if s := v.Get("from"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, fmt.Errorf("from=%q: want a sequence number (0, 1, ...): %w", s, wire.ErrBadRequest)
		}
		q.from = n
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			return q, fmt.Errorf("Last-Event-ID %q: want the id of an event this stream sent: %w", id, wire.ErrBadRequest)
		}
		q.from = n + 1
	}
	f, err := eventlog.ParseFilter(v.Get("type"))
	if err != nil {
		return q, err
	}
	q.filter = f
	q.sse = strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	switch fv := v.Get("follow"); fv {
	case "", "false", "0":
		q.follow = q.sse
	case "true", "1":
		q.follow = true
	default:
		return q, fmt.Errorf("follow=%q: use true or false: %w", fv, wire.ErrBadRequest)
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return q, fmt.Errorf("limit=%q: want a number from 1 to %d: %w", s, MaxEventsPage, wire.ErrBadRequest)
		}
		q.limit = n
	}
	return q, nil
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	q, err := parseEventQuery(r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	rd, err := s.EventReader(r.PathValue("id"), q.from, q.filter)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	if !q.follow {
		l, err := s.Events(r.Context(), r.PathValue("id"), q.from, q.filter, q.limit)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		wire.WriteJSON(w, http.StatusOK, l)
		return
	}
	s.stream(w, r, q, rd, func(ev wire.Event) uint64 { return ev.Seq })
}

func (s *Server) handleAllEvents(w http.ResponseWriter, r *http.Request) {
	q, err := parseEventQuery(r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	rd := s.AllEvents(q.from, q.filter)
	if !q.follow {
		limit := q.limit
		if limit <= 0 || limit > MaxEventsPage {
			limit = MaxEventsPage
		}
		evs, err := rd.Read(limit)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		wire.WriteJSON(w, http.StatusOK, wire.EventList{Events: nonNil(evs), Next: rd.Cursor() + 1})
		return
	}
	s.stream(w, r, q, rd, func(ev wire.Event) uint64 { return ev.Cursor })
}

// eventSource is a reader that follows: a sandbox's or every sandbox's.
type eventSource interface {
	Read(max int) ([]wire.Event, error)
	Wait(ctx context.Context) error
}

// keepAlive is how often an idle SSE stream sends a comment, so that
// proxies keep it open.
const keepAlive = 15 * time.Second

// stream answers a follow: JSON lines, or SSE with each event's id (its
// seq, or its cursor across sandboxes), until the client leaves.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, q eventQuery, rd eventSource, id func(wire.Event) uint64) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	if q.sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	bw := bufio.NewWriterSize(w, 64<<10)
	for ctx.Err() == nil {
		evs, err := rd.Read(1000)
		if err != nil {
			if !errors.Is(err, wire.ErrNotFound) {
				s.log.Warn("reading the event log for a follower", "err", err)
			}
			return
		}
		for _, ev := range evs {
			b, _ := json.Marshal(ev)
			if q.sse {
				if n := id(ev); n != 0 {
					fmt.Fprintf(bw, "id: %d\n", n)
				}
				fmt.Fprintf(bw, "event: %s\ndata: %s\n\n", ev.Type, b)
			} else {
				bw.Write(b)
				bw.WriteByte('\n')
			}
		}
		if len(evs) > 0 {
			if bw.Flush() != nil || rc.Flush() != nil {
				return
			}
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, keepAlive)
		err = rd.Wait(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && q.sse {
			bw.WriteString(": keep-alive\n\n")
			if bw.Flush() != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// recordCall serves r and records an api.call event in the log of the
// sandbox it was about: every authorized request under /v1/sandboxes/{id}
// and every create, but reads of the event log itself (a follower would
// feed its own stream).
func (s *Server) recordCall(w http.ResponseWriter, r *http.Request) {
	ref, isCreate := "", r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes"
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/"); ok {
		var sub string
		ref, sub, _ = strings.Cut(rest, "/")
		if sub == "events" {
			ref = ""
		}
	}
	if (ref == "" && !isCreate) || s.noCalls.Load() {
		s.serveMasked(w, r)
		return
	}
	cw := &callWriter{ResponseWriter: w, status: http.StatusOK}
	start := time.Now()
	var created string
	r2 := r.WithContext(context.WithValue(r.Context(), createdKey{}, &created))
	s.serveMasked(cw, r2)
	// The mux names the route it matched on the request it was handed:
	// the metrics' Instrument reads it from the request it passed on.
	r.Pattern = r2.Pattern
	// The sandbox is named before the answer goes out: once the caller
	// has it, it may delete the sandbox, or make another of that name.
	id := created
	var e *entry
	if ref != "" {
		if found, err := s.lookup(ref); err == nil {
			e, id = found, s.record(found).ID
		} else if d, ok := s.events.FindDeleted(ref); ok {
			id = d.ID
		}
	}
	if id == "" {
		return
	}
	// The answer goes out before its api.call is recorded: net/http would
	// only send it once this handler returns, after the event log's
	// encode, write and wake-ups, which the caller does not wait for. A
	// chunked answer cannot be ended from here, and is left as it is. The
	// sandbox's removal waits for the record (forget), so that its log
	// still ends with sandbox.deleted.
	if e != nil && cw.wrote && !cw.hijacked && cw.Header().Get("Content-Length") != "" {
		e.calls.enter()
		defer e.calls.leave()
		cw.Flush()
	}
	if hook := s.callHook.Load(); hook != nil {
		(*hook)()
	}
	caller := r.RemoteAddr
	if caller == "" || caller == "@" {
		caller = "unix"
	}
	d, _ := json.Marshal(wire.APICallData{
		Method: r.Method, Path: r.URL.Path, Status: cw.status, Caller: caller,
		DurationMs: time.Since(start).Milliseconds(),
	})
	s.logEvents(id, wire.Event{Type: wire.EventAPICall, Source: wire.SourceAPI, Data: d})
}

// createdKey carries, in a create's context, where handleCreate puts the
// new sandbox's id for its api.call.
type createdKey struct{}

func setCreated(ctx context.Context, id string) {
	if p, ok := ctx.Value(createdKey{}).(*string); ok {
		*p = id
	}
}

// serveMasked routes r; the control plane's own answers have the
// sandboxes' secret values masked (forwarded ones are masked by the
// reverse proxy, see maskResponse).
func (s *Server) serveMasked(w http.ResponseWriter, r *http.Request) {
	if s.secrets.Empty() || isForwarded(r.URL.Path) {
		s.mux.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(&maskWriter{ResponseWriter: w, s: s.secrets}, r)
}

func isForwarded(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/sandboxes/")
	if !ok {
		return false
	}
	_, sub, _ := strings.Cut(rest, "/")
	return sub == "health" || sub == "sessions" || strings.HasPrefix(sub, "sessions/") || sub == "files" || strings.HasPrefix(sub, "files/")
}

// maskResponse masks the secret values in the body of an answer of limbsd
// (not in a WebSocket's: attach and watch carry frames, see
// docs/events.md).
func (s *Plane) maskResponse(resp *http.Response) {
	if s.secrets.Empty() || resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil {
		return
	}
	var body io.Reader = resp.Body
	if resp.Request != nil && resp.StatusCode == http.StatusOK && strings.HasSuffix(resp.Request.URL.Path, "/screen") {
		body = maskScreen(resp.Body, s.secrets.Forms())
	}
	resp.Body = maskedBody{Reader: secret.Reader(body, s.secrets.Forms()), Closer: resp.Body}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
}

// maxScreenBody bounds a screen answer read whole to mask it.
const maxScreenBody = 16 << 20

// maskScreen masks the values that wrap across the lines of a screen
// answer (secret.MaskLines), keeping its other fields as they are. An
// answer that is not a screen passes as it is.
func maskScreen(r io.Reader, forms [][]byte) io.Reader {
	b, err := io.ReadAll(io.LimitReader(r, maxScreenBody+1))
	if err != nil || len(b) > maxScreenBody {
		return io.MultiReader(bytes.NewReader(b), errReader{err})
	}
	var m map[string]json.RawMessage
	var lines []string
	if json.Unmarshal(b, &m) != nil || json.Unmarshal(m["lines"], &lines) != nil {
		return bytes.NewReader(b)
	}
	masked := secret.MaskLines(lines, forms)
	if slices.Equal(masked, lines) {
		return bytes.NewReader(b)
	}
	m["lines"], _ = json.Marshal(masked)
	out, err := json.Marshal(m)
	if err != nil {
		return bytes.NewReader(b)
	}
	return bytes.NewReader(append(out, '\n'))
}

// errReader fails every read with err (nil: an answer too long to mask
// whole, which is cut rather than passed unmasked).
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err == nil {
		return 0, fmt.Errorf("a screen answer of more than %d bytes", maxScreenBody)
	}
	return 0, e.err
}

type maskedBody struct {
	io.Reader
	io.Closer
}

// callWriter notes the status of an answer for its api.call.
type callWriter struct {
	http.ResponseWriter
	status   int
	wrote    bool
	hijacked bool
}

func (c *callWriter) WriteHeader(code int) {
	if !c.wrote {
		c.status, c.wrote = code, true
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *callWriter) Write(p []byte) (int, error) {
	c.wrote = true
	return c.ResponseWriter.Write(p)
}

func (c *callWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *callWriter) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

func (c *callWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !c.wrote {
		c.status, c.wrote = http.StatusSwitchingProtocols, true
	}
	c.hijacked = true
	return http.NewResponseController(c.ResponseWriter).Hijack()
}

// maskWriter masks the secret values in each write of an answer (the
// control plane's own answers are written whole, by wire.WriteJSON).
type maskWriter struct {
	http.ResponseWriter
	s *secret.Set
}

func (m *maskWriter) Write(p []byte) (int, error) {
	if _, err := m.ResponseWriter.Write(secret.MaskBytes(p, m.s.Forms())); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (m *maskWriter) Unwrap() http.ResponseWriter { return m.ResponseWriter }

func (m *maskWriter) Flush() { _ = http.NewResponseController(m.ResponseWriter).Flush() }

// callGate counts the api.calls of a sandbox whose answers went out and
// whose records are not written yet.
type callGate struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil when nobody waits
}

func (g *callGate) enter() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

func (g *callGate) leave() {
	g.mu.Lock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
}

// wait returns once no record is pending, or after d: a caller that does
// not read its answer holds its flush, and so its record, back.
func (g *callGate) wait(d time.Duration) {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	ch := g.idle
	g.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// waiting reports whether someone waits for the pending records (tests).
func (g *callGate) waiting() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.idle != nil
}
