package control

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestTypedClientDotNames: "." and ".." as a sandbox id through the typed
// client name no sandbox; they must not reach another route (a path
// cleaned by the server's mux and redirected, then followed by the
// client with another method).
func TestTypedClientDotNames(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := startOpts(t, fp, Options{})
	sb, err := h.tryCreate(wire.CreateSandbox{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sbs := h.c.Sandboxes()
	for _, id := range []string{".", "..", "%2e%2e", "./" + sb.ID, "../sandboxes/" + sb.ID, strings.Repeat("x", 100000)} {
		short := id
		if len(short) > 40 {
			short = short[:40] + "..."
		}
		if _, err := sbs.Get(ctx, id); !errors.Is(err, wire.ErrNotFound) && !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("Get(%q): %v, want not_found or bad_request", short, err)
		}
		if _, err := sbs.Stop(ctx, id); !errors.Is(err, wire.ErrNotFound) && !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("Stop(%q): %v, want not_found or bad_request", short, err)
		}
		if err := sbs.Remove(ctx, id); !errors.Is(err, wire.ErrNotFound) && !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("Remove(%q): %v, want not_found or bad_request", short, err)
		}
		if _, err := h.c.Sandbox(id).ListSessions(ctx); !errors.Is(err, wire.ErrNotFound) && !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("Sandbox(%q).ListSessions: %v, want not_found or bad_request", short, err)
		}
	}
	if got, err := sbs.Get(ctx, sb.ID); err != nil || got.Status != wire.SandboxRunning {
		t.Fatalf("sandbox after the calls: %+v, %v; want it still running", got, err)
	}
}
