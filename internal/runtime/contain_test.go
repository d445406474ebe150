package runtime_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The containment tests run the session's programs under a uid of their
// own (setpriv), for two reasons: RLIMIT_NPROC (ulimit -u), which bounds
// the fork bomb on this shared machine, is not enforced for root; and the
// test can then tell every process the session started, wherever it went,
// by its real uid.

// asUser prefixes a command so that it runs as uid with no groups.
func asUser(t *testing.T, uid int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test runs the session's programs under a uid of their own")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux) to run programs under another uid")
	}
	t.Cleanup(func() { endUID(t, uid) })
	return fmt.Sprintf("setpriv --reuid=%d --regid=%d --clear-groups", uid, uid)
}

// procsOf lists the live (not zombie) processes whose real uid is uid.
func procsOf(uid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var state string
		realUID := -1
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "State:"); ok {
				state = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					realUID, _ = strconv.Atoi(f[0])
				}
			}
		}
		if realUID == uid && !strings.HasPrefix(state, "Z") && !strings.HasPrefix(state, "X") {
			out = append(out, pid)
		}
	}
	return out
}

// endUID ends every process of uid (they are the test's own: the uid is
// used by nothing else), stopping them before killing them.
func endUID(t *testing.T, uid int) {
	for range 2000 {
		ps := procsOf(uid)
		if len(ps) == 0 {
			return
		}
		for _, pid := range ps {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		for _, pid := range procsOf(uid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
	t.Errorf("processes of uid %d still there after the test: %v", uid, procsOf(uid))
}

// onlySleeps reports whether uid has n processes, all of them sleep: setsid
// and nohup have exec'd it, and the parents setsid forks from have exited.
func onlySleeps(uid, n int) bool {
	ps := procsOf(uid)
	for _, p := range ps {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm"); string(b) != "sleep\n" {
			return false
		}
	}
	return len(ps) == n
}

// zombiesOf lists the zombie children of pid.
func zombiesOf(pid int) []int {
	var out []int
	sts, _ := sandbox.ProcStats()
	for _, st := range sts {
		if st.State == "Z" && st.PPid == pid {
			out = append(out, st.Pid)
		}
	}
	return out
}

// openFDs lists the descriptors pid has open, with what they name.
func openFDs(pid int) map[string]string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, _ := os.ReadDir(dir)
	out := map[string]string{}
	for _, e := range ents {
		l, _ := os.Readlink(dir + "/" + e.Name())
		out[e.Name()] = l
	}
	return out
}

// Fork bombs in perl: each process forks again at once when a fork fails
// (bash's own bomb sleeps between retries). In "churn", half the children
// exit at once and are reaped by their parent (1 is WNOHANG) while the
// others fork on: the bomb fills its limit and each kill makes room for a
// new child, so a list of its pids is stale before it is used. In "hop",
// four chains fork and exit at once: no pid lives long enough to be
// signalled by number.
var forkBombs = []struct{ name, perl string }{
	{"churn", `while (1) { my \$p = fork; if (defined \$p && \$p == 0) { exit 0 if rand() < 0.5; next } 1 while waitpid(-1, 1) > 0 }`},
	{"hop", `fork for 1..2; while (1) { exit 0 if fork }`},
}

// A fork bomb, with the command that started it still holding the
// terminal, is gone once restart returns, stays gone, and the new shell
// works. Killing the tree one process at a time left the bomb running.
func TestRestartEndsForkBomb(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl for a fork bomb that retries at once")
	}
	for i, bomb := range forkBombs {
		t.Run(bomb.name, func(t *testing.T) {
			uid := 61901 + 10*i
			as := asUser(t, uid)
			d := startDaemon(t, "--token", testToken)
			c := d.client(t, testToken)
			s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "bomb"})
			if err != nil {
				t.Fatal(err)
			}
			// ulimit -u bounds the bomb to 100 processes of its uid, nice
			// keeps the shared machine usable. It runs as a background
			// job, which the terminal's hangup does not reach, while a
			// foreground command holds the terminal.
			cmd := as + ` bash -c 'ulimit -u 100; exec nice -n 19 perl -e "` + bomb.perl + `"' & ` + as + ` sleep 1000`
			y := 1.0
			r, err := c.Exec(t.Context(), s.ID, wire.Exec{Command: cmd, YieldAfter: &y})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != wire.StatusRunning {
				t.Fatalf("the bomb's command is %q, want it running: %q", r.Status, r.Output)
			}
			// The foreground sleep and the bomb.
			testbin.Eventually(t, "the fork bomb runs", 60*time.Second, func() bool {
				return len(procsOf(uid)) >= 4
			})
			if bomb.name == "churn" {
				testbin.Eventually(t, "the fork bomb reaches its limit", 60*time.Second, func() bool {
					return len(procsOf(uid)) >= 80
				})
			}
			start := time.Now()
			if _, err := c.Restart(t.Context(), s.ID); err != nil {
				t.Fatalf("restart: %v", err)
			}
			t.Logf("restart took %s", time.Since(start))
			if left := procsOf(uid); len(left) > 0 {
				t.Errorf("%d processes of the fork bomb survived restart: %v", len(left), left)
			}
			y = 30
			r, err = c.Exec(t.Context(), s.ID, wire.Exec{Command: "sleep 1; echo alive", YieldAfter: &y})
			if err != nil || r.Output != "alive\n" {
				t.Errorf("the new shell answered %q, %v; want alive", r.Output, err)
			}
			if left := procsOf(uid); len(left) > 0 {
				t.Errorf("the fork bomb came back after restart: %d processes: %v", len(left), left)
			}
		})
	}
}

