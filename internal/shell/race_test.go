package shell

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestInputWhileModesToggle types keys while the program toggles
// cursor-key mode: the read loop sets the modes, Input reads them (run
// with -race).
func TestInputWhileModesToggle(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = s.Exec(ctx, wire.Exec{Command: `for i in $(seq 30000); do printf '\e[?1h\e[?2004h\e[?1l\e[?2004l'; done`, YieldAfter: f(20)})
	}()
	for i := 0; i < 200; i++ {
		if _, err := s.Input(ctx, wire.Input{Keys: []string{"Up"}, YieldAfter: f(0.01)}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// TestDeleteRacesClose deletes a session while the manager closes: no
// panic, and the manager's state is saved.
func TestDeleteRacesClose(t *testing.T) {
	for i := 0; i < 3; i++ {
		opts := Options{StateDir: t.TempDir(), Workdir: t.TempDir()}
		m, err := NewManager(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		s := newTestSession(t, m)
		kept := newTestSession(t, m)
		run(t, s, "echo hi")
		run(t, kept, "cd / && export KEPT=yes")
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _ = m.Delete(s.id) }()
		go func() { defer wg.Done(); m.Close() }()
		wg.Wait()
		m2 := newTestManager2(t, opts)
		if _, err := m2.Get(s.id); err == nil {
			t.Errorf("the deleted session came back")
		}
		k, err := m2.Get(kept.id)
		if err != nil {
			t.Fatalf("the kept session was not saved: %v", err)
		}
		if r := run(t, k, "echo $KEPT; pwd"); r.Output != "yes\n/\n" {
			t.Errorf("the kept session's state: %q", r.Output)
		}
		m2.Close()
	}
}

func newTestManager2(t *testing.T, opts Options) *Manager {
	t.Helper()
	m, err := NewManager(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestWaitingDoesNotPoll: telling a prompt from the end of a command
// takes a few wake-ups, not a sleep of a millisecond in a loop.
func TestWaitingDoesNotPoll(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	run(t, s, "true")
	s.waitChecks.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := s.Exec(ctx, wire.Exec{Command: "read -r x", YieldAfter: f(20)})
	if err != nil {
		t.Fatal(err)
	}
	if !r.WaitingForInput {
		t.Fatalf("read not seen waiting: %+v", r)
	}
	if n := s.waitChecks.Load(); n > 4 {
		t.Errorf("waiting() took %d rounds to settle; want a few", n)
	}
	if _, err := s.Input(ctx, wire.Input{Text: "x\n", YieldAfter: f(20)}); err != nil {
		t.Fatal(err)
	}
}
