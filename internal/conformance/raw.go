package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// allBytes is a printf format printing every byte value once, then a newline.
func allBytes() (format string, want []byte) {
	var f strings.Builder
	for b := 0; b < 256; b++ {
		fmt.Fprintf(&f, `\%03o`, b)
		want = append(want, byte(b))
	}
	return f.String() + `\n`, append(want, '\n')
}

func testRawOutput(t *testing.T, c *client.Client) {
	t.Run("Unicode", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := wantOutput(t, c, id, `printf 'héllo 世界 🎉\n'`, "héllo 世界 🎉\n")
		if got := raw(t, c, id, r.OffsetStart, r.OffsetEnd); string(got) != "héllo 世界 🎉\n" {
			t.Errorf("raw output = %q, want %q", got, "héllo 世界 🎉\n")
		}
	})
	t.Run("OffsetsAdvance", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		a := wantOutput(t, c, id, "echo first", "first\n")
		b := wantOutput(t, c, id, "echo second", "second\n")
		if a.OffsetStart > a.OffsetEnd || a.OffsetEnd > b.OffsetStart || b.OffsetStart > b.OffsetEnd {
			t.Errorf("offsets %d..%d then %d..%d: want each range after the previous one", a.OffsetStart, a.OffsetEnd, b.OffsetStart, b.OffsetEnd)
		}
		if a.CommandID == b.CommandID {
			t.Errorf("two commands share command_id %q", a.CommandID)
		}
		if got := raw(t, c, id, a.OffsetStart, a.OffsetEnd); string(got) != "first\n" {
			t.Errorf("raw output of the first command = %q, want %q", got, "first\n")
		}
		if got := raw(t, c, id, b.OffsetStart, b.OffsetEnd); string(got) != "second\n" {
			t.Errorf("raw output of the second command = %q, want %q", got, "second\n")
		}
	})
	t.Run("EveryByteValue", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		format, want := allBytes()
		cmd := "printf '" + format + "'"
		body := rawExec(t, c, id, cmd)
		if !utf8.Valid(body) || !json.Valid(body) {
			t.Fatalf("exec answer for binary output is not valid UTF-8 JSON: %q", body)
		}
		var r wire.Result
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		wantExit(t, r, 0)
		got := raw(t, c, id, r.OffsetStart, r.OffsetEnd)
		// A terminal's output processing only adds \r before \n (onlcr),
		// which raw() undoes; \r\n cannot occur in want itself.
		if !bytes.Equal(got, want) {
			t.Errorf("raw output of every byte value:\n got %q\nwant %q", got, want)
		}
		wantOutput(t, c, id, "echo after-binary", "after-binary\n")
	})
	t.Run("LargeOutput_slow", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: skipping 200,000 lines of output")
		}
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: "seq 1 200000", YieldAfter: ptr(0.0)})
		wantExit(t, r, 0)
		var want bytes.Buffer
		for i := 1; i <= 200000; i++ {
			fmt.Fprintf(&want, "%d\n", i)
		}
		if !r.Truncated {
			t.Errorf("truncated = false for %d bytes of output", want.Len())
		}
		if !strings.HasPrefix(r.Output, "1\n2\n3\n") || !strings.HasSuffix(r.Output, "199999\n200000\n") {
			t.Errorf("truncated output does not keep head and tail: starts %.40q, ends %q", r.Output, r.Output[max(0, len(r.Output)-40):])
		}
		if n := utf8.RuneCountInString(r.Output); n > wire.DefaultMaxOutput+200 {
			t.Errorf("output has %d characters, want about max_output (%d)", n, wire.DefaultMaxOutput)
		}
		if r.OutputBytes != r.OffsetEnd-r.OffsetStart {
			t.Errorf("output_bytes = %d, want offset_end-offset_start = %d", r.OutputBytes, r.OffsetEnd-r.OffsetStart)
		}
		if got := raw(t, c, id, r.OffsetStart, r.OffsetEnd); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("raw output of seq 1 200000 differs: %d bytes, want %d; starts %.40q ends %q",
				len(got), want.Len(), got, got[max(0, len(got)-40):])
		}
		if r.LogPath == "" {
			t.Fatalf("log_path is empty")
		}
		log, ok := readFile(t, c, r.LogPath)
		if !ok {
			t.Logf("the file API is not available: checked /output only, not the file at log_path %s", r.LogPath)
			return
		}
		if log = bytes.ReplaceAll(log, []byte("\r\n"), []byte("\n")); !bytes.Equal(log, want.Bytes()) {
			t.Errorf("file at log_path %s: %d bytes, want %d; starts %.40q", r.LogPath, len(log), want.Len(), log)
		}
	})
	t.Run("MaxOutput", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: "seq 1 1000", MaxOutput: ptr(200), YieldAfter: ptr(guardYield)})
		wantExit(t, r, 0)
		if !r.Truncated || !strings.HasPrefix(r.Output, "1\n2\n") || !strings.HasSuffix(r.Output, "999\n1000\n") {
			t.Errorf("max_output 200: truncated %v, output %q: want head, tail and truncated", r.Truncated, r.Output)
		}
		if n := utf8.RuneCountInString(r.Output); n > 400 {
			t.Errorf("max_output 200 gave %d characters", n)
		}
	})
	t.Run("OutputRangeValidated", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := wantOutput(t, c, id, "echo x", "x\n")
		for _, q := range []string{
			"from=-1",
			"from=abc",
			fmt.Sprintf("from=%d&to=%d", r.OffsetEnd, r.OffsetStart),
			fmt.Sprintf("from=0&to=%d", r.OffsetEnd+1<<40),
		} {
			_, err := c.Do(t.Context(), http.MethodGet, "/sessions/"+url.PathEscape(id)+"/output?"+q, nil, "")
			if !isCode(err, "bad_request") {
				t.Errorf("GET output?%s: err = %v, want 400 bad_request naming the valid range", q, err)
			}
		}
	})
}

