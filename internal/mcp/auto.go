package mcp

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

// /mcp: the control plane's MCP endpoint.
//
// /mcp?sandbox=ID is the same endpoint as /v1/sandboxes/ID/mcp. /mcp with
// no sandbox gives each MCP session a sandbox of its own
// (HTTPOptions.Create), made on the session's first use of it (the first
// call that runs a command or touches a file: an initialize, a tools/list
// or a client's health check makes none), and removed when the session
// ends: the client deletes the session (DELETE with its Mcp-Session-Id),
// the session idles out (HTTPOptions.SessionTimeout, 30 minutes by
// default), its initialization fails, or the handler is closed
// (Handler.Close, when limbs serve shuts down). The same token and Origin
// checks as every MCP endpoint come first.

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

// autoSession is the sandbox of one MCP session at /mcp with no sandbox:
// its tool.Sessions and tool.Files, which make the sandbox on first use.
type autoSession struct {
	h *Handler

	mu  sync.Mutex
	srv *sdk.Server        // the session's server, set when it is built
	ss  *sdk.ServerSession // its session once initialized

	// cmu guards the sandbox's state; it is held while the sandbox is
	// made, so that the parallel first calls of a session make one.
	cmu     sync.Mutex
	ended   bool
	sandbox string
	remove  func()
	ses     tool.Sessions
	files   tool.Files
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

// errNoSandbox: the session made no sandbox yet (so there is nothing to
// delete), or it ended and its sandbox is gone.
var errNoSandbox = fmt.Errorf("this MCP session has no sandbox (none made yet, or the session ended): %w", wire.ErrNotFound)

// get returns the session's sandbox, made now when create is set and there
// is none yet.
func (a *autoSession) get(ctx context.Context, create bool) (tool.Sessions, tool.Files, error) {
	a.cmu.Lock()
	defer a.cmu.Unlock()
	if a.ended || (a.ses == nil && !create) {
		return nil, nil, errNoSandbox
	}
	if a.ses != nil {
		return a.ses, a.files, nil
	}
	id, remove, err := a.h.opts.Create(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("creating a sandbox for this MCP session: %w", err)
	}
	ses, files, err := a.h.opts.Connect(ctx, id)
	if err != nil {
		remove()
		return nil, nil, fmt.Errorf("the sandbox %q made for this MCP session: %w", id, err)
	}
	a.sandbox, a.remove, a.ses, a.files = id, remove, ses, files
	a.h.opts.Logger.Info("made a sandbox for an MCP session", "sandbox", id)
	return ses, files, nil
}

func (a *autoSession) sessions(ctx context.Context) (tool.Sessions, error) {
	s, _, err := a.get(ctx, true)
	return s, err
}

func (a *autoSession) fileStore(ctx context.Context) (tool.Files, error) {
	_, f, err := a.get(ctx, true)
	return f, err
}

// end removes the session's sandbox, if it made one; later calls find
// none.
func (a *autoSession) end() {
	a.cmu.Lock()
	if a.ended {
		a.cmu.Unlock()
		return
	}
	a.ended = true
	remove, id := a.remove, a.sandbox
	a.cmu.Unlock()
	if remove != nil {
		a.h.opts.Logger.Info("removing the sandbox of an ended MCP session", "sandbox", id)
		remove()
	}
}

// serveAuto starts an MCP session at /mcp with no sandbox: it serves the
// initialize request with an autoSession, whose sandbox is removed when
// the session ends.
func (h *Handler) serveAuto(w http.ResponseWriter, r *http.Request) {
	if h.opts.Create == nil {
		wire.WriteError(w, fmt.Errorf("this server makes no sandbox for an MCP session: name one with %s?sandbox=ID: %w", RootPath, wire.ErrNotFound))
		return
	}
	a := &autoSession{h: h}
	h.mu.Lock()
	h.autos[a] = true
	h.mu.Unlock()
	ctx := context.WithValue(r.Context(), connKey{}, connected{sessions: autoSessions{a}, files: autoFiles{a}, auto: a})
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
	go func() {
		_ = ss.Wait()
		h.endAuto(a)
	}()
}

// endAuto ends a and forgets it.
func (h *Handler) endAuto(a *autoSession) {
	h.mu.Lock()
	delete(h.autos, a)
	h.mu.Unlock()
	a.end()
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

// autoSessions is the tool.Sessions of an autoSession.
type autoSessions struct{ a *autoSession }

func (s autoSessions) CreateSession(ctx context.Context, req wire.CreateSession) (wire.Session, error) {
	c, err := s.a.sessions(ctx)
	if err != nil {
		return wire.Session{}, err
	}
	return c.CreateSession(ctx, req)
}

func (s autoSessions) ListSessions(ctx context.Context) ([]wire.Session, error) {
	c, err := s.a.sessions(ctx)
	if err != nil {
		return nil, err
	}
	return c.ListSessions(ctx)
}

// DeleteSession never makes a sandbox: without one there is nothing to
// delete (the default session is deleted when the MCP session ends).
func (s autoSessions) DeleteSession(ctx context.Context, id string) error {
	c, _, err := s.a.get(ctx, false)
	if err != nil {
		return err
	}
	return c.DeleteSession(ctx, id)
}

func (s autoSessions) Restart(ctx context.Context, id string) (wire.Session, error) {
	c, err := s.a.sessions(ctx)
	if err != nil {
		return wire.Session{}, err
	}
	return c.Restart(ctx, id)
}

func (s autoSessions) Exec(ctx context.Context, id string, req wire.Exec) (wire.Result, error) {
	c, err := s.a.sessions(ctx)
	if err != nil {
		return wire.Result{}, err
	}
	return c.Exec(ctx, id, req)
}

func (s autoSessions) Wait(ctx context.Context, id string, req wire.Wait) (wire.Result, error) {
	c, err := s.a.sessions(ctx)
	if err != nil {
		return wire.Result{}, err
	}
	return c.Wait(ctx, id, req)
}

func (s autoSessions) Input(ctx context.Context, id string, req wire.Input) (wire.Result, error) {
	c, err := s.a.sessions(ctx)
	if err != nil {
		return wire.Result{}, err
	}
	return c.Input(ctx, id, req)
}

func (s autoSessions) Interrupt(ctx context.Context, id string, req wire.Interrupt) (wire.Result, error) {
	c, err := s.a.sessions(ctx)
	if err != nil {
		return wire.Result{}, err
	}
	return c.Interrupt(ctx, id, req)
}

func (s autoSessions) Screen(ctx context.Context, id string) (wire.Screen, error) {
	c, err := s.a.sessions(ctx)
	if err != nil {
		return wire.Screen{}, err
	}
	return c.Screen(ctx, id)
}

func (s autoSessions) Output(ctx context.Context, id string, from, to int64) (io.ReadCloser, error) {
	c, err := s.a.sessions(ctx)
	if err != nil {
		return nil, err
	}
	return c.Output(ctx, id, from, to)
}

// autoFiles is the tool.Files of an autoSession.
type autoFiles struct{ a *autoSession }

func (f autoFiles) ReadFile(ctx context.Context, p string) ([]byte, string, error) {
	c, err := f.a.fileStore(ctx)
	if err != nil {
		return nil, "", err
	}
	return c.ReadFile(ctx, p)
}

func (f autoFiles) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode, ifMatch string) (string, error) {
	c, err := f.a.fileStore(ctx)
	if err != nil {
		return "", err
	}
	return c.WriteFile(ctx, p, data, mode, ifMatch)
}

func (f autoFiles) DeleteFile(ctx context.Context, p string) error {
	c, err := f.a.fileStore(ctx)
	if err != nil {
		return err
	}
	return c.DeleteFile(ctx, p)
}

func (f autoFiles) Stat(ctx context.Context, p string) (wire.FileEntry, error) {
	c, err := f.a.fileStore(ctx)
	if err != nil {
		return wire.FileEntry{}, err
	}
	return c.Stat(ctx, p)
}

func (f autoFiles) List(ctx context.Context, dir string, depth int) ([]wire.FileEntry, error) {
	c, err := f.a.fileStore(ctx)
	if err != nil {
		return nil, err
	}
	return c.List(ctx, dir, depth)
}

// autoCheckpointer is the checkpoint tools' way to the sandbox of an
// autoSession: made, like for any tool, on the first call.
type autoCheckpointer struct {
	a *autoSession
	c tool.Checkpointer
}

func (ac autoCheckpointer) id(ctx context.Context) (string, error) {
	if _, err := ac.a.sessions(ctx); err != nil {
		return "", err
	}
	ac.a.cmu.Lock()
	defer ac.a.cmu.Unlock()
	return ac.a.sandbox, nil
}

func (ac autoCheckpointer) Checkpoint(ctx context.Context, _ string, req wire.CreateCheckpoint) (wire.Checkpoint, error) {
	id, err := ac.id(ctx)
	if err != nil {
		return wire.Checkpoint{}, err
	}
	return ac.c.Checkpoint(ctx, id, req)
}

func (ac autoCheckpointer) Checkpoints(ctx context.Context, _ string) ([]wire.Checkpoint, error) {
	id, err := ac.id(ctx)
	if err != nil {
		return nil, err
	}
	return ac.c.Checkpoints(ctx, id)
}

func (ac autoCheckpointer) Restore(ctx context.Context, _ string, cp string) (wire.Restored, error) {
	id, err := ac.id(ctx)
	if err != nil {
		return wire.Restored{}, err
	}
	return ac.c.Restore(ctx, id, cp)
}
