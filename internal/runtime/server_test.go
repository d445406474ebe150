package runtime_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/runtime"
	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/wire"
)

const testToken = "test-token-0123456789"

// newServer serves a runtime.Server backed by a real manager that has no
// sessions: these tests never start a shell.
func newServer(t *testing.T, opts runtime.Options) *httptest.Server {
	t.Helper()
	if opts.Manager == nil {
		m, err := shell.NewManager(t.Context(), shell.Options{StateDir: t.TempDir(), Workdir: t.TempDir()})
		if err != nil {
			t.Fatalf("shell.NewManager: %v", err)
		}
		t.Cleanup(func() { m.Close() })
		opts.Manager = m
	}
	srv := httptest.NewServer(runtime.New(opts))
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	Status int
	Code   string
}

// do sends one request and returns its status and error code.
func do(t *testing.T, srv *httptest.Server, method, path, auth, body string) (answer, http.Header, wire.Error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e wire.Error
	if resp.StatusCode/100 != 2 {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
		}
		if err := json.Unmarshal(b, &e); err != nil {
			t.Errorf("%s %s: error body %q is not JSON: %v", method, path, b, err)
		}
		if e.Error.Message == "" {
			t.Errorf("%s %s: error without a message: %q", method, path, b)
		}
	}
	return answer{resp.StatusCode, e.Error.Code}, resp.Header, e
}

func TestAuth(t *testing.T) {
	srv := newServer(t, runtime.Options{Token: testToken})
	for _, tc := range []struct {
		name, method, path, auth string
		want                     answer
	}{
		{"health needs no token", "GET", "/v1/health", "", answer{200, ""}},
		{"no header", "GET", "/v1/sessions", "", answer{401, "unauthorized"}},
		{"wrong token", "GET", "/v1/sessions", "Bearer nope", answer{401, "unauthorized"}},
		{"token prefix", "GET", "/v1/sessions", "Bearer " + testToken[:10], answer{401, "unauthorized"}},
		{"basic scheme", "GET", "/v1/sessions", "Basic " + testToken, answer{401, "unauthorized"}},
		{"bare token", "GET", "/v1/sessions", testToken, answer{401, "unauthorized"}},
		{"right token", "GET", "/v1/sessions", "Bearer " + testToken, answer{200, ""}},
		{"files need a token too", "GET", "/v1/files?path=x", "", answer{401, "unauthorized"}},
		{"attach needs a token", "GET", "/v1/sessions/main/attach", "", answer{401, "unauthorized"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, e := do(t, srv, tc.method, tc.path, tc.auth, "")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
			}
			if got.Status == 401 && !strings.Contains(e.Error.Message, "Authorization: Bearer") {
				t.Errorf("401 message %q does not say how to pass the token", e.Error.Message)
			}
		})
	}
}

func TestEmptyTokenRefusesEveryone(t *testing.T) {
	srv := newServer(t, runtime.Options{})
	for _, auth := range []string{"", "Bearer ", "Bearer x"} {
		if got, _, _ := do(t, srv, "GET", "/v1/sessions", auth, ""); got.Status != 401 {
			t.Errorf("Authorization %q on a daemon without a token: %d, want 401", auth, got.Status)
		}
	}
}

