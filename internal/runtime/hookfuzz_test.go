package runtime_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// hookStep is one exec of a FuzzHookChanges program.
type hookStep struct {
	text string
	// racy: the step runs processes in parallel (a pipeline) whose trace
	// lines come in any order, in bash as in limbs; its output is compared
	// as a multiset of lines.
	racy bool
	// shellState: the step expands PS1 or PROMPT_COMMAND, which hold
	// limbs' hooks in the session and nothing in the reference; its
	// trace lines (set -x) are left out of the comparison.
	shellState bool
}

// hookSteps is what a program is made of: first the changes a user, a
// bashrc or a virtualenv makes to the shell's hooks and options, then
// commands with known output and exit codes. Not in the table, on
// purpose: what makes a non-interactive bash (the reference) behave unlike
// an interactive one: set -e and exit (the shell ends), errors that name
// the script and its line (command not found, cd to a missing directory),
// an unset variable under set -u (a script exits), history.
//
// A byte picks hookSteps[b % len(hookSteps)]: add steps at the end only,
// so that the corpus in testdata/fuzz/FuzzHookChanges (small bytes) keeps
// its meaning.
var hookSteps = []hookStep{
	// Hook changes.
	{text: `PROMPT_COMMAND=""`},
	{text: `unset PROMPT_COMMAND`},
	{text: `PROMPT_COMMAND=("echo x")`},
	{text: promptPrepend, shellState: true},
	{text: promptPrependNounset, shellState: true},
	{text: `PS0=""`},
	{text: `PS1='$ '`},
	{text: `PS1="(venv) $PS1"`, shellState: true},
	{text: `trap 'echo dbg' DEBUG`},
	{text: `trap - DEBUG`},
	{text: `trap 'true' RETURN`},
	{text: `trap 'echo ret' RETURN`},
	{text: `trap - RETURN`},
	{text: `trap 'echo err' ERR`},
	{text: `trap - ERR`},
	{text: `set -x`},
	{text: `set +x`},
	{text: `set -u`},
	{text: `set +u`},
	{text: `set -o vi`},
	{text: `set -o emacs`},
	{text: `shopt -s extdebug`},
	{text: `shopt -u extdebug`},
	{text: `set -o pipefail`},
	{text: `set +o pipefail`},
	{text: `set -T`},
	{text: `set +T`},
	// Commands.
	{text: `echo hi`},
	{text: `false`},
	{text: `(exit 7)`},
	{text: `printf 'a\nb\n'`},
	{text: `printf 'no newline'`},
	{text: `cd /tmp`},
	{text: `cd /`},
	{text: `pwd`},
	{text: `true | false`, racy: true},
	{text: `false | true`, racy: true},
	{text: `echo $((1+2))`},
	{text: `x=5; echo $x`},
	{text: `echo out; echo err >&2`},
	{text: `f() { echo in f; return 3; }; f`},
	{text: `echo $(echo sub)`},
	{text: `false; echo $?`},
}

// promptPrepend is the common bashrc line. Under set -u it is replaced by
// its ${PROMPT_COMMAND:-} form: a non-interactive bash exits on an unset
// variable, and the reference has no PROMPT_COMMAND of its own.
const (
	promptPrepend        = `PROMPT_COMMAND="history -a; $PROMPT_COMMAND"`
	promptPrependNounset = `PROMPT_COMMAND="history -a; ${PROMPT_COMMAND:-}"`
)

// maxHookSteps bounds a program: each step is one exec.
const maxHookSteps = 8

// decodeHookProgram turns fuzz input into a program: each byte picks a
// step, at most maxHookSteps of them.
func decodeHookProgram(data []byte) []hookStep {
	var p []hookStep
	nounset := false
	for _, b := range data[:min(len(data), maxHookSteps)] {
		s := hookSteps[int(b)%len(hookSteps)]
		switch s.text {
		case `set -u`:
			nounset = true
		case `set +u`:
			nounset = false
		case promptPrepend:
			if nounset {
				s.text = promptPrependNounset
			}
		}
		p = append(p, s)
	}
	return p
}

// encodeHookProgram is the input that decodes to the steps named.
func encodeHookProgram(tb testing.TB, steps ...string) []byte {
	var data []byte
	for _, s := range steps {
		i := slices.IndexFunc(hookSteps, func(h hookStep) bool { return h.text == s })
		if i < 0 {
			tb.Fatalf("no step %q in hookSteps", s)
		}
		data = append(data, byte(i))
	}
	return data
}

