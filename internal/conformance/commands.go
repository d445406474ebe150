package conformance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

func testLifecycle(t *testing.T, c *client.Client) {
	t.Run("CreateGetListDelete", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		s, err := c.GetSession(t.Context(), id)
		if err != nil {
			t.Fatalf("get by id: %v", err)
		}
		if s.ID != id || s.Name == "" || s.Pid <= 0 || s.Cols <= 0 || s.Rows <= 0 || s.CreatedAt.IsZero() {
			t.Errorf("session = %+v: want its id, a name, a pid, a size and created_at", s)
		}
		if s.State != wire.StateIdle {
			t.Errorf("state of a new session = %q, want %q", s.State, wire.StateIdle)
		}
		byName, err := c.GetSession(t.Context(), s.Name)
		if err != nil || byName.ID != id {
			t.Errorf("get by name %q = %+v, %v: want the same session", s.Name, byName, err)
		}
		list, err := c.ListSessions(t.Context())
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if !slices.ContainsFunc(list, func(x wire.Session) bool { return x.ID == id }) {
			t.Errorf("list has no session %s", id)
		}
		if err := c.DeleteSession(t.Context(), id); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := c.GetSession(t.Context(), id); !isCode(err, "not_found") {
			t.Errorf("get after delete: err = %v, want not_found", err)
		}
	})
	t.Run("DeleteKillsProcessTree", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		watcher := newSession(t, c)
		marker := fmt.Sprintf("conf-tree-%d", rnd())
		// A background job and a foreground command, both with the marker
		// in their command line.
		wantOutput(t, c, id, fmt.Sprintf("bash -c 'sleep 1000; : %s' &", marker), "")
		r := runReq(t, c, id, wire.Exec{Command: fmt.Sprintf("bash -c 'sleep 1000; : %s'", marker), YieldAfter: ptr(0.3)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("foreground job: status %q, want running", r.Status)
		}
		// The bracket keeps grep from matching its own command line.
		count := fmt.Sprintf("grep -l '[%s]%s' /proc/[0-9]*/cmdline 2>/dev/null | wc -l", marker[:1], marker[1:])
		if n := strings.TrimSpace(run(t, c, watcher, count).Output); n == "0" {
			t.Fatalf("the watcher session cannot see the jobs (%s processes): cannot check", n)
		}
		if err := c.DeleteSession(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		eventually(t, "every process of the deleted session gone", func() (bool, string) {
			n := strings.TrimSpace(run(t, c, watcher, count).Output)
			return n == "0", n + " processes left"
		})
	})
	t.Run("CreateWithOptions", func(t *testing.T) {
		t.Parallel()
		name := "conf-opts-" + fmt.Sprint(rnd())
		s, err := c.CreateSession(t.Context(), wire.CreateSession{
			Name: name, Cols: 100, Rows: 30, Cwd: "/tmp", Env: map[string]string{"CONF_VAR": "from-env"},
		})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Cleanup(func() { deleteQuietly(c, s.ID) })
		if s.Cols != 100 || s.Rows != 30 || s.Name != name {
			t.Errorf("session = %+v, want name %q, 100x30", s, name)
		}
		wantOutput(t, c, s.ID, `pwd; echo "$CONF_VAR"; stty size`, "/tmp\nfrom-env\n30 100\n")
		if _, err := c.CreateSession(t.Context(), wire.CreateSession{Name: name}); !isCode(err, "conflict") {
			t.Errorf("second session named %q: err = %v, want conflict", name, err)
		}
	})
	t.Run("Resize", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		s, err := c.Resize(t.Context(), id, 123, 45)
		if err != nil {
			t.Fatalf("resize: %v", err)
		}
		if s.Cols != 123 || s.Rows != 45 {
			t.Errorf("after resize session is %dx%d, want 123x45", s.Cols, s.Rows)
		}
		wantOutput(t, c, id, "stty size", "45 123\n")
	})
	t.Run("Restart", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		wantOutput(t, c, id, "cd /tmp && export CONF_KEEP=kept && CONF_LOCAL=lost", "")
		before, err := c.GetSession(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		after, err := c.Restart(t.Context(), id)
		if err != nil {
			t.Fatalf("restart: %v", err)
		}
		if after.Pid == before.Pid {
			t.Errorf("restart kept pid %d: want a new shell", after.Pid)
		}
		wantOutput(t, c, id, `pwd; echo "$CONF_KEEP:$CONF_LOCAL"`, "/tmp\nkept:\n")
	})
}

