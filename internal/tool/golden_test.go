package tool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.txtar from a real limbsd")

// The limbs API client is what the shell tools run over.
var _ tool.Sessions = (*client.Client)(nil)

// recorder is a client.Client that keeps the last result limbsd gave, the
// input of the tool's text in the golden files.
type recorder struct {
	*client.Client
	mu   sync.Mutex
	last *wire.Result
}

func (r *recorder) keep(res wire.Result, err error) (wire.Result, error) {
	if err == nil {
		r.mu.Lock()
		r.last = &res
		r.mu.Unlock()
	}
	return res, err
}

func (r *recorder) Exec(ctx context.Context, id string, req wire.Exec) (wire.Result, error) {
	return r.keep(r.Client.Exec(ctx, id, req))
}
func (r *recorder) Wait(ctx context.Context, id string, req wire.Wait) (wire.Result, error) {
	return r.keep(r.Client.Wait(ctx, id, req))
}
func (r *recorder) Input(ctx context.Context, id string, req wire.Input) (wire.Result, error) {
	return r.keep(r.Client.Input(ctx, id, req))
}
func (r *recorder) Interrupt(ctx context.Context, id string, req wire.Interrupt) (wire.Result, error) {
	return r.keep(r.Client.Interrupt(ctx, id, req))
}

func (r *recorder) take() *wire.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.last
	r.last = nil
	return l
}

// step is one tool call of a golden case: its text and structured result.
type step func(ctx context.Context, t *testing.T, sh *tool.Shell) (text string, out any, isErr bool)

func run(in tool.RunInput) step {
	return func(ctx context.Context, t *testing.T, sh *tool.Shell) (string, any, bool) {
		r, err := sh.Run(ctx, in)
		if err != nil {
			t.Fatalf("shell_run %q: %v", in.Command, err)
		}
		return r.Text, r.Out, r.IsError
	}
}

func input(in tool.InputInput) step {
	return func(ctx context.Context, t *testing.T, sh *tool.Shell) (string, any, bool) {
		r, err := sh.Input(ctx, in)
		if err != nil {
			t.Fatalf("shell_input %+v: %v", in, err)
		}
		return r.Text, r.Out, r.IsError
	}
}

func read(in tool.ReadInput) step {
	return func(ctx context.Context, t *testing.T, sh *tool.Shell) (string, any, bool) {
		r, err := sh.Read(ctx, in)
		if err != nil {
			t.Fatalf("shell_read %+v: %v", in, err)
		}
		return r.Text, r.Out, r.IsError
	}
}

func sleep(d time.Duration) step {
	return func(context.Context, *testing.T, *tool.Shell) (string, any, bool) {
		time.Sleep(d)
		return "", nil, false
	}
}

func f(v float64) *float64 { return &v }
func i64(v int64) *int64   { return &v }

