package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// lockedBuffer is the terminal the test watches while the relay writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor polls until cond holds; the bound only keeps a broken relay from
// hanging the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 200 {
			t.Fatalf("%s never happened", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAttachTerminal(t *testing.T) {
	c := newDaemon(t)
	s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "tty"})
	if err != nil {
		t.Fatal(err)
	}
	size := func() (int, int, error) { return 101, 31, nil }

	t.Run("typing, resize and detach", func(t *testing.T) {
		keys, typist := io.Pipe()
		defer typist.Close()
		var screen lockedBuffer
		done := make(chan error, 1)
		go func() { done <- attachTerminal(t.Context(), c, s.ID, -1, keys, &screen, size) }()
		if _, err := typist.Write([]byte("echo shell-$((2+3))\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the command's output on the terminal", func() bool { return strings.Contains(screen.String(), "shell-5") })
		info, err := c.GetSession(t.Context(), s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Cols != 101 || info.Rows != 31 {
			t.Errorf("session is %dx%d, want the terminal's 101x31", info.Cols, info.Rows)
		}
		if _, err := typist.Write([]byte("echo typed-before\x1decho typed-after\n")); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, errDetached) {
			t.Fatalf("after Ctrl-]: %v, want detached", err)
		}
		// What was typed before Ctrl-] went in; what came after did not.
		r, err := c.Input(t.Context(), s.ID, wire.Input{Text: "\n", YieldAfter: yieldOf(2)})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.Output, "typed-before") || strings.Contains(r.Output, "typed-after") {
			t.Errorf("the shell got %q after detach, want what was typed before Ctrl-] and nothing after", r.Output)
		}
	})
	t.Run("deleting the session ends it", func(t *testing.T) {
		keys, typist := io.Pipe()
		defer typist.Close()
		var screen lockedBuffer
		done := make(chan error, 1)
		go func() { done <- attachTerminal(t.Context(), c, s.ID, 0, keys, &screen, size) }()
		waitFor(t, "the replayed history", func() bool { return strings.Contains(screen.String(), "shell-5") })
		if err := c.DeleteSession(t.Context(), s.ID); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("after the session was deleted: %v, want a clean end", err)
		}
	})
}
