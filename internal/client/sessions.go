package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/limbs-dev/limbs/internal/wire"
)

func sessionPath(id string, rest string) string {
	return "/sessions/" + url.PathEscape(id) + rest
}

// CreateSession starts a session (POST /v1/sessions).
func (c *Client) CreateSession(ctx context.Context, req wire.CreateSession) (wire.Session, error) {
	var s wire.Session
	err := c.JSON(ctx, http.MethodPost, "/sessions", req, &s)
	return s, err
}

// ListSessions lists every session, oldest first.
func (c *Client) ListSessions(ctx context.Context) ([]wire.Session, error) {
	var l wire.SessionList
	err := c.JSON(ctx, http.MethodGet, "/sessions", nil, &l)
	return l.Sessions, err
}

// GetSession describes one session, by id or name.
func (c *Client) GetSession(ctx context.Context, id string) (wire.Session, error) {
	var s wire.Session
	err := c.JSON(ctx, http.MethodGet, sessionPath(id, ""), nil, &s)
	return s, err
}

// DeleteSession kills the session's whole process tree and forgets it.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.JSON(ctx, http.MethodDelete, sessionPath(id, ""), nil, nil)
}

// Exec runs a command. A "running" result means the command outlived
// yield_after, or (with Matched set) that one of req.Until's conditions
// held first; continue with Wait, Input or Interrupt. Wait and Input take
// Until too.
func (c *Client) Exec(ctx context.Context, id string, req wire.Exec) (wire.Result, error) {
	var r wire.Result
	err := c.JSON(ctx, http.MethodPost, sessionPath(id, "/exec"), req, &r)
	return r, err
}

// Wait continues waiting for the running command (wire.ErrNoCommand when
// none runs).
func (c *Client) Wait(ctx context.Context, id string, req wire.Wait) (wire.Result, error) {
	var r wire.Result
	err := c.JSON(ctx, http.MethodPost, sessionPath(id, "/wait"), req, &r)
	return r, err
}

// Input types text and keys into the session's terminal.
func (c *Client) Input(ctx context.Context, id string, req wire.Input) (wire.Result, error) {
	var r wire.Result
	err := c.JSON(ctx, http.MethodPost, sessionPath(id, "/input"), req, &r)
	return r, err
}

// Interrupt stops the running command.
func (c *Client) Interrupt(ctx context.Context, id string, req wire.Interrupt) (wire.Result, error) {
	var r wire.Result
	err := c.JSON(ctx, http.MethodPost, sessionPath(id, "/interrupt"), req, &r)
	return r, err
}

// Restart replaces the session's shell, keeping cwd and exported environment.
func (c *Client) Restart(ctx context.Context, id string) (wire.Session, error) {
	var s wire.Session
	err := c.JSON(ctx, http.MethodPost, sessionPath(id, "/restart"), nil, &s)
	return s, err
}

// Resize changes the session's terminal size.
func (c *Client) Resize(ctx context.Context, id string, cols, rows int) (wire.Session, error) {
	var s wire.Session
	err := c.JSON(ctx, http.MethodPost, sessionPath(id, "/resize"), wire.Resize{Cols: cols, Rows: rows}, &s)
	return s, err
}

// Screen returns what a terminal showing the session displays now.
func (c *Client) Screen(ctx context.Context, id string) (wire.Screen, error) {
	var s wire.Screen
	err := c.JSON(ctx, http.MethodGet, sessionPath(id, "/screen"), nil, &s)
	return s, err
}

// Output returns the raw bytes of the session's output stream between the
// absolute offsets from and to (to < 0: up to now). The caller closes it.
func (c *Client) Output(ctx context.Context, id string, from, to int64) (io.ReadCloser, error) {
	q := url.Values{}
	q.Set("from", strconv.FormatInt(from, 10))
	if to >= 0 {
		q.Set("to", strconv.FormatInt(to, 10))
	}
	resp, err := c.Do(ctx, http.MethodGet, sessionPath(id, "/output?"+q.Encode()), nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
