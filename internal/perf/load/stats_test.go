package load

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	want := Latency{N: 100, P50: 50, P90: 90, P99: 99, Min: 1, Max: 100}
	if got != want {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (Latency{}) {
		t.Errorf("summarize(nil) = %+v", got)
	}
}

func TestSlope(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	ys := []float64{1, 3, 5, 7, 9}
	if b, se := slope(xs, ys); b != 2 || se != 0 {
		t.Errorf("slope of a line of slope 2 = %v ± %v", b, se)
	}
	samples := []Sample{}
	for i := range 20 {
		samples = append(samples, Sample{T: float64(i * 30), ServeRSSKiB: 30 << 10, ServeFDs: 90, LimbsdRSSKiB: 64 << 10, LimbsdFDs: 100, Limbsds: 8})
	}
	for _, s := range slopes(samples, 600) {
		if !s.Flat || s.PerMinute != 0 {
			t.Errorf("constant %s: %+v", s.Name, s)
		}
	}
	// 1 MiB a minute is a leak over ten minutes.
	for i := range samples {
		samples[i].ServeRSSKiB += int64(samples[i].T / 60 * 1024)
	}
	for _, s := range slopes(samples, 600) {
		if s.Name == "serve RSS" && s.Flat {
			t.Errorf("serve RSS growing 1 MiB a minute is called flat: %+v", s)
		}
	}
}

// A token of another command in an output is a result delivered to the
// wrong client: foreign names its owner.
func TestForeignToken(t *testing.T) {
	r := &run{tokens: map[string]int{"tk0000000000000001": 1, "tk0000000000000002": 2}}
	own := &record{token: "tk0000000000000001"}
	if got := r.foreign(own, expected(KindChatty, own.token)); got != "" {
		t.Errorf("its own output: %q", got)
	}
	got := r.foreign(own, "tk0000000000000001\ntk0000000000000002\n")
	if got != "holds token tk0000000000000002 of client 2" {
		t.Errorf("another's token: %q", got)
	}
	if got := r.foreign(own, "tk00000000000000ff"); got != "holds token tk00000000000000ff of no command" {
		t.Errorf("an unknown token: %q", got)
	}
}
