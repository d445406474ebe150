package conformance

import (
	"fmt"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
)

// testOutputBetween: what a background job prints while no command runs
// comes with the next command's first result, marked as such, and is not
// mixed into that command's output.
func testOutputBetween(t *testing.T, c *client.Client) {
	t.Parallel()
	id := newSession(t, c)
	word := fmt.Sprintf("late-%d", rnd())
	first := run(t, c, id, "w="+word+"; (sleep 0.3; echo $w) &")
	wantExit(t, first, 0)
	// Wait until the job has printed, while nothing runs.
	eventually(t, "the background job's output", func() (bool, string) {
		s, err := c.GetSession(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		got := string(raw(t, c, id, first.OffsetEnd, s.OutputOffset))
		return strings.Contains(got, word+"\n"), got
	})
	r := wantOutput(t, c, id, "echo next", "next\n")
	if r.BackgroundOutput != word+"\n" {
		t.Errorf("background_output = %q, want %q", r.BackgroundOutput, word+"\n")
	}
	if len(r.Between) != 2 || !strings.Contains(string(raw(t, c, id, r.Between[0], r.Between[1])), word) {
		t.Errorf("between = %v does not hold the job's output", r.Between)
	}
	// The next one may carry the shell's note that the job is done
	// ("[1]+  Done ..."), never the job's output again nor a prompt.
	for _, cmd := range []string{"echo again", "echo more"} {
		r = wantOutput(t, c, id, cmd, strings.TrimPrefix(cmd, "echo ")+"\n")
		if bg := r.BackgroundOutput; strings.Contains(bg, word) || (bg != "" && !strings.HasSuffix(bg, "\n")) {
			t.Errorf("%s: background_output %q: the job's output again, or a prompt", cmd, bg)
		}
	}
}
