package agent

import (
	"context"
	"time"

	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

// NewShell returns the tool layer's Shell over s for one run, with the
// one thing the loop adds: a call whose context ends while its command
// runs (Ctrl-C, the time limit) interrupts that command through the
// Shell (SIGINT to its foreground job, then limbsd's escalation) before
// it returns, so the session is free for whatever comes next.
func NewShell(s tool.Sessions, opts tool.ShellOptions) *tool.Shell {
	w := &interrupting{Sessions: s}
	w.sh = tool.NewShell(w, opts)
	return w.sh
}

// callKey marks the context of a tool call with that context itself.
type callKey struct{}

// interruptTimeout bounds the interrupt of a cancelled call's command.
const interruptTimeout = 30 * time.Second

// interrupting is the Sessions of a run's Shell.
type interrupting struct {
	tool.Sessions
	sh *tool.Shell // set once by NewShell, before any call
}

func (w *interrupting) Exec(ctx context.Context, id string, req wire.Exec) (wire.Result, error) {
	r, err := w.Sessions.Exec(ctx, id, req)
	return r, w.after(ctx, id, err)
}

func (w *interrupting) Wait(ctx context.Context, id string, req wire.Wait) (wire.Result, error) {
	r, err := w.Sessions.Wait(ctx, id, req)
	return r, w.after(ctx, id, err)
}

func (w *interrupting) Input(ctx context.Context, id string, req wire.Input) (wire.Result, error) {
	r, err := w.Sessions.Input(ctx, id, req)
	return r, w.after(ctx, id, err)
}

// after interrupts session id's command when the call ended with its
// context.
// It looks at the context of the tool call, not of this poll: shell_wait
// mode any cancels its other polls itself, and those commands run on.
func (w *interrupting) after(ctx context.Context, id string, err error) error {
	call, _ := ctx.Value(callKey{}).(context.Context)
	if call == nil {
		call = ctx
	}
	if err == nil || call.Err() == nil {
		return err
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptTimeout)
	defer cancel()
	_, _ = w.sh.Interrupt(ictx, id)
	return err
}
