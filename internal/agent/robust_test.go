package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/agent/fakellm"
	"github.com/limbs-dev/limbs/internal/wire"
)

func echo(id, text string) fakellm.Call {
	return call(id, "shell_run", map[string]string{"command": "echo " + text})
}

func wantAnswers(t *testing.T, srv *fakellm.Server, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, srv.Answers()); diff != "" {
		t.Errorf("the requests the server answered (-want +got):\n%s", diff)
	}
}

func wantFinished(t *testing.T, res agent.Result) {
	t.Helper()
	if res.Reason != agent.Finished {
		t.Fatalf("the run ended %s (%s), want finished", res.Reason, res.Message)
	}
}

// TestMalformedJSON: arguments that do not parse go back to the model as
// a tool error it can act on; its next, well-formed call runs.
func TestMalformedJSON(t *testing.T) {
	e := newEnv(t)
	res, srv, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{{ID: "bad", Name: "shell_run", RawArguments: `{"command": "echo hi`}}},
		{When: "not valid JSON", Calls: []fakellm.Call{echo("good", "fixed")}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	if o := rec.obsOf(t, "bad"); !o.IsError || !strings.Contains(o.Text, "not valid JSON") || !strings.Contains(o.Text, "Send the call again") {
		t.Errorf("malformed call: %+v", o)
	}
	if o := rec.obsOf(t, "good"); o.IsError || !strings.Contains(o.Text, "fixed") {
		t.Errorf("the corrected call: %+v", o)
	}
	wantAnswers(t, srv, "turn 1", "turn 2", "turn 3")
}

// TestUnknownTool: a tool that does not exist is an error naming the
// tools there are.
func TestUnknownTool(t *testing.T) {
	e := newEnv(t)
	res, srv, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{call("x", "bash", map[string]string{"command": "ls"})}},
		{When: `There is no tool "bash".*shell_run`, Calls: []fakellm.Call{echo("y", "ok")}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	if o := rec.obsOf(t, "x"); !o.IsError {
		t.Errorf("unknown tool: %+v", o)
	}
	wantAnswers(t, srv, "turn 1", "turn 2", "turn 3")
}

// TestWrongArgumentTypes: the tool layer's refusal reaches the model.
func TestWrongArgumentTypes(t *testing.T) {
	e := newEnv(t)
	res, srv, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{{ID: "x", Name: "shell_run", RawArguments: `{"command": 42}`}}},
		{When: "do not fit its schema", Calls: []fakellm.Call{echo("y", "ok")}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	if o := rec.obsOf(t, "x"); !o.IsError {
		t.Errorf("wrong type: %+v", o)
	}
	wantAnswers(t, srv, "turn 1", "turn 2", "turn 3")
}

// TestServerError: 500s are retried, each wait longer than the last.
func TestServerError(t *testing.T) {
	e := newEnv(t)
	res, srv, _, w := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Faults: []fakellm.Fault{{Kind: fakellm.Fault500}, {Kind: fakellm.Fault500}}, Calls: []fakellm.Call{echo("a", "x")}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	wantAnswers(t, srv, "500", "500", "turn 1", "turn 2")
	if len(w.d) != 2 || w.d[1] <= w.d[0] {
		t.Errorf("retry waits %v: want two, growing", w.d)
	}
}

// TestServerErrorGivesUp: a server that keeps failing ends the run with
// a model error after the bounded attempts.
func TestServerErrorGivesUp(t *testing.T) {
	e := newEnv(t)
	faults := slices.Repeat([]fakellm.Fault{{Kind: fakellm.Fault500}}, 10)
	res, srv, _, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{{Faults: faults, Calls: []fakellm.Call{echo("a", "x")}}}},
		func(c *agent.Config) { c.Retry.Attempts = 3 })
	if res.Reason != agent.ModelError || !strings.Contains(res.Message, "500") || !strings.Contains(res.Message, "3 attempts") {
		t.Fatalf("result %+v", res)
	}
	wantAnswers(t, srv, "500", "500", "500")
}

// TestRetryAfter: a 429 is retried after the wait its Retry-After asks
// for, never sooner.
func TestRetryAfter(t *testing.T) {
	e := newEnv(t)
	res, srv, rec, w := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Faults: []fakellm.Fault{{Kind: fakellm.Fault429, RetryAfter: 7}}, Calls: []fakellm.Call{echo("a", "x")}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	wantAnswers(t, srv, "429", "turn 1", "turn 2")
	if len(w.d) != 1 || w.d[0] < 7*time.Second {
		t.Errorf("retry waits %v: want one of at least the 7 s Retry-After", w.d)
	}
	if len(rec.notes) == 0 || !strings.Contains(rec.notes[0], "429") {
		t.Errorf("notes %q: want the 429 said", rec.notes)
	}
}

// TestStreamCut: a stream that breaks off mid-answer is asked again.
func TestStreamCut(t *testing.T) {
	e := newEnv(t)
	res, srv, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Faults: []fakellm.Fault{{Kind: fakellm.FaultCut}}, Text: "Running it.", Calls: []fakellm.Call{echo("a", "after-the-cut")}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	wantAnswers(t, srv, "cut", "turn 1", "turn 2")
	if o := rec.obsOf(t, "a"); !strings.Contains(o.Text, "after-the-cut") {
		t.Errorf("the call after the cut: %+v", o)
	}
	if len(rec.notes) == 0 || !strings.Contains(rec.notes[0], "cut") {
		t.Errorf("notes %q: want the cut said", rec.notes)
	}
}

