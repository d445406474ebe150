package agent_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/agent/fakellm"
)

// The hostile model: answers a real model server would not send, and
// the loop's bounds against them.

// TestManyCalls: a turn of 1000 tool calls runs at most agent.MaxCalls
// of them; every other call gets a tool error saying why (each call id
// gets its result, as the protocol needs), and the run goes on.
func TestManyCalls(t *testing.T) {
	e := newEnv(t)
	const n = 1000
	var calls []fakellm.Call
	for i := range n {
		calls = append(calls, call(fmt.Sprintf("c%d", i), "str_replace_based_edit_tool", map[string]string{"command": "view", "path": "."}))
	}
	res, srv, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{{Calls: calls}, finish("done")}}, nil)
	wantFinished(t, res)
	ran, refused := 0, 0
	for _, o := range rec.obs {
		if strings.Contains(o.Text, "was not run") && strings.Contains(o.Text, fmt.Sprint(agent.MaxCalls)) {
			refused++
		} else {
			ran++
		}
	}
	// finish's own observation is one of those that ran.
	if ran != agent.MaxCalls+1 || refused != n-agent.MaxCalls {
		t.Errorf("%d calls ran and %d were refused, want %d and %d", ran-1, refused, agent.MaxCalls, n-agent.MaxCalls)
	}
	if got := len(toolMessages(srv.Requests()[1])); got != n {
		t.Errorf("the next request holds %d tool results for %d calls", got, n)
	}
}

func toolMessages(r fakellm.Request) []fakellm.Message {
	var ms []fakellm.Message
	for _, m := range r.Messages {
		if m.Role == "tool" {
			ms = append(ms, m)
		}
	}
	return ms
}

// TestEndlessAnswer: an answer that does not end (64 MiB of text and
// counting) is cut at agent.MaxAnswer; the model is told, and the run
// goes on with the next turn instead of holding it all in memory.
func TestEndlessAnswer(t *testing.T) {
	e := newEnv(t)
	script := fakellm.Script{Turns: []fakellm.Turn{
		{Faults: []fakellm.Fault{{Kind: fakellm.FaultEndless, Bytes: 64 << 20}}, Calls: []fakellm.Call{echo("a", "after")}},
		finish("done"),
	}}
	res, _, rec, _ := runScript(t, e, script, func(c *agent.Config) { c.Retry.Timeout = time.Minute })
	wantFinished(t, res)
	if n := rec.text.Len(); n > agent.MaxAnswer+64<<10 {
		t.Errorf("the loop took %d bytes of one answer, over its bound of %d", n, agent.MaxAnswer)
	}
	found := false
	for _, n := range rec.notes {
		found = found || strings.Contains(n, "was cut")
	}
	if !found {
		t.Errorf("no note says the answer was cut: %q", rec.notes)
	}
}

// TestUsageForged: usage that is negative or absurd does not buy the
// run tokens: --max-tokens still stops it.
func TestUsageForged(t *testing.T) {
	e := newEnv(t)
	script := fakellm.Script{Turns: []fakellm.Turn{
		{Usage: json.RawMessage(`{"prompt_tokens": -9000000000000000000, "completion_tokens": 10, "total_tokens": 10}`), Calls: []fakellm.Call{echo("a", "one")}},
		{Usage: json.RawMessage(`{"prompt_tokens": 9223372036854775807, "completion_tokens": 9223372036854775807, "total_tokens": -2}`), Calls: []fakellm.Call{echo("b", "two")}},
	}}
	for i := range 30 {
		script.Turns = append(script.Turns, fakellm.Turn{Calls: []fakellm.Call{echo(fmt.Sprint("c", i), fmt.Sprint("more ", i))}})
	}
	res, _, _, _ := runScript(t, e, script, func(c *agent.Config) { c.Limits.Tokens = 500 })
	if res.Reason != agent.MaxTokens || res.Usage.PromptTokens < 0 || res.Usage.CompletionTokens < 0 {
		t.Fatalf("the run ended %s (%s) with usage %+v, want max_tokens", res.Reason, res.Message, res.Usage)
	}
}

