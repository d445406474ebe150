package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestAppendEventsHostile: a hostile client of POST
// /v1/sandboxes/{id}/events (with the token) cannot forge a time before
// the sandbox existed, put long strings as session and command, append
// data that is not an object, send a body over the bound or write to a
// sandbox that does not exist; each refusal says what to do.
func TestAppendEventsHostile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	sb := createSandbox(t, addr, wire.CreateSandbox{Image: localImage})
	post := func(sandbox string, body []byte) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/sandboxes/"+sandbox+"/events", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	events := func(evs ...wire.Event) []byte {
		b, _ := json.Marshal(wire.AppendEvents{Events: evs})
		return b
	}
	data, _ := json.Marshal(wire.AgentMessageData{Run: "forged", Role: "note", Text: "from 1970"})
	other, _ := json.Marshal(wire.AgentMessageData{Run: "forged", Role: "note", Text: "refused"})
	old := wire.Event{Type: wire.EventAgentMessage, Time: time.Unix(0, 0), Seq: 1, Data: data}
	for _, tc := range []struct {
		name    string
		sandbox string
		body    []byte
		status  int
		want    string
	}{
		{"long session", sb.ID, events(wire.Event{Type: wire.EventAgentMessage, Session: strings.Repeat("s", 10000), Data: other}), 400, "longer than 128 bytes"},
		{"long command", sb.ID, events(wire.Event{Type: wire.EventAgentMessage, Command: strings.Repeat("c", 129), Data: other}), 400, "longer than 128 bytes"},
		{"data not an object", sb.ID, events(wire.Event{Type: wire.EventAgentMessage, Data: json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)}), 400, "not a JSON object"},
		{"huge body", sb.ID, events(wire.Event{Type: wire.EventAgentMessage, Data: json.RawMessage(`{"text": "` + strings.Repeat("x", 9<<20) + `"}`)}), 413, ""},
		{"wrong sandbox", "sb_nosuchsandbox", events(old), 404, ""},
		{"a past time", sb.ID, events(old), 200, ""},
	} {
		status, body := post(tc.sandbox, tc.body)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, status, body, tc.status, tc.want)
		}
	}
	c, err := client.New(addr, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "the forged event in the log", 30*time.Second, func() bool {
		evs, err := fetchEvents(t.Context(), c, sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Type == wire.EventAgentMessage && strings.Contains(string(e.Data), "from 1970") {
				if e.Time.Before(sb.CreatedAt.Add(-time.Second)) {
					t.Errorf("the event kept its forged time %v, before the sandbox was created (%v)", e.Time, sb.CreatedAt)
				}
				if e.Seq == 1 && evs[0].Type != wire.EventAgentMessage {
					t.Errorf("forged fields kept: %+v", e)
				}
				return true
			}
			if strings.Contains(string(e.Data), "refused") {
				t.Errorf("a refused event is in the log")
			}
		}
		return false
	})
}
