package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/limbs-dev/limbs/internal/secret"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The dashboard's terminals relay a session's attach WebSocket themselves
// rather than through the API's reverse proxy, which passes frames as they
// are: here the output frames are masked like every other answer of limbs
// serve (docs/events.md, "Secrets").

const (
	// maxTermInput bounds a frame the browser sends (typed input, a
	// resize).
	maxTermInput = 1 << 20
	// maxTermOutput bounds a frame limbsd sends.
	maxTermOutput = 16 << 20
	// heldFlush is how long a tail that begins a secret value is held
	// back when no more output follows: the value, if it is one, comes in
	// the same burst of output; a prompt or an echo must not wait longer.
	heldFlush = 300 * time.Millisecond
)

// attachRoute matches /v1/sandboxes/{id}/sessions/{sid}/attach.
func attachRoute(p string) (id, sid string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/v1/sandboxes/")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[1] != "sessions" || parts[3] != "attach" || parts[0] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[0], parts[2], true
}

// offsetMsg tells the browser the offset in the session's output stream
// of the next byte it receives, when what it received was shorter than
// the stream (a value masked, a tail held back): it resumes from there.
type offsetMsg struct {
	Type   string `json:"type"` // "offset"
	Offset int64  `json:"offset"`
}

// serveAttach relays the attach WebSocket of session sid of sandbox id to
// the browser (Origin already checked by cookieAuth, and again by Accept),
// masking the sandbox's secret values in its output.
func (h *Handler) serveAttach(w http.ResponseWriter, r *http.Request, id, sid string) {
	d, err := h.opts.Plane.Dial(r.Context(), id)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	u := "ws://limbsd/v1/sessions/" + url.PathEscape(sid) + "/attach"
	if from := r.URL.Query().Get("from"); from != "" {
		if _, err := strconv.ParseInt(from, 10, 64); err != nil {
			wire.WriteError(w, fmt.Errorf("from=%q is not an offset: %w", from, wire.ErrBadRequest))
			return
		}
		u += "?from=" + from
	}
	hdr := http.Header{}
	d.Authorize(hdr)
	dctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	up, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: &http.Client{Transport: d}, HTTPHeader: hdr})
	cancel()
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			wire.WriteError(w, fmt.Errorf("attaching to session %s of sandbox %s: limbsd answered %s: %w", sid, id, resp.Status, statusErr(resp.StatusCode)))
			return
		}
		wire.WriteError(w, d.Explain(r.Context(), err))
		return
	}
	defer up.CloseNow()
	up.SetReadLimit(maxTermOutput)
	start, _ := strconv.ParseInt(resp.Header.Get("Limbs-Offset"), 10, 64)

	down, err := websocket.Accept(w, r, nil) // Origin must be this host
	if err != nil {
		return
	}
	defer down.CloseNow()
	down.SetReadLimit(maxTermInput)
	ctx, stop := context.WithCancel(r.Context())
	defer stop()

	if err := writeOffset(ctx, down, start); err != nil {
		return
	}
	// Browser to limbsd: typed input and resizes, as they are.
	go func() {
		defer stop()
		for {
			typ, b, err := down.Read(ctx)
			if err != nil {
				if st := websocket.CloseStatus(err); st != -1 {
					_ = up.Close(st, "")
				}
				return
			}
			if err := up.Write(ctx, typ, b); err != nil {
				return
			}
		}
	}()
	// limbsd to browser: output, masked.
	type frame struct {
		typ websocket.MessageType
		b   []byte
		err error
	}
	frames := make(chan frame, 16)
	go func() {
		for {
			typ, b, err := up.Read(ctx)
			select {
			case frames <- frame{typ, b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	m := &masker{forms: h.secretForms, at: start}
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-flush.C:
			if out, adjusted := m.flush(); len(out) > 0 {
				if down.Write(ctx, websocket.MessageBinary, out) != nil {
					return
				}
				if adjusted && writeOffset(ctx, down, m.at) != nil {
					return
				}
			}
		case f := <-frames:
			if f.err != nil {
				out, _ := m.flush()
				if len(out) > 0 {
					_ = down.Write(ctx, websocket.MessageBinary, out)
				}
				code, reason := websocket.StatusGoingAway, "the sandbox's terminal closed"
				var ce websocket.CloseError
				if errors.As(f.err, &ce) {
					code, reason = ce.Code, ce.Reason
				}
				_ = down.Close(code, reason)
				return
			}
			if f.typ != websocket.MessageBinary {
				if down.Write(ctx, f.typ, f.b) != nil {
					return
				}
				continue
			}
			out, adjusted := m.next(f.b)
			if len(out) > 0 {
				if down.Write(ctx, websocket.MessageBinary, out) != nil {
					return
				}
			}
			if adjusted && writeOffset(ctx, down, m.at) != nil {
				return
			}
			if len(m.held) > 0 {
				flush.Reset(heldFlush)
			}
		}
	}
}

func writeOffset(ctx context.Context, c *websocket.Conn, off int64) error {
	b, _ := json.Marshal(offsetMsg{Type: "offset", Offset: off})
	return c.Write(ctx, websocket.MessageText, b)
}

func statusErr(code int) error {
	switch code {
	case http.StatusNotFound:
		return wire.ErrNotFound
	case http.StatusBadRequest:
		return wire.ErrBadRequest
	default:
		return wire.ErrUnavailable
	}
}

// masker masks secret values in a stream cut into frames, holding back a
// tail that begins a value until the next frame (or heldFlush). at is the
// stream offset of the first byte not yet sent.
type masker struct {
	forms func() [][]byte
	held  []byte // raw bytes held back
	at    int64
}

// next returns what to send of chunk, and whether its length differs from
// the raw bytes it stands for (the browser's offset must then be set).
func (m *masker) next(chunk []byte) ([]byte, bool) {
	forms := m.forms()
	in := append(m.held, chunk...)
	m.held = nil
	if len(forms) == 0 {
		m.at += int64(len(in))
		return in, false
	}
	masked := secret.MaskBytes(in, forms)
	cut := len(masked) - secret.HeldTail(masked, forms)
	out := masked[:cut]
	m.held = append([]byte(nil), masked[cut:]...)
	raw := len(in) - len(m.held)
	m.at += int64(raw)
	return out, len(out) != raw
}

// flush releases what is held back.
func (m *masker) flush() ([]byte, bool) {
	out := m.held
	m.held = nil
	m.at += int64(len(out))
	return out, false
}
