package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

func open(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	opts.Dir = dir
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func data(v any) json.RawMessage { b, _ := json.Marshal(v); return b }

func readAll(t testing.TB, l *Log, id string, from uint64, f Filter) []wire.Event {
	t.Helper()
	r := l.NewReader(id, from, f)
	var out []wire.Event
	for range 1000 {
		evs, err := r.Read(100)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 && r.Next() > l.Last(id) {
			return out
		}
		out = append(out, evs...)
	}
	t.Fatal("reading never ended")
	return nil
}

func checkSeqs(t *testing.T, evs []wire.Event, first, n uint64) {
	t.Helper()
	if uint64(len(evs)) != n {
		t.Fatalf("%d events, want %d", len(evs), n)
	}
	for i, ev := range evs {
		if ev.Seq != first+uint64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, ev.Seq, first+uint64(i))
		}
	}
}

// Seqs are gap-free and in order across a reopen, over many segments, and
// a torn last line (a host crash) is cut, not served.
func TestAppendReopenGapFree(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{SegmentSize: 4 << 10})
	for i := range 500 {
		if _, err := l.Append("sb_a", wire.Event{Type: wire.EventAPICall, Data: data(wire.APICallData{Method: "GET", Path: "/" + strconv.Itoa(i)})}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Append("sb_b", wire.Event{Type: wire.EventSandboxCreated}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "sb_a", "*.jsonl"))
	if len(segs) < 5 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	// A torn write at the end of the last segment.
	f, _ := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"seq":501,"time":"20`)
	f.Close()

	l = open(t, dir, Options{SegmentSize: 4 << 10})
	defer l.Close()
	evs, err := l.Append("sb_a", wire.Event{Type: wire.EventSandboxStopped})
	if err != nil || evs[0].Seq != 501 {
		t.Fatalf("append after reopen = %+v, %v; want seq 501", evs, err)
	}
	got := readAll(t, l, "sb_a", 0, nil)
	checkSeqs(t, got, 1, 501)
	var cursors []uint64
	for _, ev := range got {
		cursors = append(cursors, ev.Cursor)
	}
	for i := 1; i < len(cursors); i++ {
		if cursors[i] <= cursors[i-1] {
			t.Fatalf("cursor %d after %d", cursors[i], cursors[i-1])
		}
	}
	if got[500].Cursor != 502 {
		t.Errorf("cursor after reopen %d, want 502 (sb_b had 501)", got[500].Cursor)
	}
	from := readAll(t, l, "sb_a", 250, nil)
	checkSeqs(t, from, 250, 252)
}

