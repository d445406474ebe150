package tool

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// scripted is a Sessions that answers exec and wait from a list, for the
// states a real limbsd gives only under faults (a lost result, a disk
// bound cutting a log). Everything else is the golden tests' job.
type scripted struct {
	results []wire.Result
}

func (s *scripted) next() (wire.Result, error) {
	r := s.results[0]
	s.results = s.results[1:]
	return r, nil
}
func (s *scripted) CreateSession(context.Context, wire.CreateSession) (wire.Session, error) {
	return wire.Session{ID: "s_1", Name: "s_1", Cwd: "/w"}, nil
}
func (s *scripted) ListSessions(context.Context) ([]wire.Session, error) { return nil, nil }
func (s *scripted) DeleteSession(context.Context, string) error          { return nil }
func (s *scripted) Restart(context.Context, string) (wire.Session, error) {
	return wire.Session{}, nil
}
func (s *scripted) Exec(context.Context, string, wire.Exec) (wire.Result, error) { return s.next() }
func (s *scripted) Wait(context.Context, string, wire.Wait) (wire.Result, error) { return s.next() }
func (s *scripted) Input(context.Context, string, wire.Input) (wire.Result, error) {
	return s.next()
}
func (s *scripted) Interrupt(context.Context, string, wire.Interrupt) (wire.Result, error) {
	return s.next()
}
func (s *scripted) Screen(context.Context, string) (wire.Screen, error) { return wire.Screen{}, nil }
func (s *scripted) Output(context.Context, string, int64, int64) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("")), nil
}

func TestUnseenAndMissing(t *testing.T) {
	zero := 0
	s := &scripted{results: []wire.Result{
		{CommandID: "c_1", Status: wire.StatusRunning, Output: "a\n", OffsetStart: 100, ChunkStart: 100, OffsetEnd: 110, Cwd: "/w"},
		// A result covering 110..130 was lost on its way.
		{CommandID: "c_1", Status: wire.StatusExited, ExitCode: &zero, Output: "z\n", OffsetStart: 100, ChunkStart: 130, OffsetEnd: 140, Cwd: "/w",
			LogTruncated: true, LogMissing: []int64{105, 125}},
	}}
	sh := NewShell(s, ShellOptions{})
	ctx := context.Background()
	y := 1.0
	if _, err := sh.Run(ctx, RunInput{Command: "make", Yield: &y}); err != nil {
		t.Fatal(err)
	}
	w, err := sh.Wait(ctx, WaitInput{})
	if err != nil {
		t.Fatal(err)
	}
	out := w.Out.Results[0]
	for _, want := range []string{
		"[bytes 10-30 of this command's output were not shown in any result; shell_read command=c_1 from=10 to=30 returns them]",
		"[bytes 5-25 of this command's output are no longer kept",
		"[exit code 0; cwd /w;",
	} {
		if !strings.Contains(w.Text, want) {
			t.Errorf("text lacks %q:\n%s", want, w.Text)
		}
	}
	if len(out.Unseen) != 2 || out.Unseen[0] != 10 || out.Unseen[1] != 30 || len(out.Missing) != 2 || out.Missing[0] != 5 {
		t.Errorf("structured: unseen %v missing %v", out.Unseen, out.Missing)
	}
}

// TestRecoveredEndWords: an end limbsd read from process state is told in
// the tool's words; limbsd's note (which names an HTTP route) is not.
func TestRecoveredEndWords(t *testing.T) {
	s := &scripted{results: []wire.Result{
		{CommandID: "c_1", Status: wire.StatusExited, Output: "x\n", OffsetStart: 0, ChunkStart: 0, OffsetEnd: 2, Cwd: "/w",
			EndRecovered: true, EndNote: "limbs saw no proven end ...: this shell closed or replaced descriptor 251 ...: restart the session (POST /v1/sessions/{id}/restart) for the fast path"},
	}}
	sh := NewShell(s, ShellOptions{})
	r, err := sh.Run(context.Background(), RunInput{Command: "false"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"read from the shell's process state", "exit code is unknown", "session action=restart"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("text lacks %q:\n%s", want, r.Text)
		}
	}
	if strings.Contains(r.Text, "/v1/") || !r.Out.EndRecovered {
		t.Errorf("text names a route, or the structured result lacks end_recovered:\n%s", r.Text)
	}
}
