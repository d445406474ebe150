// Package mcp serves the agent-facing tools of internal/tool over the
// Model Context Protocol, on the official MCP Go SDK: over stdio (`limbs
// mcp`) and over streamable HTTP (`limbs serve` at /mcp).
//
// One MCP session is one agent: NewServer builds a server with its own
// tool.Shell (so its own default limbs session, created on first use and
// closed when the MCP session ends) and serves each tool.Spec with its
// input and output schemas, structuredContent plus the same facts as text,
// isError for refusals, and the tool annotations.
//
// Cancellation: a call the client cancels (notifications/cancelled, or
// the connection going away) interrupts the command it was running or
// waiting for: the Sessions the Shell uses are wrapped, and when an exec,
// input or wait call returns because its MCP call was cancelled, the
// session gets Shell.Interrupt (SIGINT to the foreground job, then
// limbsd's escalation) before the handler returns, so the session is free
// for the next call.
//
// Progress: when the client sent a progress token, a goroutine beside the
// long-poll looks at the session every Options.ProgressInterval (its
// output offset, and the last non-blank row of its screen) and sends a
// notifications/progress whose progress is the bytes of output so far,
// and whose message carries the last line. It only observes: the call
// itself is the same single exec/wait long-poll it is without a token, so
// no output is consumed by the progress and the result loses nothing.
//
// Resources: limbs://session/{session}/screen (the emulator's screen of a
// session) and limbs://command/{session}/{command}/output (the cleaned
// output of a command this connection ran, its first MaxResourceBytes),
// as resource templates.
//
// Concurrency: the SDK handles each call on its own goroutine, so calls on
// different sessions run in parallel; a second call on a busy session is
// answered by the Shell's refusal, which says what to do. The only
// goroutines this package starts are the progress observers (one per
// running call with a token, ended before the call returns) and one per
// MCP session that waits for its end to close its default session.
//
// It must never let a web page drive a sandbox: the HTTP handler (http.go)
// requires the control plane's token and refuses a foreign Origin.
package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

// ToolSet builds the tools of one MCP session over its Shell and the
// sandbox's files: tool.Canonical, or a profile.
type ToolSet func(sh *tool.Shell, files tool.Files) ([]tool.Spec, error)

// Canonical is the default ToolSet: tool.Canonical with a fresh editor.
func Canonical(sh *tool.Shell, files tool.Files) ([]tool.Spec, error) {
	return tool.Canonical(sh, files, nil), nil
}

// withTools is ts (Canonical when nil) followed by more.
func withTools(ts ToolSet, more []tool.Spec) ToolSet {
	if ts == nil {
		ts = Canonical
	}
	return func(sh *tool.Shell, files tool.Files) ([]tool.Spec, error) {
		specs, err := ts(sh, files)
		if err != nil {
			return nil, err
		}
		return append(specs, more...), nil
	}
}

// Options configure NewServer.
type Options struct {
	// Tools builds the tool set; nil: Canonical.
	Tools ToolSet
	// Shell configures each session's tool.Shell. An empty
	// Shell.Session.Name is given a unique "mcp-" name.
	Shell tool.ShellOptions
	// ProgressInterval is how often a running call with a progress
	// token is looked at; 0: one second.
	ProgressInterval time.Duration
	// InterruptTimeout bounds the interrupt of a cancelled call's
	// command (limbsd's escalation included); 0: 30 s.
	InterruptTimeout time.Duration
	// KeepDefaultSession leaves the default session running when the
	// MCP session ends (it is closed otherwise).
	KeepDefaultSession bool
	// Name and Version are the server's implementation info; empty:
	// "limbs" and wire.Version.
	Name, Version string
	Logger        *slog.Logger
}

// MaxResourceBytes is the most output bytes a command-output resource
// holds; shell_read pages through the rest.
const MaxResourceBytes = 1 << 20

// Server is the MCP server of one MCP session: the SDK's server with the
// tools of its own Shell.
type Server struct {
	*sdk.Server
	c *conn
}

// Run serves the MCP session on t (stdio: &sdk.StdioTransport{}) until
// the client goes away or ctx ends, then closes the default session
// (unless Options.KeepDefaultSession).
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	err := s.Server.Run(ctx, t)
	if !s.c.opts.KeepDefaultSession {
		s.c.closeDefault()
	}
	return err
}