func TestFilter(t *testing.T) {
	l := open(t, t.TempDir(), Options{})
	defer l.Close()
	for _, typ := range []wire.EventType{wire.EventCommandStarted, wire.EventOutput, wire.EventCommandFinished, wire.EventAPICall, wire.EventSessionCreated} {
		if _, err := l.Append("sb_f", wire.Event{Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ filter, want string }{
		{"", "command.started output command.finished api.call session.created"},
		{"command.*", "command.started command.finished"},
		{"output,api.call", "output api.call"},
		{"session.*|output", "output session.created"},
	} {
		f, err := ParseFilter(tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range readAll(t, l, "sb_f", 0, f) {
			got = append(got, string(ev.Type))
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("type=%s: %v, want %s", tc.filter, got, tc.want)
		}
	}
	if _, err := ParseFilter("co*mmand"); err == nil {
		t.Error("a '*' inside a type was accepted")
	}
}

// Ingest keeps the journal's position with the events: a follower that
// sends again what was stored (it resumed from an older position) adds
// nothing, causes are translated and contiguous output is coalesced.
func TestIngestUpstream(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{})
	if _, err := l.Append("sb_i", wire.Event{Type: wire.EventSandboxCreated}); err != nil {
		t.Fatal(err)
	}
	out := func(off int64, s string) wire.Event {
		return wire.Event{Type: wire.EventOutput, Session: "s_1", Data: data(wire.OutputData{Offset: off, Size: int64(len(s)), Bytes: []byte(s)})}
	}
	batch := []wire.Event{
		{Seq: 10, Type: wire.EventCommandStarted, Session: "s_1"},
		withSeq(out(0, "hel"), 11),
		withSeq(out(3, "lo\n"), 12),
		{Seq: 13, Cause: 10, Type: wire.EventCommandFinished, Session: "s_1"},
	}
	evs, err := l.Ingest("sb_i", "j_1", batch...)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || evs[2].Cause != evs[0].Seq {
		t.Fatalf("ingested %+v; want 3 events (output coalesced), the last caused by the first", evs)
	}
	var od wire.OutputData
	json.Unmarshal(evs[1].Data, &od)
	if string(od.Bytes) != "hello\n" || od.Size != 6 {
		t.Errorf("coalesced output %+v", od)
	}
	l.Close()
	l = open(t, dir, Options{})
	defer l.Close()
	up, err := l.Upstream("sb_i")
	if err != nil || up != (Upstream{Journal: "j_1", Seq: 13}) {
		t.Fatalf("Upstream after reopen = %+v, %v", up, err)
	}
	again, err := l.Ingest("sb_i", "j_1", append(batch, wire.Event{Seq: 14, Type: wire.EventSessionClosed})...)
	if err != nil || len(again) != 1 || again[0].Seq != 5 {
		t.Fatalf("ingest again = %+v, %v; want only seq 14, as seq 5", again, err)
	}
	// A new journal (limbsd's state was lost) starts over.
	if evs, _ := l.Ingest("sb_i", "j_2", wire.Event{Seq: 1, Type: wire.EventSessionCreated}); len(evs) != 1 {
		t.Errorf("a new journal's first event was not ingested: %+v", evs)
	}
}

func withSeq(ev wire.Event, seq uint64) wire.Event { ev.Seq = seq; return ev }

func TestRetention(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	clock := func() time.Time { return now }
	l := open(t, dir, Options{SegmentSize: 1 << 10, MaxSize: 8 << 10, Now: clock, KeepDeleted: time.Hour})
	defer l.Close()
	big := strings.Repeat("x", 200)
	for range 200 {
		if _, err := l.Append("sb_r", wire.Event{Type: wire.EventAPICall, Data: data(wire.APICallData{Path: big})}); err != nil {
			t.Fatal(err)
		}
	}
	l.Sweep()
	evs := readAll(t, l, "sb_r", 1, nil)
	if len(evs) == 0 || evs[0].Type != wire.EventGap {
		t.Fatalf("first event after retention: %+v, want log.gap", evs[:1])
	}
	var g wire.GapData
	json.Unmarshal(evs[0].Data, &g)
	if g.From != 1 || g.To != evs[1].Seq || evs[len(evs)-1].Seq != 200 {
		t.Errorf("gap %+v, then %d..%d", g, evs[1].Seq, evs[len(evs)-1].Seq)
	}
	l.SetName("sb_r", "named")
	l.MarkDeleted("sb_r", now)
	if d, ok := l.FindDeleted("named"); !ok || d.ID != "sb_r" {
		t.Fatalf("FindDeleted(named) = %+v, %v", d, ok)
	}
	l.Sweep()
	if _, ok := l.FindDeleted("sb_r"); !ok {
		t.Fatal("the log of a sandbox deleted within the window was removed")
	}
	now = now.Add(2 * time.Hour)
	l.Sweep()
	if _, ok := l.FindDeleted("sb_r"); ok {
		t.Error("the log of a sandbox deleted past the window is kept")
	}
	if _, err := os.Stat(filepath.Join(dir, "sb_r")); !os.IsNotExist(err) {
		t.Errorf("its directory: %v", err)
	}
	// Cursors never go back, even with every log gone.
	l.Close()
	l2 := open(t, dir, Options{})
	defer l2.Close()
	evs, _ = l2.Append("sb_n", wire.Event{Type: wire.EventSandboxCreated})
	if evs[0].Cursor != 201 {
		t.Errorf("cursor after every log was removed: %d, want 201", evs[0].Cursor)
	}
}

// The global reader returns every event of every sandbox once, in cursor
// order, from the ring and from disk alike, and a reader that resumes
// from its last cursor misses nothing.
func TestGlobalReader(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{RingBytes: 4 << 10, SegmentSize: 2 << 10})
	for i := range 300 {
		id := fmt.Sprintf("sb_%d", i%7)
		if _, err := l.Append(id, wire.Event{Type: wire.EventAPICall}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(l *Log, from uint64, chunk int) {
		t.Helper()
		var got []uint64
		cur := from
		for range 1000 {
			g := l.NewGlobalReader(cur, nil) // a reconnect every read
			evs, err := g.Read(chunk)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				got = append(got, ev.Cursor)
			}
			cur = g.Cursor()
			if len(evs) == 0 {
				break
			}
		}
		if len(got) != int(300-from) {
			t.Fatalf("from %d: %d events, want %d", from, len(got), 300-from)
		}
		for i, c := range got {
			if c != from+uint64(i)+1 {
				t.Fatalf("from %d: event %d has cursor %d", from, i, c)
			}
		}
	}
	check(l, 0, 17)   // mostly from disk
	check(l, 290, 3)  // from the ring
	check(l, 100, 50) // disk then ring
	l.Close()
	l = open(t, dir, Options{})
	defer l.Close()
	check(l, 0, 64)
	// A follower waiting at the end is woken by the next append.
	g := l.NewGlobalReader(300, nil)
	done := make(chan error, 1)
	go func() { done <- g.Wait(context.Background()) }()
	l.Append("sb_x", wire.Event{Type: wire.EventSandboxCreated})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if evs, _ := g.Read(10); len(evs) != 1 || evs[0].Sandbox != "sb_x" {
		t.Errorf("after the wait: %+v", evs)
	}
}

func TestMaskedInEvents(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{})
	const sec = "hunter2-s3cr3t"
	l.SetSecrets("sb_m", []string{sec})
	l.Append("sb_m", wire.Event{Type: wire.EventCommandStarted, Data: data(wire.CommandStartedData{Text: "echo " + sec})})
	l.Ingest("sb_m", "j", wire.Event{Seq: 1, Type: wire.EventOutput, Data: data(wire.OutputData{Size: 20, Bytes: []byte("say " + sec + "\r\n")})})
	for _, ev := range readAll(t, l, "sb_m", 0, nil) {
		if strings.Contains(string(ev.Data), "hunter2") {
			t.Errorf("event %s holds the secret: %s", ev.Type, ev.Data)
		}
	}
	l.Close()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte(sec)) || bytes.Contains(b, []byte("aHVudGVy")) {
				t.Errorf("%s holds the secret", p)
			}
		}
		return nil
	})
}

