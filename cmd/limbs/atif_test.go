package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// validateATIF validates the JSON document b against the ATIF v1.7
// schema of testdata.
func validateATIF(t *testing.T, b []byte) {
	t.Helper()
	sb, err := os.ReadFile(filepath.Join("testdata", "atif-v1.7.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(sb, &s); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("the export is not JSON: %v", err)
	}
	if err := rs.Validate(doc); err != nil {
		t.Fatalf("the export does not validate against the ATIF v1.7 schema: %v\n%s", err, b)
	}
}

// TestAgentTrajectoryThroughServe (acceptance 1 and 5, trajectories): a
// run of limbs agent in a sandbox of a real limbs serve, driven by the
// fake model server, records its requests, messages, tool calls,
// observations (each with its command id, exit code and byte range),
// usage and end as agent events in the sandbox's log; limbs export
// --format atif writes them as a trajectory that validates against the
// ATIF schema; the API key is in no event, no export and no output.
func TestAgentTrajectoryThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve and limbs agent")
	}
	addr, _ := realServe(t)
	agentTrajectory(t, addr, wire.CreateSandbox{Image: localImage})
}

// TestAgentTrajectoryInDocker is TestAgentTrajectoryThroughServe in a
// Docker sandbox.
func TestAgentTrajectoryInDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve and Docker")
	}
	if err := exec.Command("docker", "image", "inspect", "limbs/base:latest").Run(); err != nil {
		testbin.NoDocker(t, "no Docker engine or no limbs/base:latest image")
	}
	addr, _ := realServe(t, "--provider", "docker")
	agentTrajectory(t, addr, wire.CreateSandbox{Image: "limbs/base:latest"})
}

