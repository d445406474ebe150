package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/agent/fakellm"
)

// TestKeyNotInErrors (acceptance 5): a server that quotes the key back
// in its refusal (as OpenAI's 401 does, partly masked) does not get it
// into the result or the Observer.
func TestKeyNotInErrors(t *testing.T) {
	const key = "sk-proj-ABCDEFG-very-secret-1234"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
			"message": "Incorrect API key provided: " + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") + ".",
			"type":    "invalid_request_error", "code": "invalid_api_key"}})
	}))
	defer srv.Close()
	e := newEnv(t)
	var printed strings.Builder
	rec := &recorder{}
	res, err := agent.Run(context.Background(), agent.Config{Model: "m", BaseURL: srv.URL + "/v1", APIKey: key,
		Tools: e.tools(t, ""), Observer: agent.Observers{rec, &agent.Printer{W: &printed}}}, "task")
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != agent.ModelError || !strings.Contains(res.Message, "401") || !strings.Contains(res.Message, "check the API key") {
		t.Fatalf("result %+v", res)
	}
	b, _ := json.Marshal(res)
	for _, s := range []string{string(b), printed.String(), strings.Join(rec.notes, "\n")} {
		if strings.Contains(s, key) {
			t.Errorf("the key appears in %s", s)
		}
	}
}

// TestNoKey: without a key (a local server) no Authorization is sent.
func TestNoKey(t *testing.T) {
	e := newEnv(t)
	_, srv, _, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{finish("done")}}, func(c *agent.Config) { c.APIKey = "" })
	if r := srv.Requests(); len(r) != 1 || r[0].Authorized {
		t.Errorf("requests %+v: want one, with no Authorization", r)
	}
}

// TestProfiles: a profile's tools are what the model gets and calls.
func TestProfiles(t *testing.T) {
	for _, tc := range []struct{ profile, tool, arg string }{
		{"anthropic", "bash", "command"},
		{"openhands", "execute_bash", "command"},
		{"codex", "exec_command", "cmd"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			e := newEnv(t)
			res, srv, rec, _ := runScript(t, e, fakellm.Script{Turns: []fakellm.Turn{
				{Calls: []fakellm.Call{call("a", tc.tool, map[string]string{tc.arg: "echo $((6*7))"})}},
				finish("done"),
			}}, func(c *agent.Config) { c.Tools = e.tools(t, tc.profile) })
			wantFinished(t, res)
			if o := rec.obsOf(t, "a"); o.IsError || !strings.Contains(o.Text, "42") {
				t.Errorf("%s: %+v", tc.tool, o)
			}
			if tools := srv.Requests()[0].Tools; !contains(tools, tc.tool) || !contains(tools, "finish") || contains(tools, "shell_run") {
				t.Errorf("tools offered: %v", tools)
			}
		})
	}
}
