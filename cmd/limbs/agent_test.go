package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/agent/fakellm"
	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// fakeKey is the API key the agent tests give: it must reach the model
// server and nothing else.
const fakeKey = "sk-limbs-test-KEY-4f9a1c77d2e0"

// fakellmTestdata is internal/agent/fakellm/testdata.
func fakellmTestdata(t *testing.T, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "internal", "agent", "fakellm", "testdata", name)
}

// startFakeLLM serves the fake model's script at path for the test.
func startFakeLLM(t *testing.T, path string) *fakellm.Server {
	t.Helper()
	script, err := fakellm.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fakellm.Start(script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// setupCalc makes the calc repository (its test fails) in the working
// directory of a session of cl, and returns that session.
func setupCalc(t *testing.T, cl *client.Client) string {
	t.Helper()
	b, err := os.ReadFile(fakellmTestdata(t, "calc-setup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cl.CreateSession(ctx, wire.CreateSession{Name: "check"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.Exec(ctx, s.ID, wire.Exec{Command: string(b)})
	if err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("setting up calc: %v %+v", err, r)
	}
	r, err = cl.Exec(ctx, s.ID, wire.Exec{Command: "sh calc/test.sh"})
	if err != nil || r.ExitCode == nil || *r.ExitCode == 0 {
		t.Fatalf("calc's test passes before the agent ran: %v %+v", err, r)
	}
	return s.ID
}

// calcPasses: calc's test passes in session sid of cl.
func calcPasses(t *testing.T, cl *client.Client, sid string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := cl.Exec(ctx, sid, wire.Exec{Command: "sh calc/test.sh"})
	if err != nil || r.ExitCode == nil || *r.ExitCode != 0 || !strings.Contains(r.Output, "PASS") {
		t.Fatalf("calc's test after the agent: %v %+v", err, r)
	}
}

// runAgentCmd runs limbs agent with args and the fake key in its
// environment, and returns its output (stdout and stderr) and exit code.
func runAgentCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(testbin.Path(t, "limbs", false), append([]string{"agent"}, args...)...)
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY="+fakeKey, "LIMBS_LLM_API_KEY=")
	var out testbin.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("limbs agent did not end:\n%s", out.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

const calcTask = "The test of calc fails (sh calc/test.sh); fix the code."

// wantFixed checks a run of fix.json: finished, its steps printed, the
// key sent to the server and found nowhere else.
func wantFixed(t *testing.T, srv *fakellm.Server, out string, code int, logs ...string) {
	t.Helper()
	if code != 0 || !strings.Contains(out, "== finished after 4 steps") {
		t.Fatalf("limbs agent exited %d:\n%s", code, out)
	}
	for _, want := range []string{"$ shell_run {\"command\": \"cd calc && sh test.sh\"}", "FAIL: add 2 3 = -1, want 5", "I'll run the tests first", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 4 || !reqs[0].Authorized || !reqs[0].Stream {
		t.Errorf("the model server got %d requests (authorized %v), want 4 with the key", len(reqs), len(reqs) > 0 && reqs[0].Authorized)
	}
	for i, s := range append([]string{out}, logs...) {
		if strings.Contains(s, fakeKey) || strings.Contains(s, fakeKey[8:]) {
			t.Errorf("the API key appears in output %d:\n%s", i, s)
		}
	}
	for _, r := range reqs {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, fakeKey) {
				t.Errorf("the API key reached the model in a %s message", m.Role)
			}
		}
	}
}

// TestAgentFixesTest (acceptance 1 and 5, on one limbsd): the fake model
// server drives limbs agent to fix calc's failing test in a real
// limbsd; the test passes at the end, and the API key is in no output,
// no log and no message.
func TestAgentFixesTest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbsd and limbs agent")
	}
	d := testbin.StartLimbsd(t, false)
	cl, err := client.New("unix://"+d.Sock, d.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	sid := setupCalc(t, cl)
	srv := startFakeLLM(t, fakellmTestdata(t, "fix.json"))
	out, code := runAgentCmd(t, calcTask, "--model", "fake", "--base-url", srv.URL,
		"--addr", "unix://"+d.Sock, "--token", d.Token, "--log-level", "debug")
	calcPasses(t, cl, sid)
	wantFixed(t, srv, out, code, d.Logs.String())
	// The agent closed its own session.
	ss, err := cl.ListSessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if strings.HasPrefix(s.Name, "agent-") {
			t.Errorf("the agent's session %s is left behind", s.Name)
		}
	}
}

// TestAgentInDocker (acceptance 1 in a Docker sandbox of limbs serve):
// the fake model server drives limbs agent to fix calc's failing test;
// the test passes at the end, and limbs replay SANDBOX --agent shows
// every step, call and observation of the run in order.
func TestAgentInDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve and Docker")
	}
	if err := exec.Command("docker", "image", "inspect", "limbs/base:latest").Run(); err != nil {
		testbin.NoDocker(t, "no Docker engine or no limbs/base:latest image")
	}
	addr, serve := realServe(t, "--provider", "docker")
	_ = serve
	sb := createSandbox(t, addr, wire.CreateSandbox{Image: "limbs/base:latest"})
	c, err := client.New(addr, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Sandbox(sb.ID)
	sid := setupCalc(t, cl)
	srv := startFakeLLM(t, fakellmTestdata(t, "fix.json"))
	out, code := runAgentCmd(t, calcTask, "--model", "fake", "--base-url", srv.URL,
		"--addr", addr, "--token", "tok", "--sandbox", sb.ID)
	calcPasses(t, cl, sid)
	wantFixed(t, srv, out, code)
	// limbs replay shows the run, step by step, from the sandbox's log.
	t.Setenv("LIMBS_ADDR", addr)
	t.Setenv("LIMBS_TOKEN", "tok")
	wantAgentReplay(t, srv, sb.ID, "--agent")
}

