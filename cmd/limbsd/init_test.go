package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestInitReapsOrphans runs limbsd as PID 1 of a new PID namespace, as in a
// container started without --init, and checks that orphaned processes do
// not stay zombies and that SIGTERM still stops the daemon cleanly.
func TestInitReapsOrphans(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) is not installed: cannot run limbsd as PID 1")
	}
	if out, err := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot create a PID namespace here (needs root): %v %s", err, out)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot build limbsd")
	}
	dir, err := os.MkdirTemp("", "limbsd-init")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "limbsd")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building limbsd: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "limbsd.sock")
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM",
		bin, "--listen", "unix://"+sock, "--token", "tok",
		"--workdir", filepath.Join(dir, "work"), "--state-dir", filepath.Join(dir, "state"))
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	logs := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	c, err := client.New("unix://"+sock, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := c.Health(t.Context()); err == nil {
			break
		}
		if i > 400 {
			t.Fatalf("limbsd under a PID namespace never answered:\n%s", logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "init"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(command string) string {
		t.Helper()
		y := 20.0
		r, err := c.Exec(t.Context(), s.ID, wire.Exec{Command: command, YieldAfter: &y})
		if err != nil || r.Status != wire.StatusExited {
			t.Fatalf("exec %q: %+v %v", command, r, err)
		}
		return r.Output
	}
	if got := run("tr '\\0' ' ' < /proc/1/cmdline"); !strings.Contains(got, "limbsd") {
		t.Fatalf("PID 1 is %q, want limbsd's init", got)
	}
	// The subshell exits at once; its sleeps become orphans of PID 1.
	run("bash -c 'for i in 1 2 3 4 5; do sleep 0.1 & done; exit 0'")
	zombies := "grep -l ') Z ' /proc/[0-9]*/stat 2>/dev/null | wc -l"
	for i := 0; ; i++ {
		out := strings.TrimSpace(run("sleep 0.2; " + zombies))
		if out == "0" {
			break
		}
		if i > 50 {
			t.Fatalf("%s zombie processes stay under limbsd as PID 1", out)
		}
	}
	// unshare(1) ignores SIGTERM while it waits: signal its child, limbsd's
	// init, as docker would signal a container's PID 1.
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	initPid, err := strconv.Atoi(strings.TrimSpace(string(children)))
	if err != nil {
		t.Fatalf("the child of unshare: %q: %v", children, err)
	}
	_ = syscall.Kill(initPid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("limbsd as PID 1 did not stop on SIGTERM:\n%s", logs())
	}
	if !strings.Contains(logs(), "shutting down") {
		t.Errorf("the daemon did not shut down cleanly:\n%s", logs())
	}
}
