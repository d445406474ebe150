package shell

import (
	"context"
	"fmt"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// idleWait bounds how long a command waits for its shell to be back at
// its prompt when the terminal shows another process group in the
// foreground although no command runs.
const idleWait = 5 * time.Second

// awaitIdleShell is the process-state check before a command is typed.
// With no command running the shell is at its prompt, in the foreground
// of its terminal: one ioctl says so, and that is the whole cost of the
// common case (and, once per shell process, learning its prompt:
// learnIdle). Another group in the foreground means the shell is still
// running something after the previous command's end: code in the shell
// process sent that end early (a sourced file calling limbs' functions)
// or a person's program runs on an attached terminal. Typing now would
// give the new command the old one's real end, so it waits (bounded by
// idleWait and ctx) until the shell is back in the foreground and, when
// its prompt is known, asleep at it; then the stray end has been read
// and is no command's.
func (s *Session) awaitIdleShell(ctx context.Context, p *proc) error {
	if !p.bash {
		return nil
	}
	fg := p.foreground()
	if fg == p.pid || fg <= 0 {
		// Idle at its prompt: the moment to learn the prompt if no
		// learner saw it yet (once per shell process; outside s.mu, so
		// that no other call waits on it).
		p.learnIdle()
		return nil
	}
	deadline := time.Now().Add(idleWait)
	step := learnStep
	for {
		if p.foreground() == p.pid && (!p.knowsPrompt() || p.atPrompt()) {
			// Let the read loop take in what the shell printed on its
			// way back (its own end of the command that went on).
			for i := 0; i < 50 && !s.drained(p); i++ {
				time.Sleep(time.Millisecond)
			}
			return nil
		}
		if isClosed(p.done) {
			return fmt.Errorf("the shell of session %q exited; retry: %w", s.name, wire.ErrUnavailable)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("session %q: no command runs, but process group %d holds its terminal in the foreground (a program started after its last command's end, or by a person on an attached terminal): wait for it, send it keys with input, or restart the session: %w", s.name, p.foreground(), wire.ErrBusy)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step):
		}
		step = min(2*step, 20*time.Millisecond)
	}
}