func testAttach(t *testing.T, c *client.Client) {
	t.Run("LiveOutputAndInput", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		a, err := c.Attach(t.Context(), id, -1)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		defer a.Close()
		rd := newCollector(a)
		wantOutput(t, c, id, "echo attach-$((40+2))", "attach-42\n")
		rd.waitFor(t, "attach-42")
		if _, err := a.Write([]byte("echo typed-$((6*7))\n")); err != nil {
			t.Fatalf("typing through attach: %v", err)
		}
		rd.waitFor(t, "typed-42")
		if err := a.Resize(t.Context(), 91, 33); err != nil {
			t.Fatalf("resize through attach: %v", err)
		}
		eventually(t, "resize through attach", func() (bool, string) {
			s, err := c.GetSession(t.Context(), id)
			return err == nil && s.Cols == 91 && s.Rows == 33, fmt.Sprintf("%+v %v", s, err)
		})
		wantOutput(t, c, id, "echo ok", "ok\n")
	})
	t.Run("ReplayFromOffset", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := wantOutput(t, c, id, "echo replay-me", "replay-me\n")
		a, err := c.Attach(t.Context(), id, r.OffsetStart)
		if err != nil {
			t.Fatalf("attach from=%d: %v", r.OffsetStart, err)
		}
		defer a.Close()
		newCollector(a).waitFor(t, "replay-me")
	})
	t.Run("SeveralClients", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		var cols []*collector
		for i := 0; i < 3; i++ {
			a, err := c.Attach(t.Context(), id, -1)
			if err != nil {
				t.Fatalf("attach %d: %v", i, err)
			}
			defer a.Close()
			cols = append(cols, newCollector(a))
		}
		wantOutput(t, c, id, "echo to-all-$((1+1))", "to-all-2\n")
		for _, col := range cols {
			col.waitFor(t, "to-all-2")
		}
	})
	t.Run("DeleteClosesNormally", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		a, err := c.Attach(t.Context(), id, -1)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		defer a.Close()
		col := newCollector(a)
		if err := c.DeleteSession(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if err := col.end(t); !errors.Is(err, io.EOF) {
			t.Errorf("attachment to a deleted session ended with %v, want a normal close (io.EOF)", err)
		}
	})
	t.Run("SlowClientFallsBehind_slow", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: skipping 24 MiB of output")
		}
		t.Parallel()
		id := newSession(t, c)
		a, err := c.Attach(t.Context(), id, -1)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		defer a.Close()
		// Nobody reads a while the command prints three times the
		// documented buffer: the command must not wait for it.
		r := runReq(t, c, id, wire.Exec{Command: "head -c 25165824 /dev/zero | tr '\\0' a; echo", MaxOutput: ptr(100), YieldAfter: ptr(0.0)})
		wantExit(t, r, 0)
		// A transport with deep buffers (TCP loopback through a proxy:
		// several MiB of kernel buffer on each hop) can take in all of
		// it, so that limbsd never falls behind: the client then reads
		// the whole output and the attachment stays open. That is no
		// failure, and must not hang the test.
		var got atomic.Int64
		errc := make(chan error, 1)
		go func() {
			_, err := io.Copy(countWriter{&got}, a)
			errc <- err
		}()
		var last int64 = -1
		for err == nil {
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second):
				n := got.Load()
				if n == last && n >= 25165824 {
					t.Logf("the transport buffered all %d bytes: nothing fell behind", n)
					return
				}
				last = n
			}
		}
		var fb *client.FellBehindError
		if !errors.As(err, &fb) {
			t.Fatalf("a client that did not read ended with %v, want a fell-behind close", err)
		}
		a2, err := c.Attach(t.Context(), id, fb.From)
		if err != nil {
			t.Fatalf("re-attach from=%d as the close reason says: %v", fb.From, err)
		}
		a2.Close()
	})
}

