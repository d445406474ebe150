package shell

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"
)

// A process that left the shell's session and parent but holds the
// terminal on a descriptor numbered past the first 4096 is still found as
// a holder and ended with the session.
func TestDeleteEndsHolderOnHighDescriptor(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3")
	}
	m := newTestManager(t)
	s := newTestSession(t, m)
	r := run(t, s, py+` -c '
import os, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard < 6000: print("skip"); sys.exit(0)
resource.setrlimit(resource.RLIMIT_NOFILE, (6000, hard))
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open("/dev/null", os.O_RDWR)
        for i in range(3, 5000):
            if i not in (null, w):
                try: os.dup2(null, i)
                except OSError: pass
        os.dup2(0, 5500)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.write(w, str(os.getpid()).encode()); os.close(w)
        time.sleep(300)
    os._exit(0)
os.close(w)
print(os.read(r, 32).decode())'`)
	out := strings.TrimSpace(r.Output)
	if out == "skip" {
		t.Skip("the descriptor limit is below 6000")
	}
	pid, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("the holder's pid: %+v", r)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if err := m.Delete(s.Info().ID); err != nil {
		t.Logf("delete: %v", err)
	}
	testbin.Eventually(t, "the holder ended", 10*time.Second, func() bool {
		st, ok := readStat(pid)
		return !ok || st.state == 'Z'
	})
}
