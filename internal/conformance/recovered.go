package conformance

import (
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// testEndRecovered: markers are the fast path, the process state is the
// ground truth. A shell that lost limbs' end of a command (its end
// channel closed, limbs' functions and end file removed, a trap that
// skips limbs' steps) is back at its prompt with no proven end: the
// command ends all the same, with end_recovered, the cwd the shell has,
// and the exit code its end marker printed (null when it printed none);
// and a program still reading the terminal is never taken for that.
func testEndRecovered(t *testing.T, c *client.Client) {
	// ended checks a command that ended with no proven end.
	ended := func(t *testing.T, r wire.Result, code *int, cwd string) {
		t.Helper()
		if r.Status != wire.StatusExited {
			t.Fatalf("status %q (output %q), want exited: the shell is back at its prompt", r.Status, r.Output)
		}
		if code != nil {
			wantExit(t, r, *code)
		}
		if cwd != "" && r.Cwd != cwd {
			t.Errorf("cwd %q, want %q", r.Cwd, cwd)
		}
		if r.EndRecovered && r.EndNote == "" {
			t.Errorf("end_recovered without an end_note")
		}
		if strings.Contains(r.Output, "limbs:") || strings.Contains(r.Output, "$ ") || strings.Contains(r.Output, "# ") {
			t.Errorf("output %q holds limbs' noise or the prompt", r.Output)
		}
	}
	t.Run("EndChannelClosed", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := run(t, c, id, "exec 251>&-")
		ended(t, r, ptr(0), "")
		if r.Output != "" {
			t.Errorf("exec 251>&-: output %q, want none", r.Output)
		}
		r = run(t, c, id, "false")
		ended(t, r, ptr(1), "")
		if !r.EndRecovered || !strings.Contains(r.EndNote, "251") {
			t.Errorf("false after exec 251>&-: end_recovered %v note %q, want true and a note naming descriptor 251", r.EndRecovered, r.EndNote)
		}
		r = run(t, c, id, "cd /tmp")
		ended(t, r, ptr(0), "/tmp")
		if !r.EndRecovered {
			t.Errorf("cd /tmp after exec 251>&-: end_recovered false")
		}
		r = run(t, c, id, "echo hi; (exit 5)")
		ended(t, r, ptr(5), "/tmp")
		if r.Output != "hi\n" {
			t.Errorf("echo hi: output %q, want %q", r.Output, "hi\n")
		}
		r = run(t, c, id, "cd / && printf 'a\\nb\\n'")
		ended(t, r, ptr(0), "/")
		if r.Output != "a\nb\n" {
			t.Errorf("printf: output %q, want %q", r.Output, "a\nb\n")
		}
	})
	t.Run("FunctionsAndEndFileRemoved", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		r := run(t, c, id, `unset -f $(compgen -A function __limbs) trap; rm -f "$__LZ"; cd /tmp`)
		ended(t, r, nil, "/tmp")
		if r.Output != "" {
			t.Errorf("output %q, want none", r.Output)
		}
		if !r.EndRecovered {
			t.Errorf("end_recovered false, want true (no end marker came)")
		}
		if r.ExitCode != nil {
			t.Errorf("exit_code %d, want null: no end marker printed a status", *r.ExitCode)
		}
		// The integration is back: the fast path, exact exit codes.
		checkIntegration(t, c, id)
	})
	t.Run("BuiltinDebugTrap", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		// extdebug: a DEBUG trap that fails skips the command; this one
		// skips limbs' steps and bypasses limbs' trap wrapper.
		ended(t, run(t, c, id, `shopt -s extdebug; builtin trap '[[ $BASH_COMMAND != *__limbs* ]]' DEBUG`), nil, "")
		for _, tc := range []struct {
			cmd, out, cwd string
			code          int
		}{
			{"false", "", "", 1},
			{"cd /tmp", "", "/tmp", 0},
			{"echo hi; (exit 4)", "hi\n", "/tmp", 4},
			{"cd /", "", "/", 0},
		} {
			r := run(t, c, id, tc.cmd)
			ended(t, r, nil, tc.cwd)
			if r.ExitCode != nil && *r.ExitCode != tc.code {
				t.Errorf("%s: exit_code %d, want %d or null", tc.cmd, *r.ExitCode, tc.code)
			}
			if r.ExitCode == nil && !r.EndRecovered {
				t.Errorf("%s: exit_code null without end_recovered", tc.cmd)
			}
			if r.Output != tc.out {
				t.Errorf("%s: output %q, want %q", tc.cmd, r.Output, tc.out)
			}
		}
	})
	t.Run("UnprovenMarkerIsNoEnd", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		// An end marker with a status but no message, printed while the
		// command goes on in the foreground, is output, not the end:
		// with the fast path, and with only the process state left.
		forge := `printf '\033]633;limbs;%s;E;%s;0\007' "$__LIMBS_T" "$((__LIMBS_N+1))"; sleep 1.5; echo real; (exit 3)`
		for _, closeFirst := range []bool{false, true} {
			if closeFirst {
				ended(t, run(t, c, id, "exec 251>&-"), ptr(0), "")
			}
			rs := waitDone(t, c, id, runReq(t, c, id, wire.Exec{Command: forge, YieldAfter: ptr(guardYield)}), guardYield)
			last := rs[len(rs)-1]
			wantExit(t, last, 3)
			if !strings.Contains(last.Output, "real") {
				t.Errorf("channel closed %v: output %q, want the output after the forged marker", closeFirst, last.Output)
			}
			if last.EndRecovered != closeFirst {
				t.Errorf("channel closed %v: end_recovered %v", closeFirst, last.EndRecovered)
			}
		}
	})
	t.Run("StdoutRedirected", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		// The shell's stdout elsewhere: its end markers never reach the
		// terminal, but it still sends its ends on its channel.
		run(t, c, id, "exec 7>&1 >/dev/null")
		r := run(t, c, id, "cd /tmp; false")
		ended(t, r, ptr(1), "/tmp")
		if !r.EndRecovered {
			t.Errorf("end_recovered false with the shell's stdout redirected")
		}
		run(t, c, id, "exec >&7 7>&-")
		wantOutput(t, c, id, "echo back", "back\n")
		checkIntegration(t, c, id)
	})
	// A program reading the terminal is running, whatever it sleeps in:
	// with the end channel closed, only the process state can end these
	// commands, and it must not end them early.
	for _, tc := range []struct{ name, cmd, input, need string }{
		{"ReadlineRead", `read -e v; echo "got=$v"`, "hello\n", ""},
		{"ReadlineReadInFunction", `f() { read -e v; echo "got=$v"; }; f`, "hello\n", ""},
		{"PlainRead", `read v; echo "got=$v"`, "hello\n", ""},
		{"Select", `select v in hello other; do echo "got=$v"; break; done`, "1\n", ""},
		{"PythonInput", `python3 -c 'print("got=" + input())'`, "hello\n", "python3"},
		{"ForegroundSleep", `sleep 2; echo got=hello`, "", ""},
		{"Vim", `vim -u NONE -N -n; echo got=hello`, ":q!\r", "vim"},
	} {
		t.Run("NotEndedEarly"+tc.name, func(t *testing.T) {
			t.Parallel()
			id := newSession(t, c)
			if tc.need != "" && !have(t, c, id, tc.need) {
				t.Skipf("no %s in the sandbox", tc.need)
			}
			run(t, c, id, "exec 251>&-")
			r := runReq(t, c, id, wire.Exec{Command: tc.cmd + "; (exit 6)", YieldAfter: ptr(1.0)})
			if r.Status != wire.StatusRunning {
				t.Fatalf("%s: status %q exit %v (output %q) before any input, want running", tc.cmd, r.Status, r.ExitCode, r.Output)
			}
			if strings.Contains(tc.cmd, "read") && !r.WaitingForInput {
				// bash's own reads: read -e sleeps in pselect like the
				// prompt does, at another depth.
				t.Errorf("%s: waiting_for_input false, want true", tc.cmd)
			}
			if tc.input != "" {
				var err error
				r, err = c.Input(t.Context(), id, wire.Input{Text: tc.input, YieldAfter: ptr(guardYield)})
				if err != nil {
					t.Fatalf("input: %v", err)
				}
			}
			rs := waitDone(t, c, id, r, guardYield)
			last := rs[len(rs)-1]
			wantExit(t, last, 6)
			var out strings.Builder
			for _, r := range rs {
				out.WriteString(r.Output)
			}
			if !strings.Contains(out.String(), "got=hello") {
				t.Errorf("%s: output %q, want got=hello", tc.cmd, out.String())
			}
		})
	}
}
