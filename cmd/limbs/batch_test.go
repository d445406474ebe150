package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/agent/fakellm"
	"github.com/limbs-dev/limbs/internal/testbin"
)

// batchScript solves any batch task of batchTasks: one turn that runs the
// task's ./solve.sh (its setup wrote it) and finishes.
const batchScript = `{"turns": [{"text": "Solving.", "repeat": 1000, "calls": [
  {"name": "shell_run", "arguments": {"command": "sh ./solve.sh"}},
  {"name": "finish", "arguments": {"message": "ran solve.sh"}}]}]}`

// batchTasks writes n tasks to a file: every third one's test fails,
// t07's setup fails (an infrastructure failure); the others pass. Each
// solve takes a while, so that a kill finds tasks running.
func batchTasks(t *testing.T, n int, image string) string {
	t.Helper()
	var b bytes.Buffer
	for i := range n {
		id := fmt.Sprintf("t%02d", i)
		task := batchTask{ID: id, Image: image,
			Setup:       `printf 'sleep 2; echo solved > out\n' > solve.sh`,
			Instruction: "task " + id + ": run solve.sh",
			Test:        "grep -q solved out"}
		if i%3 == 2 {
			task.Test = "grep -q never out"
		}
		if i == 7 {
			task.Setup = "exit 7"
		}
		line, _ := json.Marshal(task)
		b.Write(append(line, '\n'))
	}
	p := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readBatchResults parses results.jsonl strictly: every line whole.
func readBatchResults(t *testing.T, out string) []batchResult {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "results.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var rs []batchResult
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		var r batchResult
		if !strings.HasSuffix(line, "\n") || json.Unmarshal([]byte(line), &r) != nil {
			t.Fatalf("results.jsonl has a broken line %q", line)
		}
		rs = append(rs, r)
	}
	return rs
}

// batchCmd is limbs agent --tasks with the test's serve and model.
func batchCmd(t *testing.T, addr, model, tasks, out string, out2 *testbin.Buffer) *exec.Cmd {
	cmd := exec.Command(testbin.Path(t, "limbs", true), "agent", "--tasks", tasks, "--parallel", "4", "--out", out,
		"--model", "fake", "--base-url", model, "--task-timeout", "5m")
	cmd.Env = append(os.Environ(), "LIMBS_ADDR="+addr, "LIMBS_TOKEN=tok", "OPENAI_API_KEY="+fakeKey, "LIMBS_LLM_API_KEY=", "LIMBS_SANDBOX=")
	cmd.Stdout, cmd.Stderr = out2, out2
	return cmd
}