// NewServer returns the MCP server of one MCP session (one connection)
// to a sandbox, reached through sessions and files (*client.Client and
// its FileStore). Run it on one transport (Server.Run, or return its
// SDK server from the getServer of a streamable HTTP handler).
func NewServer(sessions tool.Sessions, files tool.Files, opts Options) (*Server, error) {
	if opts.Tools == nil {
		opts.Tools = Canonical
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = time.Second
	}
	if opts.InterruptTimeout <= 0 {
		opts.InterruptTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Shell.Session.Name == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		opts.Shell.Session.Name = "mcp-" + hex.EncodeToString(b)
	}
	c := &conn{opts: opts, raw: sessions, polls: map[string]*poll{}}
	c.sh = tool.NewShell(&watched{Sessions: sessions, c: c}, opts.Shell)
	specs, err := opts.Tools(c.sh, files)
	if err != nil {
		return nil, err
	}
	impl := &sdk.Implementation{Name: cmpOr(opts.Name, "limbs"), Version: cmpOr(opts.Version, wire.Version)}
	srv := sdk.NewServer(impl, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       opts.Logger,
		Capabilities: &sdk.ServerCapabilities{},
		InitializedHandler: func(ctx context.Context, req *sdk.InitializedRequest) {
			if opts.KeepDefaultSession {
				return
			}
			ss := req.Session
			go func() {
				_ = ss.Wait()
				c.closeDefault()
			}()
		},
	})
	for _, s := range specs {
		srv.AddTool(sdkTool(s), c.handler(s))
	}
	srv.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "session-screen",
		Title:       "Screen of a session",
		Description: "What a terminal showing the session displays now: its rows, cursor, whether a full-screen program holds the alternate screen, and its title. {session} is a session id or name (session action=list).",
		MIMEType:    "text/plain",
		URITemplate: "limbs://session/{session}/screen",
	}, c.readScreen)
	srv.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "command-output",
		Title:       "Output of a command",
		Description: fmt.Sprintf("The output of a command this connection ran, cleaned as results show it (its first %d bytes; shell_read pages through the rest). {session} is its session, {command} its id (c_N).", MaxResourceBytes),
		MIMEType:    "text/plain",
		URITemplate: "limbs://command/{session}/{command}/output",
	}, c.readOutput)
	return &Server{Server: srv, c: c}, nil
}

const instructions = "limbs gives you persistent bash sessions in a sandbox. shell_run runs a command and answers when it ends or its yield passes; " +
	"a command still running is continued with shell_wait or shell_input (text, or keys such as C-c). " +
	"Every result ends with a fact block in brackets: exit code, cwd, what is on the screen, and the exact byte ranges shown; shell_read pages through a long output."

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// conn is the state of one MCP session.
type conn struct {
	opts Options
	raw  tool.Sessions // not wrapped: for the progress observer and cleanup
	sh   *tool.Shell

	mu    sync.Mutex       // guards polls
	polls map[string]*poll // session id (as the Shell names it) -> its long-poll
}

// poll is a long-poll (exec, input or wait) of a session by a tool call.
type poll struct {
	cl   *call
	done chan struct{} // closed when it returned and, if cancelled, its command was interrupted
}

// sdkTool is the MCP description of s.
func sdkTool(s tool.Spec) *sdk.Tool {
	destructive := s.Annotations.Destructive
	t := &sdk.Tool{
		Name:        s.Name,
		Description: s.Description,
		InputSchema: s.InputSchema,
		Annotations: &sdk.ToolAnnotations{
			ReadOnlyHint:    s.Annotations.ReadOnly,
			DestructiveHint: &destructive,
			IdempotentHint:  s.Annotations.Idempotent,
			// OpenWorldHint stays unset (true): a sandbox may have a network.
		},
	}
	if len(s.OutputSchema) > 0 {
		t.OutputSchema = s.OutputSchema
	}
	return t
}

// callKey marks the context of a tool call, for the wrapped Sessions.
type callKey struct{}

// call is one running tool call.
type call struct {
	ctx   context.Context // the MCP call's own context: cancelled by the client
	token any             // the progress token, nil when none was sent
	ss    *sdk.ServerSession

	mu   sync.Mutex // guards last
	last float64    // the last progress sent: progress must increase
}

