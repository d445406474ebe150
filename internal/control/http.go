package control

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Body limits of the control plane's routes (see bodyPolicy).
const (
	// maxControlBody caps the control plane's own JSON bodies (a create
	// with its env).
	maxControlBody = 1 << 20
	// maxSessionBody is limbsd's cap on session request bodies; a larger
	// one is refused here without forwarding it.
	maxSessionBody = 8 << 20
	// maxFilesBody is limbsd's cap on the JSON bodies of the file API
	// (edit with file_text); file and archive uploads have none.
	maxFilesBody = 64 << 20
)

// DefaultBodyTimeout is Options.BodyTimeout's default.
const DefaultBodyTimeout = time.Minute

// HTTPLimits bound what clients can make `limbs serve` hold: connections,
// and how long each may take to send its headers, stay idle between
// requests, or send a body. Streams (answers that take long, WebSockets,
// file and archive uploads) are not cut.
type HTTPLimits struct {
	HeaderTimeout time.Duration // the request line and headers, from the first byte
	IdleTimeout   time.Duration // between two requests on a kept-alive connection
	MaxConns      int           // open connections, WebSockets included; 0: no cap
}

// NewHTTPServer returns the http.Server of a control plane with the
// timeouts of l. It sets no ReadTimeout or WriteTimeout, which would cut
// long answers and uploads: bodies get a deadline of their own
// (Options.BodyTimeout, in ServeHTTP).
func NewHTTPServer(h http.Handler, l HTTPLimits, log *slog.Logger) *http.Server {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.HeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	if log != nil {
		hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	}
	return hs
}

// bodyPolicy returns the most bytes a body may have on r's route (-1: no
// limit) and whether the body is an upload that may take any time.
func bodyPolicy(r *http.Request) (max int64, upload bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/")
	if !ok {
		return maxControlBody, false
	}
	_, sub, _ := strings.Cut(rest, "/")
	switch {
	case (sub == "files" || sub == "files/archive") && r.Method == http.MethodPut:
		return -1, true
	case sub == "files" || strings.HasPrefix(sub, "files/"):
		return maxFilesBody, false
	case sub == "sessions" || strings.HasPrefix(sub, "sessions/"):
		return maxSessionBody, false
	default:
		return maxControlBody, false
	}
}

// guardBody applies the route's body limit and read deadline before
// anything reads the body. It answers the request itself (413, with the
// connection closed so the body is never read) and returns false when the
// body is refused.
func (s *Server) guardBody(w http.ResponseWriter, r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return true
	}
	max, upload := bodyPolicy(r)
	if err := wire.LimitBody(w, r, max); err != nil {
		w.Header().Set("Connection", "close")
		wire.WriteError(w, err)
		return false
	}
	if upload && s.authorized(r) {
		return true // the upload takes what it takes; limbsd writes as it reads
	}
	// A body must arrive within the deadline. It is lifted as soon as the
	// body has been read (net/http then waits on the connection to notice
	// a client leaving, which must not time out during a long answer).
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(s.bodyTimeout())); err != nil {
		return true // not a connection with deadlines (a test recorder)
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
	return true
}

func (s *Server) bodyTimeout() time.Duration {
	if s.opts.BodyTimeout > 0 {
		return s.opts.BodyTimeout
	}
	return DefaultBodyTimeout
}

// deadlineBody lifts the connection's read deadline once the body has
// been read to its end. After any other error the deadline stays: net/http
// may read what is left of the body after the handler, and must not wait
// for it without one.
type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// LimitListener caps ln at n open connections (n <= 0: no cap). A
// connection past the cap is accepted, answered 503 with a body saying
// what to do, and closed at once, so that it neither waits in the kernel's
// backlog nor holds anything.
func LimitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, max: int64(n)}
}

type limitListener struct {
	net.Listener
	max  int64
	open atomic.Int64
}

// overCapBody is what a connection past the cap reads before it is closed.
const overCapBody = `{"error":{"code":"unavailable","message":"limbs serve has its --max-conns connections open; close idle ones, retry later, or restart it with a higher --max-conns"}}` + "\n"

var overCap = fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(overCapBody), overCapBody)

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.WriteString(c, overCap)
			c.Close()
			continue
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