// testBatchRestart is acceptance 4 on the serve at addr: a batch of 20
// tasks, --parallel 4, killed (SIGKILL) once some have a result, then
// the same command again: every task ends with exactly one result, none
// that had one ran again (the model server saw its instruction once), and
// no sandbox of the batch is left.
func testBatchRestart(t *testing.T, addr, image string, leftovers func(prefix string, ids []string) []string) {
	srv := startFakeLLM(t, writeFile(t, "script.json", batchScript))
	const n = 20
	tasks := batchTasks(t, n, image)
	out := filepath.Join(t.TempDir(), "results")

	// The first run, killed in the middle.
	var log1 testbin.Buffer
	cmd := batchCmd(t, addr, srv.URL, tasks, out, &log1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	testbin.Eventually(t, "6 results", 5*time.Minute, func() bool {
		select {
		case <-done:
			t.Fatalf("the batch ended before the kill:\n%s", log1.String())
		default:
		}
		return len(readBatchResults(t, out)) >= 6
	})
	_ = cmd.Process.Kill()
	<-done
	first := map[string]bool{}
	for _, r := range readBatchResults(t, out) {
		first[r.ID] = true
	}
	if len(first) >= n {
		t.Fatalf("every task had a result at the kill; nothing was left to redo:\n%s", log1.String())
	}
	// The sandboxes the kill left: their ids, to check their containers.
	var ids []string
	for _, sb := range sandboxesOf(t, addr) {
		if strings.HasPrefix(sb.Name, batchPrefix(out)) {
			ids = append(ids, sb.ID)
		}
	}
	t.Logf("killed with %d results; %d sandboxes of the batch left: %v", len(first), len(ids), leftovers(batchPrefix(out), ids))
	if len(ids) == 0 {
		t.Errorf("the kill left no sandbox of the batch: the restart's removal is not shown")
	}

	// The same command again.
	var log2 testbin.Buffer
	cmd2 := batchCmd(t, addr, srv.URL, tasks, out, &log2)
	if err := cmd2.Start(); err != nil {
		t.Fatal(err)
	}
	done2 := make(chan error, 1)
	go func() { done2 <- cmd2.Wait() }()
	select {
	case err := <-done2:
		if err != nil {
			t.Fatalf("the second run: %v\n%s", err, log2.String())
		}
	case <-time.After(8 * time.Minute):
		_ = cmd2.Process.Kill()
		<-done2
		t.Fatalf("the second run did not end:\n%s", log2.String())
	}
	if !strings.Contains(log2.String(), fmt.Sprintf("== %d of %d tasks:", n, n)) || !strings.Contains(log2.String(), " running\n") {
		t.Errorf("the second run's summary or progress is missing:\n%s", log2.String())
	}

	// Exactly one result per task, graded as the task says.
	got := map[string]batchResult{}
	for _, r := range readBatchResults(t, out) {
		if _, dup := got[r.ID]; dup {
			t.Errorf("task %s has two results", r.ID)
		}
		got[r.ID] = r
	}
	for i := range n {
		id := fmt.Sprintf("t%02d", i)
		r, ok := got[id]
		switch {
		case !ok:
			t.Errorf("task %s has no result", id)
		case i == 7:
			if r.Passed || r.Failure != failInfra || !strings.Contains(r.Message, "setup exited 7") {
				t.Errorf("task %s (setup fails): %+v, want an infrastructure failure", id, r)
			}
		case i%3 == 2:
			if r.Passed || r.Failure != failTest || r.TestExit == nil || *r.TestExit == 0 || r.Reason != "finished" {
				t.Errorf("task %s (test fails): %+v", id, r)
			}
		default:
			if !r.Passed || r.Steps != 1 || r.Tokens == 0 || r.DurationMs <= 0 {
				t.Errorf("task %s (passes): %+v", id, r)
			}
		}
	}
	// None ran twice after it had a result: the model saw the instruction
	// of each task with a result in the first run once in all.
	seen := map[string]int{}
	for _, rq := range srv.Requests() {
		for _, m := range rq.Messages {
			if m.Role == "user" && strings.HasPrefix(m.Content, "task t") {
				seen[strings.TrimSuffix(strings.TrimPrefix(m.Content, "task "), ": run solve.sh")]++
			}
		}
	}
	for id := range first {
		want := 1
		if id == "t07" {
			want = 0 // its setup failed: no agent
		}
		if seen[id] != want {
			t.Errorf("the model got task %s %d times, want %d: it had a result after the first run", id, seen[id], want)
		}
	}
	for id, k := range seen {
		if k > 2 {
			t.Errorf("the model got task %s %d times", id, k)
		}
	}
	for _, r := range got {
		if r.Sandbox != "" {
			ids = append(ids, r.Sandbox)
		}
	}
	if l := leftovers(batchPrefix(out), ids); len(l) != 0 {
		t.Errorf("sandboxes of the batch left behind: %v", l)
	}
	if strings.Contains(log1.String()+log2.String(), fakeKey) {
		t.Error("the API key appears in the batch's output")
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// serveLeftovers lists the sandboxes of serve at addr named with prefix.
func serveLeftovers(t *testing.T, addr string) func(string, []string) []string {
	return func(prefix string, _ []string) []string {
		var l []string
		for _, sb := range sandboxesOf(t, addr) {
			if strings.HasPrefix(sb.Name, prefix) {
				l = append(l, sb.Name)
			}
		}
		return l
	}
}

// TestBatchRestartDocker (acceptance 4) on Docker: the sandboxes come
// from a real limbs serve --provider docker (network none, the
// provider's default), one of a warm pool when ready.
func TestBatchRestartDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve and Docker")
	}
	if err := exec.Command("docker", "image", "inspect", "limbs/base:latest").Run(); err != nil {
		testbin.NoDocker(t, "no Docker engine or no limbs/base:latest image")
	}
	// limbs serve leaves its sandboxes running when it stops, the warm
	// pool's too: remove the containers of this serve once it stopped
	// (this cleanup runs after realServe's).
	var state string
	t.Cleanup(func() { removeServeContainers(t, state) })
	addr, proc := realServe(t, "--provider", "docker", "--pool", "limbs/base:latest=2")
	state = stateDirOf(t, proc.Pid)
	serve := serveLeftovers(t, addr)
	testBatchRestart(t, addr, "limbs/base:latest", func(prefix string, ids []string) []string {
		l := serve(prefix, ids)
		// The containers: by their name label, and by the sandbox ids (a
		// pool sandbox's container keeps the label of the pool's time).
		b, err := exec.Command("docker", "ps", "-a", "--filter", "label=limbs.managed=true", "--format", `{{.Names}} {{.Label "limbs.name"}}`).Output()
		if err != nil {
			t.Fatalf("docker ps: %v", err)
		}
		ours := map[string]bool{}
		for _, id := range ids {
			ours["limbs-"+id] = true
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && ours[f[0]] || len(f) > 1 && strings.HasPrefix(f[1], prefix) {
				l = append(l, "container "+line)
			}
		}
		return l
	})
}

// TestBatchRestartLocal is TestBatchRestartDocker on the local provider.
func TestBatchRestartLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	testBatchRestart(t, addr, localImage, serveLeftovers(t, addr))
}

