package tool

// Profiles: the same Shell and Editor served under the names, input
// schemas and result texts that models were trained on. A profile never
// runs commands itself: every call goes through the Shell's Run, Input,
// Wait and Session (and the Editor's Run, and RunApplyPatch), and its
// text is written from the facts those return (ShellOutput), in the
// profile's own words, naming only the profile's own tools.
//
// The published schemas the profiles copy are kept, with their sources,
// in testdata/profiles; TestProfileSchemas checks the served ones against
// them (properties, types, required, enums; descriptions are ours where
// theirs name what limbs lacks).
//
// What a profile cannot say with its own tools it says plainly: no
// profile has shell_read, so the note of a truncated output gives the
// exact byte ranges shown (also in the structured result) and tells the
// model to send the output to a file and read it in parts.

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ProfileNames lists the tool profiles, the default one first.
func ProfileNames() []string {
	return []string{"default", "anthropic", "codex", "openhands"}
}

// Profile returns the tools of the named profile over sh and files (""
// is the default profile):
//
//	default    Canonical: shell_run, shell_input, shell_wait, shell_read,
//	           shell_screen, session, str_replace_based_edit_tool, apply_patch
//	anthropic  bash {command, restart} (bash_20250124) and
//	           str_replace_based_edit_tool
//	codex      exec_command, write_stdin (Codex unified exec) and apply_patch
//	openhands  execute_bash {command, is_input, timeout} and
//	           str_replace_editor (with undo_edit)
//
// Each call of Profile makes a fresh Editor (undo history) and profile
// state: call it once per agent (MCP connection), with that agent's Shell.
func Profile(name string, sh *Shell, files Files) ([]Spec, error) {
	env := Env{Files: files, Cwd: sh.Cwd}
	switch name {
	case "", "default":
		return Canonical(sh, files, nil), nil
	case "anthropic":
		b := &anthropicBash{sh: sh}
		return []Spec{
			Erase(b.Tool(), env, objectSchema, Annotations{Destructive: true}),
			Erase(NewEditor(0).Tool(), env, objectSchema, Annotations{Destructive: true}),
		}, nil
	case "codex":
		c := &codexExec{sh: sh, procs: map[int]codexProc{}, ids: map[string]int{}}
		return []Spec{
			Erase(c.ExecTool(), env, objectSchema, Annotations{Destructive: true}),
			Erase(c.WriteStdinTool(), env, objectSchema, Annotations{Destructive: true}),
			Erase(ApplyPatch(), env, objectSchema, Annotations{Destructive: true}),
		}, nil
	case "openhands":
		o := &openHandsBash{sh: sh}
		return []Spec{
			Erase(o.Tool(), env, objectSchema, Annotations{Destructive: true}),
			Erase(openHandsEditor(NewEditor(0)), env, objectSchema, Annotations{Destructive: true}),
		}, nil
	}
	return nil, fmt.Errorf("unknown tool profile %q: use one of %s", name, strings.Join(ProfileNames(), ", "))
}

// minYield is the shortest wait a profile asks limbsd for: a yield of 0
// would block until the command ends, while a model that gives 0 means
// "return at once".
const minYield = 0.1

func atLeastMin(y *float64) *float64 {
	if y == nil || *y >= minYield {
		return y
	}
	m := minYield
	return &m
}

// busyCommand is the command the Shell last saw running in sid ("" none).
func (sh *Shell) busyCommand(sid string) string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.busy[sid]
}

// one is the single result of a wait on one session.
func one(r Result[WaitOutput]) Result[ShellOutput] {
	out := Result[ShellOutput]{Text: r.Text, IsError: r.IsError}
	if len(r.Out.Results) > 0 {
		out.Out = r.Out.Results[0]
	}
	return out
}

// isSpecialKey: text is one key in the C-x form (OpenHands' convention:
// "C-c", "C-d", "C-z").
func isSpecialKey(s string) bool {
	s = strings.TrimSpace(s)
	return len(s) == 3 && strings.HasPrefix(s, "C-")
}

