package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/dashboard"
)

// loggedIn starts the dashboard in front of api and returns a client
// logged in to it, with its CSRF token.
func loggedIn(t *testing.T, api http.Handler) (ts *httptest.Server, c *http.Client, csrf string) {
	t.Helper()
	const token = "attack-test-token-0123456789"
	h, err := dashboard.New(dashboard.Options{Token: token, API: api})
	if err != nil {
		t.Fatal(err)
	}
	ts = httptest.NewServer(h)
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	c = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("POST", ts.URL+"/login", strings.NewReader("token="+url.QueryEscape(token)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", ts.URL)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %s", resp.Status)
	}
	resp, err = c.Get(ts.URL + "/ui/session")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		CSRF string `json:"csrf"`
	}
	json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if s.CSRF == "" {
		t.Fatal("no CSRF token")
	}
	return ts, c, s.CSRF
}

// TestDashboardAPIAnswersNotCached: what the API answers a browser with
// the session cookie (sandboxes, events, outputs) is not stored in the
// browser's cache, nor sniffed into HTML.
func TestDashboardAPIAnswersNotCached(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"sandboxes":[]}`)
	})
	ts, c, _ := loggedIn(t, api)
	req, _ := http.NewRequest("GET", ts.URL+"/v1/sandboxes", nil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/sandboxes with the cookie: %s", resp.Status)
	}
	for k, want := range map[string]string{"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
}

// TestDashboardLogoutEndsStreams: a logout ends what its cookie opened
// and still runs (an event stream, a terminal), not only what comes
// after it.
func TestDashboardLogoutEndsStreams(t *testing.T) {
	started := make(chan struct{})
	ended := make(chan struct{})
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(started)
		select {
		case <-r.Context().Done():
			close(ended)
		case <-time.After(time.Minute):
		}
	})
	ts, c, csrf := loggedIn(t, api)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/events", nil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-started

	req, _ = http.NewRequest("POST", ts.URL+"/logout", nil)
	req.Header.Set("Origin", ts.URL)
	req.Header.Set(dashboard.CSRFHeader, csrf)
	lo, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lo.Body.Close()
	if lo.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %s", lo.Status)
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the event stream the cookie opened still runs after the logout")
	}
}

// TestDashboardLoginGuessesInTurn: wrong tokens sent in parallel pause
// one after the other, so that a guess costs the pause however many are
// sent at once.
func TestDashboardLoginGuessesInTurn(t *testing.T) {
	var in, most atomic.Int32
	restore := dashboard.SetPauseWrongLogin(func() {
		n := in.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(50 * time.Millisecond) // let the others arrive
		in.Add(-1)
	})
	t.Cleanup(restore)
	h, err := dashboard.New(dashboard.Options{Token: "the-right-token-0123456789", API: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", ts.URL+"/login", strings.NewReader("token=guess"+string(rune('a'+i))))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", ts.URL)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("a wrong token: %s", resp.Status)
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Errorf("%d wrong logins paused at once, want 1 at a time", m)
	}
}

// TestDashboardAPIAnswersInert: an answer limbsd wrote (a sandbox's
// file, a command's output) that a person opens in a tab cannot run
// script in the dashboard's origin, nor set its cookies; and the cookie
// opens no WebSocket but a terminal's.
func TestDashboardAPIAnswersInert(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What a hostile limbsd answers, passed on by the API's proxy.
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Set-Cookie", "limbs_dashboard=fixed; Path=/")
		w.Header().Set("Content-Security-Policy", "script-src *")
		w.Header().Set("Cache-Control", "public, max-age=86400")
		io.WriteString(w, `<script>fetch('/ui/session')</script>`)
	})
	ts, c, _ := loggedIn(t, api)
	req, _ := http.NewRequest("GET", ts.URL+"/v1/sandboxes/x/files?path=/report.html", nil)
	req.Header.Set("Sec-Fetch-Site", "none") // typed in the address bar
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Values("Set-Cookie"); len(got) != 0 {
		t.Errorf("the sandbox set a cookie on the dashboard's origin: %q", got)
	}
	if got := resp.Header.Values("Content-Security-Policy"); len(got) != 1 || !strings.Contains(got[0], "sandbox") || strings.Contains(got[0], "script-src") {
		t.Errorf("Content-Security-Policy %q: want one, with sandbox and no script-src", got)
	}
	if got := resp.Header.Values("Cache-Control"); len(got) != 1 || got[0] != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}

	req, _ = http.NewRequest("GET", ts.URL+"/v1/sandboxes/x/files/watch", nil)
	for k, v := range map[string]string{"Origin": ts.URL, "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="} {
		req.Header.Set(k, v)
	}
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a same-origin WebSocket to a proxied route with the cookie: %s, want 403", resp.Status)
	}
}
