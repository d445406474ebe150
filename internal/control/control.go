// Package control is the control plane behind `limbs serve`: it creates,
// tracks and removes many sandboxes through providers (docker, local), keeps
// them in a registry (internal/store) so that a restarted control plane
// re-adopts them, brings back a sandbox whose daemon died, keeps a warm pool
// of ready sandboxes, and forwards each sandbox's Sessions and Files API to
// the limbsd inside it.
//
// It knows no host path of a sandbox: how limbsd gets into it, where limbsd
// listens and keeps its state are each provider's, and it reaches limbsd
// only through the provider's Dial (which checks who answers). It waits for
// a started sandbox's limbsd in one place (health.go).
//
// Plane (plane.go) is the service, by sandbox id or name: Create, Get,
// List, Stop, Start, Remove, Events and Dial, for every program that
// drives sandboxes in-process (the HTTP edge, an MCP server, an agent, a
// dashboard). Server is only the HTTP edge: each handler decodes a
// request, calls one Plane method and writes its answer.
//
// It must never touch a sandbox it did not create (everything it acts on
// carries its instance id), never reach a sandbox but through its
// provider's Dial, and never answer a forwarded request with a bare 502: a
// sandbox that cannot be reached is a 503 saying why.
package control

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limbs-dev/limbs/internal/endpoint"
	"github.com/limbs-dev/limbs/internal/eventlog"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/secret"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Provider creates and runs sandboxes of one kind. Ids are sandbox ids
// (sb_...). Every method is safe for concurrent use.
//
// A provider owns everything about where a sandbox lives: how limbsd gets
// into it, where limbsd listens, where it keeps its durable state
// (sessions, output logs: kept across Stop and Start), and how to reach
// it (Dial). The control plane passes no host path and dials nothing
// itself.
type Provider interface {
	// Name is what clients pass as "provider": docker, local.
	Name() string
	// Create creates and starts a sandbox; it returns once the sandbox is
	// started, its limbsd maybe not answering yet: the control plane
	// waits for that through Dial.
	Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error)
	// Start starts a stopped sandbox (or one whose limbsd does not
	// answer), returning once it is started, as Create does.
	Start(ctx context.Context, id string) error
	// Dial connects to the limbsd of sandbox id: a connection that
	// carries limbsd's HTTP API, on which the control plane sends the
	// sandbox's token. The provider checks that limbsd, and nothing else
	// the sandbox could put in its place, answers: an error wrapping
	// sandbox.ErrImpostor when something else does (no request, and no
	// token, is then sent). An error wrapping sandbox.ErrNotRunning (and
	// saying why) when the sandbox is not running; any other error when
	// it does not answer yet.
	Dial(ctx context.Context, id string) (net.Conn, error)
	// Stop stops a sandbox, keeping its state for Start.
	Stop(ctx context.Context, id string) error
	// Remove stops and deletes a sandbox and everything the provider made
	// for it. Removing what is not there returns an error wrapping
	// wire.ErrNotFound.
	Remove(ctx context.Context, id string) error
	// Inspect reports one sandbox (wire.ErrNotFound when unknown).
	Inspect(ctx context.Context, id string) (sandbox.Instance, error)
	// List returns the sandboxes labelled with the given control plane
	// instance id, and nothing else.
	List(ctx context.Context, instance string) ([]sandbox.Instance, error)
	// Events reports what happens to sandboxes outside the control plane's
	// own calls (Kind "died" with Reason oom_killed, daemon_exited, ...)
	// until ctx ends.
	Events(ctx context.Context) (<-chan sandbox.Event, error)
}

// Noter is implemented by providers that have something to tell about a
// sandbox they would create: a missing isolation, an ignored limit. The
// control plane logs the sentence, keeps it in the sandbox's message and the
// CLI prints it, so that no one believes in isolation that is not there.
type Noter interface {
	Note(spec sandbox.Spec) string
}

