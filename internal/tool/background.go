package tool

import (
	"fmt"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

// BackgroundProcess is a process a command left running when it ended:
// its pid and command line (as the process set it, clamped by limbsd,
// with control characters made visible).
type BackgroundProcess struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
}

// backgroundOf copies limbsd's list of the processes a command left
// running into out.
func backgroundOf(out *ShellOutput, r wire.Result) {
	for _, p := range r.Background {
		out.Background = append(out.Background, BackgroundProcess{PID: p.PID, Command: p.Command})
	}
	out.BackgroundCount = max(r.BackgroundCount, len(r.Background))
}

// backgroundNote is the fact line on the processes a command left
// running, or "" when it left none.
func backgroundNote(o ShellOutput) string {
	n := o.BackgroundCount
	if n == 0 {
		return ""
	}
	ps := make([]string, len(o.Background))
	for i, p := range o.Background {
		ps[i] = fmt.Sprintf("pid %d `%s`", p.PID, p.Command)
	}
	list := strings.Join(ps, ", ")
	if more := n - len(o.Background); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	what := "1 background process still running"
	them := "it keeps"
	if n > 1 {
		what = fmt.Sprintf("%d background processes still running", n)
		them = "they keep"
	}
	return fmt.Sprintf("[%s: %s; %s running after the command, in this session (kill PID stops one)]", what, list, them)
}
