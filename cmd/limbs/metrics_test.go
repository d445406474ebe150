package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/metrics"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// scrape GETs /metrics over HTTP with the token (if any) and parses it
// with Prometheus' text parser; it returns nil and the status when the
// answer is not 200.
func scrape(t *testing.T, base, token string) (map[string]*dto.MetricFamily, int) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode
	}
	fams, err := metrics.Parse(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams, resp.StatusCode
}

// outputBytes adds up the sizes of the output events of a sandbox's log.
func outputBytes(t *testing.T, c *client.Client, sb string) int64 {
	t.Helper()
	l, err := c.Sandboxes().Events(t.Context(), sb, client.EventsQuery{Types: "output"})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, ev := range l.Events {
		var d wire.OutputData
		_ = json.Unmarshal(ev.Data, &d)
		n += d.Size
	}
	return n
}

// TestServeMetrics: limbs serve's /metrics, scraped over real HTTP with
// its token, counts a sandbox, the commands run in it through the
// control plane (real bash), their output, and the API's requests by
// route, never by path.
func TestServeMetrics(t *testing.T) {
	ts, srv := inProcessServe(t, "", func(srv *control.Server) http.Handler { h, _ := withMetrics(srv, srv, "tok", false); return h })

	ctx := t.Context()
	c, err := client.New(ts.URL, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes().Create(ctx, wire.CreateSandbox{Name: "met"})
	if err != nil {
		t.Fatal(err)
	}
	sc := c.Sandbox(sb.ID)
	s, err := sc.CreateSession(ctx, wire.CreateSession{Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	var cmdBytes int64
	for _, cmd := range []string{"printf 'hello metrics\\n'", "false", "echo two; echo lines"} {
		r, err := sc.Exec(ctx, s.ID, wire.Exec{Command: cmd})
		if err != nil || r.Status != wire.StatusExited {
			t.Fatalf("exec %q: %+v, %v", cmd, r, err)
		}
		cmdBytes += r.OffsetEnd - r.OffsetStart
	}
	// Commands and output are counted as the follower of limbsd's journal
	// ingests them, a moment after the answers: once all three ended are
	// in the log, the output counted is the output events' bytes.
	var outBytes int64
	testbin.Eventually(t, "the three commands counted from the event log", time.Minute, func() bool {
		fams, _ := scrape(t, ts.URL, "tok")
		n, _ := metrics.Value(fams, "limbs_commands_total", "status", "exited")
		if n < 3 {
			return false
		}
		outBytes = outputBytes(t, c, sb.ID)
		got, _ := metrics.Value(fams, "limbs_output_bytes_total")
		return got == float64(outBytes)
	})

	if _, code := scrape(t, ts.URL, ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d, want 401", code)
	}
	fams, code := scrape(t, ts.URL, "tok")
	if code != http.StatusOK {
		t.Fatalf("/metrics with the token: %d", code)
	}
	// The prompt after the last command may have been ingested since.
	testbin.Eventually(t, "the output counted is the log's", time.Minute, func() bool {
		outBytes = outputBytes(t, c, sb.ID)
		fams, _ = scrape(t, ts.URL, "tok")
		got, _ := metrics.Value(fams, "limbs_output_bytes_total")
		return got == float64(outBytes)
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"limbs_sandboxes", []string{"status", "running"}, 1},
		{"limbs_commands_total", []string{"status", "exited"}, 3},
		{"limbs_command_duration_seconds", []string{"status", "exited"}, 3},
		{"limbs_output_bytes_total", nil, float64(outBytes)},
		{"limbs_http_request_duration_seconds", []string{"route", "POST /v1/sandboxes", "code", "201"}, 1},
		{"limbs_http_request_duration_seconds", []string{"route", "/v1/sandboxes/{id}/sessions/", "method", "POST", "code", "200"}, 3},
	} {
		if got, ok := metrics.Value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present: %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if outBytes < cmdBytes || cmdBytes < int64(len("hello metrics\n")) {
		t.Errorf("the output events add up to %d bytes, the commands' output ranges to %d", outBytes, cmdBytes)
	}
	if got, ok := metrics.Value(fams, "limbs_event_log_lag_events", "sandbox", sb.ID); !ok || got != 0 {
		t.Errorf("the event log's lag of %s = %v (present: %v), want 0", sb.ID, got, ok)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && strings.Contains(l.GetValue(), sb.ID) {
					t.Errorf("a route label holds a raw path: %q", l.GetValue())
				}
			}
		}
	}

	t.Run("public", func(t *testing.T) {
		h, _ := withMetrics(srv, srv, "tok", true)
		ts := httptest.NewServer(h)
		defer ts.Close()
		if _, code := scrape(t, ts.URL, ""); code != http.StatusOK {
			t.Errorf("/metrics with --metrics-public and no token: %d, want 200", code)
		}
	})
}
