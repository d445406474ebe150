package shell

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

func newTestManager(t *testing.T) *Manager {
	t.Helper()
	m, err := NewManager(context.Background(), Options{StateDir: t.TempDir(), Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newTestSession(t *testing.T, m *Manager) *Session {
	t.Helper()
	s, err := m.Create(context.Background(), wire.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func f(v float64) *float64 { return &v }

func run(t *testing.T, s *Session, cmd string) wire.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := s.Exec(ctx, wire.Exec{Command: cmd, YieldAfter: f(20)})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return r
}

func TestExecBasics(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	tests := []struct {
		cmd  string
		out  string
		code int
	}{
		{"echo hi", "hi\n", 0},
		{"false", "", 1},
		{"nosuchcommand_x 2>/dev/null", "", 127},
		{"x=5; echo $((x*2))", "10\n", 0},
		{"cat <<EOF\na\nb\nEOF", "a\nb\n", 0},
		{"for i in 1 2; do\n echo $i\ndone", "1\n2\n", 0},
		{"bash -c 'kill -9 $$'", "Killed\n", 137},
	}
	for _, tc := range tests {
		t.Run(tc.cmd, func(t *testing.T) {
			r := run(t, s, tc.cmd)
			if r.Status != wire.StatusExited || r.ExitCode == nil || *r.ExitCode != tc.code || r.Output != tc.out {
				t.Fatalf("got status %s code %v output %q; want code %d output %q", r.Status, deref(r.ExitCode), r.Output, tc.code, tc.out)
			}
		})
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestStatePersists(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	run(t, s, "cd /tmp && export FOO=bar && y=1 && alias ll='echo aliased' && fn() { echo fn$1; }")
	r := run(t, s, "pwd; echo $FOO $y; ll; fn 2")
	if want := "/tmp\nbar 1\naliased\nfn2\n"; r.Output != want || r.Cwd != "/tmp" {
		t.Fatalf("got %q cwd %q, want %q", r.Output, r.Cwd, want)
	}
	r = run(t, s, "exit 3")
	if !r.ShellExited || *r.ExitCode != 3 {
		t.Fatalf("exit 3: %+v", r)
	}
	r = run(t, s, "pwd; echo $FOO")
	if r.Output != "/tmp\nbar\n" {
		t.Fatalf("after exit: %q", r.Output)
	}
	_ = strings.TrimSpace
}

func TestBadValues(t *testing.T) {
	s := newTestSession(t, newTestManager(t))
	ctx := context.Background()
	neg, negInt := -1.0, -1
	for name, call := range map[string]func() error{
		"exec no command":          func() error { _, err := s.Exec(ctx, wire.Exec{Timeout: 1}); return err },
		"exec blank command":       func() error { _, err := s.Exec(ctx, wire.Exec{Command: " \n"}); return err },
		"exec NUL":                 func() error { _, err := s.Exec(ctx, wire.Exec{Command: "echo \x00"}); return err },
		"exec negative timeout":    func() error { _, err := s.Exec(ctx, wire.Exec{Command: "true", Timeout: -1}); return err },
		"exec negative yield":      func() error { _, err := s.Exec(ctx, wire.Exec{Command: "true", YieldAfter: &neg}); return err },
		"exec negative max_output": func() error { _, err := s.Exec(ctx, wire.Exec{Command: "true", MaxOutput: &negInt}); return err },
		"wait negative yield":      func() error { _, err := s.Wait(ctx, wire.Wait{YieldAfter: &neg}); return err },
		"input nothing":            func() error { _, err := s.Input(ctx, wire.Input{}); return err },
		"input unknown key":        func() error { _, err := s.Input(ctx, wire.Input{Keys: []string{"Hyper-X"}}); return err },
		"resize missing rows":      func() error { _, err := s.Resize(80, 0); return err },
		"resize huge":              func() error { _, err := s.Resize(5000, 40); return err },
	} {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("got %v, want a bad request", err)
			}
		})
	}
	if r := run(t, s, "echo still fine"); r.Output != "still fine\n" {
		t.Fatalf("after bad requests: %+v", r)
	}
}

// The output cleaned as it arrives (the read loop feeds each command's
// output to a cleaner) is the output cleaned afterwards from the stream,
// truncation note included, for output that is split across many reads.
func TestOutputCleanedAheadMatchesStream(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	cmds := []string{
		`printf 'a\rb\n\033[31mred\033[0m\n'; printf 'é\xff\x00z\n'; for i in 1 2 3; do printf "\r%d%%" $((i*33)); done; echo`,
		`seq 1 30000`,
		`yes 'x\ty' | head -c 3000000; printf 'abc\bd\n'`,
	}
	for _, maxOut := range []int{wire.DefaultMaxOutput, 100} {
		for _, cmd := range cmds {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			r, err := s.Exec(ctx, wire.Exec{Command: cmd, YieldAfter: f(50), MaxOutput: &maxOut})
			cancel()
			if err != nil || r.Status != wire.StatusExited {
				t.Fatalf("%q: %+v %v", cmd, r, err)
			}
			want, truncated := s.cleanRange(r.ChunkStart, r.OffsetEnd, maxOut)
			if r.Output != want || r.Truncated != truncated {
				t.Fatalf("%q (max_output %d): cleaned ahead %q (truncated %v), from the stream %q (truncated %v)", cmd, maxOut, head(r.Output), r.Truncated, head(want), truncated)
			}
		}
	}
}

func head(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}
