package runtime_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/runtime"
	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/wire"
)

// FuzzRequestBodies feeds arbitrary bodies and query strings to the routes
// that decode client input. No session exists, so no shell ever starts: a
// valid request ends in 404, anything else must be a 4xx in the documented
// error shape, never a 500 or a panic.
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{
		`{"command":"true"}`, `{"command":"true","timeout":1e309}`, `{"yield_after":-0}`,
		`{"text":"\u0000","keys":["C-c"]}`, `{"cols":1e3,"rows":1}`, `[]`, `null`, `{"command":"x"}{}`, "\xff",
	} {
		f.Add(s, "from=0&to=1")
	}
	srv := runtime.New(runtime.Options{Token: testToken, Manager: fuzzManager(f)})
	f.Fuzz(func(t *testing.T, body, query string) {
		for _, route := range []string{"exec", "wait", "input", "interrupt", "resize", "restart"} {
			check(t, srv, "POST", "/v1/sessions/none/"+route, "", body)
		}
		check(t, srv, "GET", "/v1/sessions/none/output", query, "")
	})
}

func check(t *testing.T, srv *runtime.Server, method, path, query, body string) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	// Set as is: an arbitrary query would not survive URL parsing.
	req.URL.RawQuery = query
	req.Header.Set("Authorization", "Bearer "+testToken)
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	if w.Code < 400 || w.Code >= 500 {
		t.Fatalf("%s %s %q: status %d, want a 4xx", method, path, body, w.Code)
	}
	var e wire.Error
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("%s %s %q: body %q is not the error shape", method, path, body, w.Body.Bytes())
	}
}

func fuzzManager(f *testing.F) *shell.Manager {
	m, err := shell.NewManager(f.Context(), shell.Options{StateDir: f.TempDir(), Workdir: f.TempDir()})
	if err != nil {
		f.Fatalf("shell.NewManager: %v", err)
	}
	f.Cleanup(func() { m.Close() })
	return m
}
