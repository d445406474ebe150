package main

import (
	"fmt"
	"net/http"

	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/endpoint"
	"github.com/limbs-dev/limbs/internal/metrics"
	"github.com/limbs-dev/limbs/internal/wire"
)

// withMetrics serves GET /metrics (Prometheus) beside h and times every
// other request of h by route. The scrape needs the API's token unless
// public is set; it answers what any client with the token can already
// list (sandbox counts, no ids but those of the event-log lag series).
// It returns the Metrics, which the Plane's followers report into (commands,
// output, the event log's lag).
func withMetrics(h http.Handler, srv *control.Server, token string, public bool) (http.Handler, *metrics.Metrics) {
	m := metrics.New(metrics.Options{State: func() metrics.State {
		st := srv.Stats()
		return metrics.State{Sandboxes: st.Sandboxes, PoolReady: st.PoolReady, PoolWant: st.PoolWant}
	}})
	// Commands and output are counted from what the followers of limbsd's
	// journals ingest, once each, whoever waited for them.
	srv.ObserveEvents(m)
	api := m.Instrument(h)
	scrape := m.Handler()
	tok := endpoint.NewToken(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			api.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			wire.WriteError(w, fmt.Errorf("/metrics takes GET: %w", wire.ErrBadRequest))
			return
		}
		if !public && !tok.Check(r) {
			wire.WriteError(w, fmt.Errorf("/metrics needs limbs serve's token: send Authorization: Bearer TOKEN (Prometheus: authorization.credentials_file), or start limbs serve with --metrics-public: %w", wire.ErrUnauthorized))
			return
		}
		scrape.ServeHTTP(w, r)
	}), m
}
