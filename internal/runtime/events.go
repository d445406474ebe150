package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/limbs-dev/limbs/internal/files"
	"github.com/limbs-dev/limbs/internal/journal"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Bounds of one answer of GET /v1/events without follow.
const (
	defaultEventLimit = 1000
	maxEventLimit     = 10000
	maxBytesLimit     = 256 // with output=bytes
)

// maxEventsBatch bounds batch_ms: a follower waiting longer between
// writes would see its events late for no gain.
const maxEventsBatch = 1000 * time.Millisecond

// maxEventsWrite bounds what a batched answer gathers before it writes
// (a read of events is added whole, so a write may pass it by one read).
const maxEventsWrite = 1 << 20

// eventsKeepAlive is how long a followed answer stays silent before it
// sends a keep-alive (a blank line; an SSE comment).
const eventsKeepAlive = 25 * time.Second

// events serves GET /v1/events?from=SEQ[&follow=true][&output=bytes][&limit=N][&batch_ms=N]
// (docs/api.md, "Events").
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	j := s.opts.Journal
	if j == nil {
		s.fail(w, r, fmt.Errorf("this daemon keeps no journal: %w", wire.ErrUnavailable))
		return
	}
	q := r.URL.Query()
	sse := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	from := uint64(1)
	if v := q.Get("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.fail(w, r, fmt.Errorf("from=%q is not a sequence number: pass the seq of the first event wanted (1 for all, the last seen + 1 to resume): %w", v, wire.ErrBadRequest))
			return
		}
		from = max(n, 1)
	} else if id := r.Header.Get("Last-Event-ID"); sse && id != "" {
		if n, err := strconv.ParseUint(id, 10, 64); err == nil {
			from = n + 1
		}
	}
	follow := sse
	switch v := q.Get("follow"); v {
	case "", "false", "0":
	case "true", "1":
		follow = true
	default:
		s.fail(w, r, fmt.Errorf("follow=%q: use follow=true or leave it out: %w", v, wire.ErrBadRequest))
		return
	}
	withBytes := false
	switch v := q.Get("output"); v {
	case "":
	case "bytes":
		withBytes = true
	default:
		s.fail(w, r, fmt.Errorf("output=%q: the only value is output=bytes (each output event carries its bytes): %w", v, wire.ErrBadRequest))
		return
	}
	limit := defaultEventLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxEventLimit {
			s.fail(w, r, fmt.Errorf("limit=%q: use 1 to %d: %w", v, maxEventLimit, wire.ErrBadRequest))
			return
		}
		limit = n
	}
	// batch_ms: a followed answer writes at most once in that window.
	// The first event after a quiet spell goes out at once; during a
	// burst the events of the window go out together, one write and one
	// wake-up of the reader for many (limbs serve's follower asks for it:
	// a write per event cost every command a tenth of its round trip).
	var batch time.Duration
	if v := q.Get("batch_ms"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || int64(n) > maxEventsBatch.Milliseconds() {
			s.fail(w, r, fmt.Errorf("batch_ms=%q: use 0 to %d (milliseconds between two writes of a followed answer): %w", v, maxEventsBatch.Milliseconds(), wire.ErrBadRequest))
			return
		}
		batch = time.Duration(n) * time.Millisecond
	}
	first, next := j.Bounds()
	if from > next {
		s.fail(w, r, fmt.Errorf("from=%d is past the end of journal %s, whose next event is %d: a reader that saw later events read another journal (limbsd's state directory was wiped); start again from 1: %w", from, j.ID(), next, wire.ErrBadRequest))
		return
	}
	if withBytes {
		// Output events carry up to 64 KiB each: 16 MiB at most.
		limit = min(limit, maxBytesLimit)
	}
	w.Header().Set(wire.JournalHeader, j.ID())
	if !follow {
		evs, n := j.Read(from, limit, withBytes)
		if evs == nil {
			evs = []wire.Event{}
		}
		wire.WriteJSON(w, http.StatusOK, wire.EventList{Events: evs, Next: n, Journal: j.ID()})
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		s.fail(w, r, fmt.Errorf("this connection cannot stream: %w", wire.ErrUnavailable))
		return
	}
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.WriteHeader(http.StatusOK)
	hello, _ := json.Marshal(wire.JournalInfo{Journal: j.ID(), Version: wire.EventsVersion, First: first, Next: next})
	var buf bytes.Buffer
	if sse {
		fmt.Fprintf(&buf, "event: journal\ndata: %s\n\n", hello)
	} else {
		buf.Write(hello)
		buf.WriteByte('\n')
	}
	ctx := r.Context()
	// A read of output events with their bytes is up to 64 KiB each.
	perRead := 256
	if withBytes {
		perRead = 16
	}
	keep := time.NewTimer(eventsKeepAlive)
	defer keep.Stop()
	var window *time.Timer
	if batch > 0 {
		window = time.NewTimer(batch)
		defer window.Stop()
	}
	// held: buf holds events (not only the first line or a keep-alive).
	held := false
	for {
		_, changed := j.Changed()
		evs, n := j.Read(from, perRead, withBytes)
		for _, ev := range evs {
			line, err := json.Marshal(ev)
			if err != nil {
				continue
			}
			if sse {
				fmt.Fprintf(&buf, "id: %d\ndata: %s\n\n", ev.Seq, line)
			} else {
				buf.Write(line)
				buf.WriteByte('\n')
			}
		}
		full := false // written on the size bound, more events waiting
		if len(evs) > 0 {
			from = n
			held = true
			if window != nil {
				if buf.Len() < maxEventsWrite {
					continue // all that is there goes in one write
				}
				full = true
			}
		}
		if buf.Len() > 0 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			fl.Flush()
			buf.Reset()
			keep.Reset(eventsKeepAlive)
			wait := window != nil && held && !full
			held = false
			if wait {
				// What comes during the window waits for its end; a
				// backlog (a write on the size bound) goes on at once,
				// so the window never bounds how fast a reader catches
				// up.
				s.windowWaits.Add(1)
				window.Reset(batch)
				select {
				case <-window.C:
				case <-ctx.Done():
					return
				}
			}
			continue
		}
		if j.Closed() {
			return
		}
		select {
		case <-changed:
		case <-keep.C:
			if sse {
				buf.WriteString(": keep-alive\n\n")
			} else {
				buf.WriteByte('\n')
			}
		case <-ctx.Done():
			return
		}
	}
}

