package journal

import (
	"encoding/json"
	"runtime"
	"strconv"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestJournalRingGrows: an idle journal does not hold the memory of
// RingEvents entries from its start (it was 11 MiB of an idle limbsd's
// RSS at the default), and the ring that grows as events come keeps every
// event at its seq, in memory, through its growth and once it wraps.
func TestJournalRingGrows(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	j, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	j.Close()
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Errorf("Open with the default ring allocated %d KiB; want under 2 MiB until events come", got>>10)
	}

	const ringEvents = 3000 // not a power of two: the last growth is partial
	j, err = Open(Options{Dir: t.TempDir(), RingEvents: ringEvents})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	check := func(n int) {
		t.Helper()
		settle(t, j)
		j.mu.Lock()
		first, next := j.first, j.next // the ring's, not the files'
		j.mu.Unlock()
		if want := uint64(max(1, n-ringEvents+1)); first != want || next != uint64(n+1) {
			t.Fatalf("after %d events the ring holds %d..%d, want %d..%d", n, first, next, want, n+1)
		}
		evs, _ := j.Read(first, ringEvents, false)
		if len(evs) != int(next-first) {
			t.Fatalf("read %d events from the ring, want %d", len(evs), next-first)
		}
		for i, ev := range evs {
			var d wire.CommandStartedData
			_ = json.Unmarshal(ev.Data, &d)
			if seq := first + uint64(i); ev.Seq != seq || d.Text != "n"+strconv.FormatUint(seq, 10) {
				t.Fatalf("event %d of the ring is seq %d %q, want seq %d n%d", i, ev.Seq, d.Text, seq, seq)
			}
		}
	}
	n := 0
	for _, upTo := range []int{1000, 2500, 3000, 4500} { // grows 1024 -> 2048 -> 3000, then wraps
		for ; n < upTo; n++ {
			j.Append(wire.Event{Session: "s_1", Command: "c_" + strconv.Itoa(n+1), Type: wire.EventCommandStarted}, wire.CommandStartedData{Text: "n" + strconv.Itoa(n+1)})
		}
		check(n)
	}
}
