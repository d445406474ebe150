package tool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Sessions is what the shell tools need of a sandbox's sessions: the
// session calls of the limbs API, as *client.Client has them. Session ids
// accept a session's name too. Errors wrap the wire sentinels
// (wire.ErrNotFound, wire.ErrBusy, wire.ErrNoCommand, wire.ErrGone, ...).
type Sessions interface {
	CreateSession(ctx context.Context, req wire.CreateSession) (wire.Session, error)
	ListSessions(ctx context.Context) ([]wire.Session, error)
	DeleteSession(ctx context.Context, id string) error
	Restart(ctx context.Context, id string) (wire.Session, error)
	Exec(ctx context.Context, id string, req wire.Exec) (wire.Result, error)
	Wait(ctx context.Context, id string, req wire.Wait) (wire.Result, error)
	Input(ctx context.Context, id string, req wire.Input) (wire.Result, error)
	Interrupt(ctx context.Context, id string, req wire.Interrupt) (wire.Result, error)
	Screen(ctx context.Context, id string) (wire.Screen, error)
	// Output returns the raw bytes [from, to) of the session's output
	// stream (absolute offsets; to < 0: up to now). The caller closes it.
	Output(ctx context.Context, id string, from, to int64) (io.ReadCloser, error)
}

// ShellOptions configure a Shell.
type ShellOptions struct {
	// Session is what the default session is created with (its name
	// must be unique in the sandbox; empty: limbsd names it by its id).
	Session wire.CreateSession
	// MaxOutput is the most raw bytes of output one result shows (head
	// and tail, half each); 0: 16384.
	MaxOutput int
	// MaxLine is the most characters of one line shown; a longer line
	// keeps its head and tail. 0: 2000.
	MaxLine int
}

// Shell is the tool-layer state of one agent (one MCP connection): its
// default session, created on first use, and the commands it ran, so that
// shell_read and shell_wait can name them by id. It is safe for
// concurrent calls; calls on different sessions run in parallel. Its
// mutex is never held across a call to Sessions (nor taken with the
// Editor's): shell_wait's goroutines, one per session it waits on, only
// take it to record what a result says.
type Shell struct {
	s    Sessions
	opts ShellOptions

	mu   sync.Mutex           // guards the fields below
	def  string               // the default session's id, "" until created
	cmds map[string]*cmdState // session id + "/" + command id
	busy map[string]string    // session id -> running command id
	cwd  string               // the default session's cwd, as last seen
}

// cmdState is what the Shell knows of one command from its results.
type cmdState struct {
	session, id, command string
	class                YieldClass
	timeout              float64 // seconds, 0: none
	start, end           int64   // offset_start, the last offset_end
	ended                bool
	last                 wire.Result // without its output (see finish)
	lastLine             string      // the last line of output shown so far
}

// NewShell returns the shell tools over s.
func NewShell(s Sessions, opts ShellOptions) *Shell {
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = 16384
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = 2000
	}
	return &Shell{s: s, opts: opts, cmds: map[string]*cmdState{}, busy: map[string]string{}}
}

// Cwd is the default session's working directory as the last result
// showed it ("" before the first): the cwd the file tools resolve
// relative paths from.
func (sh *Shell) Cwd() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.cwd
}

