package mcp

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/wire"
)

// /mcp: the control plane's MCP endpoint.
//
// /mcp?sandbox=ID is the same endpoint as /v1/sandboxes/ID/mcp. /mcp with
// no sandbox makes a sandbox for each MCP session (HTTPOptions.Create) when
// the session starts (its initialize request), serves the session's tools
// in it, and removes it when the session ends: the client deletes the
// session (DELETE with its Mcp-Session-Id), the session idles out
// (HTTPOptions.SessionTimeout, 30 minutes by default), or the handler is
// closed (Handler.Close, when limbs serve shuts down). A session whose
// initialization fails has its sandbox removed at once. The same token and
// Origin checks as every MCP endpoint come first, so no sandbox is made
// for a request that fails them.

// RootPath is the URL path of the control plane's MCP endpoint.
const RootPath = "/mcp"

// autoSandbox is what Match returns for /mcp with no sandbox: no sandbox
// id or name can hold a NUL, so it never names a real one.
const autoSandbox = "\x00auto"

// rootSandbox is Match for /mcp: the sandbox of ?sandbox=, or autoSandbox.
func rootSandbox(r *http.Request) (string, bool) {
	v := r.URL.Query()["sandbox"]
	if len(v) == 0 || v[0] == "" {
		return autoSandbox, len(v) <= 1
	}
	if len(v) > 1 || strings.ContainsAny(v[0], "/\x00") {
		return "", false
	}
	return v[0], true
}

// autoSession is a sandbox made for one MCP session.
type autoSession struct {
	sandbox string
	remove  func()
	once    sync.Once

	mu  sync.Mutex
	srv *sdk.Server        // the session's server, set when it is built
	ss  *sdk.ServerSession // its session once initialized
}

func (a *autoSession) setServer(srv *sdk.Server) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.srv = srv
}

func (a *autoSession) server() *sdk.Server {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.srv
}

// serveAuto starts an MCP session at /mcp with no sandbox: it makes the
// session's sandbox, serves the initialize request in it, and removes the
// sandbox when the session ends.
func (h *Handler) serveAuto(w http.ResponseWriter, r *http.Request) {
	if h.opts.Create == nil {
		wire.WriteError(w, fmt.Errorf("this server makes no sandbox for an MCP session: name one with %s?sandbox=ID: %w", RootPath, wire.ErrNotFound))
		return
	}
	id, remove, err := h.opts.Create(r.Context())
	if err != nil {
		wire.WriteError(w, fmt.Errorf("creating a sandbox for this MCP session: %w", err))
		return
	}
	a := &autoSession{sandbox: id, remove: remove}
	h.mu.Lock()
	h.autos[a] = true
	h.mu.Unlock()
	ses, files, err := h.opts.Connect(r.Context(), id)
	if err != nil {
		h.endAuto(a)
		wire.WriteError(w, fmt.Errorf("the sandbox %q made for this MCP session: %w", id, err))
		return
	}
	ctx := context.WithValue(r.Context(), connKey{}, connected{sessions: ses, files: files, auto: a})
	w.Header().Set("Limbs-Sandbox", id)
	h.handler(autoSandbox, true).ServeHTTP(w, r.WithContext(ctx))
	// The initialize request is answered: its session is connected to
	// the server built for it, unless initialization failed.
	var ss *sdk.ServerSession
	if srv := a.server(); srv != nil {
		for s := range srv.Sessions() {
			ss = s
			break
		}
	}
	if ss == nil {
		h.endAuto(a)
		return
	}
	a.mu.Lock()
	a.ss = ss
	a.mu.Unlock()
	h.opts.Logger.Info("made a sandbox for an MCP session", "sandbox", id, "mcp_session", ss.ID())
	go func() {
		_ = ss.Wait()
		h.endAuto(a)
	}()
}

// endAuto removes a's sandbox, once.
func (h *Handler) endAuto(a *autoSession) {
	a.once.Do(func() {
		h.mu.Lock()
		delete(h.autos, a)
		h.mu.Unlock()
		h.opts.Logger.Info("removing the sandbox of an MCP session", "sandbox", a.sandbox)
		a.remove()
	})
}

// Close ends the MCP sessions of /mcp with no sandbox and removes their
// sandboxes. Sessions of a named sandbox are left to the SDK's handler.
func (h *Handler) Close() {
	h.mu.Lock()
	as := make([]*autoSession, 0, len(h.autos))
	for a := range h.autos {
		as = append(as, a)
	}
	h.mu.Unlock()
	for _, a := range as {
		a.mu.Lock()
		ss := a.ss
		a.mu.Unlock()
		if ss != nil {
			_ = ss.Close()
		}
		h.endAuto(a)
	}
}
