package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/endpoint"
	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

// HTTPOptions configure NewHTTPHandler.
type HTTPOptions struct {
	// Token is the bearer token every request must carry (the control
	// plane's). It must not be empty.
	Token string
	// AllowedOrigins are the origins (scheme://host[:port]) besides the
	// server's own host whose pages may send requests. A request whose
	// Origin header is neither is refused with 403.
	AllowedOrigins []string
	// Connect returns the sessions and files of a sandbox, by the id or
	// name in the URL; an error wrapping wire.ErrNotFound is a 404.
	Connect func(ctx context.Context, sandbox string) (tool.Sessions, tool.Files, error)
	// Server configures the server of each MCP session.
	Server Options
	// SessionTimeout closes an MCP session idle that long (and with it
	// its default limbs session); 0: 30 minutes.
	SessionTimeout time.Duration
	// Create makes a sandbox for an MCP session at /mcp that names none
	// (auto.go), and returns its id and the func that removes it; nil:
	// /mcp needs ?sandbox=ID.
	Create func(ctx context.Context) (sandbox string, remove func(), err error)
	// Checkpoints, when set, adds the checkpoint and rollback tools to
	// every MCP session, acting on its own sandbox (the control plane's
	// checkpoints: docs/checkpoints.md).
	Checkpoints tool.Checkpointer
	Logger      *slog.Logger
}

// Path is the URL path of a sandbox's MCP endpoint: /v1/sandboxes/ID/mcp.
func Path(sandbox string) string { return "/v1/sandboxes/" + url.PathEscape(sandbox) + "/mcp" }

// Handler serves MCP over streamable HTTP at /v1/sandboxes/{id}/mcp,
// one endpoint per sandbox, each MCP session with its own Shell.
type Handler struct {
	opts  HTTPOptions
	token endpoint.Token // the one bearer check of limbsd and limbs serve

	mu       sync.Mutex                            // guards handlers and autos
	handlers map[string]*sdk.StreamableHTTPHandler // by sandbox, as the URL names it
	autos    map[*autoSession]bool                 // the sandboxes made for MCP sessions (auto.go)
}

// NewHTTPHandler returns the streamable HTTP handler of the MCP
// endpoints of a control plane's sandboxes.
func NewHTTPHandler(opts HTTPOptions) (*Handler, error) {
	if opts.Token == "" {
		return nil, fmt.Errorf("the MCP endpoint needs the control plane's token: %w", wire.ErrBadRequest)
	}
	if opts.Connect == nil {
		return nil, fmt.Errorf("the MCP endpoint needs a Connect func: %w", wire.ErrBadRequest)
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Server.Logger == nil {
		opts.Server.Logger = opts.Logger
	}
	return &Handler{opts: opts, token: endpoint.NewToken(opts.Token), handlers: map[string]*sdk.StreamableHTTPHandler{}, autos: map[*autoSession]bool{}}, nil
}

// Match reports whether r is for an MCP endpoint, and which sandbox's:
// /v1/sandboxes/ID/mcp, or /mcp?sandbox=ID; /mcp with no sandbox is
// autoSandbox (a sandbox made for the MCP session, auto.go).
func Match(r *http.Request) (sandbox string, ok bool) {
	p := r.URL.EscapedPath()
	if p == RootPath {
		return rootSandbox(r)
	}
	// /v1/sandboxes/{id}/mcp, {id} one non-empty segment: cut by hand,
	// since every request limbs serve gets passes here (a regexp was 1%
	// of its CPU on the exec round trip).
	rest, ok := strings.CutPrefix(p, "/v1/sandboxes/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/mcp")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	s, err := url.PathUnescape(id)
	if err != nil || s == "" || strings.ContainsAny(s, "/\x00") {
		return "", false
	}
	return s, true
}

// Mount returns a handler that serves the MCP endpoints with h and hands
// every other request to next.
func Mount(h *Handler, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := Match(r); ok {
			h.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type connKey struct{}

type connected struct {
	sessions tool.Sessions
	files    tool.Files
	auto     *autoSession // a sandbox made for this MCP session, or nil
}

// ServeHTTP checks the Origin and the token, then serves MCP.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sandbox, ok := Match(r)
	if !ok {
		wire.WriteError(w, fmt.Errorf("no MCP endpoint at %s: use %s or %s?sandbox=ID: %w", r.URL.Path, RootPath, RootPath, wire.ErrNotFound))
		return
	}
	if !h.originAllowed(r) {
		// A web page (the browser sets Origin) must not drive a
		// sandbox, even one on localhost.
		http.Error(w, fmt.Sprintf("origin %q may not use this MCP endpoint; start limbs serve with --mcp-origin %s to allow it", r.Header.Get("Origin"), r.Header.Get("Origin")), http.StatusForbidden)
		return
	}
	if !h.token.Check(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="limbs"`)
		wire.WriteError(w, fmt.Errorf("missing or wrong bearer token: send Authorization: Bearer TOKEN (the token `limbs serve` printed or wrote to its state dir): %w", wire.ErrUnauthorized))
		return
	}
	if sandbox == autoSandbox && r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		h.serveAuto(w, r) // auto.go
		return
	}
	if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		// A new MCP session: reach its sandbox first, so that a wrong
		// id is a clear 404 rather than the SDK's bare 400.
		ses, files, err := h.opts.Connect(r.Context(), sandbox)
		if err != nil {
			wire.WriteError(w, fmt.Errorf("sandbox %q: %w", sandbox, err))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), connKey{}, connected{sessions: ses, files: files}))
		h.handler(sandbox, true).ServeHTTP(w, r)
		return
	}
	// A request of an MCP session: only a sandbox that had one.
	s := h.handler(sandbox, false)
	if s == nil {
		wire.WriteError(w, fmt.Errorf("no MCP session of sandbox %q here: start one with an initialize request (POST without Mcp-Session-Id): %w", sandbox, wire.ErrNotFound))
		return
	}
	s.ServeHTTP(w, r)
}

// handler returns the SDK handler of sandbox's MCP sessions, making it
// when create is set.
func (h *Handler) handler(sandbox string, create bool) *sdk.StreamableHTTPHandler {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.handlers[sandbox]; s != nil || !create {
		return s
	}
	s := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		c, ok := r.Context().Value(connKey{}).(connected)
		if !ok {
			return nil
		}
		opts := h.opts.Server
		if cp := h.opts.Checkpoints; cp != nil {
			id := sandbox
			if c.auto != nil {
				cp, id = autoCheckpointer{c.auto, cp}, ""
			}
			opts.Tools = withTools(opts.Tools, tool.CheckpointTools(cp, id))
		}
		srv, err := NewServer(c.sessions, c.files, opts)
		if err != nil {
			h.opts.Logger.Warn("building an MCP server", "sandbox", sandbox, "err", err)
			return nil
		}
		if c.auto != nil {
			c.auto.setServer(srv.Server) // auto.go
		}
		return srv.Server
	}, &sdk.StreamableHTTPOptions{Logger: h.opts.Logger, SessionTimeout: h.opts.SessionTimeout})
	h.handlers[sandbox] = s
	return s
}

// originAllowed: no Origin (not a browser), the server's own host, or
// one of the allowed origins.
func (h *Handler) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	for _, a := range h.opts.AllowedOrigins {
		if strings.EqualFold(strings.TrimRight(a, "/"), o) {
			return true
		}
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}
