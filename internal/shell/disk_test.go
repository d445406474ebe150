package shell

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"256MiB": 256 << 20, "1GiB": 1 << 30, "4M": 4 << 20, "100": 100, "2 KiB": 2048, "0": -1, "none": -1} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "12XB", "1.5GiB", "99999999999TiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) took it", in)
		}
	}
}

func TestSpanSets(t *testing.T) {
	if got := subtract(span{0, 100}, []span{{10, 20}, {50, 60}}); !slices.Equal(got, []span{{0, 10}, {20, 50}, {60, 100}}) {
		t.Errorf("subtract = %v", got)
	}
	// Overlapping kept ranges (commands that printed nothing) are cut once.
	if got := intersect(span{0, 100}, []span{{10, 30}, {10, 30}, {20, 40}, {90, 200}}); !slices.Equal(got, []span{{10, 40}, {90, 100}}) {
		t.Errorf("intersect = %v", got)
	}
}

// A session keeps at most maxLogs closed command logs, the newest, also
// when they are all empty, and also those a restarted daemon finds.
func TestLogAccountKeepsTheNewestLogs(t *testing.T) {
	dir := t.TempDir()
	a := newLogAccount(&diskPool{}, 0)
	a.most = 3
	logs := func() []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	for i := 1; i <= 5; i++ {
		p := filepath.Join(dir, fmt.Sprintf("c_%d.log", i))
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		a.closed(p, 1)
	}
	if got := strings.Join(logs(), " "); got != "c_3.log c_4.log c_5.log" || len(a.done) != 3 {
		t.Errorf("after 5 logs with a bound of 3: %s (%d kept); want c_3 to c_5", got, len(a.done))
	}
	for i := 6; i <= 7; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("c_%d.log", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := newLogAccount(&diskPool{}, 0)
	b.most = 3
	b.load(dir)
	if got := strings.Join(logs(), " "); got != "c_5.log c_6.log c_7.log" || len(b.done) != 3 {
		t.Errorf("a restarted daemon's account with a bound of 3: %s (%d kept); want c_5 to c_7", got, len(b.done))
	}
}
