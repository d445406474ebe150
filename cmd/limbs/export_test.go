package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// requireAsciinemaEnv, set to 1, turns the skip of a machine without
// asciinema into a failure (CI sets it; scripts/ci-setup.sh installs it).
const requireAsciinemaEnv = "LIMBS_REQUIRE_ASCIINEMA"

// recordedSession runs script in a real bash on a real PTY (limbsd's API)
// and returns its session's raw output and that output as the control
// plane's log holds it: session.created, then output events of chunk
// bytes each (so that UTF-8 sequences are cut), gap apart.
func recordedSession(t *testing.T, script string, chunk int, gap time.Duration) ([]byte, []wire.Event) {
	t.Helper()
	c := newDaemon(t)
	s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "main", Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(t.Context(), s.ID, wire.Exec{Command: script}); err != nil {
		t.Fatal(err)
	}
	rc, err := c.Output(t.Context(), s.ID, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	ev := func(typ wire.EventType, at time.Duration, data any) wire.Event {
		b, _ := json.Marshal(data)
		return wire.Event{Time: start.Add(at), Sandbox: "sb_rec", Session: s.ID, Type: typ, Source: wire.SourceTerminal, Data: b}
	}
	events := []wire.Event{
		ev(wire.EventSandboxCreated, 0, wire.SandboxData{}),
		ev(wire.EventSessionCreated, 0, wire.SessionData{Name: "main", Cols: 100, Rows: 30}),
	}
	events[0].Session = ""
	for off := 0; off < len(raw); off += chunk {
		end := min(off+chunk, len(raw))
		events = append(events, ev(wire.EventOutput, time.Duration(len(events))*gap, wire.OutputData{Offset: int64(off), Size: int64(end - off), Bytes: raw[off:end]}))
	}
	for i := range events {
		events[i].Seq = uint64(i + 1)
	}
	return raw, events
}

// fakeLog serves events as limbs serve's GET /v1/sandboxes/{id}/events
// does, in pages of 5, to the bearer token "tok", and points LIMBS_ADDR
// and LIMBS_TOKEN at it.
func fakeLog(t *testing.T, sandbox string, events []wire.Event) {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			wire.WriteError(w, wire.ErrUnauthorized)
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != "/v1/sandboxes/"+sandbox+"/events" {
			wire.WriteError(w, wire.ErrNotFound)
			return
		}
		from, _ := strconv.ParseUint(r.URL.Query().Get("from"), 10, 64)
		page := wire.EventList{Events: []wire.Event{}, Next: from}
		for _, e := range events {
			if e.Seq >= from && len(page.Events) < 5 {
				page.Events = append(page.Events, e)
				page.Next = e.Seq + 1
			}
		}
		wire.WriteJSON(w, http.StatusOK, page)
	}))
	t.Cleanup(hs.Close)
	t.Setenv("LIMBS_ADDR", hs.URL)
	t.Setenv("LIMBS_TOKEN", "tok")
}

// script prints what a session's terminal shows: colours, a progress bar
// redrawn with \r, and text in two- three- and four-byte UTF-8.
const script = `printf '\033[1;31mred\033[0m café € 日本 😀\n'; for i in 1 2 3; do printf '\r[%-3s]' $(printf '#%.0s' $(seq $i)); done; echo; printf 'done\n'`

// castData parses an asciicast file and returns its header and its "o"
// data joined.
func castData(t *testing.T, path string) (map[string]any, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	var header map[string]any
	var out strings.Builder
	for sc.Scan() {
		if header == nil {
			if err := json.Unmarshal(sc.Bytes(), &header); err != nil {
				t.Fatalf("header %q: %v", sc.Text(), err)
			}
			continue
		}
		var e [3]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		if e[1] == "o" {
			out.WriteString(e[2].(string))
		}
	}
	return header, out.String()
}