// BenchmarkIngest appends API-call sized events one by one and in batches
// of 100; it reports events per second (target: at least 50,000).
func BenchmarkIngest(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			l := open(b, b.TempDir(), Options{})
			defer l.Close()
			evs := make([]wire.Event, batch)
			for i := range evs {
				evs[i] = wire.Event{Type: wire.EventCommandFinished, Session: "s_1", Source: wire.SourceAPI, Data: data(wire.CommandFinishedData{Status: "done", DurationMs: 12, OffsetEnd: 1234})}
			}
			b.ResetTimer()
			n := 0
			for b.Loop() {
				if _, err := l.Append("sb_bench", evs...); err != nil {
					b.Fatal(err)
				}
				n += batch
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkOutputRSS appends 1 GiB of output in 4 KiB chunks (coalesced
// by 16) and reports the process's RSS at a quarter and at the end: it
// stays flat (the log keeps no output in memory but its bounded ring).
func BenchmarkOutputRSS(b *testing.B) {
	for b.Loop() {
		l := open(b, b.TempDir(), Options{MaxSize: -1})
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 256)
		total := 1 << 30
		if mib, err := strconv.Atoi(os.Getenv("EVENTLOG_BENCH_MIB")); err == nil {
			total = mib << 20 // a shorter run (profiles)
		}
		var rss [2]float64
		batch := make([]wire.Event, 16)
		var off int64
		for n := 0; n < total; n += len(chunk) * len(batch) {
			for i := range batch {
				batch[i] = wire.Event{Seq: uint64(off) + 1, Type: wire.EventOutput, Session: "s_1", Data: data(wire.OutputData{Offset: off, Size: int64(len(chunk)), Bytes: chunk})}
				off += int64(len(chunk))
			}
			if _, err := l.Ingest("sb_rss", "j", batch...); err != nil {
				b.Fatal(err)
			}
			if n == total/4/(len(chunk)*len(batch))*(len(chunk)*len(batch)) {
				rss[0] = vmRSS()
			}
		}
		runtime.GC()
		rss[1] = vmRSS()
		l.Close()
		b.ReportMetric(rss[0], "MiB-RSS-at-256MiB")
		b.ReportMetric(rss[1], "MiB-RSS-at-1GiB")
	}
}

func vmRSS() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, ln := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(ln, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// The journal position survives segments without any ingested event
// after it (meta.json keeps it at each new segment).
func TestUpstreamAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{SegmentSize: 512})
	for i := range 20 {
		if _, err := l.Ingest("sb_u", "j_9", wire.Event{Seq: uint64(i + 1), Type: wire.EventCommandStarted}); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		l.Append("sb_u", wire.Event{Type: wire.EventAPICall, Data: data(wire.APICallData{Path: strings.Repeat("p", 50)})})
	}
	l.Close()
	if segs, _ := filepath.Glob(filepath.Join(dir, "sb_u", "*.jsonl")); len(segs) < 5 {
		t.Fatalf("%d segments", len(segs))
	}
	l = open(t, dir, Options{SegmentSize: 512})
	defer l.Close()
	if up, err := l.Upstream("sb_u"); err != nil || up != (Upstream{Journal: "j_9", Seq: 20}) {
		t.Errorf("Upstream = %+v, %v; want j_9 20", up, err)
	}
}

// TestIngestLargeOutput: output events too big to merge are kept as they
// came, byte for byte, and one whose data spans lines (a limbsd may send
// any valid JSON) is still one line of the log; a secret in one is masked.
func TestIngestLargeOutput(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{})
	defer l.Close()
	const sec = "s3cr3t-in-a-flood"
	l.SetSecrets("sb_big", []string{sec})
	big := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	withSecret := append(append([]byte{}, big[:1000]...), sec...)
	multi := []byte("{\n\"offset\": " + strconv.Itoa(2*len(big)) + ",\n\"size\": 5,\n\"bytes\": \"aGVsbG8=\"\n}")
	multi = append(multi[:len(multi)-1], bytes.Repeat([]byte(" "), maxMergeData)...)
	multi = append(multi, '}')
	evs := []wire.Event{
		{Seq: 1, Type: wire.EventOutput, Session: "s_1", Data: data(wire.OutputData{Offset: 0, Size: int64(len(big)), Bytes: big})},
		{Seq: 2, Type: wire.EventOutput, Session: "s_1", Data: data(wire.OutputData{Offset: int64(len(big)), Size: int64(len(withSecret)), Bytes: withSecret})},
		{Seq: 3, Type: wire.EventOutput, Session: "s_1", Data: multi},
		{Seq: 4, Type: wire.EventCommandFinished, Session: "s_1"},
	}
	if len(evs[0].Data) <= maxMergeData || len(multi) <= maxMergeData {
		t.Fatalf("the events are not big enough to test the path: %d, %d", len(evs[0].Data), len(multi))
	}
	if _, err := l.Ingest("sb_big", "j", evs...); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, l, "sb_big", 0, nil)
	if len(got) != 4 {
		t.Fatalf("read %d events, want 4", len(got))
	}
	var od wire.OutputData
	if err := json.Unmarshal(got[0].Data, &od); err != nil || !bytes.Equal(od.Bytes, big) {
		t.Errorf("the 64 KiB output came back changed (%v)", err)
	}
	if err := json.Unmarshal(got[1].Data, &od); err != nil || bytes.Contains(od.Bytes, []byte(sec)) || len(od.Bytes) == 0 {
		t.Errorf("a large output event holds the secret, or is lost (%v)", err)
	}
	if err := json.Unmarshal(got[2].Data, &od); err != nil || string(od.Bytes) != "hello" {
		t.Errorf("the multi-line data came back as %q (%v)", got[2].Data, err)
	}
	if got[3].Type != wire.EventCommandFinished {
		t.Errorf("the event after the multi-line one is %s: the log's lines broke", got[3].Type)
	}
}

