package shell

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// foreignTTYHelper runs in a mount namespace of its own with a devpts
// instance of its own (as a container has), opens terminals there until
// it holds the one with the number in argv[1], and starts a sleep with it
// as controlling terminal and standard input; it prints the sleep's pid.
const foreignTTYHelper = `
import os, sys, fcntl, termios
n = int(sys.argv[1]); held = []
while True:
    m, s = os.openpty(); held.append((m, s))
    if os.ttyname(s) == '/dev/pts/%d' % n: break
    if len(held) > n + 1: sys.exit(3)
pid = os.fork()
if pid == 0:
    os.setsid(); fcntl.ioctl(s, termios.TIOCSCTTY, 0); os.dup2(s, 0)
    os.execvp('sleep', ['sleep', '60'])
print(pid, flush=True)
os.waitpid(pid, 0)
`

// A terminal's number is only unique within its devpts instance: every
// container has its own, so a process of another container (or of another
// sandbox's mount namespace) can have the same /dev/pts/N, and the same
// tty_nr in /proc/PID/stat, as a session's shell. killTree of a daemon in
// the host's PID namespace (the local provider without isolation, limbsd
// run on the host) must not count it as a member: it stopped and killed
// the shells of every Docker sandbox on the same pts number.
func TestKillTreeSparesSameNumberedTerminalElsewhere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a mount namespace with its own devpts")
	}
	// Opt-in: on the machine limbs is developed on, a private devpts
	// mount gets the whole process tree that made it (the test binary,
	// go test, the shell running them) SIGKILLed from outside, which
	// would take CI down with it. strace shows no signal from the test's
	// own processes.
	if os.Getenv("LIMBS_TEST_PRIVATE_DEVPTS") != "1" {
		t.Skip("mounts a devpts in a private mount namespace: set LIMBS_TEST_PRIVATE_DEVPTS=1 to run it (on a machine that allows that)")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3")
	}
	s := newTestSession(t, newTestManager(t))
	s.mu.Lock()
	n := unix.Minor(s.p.tty)
	s.mu.Unlock()
	script := `mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts && mount --bind /dev/pts/ptmx /dev/ptmx && exec "$0" -c "$1" "$2"`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, py, foreignTTYHelper, strconv.FormatUint(uint64(n), 10))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Skipf("no foreign terminal /dev/pts/%d (%v)", n, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper printed %q", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	var st procStat
	var ok bool
	for i := 0; i < 500; i++ { // until the sleep has its terminal: 5 s at most
		if st, ok = readStat(pid); !ok || st.tty == s.p.tty {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !ok || st.tty != s.p.tty {
		t.Skipf("the foreign sleep (pid %d) does not have tty_nr %#x: %+v", pid, s.p.tty, st)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	st, ok = readStat(pid)
	if !ok || halted(st.state) {
		t.Fatalf("a process on /dev/pts/%d of another devpts instance was stopped or killed by the session's restart (state %q, alive %v)", n, st.state, ok)
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
}
