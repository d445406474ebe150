package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestAgentCannotTouchLimbsd: from the agent's uid, through limbsd as a
// user's commands run, limbsd cannot be signalled, traced or read, its
// directories cannot be written nor its socket connected to, the token is
// nowhere the agent can read, and the shells hold no capability. The file
// API works as the agent: what it writes is the agent's, and a link the
// agent planted leads nowhere the agent could not go.
func TestAgentCannotTouchLimbsd(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	b := newBox(t, p, nil)
	pid, code := dockerExec(t, p, b, "0", "pgrep", "-o", "-x", "limbsd")
	pid = strings.TrimSpace(pid)
	if code != 0 || pid == "" {
		t.Fatalf("pgrep limbsd: exit %d, %q", code, pid)
	}
	half := len(b.spec.Token) / 2
	refused := []struct{ name, command string }{
		{"kill -9 limbsd", "kill -9 " + pid},
		{"kill -9 init", "kill -9 1"},
		{"limbsd's environ", "cat /proc/" + pid + "/environ"},
		{"limbsd's memory", "head -c 16 /proc/" + pid + "/mem"},
		{"init's environ", "cat /proc/1/environ"},
		{"trace limbsd", "python3 -c 'import ctypes,sys; l=ctypes.CDLL(None); sys.exit(0 if l.ptrace(16, " + pid + ", 0, 0) == 0 else 1)'"},
		{"list /run/limbs", "ls /run/limbs"},
		{"touch /run/limbs", "touch /run/limbs/x"},
		{"remove the socket", "rm -f /run/limbs/limbsd.sock && test ! -e /run/limbs/limbsd.sock"},
		{"replace the socket", "mv /run/limbs/limbsd.sock /tmp/s"},
		{"touch the state dir", "touch /run/limbs/state/x"},
		{"remove the sessions", "rm -rf /run/limbs/state/sessions && test ! -e /run/limbs/state/sessions"},
		{"connect to the socket", `python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("/run/limbs/limbsd.sock")'`},
		{"limbsd's run directory", "ls /dev/shm/limbs-*/"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if r := b.run(t, tc.command, 30); exitCode(r) == 0 {
				t.Errorf("%q as the agent: exit 0 (%q), want it refused", tc.command, r.Output)
			}
		})
	}
	if out, _ := dockerExec(t, p, b, "0", "sh", "-c", "kill -0 "+pid+" && echo alive"); strings.TrimSpace(out) != "alive" {
		t.Fatalf("limbsd after the attempts: %q", out)
	}

	t.Run("token nowhere readable", func(t *testing.T) {
		// The token is put together in the shell, never exported nor on a
		// command line, and looked for everywhere the agent can read.
		cmd := fmt.Sprintf(`t=%s; t=${t}%s; test -n "$t" || exit 3; printf '%%s\n' "$t" | grep -rlsF -f - /proc/[0-9]*/environ /proc/[0-9]*/cmdline /run/limbs /workspace /tmp "$HOME" /etc 2>/dev/null; env | grep -c LIMBS_TOKEN`,
			b.spec.Token[:half], b.spec.Token[half:])
		r := b.run(t, cmd, 60)
		if got := strings.TrimSpace(r.Output); got != "0" {
			t.Errorf("the token is readable by the agent in: %q", got)
		}
	})
	t.Run("no capabilities", func(t *testing.T) {
		r := b.run(t, "grep -E '^(CapInh|CapPrm|CapEff|CapAmb|NoNewPrivs):' /proc/self/status", 30)
		want := "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1"
		if got := strings.TrimSpace(strings.ReplaceAll(r.Output, "\r", "")); got != want {
			t.Errorf("capabilities of a command:\n%s\nwant\n%s", got, want)
		}
	})

	t.Run("files are the agent's", func(t *testing.T) {
		if _, err := b.lc.WriteFile(ctx, "/workspace/owned", strings.NewReader("x"), 0o644, ""); err != nil {
			t.Fatal(err)
		}
		if r := b.run(t, "stat -c %u:%g /workspace/owned", 30); strings.TrimSpace(r.Output) != "1000:1000" {
			t.Errorf("owner of a file written through the API: %q, want 1000:1000", r.Output)
		}
	})
	t.Run("a planted link leads nowhere the agent cannot go", func(t *testing.T) {
		before, _ := dockerExec(t, p, b, "0", "sha256sum", "/etc/passwd", "/etc/shadow")
		b.run(t, "ln -sf /etc/passwd /workspace/pw && ln -sf /etc/shadow /workspace/sh", 30)
		if _, err := b.lc.WriteFile(ctx, "/workspace/pw", strings.NewReader("root::0:0::/:/bin/sh\n"), 0o644, ""); err == nil {
			t.Errorf("PUT through a link to /etc/passwd succeeded")
		}
		old, nw := "root", "toor"
		if _, err := b.lc.Edit(ctx, wire.Edit{Command: "str_replace", Path: "/workspace/pw", OldStr: &old, NewStr: &nw}); err == nil {
			t.Errorf("edit through a link to /etc/passwd succeeded")
		}
		if rc, err := b.lc.ReadFile(ctx, "/workspace/sh"); err == nil {
			rc.Close()
			t.Errorf("read through a link to /etc/shadow succeeded")
		}
		if after, _ := dockerExec(t, p, b, "0", "sha256sum", "/etc/passwd", "/etc/shadow"); after != before {
			t.Errorf("/etc/passwd or /etc/shadow changed:\n%s\n%s", before, after)
		}
	})
	t.Run("a killed files worker is replaced", func(t *testing.T) {
		b.run(t, "pkill -KILL -u 1000 -x limbsd; true", 30)
		if _, err := b.lc.WriteFile(ctx, "/workspace/again", strings.NewReader("y"), 0o644, ""); err != nil {
			// The request that finds the worker gone may fail; the next
			// one starts another.
			if _, err := b.lc.WriteFile(ctx, "/workspace/again", strings.NewReader("y"), 0o644, ""); err != nil {
				t.Errorf("file API after its worker was killed: %v", err)
			}
		}
	})

	// The host side: limbsd's files are root's, the agent's directory in
	// each session is the agent's.
	st, err := os.Stat(filepath.Join(b.dir, "limbsd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", st.Mode().Perm())
	}
}

