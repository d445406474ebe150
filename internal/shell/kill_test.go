package shell

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

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

// A terminal's number is unique only within one devpts instance: a
// container or bubblewrap sandbox on the same host has its own, and its
// processes show the same numbers. Before this check, a daemon on the host
// ending a session took (and SIGKILLed) every process of every container
// whose controlling terminal had the session's number.
func TestKillTreeSparesOtherPIDNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: unshare --pid")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(tty.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	// A process in a PID namespace of its own, whose controlling terminal
	// is this terminal: what a container's shell looks like from the host.
	// unshare itself holds nothing of the terminal, as a container's shim.
	c := exec.Command("unshare", "--pid", "--fork", "--kill-child", "sh", "-c",
		"exec setsid -c sleep 60 <"+tty.Name()+" >/dev/null 2>&1")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	var sleeper int
	testbin.Eventually(t, "the sleep in its own namespace", 10*time.Second, func() bool {
		for _, pid := range allPids() {
			if s, ok := readStat(pid); ok && s.ppid == c.Process.Pid && s.tty == st.Rdev {
				sleeper = pid
				return true
			}
		}
		return false
	})
	g := newProcGroup(0, st.Rdev, false)
	if !g.ours(c.Process.Pid) {
		t.Fatalf("unshare (pid %d) runs in the daemon's namespace but is not counted as ours", c.Process.Pid)
	}
	if g.ours(sleeper) {
		t.Fatalf("pid %d runs in a PID namespace of its own but is counted as ours", sleeper)
	}
	for _, m := range g.scan(true) {
		if m.pid == sleeper {
			t.Fatalf("scan took pid %d of another PID namespace for a member by its terminal number", sleeper)
		}
	}
}