// TestContextLength: the server's context_length_exceeded makes the loop
// shorten old observations, keeping the command id, and send again;
// shell_read brings the shortened output back whole.
func TestContextLength(t *testing.T) {
	e := newEnv(t)
	res, srv, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{call("big", "shell_run", map[string]string{"command": "seq 1 3000"})}},
		{Calls: []fakellm.Call{echo("small", "x")}},
		{Faults: []fakellm.Fault{{Kind: fakellm.FaultContextLength}},
			Calls: []fakellm.Call{call("read", "shell_read", map[string]any{"command": "c_1", "grep": "^1500$"})}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	wantAnswers(t, srv, "turn 1", "turn 2", "context_length", "turn 3", "turn 4")
	reqs := srv.Requests()
	before, after := toolMsg(reqs[2], "big"), toolMsg(reqs[3], "big")
	if !strings.Contains(before, "\n1500\n") || len(after) >= len(before) || !strings.Contains(after, `shell_read command="c_1"`) {
		t.Errorf("the old observation was not shortened with its command id:\nbefore %d bytes, after:\n%s", len(before), after)
	}
	if small := toolMsg(reqs[3], "small"); !strings.Contains(small, "x\n") {
		t.Errorf("the newest observation was touched: %q", small)
	}
	if o := rec.obsOf(t, "read"); !strings.Contains(o.Text, "1500") {
		t.Errorf("shell_read of the shortened command: %s", o.Text)
	}
}

// TestWindow: over the window, old observations are shortened before
// sending, never the newest.
func TestWindow(t *testing.T) {
	e := newEnv(t)
	res, srv, _, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{call("big", "shell_run", map[string]string{"command": "seq 1 3000"})}},
		{Calls: []fakellm.Call{echo("small", "x")}},
		finish("done"),
	}}, func(c *agent.Config) { c.ContextTokens = 1500 })
	wantFinished(t, res)
	reqs := srv.Requests()
	if newest := toolMsg(reqs[1], "big"); !strings.Contains(newest, "\n2999\n") {
		t.Errorf("the newest observation was shortened (%d bytes)", len(newest))
	}
	if old := toolMsg(reqs[2], "big"); strings.Contains(old, "\n1500\n") || !strings.Contains(old, "command c_1") {
		t.Errorf("the old observation was not shortened with its command id: %d bytes", len(old))
	}
}

func toolMsg(r fakellm.Request, id string) string {
	for _, m := range r.Messages {
		if m.Role == "tool" && m.ToolCallID == id {
			return m.Content
		}
	}
	return ""
}

// TestParallelSessions: calls on different sessions run at the same
// time (the first waits for a file only the second makes); calls on one
// session run in the model's order.
func TestParallelSessions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, n := range []string{"s1", "s2"} {
		if _, err := e.cl.CreateSession(ctx, wire.CreateSession{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	flag, f := filepath.Join(dir, "flag"), filepath.Join(dir, "f")
	res, _, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{
			call("waiter", "shell_run", map[string]any{"session": "s1", "timeout": 20, "yield": 30,
				"command": fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; echo saw-the-flag", flag)}),
			call("maker", "shell_run", map[string]any{"session": "s2", "command": "touch " + flag}),
		}},
		{Calls: []fakellm.Call{
			call("w", "shell_run", map[string]any{"session": "s1", "command": "echo one > " + f}),
			call("r", "shell_run", map[string]any{"session": "s1", "command": "cat " + f}),
		}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	if o := rec.obsOf(t, "waiter"); !strings.Contains(o.Text, "saw-the-flag") || !strings.Contains(o.Text, "exit code 0") {
		t.Errorf("the calls on two sessions did not run in parallel: %s", o.Text)
	}
	if o := rec.obsOf(t, "r"); o.IsError || !strings.Contains(o.Text, "one") {
		t.Errorf("the calls on one session did not run in order: %s", o.Text)
	}
}

// TestApproveAsk: --approve ask runs what the person allows and tells
// the model what they refused, and why.
func TestApproveAsk(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	var out strings.Builder
	res, _, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{
			call("ya", "shell_run", map[string]string{"command": "touch " + a}),
			call("nb", "shell_run", map[string]string{"command": "touch " + b}),
		}},
		finish("done"),
	}}, func(c *agent.Config) {
		c.Approve = &agent.Ask{In: strings.NewReader("y\nn not that one\n"), Out: &out}
	})
	wantFinished(t, res)
	if _, err := os.Stat(a); err != nil {
		t.Errorf("the allowed command did not run: %v", err)
	}
	if _, err := os.Stat(b); err == nil {
		t.Errorf("the refused command ran")
	}
	if o := rec.obsOf(t, "nb"); !o.Refused || !strings.Contains(o.Text, "not that one") {
		t.Errorf("refused call: %+v", o)
	}
	if strings.Count(out.String(), "run shell_run") != 2 {
		t.Errorf("the questions asked: %q", out.String())
	}
}

// TestSmallWindowServer: a server whose window is smaller than the
// loop's own budget refuses the request; the loop shortens the old
// observation until it fits, and goes on.
func TestSmallWindowServer(t *testing.T) {
	e := newEnv(t)
	res, srv, _, _ := runScript(t, e, fakellm.Script{MaxContextChars: 10000, Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{call("one", "shell_run", map[string]string{"command": "seq 1 1500"})}},
		{Calls: []fakellm.Call{call("two", "shell_run", map[string]string{"command": "seq 1 1500"})}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	wantAnswers(t, srv, "turn 1", "turn 2", "context_length", "turn 3")
	last := srv.Requests()[3]
	if one, two := toolMsg(last, "one"), toolMsg(last, "two"); !strings.Contains(one, "command c_1") || strings.Contains(one, "\n750\n") || !strings.Contains(two, "\n750\n") {
		t.Errorf("want the old observation shortened and the newest whole:\n%s\n---\n%d bytes", one, len(two))
	}
}