// TestBatchCtrlC: SIGINT stops a batch: the running tasks are
// interrupted, their sandboxes removed, no result is written for them,
// no other task starts, and the exit code is 130.
func TestBatchCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	script, err := fakellm.Load(writeFile(t, "script.json", `{"turns": [{"repeat": 100, "calls": [
	  {"name": "shell_run", "arguments": {"command": "sleep 600", "yield": 600}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fakellm.Start(script)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	tasks := batchTasks(t, 10, localImage)
	out := filepath.Join(t.TempDir(), "results")
	var log testbin.Buffer
	cmd := batchCmd(t, addr, srv.URL, tasks, out, &log)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	testbin.Eventually(t, "4 tasks run their agent", 3*time.Minute, func() bool {
		return len(srv.Requests()) >= 4
	})
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the batch did not end on SIGINT:\n%s", log.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Errorf("exit code %d, want %d:\n%s", code, exitInterrupted, log.String())
	}
	if rs := readBatchResults(t, out); len(rs) != 0 {
		t.Errorf("results written for interrupted tasks: %+v", rs)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Errorf("the model got %d requests, want 4 (no task starts after Ctrl-C)", n)
	}
	if l := serveLeftovers(t, addr)(batchPrefix(out), nil); len(l) != 0 {
		t.Errorf("sandboxes left after Ctrl-C: %v", l)
	}
}

// TestBatchResultsHalfLine: a last line a crash cut in the middle is cut
// off results.jsonl, so that the next result starts a line of its own
// and the task of the half line runs again.
func TestBatchResultsHalfLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "results.jsonl")
	if err := os.WriteFile(p, []byte(`{"id":"a","passed":true}`+"\n"+`{"id":"b","passed":false}`+"\n"+`{"id":"c","pas`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readResults(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got["a"].Passed || got["b"].Passed {
		t.Errorf("readResults = %+v, want a and b", got)
	}
	b, _ := os.ReadFile(p)
	if !strings.HasSuffix(string(b), "}\n") || strings.Contains(string(b), `"c"`) {
		t.Errorf("the half line is still in the file: %q", b)
	}
}

// TestBatchFlags: the usage errors of --tasks say what to do.
func TestBatchFlags(t *testing.T) {
	tasks := writeFile(t, "tasks.jsonl", `{"id": "a", "instruction": "x", "test": "true"}`+"\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tasks", tasks, "--model", "m"}, "needs --out"},
		{[]string{"--tasks", tasks, "--model", "m", "--out", t.TempDir(), "--parallel", "0"}, "give 1 to 256"},
		{[]string{"--tasks", tasks, "--model", "m", "--out", t.TempDir(), "task"}, "not both"},
		{[]string{"--tasks", tasks, "--model", "m", "--out", t.TempDir(), "--approve", "ask"}, "unattended"},
		{[]string{"--tasks", tasks, "--model", "m", "--out", t.TempDir(), "--base-url", "http://127.0.0.1:1/v1"}, "has no image"},
		{[]string{"--tasks", writeFile(t, "bad.jsonl", `{"id": "../x", "instruction": "x", "test": "true"}`), "--model", "m", "--out", t.TempDir(), "--image", "i", "--base-url", "http://127.0.0.1:1/v1"}, "give letters, digits"},
	} {
		out, code := runAgentCmd(t, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("limbs agent %q: exit %d, %q; want 2 and %q", tc.args, code, out, tc.want)
		}
	}
}

// stateDirOf is the --state-dir of the limbs serve process pid.
func stateDirOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a == "--state-dir" && i+1 < len(args) && args[i+1] != "" {
			return args[i+1]
		}
	}
	t.Fatalf("limbs serve %d has no --state-dir: %q", pid, args)
	return ""
}

// removeServeContainers removes the containers (and their workspace
// volumes) of the limbs serve whose state dir is state, and no other.
func removeServeContainers(t *testing.T, state string) {
	if state == "" {
		return
	}
	b, err := exec.Command("docker", "ps", "-a", "--filter", "label=limbs.managed=true",
		"--format", `{{.Names}} {{.Label "limbs.socket-dir"}} {{.Label "limbs.workspace-volume"}}`).Output()
	if err != nil {
		t.Logf("docker ps: %v", err)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], state+"/") {
			continue
		}
		if out, err := exec.Command("docker", "rm", "-f", f[0]).CombinedOutput(); err != nil {
			t.Logf("docker rm %s: %v %s", f[0], err, out)
		}
		if len(f) > 2 {
			_ = exec.Command("docker", "volume", "rm", f[2]).Run()
		}
	}
}
