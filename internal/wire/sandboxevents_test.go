package wire

import (
	"encoding/json"
	"testing"
	"time"
)

// The typed vocabulary must not change a byte of what the control plane
// answers (docs/control.md): these are the bodies it served when events
// and networks were plain strings.
func TestSandboxVocabularyJSON(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"events", EventList{Events: []Event{
			{Seq: 1, Time: t0, Sandbox: "sb_x", Type: EventSandboxCreated, Source: SourceSystem, Cursor: 7},
			{Seq: 2, Time: t0, Sandbox: "sb_x", Type: EventSandboxDied, Source: SourceSystem, Data: json.RawMessage(`{"reason":"oom_killed"}`), Cursor: 9},
		}, Next: 3}, `{"events":[{"seq":1,"time":"2026-11-30T12:00:00.123456789Z","sandbox":"sb_x","type":"sandbox.created","source":"system","cursor":7},` +
			`{"seq":2,"time":"2026-11-30T12:00:00.123456789Z","sandbox":"sb_x","type":"sandbox.died","source":"system","data":{"reason":"oom_killed"},"cursor":9}],"next":3}`},
		{"no events", EventList{Events: []Event{}}, `{"events":[]}`},
		{"limits", Limits{Network: NetworkBridge}, `{"cpus":0,"memory_mb":0,"pids":0,"network":"bridge","read_only_root":false}`},
		{"create", CreateSandbox{Network: NetworkNone}, `{"network":"none"}`},
		{"create default", CreateSandbox{}, `{}`},
	}
	for _, tc := range tests {
		b, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.name, b, tc.want)
		}
	}
}
