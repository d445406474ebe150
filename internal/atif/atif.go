// Package atif turns the runs of limbs agent recorded in a sandbox's event
// log (agent.* events) into trajectories of the Agent Trajectory
// Interchange Format (harbor's RFC 0001): what limbs export --format atif
// writes and the dashboard of limbs serve offers for download.
package atif

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Version is the version of the Agent Trajectory Interchange Format
// (harbor's RFC 0001) that limbs export --format atif writes.
const Version = "ATIF-v1.7"

// The ATIF objects limbs writes (the RFC's root, agent, step, tool call,
// observation and metrics objects; cmd/limbs/testdata has the schema).
type (
	Trajectory struct {
		SchemaVersion string         `json:"schema_version"`
		SessionID     string         `json:"session_id,omitempty"`
		Agent         Agent          `json:"agent"`
		Steps         []Step         `json:"steps"`
		FinalMetrics  *FinalMetrics  `json:"final_metrics,omitempty"`
		Extra         map[string]any `json:"extra,omitempty"`
	}
	Agent struct {
		Name      string `json:"name"`
		Version   string `json:"version"`
		ModelName string `json:"model_name,omitempty"`
	}
	Step struct {
		StepID      int            `json:"step_id"`
		Timestamp   string         `json:"timestamp,omitempty"`
		Source      string         `json:"source"`
		ModelName   string         `json:"model_name,omitempty"`
		Message     string         `json:"message"`
		ToolCalls   []ToolCall     `json:"tool_calls,omitempty"`
		Observation *Observation   `json:"observation,omitempty"`
		Metrics     *Metrics       `json:"metrics,omitempty"`
		LLMCalls    int            `json:"llm_call_count,omitempty"`
		Extra       map[string]any `json:"extra,omitempty"`
	}
	ToolCall struct {
		ID        string         `json:"tool_call_id"`
		Name      string         `json:"function_name"`
		Arguments map[string]any `json:"arguments"`
		Extra     map[string]any `json:"extra,omitempty"`
	}
	Observation struct {
		Results []Result `json:"results"`
	}
	Result struct {
		SourceCallID string         `json:"source_call_id,omitempty"`
		Content      string         `json:"content"`
		Extra        map[string]any `json:"extra,omitempty"`
	}
	Metrics struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	}
	FinalMetrics struct {
		PromptTokens     int64          `json:"total_prompt_tokens"`
		CompletionTokens int64          `json:"total_completion_tokens"`
		Steps            int            `json:"total_steps"`
		Extra            map[string]any `json:"extra,omitempty"`
	}
)

// Runs lists the runs of limbs agent in events, in the order they
// began.
func Runs(events []wire.Event) []string {
	var runs []string
	seen := map[string]bool{}
	for _, e := range events {
		if e.Source != wire.SourceAgent {
			continue
		}
		var d struct {
			Run string `json:"run"`
		}
		if json.Unmarshal(e.Data, &d) == nil && d.Run != "" && !seen[d.Run] {
			seen[d.Run] = true
			runs = append(runs, d.Run)
		}
	}
	return runs
}

