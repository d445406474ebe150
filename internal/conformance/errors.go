package conformance

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

func testErrors(t *testing.T, c *client.Client) {
	t.Parallel()
	id := newSession(t, c)
	exec := "/sessions/" + url.PathEscape(id) + "/exec"
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		status       int
		code         string
	}{
		{"MalformedJSON", "POST", exec, `{"command": "echo hi"`, 400, "bad_request"},
		{"UnknownField", "POST", exec, `{"command": "echo hi", "timeuot": 5}`, 400, "bad_request"},
		{"WrongType", "POST", exec, `{"command": 42}`, 400, "bad_request"},
		{"MissingCommand", "POST", exec, `{}`, 400, "bad_request"},
		{"TrailingData", "POST", exec, `{"command": "true"} {}`, 400, "bad_request"},
		{"NegativeTimeout", "POST", exec, `{"command": "true", "timeout": -1}`, 400, "bad_request"},
		{"NulInCommand", "POST", exec, `{"command": "echo a\u0000b"}`, 400, "bad_request"},
		{"CreateUnknownField", "POST", "/sessions", `{"nmae": "x"}`, 400, "bad_request"},
		{"MissingSessionGet", "GET", "/sessions/conformance-no-such-session", "", 404, "not_found"},
		{"MissingSessionExec", "POST", "/sessions/conformance-no-such-session/exec", `{"command": "true"}`, 404, "not_found"},
		{"MissingSessionDelete", "DELETE", "/sessions/conformance-no-such-session", "", 404, "not_found"},
		{"UnknownRoute", "GET", "/no-such-route", "", 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, e := call(t, c, tc.method, tc.path, tc.body, true)
			if status != tc.status || e.Error.Code != tc.code {
				t.Errorf("%s %s %s: %d %q, want %d %q", tc.method, tc.path, tc.body, status, e.Error.Code, tc.status, tc.code)
			}
			if e.Error.Message == "" {
				t.Errorf("error without a message")
			}
		})
	}
	t.Run("NoToken", func(t *testing.T) {
		status, e := call(t, c, "GET", "/sessions", "", false)
		if status != 401 || e.Error.Code != "unauthorized" {
			t.Errorf("GET /sessions without a token: %d %q, want 401 unauthorized", status, e.Error.Code)
		}
		if !strings.Contains(e.Error.Message, "Authorization") {
			t.Errorf("401 message %q does not say how to pass the token", e.Error.Message)
		}
	})
	t.Run("HealthNeedsNoToken", func(t *testing.T) {
		if strings.Contains(c.Base(), "/sandboxes/") {
			t.Skip("through the control plane health is per daemon, not per sandbox")
		}
		status, _ := call(t, c, "GET", "/health", "", false)
		if status != 200 {
			t.Errorf("GET /health without a token: %d, want 200", status)
		}
	})
}

// call sends a raw request and returns the status and the decoded error
// body (zero when the request succeeded).
func call(t *testing.T, c *client.Client, method, path, body string, auth bool) (int, wire.Error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, c.Base()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.Token())
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e wire.Error
	if resp.StatusCode/100 != 2 {
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s %s: error with Content-Type %q, want application/json", method, path, ct)
		}
		if err := json.Unmarshal(b, &e); err != nil {
			t.Errorf("%s %s: error body %q is not the documented JSON shape: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, e
}

func testParallelSessions(t *testing.T, c *client.Client) {
	if testing.Short() {
		t.Skip("-short: skipping 50 parallel sessions")
	}
	t.Parallel()
	const n, lines = 50, 200
	ids := make([]string, n)
	for i := range ids {
		ids[i] = newSession(t, c)
	}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			marker := fmt.Sprintf("marker-%02d-%d", i, rnd())
			r, err := c.Exec(t.Context(), id, wire.Exec{
				Command:    fmt.Sprintf("for i in $(seq 1 %d); do echo %s-$i; done", lines, marker),
				YieldAfter: ptr(0.0),
				MaxOutput:  ptr(1 << 20),
			})
			if err != nil {
				t.Errorf("session %d: %v", i, err)
				return
			}
			var want strings.Builder
			for j := 1; j <= lines; j++ {
				fmt.Fprintf(&want, "%s-%d\n", marker, j)
			}
			if r.Status != wire.StatusExited || r.Output != want.String() {
				t.Errorf("session %d: status %q, output of %d bytes differs from its own %d lines (starts %.80q)", i, r.Status, len(r.Output), lines, r.Output)
			}
		})
	}
	wg.Wait()
}

// isCode reports whether err is an API error with the given wire code.
func isCode(err error, code string) bool {
	var re *wire.RemoteError
	return errors.As(err, &re) && re.Code == code
}

func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

func rnd() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}

func deleteQuietly(c *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.DeleteSession(ctx, id)
}
