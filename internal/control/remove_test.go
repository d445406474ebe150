package control

import (
	"context"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestRemoveDoesNotRecover: the death a remove causes (the provider reports
// it, as Docker does while removing a container) is no death to recover
// from: the sandbox is not marked failed nor brought back while it is
// being removed (it used to be, with warnings about restarting it).
func TestRemoveDoesNotRecover(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	sb := h.create(t, wire.CreateSandbox{})
	var during []string
	fp.beforeRemove = func(id string) {
		fp.events <- sandbox.Event{ID: id, Kind: "died", Reason: "exited", Time: time.Now()}
		// Give the event loop the time to act on it; bounded, and no
		// assertion on time: what is checked is what it did.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			var evs wire.EventList
			if err := h.c.JSON(context.Background(), "GET", "/sandboxes/"+id+"/events?type=sandbox.*", nil, &evs); err == nil {
				for _, e := range evs.Events {
					if e.Type != wire.EventSandboxCreated {
						during = append(during, string(e.Type))
					}
				}
				if len(during) > 0 {
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := h.c.JSON(context.Background(), "DELETE", "/sandboxes/"+sb.ID, nil, nil); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if len(during) > 0 {
		t.Errorf("while being removed the sandbox got events %v: its death was taken for one to recover from", during)
	}
}

// TestInspectShowsLimitsInForce: a sandbox created without limits shows the
// provider's defaults, the limits in force, not 0.
func TestInspectShowsLimitsInForce(t *testing.T) {
	fp := newFakeProvider()
	fp.defaults = &sandbox.Spec{Cpus: 2, MemoryMB: 2048, Pids: 512, TmpMB: 512}
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	sb := h.create(t, wire.CreateSandbox{MemoryMB: 1024})
	got := h.get(t, sb.ID).Limits
	if got.Cpus != 2 || got.MemoryMB != 1024 || got.Pids != 512 || got.TmpMB != 512 {
		t.Errorf("limits shown %+v; want the provider's defaults where none was asked (cpus 2, pids 512, tmp_mb 512) and memory_mb 1024 as asked", got)
	}
}