// Build turns the agent.* events of run (the last run when empty) of
// a sandbox's log into an ATIF trajectory: the system prompt and the task
// as the first steps, one agent step per model turn (its text, its tool
// calls, their results as the observation, its tokens), the loop's notes
// as system steps. Each observation result names in its extra the
// command id, exit code and byte range of the command's output it shows.
func Build(events []wire.Event, run string) (*Trajectory, error) {
	runs := Runs(events)
	if len(runs) == 0 {
		return nil, fmt.Errorf("no run of limbs agent in its event log: a run records there when limbs agent works in a sandbox of limbs serve (--sandbox or --image)")
	}
	if run == "" {
		run = runs[len(runs)-1]
	} else if !contains(runs, run) {
		return nil, fmt.Errorf("no run %q of limbs agent in its event log; its runs: %v", run, runs)
	}
	t := &Trajectory{SchemaVersion: Version, SessionID: run, Agent: Agent{Name: "limbs", Version: LimbsVersion()}}
	var cur *Step // the agent step of the current model turn
	curTurn := -1
	var usage Metrics
	add := func(s Step) *Step {
		s.StepID = len(t.Steps) + 1
		t.Steps = append(t.Steps, s)
		return &t.Steps[len(t.Steps)-1]
	}
	for _, e := range events {
		if e.Source != wire.SourceAgent || len(e.Data) == 0 {
			continue
		}
		var head struct {
			Run  string `json:"run"`
			Step int    `json:"step"`
		}
		if json.Unmarshal(e.Data, &head) != nil || head.Run != run {
			continue
		}
		ts := e.Time.UTC().Format(time.RFC3339Nano)
		switch e.Type {
		case wire.EventAgentMessage:
			var d wire.AgentMessageData
			if json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			switch d.Role {
			case "system", "user":
				add(Step{Timestamp: ts, Source: d.Role, Message: d.Text})
			case "note":
				add(Step{Timestamp: ts, Source: "system", Message: d.Text, Extra: map[string]any{"limbs_note": true, "turn": d.Step}})
			case "assistant":
				if d.Model != "" && t.Agent.ModelName == "" {
					t.Agent.ModelName = d.Model
				}
				s := Step{Timestamp: ts, Source: "agent", ModelName: d.Model, Message: d.Text, LLMCalls: 1, Extra: map[string]any{"turn": d.Step}}
				for _, c := range d.Calls {
					s.ToolCalls = append(s.ToolCalls, toolCall(c))
				}
				cur, curTurn = add(s), d.Step
				if usage != (Metrics{}) {
					m := usage
					cur.Metrics, usage = &m, Metrics{}
				}
			}
		case wire.EventAgentUsage:
			var d wire.AgentUsageData
			if json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			// Usage comes before the turn's message; a retried request's
			// tokens count for the turn too.
			usage.PromptTokens += d.PromptTokens
			usage.CompletionTokens += d.CompletionTokens
		case wire.EventAgentObservation:
			var d wire.AgentObservationData
			if json.Unmarshal(e.Data, &d) != nil || cur == nil || d.Step != curTurn {
				continue
			}
			if cur.Observation == nil {
				cur.Observation = &Observation{}
			}
			cur.Observation.Results = append(cur.Observation.Results, Result{SourceCallID: d.CallID, Content: d.Text, Extra: observationExtra(d)})
		case wire.EventAgentFinished:
			var d wire.AgentFinishedData
			if json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			t.FinalMetrics = &FinalMetrics{PromptTokens: d.PromptTokens, CompletionTokens: d.CompletionTokens,
				Extra: map[string]any{"stop_reason": d.Reason, "stop_message": d.Message, "turns": d.Steps, "duration_ms": d.DurationMs}}
		}
	}
	if len(t.Steps) == 0 {
		return nil, fmt.Errorf("run %s of limbs agent has no messages in the event log (lost to its retention?)", run)
	}
	if t.FinalMetrics == nil {
		var f FinalMetrics
		for _, s := range t.Steps {
			if s.Metrics != nil {
				f.PromptTokens += s.Metrics.PromptTokens
				f.CompletionTokens += s.Metrics.CompletionTokens
			}
		}
		f.Extra = map[string]any{"stop_reason": "unknown: the log holds no agent.finished of this run (it was killed, or still runs)"}
		t.FinalMetrics = &f
	}
	t.FinalMetrics.Steps = len(t.Steps)
	t.Extra = map[string]any{"limbs_runs": len(runs)}
	return t, nil
}

func toolCall(c wire.AgentCallData) ToolCall {
	tc := ToolCall{ID: c.ID, Name: c.Name}
	if c.ID == "" {
		tc.ID = "call"
	}
	if c.Name == "" {
		tc.Name = "unknown"
	}
	if json.Unmarshal([]byte(c.Arguments), &tc.Arguments) != nil || tc.Arguments == nil {
		// Not a JSON object (the model sent malformed arguments): kept
		// as sent, where the RFC's object has room.
		tc.Arguments = map[string]any{}
		tc.Extra = map[string]any{"raw_arguments": c.Arguments}
	}
	return tc
}

// observationExtra is what limbs knows of an observation beyond its text:
// the command, its exit code, the byte ranges of its output shown.
func observationExtra(d wire.AgentObservationData) map[string]any {
	x := map[string]any{"tool": d.Name}
	if d.IsError {
		x["is_error"] = true
	}
	if d.Refused {
		x["refused"] = true
	}
	if d.Command != "" {
		x["session"], x["command_id"], x["status"] = d.Session, d.Command, d.Status
		if d.ExitCode != nil {
			x["exit_code"] = *d.ExitCode
		} else {
			x["exit_code"] = nil
		}
		if d.Shown != nil {
			x["shown_bytes"] = d.Shown
		} else {
			x["shown_bytes"] = [][2]int64{}
		}
		x["output_bytes"] = d.OutputBytes
	}
	return x
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

func Write(w io.Writer, t *Trajectory) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(t)
}

// LimbsVersion is the module version limbs was built as ("dev" for a
// build from a checkout).
func LimbsVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
