package conformance

import (
	"fmt"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// testStopsWholeCommand: a timeout or an interrupt that has to kill the
// command's job ends the whole command text, not just the statement that
// ran (docs/api.md, "Timeouts and interrupts").
func testStopsWholeCommand(t *testing.T, c *client.Client) {
	// stubborn ignores SIGINT and SIGTERM, as a job that needs SIGKILL.
	const stubborn = `(trap "" INT TERM; sleep 100)`
	t.Run("TimeoutSkipsTheRest", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		f := fmt.Sprintf("/tmp/conformance-after-%d", rnd())
		pid := shellPid(t, c, id)
		r := runReq(t, c, id, wire.Exec{Command: stubborn + "; touch " + f + "; echo after", Timeout: 1, YieldAfter: ptr(guardYield)})
		if r.Status != wire.StatusTimeout || r.ExitCode == nil {
			t.Fatalf("status %q exit_code %v (output %q), want timeout with the shell's exit code", r.Status, deref(r.ExitCode), r.Output)
		}
		wantOutput(t, c, id, "sleep 0.5; test -e "+f+" && echo ran || echo skipped; rm -f "+f, "skipped\n")
		if now := shellPid(t, c, id); now != pid {
			t.Errorf("the shell was replaced (pid %d, then %d): the timeout should end the command, not the shell", pid, now)
		}
	})
	t.Run("InterruptSkipsTheRest", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		f := fmt.Sprintf("/tmp/conformance-after-%d", rnd())
		pid := shellPid(t, c, id)
		r := runReq(t, c, id, wire.Exec{Command: stubborn + "; touch " + f, YieldAfter: ptr(0.5)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("status %q, want running", r.Status)
		}
		r, err := c.Interrupt(t.Context(), id, wire.Interrupt{})
		if err != nil {
			t.Fatalf("interrupt: %v", err)
		}
		if r.Status != wire.StatusInterrupted || r.ExitCode == nil {
			t.Fatalf("interrupt: status %q exit_code %v, want interrupted with an exit code", r.Status, deref(r.ExitCode))
		}
		wantOutput(t, c, id, "sleep 0.5; test -e "+f+" && echo ran || echo skipped; rm -f "+f, "skipped\n")
		if now := shellPid(t, c, id); now != pid {
			t.Errorf("the shell was replaced (pid %d, then %d): the interrupt should end the command, not the shell", pid, now)
		}
	})
	t.Run("TimeoutKillsBackgroundChildren", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		n := 3000 + rnd()%5000
		// The subshell's background child ignores SIGINT and is in a
		// process group that is no longer the terminal's foreground.
		r := runReq(t, c, id, wire.Exec{Command: fmt.Sprintf("(sleep %d &); %s", n, stubborn), Timeout: 1, YieldAfter: ptr(guardYield)})
		if r.Status != wire.StatusTimeout {
			t.Fatalf("status %q, want timeout", r.Status)
		}
		count := countSleeps(int(n))
		wantOutput(t, c, id, count, "0\n")
	})
	t.Run("InterruptKillsTheJobsBackgroundChildren", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		n := 3000 + rnd()%5000
		// bash -c's background child ignores SIGINT; SIGINT ends bash -c.
		r := runReq(t, c, id, wire.Exec{Command: fmt.Sprintf("bash -c 'sleep %d & sleep 100'", n), YieldAfter: ptr(0.5)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("status %q, want running", r.Status)
		}
		if r, err := c.Interrupt(t.Context(), id, wire.Interrupt{}); err != nil || r.Status != wire.StatusInterrupted {
			t.Fatalf("interrupt: %v, status %q", err, r.Status)
		}
		count := countSleeps(int(n))
		wantOutput(t, c, id, count, "0\n")
	})
}

// countSleeps is a command that prints how many `sleep n` processes
// run. It forks nothing per process: with a host's /proc (the local
// provider) a tr per process took longer than a result's yield on a busy
// machine.
func countSleeps(n int) string {
	return fmt.Sprintf(`n=0; for p in /proc/[0-9]*; do { IFS= read -r -d '' a && IFS= read -r -d '' b; } < $p/cmdline 2>/dev/null && [ "$a $b" = "sleep %d" ] && n=$((n+1)); done 2>/dev/null; echo $n`, n)
}

// shellPid is the pid of the session's shell, after a first command.
func shellPid(t *testing.T, c *client.Client, id string) int {
	t.Helper()
	run(t, c, id, "true")
	s, err := c.GetSession(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s.Pid
}
