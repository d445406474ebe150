package shell

import (
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestShellForgedEndKeepsNextResult: code that runs in the shell process
// itself (a sourced script: `. ./env.sh` of a cloned project) can send a
// proven end, since the kernel stamps the shell's own pid on its builtin
// printf to descriptor 251, or call __limbs_z. The command then ends
// early with exit 0 while it goes on; worse, the next command is typed
// while the shell still runs the first, and it takes the first one's
// real end (status 1, no output) as its own.
func TestShellForgedEndKeepsNextResult(t *testing.T) {
	t.Skip("known: a proven end sent by the shell process itself while it is not at its prompt ends the command, and the next command takes the real end; fix: before typing a command, wait until the shell is at its prompt (atPrompt), answering session_busy at the yield")
	m := newTestManager(t)
	for _, forge := range []string{
		`__limbs_s=0; __limbs_z`,
		`printf 'E %s 0 /etc' $((__LIMBS_N+1)) >&251; printf '\e]633;limbs;%s;E;%s;0\a' "$__LIMBS_T" $((__LIMBS_N+1))`,
	} {
		t.Run(forge[:10], func(t *testing.T) {
			s := newTestSession(t, m)
			r := run(t, s, forge+"; sleep 1; echo after; false")
			if r.Status != wire.StatusExited || r.ExitCode == nil || *r.ExitCode != 1 || r.Output != "after\n" {
				t.Errorf("forging command: status %s code %v output %q; want exited 1 with \"after\\n\" (as bash -c)", r.Status, deref(r.ExitCode), r.Output)
			}
			r = run(t, s, "echo next")
			if r.Status != wire.StatusExited || r.ExitCode == nil || *r.ExitCode != 0 || r.Output != "next\n" {
				t.Errorf("next command: status %s code %v output %q; want exited 0 with \"next\\n\"", r.Status, deref(r.ExitCode), r.Output)
			}
		})
	}
}
