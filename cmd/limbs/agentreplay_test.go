package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/agent/fakellm"
	"github.com/limbs-dev/limbs/internal/atif"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// hostileRun records, through agent.Recorder (the events limbs agent
// writes), a run of two steps whose model text, arguments and
// observations carry what a hostile model or sandbox would send to a
// terminal: OSC title changes, CSI clears, carriage returns, C1 CSI,
// bidi overrides. The events' times are moved so that the steps are 2 s
// and an hour apart.
func hostileRun(t *testing.T) []wire.Event {
	t.Helper()
	var events []wire.Event
	rec := agent.NewRecorder(agent.RecordOptions{
		Run: "agent-hostile", Model: "m\x1b[2J", System: "be good", Task: "fix\x1b]0;pwned\x07 it",
		Sink: func(_ context.Context, evs []wire.Event) error { events = append(events, evs...); return nil },
	})
	exit1 := 1
	rec.Request(agent.RequestInfo{Step: 1, Attempt: 1, Model: "m\x1b[2J"})
	rec.Usage(1, agent.Usage{PromptTokens: 100, CompletionTokens: 7})
	c1 := agent.ToolCall{ID: "call_1", Name: "shell_run", Arguments: `{"command": "printf '\u001b[2J\u001b]0;x\u0007'"}`}
	rec.Assistant(1, "Running\x1b]0;title\x07 the tests.\rhidden\u202eevil", []agent.ToolCall{c1})
	rec.ToolCall(1, c1)
	rec.Observation(1, c1, agent.Observation{Text: "FAIL\x1b[31m red\x1b[0m\n\u009b2Jmore\ttabbed\r\nlast", IsError: false,
		Structured: map[string]any{"session": "agent-hostile", "command": "c_3", "status": "exited", "exit_code": exit1, "shown": [][2]int64{{0, 40}}, "output_bytes": 40}})
	rec.Note(1, "the same call\x1b[1A again")
	rec.Request(agent.RequestInfo{Step: 2, Attempt: 1, Model: "m"})
	rec.Usage(2, agent.Usage{PromptTokens: 200, CompletionTokens: 9})
	c2 := agent.ToolCall{ID: "call_2", Name: "finish", Arguments: `{"message": "done"}`}
	rec.Assistant(2, "", []agent.ToolCall{c2})
	rec.ToolCall(2, c2)
	rec.Observation(2, c2, agent.Observation{Text: "finished"})
	rec.Stop(agent.Result{Reason: agent.Finished, Message: "done\x1b[H", Steps: 2, Usage: agent.Usage{PromptTokens: 300, CompletionTokens: 16}, Duration: 3 * time.Second})
	if lost := rec.Close(t.Context()); lost != 0 {
		t.Fatalf("%d events lost", lost)
	}
	start := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	for i := range events {
		events[i].Seq = uint64(i + 1)
		var head struct {
			Step int `json:"step"`
		}
		_ = json.Unmarshal(events[i].Data, &head)
		switch {
		case head.Step == 2 || events[i].Type == wire.EventAgentFinished:
			events[i].Time = start.Add(time.Hour + 2*time.Second)
		case head.Step == 1 && events[i].Type == wire.EventAgentObservation:
			events[i].Time = start.Add(2 * time.Second)
		default:
			events[i].Time = start
		}
	}
	return events
}

// wantInOrder checks that each of want is in s, after the one before.
func wantInOrder(t *testing.T, s string, want ...string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(s[at:], w)
		if i < 0 {
			t.Fatalf("the replay lacks %q after byte %d:\n%s", w, at, s)
		}
		at += i + len(w)
	}
}

// TestAgentReplayRender: the replay shows every step, the model's text,
// each call with its arguments, each observation with its command id,
// exit code and byte range, the tokens and the end, in order; every byte
// the model or the sandbox wrote that a terminal would act on is shown
// escaped (no ESC, BEL, CR, C1 or bidi control reaches the terminal),
// while newlines and tabs stay.
func TestAgentReplayRender(t *testing.T) {
	r, err := buildAgentRun(hostileRun(t), "")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	p := &replayPlayer{w: &out}
	if err := p.play(t.Context(), &replayRender{run: r, max: 4000}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e"} {
		if strings.Contains(s, bad) {
			t.Errorf("the replay holds %q raw:\n%q", bad, s)
		}
	}
	wantInOrder(t, s,
		"== run agent-hostile of limbs agent, model m\\x1b[2J", "2 steps",
		"> fix\\x1b]0;pwned\\x07 it",
		"## step 1", "Running\\x1b]0;title\\x07 the tests.\\rhidden\\u202eevil",
		`$ shell_run {"command": "printf '\u001b[2J\u001b]0;x\u0007'"}  [call_1]`,
		"-> shell_run [call_1] c_3 in session agent-hostile, exit 1, showed bytes 0-40 of 40",
		"   FAIL\\x1b[31m red\\x1b[0m\n   \\u009b2Jmore\ttabbed\\r\n   last",
		"[limbs agent: the same call\\x1b[1A again]",
		"(tokens: 100 prompt + 7 completion; 107 in the run so far)",
		"## step 2", `$ finish {"message": "done"}  [call_2]`, "-> finish [call_2]", "finished",
		"(tokens: 200 prompt + 9 completion; 316 in the run so far)",
		"== finished after 2 steps (316 tokens, 3s): done\\x1b[H",
	)
	if n := strings.Count(s, "$ shell_run"); n != 1 {
		t.Errorf("the call is shown %d times (from its message and its agent.tool_call), want once", n)
	}
	// Invalid UTF-8 (a file's bytes) is escaped too.
	if got := safeText("a\x9b[2Jb\xffc\n\td"); got != `a\x9b[2Jb\xffc`+"\n\td" {
		t.Errorf("safeText of invalid UTF-8: %q", got)
	}
}

