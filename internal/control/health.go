package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// readyTimeout bounds how long a create, a start or a recovery waits for a
// started sandbox's limbsd to answer (a variable so that tests need not
// wait).
var readyTimeout = 30 * time.Second

// readyTries bounds the health requests of one wait, whatever the clock.
const readyTries = 2000

// waitReady waits until the limbsd of e, just created or started by its
// provider, answers GET /v1/health through the provider's Dial. It gives
// up at once when the provider says the sandbox is not running (its error
// says why: an exit code, limbsd's last log lines) or that something else
// answers, else after readyTimeout. This is the one wait for limbsd: the
// providers return from Create and Start when the sandbox is started.
func (s *Plane) waitReady(ctx context.Context, e *entry) error {
	id := s.record(e).ID
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	delay := 2 * time.Millisecond
	var err error
	for range readyTries {
		if err = e.healthy(ctx); err == nil {
			// The wait's connection is not kept (as when the providers
			// waited): the first forwarded request dials, and checks who
			// answers, afresh.
			e.closeIdle()
			return nil
		}
		if errors.Is(err, sandbox.ErrImpostor) || errors.Is(err, sandbox.ErrNotRunning) || errors.Is(err, wire.ErrNotFound) {
			if status, _ := wire.StatusOf(err); status == http.StatusInternalServerError {
				err = fmt.Errorf("%w: %w", err, wire.ErrUnavailable)
			}
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("limbsd of sandbox %s did not answer within %s (%v); see `limbs sandbox inspect %s` and the provider's logs (docker logs limbs-%s, or limbsd.log in a local sandbox's directory), then remove it or start it again: %w", id, readyTimeout, err, id, id, wire.ErrUnavailable)
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
	return fmt.Errorf("limbsd of sandbox %s did not answer after %d tries (%v); remove it or start it again: %w", id, readyTries, err, wire.ErrUnavailable)
}
