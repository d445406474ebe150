package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/coder/websocket"

	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Close codes of the attach WebSocket beyond the standard ones.
const (
	// CloseFellBehind: the client read slower than the session produced and
	// the bytes it still needed left the in-memory buffer. The reason says
	// "reconnect with from=OFFSET".
	CloseFellBehind websocket.StatusCode = 4000
)

// OffsetHeader is sent on the upgrade response of attach: the absolute
// offset of the first byte the client will receive (useful when it attached
// without from=, at the live end).
const OffsetHeader = "Limbs-Offset"

const (
	attachChunk     = 32 << 10
	attachReadLimit = 1 << 20
)

func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	info := sess.Info()
	from, err := offsetParam(r, "from", info.OutputOffset)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if from > info.OutputOffset {
		s.fail(w, r, fmt.Errorf("from=%d is past the end of the session's output (%d): use 0 <= from <= %d: %w", from, info.OutputOffset, info.OutputOffset, wire.ErrBadRequest))
		return
	}
	// The reader exists before the upgrade so that a bad offset is still a
	// plain HTTP error the client can read.
	rd, err := sess.NewReader(from)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer rd.Close()
	w.Header().Set(OffsetHeader, strconv.FormatInt(rd.Offset(), 10))
	// The origin check guards cookie-authenticated sockets against other
	// web pages; here only a bearer header authenticates, which a foreign
	// page cannot send, and proxies (limbs serve) rewrite Host, so the
	// check would only refuse legitimate clients.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		// Accept has already answered the client.
		s.log.Debug("attach upgrade failed", "session", info.ID, "err", err)
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(attachReadLimit)
	s.log.Info("attach", "session", info.ID, "from", rd.Offset())

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		// The input side ends the attachment when the client goes away.
		defer cancel()
		s.attachInput(ctx, conn, sess, info.ID)
	}()

	code, reason := s.attachOutput(ctx, conn, rd)
	s.log.Info("attach ended", "session", info.ID, "offset", rd.Offset(), "reason", reason)
	if code != 0 {
		conn.Close(code, reason)
	}
}

// attachOutput copies the session's output to the client until something
// ends it, and says how to close the connection (code 0: it is already gone).
// It owns its own reader, so a slow client only ever slows itself.
func (s *Server) attachOutput(ctx context.Context, conn *websocket.Conn, rd *shell.StreamReader) (websocket.StatusCode, string) {
	for {
		b, err := rd.Next(ctx, attachChunk)
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return websocket.StatusNormalClosure, "session deleted"
		case errors.Is(err, shell.ErrFellBehind):
			return CloseFellBehind, fmt.Sprintf("fell behind the output buffer; reconnect with from=%d", rd.Offset())
		case ctx.Err() != nil:
			return 0, "client left"
		default:
			return websocket.StatusInternalError, truncateReason("reading output: " + err.Error())
		}
		if err := conn.Write(ctx, websocket.MessageBinary, b); err != nil {
			return 0, "client left"
		}
	}
}

// attachInput types the client's binary messages into the terminal and
// applies its text control messages.
func (s *Server) attachInput(ctx context.Context, conn *websocket.Conn, sess *shell.Session, id string) {
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			return
		}
		switch typ {
		case websocket.MessageBinary:
			if err := sess.WriteInput(b); err != nil {
				conn.Close(websocket.StatusInternalError, truncateReason("typing input: "+err.Error()))
				return
			}
		case websocket.MessageText:
			var c wire.AttachControl
			if err := json.Unmarshal(b, &c); err != nil || c.Type != "resize" {
				conn.Close(websocket.StatusUnsupportedData, `text messages must be {"type":"resize","cols":N,"rows":N}; send input as binary`)
				return
			}
			if _, err := sess.Resize(c.Cols, c.Rows); err != nil {
				conn.Close(websocket.StatusUnsupportedData, truncateReason(err.Error()))
				return
			}
		}
	}
}

// truncateReason keeps a close reason within the 123 bytes a close frame
// allows.
func truncateReason(s string) string {
	if len(s) > 120 {
		s = s[:120]
	}
	return strings.ToValidUTF8(s, "")
}