// collector reads an attachment in the background, so that a test can wait
// for text without blocking on Read.
type collector struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	err  error
	done chan struct{}
	a    *client.Attachment
}

func newCollector(a *client.Attachment) *collector {
	col := &collector{done: make(chan struct{}), a: a}
	go func() {
		defer close(col.done)
		b := make([]byte, 32<<10)
		for {
			n, err := a.Read(b)
			col.mu.Lock()
			col.buf.Write(b[:n])
			col.err = err
			col.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return col
}

func (col *collector) waitFor(t *testing.T, s string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%q on the attachment", s), func() (bool, string) {
		col.mu.Lock()
		defer col.mu.Unlock()
		return strings.Contains(col.buf.String(), s), fmt.Sprintf("%q (err %v)", col.buf.String(), col.err)
	})
}

func (col *collector) end(t *testing.T) error {
	t.Helper()
	select {
	case <-col.done:
	case <-time.After(30 * time.Second):
		col.a.Close()
		t.Fatalf("attachment still open 30s after its session was deleted")
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	return col.err
}

// rawExec runs command and returns the answer's body as sent, for checks
// that decoding would hide.
func rawExec(t *testing.T, c *client.Client, id, command string) []byte {
	t.Helper()
	b, _ := json.Marshal(wire.Exec{Command: command, YieldAfter: ptr(guardYield)})
	resp, err := c.Do(t.Context(), http.MethodPost, "/sessions/"+url.PathEscape(id)+"/exec", bytes.NewReader(b), "application/json")
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// readFile reads a file through the file API; ok is false when the endpoint
// has no file API.
func readFile(t *testing.T, c *client.Client, path string) ([]byte, bool) {
	t.Helper()
	resp, err := c.Do(t.Context(), http.MethodGet, "/files?path="+url.QueryEscape(path), nil, "")
	if err != nil {
		if isCode(err, "unavailable") || isCode(err, "not_found") && !strings.Contains(err.Error(), path) {
			return nil, false
		}
		t.Fatalf("reading %s through the file API: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

// deleteFileQuietly removes a file the test made, through a shell.
func deleteFileQuietly(c *client.Client, id, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = c.Exec(ctx, id, wire.Exec{Command: "rm -f " + path})
}

// countWriter counts what is written to it and keeps nothing.
type countWriter struct{ n *atomic.Int64 }

func (w countWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}