func testExitCodes(t *testing.T, c *client.Client) {
	t.Parallel()
	id := newSession(t, c)
	for _, tc := range []struct {
		name    string
		command string
		code    int
	}{
		{"true", "true", 0},
		{"false", "false", 1},
		{"subshell_exit_42", "(exit 42)", 42},
		{"missing_command", "conformance-no-such-command-xyz", 127},
		{"last_of_chain", "false; true", 0},
		{"and_chain", "true && false", 1},
		{"sigkill", `bash -c 'kill -9 $$'`, 137},
		{"sigterm", `bash -c 'kill -TERM $$'`, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantExit(t, run(t, c, id, tc.command), tc.code)
		})
	}
	t.Run("interrupted_sleep_130", func(t *testing.T) {
		r := runReq(t, c, id, wire.Exec{Command: "sleep 100", YieldAfter: ptr(0.5)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("sleep 100 with yield_after 0.5: status %q, want running", r.Status)
		}
		r, err := c.Interrupt(t.Context(), id, wire.Interrupt{})
		if err != nil {
			t.Fatalf("interrupt: %v", err)
		}
		if r.Status != wire.StatusInterrupted || r.ExitCode == nil || *r.ExitCode != 130 {
			t.Fatalf("interrupt result: status %q exit_code %v, want interrupted 130", r.Status, deref(r.ExitCode))
		}
		wantOutput(t, c, id, "echo ok", "ok\n")
	})
}

func testState(t *testing.T, c *client.Client) {
	t.Run("CdAndExportPersist", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		wantOutput(t, c, id, "cd /tmp", "")
		wantOutput(t, c, id, "export CONF_A=exported", "")
		r := wantOutput(t, c, id, `pwd; echo "$CONF_A"; bash -c 'echo "child sees $CONF_A"'`, "/tmp\nexported\nchild sees exported\n")
		if r.Cwd != "/tmp" {
			t.Errorf("result cwd = %q, want /tmp", r.Cwd)
		}
		s, err := c.GetSession(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Cwd != "/tmp" {
			t.Errorf("session cwd = %q, want /tmp", s.Cwd)
		}
	})
	t.Run("VariablesAliasesFunctionsPersist", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		wantOutput(t, c, id, "conf_local=unexported", "")
		wantOutput(t, c, id, "alias conf_alias='echo from-alias'", "")
		wantOutput(t, c, id, "conf_fn() { echo \"fn got $1\"; }", "")
		wantOutput(t, c, id, `echo "$conf_local"; conf_alias; conf_fn arg`, "unexported\nfrom-alias\nfn got arg\n")
	})
	t.Run("BackgroundJob", func(t *testing.T) {
		t.Parallel()
		id := newSession(t, c)
		// The job outlives its command by far, so that its late line cannot
		// land inside the next command's output even on a loaded machine.
		r := run(t, c, id, "(sleep 2; echo late) &")
		wantExit(t, r, 0)
		wantOutput(t, c, id, "echo next", "next\n")
	})
	for _, tc := range []struct {
		name, command string
		code          int
	}{
		{"SetEFalse", "set -e; false", 1},
		{"Exit3", "exit 3", 3},
	} {
		t.Run("ShellExit_"+tc.name, func(t *testing.T) {
			t.Parallel()
			id := newSession(t, c)
			wantOutput(t, c, id, "cd /tmp && export CONF_SURVIVES=yes", "")
			r := run(t, c, id, tc.command)
			wantExit(t, r, tc.code)
			if !r.ShellExited {
				t.Errorf("%q: shell_exited = false, want true", tc.command)
			}
			wantOutput(t, c, id, `pwd; echo "$CONF_SURVIVES"`, "/tmp\nyes\n")
		})
	}
}