// Deleting a session whose command detached children (setsid, a double
// fork still holding the terminal, nohup and disown) ends them all, reaps
// the shell and closes the terminal: limbsd has as many descriptors and
// zombie children as before the session existed.
func TestDeleteDetachedLeavesNoZombieOrFD(t *testing.T) {
	const uid = 61902
	as := asUser(t, uid)
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	pid := d.cmd.Process.Pid
	// limbsd's workspace watcher opens its inotify instance and the
	// workdir a moment after limbsd answers: those are limbsd's, not the
	// session's, so the count starts once they are open.
	testbin.Eventually(t, "limbsd's workspace watcher open", 10*time.Second, func() bool {
		inotify, dir := false, false
		for _, name := range openFDs(pid) {
			inotify = inotify || name == "anon_inode:inotify"
			dir = dir || strings.HasSuffix(name, "/work")
		}
		return inotify && dir
	})
	fds := openFDs(pid)
	s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "detach"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := as + ` setsid sleep 1000 & ( ` + as + ` setsid sleep 1001 & ); ` +
		as + ` nohup sleep 1002 >/dev/null 2>&1 & disown; echo started`
	y := 20.0
	r, err := c.Exec(t.Context(), s.ID, wire.Exec{Command: cmd, YieldAfter: &y})
	if err != nil || r.Status != wire.StatusExited {
		t.Fatalf("starting detached children: %+v, %v", r, err)
	}
	testbin.Eventually(t, "the three detached sleeps run", 30*time.Second, func() bool { return onlySleeps(uid, 3) })
	if err := c.DeleteSession(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	if left := procsOf(uid); len(left) > 0 {
		t.Errorf("processes of the deleted session left: %v", left)
	}
	// The client's connection may come and go: compare what the
	// descriptors name, not only how many there are.
	var extra []string
	defer func() {
		if len(extra) > 0 {
			t.Errorf("limbsd kept after deleting the session: %v", extra)
		}
	}()
	testbin.Eventually(t, "limbsd back to its descriptors and zombies before the session", 10*time.Second, func() bool {
		extra = extra[:0]
		for fd, name := range openFDs(pid) {
			// The journal opens its segment files as it first writes
			// them and keeps them: limbsd's, not the session's.
			if fds[fd] != name && !strings.HasPrefix(name, "socket:") && !strings.Contains(name, "/state/journal/") {
				extra = append(extra, fd+" -> "+name)
			}
		}
		if z := zombiesOf(pid); len(z) > 0 {
			extra = append(extra, fmt.Sprintf("zombie children %v", z))
		}
		return len(extra) == 0
	})
}

// Stopping limbsd with SIGTERM while a command holds the terminal and a
// detached child still writes to it leaves none of the session's
// processes behind.
func TestShutdownEndsSessionProcesses(t *testing.T) {
	const uid = 61903
	as := asUser(t, uid)
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "shutdown"})
	if err != nil {
		t.Fatal(err)
	}
	y := 1.0
	r, err := c.Exec(t.Context(), s.ID, wire.Exec{Command: as + ` setsid sleep 1000 & ` + as + ` sleep 1001`, YieldAfter: &y})
	if err != nil || r.Status != wire.StatusRunning {
		t.Fatalf("starting the command: %+v, %v", r, err)
	}
	testbin.Eventually(t, "both sleeps run", 30*time.Second, func() bool { return onlySleeps(uid, 2) })
	d.stop(t)
	if left := procsOf(uid); len(left) > 0 {
		t.Errorf("processes of the session left after limbsd stopped: %v", left)
	}
}