// goldenCases are the states of "What every result tells the model", each
// produced by real commands in a real limbsd.
var goldenCases = []struct {
	name  string
	doc   string
	steps []step
	opts  tool.ShellOptions
}{
	{"exited", "A command that ends with status 0.", []step{
		run(tool.RunInput{Command: "echo hello; echo world >&2"}),
	}, tool.ShellOptions{}},
	{"nonzero", "A command that fails.", []step{
		run(tool.RunInput{Command: "ls /nonexistent-dir"}),
	}, tool.ShellOptions{}},
	{"signal", "A command killed by a signal: exit code 128+9 named.", []step{
		run(tool.RunInput{Command: "sh -c 'kill -9 $$'"}),
	}, tool.ShellOptions{}},
	{"running", "A command still running after its yield.", []step{
		run(tool.RunInput{Command: "echo started; sleep 100", Yield: f(1)}),
	}, tool.ShellOptions{}},
	{"waiting_for_input", "read -p waits for input; shell_input answers it.", []step{
		run(tool.RunInput{Command: `read -p "Your name: " name; echo "hi $name"`}),
		input(tool.InputInput{Text: "Ada", Keys: []string{"Enter"}}),
	}, tool.ShellOptions{}},
	{"confirm", "A [Y/n] question.", []step{
		run(tool.RunInput{Command: `read -p "Continue? [Y/n] " a; echo "answer=$a"`}),
	}, tool.ShellOptions{}},
	{"password", "A password prompt: echo is off.", []step{
		run(tool.RunInput{Command: `python3 -c 'import getpass; print("ok" if getpass.getpass("Password: ") == "s3cret" else "wrong")'`}),
		input(tool.InputInput{Text: "s3cret", Keys: []string{"Enter"}}),
	}, tool.ShellOptions{}},
	{"pager", "less on the alternate screen, left with q.", []step{
		run(tool.RunInput{Command: "seq 1 1000 | less"}),
		input(tool.InputInput{Text: "q"}),
	}, tool.ShellOptions{}},
	{"pager_more", "more (no alternate screen) stops at --More--.", []step{
		run(tool.RunInput{Command: "seq 1 1000 > numbers.txt && more numbers.txt"}),
	}, tool.ShellOptions{}},
	{"full_screen", "vim, read from the screen, left with :q!.", []step{
		run(tool.RunInput{Command: "vim -u NONE -N notes.txt"}),
		input(tool.InputInput{Text: ":q!", Keys: []string{"Enter"}}),
	}, tool.ShellOptions{}},
	{"timeout", "The hard timeout stops the command.", []step{
		run(tool.RunInput{Command: "echo before; sleep 100; echo never", Timeout: 1}),
	}, tool.ShellOptions{}},
	{"interrupted", "A running command interrupted (what a cancelled call does).", []step{
		run(tool.RunInput{Command: "sleep 100", Yield: f(1)}),
		func(ctx context.Context, t *testing.T, sh *tool.Shell) (string, any, bool) {
			r, err := sh.Interrupt(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			return r.Text, r.Out, r.IsError
		},
	}, tool.ShellOptions{}},
	{"shell_died", "exit 3 ends the shell itself; a fresh one takes over.", []step{
		run(tool.RunInput{Command: "cd /tmp && export KEPT=yes && LOST=yes && echo bye && exit 3"}),
		run(tool.RunInput{Command: `echo "KEPT=$KEPT LOST=$LOST"; pwd`}),
	}, tool.ShellOptions{}},
	{"shell_replaced", "exec bash replaces limbs' shell; limbsd puts a fresh one of its own in its place.", []step{
		run(tool.RunInput{Command: "cd /tmp && export PS1='inner$ ' && exec bash --norc"}),
		run(tool.RunInput{Command: "pwd"}),
	}, tool.ShellOptions{}},
	{"truncated", "200,000 lines: head and tail with exact byte ranges; shell_read returns the middle.", []step{
		run(tool.RunInput{Command: "seq 1 200000"}),
		read(tool.ReadInput{Command: "c_1", From: i64(8191), To: i64(8300)}),
		read(tool.ReadInput{Command: "c_1", Grep: "^19999[0-3]$"}),
		read(tool.ReadInput{Command: "c_1", TailLines: 3}),
	}, tool.ShellOptions{MaxOutput: 2048}},
	{"long_line", "A line longer than MaxLine keeps its head and tail.", []step{
		run(tool.RunInput{Command: `python3 -c 'print("ab" * 300 + "MIDDLE" + "yz" * 300); print("short")'`}),
	}, tool.ShellOptions{MaxLine: 200}},
	{"background_output", "What a background job printed while no command ran.", []step{
		run(tool.RunInput{Command: "(sleep 0.3; echo bg-done) &"}),
		sleep(1500 * time.Millisecond),
		run(tool.RunInput{Command: "echo next"}),
	}, tool.ShellOptions{}},
	{"background", "Processes the command left running in the background (pid and command line).", []step{
		run(tool.RunInput{Command: "sleep 100 & nohup sleep 200 >/dev/null 2>&1 & sleep 0.3; echo started"}),
	}, tool.ShellOptions{}},
}

// TestGolden runs each case against a real limbsd and compares the
// model-facing text and the structured result with
// testdata/golden/NAME.txtar (go test -run TestGolden -update rewrites).
func TestGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbsd")
	}
	l := testbin.StartLimbsd(t, false)
	c, err := client.New("unix://"+l.Sock, l.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, gc := range goldenCases {
		t.Run(gc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rec := &recorder{Client: c}
			sh := tool.NewShell(rec, gc.opts)
			t.Cleanup(func() {
				if id, err := sh.DefaultSession(context.Background()); err == nil {
					_ = c.DeleteSession(context.Background(), id)
				}
			})
			var files []txtarFile
			n := 0
			for _, st := range gc.steps {
				text, out, isErr := st(ctx, t, sh)
				if out == nil {
					continue
				}
				n++
				if isErr {
					t.Errorf("step %d refused: %s", n, text)
				}
				p := strconv.Itoa(n) + "."
				if r := rec.take(); r != nil {
					files = append(files, txtarFile{p + "result.json", nl(normalize(l.Dir, relResult(*r)))})
				}
				files = append(files, txtarFile{p + "text", nl(normalize(l.Dir, text))}, txtarFile{p + "out.json", nl(normalize(l.Dir, out))})
			}
			path := filepath.Join("testdata", "golden", gc.name+".txtar")
			comment := gc.doc + "\nN.result.json is what limbsd answered (offsets relative to offset_start, between left out), N.text and\nN.out.json what the tool made of it. Regenerate: go test ./internal/tool -run TestGolden -update\n"
			checkGolden(t, path, comment, files)
		})
	}
}