// hookResult is what one step gave: its exit code, output and the cwd
// after it.
type hookResult struct {
	code   int
	output string
	cwd    string
}

// FuzzHookChanges runs a program of hook changes and commands, one exec
// per step, in a fresh session of a real limbsd, and the same steps in
// one bash --norc --noprofile reading them as a script (so that state
// carries from step to step as in the session). Every step must give the
// same exit code, cwd and output in both; outputs are compared after the
// trace prefix is brought to one level ('++ ' and '+ ' are the same: limbs
// runs a command sourced), since what the user's set -x and DEBUG, ERR
// and RETURN traps print for the user's own commands is part of the
// output, as in bash, and anything of limbs' own steps is not
// (internal/conformance hooks.go holds the same contract case by case).
//
// With $LIMBS_HOOKFUZZ_SURVEY naming a file, each mismatching step is
// appended there (with its input) and the run goes on: one fuzz run then
// lists every difference it meets instead of stopping at the first.
func FuzzHookChanges(f *testing.F) {
	for _, p := range [][]string{
		{`PROMPT_COMMAND=""`, `echo hi`, `false`, `cd /tmp`, `pwd`},
		{`unset PROMPT_COMMAND`, `(exit 7)`, `printf 'a\nb\n'`, `cd /`},
		{`PROMPT_COMMAND=("echo x")`, `false`, `echo hi`, `(exit 7)`},
		{promptPrepend, `false`, `(exit 7)`, `echo $((1+2))`},
		{`PS0=""`, `echo hi`, `printf 'no newline'`, `echo hi`},
		{`PS1='$ '`, `PS1="(venv) $PS1"`, `false`, `cd /tmp`, `pwd`},
		{`trap 'echo dbg' DEBUG`, `echo hi`, `false`, `(exit 7)`, `x=5; echo $x`, `trap - DEBUG`, `echo hi`},
		{`trap 'true' RETURN`, `trap 'echo ret' RETURN`, `f() { echo in f; return 3; }; f`, `echo hi`, `trap - RETURN`},
		{`trap 'echo err' ERR`, `false`, `true | false`, `echo hi`, `trap - ERR`, `false`},
		{`set -x`, `echo hi`, `(exit 7)`, `cd /tmp`, `echo $(echo sub)`, `set +x`, `echo hi`},
		{`set -u`, `echo $((1+2))`, `x=5; echo $x`, `set +u`, `false`},
		{`set -o vi`, `echo hi`, `false`, `set -o emacs`, `(exit 7)`},
		{`shopt -s extdebug`, `trap 'echo dbg' DEBUG`, `(exit 7)`, `echo hi`, `shopt -u extdebug`},
		{`set -o pipefail`, `true | false`, `false | true`, `set +o pipefail`, `false | true`},
		{`set -T`, `trap 'echo dbg' DEBUG`, `(exit 7)`, `echo $(echo sub)`, `set +T`},
		{`set -x`, `trap 'echo dbg' DEBUG`, `PS0=""`, `echo out; echo err >&2`, `false; echo $?`, `unset PROMPT_COMMAND`, `echo hi`},
	} {
		f.Add(encodeHookProgram(f, p...))
	}
	d := testbin.StartLimbsd(f, raceEnabled)
	c, err := client.New("unix://"+d.Sock, d.Token, "")
	if err != nil {
		f.Fatal(err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		f.Skip("no bash on PATH: no reference to compare with")
	}
	survey := os.Getenv("LIMBS_HOOKFUZZ_SURVEY")
	f.Fuzz(func(t *testing.T, data []byte) {
		prog := decodeHookProgram(data)
		if len(prog) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		s, err := c.CreateSession(ctx, wire.CreateSession{})
		if err != nil {
			t.Fatalf("creating a session: %v", err)
		}
		t.Cleanup(func() {
			if err := c.DeleteSession(context.Background(), s.ID); err != nil {
				t.Errorf("deleting session %s: %v", s.ID, err)
			}
		})
		want, err := hookReference(ctx, bash, s.Cwd, prog)
		if err != nil {
			t.Fatalf("%v\nprogram:\n%s", err, hookProgramText(prog))
		}
		yield := 20.0
		for i, step := range prog {
			r, err := c.Exec(ctx, s.ID, wire.Exec{Command: step.text, YieldAfter: &yield})
			if err != nil {
				t.Fatalf("step %d %q: exec: %v\nprogram:\n%s", i+1, step.text, err, hookProgramText(prog))
			}
			var got hookResult
			if r.Status != wire.StatusExited || r.ExitCode == nil {
				t.Fatalf("step %d %q: status %q exit_code %v shell_exited %v (output %q), want it exited with %d\nprogram:\n%s",
					i+1, step.text, r.Status, r.ExitCode, r.ShellExited, r.Output, want[i].code, hookProgramText(prog))
			}
			got = hookResult{code: *r.ExitCode, output: r.Output, cwd: r.Cwd}
			if msg := compareHookStep(step, got, want[i]); msg != "" {
				msg = fmt.Sprintf("step %d %q: %s\nprogram:\n%s", i+1, step.text, msg, hookProgramText(prog))
				if survey != "" {
					hookSurvey(t, survey, data, msg)
					continue
				}
				t.Fatal(msg)
			}
		}
	})
}

// hookReference runs prog in one bash --norc --noprofile reading it as a
// script in dir, stdout and stderr on one pipe, and returns each step's
// result. After each step a group writes NUL, $?, NUL, $PWD, NUL to a
// copy of stdout taken at the start, with its own stdout and stderr on
// /dev/null: the user's set -x trace and traps that fire for the group's
// printf go there, so the stream holds only what the steps printed.
func hookReference(ctx context.Context, bash, dir string, prog []hookStep) ([]hookResult, error) {
	var script strings.Builder
	// An interactive shell has a PS1: without one, PS1="(venv) $PS1"
	// would end the reference under set -u.
	script.WriteString("exec 5>&1\nPS1='\\s-\\v\\$ '\n")
	for _, step := range prog {
		fmt.Fprintf(&script, "%s\n{ printf '\\0%%d\\0%%s\\0' \"$?\" \"$PWD\" >&5; } >/dev/null 2>&1\n", step.text)
	}
	cmd := exec.CommandContext(ctx, bash, "--norc", "--noprofile", "-c", script.String())
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	fields := strings.Split(out.String(), "\x00")
	if len(fields) < 3*len(prog)+1 {
		return nil, fmt.Errorf("the reference bash ended early (%v): %q", err, out.String())
	}
	res := make([]hookResult, len(prog))
	for i := range prog {
		code, cerr := strconv.Atoi(fields[3*i+1])
		if cerr != nil {
			return nil, fmt.Errorf("the reference bash wrote status %q: %q", fields[3*i+1], out.String())
		}
		res[i] = hookResult{code: code, output: fields[3*i], cwd: fields[3*i+2]}
	}
	return res, nil
}

var (
	hookTraceLevel = regexp.MustCompile(`(?m)^\++ `)
	hookTraceLine  = regexp.MustCompile(`(?m)^\++ .*\n`)
)

// compareHookStep says how got differs from want, or "" if it does not.
func compareHookStep(step hookStep, got, want hookResult) string {
	norm := func(s string) string {
		if step.shellState {
			s = hookTraceLine.ReplaceAllString(s, "")
		}
		s = hookTraceLevel.ReplaceAllString(s, "+ ")
		if step.racy {
			lines := strings.SplitAfter(s, "\n")
			slices.Sort(lines)
			s = strings.Join(lines, "")
		}
		return s
	}
	var diffs []string
	if got.code != want.code {
		diffs = append(diffs, fmt.Sprintf("exit code %d, bash says %d", got.code, want.code))
	}
	if norm(got.output) != norm(want.output) {
		diffs = append(diffs, fmt.Sprintf("output %q, bash says %q", got.output, want.output))
	}
	if got.cwd != want.cwd {
		diffs = append(diffs, fmt.Sprintf("cwd %q, bash says %q", got.cwd, want.cwd))
	}
	return strings.Join(diffs, "; ")
}

// hookSurvey appends msg and the input that gave it to the file at path.
func hookSurvey(t *testing.T, path string, data []byte, msg string) {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("opening $LIMBS_HOOKFUZZ_SURVEY: %v", err)
	}
	defer fh.Close()
	if _, err := fmt.Fprintf(fh, "input %q\n%s\n", data, msg); err != nil {
		t.Fatalf("writing $LIMBS_HOOKFUZZ_SURVEY: %v", err)
	}
}

// hookProgramText is prog as a failure message shows it, one step a line.
func hookProgramText(prog []hookStep) string {
	var b strings.Builder
	for i, s := range prog {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, s.text)
	}
	return b.String()
}
