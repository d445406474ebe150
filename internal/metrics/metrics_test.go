package metrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Scrape GETs url over HTTP and parses the answer with Prometheus' text
// parser.
func Scrape(t *testing.T, url string, header http.Header) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	fams, err := Parse(resp.Body)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return fams
}

func TestMetrics(t *testing.T) {
	m := New(Options{State: func() State {
		return State{
			Sandboxes: map[string]int{wire.SandboxRunning: 3, wire.SandboxFailed: 1, "weird": 2},
			PoolReady: map[string]int{"limbs/base:latest": 1},
			PoolWant:  map[string]int{"limbs/base:latest": 4},
		}
	}})
	// A command's end reported twice (an ingest retried): counted once.
	m.Output(50)
	m.Output(30)
	m.Output(20)
	m.CommandFinished("sb_a", "c_1", wire.StatusExited, 1500*time.Millisecond)
	m.CommandFinished("sb_a", "c_1", wire.StatusExited, 1500*time.Millisecond)
	// The same command id in another sandbox is another command.
	m.Output(10)
	m.CommandFinished("sb_b", "c_1", wire.StatusTimeout, 30*time.Second)
	// A hostile limbsd's status names no new series.
	m.Output(1)
	m.CommandFinished("sb_b", "c_2", "pwned\"}", 0)
	m.EventLogLag("sb_a", 7, 2*time.Second)
	m.EventLogLag("sb_gone", 1, 0)
	m.ForgetSandbox("sb_gone")

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) })
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("{}")) })
	api := httptest.NewServer(m.Instrument(mux))
	defer api.Close()
	for i := range 20 {
		resp, err := http.Get(fmt.Sprintf("%s/v1/sandboxes/sb_%d", api.URL, i))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, method := range []string{http.MethodPost, "BREW"} {
		req, _ := http.NewRequest(method, api.URL+"/v1/sandboxes", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	scrape := httptest.NewServer(m.Handler())
	defer scrape.Close()
	fams := Scrape(t, scrape.URL, http.Header{})

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"limbs_sandboxes", []string{"status", "running"}, 3},
		{"limbs_sandboxes", []string{"status", "failed"}, 1},
		{"limbs_sandboxes", []string{"status", "stopped"}, 0},
		{"limbs_sandboxes", []string{"status", "other"}, 2},
		{"limbs_pool_ready", []string{"image", "limbs/base:latest"}, 1},
		{"limbs_pool_target", []string{"image", "limbs/base:latest"}, 4},
		{"limbs_commands_total", []string{"status", "exited"}, 1},
		{"limbs_commands_total", []string{"status", "timeout"}, 1},
		{"limbs_commands_total", []string{"status", "interrupted"}, 0},
		{"limbs_commands_total", []string{"status", "other"}, 1},
		{"limbs_command_duration_seconds", []string{"status", "exited"}, 1},
		{"limbs_output_bytes_total", nil, 100 + 10 + 1},
		{"limbs_event_log_lag_events", []string{"sandbox", "sb_a"}, 7},
		{"limbs_event_log_lag_seconds", []string{"sandbox", "sb_a"}, 2},
		{"limbs_http_request_duration_seconds", []string{"route", "GET /v1/sandboxes/{id}", "method", "GET", "code", "404"}, 20},
		{"limbs_http_request_duration_seconds", []string{"route", "POST /v1/sandboxes", "method", "POST", "code", "200"}, 1},
		// A method no route takes: the mux matched nothing.
		{"limbs_http_request_duration_seconds", []string{"route", "unmatched", "method", "OTHER", "code", "405"}, 1},
	} {
		if got, ok := Value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present: %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := Value(fams, "limbs_event_log_lag_events", "sandbox", "sb_gone"); ok {
		t.Error("a forgotten sandbox's lag is still reported")
	}
	if n := len(fams["limbs_http_request_duration_seconds"].GetMetric()); n != 3 {
		t.Errorf("%d request series, want 3: one per route, method and code, never per path", n)
	}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if strings.Contains(l.GetValue(), "pwned") || strings.Contains(l.GetValue(), "BREW") {
					t.Errorf("%s has a label value chosen by a client or a sandbox: %s=%q", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
}