func (c *conn) handler(s tool.Spec) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		cl := &call{ctx: ctx, ss: req.Session}
		var args json.RawMessage
		if req.Params != nil {
			cl.token = req.Params.GetProgressToken()
			args = req.Params.Arguments
		}
		r, err := s.Call(context.WithValue(ctx, callKey{}, cl), args)
		if err != nil {
			if ctx.Err() != nil {
				// The client gave up on the call: the command was
				// interrupted (watched); nobody reads this answer.
				return nil, ctx.Err()
			}
			c.opts.Logger.Warn("tool call failed", "tool", s.Name, "err", err) // the details, for the operator
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: failure(s.Name, err)}}}, nil
		}
		res := &sdk.CallToolResult{IsError: r.IsError, Content: []sdk.Content{&sdk.TextContent{Text: r.Text}}}
		if r.Structured != nil {
			res.StructuredContent = r.Structured
		}
		return res, nil
	}
}

// failure is the model-facing text of a call that could not be carried
// out at all: what happened, in words that name no HTTP route, and what
// to do. The daemon's own words are kept up to their first "; " (after
// which its hints name its API); an error that never reached it (a dial,
// a timeout) is said to be one.
func failure(name string, err error) string {
	var re *wire.RemoteError
	if errors.As(err, &re) {
		msg, _, _ := strings.Cut(re.Message, "; ")
		if errors.Is(err, wire.ErrGone) || errors.Is(err, wire.ErrUnavailable) {
			return fmt.Sprintf("%s could not be carried out: the sandbox is not available (%s). Try again in a moment; if it stays so, the sandbox was stopped or removed.", name, msg)
		}
		return fmt.Sprintf("%s could not be carried out: the sandbox answered: %s. Try the call again; if it fails the same way, the person running this server should check the sandbox.", name, msg)
	}
	return fmt.Sprintf("%s could not be carried out: the sandbox could not be reached. Try the call again in a moment; if it fails the same way, the sandbox is down and the person running this server should check it (its log has the details).", name)
}

// closeDefault closes the session's default limbs session, if it made one.
func (c *conn) closeDefault() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.raw.DeleteSession(ctx, c.opts.Shell.Session.Name); err != nil && !errors.Is(err, wire.ErrNotFound) {
		c.opts.Logger.Warn("closing the default session of an MCP session", "session", c.opts.Shell.Session.Name, "err", err)
	}
}

// watched is the Sessions of a Shell as the MCP server sees it: the
// calls that run or follow a command report progress and are interrupted
// when their MCP call is cancelled.
type watched struct {
	tool.Sessions
	c *conn
}

func (w *watched) Exec(ctx context.Context, id string, req wire.Exec) (wire.Result, error) {
	return w.c.follow(ctx, id, func(ctx context.Context) (wire.Result, error) { return w.Sessions.Exec(ctx, id, req) })
}

func (w *watched) Wait(ctx context.Context, id string, req wire.Wait) (wire.Result, error) {
	return w.c.follow(ctx, id, func(ctx context.Context) (wire.Result, error) { return w.Sessions.Wait(ctx, id, req) })
}

func (w *watched) Input(ctx context.Context, id string, req wire.Input) (wire.Result, error) {
	return w.c.follow(ctx, id, func(ctx context.Context) (wire.Result, error) { return w.Sessions.Input(ctx, id, req) })
}

