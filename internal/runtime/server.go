// Package runtime is the HTTP API of limbsd (docs/api.md): it authenticates
// requests, decodes and validates them strictly, and hands them to the shell
// sessions of a shell.Manager and to the file API handler it is given.
//
// It must never decide anything about commands or terminals itself (that is
// package shell), never let a client's disconnect kill a command, and never
// map an error to an HTTP status anywhere but through wire.WriteError (the
// one exception: 405, which no sentinel error stands for).
package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/limbs-dev/limbs/internal/endpoint"
	"github.com/limbs-dev/limbs/internal/journal"
	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/wire"
)

// maxBody caps JSON request bodies of the session routes. Commands longer
// than this belong in a file written through PUT /v1/files.
const maxBody = 8 << 20

// Options configure a Server.
type Options struct {
	// Token is the bearer token every request but GET /v1/health must carry.
	// An empty token refuses every authenticated request: a daemon without a
	// token must not serve shells to anyone who asks.
	Token string
	// Manager owns the shell sessions.
	Manager *shell.Manager
	// Files serves /v1/files and /v1/files/* (package files). Optional: when
	// nil those routes answer 503 unavailable.
	Files http.Handler
	// Journal serves GET /v1/events and records the file API's changes
	// (events.go). Optional: when nil, GET /v1/events answers 503.
	Journal *journal.Journal
	// Checkpoint serves /v1/checkpoint/scan and /v1/checkpoint/restore
	// (package checkpoint), for the control plane. Optional: when nil
	// those routes answer 503.
	Checkpoint http.Handler
	Logger     *slog.Logger
}

// Server is the limbsd HTTP API. It implements http.Handler.
type Server struct {
	opts   Options
	token  endpoint.Token
	mux    *http.ServeMux
	log    *slog.Logger
	routes []route
	// windowWaits counts the waits of batched follows for their
	// window (GET /v1/events?batch_ms=N; a backlog never waits).
	windowWaits atomic.Int64
}

// route is one documented endpoint; the table drives the mux, the 405
// answers and the list of routes a 404 names.
type route struct {
	method  string
	path    string
	public  bool
	handler http.HandlerFunc
}

// New returns a Server serving opts.
func New(opts Options) *Server {
	s := &Server{opts: opts, log: opts.Logger, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.token = endpoint.NewToken(opts.Token)
	s.routes = []route{
		{"GET", "/v1/health", true, s.health},
		{"POST", "/v1/sessions", false, s.createSession},
		{"GET", "/v1/sessions", false, s.listSessions},
		{"GET", "/v1/sessions/{id}", false, s.getSession},
		{"DELETE", "/v1/sessions/{id}", false, s.deleteSession},
		{"POST", "/v1/sessions/{id}/exec", false, s.exec},
		{"POST", "/v1/sessions/{id}/wait", false, s.wait},
		{"POST", "/v1/sessions/{id}/input", false, s.input},
		{"POST", "/v1/sessions/{id}/interrupt", false, s.interrupt},
		{"POST", "/v1/sessions/{id}/restart", false, s.restart},
		{"POST", "/v1/sessions/{id}/resize", false, s.resize},
		{"GET", "/v1/sessions/{id}/screen", false, s.screen},
		{"GET", "/v1/sessions/{id}/output", false, s.output},
		{"GET", "/v1/sessions/{id}/attach", false, s.attach},
		{"GET", "/v1/events", false, s.events},
	}
	methods := map[string][]string{}
	var paths []string
	for _, rt := range s.routes {
		h := http.Handler(rt.handler)
		if !rt.public {
			h = s.authenticated(h)
		}
		s.mux.Handle(rt.method+" "+rt.path, h)
		if methods[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		methods[rt.path] = append(methods[rt.path], rt.method)
	}
	// A pattern without a method is less specific than the ones above, so it
	// only catches the methods nobody registered: answer 405 in the
	// documented error shape instead of the mux's plain text.
	for _, p := range paths {
		allowed := methods[p]
		s.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			wire.WriteJSON(w, http.StatusMethodNotAllowed, wire.Error{Error: wire.ErrorBody{
				Code:    "method_not_allowed",
				Message: fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, p, strings.Join(allowed, " or ")),
			}})
		})
	}
	files := opts.Files
	if files == nil {
		files = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			wire.WriteError(w, fmt.Errorf("this daemon was started without the file API: %w", wire.ErrUnavailable))
		})
	}
	files = journalFiles(opts.Journal, files)
	s.mux.Handle("/v1/files", s.authenticated(files))
	s.mux.Handle("/v1/files/", s.authenticated(files))
	ckpt := opts.Checkpoint
	if ckpt == nil {
		ckpt = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			wire.WriteError(w, fmt.Errorf("this daemon was started without checkpoints: %w", wire.ErrUnavailable))
		})
	}
	s.mux.Handle("POST /v1/checkpoint/", s.authenticated(ckpt))
	s.mux.HandleFunc("/", s.notFound)
	return s
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

func (s *Server) authenticated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			wire.WriteError(w, fmt.Errorf("missing or wrong bearer token: send the header 'Authorization: Bearer TOKEN' with the daemon's token (--token, LIMBS_TOKEN, or the limbsd.token file next to its socket): %w", wire.ErrUnauthorized))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) authorized(r *http.Request) bool { return s.token.Check(r) }

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	seen := map[string]bool{}
	var list []string
	for _, rt := range s.routes {
		e := rt.method + " " + rt.path
		if !seen[e] {
			seen[e] = true
			list = append(list, e)
		}
	}
	list = append(list, "/v1/files...")
	sort.Strings(list)
	wire.WriteError(w, fmt.Errorf("no route %s %s; the API has: %s: %w", r.Method, r.URL.Path, strings.Join(list, ", "), wire.ErrNotFound))
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	wire.WriteJSON(w, http.StatusOK, wire.Health{Status: "ok", Version: wire.Version})
}

// fail writes err; internal errors are also logged, since the client only
// sees a message and the operator needs the context.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if status, _ := wire.StatusOf(err); status >= 500 && !errors.Is(err, wire.ErrUnavailable) {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	wire.WriteError(w, err)
}

// decode reads a JSON body of at most maxBody bytes into v, strictly. A
// body declared larger is refused unread, and the connection closed after
// the answer so that nothing reads it. The body is read to its end before
// decoding: only then does net/http watch the connection, so that the
// request's context ends when the client leaves.
func decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	if err := wire.LimitBody(w, r, maxBody); err != nil {
		w.Header().Set("Connection", "close")
		return err
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		if tl := wire.TooLarge(err); tl != nil {
			return tl
		}
		return fmt.Errorf("reading request body: %v: %w", err, wire.ErrBadRequest)
	}
	if allowEmpty && len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return wire.DecodeJSON(r, v, allowEmpty)
}
