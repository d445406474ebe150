package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestExportThroughServe: a real session (real bash behind a real
// control plane, whose follower records limbsd's journal) exported with
// `limbs export --format asciicast` gives the session's raw bytes as its
// "o" data, and `limbs events` lists its commands with their ends.
func TestExportThroughServe(t *testing.T) {
	ts, _ := inProcessServe(t, "", nil)
	t.Setenv("LIMBS_ADDR", ts.URL)
	t.Setenv("LIMBS_TOKEN", "tok")

	ctx := t.Context()
	c, err := client.New(ts.URL, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes().Create(ctx, wire.CreateSandbox{Name: "rec"})
	if err != nil {
		t.Fatal(err)
	}
	sc := c.Sandbox(sb.ID)
	s, err := sc.CreateSession(ctx, wire.CreateSession{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{script, "echo second; false"} {
		if r, err := sc.Exec(ctx, "main", wire.Exec{Command: cmd}); err != nil || r.Status != wire.StatusExited {
			t.Fatalf("exec %q: %+v, %v", cmd, r, err)
		}
	}
	// The session is idle: once the log's output events hold all of its
	// stream, both are the same length.
	var raw []byte
	testbin.Eventually(t, "the session's output in the log", time.Minute, func() bool {
		rc, err := sc.Output(ctx, s.ID, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ = io.ReadAll(rc)
		rc.Close()
		return outputBytes(t, c, sb.ID) == int64(len(raw))
	})

	file := filepath.Join(t.TempDir(), "s.cast")
	if code := run(ctx, []string{"export", "rec", "--session", "main", "--format", "asciicast", "-o", file}); code != 0 {
		t.Fatalf("limbs export: exit code %d", code)
	}
	h, out := castData(t, file)
	if h["version"] != 2.0 {
		t.Errorf("header %v, want version 2", h)
	}
	if out != string(raw) {
		t.Errorf("the export's \"o\" data:\n got %q\nwant the session's raw output %q", out, raw)
	}
	if !strings.Contains(out, "日本 😀") {
		t.Errorf("the export lacks the script's text: %q", out)
	}

	lines, code := captureStdout(t, func() int { return run(ctx, []string{"events", "rec", "--type", "command.*"}) })
	if code != 0 {
		t.Fatalf("limbs events: exit code %d", code)
	}
	for _, want := range []string{"command.started " + s.ID + " echo second; false", "command.finished " + s.ID + " exited"} {
		if !strings.Contains(lines, want) {
			t.Errorf("limbs events lacks %q:\n%s", want, lines)
		}
	}
}
