package tool

import (
	"context"
	"strings"
	"testing"
)

// FuzzParsePatch: no input makes the patch parser or the applier panic,
// and a parsed patch's line numbers stay within the input. Seeds are in
// testdata/fuzz/FuzzParsePatch.
func FuzzParsePatch(f *testing.F) {
	f.Add("*** Begin Patch\n*** Add File: a\n+x\n*** End Patch")
	f.Add("*** Begin Patch\n*** Update File: a\n@@ f\n x\n-y\n+z\n*** End of File\n*** End Patch\n")
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ParsePatch(in)
		if err != nil {
			return
		}
		n := strings.Count(in, "\n") + 1
		for _, op := range p.Ops {
			if op.Line < 1 || op.Line > n {
				t.Fatalf("op line %d outside 1..%d", op.Line, n)
			}
			for _, h := range op.Hunks {
				if len(h.Ops) != len(h.Old)+len(h.New)-strings.Count(h.Ops, " ") {
					t.Fatalf("hunk ops %q do not match %d old and %d new lines", h.Ops, len(h.Old), len(h.New))
				}
			}
		}
		m := newMem(map[string]string{"/w/a": "x\ny\n\tz\r\n", "/w/b": ""})
		_, _ = RunApplyPatch(context.Background(), m, "/w", PatchInput{Input: in})
	})
}