// follow runs one long-poll of session id for the tool call in ctx.
func (c *conn) follow(ctx context.Context, id string, f func(context.Context) (wire.Result, error)) (wire.Result, error) {
	cl, _ := ctx.Value(callKey{}).(*call)
	if cl == nil {
		return f(ctx)
	}
	c.mu.Lock()
	prev := c.polls[id]
	c.mu.Unlock()
	if prev != nil && prev.cl.ctx.Err() != nil {
		// The client cancelled the previous call on this session (the
		// notification is handled before the next request is read) and
		// its command is being interrupted: wait for that, so that this
		// call finds the session free instead of busy.
		select {
		case <-prev.done:
		case <-ctx.Done():
			return wire.Result{}, ctx.Err()
		}
	}
	p := &poll{cl: cl, done: make(chan struct{})}
	c.mu.Lock()
	c.polls[id] = p
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.polls[id] == p {
			delete(c.polls, id)
		}
		c.mu.Unlock()
		close(p.done)
	}()
	stop := c.observe(ctx, cl, id)
	r, err := f(ctx)
	if errors.Is(err, wire.ErrBusy) && prev != nil {
		// Over HTTP the cancellation of the previous call travels on a
		// request of its own and can be overtaken by this one: give it
		// a moment to arrive before answering busy.
		select {
		case <-prev.cl.ctx.Done():
			select {
			case <-prev.done:
				r, err = f(ctx)
			case <-ctx.Done():
			}
		case <-time.After(cancelGrace):
		case <-ctx.Done():
		}
	}
	stop()
	if err != nil && cl.ctx.Err() != nil {
		// The MCP call was cancelled (not only this poll: shell_wait
		// cancels its other waits itself): stop the command, and wait
		// for it to end so that the session is free for the next call.
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.InterruptTimeout)
		defer cancel()
		if _, ierr := c.sh.Interrupt(ictx, id); ierr != nil {
			c.opts.Logger.Warn("interrupting the command of a cancelled call", "session", id, "err", ierr)
		}
	}
	return r, err
}

// cancelGrace is how long a call that finds its session busy waits for
// the cancellation of the call that made it busy.
const cancelGrace = 2 * time.Second

// observe starts the progress observer of one long-poll of session id,
// when the call has a progress token; the func it returns stops it.
func (c *conn) observe(ctx context.Context, cl *call, id string) func() {
	if cl.token == nil || cl.ss == nil {
		return func() {}
	}
	base, _, ok := c.offset(ctx, id)
	if !ok {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(c.opts.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			off, state, ok := c.offset(ctx, id)
			if !ok || state != wire.StateRunning {
				continue
			}
			n := float64(off - base)
			cl.mu.Lock()
			grew := n > cl.last
			if grew {
				cl.last = n
			}
			cl.mu.Unlock()
			if !grew {
				continue
			}
			msg := fmt.Sprintf("%d bytes of output so far", off-base)
			if l := c.lastRow(ctx, id); l != "" {
				msg += "; last line: " + l
			}
			_ = cl.ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: cl.token, Progress: n, Message: msg})
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// offset is the end of session id's output stream and its state.
func (c *conn) offset(ctx context.Context, id string) (int64, string, bool) {
	ss, err := c.raw.ListSessions(ctx)
	if err != nil {
		return 0, "", false
	}
	for _, s := range ss {
		if s.ID == id || s.Name == id {
			return s.OutputOffset, s.State, true
		}
	}
	return 0, "", false
}

// maxProgressLine is the most characters of the last line a progress
// message carries.
const maxProgressLine = 200

// lastRow is the last non-blank row of session id's screen.
func (c *conn) lastRow(ctx context.Context, id string) string {
	s, err := c.raw.Screen(ctx, id)
	if err != nil {
		return ""
	}
	for i := len(s.Lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(s.Lines[i]); l != "" {
			if r := []rune(l); len(r) > maxProgressLine {
				l = string(r[:maxProgressLine]) + "..."
			}
			return l
		}
	}
	return ""
}

// readScreen answers limbs://session/{session}/screen.
func (c *conn) readScreen(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, "limbs://session/")
	session, ok2 := strings.CutSuffix(rest, "/screen")
	if !ok || !ok2 || session == "" || strings.Contains(session, "/") {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	r, err := c.sh.ScreenOf(ctx, tool.ScreenInput{Session: session})
	if err != nil {
		return nil, err
	}
	if r.IsError {
		return nil, fmt.Errorf("%s: %s", uri, r.Text)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: r.Text}}}, nil
}

// readOutput answers limbs://command/{session}/{command}/output.
func (c *conn) readOutput(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, "limbs://command/")
	rest, ok2 := strings.CutSuffix(rest, "/output")
	session, id, ok3 := strings.Cut(rest, "/")
	if !ok || !ok2 || !ok3 || session == "" || id == "" || strings.Contains(id, "/") {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	r, err := c.sh.Read(ctx, tool.ReadInput{Command: id, Session: session, MaxOutput: MaxResourceBytes})
	if err != nil {
		return nil, err
	}
	if r.IsError {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: r.Text}}}, nil
}