// countingBody counts the bytes read through it.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// statusWriter keeps the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// journalFiles records the file API's writes, edits and deletes that
// succeed (file.written, file.edited, file.deleted), and tells the
// workspace watcher beforehand that those changes are the API's. Reads
// and watches pass through untouched.
func journalFiles(j *journal.Journal, h http.Handler) http.Handler {
	if j == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/files"), "/")
		q := r.URL.Query()
		d := wire.FileData{Path: q.Get("path")}
		var typ wire.EventType
		switch {
		case route == "" && r.Method == http.MethodPut:
			typ = wire.EventFileWritten
		case route == "/archive" && r.Method == http.MethodPut:
			typ, d.Kind = wire.EventFileWritten, "archive"
		case route == "" && r.Method == http.MethodDelete:
			typ = wire.EventFileDeleted
		case route == "/edit" && r.Method == http.MethodPost:
			typ = wire.EventFileEdited
		default:
			h.ServeHTTP(w, r)
			return
		}
		body := &countingBody{ReadCloser: r.Body}
		if typ == wire.EventFileEdited {
			// The path is in the body: read it first (within the bound
			// the file API reads it with), so that the watcher knows the
			// change is the API's before it happens.
			b, err := io.ReadAll(io.LimitReader(r.Body, maxEditBody))
			if err != nil {
				wire.WriteError(w, fmt.Errorf("reading request body: %v: %w", err, wire.ErrBadRequest))
				return
			}
			var e wire.Edit
			if json.Unmarshal(b, &e) == nil && e.Command != "view" {
				d.Path, d.Edit = e.Path, e.Command
			}
			body.ReadCloser = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		}
		r.Body = body
		if d.Path != "" && (typ != wire.EventFileEdited || d.Edit != "") {
			j.ChangingByAPI(d.Path, d.Kind == "archive" || q.Get("recursive") == "true")
		}
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status < 200 || sw.status > 299 || d.Path == "" {
			return
		}
		d.SHA256 = w.Header().Get(files.HeaderSHA256)
		switch typ {
		case wire.EventFileEdited:
			if d.Edit == "" || d.SHA256 == "" {
				return // a view, or nothing changed
			}
		case wire.EventFileWritten:
			d.Size = body.n
		}
		j.Append(wire.Event{Type: typ, Source: wire.SourceAPI}, d)
	})
}

// maxEditBody bounds the body of an edit read ahead for its path; the
// rest, if any, still goes to the file API.
const maxEditBody = 64 << 20
