package client

import (
	"context"
	"net/http"

	"github.com/limbs-dev/limbs/internal/wire"
)

// AppendEvents appends events of limbs' agent (agent.* types) to a
// sandbox's log (POST /v1/sandboxes/{id}/events) and returns the seq of
// the last one.
func (s *Sandboxes) AppendEvents(ctx context.Context, idOrName string, evs []wire.Event) (uint64, error) {
	var a wire.AppendedEvents
	err := s.c.JSON(ctx, http.MethodPost, sandboxPath(idOrName, "/events"), wire.AppendEvents{Events: evs}, &a)
	return a.Last, err
}
