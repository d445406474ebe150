package control

import (
	"context"
	"net/http"
	"net/http/httputil"
	"sync"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The Plane's methods by sandbox id or name. They are what the HTTP
// handlers call (api.go, proxy.go), and all a caller in the same process
// (an MCP server, an agent, a batch runner) needs: no *entry leaves the
// package. Pool sandboxes not yet claimed are invisible to them, as they
// are to HTTP clients.

// Get describes one sandbox.
func (s *Plane) Get(ctx context.Context, idOrName string) (wire.Sandbox, error) {
	e, err := s.lookup(idOrName)
	if err != nil {
		return wire.Sandbox{}, err
	}
	return toWire(s.record(e)), nil
}

// List describes every sandbox, oldest first (never nil).
func (s *Plane) List(ctx context.Context) ([]wire.Sandbox, error) {
	s.mu.Lock()
	recs := make([]store.Record, 0, len(s.sandboxes))
	for _, e := range s.sandboxes {
		if e.rec.Pool == "" {
			recs = append(recs, e.rec)
		}
	}
	s.mu.Unlock()
	sortRecords(recs)
	out := make([]wire.Sandbox, 0, len(recs))
	for _, rec := range recs {
		out = append(out, toWire(rec))
	}
	return out, nil
}

// Stop stops a sandbox, keeping its state; it stays stopped until Start.
func (s *Plane) Stop(ctx context.Context, idOrName string) (wire.Sandbox, error) {
	return s.byID(ctx, idOrName, s.stop)
}

// Start starts a stopped (or failed) sandbox.
func (s *Plane) Start(ctx context.Context, idOrName string) (wire.Sandbox, error) {
	return s.byID(ctx, idOrName, s.start)
}

func (s *Plane) byID(ctx context.Context, idOrName string, op func(context.Context, *entry) (store.Record, error)) (wire.Sandbox, error) {
	e, err := s.lookup(idOrName)
	if err != nil {
		return wire.Sandbox{}, err
	}
	rec, err := op(ctx, e)
	if err != nil {
		return wire.Sandbox{}, err
	}
	return toWire(rec), nil
}

// Remove deletes a sandbox and everything made for it.
func (s *Plane) Remove(ctx context.Context, idOrName string) error {
	e, err := s.lookup(idOrName)
	if err != nil {
		return err
	}
	if err := s.remove(ctx, e); err != nil {
		return err
	}
	s.forgetScans(e.rec.ID) // checkpoints.go; its checkpoints stay
	return nil
}

// Dial returns the way to the limbsd of a running sandbox; a sandbox that
// is not running is an error wrapping wire.ErrUnavailable that says why
// and what to do. Connections are made when requests go out, each checked
// to reach the sandbox's own daemon before its token is sent on it.
func (s *Plane) Dial(ctx context.Context, idOrName string) (*Daemon, error) {
	e, err := s.lookup(idOrName)
	if err != nil {
		return nil, err
	}
	if rec := s.record(e); rec.Status != wire.SandboxRunning {
		return nil, notRunning(rec)
	}
	return e.daemon, nil
}

// Daemon is the limbsd of one sandbox, reached through its provider. It
// stays valid while the sandbox exists; after Stop or a death its requests
// fail until the sandbox runs again.
type Daemon struct {
	p    *Plane
	e    *entry
	id   string
	auth string // "Bearer " and the sandbox's limbsd token
	tr   *client.Transport

	// The HTTP edge's reverse proxy to this daemon, built on first use.
	fwdOnce sync.Once
	fwd     *httputil.ReverseProxy
}

func newDaemon(p *Plane, e *entry) *Daemon {
	return &Daemon{p: p, e: e, id: e.rec.ID, auth: "Bearer " + e.token, tr: e.tr}
}

// ID is the sandbox's id.
func (d *Daemon) ID() string { return d.id }

// RoundTrip sends req to limbsd as it is: its path is one of limbsd's own
// (/v1/sessions, ...), and it carries the daemon's token (see Authorize).
// The answer's body has the sandboxes' secret values masked (docs/events.md,
// "Secrets"): whoever reads limbsd through the control plane (the HTTP
// edge, an MCP server) never gets them.
func (d *Daemon) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.tr.RoundTrip(req)
	if err == nil {
		d.p.maskResponse(resp)
	}
	return resp, err
}

// Authorize sets the bearer token of the sandbox's limbsd on h.
func (d *Daemon) Authorize(h http.Header) { h.Set("Authorization", d.auth) }

// Client returns a limbsd client of the sandbox (sessions, files), with
// the same methods as against a bare limbsd.
func (d *Daemon) Client() *client.Client {
	return client.NewOver(d, d.e.token)
}