func TestExport(t *testing.T) {
	raw, events := recordedSession(t, script, 7, 50*time.Millisecond)
	if !strings.Contains(string(raw), "日本 😀") {
		t.Fatalf("the session's output %q lacks the script's text", raw)
	}
	fakeLog(t, "sb_rec", events)
	dir := t.TempDir()

	t.Run("asciicast v2", func(t *testing.T) {
		file := filepath.Join(dir, "s.cast")
		if code := run(t.Context(), []string{"export", "sb_rec", "--session", "main", "-o", file}); code != 0 {
			t.Fatalf("exit code %d", code)
		}
		h, out := castData(t, file)
		if h["version"] != 2.0 || h["width"] != 100.0 || h["height"] != 30.0 {
			t.Errorf("header %v, want version 2 and the session's 100x30", h)
		}
		if out != string(raw) {
			t.Errorf("\"o\" data:\n got %q\nwant the session's output %q", out, raw)
		}
	})
	t.Run("asciicast v3", func(t *testing.T) {
		file := filepath.Join(dir, "s3.cast")
		if code := run(t.Context(), []string{"export", "--format", "asciicast", "sb_rec", "--asciicast-version", "3", "-o", file}); code != 0 {
			t.Fatalf("exit code %d", code)
		}
		h, out := castData(t, file)
		term, _ := h["term"].(map[string]any)
		if h["version"] != 3.0 || term["cols"] != 100.0 || term["rows"] != 30.0 {
			t.Errorf("header %v, want version 3 and a term of 100x30", h)
		}
		if out != string(raw) {
			t.Errorf("\"o\" data:\n got %q\nwant the session's output %q", out, raw)
		}
	})
	t.Run("jsonl", func(t *testing.T) {
		file := filepath.Join(dir, "s.jsonl")
		if code := run(t.Context(), []string{"export", "sb_rec", "--format", "jsonl", "-o", file}); code != 0 {
			t.Fatalf("exit code %d", code)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var got []wire.Event
		dec := json.NewDecoder(bytes.NewReader(b))
		for dec.More() {
			var e wire.Event
			if err := dec.Decode(&e); err != nil {
				t.Fatal(err)
			}
			got = append(got, e)
		}
		if d := cmp.Diff(events, got); d != "" {
			t.Errorf("the JSON lines are not the sandbox's events (-want +got):\n%s", d)
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		file := filepath.Join(dir, "none.cast")
		stderr := captureStderr(t, func() {
			if code := run(t.Context(), []string{"export", "sb_rec", "--session", "nope", "-o", file}); code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
		})
		if !strings.Contains(stderr, "main (s_") {
			t.Errorf("stderr %q does not name the sessions there are", stderr)
		}
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Errorf("a failed export left %s behind (%v)", file, err)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{{"export"}, {"export", "sb_rec", "--format", "gif"}, {"export", "sb_rec", "--asciicast-version", "1"}, {"export", "a", "b"}} {
			if code := run(t.Context(), args); code != exitUsage {
				t.Errorf("limbs %q: exit code %d, want %d", args, code, exitUsage)
			}
		}
	})
}

// captureStderr returns what f writes to os.Stderr.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	f()
	os.Stderr = old
	w.Close()
	return string(<-done)
}

// TestExportAsciinema: Debian's asciinema reads the export, and
// `asciinema cat` prints the session's raw bytes; with bytes that are
// not UTF-8, exactly what asciinema's own recorder would have stored
// (its decoder, Python's "replace", fed the same chunks).
func TestExportAsciinema(t *testing.T) {
	bin, err := exec.LookPath("asciinema")
	if err != nil {
		if os.Getenv(requireAsciinemaEnv) == "1" {
			t.Fatalf("asciinema is not on PATH and %s=1 requires it: apt-get install asciinema (scripts/ci-setup.sh does)", requireAsciinemaEnv)
		}
		t.Skip("no asciinema on PATH (apt-get install asciinema)")
	}
	cases := []struct {
		name   string
		script string
	}{
		{"text", script},
		{"invalid bytes", `printf 'a\377b \342\202x \355\240\200 caf\303\251\n'`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw, events := recordedSession(t, c.script, 5, 10*time.Millisecond)
			fakeLog(t, "sb_rec", events)
			file := filepath.Join(t.TempDir(), "s.cast")
			if code := run(t.Context(), []string{"export", "sb_rec", "-o", file}); code != 0 {
				t.Fatalf("export: exit code %d", code)
			}
			want := raw
			if c.name != "text" {
				want = pythonReplace(t, events)
			}
			if got := asciinemaCat(t, bin, file); !bytes.Equal(got, want) {
				t.Errorf("asciinema cat printed\n %q\nwant\n %q", got, want)
			}
		})
	}
}

// asciinemaCat runs `asciinema cat FILE` on a terminal of its own (it
// opens /dev/tty) and returns its standard output.
func asciinemaCat(t *testing.T, bin, file string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "cat", file)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "HOME="+t.TempDir())
	ptmx, err := pty.Start(cmd) // stdin and the controlling terminal
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	go func() { _, _ = io.Copy(io.Discard, ptmx) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("asciinema cat %s: %v\n%s", file, err, stderr.Bytes())
	}
	return out.Bytes()
}

