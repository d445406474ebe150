package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/agent/fakellm"
	"github.com/limbs-dev/limbs/internal/wire"
)

// notedAt is the 1-based index of the first request whose last message
// is the loop's note to the model, 0 when none is.
func notedAt(srv *fakellm.Server) int {
	for i, r := range srv.Requests() {
		for _, m := range r.Messages {
			if m.Role == "user" && strings.Contains(m.Content, "[limbs agent]") && strings.Contains(m.Content, "Try something different") {
				return i + 1
			}
		}
	}
	return 0
}

// TestStuckRepeat: the same call with the same result three times gets
// a note; three more stop the run.
func TestStuckRepeat(t *testing.T) {
	e := newEnv(t)
	res, srv, _, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{echo("", "same")}, Repeat: 20},
	}}, nil)
	if res.Reason != agent.Stuck || !strings.Contains(res.Message, "same result 3 times") || res.Steps != 6 {
		t.Fatalf("result %+v: want stuck after 6 steps", res)
	}
	if n := notedAt(srv); n != 4 {
		t.Errorf("the note reached the model in request %d, want 4", n)
	}
}

// TestStuckSameError: different calls failing the same way.
func TestStuckSameError(t *testing.T) {
	e := newEnv(t)
	var turns []fakellm.Turn
	for i := range 10 {
		turns = append(turns, fakellm.Turn{Calls: []fakellm.Call{call("", "bash", map[string]string{"command": fmt.Sprint("ls ", i)})}})
	}
	res, srv, _, _ := runScript(t, e, fakellm.Script{Turns: turns}, nil)
	if res.Reason != agent.Stuck || !strings.Contains(res.Message, "same error") || res.Steps != 6 {
		t.Fatalf("result %+v: want stuck on the same error after 6 steps", res)
	}
	if n := notedAt(srv); n != 4 {
		t.Errorf("the note reached the model in request %d, want 4", n)
	}
}

// TestStuckAlternating: two steps taking turns.
func TestStuckAlternating(t *testing.T) {
	e := newEnv(t)
	var turns []fakellm.Turn
	for i := range 14 {
		turns = append(turns, fakellm.Turn{Calls: []fakellm.Call{echo("", []string{"ping", "pong"}[i%2])}})
	}
	res, srv, _, _ := runScript(t, e, fakellm.Script{Turns: turns}, nil)
	if res.Reason != agent.Stuck || !strings.Contains(res.Message, "alternated") || res.Steps != 12 {
		t.Fatalf("result %+v: want stuck alternating after 12 steps", res)
	}
	if n := notedAt(srv); n != 7 {
		t.Errorf("the note reached the model in request %d, want 7", n)
	}
}

// TestWaitingIsNotStuck: shell_wait again and again on a command that
// still runs is waiting, not being stuck.
func TestWaitingIsNotStuck(t *testing.T) {
	e := newEnv(t)
	wait := call("", "shell_wait", map[string]any{"yield": 0.2})
	res, srv, _, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{call("", "shell_run", map[string]any{"command": "sleep 3; echo built", "yield": 0.2})}},
		{Calls: []fakellm.Call{wait}, Repeat: 8},
		{Calls: []fakellm.Call{call("", "shell_wait", map[string]any{"yield": 30})}},
		finish("built"),
	}}, nil)
	wantFinished(t, res)
	if n := notedAt(srv); n != 0 {
		t.Errorf("waiting got a stuck note (request %d)", n)
	}
}

// TestNoToolCalls: text with no call gets a nudge, a second ends the run.
func TestNoToolCalls(t *testing.T) {
	e := newEnv(t)
	res, _, _, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{{Text: "I think it works.", Repeat: 5}}}, nil)
	if res.Reason != agent.NoToolCalls || !strings.Contains(res.Message, "I think it works.") || res.Steps != 2 {
		t.Fatalf("result %+v", res)
	}
}

func distinct(n int) fakellm.Script {
	var turns []fakellm.Turn
	for i := range n {
		turns = append(turns, fakellm.Turn{Calls: []fakellm.Call{echo("", fmt.Sprint("step-", i))}})
	}
	return fakellm.Script{Turns: turns}
}

func TestMaxSteps(t *testing.T) {
	e := newEnv(t)
	res, srv, _, _ := runScript(t, e, distinct(10), func(c *agent.Config) { c.Limits.Steps = 3 })
	if res.Reason != agent.MaxSteps || res.Steps != 3 || !strings.Contains(res.Message, "--max-steps") || len(srv.Requests()) != 3 {
		t.Fatalf("result %+v after %d requests", res, len(srv.Requests()))
	}
}

func TestMaxTokens(t *testing.T) {
	e := newEnv(t)
	res, _, _, _ := runScript(t, e, distinct(10), func(c *agent.Config) { c.Limits.Tokens = 10 })
	if res.Reason != agent.MaxTokens || res.Steps != 1 || !strings.Contains(res.Message, "--max-tokens") {
		t.Fatalf("result %+v", res)
	}
}

func TestMaxCost(t *testing.T) {
	e := newEnv(t)
	res, _, _, _ := runScript(t, e, distinct(10), func(c *agent.Config) {
		c.Prices = agent.Prices{Input: 10, Output: 30} // per million tokens
		c.Limits.Cost = 0.01
	})
	if res.Reason != agent.MaxCost || res.Cost < 0.01 || !strings.Contains(res.Message, "--max-cost") {
		t.Fatalf("result %+v", res)
	}
}

// TestMaxTime: the wall-time limit stops the run during a command, and
// the command is interrupted: the session is free afterwards.
func TestMaxTime(t *testing.T) {
	e := newEnv(t)
	res, _, _, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{call("", "shell_run", map[string]any{"command": "sleep 600", "yield": 600})}},
		finish("never"),
	}}, func(c *agent.Config) { c.Limits.Time = 2 * time.Second })
	if res.Reason != agent.MaxTime || !strings.Contains(res.Message, "--max-time") {
		t.Fatalf("result %+v", res)
	}
	wantFree(t, e)
}

// wantFree: the agent's session runs no command (it was interrupted).
func wantFree(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := e.cl.Exec(ctx, "agent", wire.Exec{Command: "echo free"})
	if err != nil || !strings.Contains(r.Output, "free") {
		t.Fatalf("the agent's session is not free after the stop: %v %+v", err, r)
	}
}

// cancelOnCall cancels the run a moment after its first tool call starts.
type cancelOnCall struct {
	agent.Nop
	cancel context.CancelFunc
}

func (c cancelOnCall) ToolCall(int, agent.ToolCall) { time.AfterFunc(time.Second, c.cancel) }

// TestCancel: cancelling the run (Ctrl-C) interrupts the running command.
func TestCancel(t *testing.T) {
	e := newEnv(t)
	srv, err := fakellm.Start(fakellm.Script{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{call("", "shell_run", map[string]any{"command": "sleep 600", "yield": 600})}},
		finish("never"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := agent.Run(ctx, agent.Config{Model: "fake", BaseURL: srv.URL, Tools: e.tools(t, ""), Shell: e.sh,
		Observer: cancelOnCall{cancel: cancel}}, "sleep")
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != agent.Cancelled {
		t.Fatalf("result %+v", res)
	}
	wantFree(t, e)
}
