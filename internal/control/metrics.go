package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Stats is the state of a Plane at one moment, for metrics.
type Stats struct {
	// Sandboxes counts the sandboxes clients hold, by status; warm pool
	// ones not yet claimed are in Pool* only.
	Sandboxes map[string]int
	// PoolReady counts the pool's sandboxes ready to be claimed, and
	// PoolWant the number asked for, by image.
	PoolReady map[string]int
	PoolWant  map[string]int
}

// Stats reports the sandboxes by status and the warm pool.
func (s *Plane) Stats() Stats {
	st := Stats{Sandboxes: map[string]int{}, PoolReady: map[string]int{}, PoolWant: map[string]int{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.sandboxes {
		switch {
		case e.rec.Pool == "":
			st.Sandboxes[e.rec.Status]++
		case e.rec.Status == wire.SandboxRunning && !e.unprimed:
			st.PoolReady[e.rec.Pool]++
		}
	}
	for image, n := range s.pool.want {
		st.PoolWant[image] = n
	}
	return st
}

// ResultObserver is told of each command result (exec, wait, input,
// interrupt) that the HTTP edge forwards from a sandbox's limbsd: what
// the metrics count until the event log reports commands itself. It is
// called on the request's goroutine once the answer has been read to its
// end, and must not block.
type ResultObserver interface {
	CommandResult(sandbox string, r wire.Result)
}

// ObserveResults has o told of every command result forwarded from now
// on; call it before serving.
func (s *Server) ObserveResults(o ResultObserver) { s.results = o }

// maxObservedResult bounds the copy of a result kept to decode it; a
// larger answer (a command's output asked for with a large max_output)
// is forwarded as usual and not counted.
const maxObservedResult = 4 << 20

// observeResult has the body of resp, if it is a command result, copied
// as it is forwarded and handed to the observer at its end.
func (s *Server) observeResult(d *Daemon, resp *http.Response) {
	if s.results == nil || resp.StatusCode != http.StatusOK || resp.Request == nil || resp.Request.Method != http.MethodPost {
		return
	}
	if !isResultPath(resp.Request.URL.Path) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return
	}
	resp.Body = &resultBody{ReadCloser: resp.Body, sandbox: d.id, o: s.results}
}

// isResultPath: limbsd's /v1/sessions/{id}/exec, wait, input, interrupt.
func isResultPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/v1/sessions/")
	if !ok {
		return false
	}
	_, verb, ok := strings.Cut(rest, "/")
	return ok && (verb == "exec" || verb == "wait" || verb == "input" || verb == "interrupt")
}

type resultBody struct {
	io.ReadCloser
	sandbox string
	o       ResultObserver
	buf     bytes.Buffer
	over    bool
	done    bool
}

func (b *resultBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if !b.over && !b.done {
		if b.buf.Len()+n > maxObservedResult {
			b.over = true
			b.buf = bytes.Buffer{}
		} else {
			b.buf.Write(p[:n])
		}
	}
	if errors.Is(err, io.EOF) && !b.over && !b.done {
		b.done = true
		var r wire.Result
		if json.Unmarshal(b.buf.Bytes(), &r) == nil {
			b.o.CommandResult(b.sandbox, r)
		}
		b.buf = bytes.Buffer{}
	}
	return n, err
}