// TestUsageMissing: a server that sends no usage still has its tokens
// counted (an estimate, 4 characters a token), so that --max-tokens
// bounds the run; a note says so.
func TestUsageMissing(t *testing.T) {
	e := newEnv(t)
	var script fakellm.Script
	for i := range 30 {
		script.Turns = append(script.Turns, fakellm.Turn{NoUsage: true, Calls: []fakellm.Call{echo(fmt.Sprint("a", i), fmt.Sprint(i, strings.Repeat(" x", 200)))}})
	}
	res, _, rec, _ := runScript(t, e, script, func(c *agent.Config) { c.Limits.Tokens = 2000 })
	if res.Reason != agent.MaxTokens {
		t.Fatalf("the run ended %s (%s) after %d steps, want max_tokens", res.Reason, res.Message, res.Steps)
	}
	found := false
	for _, n := range rec.notes {
		found = found || strings.Contains(n, "no token usage")
	}
	if !found {
		t.Errorf("no note says the usage is estimated: %q", rec.notes)
	}
}

// TestNoChoices: a response without a choice is retried, and the note
// says what was wrong.
func TestNoChoices(t *testing.T) {
	e := newEnv(t)
	res, srv, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Faults: []fakellm.Fault{{Kind: fakellm.FaultNoChoices}}, Calls: []fakellm.Call{{ID: "fin", Name: "finish", Arguments: args(map[string]string{"message": "ok"})}}},
	}}, nil)
	wantFinished(t, res)
	wantAnswers(t, srv, fakellm.FaultNoChoices, "turn 1")
	if len(rec.notes) == 0 || !strings.Contains(rec.notes[0], "no choices") {
		t.Errorf("notes %q, want one about a response with no choices", rec.notes)
	}
}

// TestDuplicateCallIDs: two calls with the same id get ids of their own,
// so that each result answers exactly one call.
func TestDuplicateCallIDs(t *testing.T) {
	e := newEnv(t)
	res, srv, _, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{echo("dup", "one"), echo("dup", "two")}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	ms := toolMessages(srv.Requests()[1])
	if len(ms) != 2 || ms[0].ToolCallID == ms[1].ToolCallID {
		t.Errorf("tool results %+v: want two with distinct call ids", ms)
	}
}

// TestHostileArguments: binary, deeply nested and huge arguments, and
// unknown tools among parallel calls, are each a tool error the model
// can act on; none crashes the loop.
func TestHostileArguments(t *testing.T) {
	e := newEnv(t)
	res, _, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{
			{ID: "bin", Name: "shell_run", RawArguments: "\x00\x01\xff\xfe{"},
			{ID: "deep", Name: "shell_run", RawArguments: strings.Repeat(`{"a":[`, 20000) + strings.Repeat(`]}`, 20000)},
			{ID: "nope1", Name: "no_such_tool", RawArguments: `{}`},
			{ID: "nope2", Name: "\x1b[2J", RawArguments: `{}`},
			{ID: "big", Name: "shell_run", RawArguments: `{"command": "echo ` + strings.Repeat("y", 1<<20) + `"`},
			echo("ok", "fine"),
		}},
		finish("done"),
	}}, nil)
	wantFinished(t, res)
	for _, id := range []string{"bin", "deep", "nope1", "nope2", "big"} {
		if o := rec.obsOf(t, id); !o.IsError || len(o.Text) > 8000 {
			t.Errorf("call %s: %d bytes, isError %v, want a short error", id, len(o.Text), o.IsError)
		}
	}
	if o := rec.obsOf(t, "ok"); o.IsError || !strings.Contains(o.Text, "fine") {
		t.Errorf("the good call among them: %+v", o)
	}
}