// controlKeys names the control characters that end a text as the keys
// they are.
var controlKeys = map[rune]string{'\r': "Enter", '\n': "Enter", '\t': "Tab", 0x1b: "Escape", 0x7f: "Backspace"}

// splitKeys turns raw characters into shell_input's text and keys: the
// trailing run of control characters becomes keys (Enter, C-c, ...), so a
// final newline is pressed as Enter and never pasted.
func splitKeys(s string) InputInput {
	var keys []string
	for s != "" {
		r, size := utf8.DecodeLastRuneInString(s)
		k, ok := controlKeys[r]
		if !ok && r >= 1 && r <= 26 {
			k, ok = "C-"+string(rune('a'+r-1)), true
		}
		if !ok {
			break
		}
		keys = append([]string{k}, keys...)
		s = s[:len(s)-size]
	}
	return InputInput{Text: s, Keys: keys}
}

// lineInput is what a line of a model's "command" types into a running
// program: a C-x key is pressed; into a program holding the screen the
// characters go as they are (a trailing newline pressed as Enter); at a
// line prompt the line is typed and Enter pressed.
func lineInput(command string, onScreen bool) InputInput {
	if isSpecialKey(command) {
		return InputInput{Keys: []string{strings.TrimSpace(command)}}
	}
	in := splitKeys(command)
	if !onScreen && len(in.Keys) == 0 {
		in.Keys = []string{"Enter"}
	}
	return in
}

// rawChars writes an input as the raw characters it sends (Enter as a
// newline, C-c as \x03), for write_stdin's chars.
func rawChars(l InputInput) string {
	s := l.Text
	for _, k := range l.Keys {
		switch {
		case k == "Enter":
			s += "\n"
		case k == "Tab":
			s += "\t"
		case k == "Escape":
			s += "\x1b"
		case len(k) == 3 && strings.HasPrefix(k, "C-") && k[2] >= 'a' && k[2] <= 'z':
			s += string(rune(k[2] - 'a' + 1))
		}
	}
	return s
}

// jsonString quotes s as JSON does (what a model writes in arguments).
func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// words are what a profile's notes need to say in its own terms.
type words struct {
	// send says how to send an input (the way out of a program, an
	// answer) with the profile's tools.
	send func(l InputInput, onScreen bool) string
	// answer says how to answer a line prompt.
	answer string
}

// outputNotes are the notes about the output itself that every profile
// writes after it: a redrawn line, bytes no longer kept or not shown, a
// truncated middle, clamped lines. None names a tool the profile lacks.
func outputNotes(o ShellOutput, maxLine int) []string {
	var n []string
	const reread = "send the command's output to a file (> out.log 2>&1) and read the part you need with sed -n or grep"
	if o.Overwrite {
		n = append(n, "[the first line above redraws the last line of the previous result (a line rewritten in place, like a progress bar)]")
	}
	if len(o.Missing) == 2 {
		n = append(n, fmt.Sprintf("[bytes %d-%d of this command's output are no longer kept (the sandbox's disk bound for output cut them)]", o.Missing[0], o.Missing[1]))
	}
	if len(o.Unseen) == 2 {
		n = append(n, fmt.Sprintf("[bytes %d-%d of this command's output were not shown in any result; to see them, %s]", o.Unseen[0], o.Unseen[1], reread))
	}
	if o.Truncated && len(o.Shown) == 2 {
		s := o.Shown
		n = append(n, fmt.Sprintf("[output truncated: bytes %d-%d and %d-%d of %d shown; to see the rest, %s]", s[0][0], s[0][1], s[1][0], s[1][1], o.OutputBytes, reread))
	} else if o.Truncated {
		n = append(n, fmt.Sprintf("[output truncated: not all of its %d bytes could be shown; to see them, %s]", o.OutputBytes, reread))
	}
	if o.ClampedLines > 0 {
		n = append(n, fmt.Sprintf("[%d line(s) longer than %d characters were clamped to their head and tail]", o.ClampedLines, maxLine))
	}
	return n
}