// TestSocketDirLinkRefused: a link in place of the socket directory itself
// (or of its state directory) is never followed by Start: the host
// directory it points to keeps its owner and mode and gets nothing, and
// Start fails with sandbox.ErrUnsafe naming the link.
func TestSocketDirLinkRefused(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	for _, rel := range []string{".", "state"} {
		t.Run(rel, func(t *testing.T) {
			b := newBox(t, p, nil)
			if err := p.Stop(ctx, b.spec.ID); err != nil {
				t.Fatal(err)
			}
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.Mkdir(victim, 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(victim, 4242, 4242); err != nil {
				t.Skipf("cannot chown (not root?): %v", err)
			}
			target := filepath.Join(b.dir, rel)
			if err := os.Rename(target, target+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, target); err != nil {
				t.Fatal(err)
			}
			err := startReady(ctx, p, b.spec.ID)
			if !errors.Is(err, sandbox.ErrUnsafe) || !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("Start with %s a link: %v, want ErrUnsafe naming the link", target, err)
			}
			fi, serr := os.Stat(victim)
			if serr != nil {
				t.Fatal(serr)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4242 || fi.Mode().Perm() != 0o750 {
				t.Errorf("host directory now uid %d mode %v, want 4242 and 0750", st.Uid, fi.Mode().Perm())
			}
			if ents, _ := os.ReadDir(victim); len(ents) != 0 {
				t.Errorf("host directory got %d entries", len(ents))
			}
			// Remove cleans up without following the link either.
			if err := p.Remove(ctx, b.spec.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(victim); err != nil {
				t.Errorf("Remove took the host directory: %v", err)
			}
		})
	}
}