// relResult makes a result's stream offsets relative to its offset_start
// (absolute ones depend on the length of the test's temporary path).
func relResult(r wire.Result) wire.Result {
	base := r.OffsetStart
	r.OffsetStart, r.OffsetEnd, r.ChunkStart = 0, r.OffsetEnd-base, r.ChunkStart-base
	// between holds the prompt, whose length varies with the temporary
	// directory's name.
	r.Between = nil
	return r
}

var (
	sessionID = regexp.MustCompile(`\bs_[0-9A-Za-z_-]{4,}`)
	took      = regexp.MustCompile(`(took|still running after) [0-9.]+ m?s`)
	durMs     = regexp.MustCompile(`"duration_ms": [0-9]+`)
	jobPid    = regexp.MustCompile(`\[(\d+)\] \d+`)
	// The pids of the processes a command left running.
	bgPid  = regexp.MustCompile(`\bpid \d+`)
	bgPidJ = regexp.MustCompile(`"pid": \d+`)
	// limbsd's own note in a recorded result names absolute offsets.
	noteRange = regexp.MustCompile(`output\?from=\d+&to=\d+`)
)

// normalize makes v (a string, or a value written as JSON) stable across
// runs: session ids, durations, the test's directory and job pids.
func normalize(dir string, v any) string {
	var s string
	if str, ok := v.(string); ok {
		s = str
	} else {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			panic(err)
		}
		s = b.String()
		s = durMs.ReplaceAllString(s, `"duration_ms": 0`)
	}
	s = strings.ReplaceAll(s, dir, "$DIR")
	s = sessionID.ReplaceAllString(s, "s_ID")
	s = took.ReplaceAllString(s, "$1 D")
	s = jobPid.ReplaceAllString(s, "[$1] PID")
	s = bgPid.ReplaceAllString(s, "pid PID")
	s = bgPidJ.ReplaceAllString(s, `"pid": 0`)
	s = noteRange.ReplaceAllString(s, "output?from=A&to=B")
	for _, p := range goldenPorts() {
		s = strings.ReplaceAll(s, p, "PORT")
	}
	return s
}

// A minimal txtar (golang.org/x/tools/txtar's format), to keep go.mod as it is.
type txtarFile struct{ name, data string }

func nl(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}

func formatTxtar(comment string, files []txtarFile) []byte {
	var b strings.Builder
	b.WriteString(comment)
	for _, f := range files {
		fmt.Fprintf(&b, "-- %s --\n", f.name)
		b.WriteString(nl(f.data))
	}
	return []byte(b.String())
}

func parseTxtar(b []byte) (string, []txtarFile) {
	var comment strings.Builder
	var files []txtarFile
	cur := -1
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(line, "-- ") && strings.HasSuffix(line, " --\n") {
			files = append(files, txtarFile{name: strings.TrimSuffix(strings.TrimPrefix(line, "-- "), " --\n")})
			cur = len(files) - 1
			continue
		}
		if cur < 0 {
			comment.WriteString(line)
		} else {
			files[cur].data += line
		}
	}
	return comment.String(), files
}

// checkGolden compares files with the golden txtar at path, or writes it
// with -update.
func checkGolden(t *testing.T, path, comment string, files []txtarFile) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, formatTxtar(comment, files), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	_, want := parseTxtar(b)
	if d := cmp.Diff(want, files, cmp.AllowUnexported(txtarFile{})); d != "" {
		t.Errorf("%s differs (-want +got):\n%s", path, d)
	}
}
