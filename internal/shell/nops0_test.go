package shell

import (
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestOutputWithoutStartMarker: bash prints PS0, and so limbs' start
// marker, on its stderr. A shell whose stderr no longer reaches the
// terminal (exec 2>file, a common way to log a session's errors, or exec
// 2>&-) or whose PS0 cannot be put back (readonly PS0=) printed no start
// marker, and every later result had an empty output. The command file
// now prints the marker itself when PS0 cannot have.
func TestOutputWithoutStartMarker(t *testing.T) {
	m := newTestManager(t)
	for name, setup := range map[string]string{
		"stderr to a file": "exec 2>" + shq(t.TempDir()+"/err.log"),
		"stderr closed":    "exec 2>&-",
		"readonly PS0":     "readonly PS0=",
	} {
		t.Run(name, func(t *testing.T) {
			s := newTestSession(t, m)
			run(t, s, setup)
			for _, tc := range []struct {
				cmd  string
				out  string
				code int
			}{{"echo ok", "ok\n", 0}, {"echo a; false", "a\n", 1}, {"echo ok", "ok\n", 0}} {
				r := run(t, s, tc.cmd)
				if r.Status != wire.StatusExited || r.Output != tc.out || r.ExitCode == nil || *r.ExitCode != tc.code {
					t.Errorf("%q: status %s code %v output %q; want exited %d with %q", tc.cmd, r.Status, deref(r.ExitCode), r.Output, tc.code, tc.out)
				}
			}
		})
	}
}

// TestStdoutAndStderrRedirected: after exec >file 2>&1 (a common way to
// log a session) no marker reaches the terminal; the shell's end message
// still says each command ended, but the next command had no start
// marker either and ran forever (no end is taken for a command that
// never started). The start marker now goes to /dev/tty when neither
// stdout nor stderr is a terminal.
func TestStdoutAndStderrRedirected(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	log := shq(t.TempDir() + "/session.log")
	for _, tc := range []struct {
		cmd  string
		code int
	}{{"exec >>" + log + " 2>&1", 0}, {"false", 1}, {"echo x; true", 0}, {"exec >/dev/tty 2>&1", 0}} {
		r := run(t, s, tc.cmd)
		if r.Status != wire.StatusExited || r.ExitCode == nil || *r.ExitCode != tc.code {
			t.Fatalf("%q: status %s code %v output %q; want exited %d", tc.cmd, r.Status, deref(r.ExitCode), r.Output, tc.code)
		}
	}
	if r := run(t, s, "echo ok"); r.Status != wire.StatusExited || r.Output != "ok\n" || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Errorf("echo ok after the redirections: status %s code %v output %q; want exited 0 with \"ok\\n\"", r.Status, deref(r.ExitCode), r.Output)
	}
}
