// Package client is the Go client of the limbs HTTP API, used by the CLI,
// the control plane's tests and anyone embedding limbs. It speaks to limbsd
// or to `limbs serve` (with a sandbox prefix) over a Unix socket or TCP.
//
// It must never hide an error: every non-2xx answer becomes an error that
// wraps the matching wire sentinel.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Client talks to one limbs API endpoint.
type Client struct {
	base   string // e.g. http://limbs/v1 or http://127.0.0.1:7878/v1/sandboxes/sb_x
	token  string
	dial   func(ctx context.Context) (net.Conn, error)
	socket string
	http   *http.Client
}

// New returns a client for addr, which is unix:///path/to.sock,
// http://host:port or host:port. prefix is inserted after /v1 (for example
// "/sandboxes/sb_123" to reach one sandbox through the control plane).
func New(addr, token, prefix string) (*Client, error) {
	c := &Client{token: token}
	switch {
	case strings.HasPrefix(addr, "unix://"):
		path := strings.TrimPrefix(addr, "unix://")
		c.socket = path
		d := net.Dialer{}
		c.dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
		c.base = "http://limbs/v1" + prefix
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		c.base = strings.TrimRight(addr, "/") + "/v1" + prefix
	case addr != "":
		c.base = "http://" + addr + "/v1" + prefix
	default:
		return nil, fmt.Errorf("no address given: pass unix:///path/to/limbsd.sock or 127.0.0.1:7878: %w", wire.ErrBadRequest)
	}
	if c.dial == nil {
		u, err := url.Parse(c.base)
		if err != nil {
			return nil, fmt.Errorf("address %q: %v: %w", addr, err, wire.ErrBadRequest)
		}
		d := net.Dialer{}
		host := u.Host
		c.dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", host) }
	}
	c.http = &http.Client{Transport: NewTransport(c.dial), CheckRedirect: noRedirect}
	return c, nil
}

// Base is the URL that paths are appended to (ends in /v1 plus the prefix).
func (c *Client) Base() string { return c.base }

// Token is the bearer token the client sends.
func (c *Client) Token() string { return c.token }

// HTTPClient is the underlying client (it knows how to dial a Unix socket).
func (c *Client) HTTPClient() *http.Client { return c.http }

// Do sends a request with auth and returns the response when its status is
// 2xx; otherwise it reads the error body and returns it as an error.
// The caller closes the body.
func (c *Client) Do(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w; is the daemon running and is the address right?", method, path, err)
	}
	if resp.StatusCode/100 == 3 {
		// The API never redirects; a server's mux does for a path it
		// cleans (an id "." or ".."), to another route that the old
		// method must not reach.
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: the server redirected to %q: no resource has this path (an id or name \".\" or \"..\" names nothing; list what exists): %w", method, path, resp.Header.Get("Location"), wire.ErrNotFound)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, wire.ErrorFromBody(resp.StatusCode, b)
	}
	return resp, nil
}

// JSON sends in (if not nil) as JSON and decodes the answer into out (if not nil).
func (c *Client) JSON(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		ct = "application/json"
	}
	resp, err := c.Do(ctx, method, path, body, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	// Reading the answer to its end hands the connection back at once.
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading answer: %w", method, path, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decoding answer: %w", method, path, err)
	}
	return nil
}

// Health calls GET /v1/health.
func (c *Client) Health(ctx context.Context) (wire.Health, error) {
	var h wire.Health
	err := c.JSON(ctx, http.MethodGet, "/health", nil, &h)
	return h, err
}

// noRedirect keeps a redirect's answer: Do reports it.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// NewDialed returns a client of a limbsd reached through dial (a dialer
// that checks what it connects to, see sandbox.DialDaemon).
func NewDialed(dial func(ctx context.Context) (net.Conn, error), token string) *Client {
	c := &Client{token: token, dial: dial, base: "http://limbs/v1"}
	c.http = &http.Client{Transport: NewTransport(c.dial), CheckRedirect: noRedirect}
	return c
}

// NewOver returns a client of a limbsd reached through rt (the control
// plane's own way to a sandbox's daemon, see control.Plane.Dial).
func NewOver(rt http.RoundTripper, token string) *Client {
	return &Client{token: token, base: "http://limbsd/v1", http: &http.Client{Transport: rt, CheckRedirect: noRedirect}}
}
