package mcp_test

import (
	"net"
	"strconv"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// freePort is a TCP port free on the host's loopback now, for a server
// that a test starts on the host (a limbsd there shares its network).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// untilScenarios are the acceptance scenarios of until: a server waited
// for with until: {port}, and a log line with until: {output}, through
// shell_run and shell_wait. port is where the server listens in the
// sandbox (127.0.0.1 only); the port is only ever checked through until.
func untilScenarios(t *testing.T, cs *sdk.ClientSession, port int) {
	session := func(t *testing.T, name string) {
		t.Helper()
		if r := call(t, cs, "session", map[string]any{"action": "create", "name": name}); r.isError {
			t.Fatal(r.text)
		}
		t.Cleanup(func() { call(t, cs, "session", map[string]any{"action": "close", "name": name}) })
	}
	matched := func(t *testing.T, what string, r result, cond string) {
		t.Helper()
		if r.isError || r.out["status"] != "running" || r.out["matched"] != cond {
			t.Fatalf("%s: status %v matched %v, want running with matched %s; the call returned for something else:\n%s", what, r.out["status"], r.out["matched"], cond, r.text)
		}
	}

	t.Run("until port", func(t *testing.T) {
		session(t, "until-srv")
		p := strconv.Itoa(port)
		if r := run(t, cs, map[string]any{"session": "until-srv", "command": "command -v python3"}); r.out["exit_code"] != float64(0) {
			t.Skip("no python3 in the sandbox")
		}
		// The server starts a moment after the call: until waits for it.
		r := run(t, cs, map[string]any{"session": "until-srv", "command": "sleep 0.5; python3 -m http.server " + p + " --bind 127.0.0.1", "yield": 50, "until": map[string]any{"port": port}})
		matched(t, "http.server", r, "port")
		want(t, "http.server", r, "stopped waiting: port "+p+" is listening (on 127.0.0.1); the command is still running")
		if r.out["matched_text"] != "127.0.0.1:"+p {
			t.Errorf("matched_text %v, want 127.0.0.1:%s", r.out["matched_text"], p)
		}
		stopped := call(t, cs, "shell_input", map[string]any{"session": "until-srv", "keys": []string{"C-c"}, "yield": 10})
		if stopped.out["status"] == "running" {
			t.Errorf("C-c did not stop the server: %s", stopped.text)
		}
	})

	t.Run("until port of a background server", func(t *testing.T) {
		session(t, "until-bg")
		p := strconv.Itoa(port)
		if r := run(t, cs, map[string]any{"session": "until-bg", "command": "command -v python3"}); r.out["exit_code"] != float64(0) {
			t.Skip("no python3 in the sandbox")
		}
		// The acceptance's own form: the command ends at once, and the
		// call waits for the port its background server opens.
		r := run(t, cs, map[string]any{"session": "until-bg", "command": "python3 -m http.server " + p + " --bind 127.0.0.1 >/dev/null 2>&1 &", "yield": 50, "until": map[string]any{"port": port}})
		if r.isError || r.out["status"] != "exited" || r.out["matched"] != "port" {
			t.Fatalf("status %v matched %v, want exited with matched port:\n%s", r.out["status"], r.out["matched"], r.text)
		}
		want(t, "background http.server", r, " still running: pid ", "port "+p+" is listening (on 127.0.0.1): a process the command left running opened it")
		if r := run(t, cs, map[string]any{"session": "until-bg", "command": "kill %1; wait"}); r.isError {
			t.Errorf("stopping the server: %s", r.text)
		}
	})

	t.Run("until output", func(t *testing.T) {
		session(t, "until-log")
		r := run(t, cs, map[string]any{"session": "until-log",
			// The line comes from the process that then runs on, so that
			// the C-c typed after the match reaches it (typed between two
			// commands of a list, bash would drop it and start the next).
			"command": `for i in 1 2 3; do echo "warming up $i"; sleep 0.3; done; sh -c 'echo "ready: listening at http://localhost:$((4000+2))"; exec sleep 1000'`,
			"yield":   50, "until": map[string]any{"output": `listening at \S+`}})
		matched(t, "log line", r, "output")
		want(t, "log line", r, "warming up 3\nready: listening at http://localhost:4002\n", `stopped waiting: the output matched until.output "listening at \S+": "listening at http://localhost:4002"`)
		// The same through shell_wait: a line printed later.
		stop := call(t, cs, "shell_input", map[string]any{"session": "until-log", "keys": []string{"C-c"}, "yield": 10})
		if stop.out["status"] == "running" {
			t.Fatalf("C-c: %s", stop.text)
		}
		r = run(t, cs, map[string]any{"session": "until-log", "command": `echo begin; sh -c 'sleep 1; echo "migration 7 done"; exec sleep 1000'`, "yield": 0.3})
		if r.out["status"] != "running" {
			t.Fatalf("the command ended early: %s", r.text)
		}
		r = call(t, cs, "shell_wait", map[string]any{"session": "until-log", "yield": 50, "until": map[string]any{"output": `migration \d+ done`}})
		results, _ := r.out["results"].([]any)
		if len(results) != 1 {
			t.Fatalf("shell_wait: %+v\n%s", r.out, r.text)
		}
		one, _ := results[0].(map[string]any)
		matched(t, "shell_wait", result{text: r.text, out: one, isError: r.isError}, "output")
		if !strings.Contains(r.text, "migration 7 done") || strings.Contains(r.text, "begin") {
			t.Errorf("shell_wait's text shows the new output up to the match only once:\n%s", r.text)
		}
		call(t, cs, "shell_input", map[string]any{"session": "until-log", "keys": []string{"C-c"}, "yield": 10})
	})

	t.Run("until refused", func(t *testing.T) {
		r := run(t, cs, map[string]any{"command": "echo never", "until": map[string]any{"prot": 8000}})
		if !r.isError || !strings.Contains(r.text, "port") {
			t.Errorf("an unknown until key: %s", r.text)
		}
		r = run(t, cs, map[string]any{"command": "echo never", "until": map[string]any{"output": "(unclosed"}})
		if !r.isError || !strings.Contains(r.text, "regular expression") {
			t.Errorf("a bad expression: %s", r.text)
		}
	})
}
