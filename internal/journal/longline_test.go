package journal

import (
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestJournalLongRecordKeepsWhatFollows: an event whose record is longer
// than a reader takes in (an input call with millions of keys) must not
// make the files end there: the events after it are read back, and a
// restarted journal goes on after the last of them, never numbering a
// seq a reader has seen again.
func TestJournalLongRecordKeepsWhatFollows(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	j.Append(wire.Event{Session: "s_1", Type: wire.EventSessionCreated, Source: wire.SourceAPI}, wire.SessionData{Name: "a"})
	keys := make([]string, maxLine/6)
	for i := range keys {
		keys[i] = "Enter"
	}
	j.Append(wire.Event{Session: "s_1", Type: wire.EventInput, Source: wire.SourceAPI}, wire.InputData{Text: strings.Repeat("x", 10), Keys: keys})
	var last uint64
	for range 10 {
		last = j.Append(wire.Event{Session: "s_1", Type: wire.EventSessionResized, Source: wire.SourceAPI}, wire.SessionData{Cols: 80, Rows: 24})
	}
	settle(t, j)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	// The reopened journal ends the session the first one left open, with
	// the seq after the last event written: wait for its writer to have
	// that before looking (Bounds counts only written events).
	settle(t, j2)
	if _, next := j2.Bounds(); next != last+2 {
		t.Errorf("the reopened journal goes on at seq %d; want %d (after the last event written and the session.exited of the restart)", next, last+2)
	}
	// Read from the files: the long record, then every event after it.
	evs := readAll(t, j2, 1, false)
	var seqs []uint64
	for _, ev := range evs {
		if ev.Type == wire.EventGap && ev.Seq != 2 {
			// Only the long record itself (seq 2) may be a gap.
			t.Errorf("a log.gap for more than the long record: seq %d %s", ev.Seq, ev.Data)
		}
		seqs = append(seqs, ev.Seq)
	}
	if n := len(evs); n < int(last) || evs[n-1].Seq != last+1 || evs[n-1].Type != wire.EventSessionExited {
		t.Errorf("read back seqs %v; want them to reach %d, then the restart's session.exited at %d", seqs, last, last+1)
	}
}
