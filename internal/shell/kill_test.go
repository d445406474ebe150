package shell

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"
)

// A shell that exits while a background job it started keeps the terminal
// open is replaced: its terminal is hung up instead of waiting for the job
// to end, and the session answers again.
func TestShellExitWithTerminalHolderGetsNewShell(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	old := s.Info().Pid
	r := run(t, s, "sleep 1000 & echo $!; exit")
	if !r.ShellExited {
		t.Fatalf("exit: %+v", r)
	}
	job, err := strconv.Atoi(strings.TrimSpace(r.Output))
	if err != nil {
		t.Fatalf("the background job's pid: %q", r.Output)
	}
	// The job outlives its shell (a shell's exit does not end its jobs).
	t.Cleanup(func() { _ = syscall.Kill(job, syscall.SIGKILL) })
	testbin.Eventually(t, "a new shell", 10*time.Second, func() bool {
		i := s.Info()
		return i.Pid != 0 && i.Pid != old
	})
	if r := run(t, s, "echo next"); r.Output != "next\n" {
		t.Errorf("after the shell exited: %+v", r)
	}
}
