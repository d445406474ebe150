package shell

import (
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestDisabledBuiltinsDoNotHang: `enable -n builtin` (or unset) makes
// every `builtin X` of limbs' steps fail; __limbs_z then sourced the end
// file, whose last step calls __limbs_z again while __limbs_s is set: a
// recursion without end, and the session ran forever. The commands must
// end (by process state when the markers cannot be printed) and their
// output must be theirs.
func TestDisabledBuiltinsDoNotHang(t *testing.T) {
	m := newTestManager(t)
	for _, dis := range []string{"builtin", "unset", "builtin unset declare printf"} {
		t.Run(strings.ReplaceAll(dis, " ", "_"), func(t *testing.T) {
			s := newTestSession(t, m)
			for i, cmd := range []string{"enable -n " + dis, "echo ok", "echo ok"} {
				r := run(t, s, cmd)
				if r.Status != wire.StatusExited {
					t.Fatalf("%q: status %s output %q, want exited", cmd, r.Status, head(r.Output))
				}
				if i > 0 && r.Output != "ok\n" {
					t.Errorf("%q: output %q, want \"ok\\n\"", cmd, r.Output)
				}
				if r.ExitCode != nil && *r.ExitCode != 0 {
					t.Errorf("%q: exit code %d, want 0 (or null when it could not be known)", cmd, *r.ExitCode)
				}
			}
		})
	}
}
