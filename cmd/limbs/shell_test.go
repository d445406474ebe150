package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"

	"github.com/limbs-dev/limbs/internal/wire"
)

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
		var screen testbin.Buffer
		done := make(chan error, 1)
		go func() { done <- attachTerminal(t.Context(), c, s.ID, -1, keys, &screen, size) }()
		if _, err := typist.Write([]byte("echo shell-$((2+3))\n")); err != nil {
			t.Fatal(err)
		}
		testbin.Eventually(t, "the command's output on the terminal", 10*time.Second, func() bool { return strings.Contains(screen.String(), "shell-5") })
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
		var screen testbin.Buffer
		done := make(chan error, 1)
		go func() { done <- attachTerminal(t.Context(), c, s.ID, 0, keys, &screen, size) }()
		testbin.Eventually(t, "the replayed history", 10*time.Second, func() bool { return strings.Contains(screen.String(), "shell-5") })
		if err := c.DeleteSession(t.Context(), s.ID); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("after the session was deleted: %v, want a clean end", err)
		}
	})
}
