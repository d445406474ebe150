package tool

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync"
)

// ExecCommandInput is the input of the codex profile's exec_command, field
// for field the Codex CLI's unified exec tool. The approval fields are
// accepted and ignored: in limbs the sandbox is the boundary, there is no
// approval step.
type ExecCommandInput struct {
	Cmd     string `json:"cmd"`
	Workdir string `json:"workdir,omitempty"`
	// Shell may name bash or sh (the session's shell is bash); another
	// shell is refused.
	Shell           string   `json:"shell,omitempty"`
	Login           *bool    `json:"login,omitempty"` // ignored: the session is set up already
	Tty             *bool    `json:"tty,omitempty"`   // ignored: every command has a terminal
	YieldTimeMs     *float64 `json:"yield_time_ms,omitempty"`
	MaxOutputTokens *float64 `json:"max_output_tokens,omitempty"`
	// SandboxPermissions, Justification and PrefixRule are ignored.
	SandboxPermissions string   `json:"sandbox_permissions,omitempty"`
	Justification      string   `json:"justification,omitempty"`
	PrefixRule         []string `json:"prefix_rule,omitempty"`
}

// WriteStdinInput is the input of the codex profile's write_stdin.
type WriteStdinInput struct {
	SessionID       float64  `json:"session_id"`
	Chars           string   `json:"chars,omitempty"`
	YieldTimeMs     *float64 `json:"yield_time_ms,omitempty"`
	MaxOutputTokens *float64 `json:"max_output_tokens,omitempty"`
}

// CodexOutput is the structured result of exec_command and write_stdin:
// the Shell's facts and the numbers the text names.
type CodexOutput struct {
	ShellOutput
	// SessionID is the number write_stdin takes while the command runs.
	SessionID          int     `json:"session_id,omitempty"`
	ChunkID            string  `json:"chunk_id"`
	WallTimeSeconds    float64 `json:"wall_time_seconds"`
	OriginalTokenCount int64   `json:"original_token_count,omitempty"`
}

// codexExec is Codex's unified exec over the Shell's default session.
// Codex runs each exec_command as its own process; here each runs in the
// one persistent session (cd and exports persist, and workdir runs the
// command in a subshell started there, so the session's cwd stays). A
// command still running after yield_time_ms gets a session ID, the number
// write_stdin continues it with (chars "" polls). Without yield_time_ms
// the Shell's yield policy applies (10, 30 or 120 s by the command).
// max_output_tokens (4 bytes a token, as Codex counts) cuts the output
// shown further, keeping its head and tail.
type codexExec struct {
	sh *Shell

	mu    sync.Mutex
	next  int               // the last session ID given
	chunk int               // numbers the results
	procs map[int]codexProc // session ID -> command
	ids   map[string]int    // session/command -> session ID
}

type codexProc struct{ session, command string }

// ExecTool describes exec_command.
func (c *codexExec) ExecTool() Tool[ExecCommandInput, CodexOutput] {
	return Tool[ExecCommandInput, CodexOutput]{Name: "exec_command", Description: codexExecDescription, InputSchema: []byte(codexExecSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in ExecCommandInput) (Result[CodexOutput], error) {
			return c.Exec(ctx, in)
		}}
}

// WriteStdinTool describes write_stdin.
func (c *codexExec) WriteStdinTool() Tool[WriteStdinInput, CodexOutput] {
	return Tool[WriteStdinInput, CodexOutput]{Name: "write_stdin", Description: codexWriteStdinDescription, InputSchema: []byte(codexWriteStdinSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in WriteStdinInput) (Result[CodexOutput], error) {
			return c.WriteStdin(ctx, in)
		}}
}

func msToSeconds(ms *float64) *float64 {
	if ms == nil {
		return nil
	}
	s := *ms / 1000
	return atLeastMin(&s)
}

// shellQuote quotes s for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Exec carries out one exec_command call.
func (c *codexExec) Exec(ctx context.Context, in ExecCommandInput) (Result[CodexOutput], error) {
	if strings.TrimSpace(in.Cmd) == "" {
		return refusal[CodexOutput]("exec_command: `cmd` is empty: give the shell command to run."), nil
	}
	if in.Shell != "" {
		if b := path.Base(in.Shell); b != "bash" && b != "sh" {
			return refusal[CodexOutput](fmt.Sprintf("exec_command: commands run in this sandbox's bash session; shell %q is not available here. Leave `shell` out, or run it from bash (%s -c '...').", in.Shell, b)), nil
		}
	}
	sid, err := c.sh.DefaultSession(ctx)
	if err != nil {
		return Result[CodexOutput]{}, err
	}
	if running := c.sh.busyCommand(sid); running != "" {
		n := c.idOf(sid, running)
		return refusal[CodexOutput](fmt.Sprintf("exec_command: the process with session ID %d is still running in this shell, so the command was not started. Poll it with write_stdin {\"session_id\": %d, \"chars\": \"\"}, answer it with chars, or interrupt it with chars \"\\u0003\"; start long-running commands in the background (cmd &) to run others meanwhile.", n, n)), nil
	}
	cmd := in.Cmd
	if in.Workdir != "" {
		cmd = fmt.Sprintf("(cd -- %s || exit\n%s\n)", shellQuote(in.Workdir), in.Cmd)
	}
	r, err := c.sh.Run(ctx, RunInput{Command: cmd, Yield: msToSeconds(in.YieldTimeMs)})
	if err != nil || r.IsError {
		return Result[CodexOutput]{Text: r.Text, IsError: r.IsError}, err
	}
	return c.result(r.Out, in.MaxOutputTokens), nil
}

