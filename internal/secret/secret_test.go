package secret

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReaderMasksAcrossReads(t *testing.T) {
	const sec = "pa$$w0rd-\"q\""
	forms := Forms([]string{sec})
	in := "a " + sec + " b " + `pa$$w0rd-\"q\"` + " c " + sec
	for _, size := range []int{1, 2, 3, 7, 64} {
		// iotest.OneByteReader and friends cut the value between reads.
		r := Reader(&chunked{s: in, n: size}, forms)
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(b); got != "a *** b *** c ***" {
			t.Errorf("chunks of %d: %q", size, got)
		}
	}
	// Only a tail that starts a value is held back.
	for in, want := range map[string]string{"hello x": "hello x", "hello pa$": "hello "} {
		r := Reader(iotest.HalfReader(strings.NewReader(in)), forms)
		buf := make([]byte, 64)
		n, _ := r.Read(buf)
		if got := string(buf[:n]); got != want {
			t.Errorf("first read of %q: %q, want %q", in, got, want)
		}
	}
}

type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	k := min(c.n, len(c.s), len(p))
	copy(p, c.s[:k])
	c.s = c.s[k:]
	return k, nil
}

func TestHandlerMasksLogLines(t *testing.T) {
	var buf bytes.Buffer
	s := NewSet()
	s.Put("sb_1", []string{"topsecret"})
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil), s))
	log.With("pre", "x topsecret").Info("saw topsecret", "err", io.ErrUnexpectedEOF, "v", "topsecret!", slog.Group("g", "k", "topsecret"))
	log.Log(context.Background(), slog.LevelWarn, "plain", "e", errString("wrapped topsecret"))
	if strings.Contains(buf.String(), "topsecret") || !strings.Contains(buf.String(), "***") {
		t.Errorf("log:\n%s", buf.String())
	}
	if len(Forms([]string{"abc", ""})) != 0 {
		t.Error("a value shorter than MinLen is masked")
	}
}

type errString string

func (e errString) Error() string { return string(e) }
