package dashboard_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/dashboard"
)

// TestDashboardAuth checks the session and CSRF rules over real HTTP,
// without a browser: what reaches the API behind the dashboard, and what
// is refused before it.
func TestDashboardAuth(t *testing.T) {
	const token = "auth-test-token-0123456789"
	type seen struct{ auth, cookie string }
	got := make(chan seen, 16)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("Authorization"), r.Header.Get("Cookie")}
		w.WriteHeader(http.StatusOK)
	})
	h, err := dashboard.New(dashboard.Options{Token: token, API: api})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	do := func(method, path, origin string, hdr map[string]string, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

	// Not logged in: the page redirects to the login, the data is 401.
	if r := do("GET", "/", "", nil, ""); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/login" {
		t.Errorf("GET / without a session: %s %s", r.Status, r.Header.Get("Location"))
	}
	if r := do("GET", "/ui/session", "", nil, ""); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /ui/session without a session: %s", r.Status)
	}
	r := do("GET", "/login", "", nil, "")
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"} {
		if r.Header.Get(k) != want {
			t.Errorf("%s: %q, want %q", k, r.Header.Get(k), want)
		}
	}
	if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("CSP %q", csp)
	}

	// A wrong token, a cross-origin login: no cookie.
	if r := do("POST", "/login", ts.URL, form, "token=wrong"); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("login with a wrong token: %s", r.Status)
	}
	if r := do("POST", "/login", "http://evil.example", form, "token="+url.QueryEscape(token)); r.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin login: %s", r.Status)
	}
	u, _ := url.Parse(ts.URL)
	if len(jar.Cookies(u)) != 0 {
		t.Fatalf("a cookie after refused logins: %v", jar.Cookies(u))
	}

	// The right token: a session cookie that is not the token.
	r = do("POST", "/login", ts.URL, form, "token="+url.QueryEscape(token))
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %s", r.Status)
	}
	set := r.Header.Get("Set-Cookie")
	if !strings.Contains(set, "HttpOnly") || !strings.Contains(set, "SameSite=Strict") || strings.Contains(set, token) {
		t.Errorf("Set-Cookie %q: want HttpOnly, SameSite=Strict and not the token", set)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/ui/session", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sess struct {
		CSRF string `json:"csrf"`
	}
	json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	if sess.CSRF == "" {
		t.Fatal("no CSRF token")
	}

	// Same-origin GET with the cookie: the API gets the bearer token and
	// no cookie.
	if r := do("GET", "/v1/sandboxes", "", map[string]string{"Sec-Fetch-Site": "same-origin"}, ""); r.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/sandboxes with the cookie: %s", r.Status)
	}
	if s := <-got; s.auth != "Bearer "+token || s.cookie != "" {
		t.Errorf("the API got Authorization %q, Cookie %q", s.auth, s.cookie)
	}
	csrf := map[string]string{dashboard.CSRFHeader: sess.CSRF}
	for _, tc := range []struct {
		name   string
		method string
		origin string
		hdr    map[string]string
		want   int
	}{
		{"cross-site GET", "GET", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"POST without Origin", "POST", "", csrf, http.StatusForbidden},
		{"POST from another origin", "POST", "http://evil.example", csrf, http.StatusForbidden},
		{"POST without CSRF", "POST", ts.URL, nil, http.StatusForbidden},
		{"POST with a wrong CSRF", "POST", ts.URL, map[string]string{dashboard.CSRFHeader: "x" + sess.CSRF}, http.StatusForbidden},
		{"DELETE same-origin with CSRF", "DELETE", ts.URL, csrf, http.StatusOK},
		{"WebSocket from another origin", "GET", "http://evil.example", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, http.StatusForbidden},
	} {
		r := do(tc.method, "/v1/sandboxes/x", tc.origin, tc.hdr, "")
		if r.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, r.Status, tc.want)
		}
		if r.StatusCode == http.StatusOK {
			<-got
		}
	}

	// A bearer client is what it was: any Origin, passed through.
	plain := &http.Client{}
	req, _ = http.NewRequest("POST", ts.URL+"/v1/sandboxes", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer whatever")
	req.Header.Set("Origin", "http://evil.example")
	resp, err = plain.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := <-got; s.auth != "Bearer whatever" {
		t.Errorf("a bearer request reached the API with %q", s.auth)
	}

	// Logout needs the CSRF header; afterwards the cookie opens nothing.
	if r := do("POST", "/logout", ts.URL, nil, ""); r.StatusCode != http.StatusForbidden {
		t.Errorf("logout without CSRF: %s", r.Status)
	}
	old := jar.Cookies(u)
	if r := do("POST", "/logout", ts.URL, csrf, ""); r.StatusCode != http.StatusNoContent {
		t.Errorf("logout: %s", r.Status)
	}
	req, _ = http.NewRequest("GET", ts.URL+"/ui/session", nil)
	for _, ck := range old {
		req.AddCookie(ck)
	}
	resp, err = plain.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old cookie after logout: %s, want 401", resp.Status)
	}
}