// Options configure a Plane.
type Options struct {
	// StateDir holds the registry (limbs.db). Sandboxes' own directories
	// are their providers' (see each provider's Options).
	StateDir string
	// Token is the bearer token clients of the control plane send.
	Token string
	// Providers by name, and the one used when a create names none.
	Providers       map[string]Provider
	DefaultProvider string
	// ForkCopy makes every fork copy its checkpoint's files into a
	// workspace of its own, as on a machine where copy-on-write
	// workspaces cannot be made (limbs serve not root, the local
	// provider): --fork-copy, docs/checkpoints.md.
	ForkCopy bool
	// DefaultImage is the image of a create for the default provider that
	// names none (and so the pool key such creates match).
	DefaultImage string
	// Pool keeps that many sandboxes created and started per image, with
	// the default provider and default limits.
	Pool map[string]int
	// MaxSandboxes caps the sandboxes clients hold (warm pool ones not
	// claimed yet do not count: --pool fixes their number); a create past
	// it is 429 too_many. 0 is no cap.
	MaxSandboxes int
	// WorkspaceRoots, when set, are the only host directories under which
	// a create may name a host workspace (--workspace-root).
	WorkspaceRoots []string
	// BodyTimeout is how long a request body (but a file or archive
	// upload) may take to arrive; default DefaultBodyTimeout.
	BodyTimeout time.Duration
	Logger      *slog.Logger
	// MaxDiskMB and MaxSessionDiskMB are the disk bounds of the output
	// limbsd keeps (limbsd --max-disk, --max-session-disk) of sandboxes
	// whose create sets none; 0: limbsd's defaults.
	MaxDiskMB        int64
	MaxSessionDiskMB int64
	// EventsMaxSize and EventsMaxAge bound each sandbox's event log
	// (its oldest events go first); EventsKeepDeleted is how long a
	// deleted sandbox's log stays readable. 0: eventlog's defaults (1 GiB,
	// 30 days, 7 days); a negative size or age: no bound.
	EventsMaxSize     int64
	EventsMaxAge      time.Duration
	EventsKeepDeleted time.Duration
	// NoEventFollow turns the followers of limbsd's journals off (limbs
	// serve --events-follow=false): the log then holds the control
	// plane's own events only.
	NoEventFollow bool
	// CheckpointTTL is how long a checkpoint is kept when its create
	// names no ttl (limbs serve --checkpoint-ttl); 0: DefaultCheckpointTTL,
	// < 0: until deleted.
	CheckpointTTL time.Duration
	// Secrets, when set, collects the sandboxes' secret values, so that
	// the caller can mask them in what it writes too (limbs serve's log
	// handler); the Plane masks them in its own log lines, events and
	// answers either way.
	Secrets *secret.Set
}

// Plane is the control plane's core: it creates, tracks, recovers and
// removes sandboxes, each named by its id or its name. The HTTP edge
// (Server) calls nothing else, and neither need an MCP server, an agent or a
// batch runner in the same process: every method is safe for concurrent use
// and returns errors wrapping the wire sentinels (wire.ErrNotFound, ...).
type Plane struct {
	opts Options
	// usageCache is the last sweep of ResourceUsage (usage.go).
	usageCache usageCache
	log        *slog.Logger
	db         *store.DB
	// events is the durable event log of every sandbox (eventlog.go);
	// secrets, every sandbox's secret values, masked wherever the Plane
	// writes.
	events  *eventlog.Log
	secrets *secret.Set
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	// writeMu serialises every change to the registry and to the records
	// in memory, so that a change is written before it shows; mu guards
	// the memory only and is never held across a disk sync, which would
	// stall every forwarded request.
	writeMu   sync.Mutex
	mu        sync.Mutex
	sandboxes map[string]*entry

	pool *pool

	// The followers of limbsd's journals (follow.go), by sandbox id; bg is
	// their parent context, observer what they report to.
	bg           context.Context
	followMu     sync.Mutex
	followers    map[string]*follower
	followClosed bool
	followWG     sync.WaitGroup
	observer     atomic.Pointer[EventObserver]

	ck checkpoints // checkpoints.go
}

// Server serves the Control plane part of the API over its Plane. It is an
// http.Handler, and it is the only part of the package that knows HTTP
// routes: each handler decodes a request, calls one Plane method and writes
// its answer.
type Server struct {
	*Plane
	token endpoint.Token
	mux   *http.ServeMux
	// noCalls turns api.call events off (BenchmarkForwardOverhead's
	// baseline).
	noCalls atomic.Bool
	// callHook, when set, runs in recordCall just before an api.call is
	// recorded: after its answer went out, when it could go early (tests).
	callHook atomic.Pointer[func()]
}

// New returns the HTTP edge of a new Plane (see NewPlane). Closing the
// Server closes its Plane.
func New(ctx context.Context, opts Options) (*Server, error) {
	p, err := NewPlane(ctx, opts)
	if err != nil {
		return nil, err
	}
	return NewServer(p), nil
}

// NewServer returns the HTTP edge of p, checking the bearer token of
// p's Options.
func NewServer(p *Plane) *Server {
	s := &Server{Plane: p, token: endpoint.NewToken(p.opts.Token)}
	s.routes()
	return s
}

