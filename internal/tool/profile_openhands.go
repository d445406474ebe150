package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// flexBool is OpenHands' is_input: the string "true" or "false" in its
// schema; a JSON boolean is accepted too.
type flexBool bool

func (f *flexBool) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true":
			*f = true
			return nil
		case "false", "":
			*f = false
			return nil
		}
		return fmt.Errorf("is_input is \"true\" or \"false\", not %q", s)
	}
	var v bool
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("is_input is \"true\" or \"false\"")
	}
	*f = flexBool(v)
	return nil
}

// ExecuteBashInput is the input of the openhands profile's execute_bash,
// as OpenHands' CodeAct agent has it. SecurityRisk is accepted and
// ignored (the sandbox is the boundary).
type ExecuteBashInput struct {
	Command      string   `json:"command"`
	IsInput      flexBool `json:"is_input,omitempty"`
	Timeout      *float64 `json:"timeout,omitempty"`
	SecurityRisk string   `json:"security_risk,omitempty"`
}

// openHandsBash is OpenHands' execute_bash over the Shell's default
// session. OpenHands' `timeout` ends the wait, not the command ("you'll be
// asked whether to continue or stop it"), so it is the Shell's yield
// here; without it the Shell's yield policy applies instead of OpenHands'
// no-new-output timeout. A running command has no exit code (OpenHands'
// -1): an empty command waits for more output, is_input "true" types the
// command into it (a line and Enter; into a full-screen program the
// characters as they are), and C-c, C-d, C-z with is_input press the key.
// Another command while one runs is not executed.
type openHandsBash struct {
	sh *Shell

	mu   sync.Mutex
	last ShellOutput
}

// Tool describes execute_bash.
func (o *openHandsBash) Tool() Tool[ExecuteBashInput, ShellOutput] {
	return Tool[ExecuteBashInput, ShellOutput]{Name: "execute_bash", Description: openHandsBashDescription, InputSchema: []byte(openHandsBashSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in ExecuteBashInput) (Result[ShellOutput], error) {
			return o.Run(ctx, in)
		}}
}

// openHandsMore is OpenHands' TIMEOUT_MESSAGE_TEMPLATE in limbs' terms.
const openHandsMore = "You may wait longer to see additional output by sending empty command '', send other commands to interact with the current process by setting `is_input` to `true`, send keys (\"C-c\", \"C-z\", \"C-d\") with `is_input` set to `true` to interrupt/kill the previous command before sending your new command, or use the timeout parameter in execute_bash for future commands."

var openHandsWords = words{
	send: func(l InputInput, onScreen bool) string {
		return strings.ReplaceAll(anthropicSend(l, onScreen), "bash command", "execute_bash with `is_input` \"true\" and command")
	},
	answer: "send the answer as `command` with `is_input` set to `true` (it is typed, then Enter); command \"C-c\" with `is_input` interrupts it",
}

// Run carries out one execute_bash call.
func (o *openHandsBash) Run(ctx context.Context, in ExecuteBashInput) (Result[ShellOutput], error) {
	sh := o.sh
	if in.Timeout != nil && *in.Timeout < 0 {
		return refusal[ShellOutput]("ERROR: `timeout` is seconds, 0 or more."), nil
	}
	sid, err := sh.DefaultSession(ctx)
	if err != nil {
		return Result[ShellOutput]{}, err
	}
	in.Timeout = atLeastMin(in.Timeout)
	command := strings.TrimSpace(in.Command)
	running := sh.busyCommand(sid)
	last := o.lastOut()
	var r Result[ShellOutput]
	notExecuted, continued := false, running != ""
	switch {
	case running == "" && command == "":
		return refusal[ShellOutput]("ERROR: No previous running command to retrieve logs from."), nil
	case running == "" && bool(in.IsInput):
		return refusal[ShellOutput]("ERROR: No previous running command to interact with."), nil
	case running == "":
		r, err = sh.Run(ctx, RunInput{Command: in.Command, Yield: in.Timeout})
	case command == "":
		var w Result[WaitOutput]
		w, err = sh.Wait(ctx, WaitInput{Yield: in.Timeout})
		r = one(w)
	case bool(in.IsInput):
		input := lineInput(in.Command, last.screen != "")
		input.Yield = in.Timeout
		r, err = sh.Input(ctx, input)
	default:
		now := minYield
		var w Result[WaitOutput]
		w, err = sh.Wait(ctx, WaitInput{Yield: &now})
		r = one(w)
		notExecuted = true
	}
	if err != nil || r.IsError {
		return r, err
	}
	o.keep(r.Out)
	r.Text = o.text(r.Out, in, continued, notExecuted)
	return r, nil
}

