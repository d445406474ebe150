package tool

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// BashInput is the input of the anthropic profile's bash tool, as
// Anthropic's bash_20250124: a command, or restart.
type BashInput struct {
	Command string `json:"command,omitempty"`
	Restart bool   `json:"restart,omitempty"`
}

// anthropicBash is bash_20250124 over the Shell's default session.
//
// Anthropic's tool has no way to wait or type: its documentation only
// says commands should not hang (use timeouts; vim, less and password
// prompts are its listed limitations). limbs keeps the command running
// past its yield instead of killing it, and the same two parameters
// continue it:
//
//   - command "" waits for more output (the command's yield again);
//   - while the command reads the terminal (a prompt, a pager, a
//     full-screen program), command is typed into it: a line and Enter at
//     a prompt, the characters as they are into a full-screen program (a
//     trailing newline pressed as Enter); "C-c" (any C-x) presses the key;
//   - any other command while one runs is not run, and the result says
//     so with what the running one printed since;
//   - restart: true restarts the shell (killing what runs in it).
type anthropicBash struct {
	sh *Shell

	mu   sync.Mutex
	last ShellOutput // the last result of the default session
}

// Tool describes bash.
func (a *anthropicBash) Tool() Tool[BashInput, ShellOutput] {
	return Tool[BashInput, ShellOutput]{Name: "bash", Description: anthropicBashDescription, InputSchema: []byte(anthropicBashSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in BashInput) (Result[ShellOutput], error) {
			return a.Run(ctx, in)
		}}
}

var anthropicWords = words{
	send: func(l InputInput, onScreen bool) string {
		return anthropicSend(l, onScreen)
	},
	answer: "call bash with the answer as the command (typed into the program, then Enter); command \"C-c\" interrupts it",
}

// anthropicSend writes an input as the bash calls that send it.
func anthropicSend(l InputInput, onScreen bool) string {
	if l.Text == "" {
		calls := make([]string, len(l.Keys))
		for i, k := range l.Keys {
			calls[i] = fmt.Sprintf("bash command %q", k)
		}
		return strings.Join(calls, ", then ")
	}
	text := l.Text
	if onScreen && len(l.Keys) > 0 {
		text = rawChars(l)
	}
	return fmt.Sprintf("bash command %s", jsonString(text))
}

// Run carries out one bash call.
func (a *anthropicBash) Run(ctx context.Context, in BashInput) (Result[ShellOutput], error) {
	sh := a.sh
	if in.Restart {
		r, err := sh.Session(ctx, SessionInput{Action: "restart"})
		if err != nil || r.IsError {
			return Result[ShellOutput]{Text: r.Text, IsError: r.IsError}, err
		}
		o := ShellOutput{Status: "restarted"}
		if len(r.Out.Sessions) > 0 {
			o.Session, o.Cwd = r.Out.Sessions[0].ID, r.Out.Sessions[0].Cwd
		}
		a.keep(o)
		return Result[ShellOutput]{Text: fmt.Sprintf("tool has been restarted.\n[a fresh shell runs in %s with the old exported environment; what ran in the old one was killed, and its jobs, unexported variables, functions and aliases are gone]\n", o.Cwd), Out: o}, nil
	}
	sid, err := sh.DefaultSession(ctx)
	if err != nil {
		return Result[ShellOutput]{}, err
	}
	running := sh.busyCommand(sid)
	last := a.lastOut()
	var r Result[ShellOutput]
	notRun := ""
	switch {
	case running == "" && strings.TrimSpace(in.Command) == "":
		return refusal[ShellOutput]("No command is running and `command` is empty: give the shell command to run (or restart: true to restart the shell)."), nil
	case running == "" && isSpecialKey(in.Command):
		return refusal[ShellOutput](fmt.Sprintf("No command is running to send %s to. Give a shell command to run.", strings.TrimSpace(in.Command))), nil
	case running == "":
		r, err = sh.Run(ctx, RunInput{Command: in.Command})
	case in.Command == "":
		var w Result[WaitOutput]
		w, err = sh.Wait(ctx, WaitInput{})
		r = one(w)
	case last.WaitingForInput || last.screen != "" || isSpecialKey(in.Command):
		r, err = sh.Input(ctx, lineInput(in.Command, last.screen != ""))
	default:
		now := minYield
		var w Result[WaitOutput]
		w, err = sh.Wait(ctx, WaitInput{Yield: &now})
		r = one(w)
		notRun = ("[your command was not run: the previous command is still running (above is what it printed since the last result). Call bash with an empty command to wait for it, with command \"C-c\" to interrupt it, or restart: true to kill it; then run yours]")
	}
	if err != nil || r.IsError {
		return r, err
	}
	a.keep(r.Out)
	r.Text = a.text(r.Out, notRun)
	return r, nil
}

func (a *anthropicBash) text(o ShellOutput, notRun string) string {
	status := stateNote(o, anthropicWords)
	switch {
	case o.Status == "idle":
		status = fmt.Sprintf("[no command was running: this is what the terminal printed after the input; cwd %s]", o.Cwd)
	case o.Status == "running" && status == "":
		status = fmt.Sprintf("[still running after %s; cwd %s. It keeps running: call bash with an empty command to wait for more output, with command \"C-c\" to interrupt it, or restart: true to kill it and start a fresh shell; another command is not run until it ends]", dur(o.DurationMs), o.Cwd)
	case o.Status != "running":
		status = lines(endLine(o), shellNote(o))
	}
	switch {
	case notRun != "" && o.Status == "running" && o.screen == "" && !o.WaitingForInput:
		status = notRun
	case notRun != "" && o.Status == "running":
		status = lines(status, notRun)
	case notRun != "":
		status = lines(status, "[your command was not run: the previous command was still running when it came, and has ended now (above); send yours again]")
	}
	return a.sh.body(o) + withNL(status)
}

func (a *anthropicBash) keep(o ShellOutput) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last = o
}

func (a *anthropicBash) lastOut() ShellOutput {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}
