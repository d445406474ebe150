package perf

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i) // 100 .. 1, unsorted
	}
	s := Summarize(xs)
	want := Stats{N: 100, P50: 50, P90: 90, P99: 99, Min: 1, Max: 100, Mean: 50.5}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if s := Summarize([]float64{7}); s.P99 != 7 || s.Min != 7 {
		t.Errorf("one sample: %+v", s)
	}
}

// TestReportRoundTrip: a report written as JSON reads back, prints its
// rows, ratios and targets, and compares with another run.
func TestReportRoundTrip(t *testing.T) {
	rep := &Report{Machine: ReadMachine(context.Background())}
	rep.Add(Row{Key: "rt/floor", Group: "roundtrip", Name: "raw PTY", Unit: "ms", Stats: Summarize([]float64{0.1, 0.2})})
	rep.Add(Row{Key: "rt/api", Group: "roundtrip", Name: "limbsd API", Unit: "ms", Stats: Summarize([]float64{0.5, 1}), Baseline: "rt/floor"})
	rep.Target("api vs floor", "<= 10x", "5x", true)
	path := filepath.Join(t.TempDir(), "r.json")
	if err := rep.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	old, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := old.Row("rt/api"); !ok || r.Ratio != 5 {
		t.Errorf("read back rt/api = %+v, %v; want ratio 5", r, ok)
	}
	var out bytes.Buffer
	old.Print(&out)
	for _, want := range []string{"[roundtrip]", "limbsd API", "5.00x raw PTY", "PASS  api vs floor: 5x (target <= 10x)", "cores"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	cur := &Report{}
	cur.Add(Row{Key: "rt/api", Name: "limbsd API", Unit: "ms", Stats: Summarize([]float64{1, 2})})
	cur.Add(Row{Key: "rt/new", Name: "new figure", Unit: "ms", Stats: Once(1)})
	out.Reset()
	Compare(&out, old, cur)
	for _, want := range []string{"limbsd API", "2.00", "worse", "only in new: new figure", "only in old: raw PTY"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("comparison lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBaselines runs the host-only baselines a few rounds each.
func TestBaselines(t *testing.T) {
	ctx := context.Background()
	d, err := PingPong(ctx, 5)
	if err != nil || len(d) != 5 {
		t.Fatalf("PingPong: %v %v", d, err)
	}
	took, n, err := ReadLoop(ctx, "head -c 1000000 /dev/zero")
	if err != nil || n < 1000000 || took <= 0 {
		t.Fatalf("ReadLoop: %v %d %v", took, n, err)
	}
	d, err = Silence(ctx, "echo hi", 1, 100*time.Millisecond)
	if err != nil || len(d) != 1 || d[0] < 100*time.Millisecond {
		t.Fatalf("Silence: %v %v", d, err)
	}
	d, err = TmuxPoll(ctx, "echo hi", 1, 100*time.Millisecond)
	if err != nil || len(d) != 1 {
		t.Fatalf("TmuxPoll: %v %v", d, err)
	}
	// OpenHands' loop: each round includes its clear-screen pause, and a
	// command still running at the first read is read again an interval
	// later, until its end shows.
	d, err = TmuxOpenHands(ctx, "echo hi", 2, 100*time.Millisecond, 20*time.Millisecond)
	if err != nil || len(d) != 2 || d[0] < 20*time.Millisecond {
		t.Fatalf("TmuxOpenHands: %v %v", d, err)
	}
	d, err = TmuxOpenHands(ctx, "sleep 0.3", 1, 100*time.Millisecond, 20*time.Millisecond)
	if err != nil || len(d) != 1 || d[0] < 320*time.Millisecond {
		t.Fatalf("TmuxOpenHands of sleep 0.3: %v %v", d, err)
	}
}
