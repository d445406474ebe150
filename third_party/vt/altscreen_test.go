package vt

import (
	"strings"
	"testing"
)

// The alternate screen costs nothing until used, and then has the main
// screen's size, also after a resize before its first use.
func TestAltScreenSizedOnFirstUse(t *testing.T) {
	e := NewEmulator(160, 40)
	if w, h := e.scrs[1].Width(), e.scrs[1].Height(); w*h > 1 {
		t.Fatalf("unused alternate screen of %dx%d, want 1x1", w, h)
	}
	e.Resize(50, 7)
	if _, err := e.Write([]byte("main\x1b[?1049h\x1b[7;1H" + strings.Repeat("x", 50))); err != nil {
		t.Fatal(err)
	}
	if !e.IsAltScreen() || e.scr.Width() != 50 || e.scr.Height() != 7 {
		t.Fatalf("alternate screen %v of %dx%d, want 50x7", e.IsAltScreen(), e.scr.Width(), e.scr.Height())
	}
	for x := range 50 {
		if c := e.CellAt(x, 6); c == nil || c.Content != "x" {
			t.Fatalf("cell (%d,6) = %+v, want x", x, c)
		}
	}
}
