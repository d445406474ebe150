package shell

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

func TestSyntaxErrorFailsAndSessionGoesOn(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	r := run(t, s, `echo "unclosed`)
	if r.Status != wire.StatusExited || *r.ExitCode == 0 || !strings.Contains(r.Output, "unexpected EOF") {
		t.Fatalf("unclosed quote: %+v", r)
	}
	if r := run(t, s, "echo fine"); r.Output != "fine\n" {
		t.Fatalf("after syntax error: %+v", r)
	}
	long := "echo " + strings.Repeat("x", 20000)
	if r := run(t, s, long); len(r.Output) != 20001 {
		t.Fatalf("20 kB command: output of %d bytes", len(r.Output))
	}
}

func TestExecReplacesShell(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	run(t, s, "cd /tmp; export KEEP=1")
	r := run(t, s, "exec sh -c 'exit 4'")
	if !r.ShellExited || *r.ExitCode != 4 {
		t.Fatalf("exec: %+v", r)
	}
	if r := run(t, s, "echo $KEEP; pwd"); r.Output != "1\n/tmp\n" {
		t.Fatalf("after exec: %+v", r)
	}
	if s.Info().Restarts != 1 {
		t.Fatalf("restarts = %d", s.Info().Restarts)
	}
}

func TestDaemonRestartRestoresSessions(t *testing.T) {
	state, work := t.TempDir(), t.TempDir()
	ctx := context.Background()
	m, err := NewManager(ctx, Options{StateDir: state, Workdir: work})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Create(ctx, wire.CreateSession{Name: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	first := run(t, s, "cd /tmp && export A=b && echo before")
	m.Close()

	m2, err := NewManager(ctx, Options{StateDir: state, Workdir: work})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	s2, err := m2.Get("keep")
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, s2, "pwd; echo $A")
	if r.Output != "/tmp\nb\n" {
		t.Fatalf("after daemon restart: %+v", r)
	}
	// The old command's output is still in the stream.
	rd, n, err := s2.Output(first.OffsetStart, first.OffsetEnd)
	if err != nil || n != first.OffsetEnd-first.OffsetStart {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	if _, err := rd.Read(buf); err != nil || string(buf) != "before\r\n" {
		t.Fatalf("old output %q %v", buf, err)
	}
	if r.OffsetStart < first.OffsetEnd || !strings.HasPrefix(r.CommandID, "c_") || r.CommandID == first.CommandID {
		t.Fatalf("offsets or ids went back: first %+v now %+v", first, r)
	}
}

func TestBackgroundOutputStaysOut(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	r := run(t, s, "(sleep 0.3; echo late) &")
	if r.Status != wire.StatusExited {
		t.Fatalf("background start: %+v", r)
	}
	r = run(t, s, "echo next")
	if r.Output != "next\n" {
		t.Fatalf("next: %q", r.Output)
	}
	time.Sleep(500 * time.Millisecond)
	r = run(t, s, "echo after")
	if r.Output != "after\n" {
		t.Fatalf("after: %q", r.Output)
	}
}

func TestExitMidCommandKeepsItsCwdAndEnv(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	r := run(t, s, "cd /tmp; export MID=1; echo hi; exit 3")
	if r.Output != "hi\n" || *r.ExitCode != 3 || !r.ShellExited {
		t.Fatalf("exit: %+v", r)
	}
	if r := run(t, s, "pwd; echo $MID"); r.Output != "/tmp\n1\n" {
		t.Fatalf("after exit mid-command: %q", r.Output)
	}
}

func TestRestartRightAfterExport(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	for i := range 5 {
		run(t, s, "cd /tmp; export KEPT=k"+strconv.Itoa(i))
		if _, err := s.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := run(t, s, "pwd; echo $KEPT"); r.Output != "/tmp\nk"+strconv.Itoa(i)+"\n" {
			t.Fatalf("round %d after restart: %q", i, r.Output)
		}
	}
}
