package control

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestStats: the metrics' view of the plane counts claimed sandboxes by
// status, and the warm pool apart, ready against wanted.
func TestStats(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, map[string]int{"img": 2})
	testbin.Eventually(t, "pool ready", 30*time.Second, func() bool { return h.srv.PoolReady("img") == 2 })
	h.create(t, wire.CreateSandbox{Image: "img", Name: "a"})
	b := h.create(t, wire.CreateSandbox{Image: "other", Name: "b"})
	if _, err := h.srv.Stop(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "pool refilled", 30*time.Second, func() bool { return h.srv.PoolReady("img") == 2 })
	want := Stats{
		Sandboxes: map[string]int{wire.SandboxRunning: 1, wire.SandboxStopped: 1},
		PoolReady: map[string]int{"img": 2},
		PoolWant:  map[string]int{"img": 2},
	}
	if d := cmp.Diff(want, h.srv.Stats()); d != "" {
		t.Errorf("Stats (-want +got):\n%s", d)
	}
}
