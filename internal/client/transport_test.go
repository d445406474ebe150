package client

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"
)

// serve runs h on a Unix socket and returns a Transport that dials it and
// a counter of the connections the server accepted.
func serve(t *testing.T, h http.Handler) (*Transport, *atomic.Int64) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	tr := NewTransport(dialUnix(sock))
	t.Cleanup(tr.CloseIdleConnections)
	return tr, &conns
}

// dialUnix is a Transport's dial function for the socket sock.
func dialUnix(sock string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
}

func get(t *testing.T, c *http.Client, method, url string, body io.Reader) string {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTransportKeepsOneConnection(t *testing.T) {
	tr, conns := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}))
	c := &http.Client{Transport: tr}
	for i := range 50 {
		body := fmt.Sprintf(`{"n":%d}`, i)
		if got, want := get(t, c, "POST", "http://limbs/v1/x", strings.NewReader(body)), "POST /v1/x "+body; got != want {
			t.Fatalf("answer %q, want %q", got, want)
		}
		if got := get(t, c, "GET", "http://limbs/v1/y", nil); got != "GET /v1/y " {
			t.Fatalf("answer %q", got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("100 sequential requests used %d connections, want 1", n)
	}
}

// A body closed before its end (a JSON decoder stops before the final
// newline) still gives the connection back when the rest has arrived.
func TestTransportKeepsConnectionAfterEarlyClose(t *testing.T) {
	tr, conns := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "{\"ok\":true}\n")
	}))
	c := &http.Client{Transport: tr}
	for range 10 {
		resp, err := c.Get("http://limbs/v1/x")
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("used %d connections, want 1", n)
	}
}

// A server that drops kept-alive connections without saying so: the next
// request must go out on a new connection, never into the dead one.
func TestTransportServerDroppedIdleConnection(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var served atomic.Int64
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			// One request per connection, then hang up, with no
			// "Connection: close" to warn the client.
			req, err := http.ReadRequest(bufio.NewReader(nc))
			if err == nil {
				io.Copy(io.Discard, req.Body)
				served.Add(1)
				io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
			nc.Close()
		}
	}()
	tr := NewTransport(dialUnix(sock))
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for i := range 5 {
		if got := get(t, c, "POST", "http://limbs/v1/exec", strings.NewReader(`{}`)); got != "ok" {
			t.Fatalf("request %d: %q", i, got)
		}
		// Let the hang-up arrive before the next request.
		testbin.Eventually(t, "the server's hang-up reaches the idle connection", 5*time.Second, func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return len(tr.idle) == 0 || !alive(tr.idle[0].nc)
		})
	}
	if n := served.Load(); n != 5 {
		t.Fatalf("the server saw %d requests, want 5 (one each, none lost or repeated)", n)
	}
}

// A stream that never ends: closing it returns at once, and so does a
// read whose context is cancelled.
func TestTransportStreamCloseAndCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	tr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: ready\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	c := &http.Client{Transport: tr}
	for _, how := range []string{"close", "cancel"} {
		t.Run(how, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://limbs/v1/files/watch", nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || line != "data: ready\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			done := make(chan error, 1)
			go func() {
				if how == "close" {
					done <- resp.Body.Close()
					return
				}
				_, err := io.Copy(io.Discard, resp.Body)
				done <- err
			}()
			if how == "cancel" {
				cancel()
			}
			select {
			case err := <-done:
				if how == "cancel" && err == nil {
					t.Fatalf("read after cancel ended with %v, want an error", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s of an endless stream did not return", how)
			}
		})
	}
}

// Bodies of unknown length go through net/http's transport, which sends
// them while it reads the answer.
func TestTransportStreamsUnknownLengthBodies(t *testing.T) {
	tr, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
	}))
	c := &http.Client{Transport: tr}
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 64<<10)
		for range 64 {
			pw.Write(buf)
		}
		pw.Close()
	}()
	if got := get(t, c, "PUT", "http://limbs/v1/files?path=x", pr); got != fmt.Sprint(64*64<<10) {
		t.Fatalf("server read %s bytes, want %d", got, 64*64<<10)
	}
}
