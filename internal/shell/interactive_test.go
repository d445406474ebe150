package shell

import (
	"context"
	"strconv"
	"strings"
	"testing"

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
