package eventlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestSizeBoundBetweenSweeps: the sweeper runs once a minute, in which a
// sandbox flooding output can write gigabytes; the size bound must hold
// as the log grows, not only when the sweeper comes by.
func TestSizeBoundBetweenSweeps(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{SegmentSize: 1 << 10, MaxSize: 8 << 10, SweepEvery: time.Hour})
	defer l.Close()
	big := strings.Repeat("x", 200)
	var last uint64
	for range 500 {
		evs, err := l.Append("sb_b", wire.Event{Type: wire.EventAPICall, Data: data(wire.APICallData{Path: big})})
		if err != nil {
			t.Fatal(err)
		}
		last = evs[0].Seq
	}
	var total int64
	ents, _ := os.ReadDir(filepath.Join(dir, "sb_b"))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".jsonl") {
			total += fi.Size()
		}
	}
	if total > 8<<10+1<<10 {
		t.Errorf("the log holds %d bytes of segments; want at most MaxSize (%d) and one segment", total, 8<<10)
	}
	evs := readAll(t, l, "sb_b", 1, nil)
	if len(evs) < 2 || evs[0].Type != wire.EventGap || evs[len(evs)-1].Seq != last {
		t.Errorf("read %d events; want a log.gap for what the bound removed, then up to seq %d", len(evs), last)
	}
}