// text writes a result as OpenHands does: "[Below is the output of the
// previous command.]" before a continued command's output, then the
// output, then "[The command completed with exit code N.]", the cwd and
// "[Command finished with exit code N]"; or, while it runs, a note on
// how to go on (and no exit code).
func (o *openHandsBash) text(out ShellOutput, in ExecuteBashInput, continued, notExecuted bool) string {
	var b strings.Builder
	if continued {
		b.WriteString("[Below is the output of the previous command.]\n")
	}
	b.WriteString(o.sh.body(out))
	note := stateNote(out, openHandsWords)
	switch {
	case notExecuted && out.Status == "running":
		note = lines(note, fmt.Sprintf("[Your command %q is NOT executed. The previous command is still running - You CANNOT send new commands until the previous command is completed. By setting `is_input` to `true`, you can interact with the current process: %s]", in.Command, openHandsMore))
	case out.Status == "idle":
		note = fmt.Sprintf("[No command was running: this is what the terminal printed after the input.]\n[Current working directory: %s]", out.Cwd)
	case out.Status == "running" && note == "":
		if in.Timeout != nil {
			note = fmt.Sprintf("[The command timed out after %g seconds; it is still running. %s]", *in.Timeout, openHandsMore)
		} else {
			note = fmt.Sprintf("[The command has not finished after %g seconds; it is still running. %s]", out.YieldSeconds, openHandsMore)
		}
	case out.Status == "running":
	default:
		code := -1
		if out.ExitCode != nil {
			code = *out.ExitCode
		}
		done := fmt.Sprintf("[The command completed with exit code %d.", code)
		if out.ExitCode == nil {
			done = "[The command completed without an exit code."
		}
		if out.Signal != "" {
			done += " It was killed by " + out.Signal + "."
		}
		switch {
		case out.Status == "timeout":
			done += " It was stopped by the timeout."
		case out.Status == "interrupted":
			done += " It was interrupted."
		case bool(in.IsInput) && isSpecialKey(in.Command):
			done += fmt.Sprintf(" CTRL+%s was sent.", strings.ToUpper(strings.TrimSpace(in.Command)[2:]))
		}
		done += "]"
		fin := fmt.Sprintf("[Command finished with exit code %d]", code)
		if out.ExitCode == nil {
			fin = ""
		}
		if notExecuted {
			fin = lines(fin, fmt.Sprintf("[Your command %q is NOT executed: the previous command was still running when it came, and has finished now (above). Send it again.]", in.Command))
		}
		note = lines(done, shellNote(out), fmt.Sprintf("[Current working directory: %s]", out.Cwd), fin)
	}
	b.WriteString(lines(note))
	return b.String()
}

func (o *openHandsBash) keep(out ShellOutput) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last = out
}

func (o *openHandsBash) lastOut() ShellOutput {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// OpenHandsEditInput is the input of the openhands profile's
// str_replace_editor: OpenHands' parameters (insert takes new_str).
type OpenHandsEditInput struct {
	Command      string  `json:"command"`
	Path         string  `json:"path"`
	FileText     *string `json:"file_text,omitempty"`
	OldStr       *string `json:"old_str,omitempty"`
	NewStr       *string `json:"new_str,omitempty"`
	InsertLine   *int    `json:"insert_line,omitempty"`
	ViewRange    []int   `json:"view_range,omitempty"`
	SecurityRisk string  `json:"security_risk,omitempty"`
}

// openHandsEditor is str_replace_editor over the Editor.
func openHandsEditor(e *Editor) Tool[OpenHandsEditInput, EditOutput] {
	return Tool[OpenHandsEditInput, EditOutput]{Name: "str_replace_editor", Description: openHandsEditorDescription, InputSchema: []byte(openHandsEditorSchema),
		Handle: func(ctx context.Context, f Files, cwd string, in OpenHandsEditInput) (Result[EditOutput], error) {
			switch in.Command {
			case "view", "create", "str_replace", "insert", "undo_edit":
			default:
				return refusal[EditOutput](fmt.Sprintf("Unrecognized command %q. The allowed commands for the str_replace_editor tool are: view, create, str_replace, insert, undo_edit", in.Command)), nil
			}
			return e.Run(ctx, f, cwd, EditInput{Command: in.Command, Path: in.Path, FileText: in.FileText, OldStr: in.OldStr,
				NewStr: in.NewStr, InsertLine: in.InsertLine, ViewRange: in.ViewRange})
		}}
}