// WriteStdin carries out one write_stdin call.
func (c *codexExec) WriteStdin(ctx context.Context, in WriteStdinInput) (Result[CodexOutput], error) {
	n := int(in.SessionID)
	c.mu.Lock()
	p, ok := c.procs[n]
	c.mu.Unlock()
	if !ok || c.sh.busyCommand(p.session) != p.command {
		return refusal[CodexOutput](fmt.Sprintf("write_stdin failed: no process with session ID %d is running (it exited and its end was reported, or it never ran). Start a command with exec_command.", n)), nil
	}
	var r Result[ShellOutput]
	var err error
	yield := msToSeconds(in.YieldTimeMs)
	if in.Chars == "" {
		var w Result[WaitOutput]
		w, err = c.sh.Wait(ctx, WaitInput{Session: p.session, Yield: yield})
		r = one(w)
	} else {
		input := splitKeys(in.Chars)
		input.Session, input.Yield = p.session, yield
		r, err = c.sh.Input(ctx, input)
	}
	if err != nil || r.IsError {
		return Result[CodexOutput]{Text: r.Text, IsError: r.IsError}, err
	}
	return c.result(r.Out, in.MaxOutputTokens), nil
}

// idOf is the session ID of a command, given on first use.
func (c *codexExec) idOf(sid, cmd string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.ids[sid+"/"+cmd]; ok {
		return n
	}
	if c.next == 0 {
		c.next = 999
	}
	c.next++
	c.ids[sid+"/"+cmd] = c.next
	c.procs[c.next] = codexProc{sid, cmd}
	return c.next
}

// result writes a Shell result in the Codex CLI's format: Chunk ID, Wall
// time, the exit code or the session ID of a running process, Original
// token count when the output was cut, then Output: and the output, with
// limbs' notes after it.
func (c *codexExec) result(o ShellOutput, maxTokens *float64) Result[CodexOutput] {
	out := CodexOutput{ShellOutput: o, WallTimeSeconds: float64(o.DurationMs) / 1000}
	c.mu.Lock()
	c.chunk++
	out.ChunkID = fmt.Sprintf("%06x", c.chunk)
	c.mu.Unlock()
	running := o.Status == "running"
	if running && o.Command != "" {
		out.SessionID = c.idOf(o.Session, o.Command)
	}
	shown := o
	cut := false
	if maxTokens != nil && *maxTokens > 0 && o.screen == "" {
		shown.Output, cut = cutMiddle(o.Output, int(*maxTokens)*4)
	}
	if cut { // the Shell's ranges no longer describe what is shown
		shown.Shown, shown.Truncated = nil, true
	}
	if o.Truncated || cut {
		out.OriginalTokenCount = (o.OutputBytes + 3) / 4
	}

	var b strings.Builder
	fmt.Fprintf(&b, "Chunk ID: %s\nWall time: %.4f seconds\n", out.ChunkID, out.WallTimeSeconds)
	switch {
	case running && out.SessionID != 0:
		fmt.Fprintf(&b, "Process running with session ID %d\n", out.SessionID)
	case o.ExitCode != nil:
		fmt.Fprintf(&b, "Process exited with code %d\n", *o.ExitCode)
	}
	if out.OriginalTokenCount > 0 {
		fmt.Fprintf(&b, "Original token count: %d\n", out.OriginalTokenCount)
	}
	b.WriteString("Output:\n")
	b.WriteString(c.sh.body(shown))
	w := words{
		send: func(l InputInput, _ bool) string {
			return fmt.Sprintf("write_stdin {\"session_id\": %d, \"chars\": %s}", out.SessionID, jsonString(rawChars(l)))
		},
		answer: fmt.Sprintf("answer with write_stdin {\"session_id\": %d, \"chars\": \"...\\n\"}; chars \"\\u0003\" interrupts it", out.SessionID),
	}
	note := stateNote(o, w)
	switch {
	case o.Status == "idle":
		note = "[no command was running: this is what the terminal printed after the input]"
	case running && note == "":
		note = fmt.Sprintf("[still running: write_stdin {\"session_id\": %d, \"chars\": \"\"} waits for more output; chars \"\\u0003\" interrupts it]", out.SessionID)
	case o.Status == "timeout", o.Status == "interrupted":
		note = lines(endLine(o), backgroundNote(o))
	case !running:
		note = shellNote(o)
	}
	b.WriteString(lines(note))
	if !running {
		c.forget(o.Session, o.Command)
	}
	return Result[CodexOutput]{Text: b.String(), Out: out}
}

func (c *codexExec) forget(sid, cmd string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.ids[sid+"/"+cmd]; ok {
		delete(c.ids, sid+"/"+cmd)
		delete(c.procs, n)
	}
}

// cutMiddle keeps the head and tail of text, max bytes in all, at line
// boundaries when it can, with a note of what it left out.
func cutMiddle(text string, max int) (string, bool) {
	if len(text) <= max {
		return text, false
	}
	half := max / 2
	head := []byte(text[:half])
	head = cutHead(head)
	tail := cutTail([]byte(text[len(text)-half:]))
	left := len(text) - len(head) - len(tail)
	return withNL(string(head)) + fmt.Sprintf("[... %d bytes of this output not shown (max_output_tokens) ...]\n", left) + string(tail), true
}
