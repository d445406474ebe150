package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/coder/websocket"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Attach protocol constants; they must match package runtime (its tests
// check that they do).
const (
	// CloseFellBehind is the WebSocket close code of a client that read
	// slower than the session produced.
	CloseFellBehind = 4000
	// OffsetHeader carries the offset of the first byte sent on an attach.
	OffsetHeader = "Limbs-Offset"
)

// FellBehindError ends an attachment whose reader lagged past the daemon's
// in-memory buffer. Attaching again with From loses nothing.
type FellBehindError struct {
	From   int64
	Reason string
}

func (e *FellBehindError) Error() string {
	return fmt.Sprintf("attachment fell behind the session's output (%s); attach again with from=%d", e.Reason, e.From)
}

// Attachment is a live connection to a session's terminal: reading it
// yields the raw output stream, writing it types input.
type Attachment struct {
	conn  *websocket.Conn
	start int64

	// rd and err belong to Read, which is not for concurrent use; n is
	// also read by Offset from any goroutine.
	rd  io.Reader
	err error
	n   atomic.Int64
}

// Attach connects to a session's terminal. from is the absolute offset to
// start the output from; from < 0 starts at the live end (no history).
// ctx bounds only the handshake: close the Attachment to end it.
func (c *Client) Attach(ctx context.Context, id string, from int64) (*Attachment, error) {
	u := c.base + sessionPath(id, "/attach")
	u = "ws" + strings.TrimPrefix(u, "http")
	if from >= 0 {
		u += "?" + url.Values{"from": {strconv.FormatInt(from, 10)}}.Encode()
	}
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusSwitchingProtocols {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if len(b) > 0 {
				return nil, wire.ErrorFromBody(resp.StatusCode, b)
			}
		}
		return nil, fmt.Errorf("attaching to session %q: %w; is the daemon running and the session there?", id, err)
	}
	// Input messages are small; output ones are up to the daemon's chunk.
	conn.SetReadLimit(4 << 20)
	a := &Attachment{conn: conn, start: from}
	if v := resp.Header.Get(OffsetHeader); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			a.start = n
		}
	}
	return a, nil
}

// Read reads raw output. It returns io.EOF when the session was deleted or
// the daemon ended the attachment normally, and a *FellBehindError when the
// reader lagged too far.
func (a *Attachment) Read(p []byte) (int, error) {
	for {
		if a.err != nil {
			return 0, a.err
		}
		if a.rd == nil {
			typ, r, err := a.conn.Reader(context.Background())
			if err != nil {
				a.err = a.closeErr(err)
				return 0, a.err
			}
			if typ != websocket.MessageBinary {
				// Text messages carry no output; skip ones a newer daemon may send.
				_, _ = io.Copy(io.Discard, r)
				continue
			}
			a.rd = r
		}
		n, err := a.rd.Read(p)
		a.n.Add(int64(n))
		if errors.Is(err, io.EOF) {
			a.rd = nil
			err = nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
}

func (a *Attachment) closeErr(err error) error {
	switch code := websocket.CloseStatus(err); code {
	case websocket.StatusNormalClosure:
		return io.EOF
	case CloseFellBehind:
		var ce websocket.CloseError
		errors.As(err, &ce)
		return &FellBehindError{From: a.start + a.n.Load(), Reason: ce.Reason}
	default:
		return err
	}
}

// Offset is the absolute offset of the next output byte Read will return
// (-1 when the daemon did not say where the attachment started).
func (a *Attachment) Offset() int64 {
	if a.start < 0 {
		return -1
	}
	return a.start + a.n.Load()
}

// Write types p into the terminal, as is (Ctrl-C is "\x03").
func (a *Attachment) Write(p []byte) (int, error) {
	if err := a.conn.Write(context.Background(), websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize changes the terminal size.
func (a *Attachment) Resize(ctx context.Context, cols, rows int) error {
	b, err := json.Marshal(wire.AttachControl{Type: "resize", Cols: cols, Rows: rows})
	if err != nil {
		return err
	}
	return a.conn.Write(ctx, websocket.MessageText, b)
}

// Close detaches; the session and its programs keep running.
func (a *Attachment) Close() error {
	return a.conn.Close(websocket.StatusNormalClosure, "detached")
}
