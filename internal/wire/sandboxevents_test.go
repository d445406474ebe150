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
		{"events", SandboxEventList{Events: []SandboxEvent{
			{Seq: 1, Time: t0, Kind: EventCreated},
			{Seq: 2, Time: t0, Kind: EventDied, Reason: "oom_killed", Message: "m"},
		}}, `{"events":[{"seq":1,"time":"2026-11-30T12:00:00.123456789Z","kind":"created"},` +
			`{"seq":2,"time":"2026-11-30T12:00:00.123456789Z","kind":"died","reason":"oom_killed","message":"m"}]}`},
		{"no events", SandboxEventList{Events: []SandboxEvent{}}, `{"events":[]}`},
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
