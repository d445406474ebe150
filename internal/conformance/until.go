package conformance

import (
	"strconv"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// testUntil holds exec, wait and input to their until conditions
// (docs/api.md "Waiting for what matters"): each condition ends the call
// with matched set while the command runs on; a condition that never
// holds leaves the call to its yield or to the command's end; bad
// conditions are refused before anything runs.
func testUntil(t *testing.T, c *client.Client) {
	// A yield far beyond what any case needs: a call that returns before
	// it returned for its condition, and one that never matches fails
	// with status running and no matched instead of hanging.
	const long = 60.0
	running := func(t *testing.T, r wire.Result, matched string) {
		t.Helper()
		if r.Status != wire.StatusRunning || r.Matched != matched {
			t.Fatalf("status %q matched %q (matched_text %q, after %d ms), want running with matched %q; output %q",
				r.Status, r.Matched, r.MatchedText, r.DurationMs, matched, r.Output)
		}
	}

	t.Run("output", func(t *testing.T) {
		id := newSession(t, c)
		defer stop(t, c, id)
		r := runReq(t, c, id, wire.Exec{
			Command:    `echo starting; sleep 0.3; echo "server ready on port $((4000+2))"; sleep 100`,
			YieldAfter: ptr(long), Until: &wire.Until{Output: ptr(`ready on port \d+`)}})
		running(t, r, wire.MatchedOutput)
		if r.MatchedText != "ready on port 4002" {
			t.Errorf("matched_text = %q, want the text the expression matched, %q", r.MatchedText, "ready on port 4002")
		}
		if !strings.Contains(r.Output, "starting\nserver ready on port 4002") {
			t.Errorf("output %q does not hold the matched line", r.Output)
		}
	})

	t.Run("output on the line being written", func(t *testing.T) {
		id := newSession(t, c)
		defer stop(t, c, id)
		r := runReq(t, c, id, wire.Exec{
			Command:    `printf 'downloading...\r'; sleep 0.2; printf 'Continue [y/N] '; sleep 100`,
			YieldAfter: ptr(long), Until: &wire.Until{Output: ptr(`\[y/N\] $`)}})
		running(t, r, wire.MatchedOutput)
	})

	t.Run("output at the end of a long line", func(t *testing.T) {
		id := newSession(t, c)
		defer stop(t, c, id)
		// A megabyte without a newline, then the text waited for: the
		// line is matched on its newest part, not rescanned whole.
		r := runReq(t, c, id, wire.Exec{
			Command:    `head -c 1000000 /dev/zero | tr '\0' x; printf ' END-%s' "MARK"; sleep 100`,
			YieldAfter: ptr(long), MaxOutput: ptr(100), Until: &wire.Until{Output: ptr(`x END-MARK$`)}})
		running(t, r, wire.MatchedOutput)
	})

	t.Run("port", func(t *testing.T) {
		id := newSession(t, c)
		if !have(t, c, id, "python3") {
			t.Skip("no python3 in the sandbox to listen on a port")
		}
		// A port free in the sandbox's network namespace, found there.
		r := run(t, c, id, `python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'`)
		wantExit(t, r, 0)
		port, err := strconv.Atoi(strings.TrimSpace(r.Output))
		if err != nil {
			t.Fatalf("free port: %q", r.Output)
		}
		defer stop(t, c, id)
		r = runReq(t, c, id, wire.Exec{
			Command:    "sleep 0.5; exec python3 -m http.server " + strconv.Itoa(port) + " --bind 127.0.0.1",
			YieldAfter: ptr(long), Until: &wire.Until{Port: ptr(port)}})
		running(t, r, wire.MatchedPort)
		if want := "127.0.0.1:" + strconv.Itoa(port); r.MatchedText != want {
			t.Errorf("matched_text = %q, want the listening address %q", r.MatchedText, want)
		}
	})

	t.Run("port of a background server", func(t *testing.T) {
		id := newSession(t, c)
		if !have(t, c, id, "python3") {
			t.Skip("no python3 in the sandbox to listen on a port")
		}
		r := run(t, c, id, `python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'`)
		wantExit(t, r, 0)
		port, err := strconv.Atoi(strings.TrimSpace(r.Output))
		if err != nil {
			t.Fatalf("free port: %q", r.Output)
		}
		// The form: the command ends at once; the port is the
		// background process's, opened after the end.
		r = runReq(t, c, id, wire.Exec{
			Command:    "(sleep 0.5; exec python3 -m http.server " + strconv.Itoa(port) + " --bind 127.0.0.1) >/dev/null 2>&1 & pid=$!",
			YieldAfter: ptr(long), Until: &wire.Until{Port: ptr(port)}})
		wantExit(t, r, 0)
		if r.Matched != wire.MatchedPort || r.MatchedText != "127.0.0.1:"+strconv.Itoa(port) {
			t.Fatalf("matched %q %q, want port 127.0.0.1:%d on the ended result; background %v", r.Matched, r.MatchedText, port, r.Background)
		}
		wantExit(t, run(t, c, id, `kill $pid; wait $pid 2>/dev/null; true`), 0)

		// A background process that dies without listening ends the wait
		// (the test would otherwise take the whole 60 s yield).
		r = runReq(t, c, id, wire.Exec{
			Command:    "sleep 0.3 &",
			YieldAfter: ptr(long), Until: &wire.Until{Port: ptr(port)}})
		wantExit(t, r, 0)
		if r.Matched != "" {
			t.Errorf("matched %q: nothing listens on %d", r.Matched, port)
		}
	})

	t.Run("quiet", func(t *testing.T) {
		id := newSession(t, c)
		defer stop(t, c, id)
		r := runReq(t, c, id, wire.Exec{
			Command:    `echo one; sleep 0.3; echo two; sleep 100`,
			YieldAfter: ptr(long), Until: &wire.Until{Quiet: ptr(1.0)}})
		running(t, r, wire.MatchedQuiet)
		if !strings.Contains(r.Output, "one\ntwo") {
			t.Errorf("output %q: quiet held before the output stopped", r.Output)
		}
	})

	t.Run("screen", func(t *testing.T) {
		id := newSession(t, c)
		defer stop(t, c, id)
		// A full-screen program: its menu is on the screen, not in the
		// flow of output lines.
		r := runReq(t, c, id, wire.Exec{
			Command:    `printf '\033[?1049h\033[2J\033[5;3H%s' "MENU: pick $((1+1)) of 3"; sleep 100`,
			YieldAfter: ptr(long), Until: &wire.Until{Screen: ptr(`MENU: pick \d of 3`)}})
		running(t, r, wire.MatchedScreen)
		if r.MatchedText != "MENU: pick 2 of 3" {
			t.Errorf("matched_text = %q, want %q", r.MatchedText, "MENU: pick 2 of 3")
		}
	})

	t.Run("no match returns at the yield", func(t *testing.T) {
		id := newSession(t, c)
		defer stop(t, c, id)
		r := runReq(t, c, id, wire.Exec{
			Command:    `echo something else; sleep 100`,
			YieldAfter: ptr(1.0), Until: &wire.Until{Output: ptr(`never printed`), Screen: ptr(`never shown`), Port: ptr(1)}})
		running(t, r, "")
	})

	t.Run("command ends first", func(t *testing.T) {
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{
			Command:    `sleep 0.3; echo done; exit 3`,
			YieldAfter: ptr(long), Until: &wire.Until{Output: ptr(`never printed`), Quiet: ptr(30.0)}})
		wantExit(t, r, 3)
		if r.Matched != "" {
			t.Errorf("an ended command's result has matched %q", r.Matched)
		}
	})

	t.Run("wait with until", func(t *testing.T) {
		id := newSession(t, c)
		defer stop(t, c, id)
		r := runReq(t, c, id, wire.Exec{Command: `echo early; sleep 1; echo "late $((6*7))"; sleep 100`, YieldAfter: ptr(0.2)})
		running(t, r, "")
		r, err := c.Wait(t.Context(), id, wire.Wait{YieldAfter: ptr(long), Until: &wire.Until{Output: ptr(`late 42`)}})
		if err != nil {
			t.Fatal(err)
		}
		running(t, r, wire.MatchedOutput)
		if strings.Contains(r.Output, "early") || !strings.Contains(r.Output, "late 42") {
			t.Errorf("wait's output %q: want only what the exec did not return, up to the match", r.Output)
		}
	})

	t.Run("input with until", func(t *testing.T) {
		id := newSession(t, c)
		defer stop(t, c, id)
		r := runReq(t, c, id, wire.Exec{Command: `read -p 'name? ' n; echo "hello, $n"; sleep 100`, YieldAfter: ptr(long)})
		if !r.WaitingForInput {
			t.Fatalf("read -p: %+v, want waiting_for_input", r)
		}
		r, err := c.Input(t.Context(), id, wire.Input{Text: "bob\n", YieldAfter: ptr(long), Until: &wire.Until{Output: ptr(`hello, \w+`)}})
		if err != nil {
			t.Fatal(err)
		}
		running(t, r, wire.MatchedOutput)
		if r.MatchedText != "hello, bob" {
			t.Errorf("matched_text = %q, want %q", r.MatchedText, "hello, bob")
		}
	})

	t.Run("bad conditions", func(t *testing.T) {
		id := newSession(t, c)
		for _, tc := range []struct {
			route, until, want string
		}{
			{"exec", `{"output": "(unclosed"}`, "regular expression"},
			{"exec", `{"screen": "[a-"}`, "regular expression"},
			{"exec", `{"output": ""}`, "empty"},
			{"exec", `{"port": 0}`, "1 to 65535"},
			{"exec", `{"port": 65536}`, "1 to 65535"},
			{"exec", `{"port": "8000"}`, "port number"},
			{"exec", `{"quiet": -1}`, "seconds > 0"},
			{"exec", `{"quiet": "2s"}`, "number of seconds"},
			{"exec", `{"prot": 8000}`, "output"},
			{"exec", `"port 8000"`, "object"},
			{"wait", `{"port": -5}`, "1 to 65535"},
			{"input", `{"output": "*"}`, "regular expression"},
		} {
			body := `{"until": ` + tc.until + `}`
			switch tc.route {
			case "exec":
				body = `{"command": "echo ran > until-bad-ran", "until": ` + tc.until + `}`
			case "input":
				body = `{"text": "x", "until": ` + tc.until + `}`
			}
			status, e := call(t, c, "POST", "/sessions/"+id+"/"+tc.route, body, true)
			if status != 400 || e.Error.Code != "bad_request" || !strings.Contains(e.Error.Message, tc.want) {
				t.Errorf("%s until %s: %d %+v, want 400 bad_request saying %q", tc.route, tc.until, status, e.Error, tc.want)
			}
		}
		// Nothing ran.
		wantOutput(t, c, id, `test -e until-bad-ran && echo ran || echo nothing`, "nothing\n")
	})
}
