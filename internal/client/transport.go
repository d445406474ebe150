package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Transport is an http.RoundTripper for one limbs endpoint that runs each
// request on the caller's goroutine: it writes the request and reads the
// answer on a kept-alive connection itself. net/http's Transport hands
// both to two goroutines of its own per connection; on a small machine
// every hand-off is a thread wake-up, and together they were a third of a
// command's round trip.
//
// Requests it does not serve that way go to a net/http Transport with the
// same dialer: protocol upgrades (WebSocket attach) and request bodies of
// unknown or large size (file uploads), where the server may answer before
// the body is sent.
type Transport struct {
	dial     func(ctx context.Context) (net.Conn, error)
	fallback *http.Transport

	mu   sync.Mutex
	idle []*conn
}

const (
	// maxDirectBody is the largest request body sent on the caller's
	// goroutine; JSON requests are far smaller.
	maxDirectBody = 1 << 20
	maxIdleConns  = 64
	// idleTimeout drops connections unused this long.
	idleTimeout = 90 * time.Second
)

// NewTransport returns a Transport that opens connections with dial.
func NewTransport(dial func(ctx context.Context) (net.Conn, error)) *Transport {
	return &Transport{
		dial: dial,
		fallback: &http.Transport{
			DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     idleTimeout,
		},
	}
}

// conn is one kept-alive connection.
type conn struct {
	nc   net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time // when it went idle
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !direct(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	c, err := t.get(ctx)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	// A cancelled context unblocks the reads and writes below, and any
	// later read of the body, by putting the deadline in the past.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.nc.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	if err := req.Write(c.bw); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		return fail(err)
	}
	b := &body{rc: resp.Body, t: t, c: c, stop: stop, keep: !resp.Close && !req.Close}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// direct reports whether req is served on the caller's goroutine.
func direct(req *http.Request) bool {
	if req.Header.Get("Upgrade") != "" || req.URL.Scheme != "http" {
		return false
	}
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	return req.ContentLength >= 0 && req.ContentLength <= maxDirectBody
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// get returns a live idle connection or dials a new one.
func (t *Transport) get(ctx context.Context) (*conn, error) {
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		c := t.idle[n-1]
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if time.Since(c.used) < idleTimeout && alive(c.nc) {
			return c, nil
		}
		c.nc.Close()
	}
	nc, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), bw: bufio.NewWriterSize(nc, 8<<10)}, nil
}

// alive reports whether an idle connection is still open: the server has
// neither closed it nor sent anything unasked. One non-blocking peek, so a
// request is never written into a connection the server already left.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		ok = errors.Is(rerr, unix.EAGAIN)
		return true
	})
	return err == nil && ok
}

func (t *Transport) put(c *conn) {
	c.used = time.Now()
	t.mu.Lock()
	if len(t.idle) < maxIdleConns {
		t.idle = append(t.idle, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.nc.Close()
	}
}

// CloseIdleConnections closes the connections not in use.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
	t.fallback.CloseIdleConnections()
}

// body hands the connection back once the answer has been read to its end.
type body struct {
	rc   io.ReadCloser
	t    *Transport
	c    *conn
	stop func() bool
	keep bool

	mu   sync.Mutex
	done bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
	}
	return n, err
}

// Close keeps the connection when the unread rest of the answer has
// already arrived (a JSON decoder stops before the final newline); it never
// waits for more (a stream such as a watch may never end).
func (b *body) Close() error {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if !done {
		_ = b.c.nc.SetReadDeadline(time.Unix(1, 0))
		_, err := io.CopyN(io.Discard, b.rc, 4<<10)
		eof := err == io.EOF
		if eof {
			_ = b.c.nc.SetReadDeadline(time.Time{})
		}
		b.finish(eof)
	}
	// Closing the net/http body reads it to its end: with the connection
	// gone (not kept) that fails at once, which is no error to the caller.
	_ = b.rc.Close()
	return nil
}

func (b *body) finish(eof bool) {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	b.done = true
	b.mu.Unlock()
	// stop is false when the context fired: the deadline is in the past.
	if b.stop() && eof && b.keep {
		b.t.put(b.c)
		return
	}
	b.c.nc.Close()
}