// TestAgentReplayTiming: the pauses are the recorded ones, capped at
// --max-idle and divided by --speed; n (or space) shows the rest of a
// step at once; --step waits for a key after each step; q stops it.
func TestAgentReplayTiming(t *testing.T) {
	r, err := buildAgentRun(hostileRun(t), "")
	if err != nil {
		t.Fatal(err)
	}
	play := func(stepwise bool, keys ...byte) ([]time.Duration, string, error) {
		var waits []time.Duration
		var out strings.Builder
		p := &replayPlayer{w: &out, speed: 2, maxIdle: 10 * time.Second, timed: true, stepwise: stepwise, prompt: func(string) {}}
		p.wait = func(ctx context.Context, d time.Duration) (byte, error) {
			waits = append(waits, d)
			if len(keys) == 0 {
				if d < 0 {
					t.Fatal("waiting for a key that never comes")
				}
				return 0, nil
			}
			k := keys[0]
			keys = keys[1:]
			return k, nil
		}
		err := p.play(t.Context(), &replayRender{run: r})
		return waits, out.String(), err
	}
	// 2 s to the observation: 1 s at speed 2; an hour to step 2: capped
	// at 10 s, 5 s.
	waits, _, err := play(false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 5 * time.Second}, waits); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	// n during the wait before the observation: the rest of step 1 comes
	// at once, the pause before step 2 is kept.
	waits, _, _ = play(false, 'n', 0)
	if diff := cmp.Diff([]time.Duration{time.Second, 5 * time.Second}, waits); diff != "" {
		t.Errorf("waits after n (-want +got):\n%s", diff)
	}
	// --step: the key after step 1 (a forever wait), then step 2 comes
	// without the recorded hour.
	waits, out, err := play(true, 0, ' ')
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, -1}, waits); diff != "" {
		t.Errorf("waits with --step (-want +got):\n%s", diff)
	}
	wantInOrder(t, out, "## step 1", "## step 2", "== finished")
	// q at the step's pause stops it before step 2.
	_, out, err = play(true, 0, 'q')
	if err != errQuit || strings.Contains(out, "## step 2") {
		t.Errorf("q: %v, output:\n%s", err, out)
	}
}

