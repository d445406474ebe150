package control

import (
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// eventsToWire converts the registry's event records to the public type:
// the registry's schema can change (store migrations) without changing
// what GET /v1/sandboxes/{id}/events answers.
func eventsToWire(evs []store.Event) []wire.SandboxEvent {
	out := make([]wire.SandboxEvent, len(evs))
	for i, e := range evs {
		out[i] = wire.SandboxEvent{
			Seq:     e.Seq,
			Time:    e.Time,
			Kind:    wire.EventKind(e.Kind),
			Reason:  e.Reason,
			Message: e.Message,
		}
	}
	return out
}