// TestRequestErrors covers what the HTTP layer decides: JSON shape, auth,
// routes. The values inside a well-formed request are checked by package
// shell (its TestBadValues), before anything runs.
func TestRequestErrors(t *testing.T) {
	srv := newServer(t, runtime.Options{Token: testToken})
	auth := "Bearer " + testToken
	for _, tc := range []struct {
		name, method, path, body string
		want                     answer
	}{
		{"create malformed JSON", "POST", "/v1/sessions", `{"name":`, answer{400, "bad_request"}},
		{"create unknown field", "POST", "/v1/sessions", `{"nmae":"x"}`, answer{400, "bad_request"}},
		{"create trailing data", "POST", "/v1/sessions", `{} {}`, answer{400, "bad_request"}},
		{"create negative size", "POST", "/v1/sessions", `{"cols":-1}`, answer{400, "bad_request"}},
		{"exec malformed JSON", "POST", "/v1/sessions/x/exec", `{"command":`, answer{400, "bad_request"}},
		{"exec unknown field", "POST", "/v1/sessions/x/exec", `{"command":"true","yield":1}`, answer{400, "bad_request"}},
		{"exec empty body", "POST", "/v1/sessions/x/exec", ``, answer{400, "bad_request"}},
		{"exec missing session", "POST", "/v1/sessions/x/exec", `{"command":"true"}`, answer{404, "not_found"}},
		{"get missing session", "GET", "/v1/sessions/x", ``, answer{404, "not_found"}},
		{"delete missing session", "DELETE", "/v1/sessions/x", ``, answer{404, "not_found"}},
		{"wait empty body, missing session", "POST", "/v1/sessions/x/wait", ``, answer{404, "not_found"}},
		{"interrupt empty body, missing session", "POST", "/v1/sessions/x/interrupt", ``, answer{404, "not_found"}},
		{"screen missing session", "GET", "/v1/sessions/x/screen", ``, answer{404, "not_found"}},
		{"output missing session", "GET", "/v1/sessions/x/output?from=0", ``, answer{404, "not_found"}},
		{"attach missing session", "GET", "/v1/sessions/x/attach", ``, answer{404, "not_found"}},
		{"unknown path", "GET", "/v1/nothing", ``, answer{404, "not_found"}},
		{"unknown version", "GET", "/v2/sessions", ``, answer{404, "not_found"}},
		{"files without a file API", "GET", "/v1/files?path=a", ``, answer{503, "unavailable"}},
		{"method not allowed", "PUT", "/v1/sessions", `{}`, answer{405, "method_not_allowed"}},
		{"method not allowed on exec", "GET", "/v1/sessions/x/exec", ``, answer{405, "method_not_allowed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, _ := do(t, srv, tc.method, tc.path, auth, tc.body)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s %s %s (-want +got):\n%s", tc.method, tc.path, tc.body, diff)
			}
		})
	}
}

func TestMessagesSayWhatExists(t *testing.T) {
	srv := newServer(t, runtime.Options{Token: testToken})
	auth := "Bearer " + testToken
	_, h, e := do(t, srv, "PATCH", "/v1/sessions/x", auth, "")
	if got := h.Get("Allow"); got != "GET, DELETE" {
		t.Errorf("405 Allow header = %q, want %q", got, "GET, DELETE")
	}
	if !strings.Contains(e.Error.Message, "use GET or DELETE") {
		t.Errorf("405 message %q does not list the allowed methods", e.Error.Message)
	}
	_, _, e = do(t, srv, "GET", "/v1/nothing", auth, "")
	if !strings.Contains(e.Error.Message, "POST /v1/sessions/{id}/exec") {
		t.Errorf("404 message %q does not list the routes", e.Error.Message)
	}
	_, _, e = do(t, srv, "GET", "/v1/sessions/nope", auth, "")
	if !strings.Contains(e.Error.Message, `"nope"`) || !strings.Contains(e.Error.Message, "GET /v1/sessions") {
		t.Errorf("missing-session message %q should name the session and say how to list them", e.Error.Message)
	}
}

func TestBodyLimit(t *testing.T) {
	srv := newServer(t, runtime.Options{Token: testToken})
	body := `{"command":"` + strings.Repeat("x", 9<<20) + `"}`
	got, _, _ := do(t, srv, "POST", "/v1/sessions/x/exec", "Bearer "+testToken, body)
	if diff := cmp.Diff(answer{413, "too_large"}, got); diff != "" {
		t.Errorf("9 MiB exec body (-want +got):\n%s", diff)
	}
}

func TestFilesMount(t *testing.T) {
	var seen []string
	files := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := newServer(t, runtime.Options{Token: testToken, Files: files})
	for _, p := range []string{"/v1/files?path=a", "/v1/files/list?path=a", "/v1/files/archive?path=a"} {
		if got, _, _ := do(t, srv, "GET", p, "Bearer "+testToken, ""); got.Status != 204 {
			t.Errorf("GET %s: %d, want the files handler's 204", p, got.Status)
		}
	}
	want := []string{"GET /v1/files", "GET /v1/files/list", "GET /v1/files/archive"}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("requests the files handler saw (-want +got):\n%s", diff)
	}
}

func TestHealth(t *testing.T) {
	srv := newServer(t, runtime.Options{Token: testToken})
	c, err := client.New(srv.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Health(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wire.Health{Status: "ok", Version: wire.Version}, h); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}
}

// The client package cannot import this one (it would drag shells into
// every client), so it repeats the attach constants; they must agree.
func TestAttachConstantsMatchClient(t *testing.T) {
	if int(runtime.CloseFellBehind) != client.CloseFellBehind {
		t.Errorf("close code: runtime %d, client %d", runtime.CloseFellBehind, client.CloseFellBehind)
	}
	if runtime.OffsetHeader != client.OffsetHeader {
		t.Errorf("offset header: runtime %q, client %q", runtime.OffsetHeader, client.OffsetHeader)
	}
}
