package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

func testInteractive(t *testing.T, c *client.Client) {
	t.Run("ReadPrompt", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: `read -p "Name: " n; echo "Hello $n"`, YieldAfter: ptr(guardYield)})
		if r.Status != wire.StatusRunning || !r.WaitingForInput {
			t.Fatalf("read prompt: status %q waiting_for_input %v, want running and true (output %q)", r.Status, r.WaitingForInput, r.Output)
		}
		if !strings.Contains(r.Output, "Name: ") {
			t.Errorf("first result output %q lacks the prompt", r.Output)
		}
		r, err := c.Input(t.Context(), id, wire.Input{Text: "John\n", YieldAfter: ptr(guardYield)})
		if err != nil {
			t.Fatalf("input: %v", err)
		}
		wantExit(t, r, 0)
		if !strings.Contains(r.Output, "Hello John") {
			t.Errorf("output after input = %q, want it to contain Hello John", r.Output)
		}
	})
	t.Run("PythonInputTwice", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		if !have(t, c, id, "python3") {
			t.Skip("python3 is not installed in this sandbox")
		}
		r := runReq(t, c, id, wire.Exec{
			Command:    `python3 -c 'a = input("first? "); b = input("second? "); print("got", a, b)'`,
			YieldAfter: ptr(guardYield),
		})
		for i, answer := range []string{"one", "two"} {
			if r.Status != wire.StatusRunning || !r.WaitingForInput {
				t.Fatalf("before answer %d: status %q waiting_for_input %v, want running and true (output %q)", i+1, r.Status, r.WaitingForInput, r.Output)
			}
			var err error
			r, err = c.Input(t.Context(), id, wire.Input{Text: answer + "\n", YieldAfter: ptr(guardYield)})
			if err != nil {
				t.Fatalf("input %d: %v", i+1, err)
			}
		}
		wantExit(t, r, 0)
		if !strings.Contains(r.Output, "got one two") {
			t.Errorf("final output %q lacks 'got one two'", r.Output)
		}
	})
	t.Run("InputThenEOFKey", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: "cat | tr a-z A-Z", YieldAfter: ptr(guardYield)})
		if r.Status != wire.StatusRunning || !r.WaitingForInput {
			t.Fatalf("cat: status %q waiting_for_input %v, want running and true", r.Status, r.WaitingForInput)
		}
		r, err := c.Input(t.Context(), id, wire.Input{Text: "shout\n", Keys: []string{"C-d"}, YieldAfter: ptr(guardYield)})
		if err != nil {
			t.Fatalf("input: %v", err)
		}
		wantExit(t, r, 0)
		if !strings.Contains(r.Output, "SHOUT") {
			t.Errorf("output after text and C-d = %q, want it to contain SHOUT", r.Output)
		}
	})
	t.Run("InputKeysCtrlC", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: "sleep 100", YieldAfter: ptr(0.3)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("sleep 100: status %q, want running", r.Status)
		}
		r, err := c.Input(t.Context(), id, wire.Input{Keys: []string{"C-c"}, YieldAfter: ptr(guardYield)})
		if err != nil {
			t.Fatalf("input C-c: %v", err)
		}
		wantExit(t, r, 130)
		wantOutput(t, c, id, "echo ok", "ok\n")
	})
	t.Run("Vim", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		if !have(t, c, id, "vim") {
			t.Skip("vim is not installed in this sandbox")
		}
		f := fmt.Sprintf("/tmp/conformance-vim-%d.txt", rnd())
		wantOutput(t, c, id, fmt.Sprintf("printf 'text shown by vim\\nsecond line\\n' > %s", f), "")
		t.Cleanup(func() { deleteFileQuietly(c, id, f) })
		r := runReq(t, c, id, wire.Exec{Command: "vim -u NONE " + f, YieldAfter: ptr(1.0)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("vim: status %q, want running (output %q)", r.Status, r.Output)
		}
		var scr wire.Screen
		eventually(t, "vim showing the file on /screen", func() (bool, string) {
			var err error
			scr, err = c.Screen(t.Context(), id)
			if err != nil {
				t.Fatalf("screen: %v", err)
			}
			return scr.AltScreen && strings.Contains(strings.Join(scr.Lines, "\n"), "text shown by vim"),
				fmt.Sprintf("alt_screen=%v\n%s", scr.AltScreen, strings.Join(scr.Lines, "\n"))
		})
		r, err := c.Input(t.Context(), id, wire.Input{Text: ":q", Keys: []string{"Enter"}, YieldAfter: ptr(guardYield)})
		if err != nil {
			t.Fatalf("input :q: %v", err)
		}
		wantExit(t, r, 0)
		s, err := c.GetSession(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if s.State != wire.StateIdle {
			t.Errorf("after :q the session state is %q, want idle", s.State)
		}
		scr, err = c.Screen(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if scr.AltScreen {
			t.Errorf("after :q the screen is still the alternate screen")
		}
		wantOutput(t, c, id, "echo ok", "ok\n")
	})
	t.Run("InputToIdleShell", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r, err := c.Input(t.Context(), id, wire.Input{Text: "echo typed-$((6*7))\n", YieldAfter: ptr(2.0)})
		if err != nil {
			t.Fatalf("input to idle shell: %v", err)
		}
		if !strings.Contains(r.Output, "typed-42") {
			t.Errorf("input to idle shell: output %q lacks typed-42", r.Output)
		}
		wantOutput(t, c, id, "echo ok", "ok\n")
	})
}

