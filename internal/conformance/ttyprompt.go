package conformance

import (
	"fmt"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// testTTYPrompts: a program that reads its answer from /dev/tty (opened on
// a descriptor of its own, as password prompts do) waits for input just as
// one reading its stdin does, and the result says that echo is off.
func testTTYPrompts(t *testing.T, c *client.Client) {
	t.Run("Getpass", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		if !have(t, c, id, "python3") {
			t.Skip("python3 is not installed in this sandbox")
		}
		r := runReq(t, c, id, wire.Exec{Command: `python3 -c 'import getpass; print(getpass.getpass("pw: ") == "s3cret")' </dev/null`, YieldAfter: ptr(10.0)})
		if r.Status != wire.StatusRunning || !r.WaitingForInput {
			t.Fatalf("getpass: status %q waiting_for_input %v after %d ms (output %q), want running and waiting", r.Status, r.WaitingForInput, r.DurationMs, r.Output)
		}
		if !r.EchoOff {
			t.Errorf("getpass: echo_off false, want true")
		}
		r, err := c.Input(t.Context(), id, wire.Input{Text: "s3cret\n", YieldAfter: ptr(guardYield)})
		if err != nil {
			t.Fatalf("input: %v", err)
		}
		wantExit(t, r, 0)
		if r.Output != "\nTrue\n" && r.Output != "True\n" {
			t.Errorf("after the password: output %q, want True", r.Output)
		}
	})
	t.Run("SSHKeygenPassphrase", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		if !have(t, c, id, "ssh-keygen") {
			t.Skip("ssh-keygen is not installed in this sandbox")
		}
		k := fmt.Sprintf("/tmp/conformance-key-%d", rnd())
		r := runReq(t, c, id, wire.Exec{Command: "ssh-keygen -q -t ed25519 -f " + k + " </dev/null", YieldAfter: ptr(10.0)})
		if r.Status != wire.StatusRunning || !r.WaitingForInput {
			t.Fatalf("ssh-keygen: status %q waiting_for_input %v after %d ms (output %q), want running and waiting", r.Status, r.WaitingForInput, r.DurationMs, r.Output)
		}
		if _, err := c.Interrupt(t.Context(), id, wire.Interrupt{}); err != nil {
			t.Fatalf("interrupt: %v", err)
		}
		run(t, c, id, "rm -f "+k+" "+k+".pub")
	})
}
