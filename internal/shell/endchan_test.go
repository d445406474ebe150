package shell

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
	"golang.org/x/sys/unix"
)

// newTestEndChan makes a channel that accepts messages from pid only, and
// returns it with the sending end.
func newTestEndChan(t *testing.T, pid int) (*endChan, *os.File) {
	t.Helper()
	c, shell, err := newEndChan()
	if err != nil {
		t.Fatal(err)
	}
	c.start(pid, nil)
	t.Cleanup(func() { c.close(); shell.Close() })
	return c, shell
}

func TestEndChanTakesOnlyTheShellsMessages(t *testing.T) {
	// This process plays the shell.
	c, shell := newTestEndChan(t, os.Getpid())
	for _, m := range []string{"E 4 0 /stale", "junk", "E 5 2 /a b;c"} {
		if _, err := shell.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	ev, ok := c.take(evEnd, []byte("5"))
	if !ok || ev.kind != evEnd || ev.status != 2 || ev.cwd != "/a b;c" {
		t.Errorf("take(E, 5) = %+v, %v; want status 2 in %q", ev, ok, "/a b;c")
	}
	if _, ok := c.take(evEnd, []byte("4")); ok {
		t.Error("a marker matched a message that a newer one replaced")
	}
	if _, ok := c.take(evEnd, []byte("5")); ok {
		t.Error("one message proved two markers")
	}
	if _, ok := c.take(evExit, []byte("5")); ok {
		t.Error("an end message proved an exit marker")
	}
	if n := c.droppedCount(); n != 1 {
		t.Errorf("dropped %d messages, want 1 (the malformed one)", n)
	}

	// The same message from a process that is not the shell.
	other, shell2 := newTestEndChan(t, os.Getpid()+100000)
	if _, err := shell2.Write([]byte("E 1 0 /etc/fake")); err != nil {
		t.Fatal(err)
	}
	if ev, ok := other.take(evEnd, []byte("1")); ok {
		t.Errorf("a message from another pid proved a marker: %+v", ev)
	}
	if n := other.droppedCount(); n != 1 {
		t.Errorf("dropped %d messages from another pid, want 1", n)
	}
}

func TestEndChanBackstopDrainsAFlood(t *testing.T) {
	c, shell := newTestEndChan(t, os.Getpid()+100000)
	// Far more junk than the socket holds: without the backstop drain
	// the sends stop for good once it is full.
	fd := int(shell.Fd())
	sent, full := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for sent < 5000 && time.Now().Before(deadline) {
		switch err := unix.Sendto(fd, []byte("junk"), unix.MSG_DONTWAIT, nil); err {
		case nil:
			sent++
		case unix.EAGAIN:
			full++
			time.Sleep(time.Millisecond)
		default:
			t.Fatal(err)
		}
	}
	if sent < 5000 {
		t.Fatalf("only %d junk messages went through in 20 s (%d times full): the flood was not drained", sent, full)
	}
	if full == 0 {
		t.Log("the socket never filled up; the drain was not needed")
	}
	if c.droppedCount() == 0 {
		t.Error("nothing dropped")
	}
}

// TestEndChannelClosedByShell: a shell that closes its end of the channel
// has its commands ended by process state (recover.go), with the exit code
// of the unproven end marker and a note naming the descriptor; a restart
// brings back the fast path.
func TestEndChannelClosedByShell(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := s.Exec(ctx, wire.Exec{Command: "exec 251>&-", YieldAfter: f(10)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != wire.StatusExited || r.Output != "" || deref(r.ExitCode) != 0 || !r.EndRecovered || !strings.Contains(r.EndNote, "descriptor 251") {
		t.Fatalf("after exec 251>&-: status %q exit %v output %q recovered %v note %q; want exited 0, no output, end_recovered with a note naming descriptor 251", r.Status, deref(r.ExitCode), r.Output, r.EndRecovered, r.EndNote)
	}
	if r := run(t, s, "echo ok; (exit 4)"); r.Output != "ok\n" || deref(r.ExitCode) != 4 || !r.EndRecovered {
		t.Fatalf("after exec 251>&-: output %q exit %v recovered %v", r.Output, deref(r.ExitCode), r.EndRecovered)
	}
	if _, err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if r := run(t, s, "echo ok; (exit 4)"); r.Output != "ok\n" || deref(r.ExitCode) != 4 || r.EndRecovered {
		t.Fatalf("after restart: output %q exit %v recovered %v", r.Output, deref(r.ExitCode), r.EndRecovered)
	}
}
