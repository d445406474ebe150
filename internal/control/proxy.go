package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// newEntry builds the in-memory side of a sandbox: a transport that reaches
// its limbsd through its provider's Dial (which checks who answers before
// the token goes out; connections are kept alive: once per connection, not
// per request), and the Daemon that Dial hands out.
func (s *Plane) newEntry(rec store.Record) *entry {
	id := rec.ID
	dial := func(ctx context.Context) (net.Conn, error) {
		return nil, fmt.Errorf("sandbox %s: its provider %s is not available: start limbs serve with it: %w", id, rec.Provider, wire.ErrUnavailable)
	}
	if p, err := s.provider(rec.Provider); err == nil {
		dial = func(ctx context.Context) (net.Conn, error) { return p.Dial(ctx, id) }
	}
	// client.Transport forwards each request on the handler's goroutine;
	// net/http's would hand it to two more goroutines per hop.
	tr := client.NewTransport(dial)
	e := &entry{rec: rec, tr: tr, token: rec.Token}
	e.daemon = newDaemon(s, e)
	return e
}

// forwarder returns the reverse proxy that forwards /v1/sandboxes/{id}/X
// to d's /v1/X with the sandbox's own token, built once per sandbox.
// ReverseProxy passes WebSocket upgrades through, so attach and watch work
// unchanged.
func (s *Server) forwarder(d *Daemon) *httputil.ReverseProxy {
	d.fwdOnce.Do(func() {
		apiBase := "/v1/sandboxes/" + d.id
		d.fwd = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme = "http"
				pr.Out.URL.Host = "limbsd"
				pr.Out.Host = "limbsd"
				pr.Out.URL.Path = "/v1/" + forwardedPath(pr.In.URL.Path)
				pr.Out.URL.RawPath = ""
				d.Authorize(pr.Out.Header)
				// Paths limbsd names (the note of a truncated output) are
				// under this sandbox here.
				pr.Out.Header.Set("X-Limbs-Api-Base", apiBase)
			},
			Transport: d, // which masks secrets in the answers
			// FlushInterval stays 0: ReverseProxy already flushes streams
			// (SSE, bodies of unknown length such as /output) at once, and
			// flushing every response would cost a write per request.
			// Without a pool every forwarded request allocates a 32 KiB copy
			// buffer: most of the forwarding cost on the exec round trip.
			BufferPool: copyBuffers,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				s.unreachable(w, r, d, err)
			},
		}
	})
	return d.fwd
}

// copyBuffers are the reverse proxies' copy buffers, shared by all
// sandboxes.
var copyBuffers = &bufferPool{sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *bufferPool) Put(v []byte) { b.p.Put(&v) }

// forwardedPath turns /v1/sandboxes/{id}/rest into rest.
func forwardedPath(p string) string {
	rest := strings.TrimPrefix(p, "/v1/sandboxes/")
	if _, after, ok := strings.Cut(rest, "/"); ok {
		return after
	}
	return ""
}

func (s *Server) handleForward(w http.ResponseWriter, r *http.Request) {
	d, err := s.Dial(r.Context(), r.PathValue("id"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	s.forwarder(d).ServeHTTP(w, r)
}

// notRunning says why a sandbox cannot take requests and what to do.
func notRunning(rec store.Record) error {
	switch {
	case rec.Status == wire.SandboxStopped:
		return fmt.Errorf("sandbox %s is stopped; start it with `limbs sandbox start %s`: %w", rec.ID, rec.ID, wire.ErrUnavailable)
	case rec.Status == wire.SandboxCreating:
		return fmt.Errorf("sandbox %s is still being created; retry in a few seconds: %w", rec.ID, wire.ErrUnavailable)
	case rec.Message != "":
		return fmt.Errorf("sandbox %s is %s (%s): %s: %w", rec.ID, rec.Status, rec.Reason, rec.Message, wire.ErrUnavailable)
	default:
		return fmt.Errorf("sandbox %s is %s (%s): %w", rec.ID, rec.Status, rec.Reason, wire.ErrUnavailable)
	}
}

// unreachable answers a forwarded request whose sandbox did not answer: a
// 503 with the sandbox's state and the reason, never a bare 502.
func (s *Server) unreachable(w http.ResponseWriter, r *http.Request, d *Daemon, err error) {
	if r.Context().Err() != nil {
		return // the client left; nobody reads the answer
	}
	if tl := wire.TooLarge(err); tl != nil {
		wire.WriteError(w, tl) // a chunked body cut by guardBody
		return
	}
	wire.WriteError(w, d.Explain(r.Context(), err))
}

// Explain turns err, the failure of a request to the daemon, into an
// error wrapping wire.ErrUnavailable that says what state the sandbox is
// in and what to do: retry, start it, or inspect it.
func (d *Daemon) Explain(ctx context.Context, err error) error {
	s, e := d.p, d.e
	rec := s.record(e)
	if rec.Status != wire.SandboxRunning {
		return notRunning(rec)
	}
	reason := ""
	if p, perr := s.provider(rec.Provider); perr == nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		inst, ierr := p.Inspect(ctx, rec.ID)
		cancel()
		if ierr == nil && !inst.State.Running {
			reason = inst.State.Reason
			if reason == "" {
				reason = "exited"
			}
		}
	}
	s.log.Warn("sandbox daemon unreachable", "sandbox", rec.ID, "err", err, "reason", reason)
	if errors.Is(err, sandbox.ErrImpostor) {
		return fmt.Errorf("limbsd socket of sandbox %s: %v: %w", rec.ID, err, wire.ErrUnavailable)
	}
	if reason != "" {
		return fmt.Errorf("sandbox %s stopped (%s) during the request; limbs serve is bringing it back: retry in a few seconds: %w", rec.ID, reason, wire.ErrUnavailable)
	}
	return fmt.Errorf("sandbox %s is running but its daemon did not answer (%v); retry in a few seconds, and see `limbs sandbox inspect %s`: %w", rec.ID, err, rec.ID, wire.ErrUnavailable)
}

// healthy asks the sandbox's limbsd for its health once.
func (e *entry) healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://limbsd/v1/health", nil)
	if err != nil {
		return err
	}
	resp, err := e.tr.RoundTrip(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health answered %s", resp.Status)
	}
	return nil
}

// startSession creates a session in the sandbox's limbsd.
func (e *entry) startSession(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body, _ := json.Marshal(wire.CreateSession{Name: name})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://limbsd/v1/sessions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return wire.ErrorFromBody(resp.StatusCode, b)
	}
	return nil
}
