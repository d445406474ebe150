package shell

import (
	"slices"
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
