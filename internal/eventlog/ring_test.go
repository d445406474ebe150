package eventlog

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestEventRing: pushes and drops in any order keep the events in order
// across the wrap, the growth and the shrink, with their bytes counted.
func TestEventRing(t *testing.T) {
	var r eventRing
	var want []uint64 // cursors held, oldest first
	next := uint64(1)
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(step int) {
		t.Helper()
		if r.len() != len(want) {
			t.Fatalf("step %d: %d events held, want %d", step, r.len(), len(want))
		}
		bytes := 0
		for i, c := range want {
			ev := r.at(i)
			if ev.Cursor != c {
				t.Fatalf("step %d: event %d has cursor %d, want %d", step, i, ev.Cursor, c)
			}
			bytes += evSize(*ev)
		}
		if r.bytes != bytes {
			t.Fatalf("step %d: %d bytes counted, want %d", step, r.bytes, bytes)
		}
		if len(r.buf) > 1024 && r.n < len(r.buf)/4 {
			t.Fatalf("step %d: %d events in a buffer of %d: not shrunk", step, r.n, len(r.buf))
		}
	}
	for step := range 20000 {
		// Phases that fill, hold and drain, so that the buffer grows,
		// wraps and shrinks.
		push := 0.5
		switch phase := step / 4000; phase {
		case 0, 2:
			push = 0.7
		case 1, 3:
			push = 0.3
		}
		if r.len() == 0 || rng.Float64() < push {
			r.push(wire.Event{Cursor: next, Data: make([]byte, rng.IntN(50))})
			want = append(want, next)
			next++
		} else {
			r.dropOldest()
			want = want[1:]
		}
		if step%97 == 0 {
			check(step)
		}
	}
	check(-1)
}

// TestRingBound: the ring holds at most RingBytes of events, and always
// the newest, whatever its size; the global stream still reads what the
// ring let go from disk.
func TestRingBound(t *testing.T) {
	l := open(t, t.TempDir(), Options{RingBytes: 4096})
	for i := range 300 {
		data := `"small"`
		if i%50 == 0 {
			data = `"` + strings.Repeat("x", 5000) + `"` // over the bound alone
		}
		if _, err := l.Append("sb_ring", wire.Event{Type: "agent.note", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
		if l.ring.bytes > 4096 && l.ring.len() > 1 {
			t.Fatalf("after %d events the ring holds %d bytes (%d events), over its bound", i+1, l.ring.bytes, l.ring.len())
		}
		if l.ring.at(l.ring.len()-1).Cursor != l.cursor {
			t.Fatalf("the newest event is not in the ring")
		}
	}
	evs, err := l.NewGlobalReader(0, Filter{}).Read(1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 300 || evs[0].Cursor != 1 || evs[299].Cursor != 300 {
		t.Fatalf("the global stream read %d events (want 300 in order from cursor 1)", len(evs))
	}
}
