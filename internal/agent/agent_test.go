package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/agent/fakellm"
	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// env is a real limbsd with the tools of one run over it.
type env struct {
	d  *testbin.Limbsd
	cl *client.Client
	sh *tool.Shell
}

func newEnv(t *testing.T) *env {
	t.Helper()
	d := testbin.StartLimbsd(t, false)
	cl, err := client.New("unix://"+d.Sock, d.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	return &env{d: d, cl: cl, sh: agent.NewShell(cl, tool.ShellOptions{Session: wire.CreateSession{Name: "agent"}})}
}

func (e *env) tools(t *testing.T, profile string) []tool.Spec {
	t.Helper()
	s, err := tool.Profile(profile, e.sh, e.cl.FileStore())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// recorder is an Observer that keeps what it saw.
type recorder struct {
	agent.Nop
	mu    sync.Mutex
	obs   []agent.Observation
	calls []agent.ToolCall
	notes []string
	text  strings.Builder
	reqs  []agent.RequestInfo
}

func (r *recorder) Request(i agent.RequestInfo) {
	r.mu.Lock()
	r.reqs = append(r.reqs, i)
	r.mu.Unlock()
}
func (r *recorder) TextDelta(_ int, s string) { r.mu.Lock(); r.text.WriteString(s); r.mu.Unlock() }
func (r *recorder) Note(_ int, s string)      { r.mu.Lock(); r.notes = append(r.notes, s); r.mu.Unlock() }
func (r *recorder) Observation(_ int, c agent.ToolCall, o agent.Observation) {
	r.mu.Lock()
	r.calls, r.obs = append(r.calls, c), append(r.obs, o)
	r.mu.Unlock()
}

// obsOf is the observation of the call with id.
func (r *recorder) obsOf(t *testing.T, id string) agent.Observation {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, c := range r.calls {
		if c.ID == id {
			return r.obs[i]
		}
	}
	t.Fatalf("no observation of call %s (calls %v)", id, r.calls)
	return agent.Observation{}
}

// waits records the retry waits the loop asked for, without waiting.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err()
}

func args(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func call(id, name string, v any) fakellm.Call {
	return fakellm.Call{ID: id, Name: name, Arguments: args(v)}
}

func finish(msg string) fakellm.Turn {
	return fakellm.Turn{Calls: []fakellm.Call{call("fin", "finish", map[string]string{"message": msg})}}
}

// runScript runs the agent with script over e, and returns the result,
// the fake server and what the Observer saw.
func runScript(t *testing.T, e *env, script fakellm.Script, tweak func(*agent.Config)) (agent.Result, *fakellm.Server, *recorder, *waits) {
	t.Helper()
	srv, err := fakellm.Start(script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	rec, w := &recorder{}, &waits{}
	cfg := agent.Config{
		Model: "fake", BaseURL: srv.URL, APIKey: "sk-test-0123456789",
		Tools: e.tools(t, ""), Shell: e.sh, Observer: rec, Sleep: w.sleep,
		Limits: agent.Limits{Steps: 30, Time: 2 * time.Minute},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	res, err := agent.Run(context.Background(), cfg, "the task")
	if err != nil {
		t.Fatal(err)
	}
	return res, srv, rec, w
}

func TestRunAndFinish(t *testing.T) {
	e := newEnv(t)
	res, srv, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
		{Text: "Let me look.", Calls: []fakellm.Call{call("a", "shell_run", map[string]string{"command": "echo $((6*7))"})}},
		finish("printed 42"),
	}}, nil)
	if res.Reason != agent.Finished || res.Message != "printed 42" {
		t.Fatalf("result %+v, want finished with its message", res)
	}
	if o := rec.obsOf(t, "a"); !strings.Contains(o.Text, "42\n") || o.IsError {
		t.Errorf("observation %q", o.Text)
	}
	if !strings.Contains(rec.text.String(), "Let me look.") {
		t.Errorf("the streamed text %q lacks the model's text", rec.text.String())
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || !reqs[0].Stream || !reqs[0].IncludeUsage || !reqs[0].Authorized {
		t.Fatalf("requests %+v: want 2, streaming with include_usage and a key", reqs)
	}
	if !contains(reqs[0].Tools, "shell_run") || !contains(reqs[0].Tools, "finish") {
		t.Errorf("tools offered: %v", reqs[0].Tools)
	}
	if res.Usage.Total() == 0 {
		t.Errorf("no usage counted from the usage chunks")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
