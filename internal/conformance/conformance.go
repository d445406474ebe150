// Package conformance is the reusable test suite of the Sessions part of the
// limbs API (docs/api.md). It runs against anything that serves that API:
// limbsd directly, or one sandbox of `limbs serve` with any provider, so
// that every way of running limbs is held to the same behaviour.
//
// It must never reach past the HTTP API (no shell, file or process access
// of its own: everything goes through internal/client), and every case
// creates and deletes its own sessions so that cases can share a daemon.
//
// Cases marked slow in their name (suffix "_slow") move megabytes or start
// dozens of shells; they still run by default and are skipped by -short.
package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// guardYield bounds calls that are expected to finish quickly: a command
// that should have ended but did not comes back as "running" (a clear
// failure) instead of hanging the suite. It is not a performance bound.
const guardYield = 20.0

// Run runs the whole Sessions conformance suite against c. c may be shared
// with other tests: every case works in sessions of its own.
func Run(t *testing.T, c *client.Client) {
	t.Helper()
	if _, err := c.Health(t.Context()); err != nil {
		t.Fatalf("health check failed, nothing to test: %v", err)
	}
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, c) })
	t.Run("ExitCodes", func(t *testing.T) { testExitCodes(t, c) })
	t.Run("State", func(t *testing.T) { testState(t, c) })
	t.Run("Output", func(t *testing.T) { testOutput(t, c) })
	t.Run("Interactive", func(t *testing.T) { testInteractive(t, c) })
	t.Run("Stopping", func(t *testing.T) { testStopping(t, c) })
	t.Run("StopsWholeCommand", func(t *testing.T) { testStopsWholeCommand(t, c) })
	t.Run("TTYPrompts", func(t *testing.T) { testTTYPrompts(t, c) })
	t.Run("OutputBetween", func(t *testing.T) { testOutputBetween(t, c) })
	t.Run("RawOutput", func(t *testing.T) { testRawOutput(t, c) })
	t.Run("Attach", func(t *testing.T) { testAttach(t, c) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, c) })
	t.Run("ForgedMarkers", func(t *testing.T) { testForgedMarkers(t, c) })
	t.Run("Results", func(t *testing.T) { testResults(t, c) })
	t.Run("Hooks", func(t *testing.T) { testHooks(t, c) })
	t.Run("ShellReplaced", func(t *testing.T) { testShellReplaced(t, c) })
	t.Run("ExitWithBackgroundJob", func(t *testing.T) { testExitWithBackgroundJob(t, c) })
	t.Run("EndRecovered", func(t *testing.T) { testEndRecovered(t, c) })
	t.Run("Until", func(t *testing.T) { testUntil(t, c) })
	t.Run("Parallel50_slow", func(t *testing.T) { testParallelSessions(t, c) })
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// newSession creates a session with a unique name for this test and deletes
// it when the test ends, however it ends.
func newSession(t *testing.T, c *client.Client) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	name = "conf-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
	s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: name})
	if err != nil {
		t.Fatalf("creating session %q: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.DeleteSession(ctx, s.ID); err != nil && !errors.Is(err, wire.ErrNotFound) {
			t.Errorf("deleting session %s: %v", s.ID, err)
		}
	})
	return s.ID
}

func ptr[T any](v T) *T { return &v }

// run executes command and fails the test on a transport or API error.
func run(t *testing.T, c *client.Client, id, command string) wire.Result {
	t.Helper()
	return runReq(t, c, id, wire.Exec{Command: command, YieldAfter: ptr(guardYield)})
}

func runReq(t *testing.T, c *client.Client, id string, req wire.Exec) wire.Result {
	t.Helper()
	r, err := c.Exec(t.Context(), id, req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Command, err)
	}
	return r
}

// wantExit checks that r is a finished command with the given exit code.
func wantExit(t *testing.T, r wire.Result, code int) {
	t.Helper()
	if r.Status != wire.StatusExited {
		t.Fatalf("status = %q (waiting_for_input %v, after %d ms), want %q (output %q)", r.Status, r.WaitingForInput, r.DurationMs, wire.StatusExited, r.Output)
	}
	if r.ExitCode == nil {
		t.Fatalf("exit_code = null for an exited command (output %q)", r.Output)
	}
	if *r.ExitCode != code {
		t.Fatalf("exit_code = %d, want %d (output %q)", *r.ExitCode, code, r.Output)
	}
}

// wantOutput runs command and checks its exact cleaned output and success.
func wantOutput(t *testing.T, c *client.Client, id, command, want string) wire.Result {
	t.Helper()
	r := run(t, c, id, command)
	wantExit(t, r, 0)
	if r.Output != want {
		t.Fatalf("exec %q: output = %q, want %q", command, r.Output, want)
	}
	return r
}

// waitDone calls wait until the command is no longer running and returns
// every result, the first one included.
func waitDone(t *testing.T, c *client.Client, id string, first wire.Result, yield float64) []wire.Result {
	t.Helper()
	rs := []wire.Result{first}
	for i := 0; rs[len(rs)-1].Status == wire.StatusRunning; i++ {
		if i > 1000 {
			t.Fatalf("command still running after %d waits", i)
		}
		r, err := c.Wait(t.Context(), id, wire.Wait{YieldAfter: ptr(yield)})
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		rs = append(rs, r)
	}
	return rs
}

// raw fetches the session's raw output between two offsets, with the PTY's
// \r\n turned back into \n.
func raw(t *testing.T, c *client.Client, id string, from, to int64) []byte {
	t.Helper()
	rc, err := c.Output(t.Context(), id, from, to)
	if err != nil {
		t.Fatalf("GET output from=%d to=%d: %v", from, to, err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil {
		t.Fatalf("reading output from=%d to=%d: %v", from, to, err)
	}
	if int64(buf.Len()) != to-from {
		t.Errorf("GET output from=%d to=%d returned %d bytes, want %d", from, to, buf.Len(), to-from)
	}
	return bytes.ReplaceAll(buf.Bytes(), []byte("\r\n"), []byte("\n"))
}

// have reports whether the sandbox has a program, for cases that need one.
func have(t *testing.T, c *client.Client, id, program string) bool {
	t.Helper()
	r := run(t, c, id, "command -v "+program+" >/dev/null")
	return r.Status == wire.StatusExited && r.ExitCode != nil && *r.ExitCode == 0
}

// eventually polls cond until it holds; the limit only keeps a broken
// daemon from hanging the suite.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for i := 0; i < 100; i++ {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never happened; last seen:\n%s", what, last)
}