// DefaultSession returns the default session's id, creating the session
// on first use.
func (sh *Shell) DefaultSession(ctx context.Context) (string, error) {
	sh.mu.Lock()
	id := sh.def
	sh.mu.Unlock()
	if id != "" {
		return id, nil
	}
	s, err := sh.s.CreateSession(ctx, sh.opts.Session)
	if err != nil {
		return "", fmt.Errorf("creating the default session: %w", err)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.def != "" { // a concurrent call won: keep one default
		go func() { _ = sh.s.DeleteSession(context.WithoutCancel(ctx), s.ID) }()
		return sh.def, nil
	}
	sh.def, sh.cwd = s.ID, s.Cwd
	return s.ID, nil
}

// session resolves the session a call names ("" is the default).
func (sh *Shell) session(ctx context.Context, name string) (string, error) {
	if name == "" {
		return sh.DefaultSession(ctx)
	}
	return name, nil
}

// forget drops the default session when it is id (closed, or gone).
func (sh *Shell) forget(id string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.def == id {
		sh.def = ""
	}
	delete(sh.busy, id)
}

// RunInput is the input of shell_run.
type RunInput struct {
	Command string `json:"command"`
	Session string `json:"session,omitempty"`
	// Timeout is the hard limit in seconds (0: none).
	Timeout float64 `json:"timeout,omitempty"`
	// Yield is the soft limit in seconds: answer "still running" after
	// it. Absent: DefaultYield of the command.
	Yield *float64 `json:"yield,omitempty"`
	// Until: answer as soon as one of these conditions holds, evaluated
	// by limbsd on the live command (yield still bounds the wait).
	Until *wire.Until `json:"until,omitempty"`
}

// InputInput is the input of shell_input.
type InputInput struct {
	Text    string      `json:"text,omitempty"`
	Keys    []string    `json:"keys,omitempty"`
	Session string      `json:"session,omitempty"`
	Yield   *float64    `json:"yield,omitempty"`
	Until   *wire.Until `json:"until,omitempty"`
}

// WaitInput is the input of shell_wait.
type WaitInput struct {
	Session string `json:"session,omitempty"`
	// Commands are ids of commands this Shell ran, to wait for instead of
	// one session: c_N (the default session's, or the only one with that
	// id) or SESSION:c_N.
	Commands []string    `json:"commands,omitempty"`
	Yield    *float64    `json:"yield,omitempty"`
	Mode     string      `json:"mode,omitempty"` // any (default) or all
	Until    *wire.Until `json:"until,omitempty"`
}

// ShellOutput is the structured result of shell_run, shell_input and
// shell_wait: the facts the text states.
type ShellOutput struct {
	Session string `json:"session"`
	Command string `json:"command,omitempty"` // the command id, c_N
	// Status is exited, running, timeout, interrupted, or idle (input
	// typed while no command ran; a wait with nothing running).
	Status     string `json:"status"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Signal     string `json:"signal,omitempty"` // SIGKILL for exit code 137
	Cwd        string `json:"cwd,omitempty"`
	DurationMs int64  `json:"duration_ms"`
	Output     string `json:"output"`
	// OutputBytes is the size of the command's raw output so far; Shown
	// the byte ranges [from, to) of it (0 = the command's first byte)
	// that Output holds, and Truncated that some of this result's bytes
	// are not among them (shell_read reads them).
	OutputBytes int64      `json:"output_bytes"`
	Shown       [][2]int64 `json:"shown,omitempty"`
	Truncated   bool       `json:"truncated,omitempty"`
	// ClampedLines counts lines cut to MaxLine characters.
	ClampedLines int `json:"clamped_lines,omitempty"`
	// Overwrite: the first line of Output redraws the last line of the
	// previous result (a progress bar).
	Overwrite bool `json:"overwrite,omitempty"`
	// Missing is a range of the output the sandbox no longer keeps (its
	// disk bound cut it).
	Missing []int64 `json:"missing,omitempty"`
	// Unseen is a range of the output no result showed (a result lost
	// on its way): shell_read reads it.
	Unseen          []int64 `json:"unseen,omitempty"`
	WaitingForInput bool    `json:"waiting_for_input,omitempty"`
	Prompt          string  `json:"prompt,omitempty"`
	EchoOff         bool    `json:"echo_off,omitempty"`
	// OnScreen is pager, full_screen or confirm when a program holds the
	// terminal; Program names it when known, and Leave is the input that
	// leaves it (or answers it).
	OnScreen         string      `json:"on_screen,omitempty"`
	Program          string      `json:"program,omitempty"`
	Leave            *InputInput `json:"leave,omitempty"`
	BackgroundOutput string      `json:"background_output,omitempty"`
	// Background lists processes the command left running when it ended
	// (at most ten); BackgroundCount is how many there were.
	Background      []BackgroundProcess `json:"background,omitempty"`
	BackgroundCount int                 `json:"background_count,omitempty"`
	ShellExited     bool                `json:"shell_exited,omitempty"`
	ShellReplaced   bool                `json:"shell_replaced,omitempty"`
	// EndRecovered: the end was read from the shell's process state, not
	// its hooks (see the text for why); ExitCode may then be unknown.
	EndRecovered bool       `json:"end_recovered,omitempty"`
	YieldSeconds float64    `json:"yield_seconds,omitempty"`
	YieldClass   YieldClass `json:"yield_class,omitempty"`
	Timeout      float64    `json:"timeout,omitempty"`

	// Matched names the until condition that ended the wait (output,
	// port, quiet, screen) while the command runs on; MatchedText is what
	// held: the text matched, or the address listening.
	Matched     string `json:"matched,omitempty"`
	MatchedText string `json:"matched_text,omitempty"`

	// screen is the screen excerpt the text shows of a program on the
	// alternate screen (for the profiles, which write their own text).
	screen string
}

// WaitOutput is the structured result of shell_wait: one ShellOutput per
// session or command waited for.
type WaitOutput struct {
	Results []ShellOutput `json:"results"`
}

// RunTool describes shell_run.
func (sh *Shell) RunTool() Tool[RunInput, ShellOutput] {
	return Tool[RunInput, ShellOutput]{Name: "shell_run", Description: runDescription, InputSchema: []byte(shellRunSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in RunInput) (Result[ShellOutput], error) {
			return sh.Run(ctx, in)
		}}
}

// InputTool describes shell_input.
func (sh *Shell) InputTool() Tool[InputInput, ShellOutput] {
	return Tool[InputInput, ShellOutput]{Name: "shell_input", Description: inputDescription, InputSchema: []byte(shellInputSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in InputInput) (Result[ShellOutput], error) {
			return sh.Input(ctx, in)
		}}
}

// WaitTool describes shell_wait.
func (sh *Shell) WaitTool() Tool[WaitInput, WaitOutput] {
	return Tool[WaitInput, WaitOutput]{Name: "shell_wait", Description: waitDescription, InputSchema: []byte(shellWaitSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in WaitInput) (Result[WaitOutput], error) {
			return sh.Wait(ctx, in)
		}}
}

// Run carries out one shell_run call.
func (sh *Shell) Run(ctx context.Context, in RunInput) (Result[ShellOutput], error) {
	if strings.TrimSpace(in.Command) == "" {
		return refusal[ShellOutput]("`command` is empty: give the shell text to run."), nil
	}
	if in.Timeout < 0 || in.Yield != nil && *in.Yield < 0 {
		return refusal[ShellOutput]("`timeout` and `yield` are seconds, 0 or more."), nil
	}
	class, yield := DefaultYield(in.Command)
	if in.Yield != nil {
		yield = *in.Yield
	}
	sid, err := sh.session(ctx, in.Session)
	if err != nil {
		return Result[ShellOutput]{}, err
	}
	maxOut := sh.opts.MaxOutput
	req := wire.Exec{Command: in.Command, Timeout: in.Timeout, YieldAfter: &yield, MaxOutput: &maxOut, Until: in.Until}
	var r wire.Result
	for attempt := 0; ; attempt++ {
		r, err = sh.s.Exec(ctx, sid, req)
		if errors.Is(err, wire.ErrUnavailable) && attempt < 2 {
			// The shell had just exited and its successor is starting:
			// limbsd says retry.
			select {
			case <-ctx.Done():
				return Result[ShellOutput]{}, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if errors.Is(err, wire.ErrNotFound) && in.Session == "" && attempt < 1 {
			// The default session is gone (closed elsewhere): start another.
			sh.forget(sid)
			if sid, err = sh.DefaultSession(ctx); err != nil {
				return Result[ShellOutput]{}, err
			}
			continue
		}
		break
	}
	if err != nil {
		return sh.callErr(sid, in.Session, err)
	}
	c := &cmdState{session: sid, id: r.CommandID, command: in.Command, class: class, timeout: in.Timeout, start: r.OffsetStart, end: r.OffsetStart}
	sh.mu.Lock()
	if r.CommandID != "" {
		sh.cmds[sid+"/"+r.CommandID] = c
	}
	sh.mu.Unlock()
	res, err := sh.finish(ctx, c, r, in.Until)
	res.Out.YieldSeconds, res.Out.YieldClass = yield, class
	if in.Yield != nil {
		res.Out.YieldClass = ""
	}
	res.Out.Timeout = in.Timeout
	return res, err
}

// callErr turns an error of a session call into a refusal the model can
// act on, or returns it.
func (sh *Shell) callErr(sid, named string, err error) (Result[ShellOutput], error) {
	switch {
	case errors.Is(err, wire.ErrBusy):
		running := sh.runningIn(sid)
		return refusal[ShellOutput](fmt.Sprintf("Session %s is still running command %s. Wait for it with shell_wait, answer it with shell_input, stop it with shell_input keys=[\"C-c\"], or run this in another session (session action=create).", sid, running)), nil
	case errors.Is(err, wire.ErrNotFound) && named != "":
		return refusal[ShellOutput](fmt.Sprintf("There is no session %q. session action=list shows the sessions; session action=create makes one.", named)), nil
	case errors.Is(err, wire.ErrNoCommand):
		return Result[ShellOutput]{Text: fmt.Sprintf("[nothing is running in session %s]", sid), Out: ShellOutput{Session: sid, Status: "idle"}}, nil
	case errors.Is(err, wire.ErrBadRequest):
		return refusal[ShellOutput]("Refused: " + detail(err) + "."), nil
	}
	return Result[ShellOutput]{}, err
}

func (sh *Shell) runningIn(sid string) string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if id := sh.busy[sid]; id != "" {
		return id
	}
	return "(started elsewhere)"
}

// current is the command the Shell last saw running in sid, or a new
// record for one it did not start.
func (sh *Shell) current(sid, id string, off int64) *cmdState {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c := sh.cmds[sid+"/"+id]; c != nil {
		return c
	}
	c := &cmdState{session: sid, id: id, class: YieldBuild, start: off, end: off}
	if id != "" {
		sh.cmds[sid+"/"+id] = c
	}
	return c
}

// continueYield is the yield of a call that continues the command running
// in sid: its class's, or 10 s when nothing the Shell knows runs.
func (sh *Shell) continueYield(sid string, given *float64) float64 {
	if given != nil {
		return *given
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c := sh.cmds[sid+"/"+sh.busy[sid]]; c != nil && sh.busy[sid] != "" {
		return c.class.Seconds()
	}
	return YieldQuick.Seconds()
}

// Input carries out one shell_input call.
func (sh *Shell) Input(ctx context.Context, in InputInput) (Result[ShellOutput], error) {
	if in.Text == "" && len(in.Keys) == 0 {
		return refusal[ShellOutput]("Give `text` to type, `keys` to press, or both (text first)."), nil
	}
	sid, err := sh.session(ctx, in.Session)
	if err != nil {
		return Result[ShellOutput]{}, err
	}
	yield := sh.continueYield(sid, in.Yield)
	maxOut := sh.opts.MaxOutput
	r, err := sh.s.Input(ctx, sid, wire.Input{Text: in.Text, Keys: in.Keys, YieldAfter: &yield, MaxOutput: &maxOut, Until: in.Until})
	if err != nil {
		return sh.callErr(sid, in.Session, err)
	}
	c := sh.current(sid, r.CommandID, r.OffsetStart)
	sh.mu.Lock()
	if c.command == "" && r.CommandID != "" {
		c.command = in.Text // input that started a command
	}
	sh.mu.Unlock()
	res, err := sh.finish(ctx, c, r, in.Until)
	res.Out.YieldSeconds = yield
	return res, err
}

// Interrupt stops the command running in session ("" the default): SIGINT
// to its foreground job, then the daemon's escalation. It is for a
// cancelled call (the MCP client gave up on it).
func (sh *Shell) Interrupt(ctx context.Context, session string) (Result[ShellOutput], error) {
	sid, err := sh.session(ctx, session)
	if err != nil {
		return Result[ShellOutput]{}, err
	}
	maxOut := sh.opts.MaxOutput
	r, err := sh.s.Interrupt(ctx, sid, wire.Interrupt{MaxOutput: &maxOut})
	if err != nil {
		return sh.callErr(sid, session, err)
	}
	return sh.finish(ctx, sh.current(sid, r.CommandID, r.OffsetStart), r, nil)
}

// Wait carries out one shell_wait call.
func (sh *Shell) Wait(ctx context.Context, in WaitInput) (Result[WaitOutput], error) {
	if in.Mode != "" && in.Mode != "any" && in.Mode != "all" {
		return refusal[WaitOutput](fmt.Sprintf("`mode` is any or all, not %q.", in.Mode)), nil
	}
	if len(in.Commands) > 0 && in.Session != "" {
		return refusal[WaitOutput]("Give `session` or `commands`, not both."), nil
	}
	var sids []string
	if len(in.Commands) == 0 {
		sid, err := sh.session(ctx, in.Session)
		if err != nil {
			return Result[WaitOutput]{}, err
		}
		sids = []string{sid}
	} else {
		for _, ref := range in.Commands {
			id, session := ref, ""
			if i := strings.LastIndexByte(ref, ':'); i >= 0 {
				session, id = ref[:i], ref[i+1:]
			}
			c := sh.lookup(id, session)
			if c == nil {
				return refusal[WaitOutput](fmt.Sprintf("No command %s was run through these tools (a command of a session other than the default one is SESSION:c_N). shell_wait session=NAME waits for what runs in a session.", ref)), nil
			}
			if !contains(sids, c.session) {
				sids = append(sids, c.session)
			}
		}
	}
	results := make([]Result[ShellOutput], len(sids))
	errs := make([]error, len(sids))
	// mode any: the first to end (or to wait for input) cancels the
	// others' waits; a wait that
	// is cancelled hands over nothing, so nothing is lost (and a result
	// lost on its way shows as unseen bytes in the next one).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i, sid := range sids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = sh.waitOne(wctx, sid, in.Session, in.Yield, in.Until)
			o := results[i].Out
			needs := o.Status != wire.StatusRunning || o.WaitingForInput || o.OnScreen != "" || o.Matched != ""
			if errs[i] == nil && in.Mode != "all" && len(sids) > 1 && needs {
				cancel()
			}
		}()
	}
	wg.Wait()
	var out WaitOutput
	var texts []string
	isErr := false
	for i := range sids {
		if errs[i] != nil {
			if errors.Is(errs[i], context.Canceled) && ctx.Err() == nil {
				st := ShellOutput{Session: sids[i], Status: wire.StatusRunning, Command: sh.runningIn(sids[i])}
				out.Results = append(out.Results, st)
				texts = append(texts, fmt.Sprintf("[session %s: command %s still running; another command ended first]", sids[i], st.Command))
				continue
			}
			return Result[WaitOutput]{}, errs[i]
		}
		isErr = isErr || results[i].IsError
		out.Results = append(out.Results, results[i].Out)
		t := results[i].Text
		if len(sids) > 1 {
			t = fmt.Sprintf("[session %s, command %s:]\n%s", sids[i], results[i].Out.Command, t)
		}
		texts = append(texts, t)
	}
	return Result[WaitOutput]{Text: strings.Join(texts, "\n\n"), Out: out, IsError: isErr}, nil
}

func (sh *Shell) waitOne(ctx context.Context, sid, named string, given *float64, until *wire.Until) (Result[ShellOutput], error) {
	yield := sh.continueYield(sid, given)
	maxOut := sh.opts.MaxOutput
	r, err := sh.s.Wait(ctx, sid, wire.Wait{YieldAfter: &yield, MaxOutput: &maxOut, Until: until})
	if err != nil {
		if errors.Is(err, wire.ErrNoCommand) {
			return sh.idle(sid), nil
		}
		if errors.Is(err, context.Canceled) {
			return Result[ShellOutput]{}, err
		}
		return sh.callErr(sid, named, err)
	}
	res, err := sh.finish(ctx, sh.current(sid, r.CommandID, r.OffsetStart), r, until)
	res.Out.YieldSeconds = yield
	return res, err
}

// idle is the answer of a wait with nothing running: not an error.
func (sh *Shell) idle(sid string) Result[ShellOutput] {
	sh.mu.Lock()
	var last *cmdState
	for _, c := range sh.cmds {
		if c.session == sid && (last == nil || c.start > last.start) {
			last = c
		}
	}
	sh.mu.Unlock()
	text := fmt.Sprintf("[nothing is running in session %s", sid)
	if last != nil && last.ended {
		text += fmt.Sprintf("; the last command, %s, has ended: %s", last.id, endWords(last.last))
	}
	return Result[ShellOutput]{Text: text + "]", Out: ShellOutput{Session: sid, Status: "idle"}}
}

// lookup finds a command the Shell saw: in session when given, else in
// the default session, else in the one session that has it.
func (sh *Shell) lookup(id, session string) *cmdState {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if session != "" {
		if c := sh.cmds[session+"/"+id]; c != nil {
			return c
		}
		for _, c := range sh.cmds { // named by the session's name
			if c.id == id && c.session == session {
				return c
			}
		}
		return nil
	}
	if c := sh.cmds[sh.def+"/"+id]; c != nil {
		return c
	}
	var found *cmdState
	keys := make([]string, 0, len(sh.cmds))
	for k := range sh.cmds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if c := sh.cmds[k]; c.id == id {
			if found != nil {
				return nil // ambiguous: the caller names the session
			}
			found = c
		}
	}
	return found
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
