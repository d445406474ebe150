package shell

import (
	"context"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestAtPrompt: the shell idle at its prompt is at its prompt by its
// process state; the shell asleep in `read -e`, `read` or PS2-like reads
// of a command, or a foreground job, is not.
func TestAtPrompt(t *testing.T) {
	if nrPselect6 < 0 {
		t.Skip("no prompt recognition on this architecture")
	}
	m := newTestManager(t)
	s := newTestSession(t, m)
	run(t, s, "true")
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	// settled polls cond for a while: the shell takes a moment to sleep.
	settled := func(cond func() bool) bool {
		for range 200 {
			if cond() {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	if !settled(p.atPrompt) {
		t.Fatalf("idle shell not at its prompt (learned %v)", p.prompt.sps)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, cmd := range []string{"read -e v", "f() { read -e v; }; f", "read v", "sleep 3"} {
		r, err := s.Exec(ctx, wire.Exec{Command: cmd, YieldAfter: f(0.5)})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != wire.StatusRunning {
			t.Fatalf("%s: status %q, want running", cmd, r.Status)
		}
		for range 20 {
			if p.atPrompt() {
				t.Fatalf("%s: the shell was taken to be at its prompt", cmd)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := s.Interrupt(ctx, wire.Interrupt{}); err != nil {
			t.Fatal(err)
		}
		if !settled(p.atPrompt) {
			t.Fatalf("after %s: the shell is not at its prompt again", cmd)
		}
	}
}
