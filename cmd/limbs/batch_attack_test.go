package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestBatchTasksHostile: a tasks file written to hurt (ids that are
// paths, duplicate ids, missing fields, unknown fields, a line of 17 MiB)
// is refused before anything runs, with the line and what to do.
func TestBatchTasksHostile(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"dotdot", `{"id": "../x", "instruction": "x", "test": "true"}`, "give letters, digits"},
		{"slash", `{"id": "a/b", "instruction": "x", "test": "true"}`, "give letters, digits"},
		{"dot", `{"id": ".", "instruction": "x", "test": "true"}`, "give letters, digits"},
		{"long id", `{"id": "` + strings.Repeat("a", 65) + `", "instruction": "x", "test": "true"}`, "at most 64"},
		{"dup", `{"id": "a", "instruction": "x", "test": "true"}` + "\n" + `{"id": "a", "instruction": "y", "test": "true"}`, ":2: id \"a\" is used twice"},
		{"no instruction", `{"id": "a", "test": "true"}`, "has no instruction"},
		{"no test", `{"id": "a", "instruction": "x"}`, "has no test"},
		{"unknown field", `{"id": "a", "instruction": "x", "test": "true", "tset": "1"}`, "unknown field"},
		{"not json", `{"id": "a", "instr`, ":1:"},
		{"huge line", `{"id": "a", "instruction": "` + strings.Repeat("x", 17<<20) + `", "test": "true"}`, "a line is longer than 16777216 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadTasks(writeFile(t, "tasks.jsonl", tc.content+"\n"), "img")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("loadTasks: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestBatchLongIDs: every id the tasks file takes (up to 64 characters)
// names a sandbox limbs serve takes (at most 63), one of its own.
func TestBatchLongIDs(t *testing.T) {
	b := &batch{prefix: batchPrefix(t.TempDir())}
	seen := map[string]string{}
	for _, id := range []string{"a", strings.Repeat("x", 44), strings.Repeat("x", 45), strings.Repeat("x", 63) + "1", strings.Repeat("x", 63) + "2", strings.Repeat("9", 64)} {
		n := b.sandboxName(id)
		if err := sandbox.CheckName(n); err != nil {
			t.Errorf("id %q: %v", id, err)
		}
		if other, ok := seen[n]; ok {
			t.Errorf("ids %q and %q have the same sandbox %q", id, other, n)
		}
		seen[n] = id
		if !strings.HasPrefix(n, b.prefix) {
			t.Errorf("sandbox %q of id %q lacks the batch's prefix", n, id)
		}
	}
}

// TestBatchHostileRun: on a real limbs serve, a task with a 64-character
// id passes (its sandbox name fits), a setup that fails is an
// infrastructure failure naming its exit code, and a test that never
// ends (printing all the while) is stopped by --task-timeout; each gets
// one result and no sandbox is left.
func TestBatchHostileRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	srv := startFakeLLM(t, writeFile(t, "script.json", `{"turns": [{"repeat": 100, "calls": [{"name": "finish", "arguments": {"message": "done"}}]}]}`))
	long := strings.Repeat("L", 64)
	var lines []string
	for _, task := range []batchTask{
		{ID: long, Image: localImage, Instruction: "x", Test: "true"},
		{ID: "setup-fails", Image: localImage, Setup: "echo broken >&2; exit 9", Instruction: "x", Test: "true"},
		{ID: "endless-test", Image: localImage, Instruction: "x", Test: "yes flood | head -c 20000000; sleep 600"},
	} {
		b, _ := json.Marshal(task)
		lines = append(lines, string(b))
	}
	tasks := writeFile(t, "tasks.jsonl", strings.Join(lines, "\n")+"\n")
	out := filepath.Join(t.TempDir(), "results")
	var log testbin.Buffer
	cmd := batchCmd(t, addr, srv.URL, tasks, out, &log)
	cmd.Args = append(cmd.Args, "--task-timeout", "40s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(4 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the batch did not end:\n%s", log.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, log.String())
	}
	got := map[string]batchResult{}
	for _, r := range readBatchResults(t, out) {
		if _, ok := got[r.ID]; ok {
			t.Errorf("task %s has two results", r.ID)
		}
		got[r.ID] = r
	}
	if r := got[long]; !r.Passed {
		t.Errorf("the task with a 64-character id: %+v, want passed", r)
	}
	if r := got["setup-fails"]; r.Failure != failInfra || !strings.Contains(r.Message, "setup exited 9") || !strings.Contains(r.Message, "broken") {
		t.Errorf("the task whose setup fails: %+v", r)
	}
	if r := got["endless-test"]; r.Failure != failLimit || !strings.Contains(r.Message, "--task-timeout") {
		t.Errorf("the task whose test never ends: %+v", r)
	}
	if l := serveLeftovers(t, addr)(batchPrefix(out), nil); len(l) != 0 {
		t.Errorf("sandboxes left: %v", l)
	}
}

// TestRunToEndTail: a command that prints without end has only the tail
// of its output kept (maxTestOutput), however much it printed.
func TestRunToEndTail(t *testing.T) {
	chunk := strings.Repeat("z", 256<<10)
	var waits atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/exec"):
			wire.WriteJSON(w, http.StatusOK, wire.Result{Status: wire.StatusRunning, Output: chunk})
		case strings.HasSuffix(r.URL.Path, "/wait"):
			if waits.Add(1) < 100 {
				wire.WriteJSON(w, http.StatusOK, wire.Result{Status: wire.StatusRunning, Output: chunk})
				return
			}
			code := 3
			wire.WriteJSON(w, http.StatusOK, wire.Result{Status: wire.StatusExited, ExitCode: &code, Output: "the end"})
		default:
			wire.WriteError(w, wire.ErrNotFound)
		}
	}))
	defer hs.Close()
	cl, err := client.New(hs.URL, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	code, out, err := runToEnd(t.Context(), cl, "s_1", "flood")
	if err != nil || code != 3 {
		t.Fatalf("runToEnd: %d, %v", code, err)
	}
	if len(out) > maxTestOutput || !strings.HasSuffix(out, "the end") {
		t.Errorf("runToEnd kept %d bytes (ending %q), want the last %d at most", len(out), out[max(len(out)-20, 0):], maxTestOutput)
	}
}
