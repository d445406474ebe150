package conformance

import (
	"regexp"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// testHooks holds the shell integration to what a user may do to a
// shell's hooks: each case changes them as a bashrc, a virtualenv or a
// habit would, and the commands after it still end with their own exit
// code, output and cwd (docs/api.md "What a user may change").
func testHooks(t *testing.T, c *client.Client) {
	changes := []struct{ name, change string }{
		{"PromptCommandEmpty", `PROMPT_COMMAND=""`},
		{"PromptCommandUnset", `unset PROMPT_COMMAND`},
		{"PromptCommandArray", `PROMPT_COMMAND=("echo x")`},
		{"PromptCommandPrepended", `PROMPT_COMMAND="history -a; $PROMPT_COMMAND"`},
		{"PS0Empty", `PS0=""`},
		{"FunctionsUnset", `unset -f $(compgen -A function __limbs)`},
		{"EnterUnbound", `bind -r '\C-m'; bind -r '\C-j'`},
		{"LimbsKeysUnbound", `bind -r '\C-x\C-l'; bind -r '\C-x\C-a'`},
		{"Nounset", `set -u`},
		{"ViMode", `set -o vi`},
		{"Bashrc", `for f in /etc/bash.bashrc /etc/skel/.bashrc; do [ -r "$f" ] && . "$f"; done; true`},
		{"VenvLike", `__venv_pc() { :; }; PS1="(venv) $PS1"; PROMPT_COMMAND="__venv_pc${PROMPT_COMMAND:+; $PROMPT_COMMAND}"`},
	}
	for _, tc := range changes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := newSession(t, c)
			wantExit(t, run(t, c, id, tc.change), 0)
			checkIntegration(t, c, id)
		})
	}
	t.Run("DebugTrap", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		wantExit(t, run(t, c, id, "trap 'echo dbg' DEBUG"), 0)
		// What bash -c prints after the same trap: the trap before each
		// of the command's own simple commands, and only those.
		wantOutput(t, c, id, "echo hi", "dbg\nhi\n")
		wantOutput(t, c, id, "false; echo $?", "dbg\ndbg\n1\n")
		r := run(t, c, id, "false")
		wantExit(t, r, 1)
		if r.Output != "dbg\n" {
			t.Errorf("false printed %q, want %q", r.Output, "dbg\n")
		}
		wantOutput(t, c, id, "trap - DEBUG", "dbg\n")
		checkIntegration(t, c, id)
	})
	t.Run("Xtrace", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		// bash -c 'set -x; echo hi' prints these lines and nothing of
		// limbs' own steps. The trace may show a deeper level (more
		// '+'): the command runs sourced.
		trace := func(r wire.Result) string { return traceLevel.ReplaceAllString(r.Output, "+ ") }
		if r := run(t, c, id, "set -x"); r.Output != "" {
			t.Errorf("set -x printed %q, want nothing", r.Output)
		}
		r := run(t, c, id, "echo hi")
		wantExit(t, r, 0)
		if trace(r) != "+ echo hi\nhi\n" {
			t.Errorf("echo hi under set -x printed %q, want %q", r.Output, "+ echo hi\nhi\n")
		}
		r = run(t, c, id, "(exit 6)")
		wantExit(t, r, 6)
		if trace(r) != "+ exit 6\n" {
			t.Errorf("(exit 6) under set -x printed %q, want %q", r.Output, "+ exit 6\n")
		}
		r = run(t, c, id, "set +x")
		wantExit(t, r, 0)
		if trace(r) != "+ set +x\n" {
			t.Errorf("set +x printed %q, want %q", r.Output, "+ set +x\n")
		}
		checkIntegration(t, c, id)
	})
}

var traceLevel = regexp.MustCompile(`(?m)^\++ `)

// checkIntegration runs commands whose exit code, output and cwd each
// show a lost hook.
func checkIntegration(t *testing.T, c *client.Client, id string) {
	t.Helper()
	for i := 0; i < 2; i++ {
		wantExit(t, run(t, c, id, "false"), 1)
		wantExit(t, run(t, c, id, "(exit 7)"), 7)
		wantOutput(t, c, id, "echo hi; echo there", "hi\nthere\n")
		r := run(t, c, id, "cd /tmp && (exit 3)")
		wantExit(t, r, 3)
		if r.Cwd != "/tmp" {
			t.Fatalf("cwd after cd /tmp = %q", r.Cwd)
		}
		r = run(t, c, id, "cd /")
		wantExit(t, r, 0)
		if r.Cwd != "/" {
			t.Fatalf("cwd after cd / = %q", r.Cwd)
		}
	}
}

// testShellReplaced: a command that replaces the shell ends, and the
// next command runs with exit codes, cwd and exported environment intact.
func testShellReplaced(t *testing.T, c *client.Client) {
	for _, tc := range []struct{ name, exec string }{
		{"Bash", "exec bash"},
		{"BashLogin", "exec bash -l"},
		{"Sh", "exec sh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := newSession(t, c)
			wantExit(t, run(t, c, id, "export CONF_KEPT=kept; cd /tmp"), 0)
			r := run(t, c, id, tc.exec)
			if r.Status != wire.StatusExited {
				t.Fatalf("%s: status %q (output %q), want exited", tc.exec, r.Status, r.Output)
			}
			if !r.ShellExited {
				t.Errorf("%s: shell_exited = false, want true (the shell was replaced)", tc.exec)
			}
			r = run(t, c, id, "echo $CONF_KEPT; (exit 4)")
			wantExit(t, r, 4)
			if r.Output != "kept\n" || r.Cwd != "/tmp" {
				t.Errorf("after %s: output %q cwd %q, want \"kept\\n\" in /tmp", tc.exec, r.Output, r.Cwd)
			}
			checkIntegration(t, c, id)
		})
	}
}

// testExitWithBackgroundJob: the shell exits while a job it started still
// holds the terminal; the command ends at once with the shell's status.
func testExitWithBackgroundJob(t *testing.T, c *client.Client) {
	t.Parallel()
	id := newSession(t, c)
	wantExit(t, run(t, c, id, "sleep 300 &"), 0)
	r := run(t, c, id, "exit 3")
	wantExit(t, r, 3)
	if !r.ShellExited {
		t.Errorf("exit 3: shell_exited = false, want true")
	}
	if r := run(t, c, id, "echo next; pkill -x -P 1 sleep 2>/dev/null; true"); strings.TrimSpace(r.Output) != "next" {
		t.Errorf("after exit: %+v", r)
	}
}
