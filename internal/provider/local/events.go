package local

import (
	"context"

	"github.com/limbs-dev/limbs/internal/sandbox"
)

type subscriber struct {
	ctx context.Context
	ch  chan sandbox.Event
}

// Events reports daemons that exited on their own, until ctx ends.
func (p *Provider) Events(ctx context.Context) (<-chan sandbox.Event, error) {
	ch := make(chan sandbox.Event, 64)
	p.mu.Lock()
	p.subs = append(p.subs, subscriber{ctx: ctx, ch: ch})
	p.mu.Unlock()
	go func() {
		<-ctx.Done()
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, s := range p.subs {
			if s.ch == ch {
				p.subs = append(p.subs[:i], p.subs[i+1:]...)
				break
			}
		}
	}()
	return ch, nil
}