func testStopping(t *testing.T, c *client.Client) {
	t.Run("YieldAfterThenWait", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{
			Command:    `for i in $(seq 1 30); do echo line$i; sleep 0.1; done`,
			YieldAfter: ptr(0.5),
		})
		if r.Status != wire.StatusRunning || r.ExitCode != nil {
			t.Fatalf("first result: status %q exit_code %v, want running and null", r.Status, deref(r.ExitCode))
		}
		rs := waitDone(t, c, id, r, 0.5)
		var got strings.Builder
		for _, r := range rs {
			got.WriteString(r.Output)
			if r.CommandID != rs[0].CommandID {
				t.Errorf("command_id changed from %q to %q between results of one command", rs[0].CommandID, r.CommandID)
			}
		}
		wantExit(t, rs[len(rs)-1], 0)
		var want strings.Builder
		for i := 1; i <= 30; i++ {
			fmt.Fprintf(&want, "line%d\n", i)
		}
		if got.String() != want.String() {
			t.Errorf("outputs of %d results joined = %q, want every line once, in order: %q", len(rs), got.String(), want.String())
		}
	})
	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: "sleep 100", Timeout: 1, YieldAfter: ptr(0.0)})
		if r.Status != wire.StatusTimeout {
			t.Fatalf("sleep 100 with timeout 1: status %q (exit_code %d, waiting_for_input %v, after %d ms), want timeout", r.Status, deref(r.ExitCode), r.WaitingForInput, r.DurationMs)
		}
		wantOutput(t, c, id, "echo ok", "ok\n")
	})
	t.Run("TimeoutEscalates", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: `bash -c 'trap "" INT TERM; sleep 100'`, Timeout: 1, YieldAfter: ptr(0.0)})
		if r.Status != wire.StatusTimeout {
			t.Fatalf("a job ignoring SIGINT and SIGTERM with timeout 1: status %q (exit_code %d), want timeout", r.Status, deref(r.ExitCode))
		}
		wantOutput(t, c, id, "echo ok", "ok\n")
	})
	t.Run("InterruptServer", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		if !have(t, c, id, "python3") {
			t.Skip("python3 is not installed in this sandbox")
		}
		r := runReq(t, c, id, wire.Exec{Command: "python3 -m http.server 0 --bind 127.0.0.1", YieldAfter: ptr(1.0)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("http.server: status %q, want running (output %q)", r.Status, r.Output)
		}
		r, err := c.Interrupt(t.Context(), id, wire.Interrupt{})
		if err != nil {
			t.Fatalf("interrupt: %v", err)
		}
		if r.Status != wire.StatusInterrupted {
			t.Fatalf("interrupt: status %q, want interrupted (output %q)", r.Status, r.Output)
		}
		wantOutput(t, c, id, "echo ok", "ok\n")
	})
	t.Run("InterruptIgnoringSIGINT", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: `bash -c 'trap "" INT; sleep 100'`, YieldAfter: ptr(0.5)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("status %q, want running", r.Status)
		}
		r, err := c.Interrupt(t.Context(), id, wire.Interrupt{})
		if err != nil {
			t.Fatalf("interrupt: %v", err)
		}
		if r.Status != wire.StatusInterrupted {
			t.Fatalf("interrupt of a SIGINT-ignoring job: status %q, want interrupted", r.Status)
		}
		wantOutput(t, c, id, "echo ok", "ok\n")
	})
	t.Run("SecondExecIsBusy", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: "sleep 100", YieldAfter: ptr(0.2)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("sleep 100: status %q, want running", r.Status)
		}
		s, err := c.GetSession(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if s.State != wire.StateRunning {
			t.Errorf("session state while a command runs = %q, want running", s.State)
		}
		_, err = c.Exec(t.Context(), id, wire.Exec{Command: "echo no"})
		if !isCode(err, "session_busy") {
			t.Errorf("second exec: err = %v, want 409 session_busy", err)
		}
		if _, err := c.Interrupt(t.Context(), id, wire.Interrupt{}); err != nil {
			t.Fatalf("interrupt: %v", err)
		}
	})
	t.Run("ClientDisconnectKeepsCommand", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		f := fmt.Sprintf("/tmp/conformance-gate-%d", rnd())
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(ctx, id, wire.Exec{
				Command:    fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; rm -f %s; echo survived", f, f),
				YieldAfter: ptr(0.0),
			})
			done <- err
		}()
		eventually(t, "the command to start", func() (bool, string) {
			s, err := c.GetSession(t.Context(), id)
			return err == nil && s.State == wire.StateRunning, fmt.Sprintf("%+v %v", s, err)
		})
		cancel() // the client goes away in the middle of a blocking exec
		if err := <-done; err == nil {
			t.Fatalf("exec returned without error although its context was cancelled")
		}
		// A second session opens the gate: the command must still be there.
		other := newSession(t, c)
		wantOutput(t, c, other, "touch "+f, "")
		rs := waitDone(t, c, id, wire.Result{Status: wire.StatusRunning}, guardYield)
		last := rs[len(rs)-1]
		wantExit(t, last, 0)
		var all strings.Builder
		for _, r := range rs {
			all.WriteString(r.Output)
		}
		if all.String() != "survived\n" {
			t.Errorf("output after the client came back = %q, want %q", all.String(), "survived\n")
		}
	})
	t.Run("WaitWithNothingRunning", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		_, err := c.Wait(t.Context(), id, wire.Wait{})
		if !isCode(err, "no_command") {
			t.Errorf("wait on an idle session: err = %v, want 409 no_command", err)
		}
	})
}