func agentTrajectory(t *testing.T, addr string, create wire.CreateSandbox) {
	sb := createSandbox(t, addr, create)
	c, err := client.New(addr, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Sandbox(sb.ID)
	sid := setupCalc(t, cl)
	srv := startFakeLLM(t, fakellmTestdata(t, "fix.json"))
	record := filepath.Join(t.TempDir(), "run.jsonl")
	out, code := runAgentCmd(t, calcTask, "--model", "fake", "--base-url", srv.URL,
		"--addr", addr, "--token", "tok", "--sandbox", sb.ID, "--log-level", "debug", "--record", record)
	calcPasses(t, cl, sid)
	recorded, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	wantFixed(t, srv, out, code, string(recorded))

	ctx := t.Context()
	events, err := fetchEvents(ctx, c, sb.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	count := map[wire.EventType]int{}
	var obs []wire.AgentObservationData
	var fin wire.AgentFinishedData
	for _, e := range events {
		if !strings.HasPrefix(string(e.Type), "agent.") {
			continue
		}
		if e.Source != wire.SourceAgent {
			t.Errorf("event %d %s has source %q, want agent", e.Seq, e.Type, e.Source)
		}
		count[e.Type]++
		switch e.Type {
		case wire.EventAgentObservation:
			var d wire.AgentObservationData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			obs = append(obs, d)
		case wire.EventAgentFinished:
			if err := json.Unmarshal(e.Data, &fin); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, typ := range []wire.EventType{wire.EventAgentRequest, wire.EventAgentMessage, wire.EventAgentToolCall, wire.EventAgentObservation, wire.EventAgentUsage, wire.EventAgentFinished} {
		if count[typ] == 0 {
			t.Errorf("no %s event in the sandbox's log (counts %v)", typ, count)
		}
	}
	if fin.Reason != "finished" || fin.Steps != 4 || fin.PromptTokens == 0 {
		t.Errorf("agent.finished %+v, want finished after 4 steps with its tokens", fin)
	}
	failing := false
	for _, o := range obs {
		if o.Command == "" {
			continue
		}
		if !strings.HasPrefix(o.Command, "c_") || o.ExitCode == nil || len(o.Shown) == 0 {
			t.Errorf("observation of a command without its id, exit code or byte range: %+v", o)
		}
		failing = failing || (o.ExitCode != nil && *o.ExitCode != 0 && strings.Contains(o.Text, "FAIL"))
	}
	if !failing {
		t.Errorf("no observation holds the failing test with its exit code: %+v", obs)
	}
	all, _ := json.Marshal(events)
	if bytes.Contains(all, []byte(fakeKey)) || bytes.Contains(all, []byte(fakeKey[8:])) {
		t.Errorf("the API key is in the sandbox's event log")
	}
	if n := strings.Count(string(recorded), "\n"); n != count[wire.EventAgentRequest]+count[wire.EventAgentMessage]+count[wire.EventAgentToolCall]+count[wire.EventAgentObservation]+count[wire.EventAgentUsage]+count[wire.EventAgentFinished] {
		t.Errorf("--record holds %d events, the log %v", n, count)
	}

	t.Setenv("LIMBS_ADDR", addr)
	t.Setenv("LIMBS_TOKEN", "tok")
	file := filepath.Join(t.TempDir(), "run.atif.json")
	if code := run(ctx, []string{"export", sb.ID, "--format", "atif", "-o", file}); code != 0 {
		t.Fatalf("limbs export --format atif: exit code %d", code)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	validateATIF(t, b)
	if bytes.Contains(b, []byte(fakeKey)) || bytes.Contains(b, []byte(fakeKey[8:])) {
		t.Errorf("the API key is in the ATIF export")
	}
	var tr atifTrajectory
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	if tr.SchemaVersion != "ATIF-v1.7" || tr.Steps[0].Source != "system" || tr.Steps[1].Source != "user" || tr.Steps[1].Message != calcTask {
		t.Errorf("trajectory head %+v %+v", tr.SchemaVersion, tr.Steps[:2])
	}
	agentSteps, results := 0, 0
	for i, s := range tr.Steps {
		if s.StepID != i+1 {
			t.Errorf("step %d has step_id %d", i, s.StepID)
		}
		if s.Source != "agent" {
			continue
		}
		agentSteps++
		if s.Metrics == nil || s.Metrics.PromptTokens == 0 {
			t.Errorf("agent step %d without its tokens", s.StepID)
		}
		if s.Observation == nil {
			continue
		}
		for _, r := range s.Observation.Results {
			results++
			if r.Extra["tool"] == "shell_run" && (r.Extra["command_id"] == nil || r.Extra["exit_code"] == nil || r.Extra["shown_bytes"] == nil) {
				t.Errorf("step %d: a shell_run result without its command id, exit code or byte range: %+v", s.StepID, r.Extra)
			}
		}
	}
	if agentSteps != 4 || results == 0 || tr.FinalMetrics == nil || tr.FinalMetrics.Extra["stop_reason"] != "finished" {
		t.Errorf("%d agent steps (want 4), %d results, final %+v", agentSteps, results, tr.FinalMetrics)
	}
	// limbs replay shows the run from the log, the --record file and
	// the ATIF export alike.
	wantAgentReplay(t, srv, sb.ID, "--agent")
	wantAgentReplay(t, srv, "--file", record)
	wantAgentReplay(t, srv, "--file", file)
}

// TestAppendEventsAPI: POST /v1/sandboxes/{id}/events takes only the
// agent's types, forces their source to agent, masks the sandbox's
// secrets, and needs the token.
func TestAppendEventsAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	const secretVal = "s3cr3t-value-for-the-log"
	sb := createSandbox(t, addr, wire.CreateSandbox{Image: localImage, Env: map[string]string{"TOK": secretVal}, SecretEnv: []string{"TOK"}})
	post := func(token string, evs ...wire.Event) int {
		b, _ := json.Marshal(wire.AppendEvents{Events: evs})
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/sandboxes/"+sb.ID+"/events", bytes.NewReader(b))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	data, _ := json.Marshal(wire.AgentMessageData{Run: "r1", Role: "assistant", Text: "the value is " + secretVal})
	msg := wire.Event{Type: wire.EventAgentMessage, Source: wire.SourceSystem, Seq: 99, Data: data}
	if got := post("", msg); got != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", got)
	}
	if got := post("tok", wire.Event{Type: wire.EventSandboxDeleted}); got != http.StatusBadRequest {
		t.Errorf("a sandbox.deleted event: %d, want 400", got)
	}
	if got := post("tok", make([]wire.Event, 1001)...); got != http.StatusBadRequest {
		t.Errorf("1001 events: %d, want 400", got)
	}
	if got := post("tok", msg); got != http.StatusOK {
		t.Fatalf("an agent.message: %d, want 200", got)
	}
	c, err := client.New(addr, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	testbin.Eventually(t, "the agent event in the log", 30*time.Second, func() bool {
		events, err := fetchEvents(context.Background(), c, sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Type == wire.EventSandboxDeleted {
				t.Errorf("a refused event is in the log: %+v", e)
			}
			if e.Type != wire.EventAgentMessage {
				continue
			}
			found = true
			if e.Source != wire.SourceAgent || e.Seq == 99 {
				t.Errorf("appended event %+v: want source agent and the log's seq", e)
			}
			if strings.Contains(string(e.Data), secretVal) {
				t.Errorf("the sandbox's secret is not masked in an agent event: %s", e.Data)
			}
		}
		return found
	})
}