// TestAgentImage: --image makes a sandbox for the run and removes it at
// the end; --fake-model runs the script in-process.
func TestAgentImage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	out, code := runAgentCmd(t, "print something", "--fake-model", fakellmTestdata(t, "hello.json"),
		"--addr", addr, "--token", "tok", "--image", localImage)
	if code != 0 || !strings.Contains(out, "hello from the sandbox") {
		t.Fatalf("limbs agent exited %d:\n%s", code, out)
	}
	if n := len(sandboxesOf(t, addr)); n != 0 {
		t.Errorf("%d sandboxes left after limbs agent --image, want 0", n)
	}
	if strings.Contains(out, fakeKey) {
		t.Errorf("the API key appears in the output:\n%s", out)
	}
}

// TestAgentFlags: usage errors say what to do.
func TestAgentFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "m"}, "give the task as one argument"},
		{[]string{"task"}, "--model is needed"},
		{[]string{"task", "--model", "m", "--approve", "never"}, "use auto or ask"},
		{[]string{"task", "--model", "m", "--max-cost", "1"}, "--price-input"},
		{[]string{"task", "--model", "m", "--image", "x", "--sandbox", "y"}, "not both"},
	} {
		out, code := runAgentCmd(t, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("limbs agent %q: exit %d, %q; want 2 and %q", tc.args, code, out, tc.want)
		}
	}
}

// TestAgentCtrlC: SIGINT (Ctrl-C) during a command interrupts it, ends
// the run with exit code 130, and removes the --image sandbox.
func TestAgentCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	script := filepath.Join(t.TempDir(), "sleep.json")
	if err := os.WriteFile(script, []byte(`{"turns": [{"calls": [{"name": "shell_run", "arguments": {"command": "sleep 600", "yield": 600}}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testbin.Path(t, "limbs", false), "agent", "sleep", "--fake-model", script,
		"--addr", addr, "--token", "tok", "--image", localImage)
	var out testbin.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testbin.Eventually(t, "the agent runs its command", time.Minute, func() bool {
		if len(sandboxesOf(t, addr)) != 1 || !strings.Contains(out.String(), "$ shell_run") {
			return false
		}
		c, err := client.New(addr, "tok", "")
		if err != nil {
			return false
		}
		ss, err := c.Sandbox(sandboxesOf(t, addr)[0].ID).ListSessions(context.Background())
		return err == nil && len(ss) == 1 && ss[0].State == wire.StateRunning
	})
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("limbs agent did not end on SIGINT:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(out.String(), "stopped (cancelled)") {
		t.Errorf("exit code %d, want %d:\n%s", code, exitInterrupted, out.String())
	}
	if n := len(sandboxesOf(t, addr)); n != 0 {
		t.Errorf("%d sandboxes left after Ctrl-C, want 0", n)
	}
}
