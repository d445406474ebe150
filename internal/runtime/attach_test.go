package runtime_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/runtime"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestAttachProtocol checks the parts of the attach protocol a client
// library depends on, on a real shell.
func TestAttachProtocol(t *testing.T) {
	srv := newServer(t, runtime.Options{Token: testToken})
	c, err := client.New(srv.URL, testToken, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "attach"})
	if err != nil {
		t.Fatal(err)
	}
	y := 10.0
	r, err := c.Exec(t.Context(), s.ID, wire.Exec{Command: "echo ready", YieldAfter: &y})
	if err != nil || r.Status != wire.StatusExited {
		t.Fatalf("exec: %+v %v", r, err)
	}

	t.Run("from past the end is a plain 400", func(t *testing.T) {
		_, err := c.Attach(t.Context(), s.ID, r.OffsetEnd+1000)
		var re *wire.RemoteError
		if !errors.As(err, &re) || re.Code != "bad_request" || !strings.Contains(re.Message, "from=") {
			t.Errorf("attach from past the end: %v, want bad_request naming the valid range", err)
		}
	})
	t.Run("offset header", func(t *testing.T) {
		a, err := c.Attach(t.Context(), s.ID, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		info, err := c.GetSession(t.Context(), s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if a.Offset() < r.OffsetEnd || a.Offset() > info.OutputOffset {
			t.Errorf("attachment without from starts at %d, want the live end (%d..%d)", a.Offset(), r.OffsetEnd, info.OutputOffset)
		}
		b, err := c.Attach(t.Context(), s.ID, r.OffsetStart)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.Offset() != r.OffsetStart {
			t.Errorf("attachment from=%d reports offset %d", r.OffsetStart, b.Offset())
		}
	})
	t.Run("bad control message closes with a reason", func(t *testing.T) {
		h := http.Header{"Authorization": {"Bearer " + testToken}}
		u := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/sessions/attach/attach"
		conn, _, err := websocket.Dial(t.Context(), u, &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
		if err := conn.Write(t.Context(), websocket.MessageText, []byte(`{"type":"resize","cols":0}`)); err != nil {
			t.Fatal(err)
		}
		for {
			_, _, err = conn.Read(t.Context())
			if err != nil {
				break
			}
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusUnsupportedData || !strings.Contains(ce.Reason, "cols") {
			t.Errorf("after a resize to 0 columns: %v, want close 1003 naming cols", err)
		}
	})
}