// pythonReplace decodes the output events' bytes as asciinema's recorder
// does (an incremental UTF-8 decoder with errors="replace", the chunks as
// they came) and returns the text as UTF-8.
func pythonReplace(t *testing.T, events []wire.Event) []byte {
	t.Helper()
	var chunks [][]byte
	for _, e := range events {
		if e.Type == wire.EventOutput {
			var d wire.OutputData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			chunks = append(chunks, d.Bytes)
		}
	}
	in, _ := json.Marshal(chunks) // base64 strings
	const prog = `import base64, codecs, json, sys
d = codecs.getincrementaldecoder("utf-8")("replace")
out = "".join(d.decode(base64.b64decode(c)) for c in json.load(sys.stdin)) + d.decode(b"", True)
sys.stdout.buffer.write(out.encode("utf-8"))`
	cmd := exec.CommandContext(t.Context(), "python3", "-c", prog)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 (which asciinema runs on): %v", err)
	}
	return out
}

// replayLog is a session whose output comes in three parts: at 0, 2 s
// later, and an hour after that.
func replayLog(t *testing.T) []wire.Event {
	start := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	var events []wire.Event
	var off int64
	add := func(typ wire.EventType, at time.Duration, data any) {
		b, _ := json.Marshal(data)
		events = append(events, wire.Event{Seq: uint64(len(events) + 1), Time: start.Add(at), Session: "s_1", Type: typ, Data: b})
	}
	add(wire.EventSessionCreated, 0, wire.SessionData{Name: "main", Cols: 90, Rows: 20})
	for _, o := range []struct {
		at time.Duration
		s  string
	}{{0, "one\r\n"}, {2 * time.Second, "\x1b[1mtwo\x1b[0m\r\n"}, {2*time.Second + time.Hour, "three é\r\n"}} {
		add(wire.EventOutput, o.at, wire.OutputData{Offset: off, Size: int64(len(o.s)), Bytes: []byte(o.s)})
		off += int64(len(o.s))
	}
	return events
}

// replayOnPTY runs `limbs replay` in this process with a real PTY as its
// terminal; it returns the terminal's other side (what a user's screen
// gets) and the replay's exit code once it ends.
func replayOnPTY(t *testing.T, args ...string) (*os.File, *os.File, <-chan int) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	done := make(chan int, 1)
	go func() { done <- replay(t.Context(), args, tty, tty) }()
	return ptmx, tty, done
}

// TestReplayPTY: the session's bytes arrive on the terminal in order and
// unchanged after the size hint, paced by the recording divided by
// --speed, with the hour-long pause cut to --max-idle; the terminal is
// out of raw mode afterwards.
func TestReplayPTY(t *testing.T) {
	fakeLog(t, "sb_rec", replayLog(t))
	start := time.Now()
	ptmx, tty, done := replayOnPTY(t, "sb_rec", "--speed", "4", "--max-idle", "2s")
	var screen testbin.Buffer
	seen := map[string]time.Duration{}
	go func() { _, _ = io.Copy(&screen, ptmx) }()
	for _, mark := range []string{"one", "two", "three é"} {
		testbin.Eventually(t, "replayed "+mark, 30*time.Second, func() bool { return strings.Contains(screen.String(), mark) })
		seen[mark] = time.Since(start)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("replay did not end after its last output")
	}
	want := "\x1b[8;20;90tone\r\n\x1b[1mtwo\x1b[0m\r\nthree é\r\n"
	testbin.Eventually(t, "all of the replay", 10*time.Second, func() bool { return screen.String() == want })
	// The schedule is a lower bound: 2 s / 4 before two, then the hour
	// capped at 2 s, / 4.
	if seen["two"] < 500*time.Millisecond || seen["three é"] < time.Second {
		t.Errorf("output came at %v, before the schedule (two at 0.5 s, three at 1 s)", seen)
	}
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ECHO == 0 || tio.Lflag&unix.ICANON == 0 {
		t.Errorf("the terminal stayed in raw mode after the replay (lflag %#x)", tio.Lflag)
	}
}

// TestReplayStop: q and Ctrl-C stop a replay in the middle of a pause.
func TestReplayStop(t *testing.T) {
	fakeLog(t, "sb_rec", replayLog(t))
	for _, key := range []string{"q", "\x03"} {
		t.Run(strconv.Quote(key), func(t *testing.T) {
			ptmx, tty, done := replayOnPTY(t, "sb_rec")
			var screen testbin.Buffer
			go func() { _, _ = io.Copy(&screen, ptmx) }()
			testbin.Eventually(t, "the first output", 30*time.Second, func() bool { return strings.Contains(screen.String(), "one") })
			// The raw mode is on once the replay reads keys.
			testbin.Eventually(t, "raw mode", 10*time.Second, func() bool {
				tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
				return err == nil && tio.Lflag&unix.ICANON == 0
			})
			if _, err := ptmx.Write([]byte(key)); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("exit code %d, want 0", code)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the replay went on after %q", key)
			}
			if strings.Contains(screen.String(), "two") {
				t.Errorf("the replay wrote on after %q: %q", key, screen.String())
			}
		})
	}
}
