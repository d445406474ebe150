package shell

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

func openFDCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Descriptors passed over the end-of-command channel (SCM_RIGHTS) are
// closed, never kept: a command's process holds the channel and could
// otherwise fill the daemon's descriptor table (20 per message), after
// which no session, log or file API request could open anything.
func TestEndChanClosesPassedDescriptors(t *testing.T) {
	for _, from := range []struct {
		name string
		pid  int
	}{{"the shell", os.Getpid()}, {"another process", os.Getpid() + 100000}} {
		t.Run(from.name, func(t *testing.T) {
			c, shell := newTestEndChan(t, from.pid)
			before := openFDCount(t)
			fds := make([]int, 20)
			for i := range fds {
				fds[i] = int(os.Stdin.Fd())
			}
			for i := 0; i < 50; i++ {
				if err := unix.Sendmsg(int(shell.Fd()), []byte("E 1 0 /x"), unix.UnixRights(fds...), nil, unix.MSG_DONTWAIT); err != nil {
					t.Fatal(err)
				}
			}
			c.take(evEnd, []byte("2"))
			if n := openFDCount(t) - before; n > 5 {
				t.Errorf("the channel kept %d descriptors passed to it", n)
			}
		})
	}
}

// The same from a real command: a process of the command sends its
// descriptors over descriptor 251, and the next command still ends.
func TestCommandCannotFillDaemonDescriptors(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3")
	}
	s := newTestSession(t, newTestManager(t))
	before := openFDCount(t)
	r := run(t, s, py+` -c 'import socket
s = socket.socket(fileno=251)
for i in range(200): socket.send_fds(s, [b"junk"], [0]*20)
print("sent")'`)
	if r.Output != "sent\n" {
		t.Fatalf("sending descriptors: %+v", r)
	}
	if r := run(t, s, "echo next"); r.Output != "next\n" {
		t.Fatalf("next command: %+v", r)
	}
	if n := openFDCount(t) - before; n > 20 {
		t.Errorf("the daemon kept %d descriptors a command passed over its end-of-command channel", n)
	}
}