func testOutput(t *testing.T, c *client.Client) {
	t.Parallel()
	id := newSession(t, c)
	for _, tc := range []struct {
		name, command, want string
	}{
		{"NoEcho", "echo hi", "hi\n"},
		{"NoOutput", "true", ""},
		{"NoTrailingNewline", "printf abc", "abc"},
		{"Stderr", "echo to-stderr >&2", "to-stderr\n"},
		{"MultiLineLoop", "for i in 1 2 3\ndo\n  echo \"n$i\"\ndone", "n1\nn2\nn3\n"},
		{"MultiLineIf", "if true; then\n  echo yes\nelse\n  echo no\nfi", "yes\n"},
		{"Heredoc", "cat <<'EOF'\nline one\n  line two\n$NOT_EXPANDED\nEOF", "line one\n  line two\n$NOT_EXPANDED\n"},
		{"QuotesAndSpecials", `echo "a'b" 'c"d' \$HOME \\ ; echo '#not a comment'`, "a'b c\"d $HOME \\\n#not a comment\n"},
		{"ProgressBar", `for i in 1 2 3; do printf "\rprogress %d%%" $((i*33)); sleep 0.05; done; echo`, "progress 99%\n"},
		{"Backspace", `printf 'abc\bX\n'`, "abX\n"},
		{"Colors", `printf '\033[31mred\033[0m plain\n'`, "red plain\n"},
		{"Unicode", `printf 'héllo 世界 🎉\n'`, "héllo 世界 🎉\n"},
		{"LongLine", "printf '%05000d\\n' 0", strings.Repeat("0", 5000) + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := wantOutput(t, c, id, tc.command, tc.want)
			if strings.Contains(r.Output, "> ") && !strings.Contains(tc.want, "> ") {
				t.Errorf("output has a continuation prompt: %q", r.Output)
			}
		})
	}
	t.Run("LongCommand", func(t *testing.T) {
		// Longer than a canonical-mode line (4095 bytes): must not hang.
		arg := strings.Repeat("x", 10000)
		wantOutput(t, c, id, "echo "+arg+" | wc -c", "10001\n")
	})
	t.Run("Pager_git_log", func(t *testing.T) {
		if !have(t, c, id, "git") {
			t.Skip("git is not installed in this sandbox")
		}
		r := run(t, c, id, `d=$(mktemp -d) && cd "$d" && git init -q && git -c user.email=c@example.com -c user.name=conf commit -q --allow-empty -m conformance-first && git log`)
		wantExit(t, r, 0)
		if !strings.Contains(r.Output, "conformance-first") {
			t.Errorf("git log output lacks the commit message: %q", r.Output)
		}
	})
	t.Run("Pager_man", func(t *testing.T) {
		if !have(t, c, id, "man") || !have(t, c, id, "bash") || deref(run(t, c, id, "man -w bash >/dev/null 2>&1").ExitCode) != 0 {
			t.Skip("man or the bash manual page is not installed in this sandbox")
		}
		r := run(t, c, id, "man bash")
		wantExit(t, r, 0)
		if !strings.Contains(r.Output, "BASH") {
			t.Errorf("man bash output lacks BASH: %.300q", r.Output)
		}
	})
	t.Run("InvalidUTF8IsCleaned", func(t *testing.T) {
		// The JSON body itself must be valid UTF-8: fetch it raw.
		body := rawExec(t, c, id, `printf 'a\377\376b\000c\n'`)
		if !utf8.Valid(body) {
			t.Fatalf("exec answer is not valid UTF-8: %q", body)
		}
		r := run(t, c, id, `printf 'a\377\376b\000c\n'`)
		wantExit(t, r, 0)
		if !strings.HasPrefix(r.Output, "a") || !strings.Contains(r.Output, "b") || !strings.HasSuffix(r.Output, "c\n") {
			t.Errorf("output %q: want a...b...c with the invalid bytes replaced", r.Output)
		}
	})
}