// NewPlane opens the registry in opts.StateDir, re-adopts the sandboxes
// this control plane created before (removing its orphans), starts watching
// provider events and fills the warm pool in the background.
func NewPlane(ctx context.Context, opts Options) (*Plane, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Secrets == nil {
		opts.Secrets = secret.NewSet()
	}
	opts.Logger = slog.New(secret.Handler(opts.Logger.Handler(), opts.Secrets))
	if opts.Token == "" {
		return nil, fmt.Errorf("control plane without a token: pass one (--token or LIMBS_TOKEN): %w", wire.ErrBadRequest)
	}
	if len(opts.Providers) == 0 {
		return nil, fmt.Errorf("no sandbox provider configured: %w", wire.ErrBadRequest)
	}
	if opts.DefaultProvider == "" && len(opts.Providers) == 1 {
		for name := range opts.Providers {
			opts.DefaultProvider = name
		}
	}
	if _, ok := opts.Providers[opts.DefaultProvider]; !ok {
		return nil, fmt.Errorf("default provider %q is not among the configured ones (%s): %w", opts.DefaultProvider, strings.Join(providerNames(opts.Providers), ", "), wire.ErrBadRequest)
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the state dir: %w; pass a writable --state-dir", err)
	}
	db, err := store.Open(filepath.Join(opts.StateDir, "limbs.db"))
	if err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Plane{
		opts:      opts,
		log:       opts.Logger,
		db:        db,
		secrets:   opts.Secrets,
		cancel:    cancel,
		sandboxes: map[string]*entry{},
		bg:        bg,
		followers: map[string]*follower{},
	}
	if err := s.openEvents(); err != nil {
		cancel()
		db.Close()
		return nil, err
	}
	s.pool = newPool(s, opts.Pool)
	// Subscribe before reconciling, so that a sandbox dying meanwhile is
	// not missed; the events wait in the channels until reconcile is done.
	var feeds []<-chan sandbox.Event
	for _, p := range opts.Providers {
		evs, err := p.Events(bg)
		if err != nil {
			cancel()
			s.events.Close()
			db.Close()
			return nil, fmt.Errorf("watching %s events: %w", p.Name(), err)
		}
		feeds = append(feeds, evs)
	}
	if err := s.reconcile(ctx, bg); err != nil {
		cancel()
		s.stopFollowers()
		s.wg.Wait()
		s.events.Close()
		db.Close()
		return nil, err
	}
	for _, evs := range feeds {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watch(bg, evs)
		}()
	}
	s.pool.start(bg)
	return s, nil
}

// Instance is this control plane's id, which providers put on every sandbox.
func (s *Plane) Instance() string { return s.db.Instance() }

// Close stops background work and closes the registry. Sandboxes keep
// running: the next Plane on the same state dir re-adopts them.
func (s *Plane) Close() error {
	s.cancel()
	s.stopFollowers()
	s.wg.Wait()
	s.mu.Lock()
	for _, e := range s.sandboxes {
		e.closeIdle()
	}
	s.mu.Unlock()
	return errors.Join(s.events.Close(), s.db.Close())
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteJSON(w, http.StatusOK, wire.Health{Status: "ok", Version: wire.Version})
	})
	m.HandleFunc("POST /v1/sandboxes", s.handleCreate)
	m.HandleFunc("GET /v1/sandboxes", s.handleList)
	m.HandleFunc("GET /v1/sandboxes/{id}", s.handleGet)
	m.HandleFunc("DELETE /v1/sandboxes/{id}", s.handleRemove)
	m.HandleFunc("POST /v1/sandboxes/{id}/stop", s.handleStop)
	m.HandleFunc("POST /v1/sandboxes/{id}/start", s.handleStart)
	m.HandleFunc("GET /v1/sandboxes/{id}/events", s.handleEvents)
	m.HandleFunc("POST /v1/sandboxes/{id}/events", s.handleAppendEvents) // agentevents.go
	m.HandleFunc("GET /v1/events", s.handleAllEvents)
	m.HandleFunc("GET /v1/stats", s.handleUsage) // usage.go
	s.checkpointRoutes(m)                        // checkpoints.go
	m.HandleFunc("GET /v1/sandboxes/{id}/health", s.handleForward)
	m.HandleFunc("/v1/sandboxes/{id}/sessions", s.handleForward)
	m.HandleFunc("/v1/sandboxes/{id}/sessions/", s.handleForward)
	m.HandleFunc("/v1/sandboxes/{id}/files", s.handleForward)
	m.HandleFunc("/v1/sandboxes/{id}/files/", s.handleForward)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteError(w, fmt.Errorf("no route %s %s; see docs/api.md: %w", r.Method, r.URL.Path, wire.ErrNotFound))
	})
	s.mux = m
}

// ServeHTTP caps the body (guardBody), checks the bearer token and routes
// the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.guardBody(w, r) {
		return
	}
	if r.URL.Path != "/v1/health" && !s.authorized(r) {
		// Nothing of an unauthenticated client is kept: not its body,
		// not its connection.
		w.Header().Set("Connection", "close")
		wire.WriteError(w, fmt.Errorf("missing or wrong bearer token: send Authorization: Bearer TOKEN (the token `limbs serve` printed or wrote to its state dir): %w", wire.ErrUnauthorized))
		return
	}
	s.recordCall(w, r)
}

func (s *Server) authorized(r *http.Request) bool { return s.token.Check(r) }

func (s *Plane) provider(name string) (Provider, error) {
	if name == "" {
		name = s.opts.DefaultProvider
	}
	p, ok := s.opts.Providers[name]
	if !ok {
		return nil, fmt.Errorf("provider %q is not available here; use one of: %s: %w", name, strings.Join(providerNames(s.opts.Providers), ", "), wire.ErrBadRequest)
	}
	return p, nil
}

func providerNames(m map[string]Provider) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// newID returns prefix + 16 lowercase base32 characters (80 random bits):
// short, so that socket paths stay under the 108-byte limit.
func newID(prefix string) string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// errGone marks a lifecycle call on a sandbox removed meanwhile.
var errGone = errors.New("sandbox was removed")