// body is what a profile shows of a result before its own status lines:
// background output, then the screen of a full-screen program or the
// output, then the output notes.
func (sh *Shell) body(o ShellOutput) string {
	var b strings.Builder
	if o.BackgroundOutput != "" {
		b.WriteString("[output of background jobs, printed while no command ran:]\n")
		b.WriteString(withNL(o.BackgroundOutput))
		b.WriteString("[end of background output]\n")
	}
	if o.Status == "running" && o.screen != "" {
		fmt.Fprintf(&b, "[%s shows a %s on the terminal; its screen now:]\n", programOr(o.Program, "a program"), screenWord(o.OnScreen))
		b.WriteString(withNL(o.screen))
	} else {
		b.WriteString(withNL(o.Output))
	}
	for _, n := range outputNotes(o, sh.opts.MaxLine) {
		b.WriteString(n + "\n")
	}
	return b.String()
}

// stateNote is the note of a running command that needs the model: a
// program on the screen, a prompt. "" when it just runs.
func stateNote(o ShellOutput, w words) string {
	if o.Status != "running" {
		return ""
	}
	leave := "read the screen for its own way out"
	if o.Leave != nil {
		leave = "leave it with " + w.send(*o.Leave, o.OnScreen != "confirm")
		if o.Leave.Text == ":q!" {
			leave += " (discards changes; \":wq\" saves; press Escape first when in insert mode)"
		}
	}
	switch {
	case o.screen != "":
		return fmt.Sprintf("[still running: %s holds the terminal; %s]", programOr(o.Program, "a full-screen program"), leave)
	case !o.WaitingForInput:
		return ""
	case o.OnScreen == "pager":
		return fmt.Sprintf("[a pager (%s) is waiting for a key, prompt %q; %s]", programOr(o.Program, "pager"), o.Prompt, leave)
	case o.OnScreen == "confirm":
		return fmt.Sprintf("[waiting for input: a yes/no question: %q; answer with %s (or \"n\")]", o.Prompt, w.send(InputInput{Text: "y", Keys: []string{"Enter"}}, false))
	case o.EchoOff:
		return fmt.Sprintf("[waiting for input with echo off (a password or passphrase prompt): %q; %s; what you type is not shown]", o.Prompt, w.answer)
	}
	return fmt.Sprintf("[waiting for input at the prompt %q; %s]", o.Prompt, w.answer)
}

// endLine states how an ended command ended, with its cwd and duration.
func endLine(o ShellOutput) string {
	code := "no exit code"
	if o.ExitCode != nil {
		code = fmt.Sprintf("exit code %d", *o.ExitCode)
		if o.Signal != "" {
			code += " (" + o.Signal + ")"
		}
	}
	rest := fmt.Sprintf("%s; cwd %s; took %s", code, o.Cwd, dur(o.DurationMs))
	switch o.Status {
	case "timeout":
		return "[timed out: the command was stopped; " + rest + "]"
	case "interrupted":
		return "[interrupted: the command was stopped; " + rest + "]"
	}
	return "[" + rest + "]"
}

// shellNote says that the shell itself was replaced or ended, and which
// processes the command left running.
func shellNote(o ShellOutput) string {
	return lines(shellEndNote(o), backgroundNote(o)) // background.go
}

// shellEndNote says that the shell itself was replaced or ended.
func shellEndNote(o ShellOutput) string {
	switch {
	case o.ShellReplaced:
		return fmt.Sprintf("[the command replaced the shell with another shell, so it has no exit code; a fresh shell now runs in %s with the exported environment saved before the command; unexported variables, functions, aliases and background jobs are gone]", o.Cwd)
	case o.ShellExited:
		return fmt.Sprintf("[the shell itself exited during the command; a fresh shell now runs in %s with the old exported environment; unexported variables, functions, aliases and background jobs are gone]", o.Cwd)
	}
	return ""
}

func lines(ls ...string) string {
	var b strings.Builder
	for _, l := range ls {
		if l != "" {
			b.WriteString(withNL(l))
		}
	}
	return b.String()
}
