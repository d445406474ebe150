package local

import (
	"context"
	"fmt"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Stats measures a running local sandbox from /proc: the CPU time and
// resident memory of its process (limbsd, or bubblewrap around it) and
// every descendant. It has no memory limit to report: the local provider
// enforces none.
func (p *Provider) Stats(ctx context.Context, id string) (sandbox.Stats, error) {
	p.mu.Lock()
	pr, err := p.track(id)
	p.mu.Unlock()
	if err != nil {
		return sandbox.Stats{}, err
	}
	select {
	case <-pr.done:
		return sandbox.Stats{}, fmt.Errorf("local sandbox %s is not running: %w", id, wire.ErrUnavailable)
	default:
	}
	return sandbox.TreeStats(pr.meta.Pid)
}
