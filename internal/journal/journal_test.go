package journal

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// settle waits until the writer has every event appended.
func settle(t *testing.T, j *Journal) {
	t.Helper()
	j.Flush()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j.mu.Lock()
		all := j.written == j.next
		j.mu.Unlock()
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the journal's writer did not catch up within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// readAll reads every event from from on once the writer has them.
func readAll(t *testing.T, j *Journal, from uint64, bytes bool) []wire.Event {
	t.Helper()
	settle(t, j)
	var out []wire.Event
	for range 100000 {
		evs, next := j.Read(from, 100, bytes)
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		from = next
	}
	return out
}

func TestJournalRestartEndsWhatRan(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	j.Append(wire.Event{Session: "s_1", Type: wire.EventSessionCreated, Source: wire.SourceAPI}, wire.SessionData{Name: "a"})
	started := j.Append(wire.Event{Session: "s_1", Command: "c_1", Type: wire.EventCommandStarted, Source: wire.SourceAPI}, wire.CommandStartedData{Text: "sleep 100", Via: "exec"})
	j.Output("s_1", 0, []byte("hello"))
	id := j.ID()
	// No Close: a limbsd killed with kill -9 leaves only what its writer
	// handed to the kernel.
	readAll(t, j, 1, false)
	j2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	defer j.Close()
	if j2.ID() != id {
		t.Errorf("journal id after a restart = %q, want %q", j2.ID(), id)
	}
	evs := readAll(t, j2, 1, false)
	var types []wire.EventType
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Errorf("event %d has seq %d", i, ev.Seq)
		}
		types = append(types, ev.Type)
	}
	want := []wire.EventType{wire.EventSessionCreated, wire.EventCommandStarted, wire.EventOutput, wire.EventCommandFinished, wire.EventSessionExited}
	if len(types) != len(want) {
		t.Fatalf("events after restart: %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("events after restart: %v, want %v", types, want)
		}
	}
	fin := evs[3]
	var d wire.CommandFinishedData
	_ = json.Unmarshal(fin.Data, &d)
	if fin.Cause != started || fin.Command != "c_1" || d.Status != wire.StatusLost || d.Reason != ReasonLimbsdExited || d.OffsetEnd != 5 {
		t.Errorf("the cut command's end: %+v %+v", fin, d)
	}
}

func TestJournalSlowReaderGetsGap(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(Options{Dir: dir, RingEvents: 64, MaxDisk: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i := range 2000 {
		j.Append(wire.Event{Session: "s_1", Type: wire.EventInput, Source: wire.SourceAPI}, wire.InputData{Text: "some text typed into the terminal " + string(rune('a'+i%26))})
		if i%32 == 31 {
			// The writer keeps up (a writer behind the ring is a gap of
			// its own, TestJournalFullDisk): the disk bound drops these.
			settle(t, j)
		}
	}
	evs := readAll(t, j, 1, false)
	if len(evs) == 0 || evs[0].Type != wire.EventGap {
		t.Fatalf("a reader from seq 1 after the bound cut the journal got %d events, the first %+v; want a log.gap first", len(evs), evs)
	}
	var g wire.GapData
	_ = json.Unmarshal(evs[0].Data, &g)
	if g.From != 1 || g.To <= 1 || evs[0].Seq != g.To-1 || g.Reason == "" {
		t.Errorf("gap %+v (seq %d)", g, evs[0].Seq)
	}
	next := g.To
	for _, ev := range evs[1:] {
		if ev.Seq != next {
			t.Fatalf("after the gap: seq %d, want %d", ev.Seq, next)
		}
		next++
	}
	if next != 2001 {
		t.Errorf("read up to %d, want 2001", next)
	}
}

func TestJournalOutputBytes(t *testing.T) {
	dir := t.TempDir()
	// A ring too small for the output: bytes come from the spool.
	j, err := Open(Options{Dir: dir, RingEvents: 256, RingBytes: 128 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var want []byte
	var off int64
	for i := range 300 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 100+i*37%5000)
		j.Output("s_1", off, p)
		off += int64(len(p))
		want = append(want, p...)
	}
	evs := readAll(t, j, 1, true)
	var got []byte
	for _, ev := range evs {
		if ev.Type != wire.EventOutput {
			t.Fatalf("event %+v", ev)
		}
		var d wire.OutputData
		_ = json.Unmarshal(ev.Data, &d)
		if d.Offset != int64(len(got)) || int64(len(d.Bytes)) != d.Size {
			t.Fatalf("output event at %d of %d bytes holds %d, want offset %d", d.Offset, d.Size, len(d.Bytes), len(got))
		}
		got = append(got, d.Bytes...)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the output events' bytes (%d) differ from the output (%d)", len(got), len(want))
	}
}

// TestJournalFullDisk: writes that fail (a full disk, here /dev/full)
// never stop appends; readers get the events from memory while they are
// there, and a log.gap naming the failed write once they are not.
func TestJournalFullDisk(t *testing.T) {
	dir := t.TempDir()
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	if err := os.Symlink("/dev/full", segPath(dir, "events-", 1)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "id"), []byte("j_test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logged := &syncWriter{w: &bytes.Buffer{}}
	j, err := Open(Options{Dir: dir, RingEvents: 32, Logger: slog.New(slog.NewTextHandler(logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for range 20 {
		j.Append(wire.Event{Session: "s_1", Type: wire.EventInput, Source: wire.SourceAPI}, wire.InputData{Text: "x"})
	}
	evs := readAll(t, j, 1, false)
	if len(evs) != 20 || evs[0].Seq != 1 || evs[0].Type != wire.EventInput {
		t.Fatalf("with the disk full, %d events from memory (first %+v), want all 20", len(evs), evs)
	}
	for range 100 {
		j.Append(wire.Event{Session: "s_1", Type: wire.EventInput, Source: wire.SourceAPI}, wire.InputData{Text: "y"})
	}
	evs = readAll(t, j, 1, false)
	if len(evs) == 0 || evs[0].Type != wire.EventGap {
		t.Fatalf("after the ring dropped unwritten events: %+v, want a log.gap first", evs)
	}
	if g := dataOf(t, evs[0]); g.From != 1 || !strings.Contains(g.Reason, "write") {
		t.Errorf("gap %+v: want it from 1, naming the failed write", g)
	}
	if log := logged.String(); !strings.Contains(log, "writing the event journal failed") {
		t.Errorf("the failed write was not logged: %q", log)
	}
}

func dataOf(t *testing.T, ev wire.Event) wire.GapData {
	t.Helper()
	var g wire.GapData
	if err := json.Unmarshal(ev.Data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// TestJournalOutputRoom: a chunk of more than a line or two gets a whole
// event's room at once (no regrowth per read of a burst); an event that
// ends short keeps only its bytes, which is what the ring counts.
func TestJournalOutputRoom(t *testing.T) {
	j, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var off int64
	for _, n := range []int{600, 3, OutputMax + 5000, 40} {
		j.Output("s_1", off, bytes.Repeat([]byte{'x'}, n))
		off += int64(n)
		j.Flush()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	var held int64
	for seq := j.first; seq < j.next; seq++ {
		e := j.ring[seq%uint64(len(j.ring))]
		if cap(e.bytes) > 2*len(e.bytes) && cap(e.bytes) > 64 {
			t.Errorf("event %d holds %d bytes in room for %d", seq, len(e.bytes), cap(e.bytes))
		}
		held += int64(len(e.bytes))
	}
	if held != j.memOut || held != off {
		t.Errorf("the ring holds %d output bytes, counts %d; %d were written", held, j.memOut, off)
	}
}
