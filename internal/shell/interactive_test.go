package shell

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

func TestReadPromptAnsweredByInput(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	ctx := context.Background()
	r, err := s.Exec(ctx, wire.Exec{Command: `read -p "Name: " n; echo "Hello $n"`, YieldAfter: f(20)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != wire.StatusRunning || !r.WaitingForInput || r.Output != "Name: " {
		t.Fatalf("first result: %+v", r)
	}
	r, err = s.Input(ctx, wire.Input{Text: "John\n", YieldAfter: f(20)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != wire.StatusExited || *r.ExitCode != 0 || r.Output != "John\nHello John\n" {
		t.Fatalf("after input: %+v", r)
	}
}

func TestTimeoutAndInterrupt(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	ctx := context.Background()
	r, err := s.Exec(ctx, wire.Exec{Command: "sleep 100", Timeout: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != wire.StatusTimeout || *r.ExitCode != 130 {
		t.Fatalf("timeout: %+v", r)
	}
	if r := run(t, s, "echo ok"); r.Output != "ok\n" {
		t.Fatalf("after timeout: %+v", r)
	}
	r, err = s.Exec(ctx, wire.Exec{Command: "echo start; sleep 100", YieldAfter: f(0.3)})
	if err != nil || r.Status != wire.StatusRunning || r.Output != "start\n" {
		t.Fatalf("yield: %+v %v", r, err)
	}
	if _, err := s.Exec(ctx, wire.Exec{Command: "echo no"}); err == nil || !strings.Contains(err.Error(), "wait") {
		t.Fatalf("second exec: %v", err)
	}
	r, err = s.Interrupt(ctx, wire.Interrupt{})
	if err != nil || r.Status != wire.StatusInterrupted || *r.ExitCode != 130 {
		t.Fatalf("interrupt: %+v %v", r, err)
	}
}

func TestYieldThenWaitReturnsEveryLineOnce(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	ctx := context.Background()
	r, err := s.Exec(ctx, wire.Exec{Command: "for i in $(seq 1 20); do echo line$i; sleep 0.05; done", YieldAfter: f(0.2)})
	if err != nil {
		t.Fatal(err)
	}
	all := r.Output
	for r.Status == wire.StatusRunning {
		if r, err = s.Wait(ctx, wire.Wait{YieldAfter: f(0.2)}); err != nil {
			t.Fatal(err)
		}
		all += r.Output
	}
	var want strings.Builder
	for i := 1; i <= 20; i++ {
		want.WriteString("line" + strconv.Itoa(i) + "\n")
	}
	if all != want.String() {
		t.Fatalf("got %q", all)
	}
}

// A command that ends after a running result with nothing more to print
// still gives its exit code to the next wait, once.
func TestWaitAfterSilentEnd(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	ctx := context.Background()
	r, err := s.Exec(ctx, wire.Exec{Command: "echo a; sleep 0.5; exit_code_7() { return 7; }; exit_code_7", YieldAfter: f(0.2)})
	if err != nil || r.Status != wire.StatusRunning || r.Output != "a\n" {
		t.Fatalf("first: %+v %v", r, err)
	}
	testbin.Eventually(t, "the command ends, printing nothing more", 10*time.Second, func() bool {
		return s.Info().State == wire.StateIdle
	})
	r, err = s.Wait(ctx, wire.Wait{})
	if err != nil || r.Status != wire.StatusExited || *r.ExitCode != 7 || r.Output != "" {
		t.Fatalf("wait after the end: %+v %v", r, err)
	}
	if _, err := s.Wait(ctx, wire.Wait{}); !errors.Is(err, wire.ErrNoCommand) {
		t.Fatalf("second wait: %v, want no_command", err)
	}
}

// Log files are written off the command's path: complete up to offset_end
// at once for running and truncated results, shortly after for the rest.
func TestLogFiles(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	ctx := context.Background()
	readLog := func(r wire.Result) string {
		b, _ := os.ReadFile(r.LogPath)
		return string(b)
	}
	r, err := s.Exec(ctx, wire.Exec{Command: "echo first; sleep 0.4; echo second", YieldAfter: f(0.2)})
	if err != nil || r.Status != wire.StatusRunning {
		t.Fatalf("%+v %v", r, err)
	}
	if got := readLog(r); got != "first\r\n" {
		t.Fatalf("log of a running command: %q", got)
	}
	one := 10
	r, err = s.Exec(ctx, wire.Exec{Command: "seq 1 100", MaxOutput: &one})
	if !errors.Is(err, wire.ErrBusy) {
		t.Fatalf("exec while running: %v", err)
	}
	if r, err = s.Wait(ctx, wire.Wait{}); err != nil || r.Status != wire.StatusExited {
		t.Fatalf("%+v %v", r, err)
	}
	r, err = s.Exec(ctx, wire.Exec{Command: "seq 1 100", MaxOutput: &one})
	if err != nil || !r.Truncated {
		t.Fatalf("%+v %v", r, err)
	}
	if got := readLog(r); strings.Count(got, "\n") != 100 || !strings.HasSuffix(got, "100\r\n") {
		t.Fatalf("log of a truncated command: %q", got)
	}
	r = run(t, s, "echo small")
	testbin.Eventually(t, "the log of a short command is written", 5*time.Second, func() bool {
		return readLog(r) == "small\r\n"
	})
}
