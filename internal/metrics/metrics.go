// Package metrics is the Prometheus instrumentation of `limbs serve`:
// sandboxes by status and the warm pool (read from the control plane at
// each scrape), commands by status with a duration histogram, bytes of
// command output, the event log's lag per sandbox, and API request
// durations by route.
//
// Every label value is one of a bounded set: statuses outside the known
// ones are "other", methods outside the standard ones are "OTHER", routes
// are the mux's patterns (never a raw path), and per-sandbox series are
// dropped with ForgetSandbox. A sandbox's limbsd, which answers the
// results counted here, is not trusted to name anything: it can move
// counters, never make new series.
//
// It must never block a request: every method is a few atomic updates
// and at most one short lock.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/limbs-dev/limbs/internal/wire"
)

// State is what the control plane reports at each scrape.
type State struct {
	// Sandboxes counts the sandboxes clients hold, by status.
	Sandboxes map[string]int
	// PoolReady counts the warm pool's sandboxes ready to be claimed, and
	// PoolWant the number asked for, by image.
	PoolReady map[string]int
	PoolWant  map[string]int
}

// Options configure Metrics.
type Options struct {
	// State, when set, is called at each scrape.
	State func() State
}

// Metrics holds limbs serve's collectors in a registry of its own (with
// the Go runtime's and the process's).
type Metrics struct {
	reg      *prometheus.Registry
	commands *prometheus.CounterVec
	duration *prometheus.HistogramVec
	output   prometheus.Counter
	lagSeq   *prometheus.GaugeVec
	lagSec   *prometheus.GaugeVec
	requests *prometheus.HistogramVec

	mu   sync.Mutex // guards seen
	seen commandSet
}

// commandStatuses are the label values of a command's status.
var commandStatuses = map[string]bool{
	wire.StatusExited: true, wire.StatusTimeout: true, wire.StatusInterrupted: true,
}

// sandboxStatuses are always reported, at 0 when no sandbox has them, so
// that a dashboard's series do not come and go.
var sandboxStatuses = []string{wire.SandboxCreating, wire.SandboxRunning, wire.SandboxStopped, wire.SandboxFailed}

// New returns the metrics of one limbs serve.
func New(o Options) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limbs_commands_total",
			Help: "Commands that ended, by status (exited, timeout, interrupted, other).",
		}, []string{"status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limbs_command_duration_seconds",
			Help:    "How long commands ran, from start to end, by status.",
			Buckets: []float64{0.005, 0.025, 0.1, 0.5, 1, 5, 30, 120, 600, 3600},
		}, []string{"status"}),
		output: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "limbs_output_bytes_total",
			Help: "Bytes of terminal output of the sandboxes' sessions, as limbs serve's event log records them.",
		}),
		lagSeq: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limbs_event_log_lag_events",
			Help: "Events of a sandbox's limbsd journal not yet in limbs serve's log.",
		}, []string{"sandbox"}),
		lagSec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limbs_event_log_lag_seconds",
			Help: "Age of the oldest event of a sandbox's limbsd journal not yet in limbs serve's log (0: caught up).",
		}, []string{"sandbox"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limbs_http_request_duration_seconds",
			Help:    "API requests by route pattern, method and status code, until their answer ended (streams and WebSockets included).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method", "code"}),
		seen: newCommandSet(4096),
	}
	m.reg.MustRegister(m.commands, m.duration, m.output, m.lagSeq, m.lagSec, m.requests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if o.State != nil {
		m.reg.MustRegister(&stateCollector{state: o.State})
	}
	for s := range commandStatuses {
		m.commands.WithLabelValues(s)
	}
	return m
}

// Handler serves the registry in Prometheus' text format (and
// OpenMetrics when asked). It checks no token: the caller decides.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Registry is where the collectors are, for a caller that adds its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// CommandFinished counts a command that ended in sandbox, once per
// (sandbox, command) however many results report its end.
func (m *Metrics) CommandFinished(sandbox, command, status string, took time.Duration) {
	if command != "" {
		m.mu.Lock()
		dup := !m.seen.add(sandbox + "\x00" + command)
		m.mu.Unlock()
		if dup {
			return
		}
	}
	if !commandStatuses[status] {
		status = "other"
	}
	m.commands.WithLabelValues(status).Inc()
	if took >= 0 {
		m.duration.WithLabelValues(status).Observe(took.Seconds())
	}
}

// Output counts n bytes of terminal output.
func (m *Metrics) Output(n int64) {
	if n > 0 {
		m.output.Add(float64(n))
	}
}

// EventLogLag sets how far limbs serve's log of sandbox is behind its
// limbsd's journal: events not yet copied, and the age of the oldest of
// them (0 when caught up). The follower of each sandbox calls it.
func (m *Metrics) EventLogLag(sandbox string, events uint64, age time.Duration) {
	m.lagSeq.WithLabelValues(sandbox).Set(float64(events))
	m.lagSec.WithLabelValues(sandbox).Set(age.Seconds())
}

// ForgetSandbox drops the series of a sandbox that was deleted.
func (m *Metrics) ForgetSandbox(sandbox string) {
	m.lagSeq.DeleteLabelValues(sandbox)
	m.lagSec.DeleteLabelValues(sandbox)
}

// stateCollector reports the control plane's state at scrape time: no
// counter to keep in step with every transition.
type stateCollector struct{ state func() State }

var (
	sandboxesDesc = prometheus.NewDesc("limbs_sandboxes", "Sandboxes clients hold, by status (warm pool ones not yet claimed are not counted).", []string{"status"}, nil)
	poolReadyDesc = prometheus.NewDesc("limbs_pool_ready", "Warm pool sandboxes ready to be claimed, by image.", []string{"image"}, nil)
	poolWantDesc  = prometheus.NewDesc("limbs_pool_target", "Warm pool sandboxes asked for (--pool), by image.", []string{"image"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sandboxesDesc
	ch <- poolReadyDesc
	ch <- poolWantDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.state()
	for _, st := range sandboxStatuses {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(s.Sandboxes[st]), st)
	}
	other := 0
	for st, n := range s.Sandboxes {
		if !isSandboxStatus(st) {
			other += n
		}
	}
	if other > 0 {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(other), "other")
	}
	for image, want := range s.PoolWant {
		ch <- prometheus.MustNewConstMetric(poolWantDesc, prometheus.GaugeValue, float64(want), image)
		ch <- prometheus.MustNewConstMetric(poolReadyDesc, prometheus.GaugeValue, float64(s.PoolReady[image]), image)
	}
}

func isSandboxStatus(s string) bool {
	for _, st := range sandboxStatuses {
		if s == st {
			return true
		}
	}
	return false
}

// commandSet remembers the last n commands seen to end. It is bounded: a
// command forgotten and reported again is counted again.
type commandSet struct {
	ended map[string]bool
	ring  []string
	next  int
}

func newCommandSet(n int) commandSet {
	return commandSet{ended: map[string]bool{}, ring: make([]string, n)}
}

// add marks key ended; false when it was already.
func (s *commandSet) add(key string) bool {
	if s.ended[key] {
		return false
	}
	s.track(key)
	s.ended[key] = true
	return true
}

// track puts key in the ring, evicting the oldest key when it is new.
func (s *commandSet) track(key string) {
	if s.ended[key] {
		return
	}
	if old := s.ring[s.next]; old != "" {
		delete(s.ended, old)
	}
	s.ring[s.next] = key
	s.next = (s.next + 1) % len(s.ring)
}
