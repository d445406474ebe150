package metrics

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"time"
)

// methods are the label values of a request's method; any other is
// "OTHER" (a client chooses the method, and must not choose series).
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// Instrument times every request h serves, labelled by the route pattern
// that the http.ServeMux inside h matched (r.Pattern, which the mux sets
// on the request it is handed), never by the raw path: "unmatched" when
// no mux matched (a request refused before routing).
func (m *Metrics) Instrument(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			method := r.Method
			if !methods[method] {
				method = "OTHER"
			}
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(sw, r)
	})
}

// statusWriter keeps the status code of an answer. Flush and Hijack are
// passed on (streams and WebSockets go through it), and Unwrap lets
// http.ResponseController reach the connection's deadlines.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 || code == http.StatusSwitchingProtocols {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.code == 0 {
		w.code = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
