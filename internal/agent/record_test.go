package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestRecorderEvents: a Recorder turns each Observer call into its
// agent.* event, in order, source agent, the API key removed, and an
// observation of a command carries its id, exit code and byte range.
func TestRecorderEvents(t *testing.T) {
	const key = "sk-test-recorder-key-0123"
	var mu sync.Mutex
	var got []wire.Event
	rec := agent.NewRecorder(agent.RecordOptions{Run: "agent-1", Model: "m", System: "sys", Task: "task", APIKey: key,
		Sink: func(_ context.Context, evs []wire.Event) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, evs...)
			return nil
		}})
	one := 1
	call := agent.ToolCall{ID: "call_1", Name: "shell_run", Arguments: `{"command":"echo ` + key + `"}`}
	rec.Request(agent.RequestInfo{Step: 1, Attempt: 1, Model: "m", Host: "127.0.0.1:1", Messages: 2})
	rec.Usage(1, agent.Usage{PromptTokens: 10, CompletionTokens: 5})
	rec.Assistant(1, "running it", []agent.ToolCall{call})
	rec.ToolCall(1, call)
	rec.Observation(1, call, agent.Observation{Text: "[the API key]\n[exit code 1]", Structured: tool.ShellOutput{
		Session: "s_1", Command: "c_3", Status: "exited", ExitCode: &one, Shown: [][2]int64{{0, 14}}, OutputBytes: 14}})
	rec.Note(1, "a note")
	rec.Stop(agent.Result{Reason: agent.Finished, Message: "done", Steps: 1, Usage: agent.Usage{PromptTokens: 10, CompletionTokens: 5}})
	if lost := rec.Close(context.Background()); lost != 0 {
		t.Fatalf("%d events lost", lost)
	}
	want := []wire.EventType{wire.EventAgentMessage, wire.EventAgentMessage, wire.EventAgentRequest, wire.EventAgentUsage,
		wire.EventAgentMessage, wire.EventAgentToolCall, wire.EventAgentObservation, wire.EventAgentMessage, wire.EventAgentFinished}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got), len(want), got)
	}
	for i, e := range got {
		if e.Type != want[i] || e.Source != wire.SourceAgent {
			t.Errorf("event %d: %s from %s, want %s from agent", i, e.Type, e.Source, want[i])
		}
		if bytes.Contains(e.Data, []byte(key)) {
			t.Errorf("event %d holds the API key: %s", i, e.Data)
		}
		if !bytes.Contains(e.Data, []byte(`"run":"agent-1"`)) {
			t.Errorf("event %d does not name its run: %s", i, e.Data)
		}
	}
	var o wire.AgentObservationData
	if err := json.Unmarshal(got[6].Data, &o); err != nil {
		t.Fatal(err)
	}
	if o.Command != "c_3" || o.ExitCode == nil || *o.ExitCode != 1 || len(o.Shown) != 1 || o.Shown[0] != [2]int64{0, 14} || got[6].Command != "c_3" {
		t.Errorf("observation %+v (event command %q): want c_3, exit code 1, bytes [0,14)", o, got[6].Command)
	}
}

// TestRecorderNeverBlocks: a Sink that hangs or fails costs events,
// never the loop: every Observer call returns, Close returns when its
// context ends and counts what was lost, and the failure is logged.
func TestRecorderNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var logs bytes.Buffer
	var lmu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &lmu}, nil))
	hang := agent.NewRecorder(agent.RecordOptions{Run: "r", Task: "t", Buffer: 8, Every: time.Millisecond, Logger: log,
		Sink: func(ctx context.Context, _ []wire.Event) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return errors.New("the log is away")
		}})
	for i := range 1000 {
		hang.Note(i, "n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if lost := hang.Close(ctx); lost == 0 {
		t.Errorf("a hanging Sink lost no events")
	}

	failing := agent.NewRecorder(agent.RecordOptions{Run: "r", Task: "t", Logger: log,
		Sink: func(context.Context, []wire.Event) error { return errors.New("refused: HTTP 500") }})
	failing.Note(1, "n")
	if lost := failing.Close(context.Background()); lost != 2 {
		t.Errorf("a failing Sink: %d lost, want 2", lost)
	}
	lmu.Lock()
	defer lmu.Unlock()
	if !strings.Contains(logs.String(), "refused: HTTP 500") || !strings.Contains(logs.String(), "the run goes on") {
		t.Errorf("the failure is not logged:\n%s", logs.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestRecorderBounds: a big answer whose bytes JSON escapes (6 bytes
// each), with big arguments, and many big observations
// are recorded in batches that limbs serve takes (each request at most
// control.MaxAppendBody, 8 MiB), each event at most agent.MaxEventData
// with what was left out said; none is lost.
func TestRecorderBounds(t *testing.T) {
	const maxBody = 8 << 20 // control.MaxAppendBody
	var mu sync.Mutex
	var batches [][]wire.Event
	rec := agent.NewRecorder(agent.RecordOptions{Run: "agent-big", Task: "task", Buffer: 10000,
		Sink: func(_ context.Context, evs []wire.Event) error {
			mu.Lock()
			defer mu.Unlock()
			batches = append(batches, evs)
			return nil
		}})
	var calls []agent.ToolCall
	for i := range 4 {
		calls = append(calls, agent.ToolCall{ID: "c" + strings.Repeat("x", i), Name: "shell_run", Arguments: strings.Repeat("\x00", 256<<10)})
	}
	rec.Assistant(1, strings.Repeat("\x01", 1<<20), calls)
	for _, c := range calls {
		rec.ToolCall(1, c)
	}
	for i := range 8 {
		rec.Observation(1, agent.ToolCall{ID: "o", Name: "shell_run"}, agent.Observation{Text: strings.Repeat("\x02", 200<<10) + strings.Repeat("z", i)})
	}
	if lost := rec.Close(t.Context()); lost != 0 {
		t.Fatalf("%d events lost", lost)
	}
	n := 0
	for _, b := range batches {
		body, _ := json.Marshal(wire.AppendEvents{Events: b})
		if len(body) > maxBody {
			t.Errorf("a batch of %d events is %d bytes, over the %d limbs serve takes", len(b), len(body), maxBody)
		}
		for _, e := range b {
			n++
			if len(e.Data) > agent.MaxEventData {
				t.Errorf("a %s event holds %d bytes of data, over %d", e.Type, len(e.Data), agent.MaxEventData)
			}
			if e.Type == wire.EventAgentMessage && bytes.Contains(e.Data, []byte(`"assistant"`)) && !bytes.Contains(e.Data, []byte("not recorded")) {
				t.Errorf("the clipped assistant message does not say so")
			}
		}
	}
	if want := 1 + 1 + len(calls) + 8; n != want {
		t.Errorf("%d events recorded, want %d", n, want)
	}
}