// TestAgentReplayCLI: limbs replay SANDBOX --agent reads the sandbox's
// log, limbs replay --file reads a --record file and an ATIF export, and
// each shows the same steps; mistakes in the flags say what to do.
func TestAgentReplayCLI(t *testing.T) {
	events := hostileRun(t)
	fakeLog(t, "sb_agent", events)
	dir := t.TempDir()
	record := filepath.Join(dir, "run.jsonl")
	var lines []byte
	for _, e := range events {
		b, _ := json.Marshal(e)
		lines = append(append(lines, b...), '\n')
	}
	if err := os.WriteFile(record, lines, 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := atif.Build(events, "")
	if err != nil {
		t.Fatal(err)
	}
	atifFile := filepath.Join(dir, "run.atif.json")
	f, _ := os.Create(atifFile)
	if err := atif.Write(f, tr); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, args := range [][]string{{"sb_agent", "--agent"}, {"--file", record, "--all"}, {"--file", atifFile}} {
		out, code := replayToFile(t, args...)
		if code != 0 {
			t.Fatalf("limbs replay %q: exit %d:\n%s", args, code, out)
		}
		wantInOrder(t, out, "> fix", "## step 1", "Running", "$ shell_run", "-> shell_run [call_1] c_3 in session agent-hostile, exit 1, showed bytes 0-40 of 40",
			"FAIL", "tokens: 100 prompt + 7 completion", "## step 2", "$ finish", "-> finish [call_2]", "== finished after 2 steps (316 tokens")
		if strings.Contains(out, "\x1b") || !strings.Contains(out, "[limbs agent: the same call\\x1b[1A again]") {
			t.Errorf("limbs replay %q wrote ESC, or not the note:\n%s", args, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--agent"}, "name the sandbox"},
		{[]string{"sb_agent", "--file", record}, "not both"},
		{[]string{"sb_agent", "--agent", "--session", "main"}, "--session is a terminal's replay"},
		{[]string{"--file", record, "--step"}, "--step reads its keys from a terminal"},
		{[]string{"sb_agent", "--run", "agent-nope"}, `no run "agent-nope"`},
	} {
		out, code := replayToFile(t, tc.args...)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("limbs replay %q: exit %d, %q; want an error with %q", tc.args, code, out, tc.want)
		}
	}
}

// replayToFile runs limbs replay in this process with files as its
// terminal (not a terminal: all at once) and returns what it wrote on
// stdout and stderr.
func replayToFile(t *testing.T, args ...string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	in, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	stderr := os.Stderr
	ef, err := os.Create(filepath.Join(dir, "err"))
	if err != nil {
		t.Fatal(err)
	}
	os.Stderr = ef
	code := replay(t.Context(), args, in, out)
	os.Stderr = stderr
	ef.Close()
	b, _ := os.ReadFile(out.Name())
	e, _ := os.ReadFile(ef.Name())
	return string(b) + string(e), code
}

// TestAgentReplayPTY: on a terminal, --step stops after each step until
// a key, the lines end in CR LF (the terminal is raw), and the terminal
// is out of raw mode afterwards.
func TestAgentReplayPTY(t *testing.T) {
	fakeLog(t, "sb_agent", hostileRun(t))
	ptmx, _, done := replayOnPTY(t, "sb_agent", "--step", "--max-idle", "10ms")
	var screen testbin.Buffer
	go func() { _, _ = io.Copy(&screen, ptmx) }()
	testbin.Eventually(t, "the pause after step 1", 30*time.Second, func() bool { return strings.Contains(screen.String(), "end of step 1 of 2") })
	if strings.Contains(screen.String(), "## step 2") {
		t.Fatalf("step 2 shown before a key:\n%s", screen.String())
	}
	if !strings.Contains(screen.String(), "## step 1  (+0s)\r\n") {
		t.Errorf("the lines do not end in CR LF on the raw terminal:\n%q", screen.String())
	}
	if _, err := ptmx.Write([]byte("n")); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the replay did not end after the last step:\n%s", screen.String())
	}
	testbin.Eventually(t, "the end of the run", 10*time.Second, func() bool { return strings.Contains(screen.String(), "== finished after 2 steps") })
}

// wantAgentReplay runs limbs replay with args (against limbs serve at
// LIMBS_ADDR, or --file) after a run of fix.json and checks that it
// shows every step, tool call and observation in order, as the fake
// model server sent and got them.
func wantAgentReplay(t *testing.T, srv *fakellm.Server, args ...string) {
	t.Helper()
	out, code := replayToFile(t, append(args, "--max-observation", "0")...)
	if code != 0 {
		t.Fatalf("limbs replay %q: exit %d:\n%s", args, code, out)
	}
	script, err := fakellm.Load(fakellmTestdata(t, "fix.json"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != len(script.Turns) {
		t.Fatalf("%d requests for %d turns", len(reqs), len(script.Turns))
	}
	want := []string{"> " + calcTask}
	for i, turn := range script.Turns {
		want = append(want, fmt.Sprintf("## step %d", i+1))
		if turn.Text != "" {
			want = append(want, turn.Text)
		}
		// What the model got for this step's calls: the tool messages
		// of the next request (the last step's, finish, has none).
		got := map[string]string{}
		if i+1 < len(reqs) {
			for _, m := range reqs[i+1].Messages {
				if m.Role == "tool" {
					got[m.ToolCallID] = m.Content
				}
			}
		}
		for j, c := range turn.Calls {
			want = append(want, fmt.Sprintf("$ %s ", c.Name), fmt.Sprintf("  [call_%d_%d]", i+1, j))
		}
		for j, c := range turn.Calls {
			id := fmt.Sprintf("call_%d_%d", i+1, j)
			want = append(want, "-> "+c.Name+" ["+id+"]")
			if text, ok := got[id]; ok {
				want = append(want, safe(strings.SplitN(strings.TrimSpace(text), "\n", 2)[0]))
			} else if i+1 < len(reqs) {
				t.Errorf("the model got no result of %s", id)
			}
		}
	}
	want = append(want, "== finished after 4 steps")
	wantInOrder(t, out, want...)
	for _, w := range []string{"exit 1, showed bytes", "exit 0, showed bytes", "FAIL: add 2 3 = -1, want 5", "PASS", "(tokens: "} {
		if !strings.Contains(out, w) {
			t.Errorf("the replay lacks %q:\n%s", w, out)
		}
	}
}
