package shell

import (
	"io"
	"testing"
	"time"

	"github.com/creack/pty"
)

// TestUnreadSeesOutputOnItsWay writes to a terminal and asks at once how
// much is unread. What the slave side writes reaches the master through a
// kernel worker, and TIOCINQ alone says 0 until that worker ran: end
// recovery then took a shell that had written its end marker for one that
// had written nothing, and ended the command without its exit code.
func TestUnreadSeesOutputOnItsWay(t *testing.T) {
	m, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer tty.Close()
	if m, err = pollable(m); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := &proc{ptmx: m}
	if n := p.unread(); n != 0 {
		t.Fatalf("unread on a fresh terminal = %d, want 0", n)
	}
	msg := []byte("E;6;marker")
	buf := make([]byte, len(msg))
	for i := 0; i < 300; i++ {
		if _, err := tty.Write(msg); err != nil {
			t.Fatal(err)
		}
		if n := p.unread(); n == 0 {
			t.Fatalf("try %d: unread = 0 right after %d bytes were written to the terminal", i, len(msg))
		}
		_ = m.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(m, buf); err != nil {
			t.Fatalf("try %d: reading back what was written: %v", i, err)
		}
		if n := p.unread(); n != 0 {
			t.Fatalf("try %d: unread = %d after everything was read, want 0", i, n)
		}
	}
}