// TestCausesHoldRunningCommands: the map from journal seqs to the log's
// holds the commands still running, not every event ingested, and a
// command's signal and end still name its start after many others ran.
func TestCausesHoldRunningCommands(t *testing.T) {
	l := open(t, t.TempDir(), Options{})
	defer l.Close()
	seq := uint64(0)
	next := func() uint64 { seq++; return seq }
	long := next()
	first, err := l.Ingest("sb_c", "j_1", wire.Event{Seq: long, Type: wire.EventCommandStarted, Session: "s_1", Command: "c_long"})
	if err != nil || len(first) != 1 {
		t.Fatalf("ingest = %+v, %v", first, err)
	}
	for i := range 3 * maxCauses {
		st := next()
		batch := []wire.Event{
			{Seq: st, Type: wire.EventCommandStarted, Session: "s_2"},
			{Seq: next(), Type: wire.EventInput, Session: "s_2"},
			{Seq: next(), Cause: st, Type: wire.EventCommandFinished, Session: "s_2"},
		}
		evs, err := l.Ingest("sb_c", "j_1", batch...)
		if err != nil || len(evs) != 3 || evs[2].Cause != evs[0].Seq {
			t.Fatalf("command %d: ingested %+v, %v; want its end caused by its start", i, evs, err)
		}
	}
	evs, err := l.Ingest("sb_c", "j_1",
		wire.Event{Seq: next(), Cause: long, Type: wire.EventCommandSignal, Session: "s_1", Command: "c_long"},
		wire.Event{Seq: next(), Cause: long, Type: wire.EventCommandFinished, Session: "s_1", Command: "c_long"})
	if err != nil || len(evs) != 2 || evs[0].Cause != first[0].Seq || evs[1].Cause != first[0].Seq {
		t.Fatalf("the long command's signal and end = %+v, %v; want both caused by seq %d", evs, err, first[0].Seq)
	}
	l.mu.Lock()
	n := len(l.logs["sb_c"].causes)
	l.mu.Unlock()
	if n > endedCauses {
		t.Errorf("causes holds %d entries after every command ended; want at most the %d last ended", n, endedCauses)
	}
	// An end ingested again (its first write failed) and a signal noted
	// after the end still name the start.
	st := next()
	if _, err := l.Ingest("sb_c", "j_1", wire.Event{Seq: st, Type: wire.EventCommandStarted, Session: "s_3"}); err != nil {
		t.Fatal(err)
	}
	end := wire.Event{Seq: next(), Cause: st, Type: wire.EventCommandFinished, Session: "s_3"}
	late := wire.Event{Seq: next(), Cause: st, Type: wire.EventCommandSignal, Session: "s_3"}
	a, err := l.Ingest("sb_c", "j_1", end)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Ingest("sb_c", "j_1", late)
	if err != nil || len(a) != 1 || len(b) != 1 || a[0].Cause == 0 || b[0].Cause != a[0].Cause {
		t.Errorf("an end and a signal after it: %+v %+v (%v); want both caused by the start", a, b, err)
	}
}
