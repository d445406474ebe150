package tool_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/tool"
)

// call is one tool call of a profile golden case: the tool's name and its
// arguments as a model sends them.
type call struct{ tool, args string }

// profileCases are the main states of each profile, produced by real
// commands in a real limbsd and written in the profile's own words.
var profileCases = []struct {
	profile, name, doc string
	calls              []call
	opts               tool.ShellOptions
}{
	{"anthropic", "exited", "bash: a command that ends with status 0.", []call{
		{"bash", `{"command": "echo hello; echo world >&2"}`},
	}, tool.ShellOptions{}},
	{"anthropic", "nonzero", "bash: a command that fails.", []call{
		{"bash", `{"command": "ls /nonexistent-dir"}`},
	}, tool.ShellOptions{}},
	{"anthropic", "running", "bash: a command still running after its yield (10 s for tail); another command is not run while it runs; C-c interrupts it. bash has no timeout parameter: this is also its timeout state.", []call{
		{"bash", `{"command": "echo started; tail -f /dev/null"}`},
		{"bash", `{"command": "echo other"}`},
		{"bash", `{"command": "C-c"}`},
	}, tool.ShellOptions{}},
	{"anthropic", "waiting_for_input", "bash: read -p waits for input; the next command is typed into it.", []call{
		{"bash", `{"command": "read -p \"Your name: \" name; echo \"hi $name\""}`},
		{"bash", `{"command": "Ada"}`},
	}, tool.ShellOptions{}},
	{"anthropic", "full_screen", "bash: vim holds the terminal; the way out is a bash call.", []call{
		{"bash", `{"command": "vim -u NONE -N notes.txt"}`},
		{"bash", `{"command": ":q!\n"}`},
	}, tool.ShellOptions{}},
	{"anthropic", "truncated", "bash: 200,000 lines keep their head and tail, with exact byte ranges.", []call{
		{"bash", `{"command": "seq 1 200000"}`},
	}, tool.ShellOptions{MaxOutput: 2048}},
	{"anthropic", "shell_restarted", "bash: exit 3 ends the shell (a fresh one takes over); restart: true restarts it.", []call{
		{"bash", `{"command": "cd /tmp && export KEPT=yes && LOST=yes && echo bye && exit 3"}`},
		{"bash", `{"restart": true}`},
		{"bash", `{"command": "echo \"KEPT=$KEPT LOST=$LOST\"; pwd"}`},
	}, tool.ShellOptions{}},
	{"anthropic", "background", "bash: a command that leaves processes running in the background.", []call{
		{"bash", `{"command": "sleep 100 & sleep 200 & sleep 0.3; echo started"}`},
	}, tool.ShellOptions{}},

	{"codex", "exited", "exec_command: a command that ends with status 0.", []call{
		{"exec_command", `{"cmd": "echo hello; echo world >&2"}`},
	}, tool.ShellOptions{}},
	{"codex", "nonzero", "exec_command: a command that fails, run in a workdir.", []call{
		{"exec_command", `{"cmd": "pwd; ls /nonexistent-dir", "workdir": "/tmp"}`},
	}, tool.ShellOptions{}},
	{"codex", "running", "exec_command: still running after yield_time_ms, with a session ID; write_stdin polls it, and chars \\u0003 interrupts it. Codex has no hard timeout: this is also its timeout state.", []call{
		{"exec_command", `{"cmd": "echo started; sleep 100", "yield_time_ms": 1000}`},
		{"exec_command", `{"cmd": "echo other"}`},
		{"write_stdin", `{"session_id": 1000, "chars": "", "yield_time_ms": 500}`},
		{"write_stdin", `{"session_id": 1000, "chars": "\u0003"}`},
		{"write_stdin", `{"session_id": 1000, "chars": ""}`},
	}, tool.ShellOptions{}},
	{"codex", "waiting_for_input", "exec_command: read -p waits for input; write_stdin answers it.", []call{
		{"exec_command", `{"cmd": "read -p \"Your name: \" name; echo \"hi $name\""}`},
		{"write_stdin", `{"session_id": 1000, "chars": "Ada\n"}`},
	}, tool.ShellOptions{}},
	{"codex", "truncated", "exec_command: 200,000 lines keep their head and tail; max_output_tokens cuts a result further.", []call{
		{"exec_command", `{"cmd": "seq 1 200000"}`},
		{"exec_command", `{"cmd": "seq 1 2000", "max_output_tokens": 100}`},
	}, tool.ShellOptions{MaxOutput: 2048}},
	{"codex", "shell_restarted", "exec_command: exit 3 ends the shell; a fresh one takes over.", []call{
		{"exec_command", `{"cmd": "cd /tmp && export KEPT=yes && LOST=yes && echo bye && exit 3"}`},
		{"exec_command", `{"cmd": "echo \"KEPT=$KEPT LOST=$LOST\"; pwd"}`},
	}, tool.ShellOptions{}},
	{"codex", "background", "exec_command: a command that leaves processes running in the background.", []call{
		{"exec_command", `{"cmd": "sleep 100 & sleep 200 & sleep 0.3; echo started"}`},
	}, tool.ShellOptions{}},

	{"openhands", "exited", "execute_bash: a command that ends with status 0.", []call{
		{"execute_bash", `{"command": "echo hello; echo world >&2", "security_risk": "LOW"}`},
	}, tool.ShellOptions{}},
	{"openhands", "nonzero", "execute_bash: a command that fails.", []call{
		{"execute_bash", `{"command": "ls /nonexistent-dir", "security_risk": "LOW"}`},
	}, tool.ShellOptions{}},
	{"openhands", "running", "execute_bash: still running after its yield (10 s for tail); an empty command is refused when nothing runs; C-c with is_input interrupts.", []call{
		{"execute_bash", `{"command": "echo started; tail -f /dev/null", "security_risk": "LOW"}`},
		{"execute_bash", `{"command": "C-c", "is_input": "true", "security_risk": "LOW"}`},
		{"execute_bash", `{"command": "", "security_risk": "LOW"}`},
	}, tool.ShellOptions{}},
	{"openhands", "timeout", "execute_bash: timeout ends the wait, not the command (as in OpenHands); another command is NOT executed while it runs.", []call{
		{"execute_bash", `{"command": "echo started; sleep 100", "timeout": 1, "security_risk": "LOW"}`},
		{"execute_bash", `{"command": "echo other", "security_risk": "LOW"}`},
		{"execute_bash", `{"command": "C-c", "is_input": "true", "security_risk": "LOW"}`},
	}, tool.ShellOptions{}},
	{"openhands", "waiting_for_input", "execute_bash: read -p waits for input; is_input answers it.", []call{
		{"execute_bash", `{"command": "read -p \"Your name: \" name; echo \"hi $name\"", "security_risk": "LOW"}`},
		{"execute_bash", `{"command": "Ada", "is_input": "true", "security_risk": "LOW"}`},
	}, tool.ShellOptions{}},
	{"openhands", "truncated", "execute_bash: 200,000 lines keep their head and tail, with exact byte ranges.", []call{
		{"execute_bash", `{"command": "seq 1 200000", "security_risk": "LOW"}`},
	}, tool.ShellOptions{MaxOutput: 2048}},
	{"openhands", "shell_restarted", "execute_bash: exit 3 ends the shell; a fresh one takes over.", []call{
		{"execute_bash", `{"command": "cd /tmp && export KEPT=yes && LOST=yes && echo bye && exit 3", "security_risk": "LOW"}`},
		{"execute_bash", `{"command": "echo \"KEPT=$KEPT LOST=$LOST\"; pwd", "security_risk": "LOW"}`},
	}, tool.ShellOptions{}},
	{"openhands", "background", "execute_bash: a command that leaves processes running in the background.", []call{
		{"execute_bash", `{"command": "sleep 100 & sleep 200 & sleep 0.3; echo started", "security_risk": "LOW"}`},
	}, tool.ShellOptions{}},
}

var (
	wallTime  = regexp.MustCompile(`Wall time: [0-9.]+ seconds`)
	wallTimeJ = regexp.MustCompile(`"wall_time_seconds": [0-9.e+-]+`)
)

// TestProfileGolden runs each profile case against a real limbsd through
// the profile's tools (tool.Profile, called as an MCP server calls them)
// and compares the text and structured results with
// testdata/golden/PROFILE_NAME.txtar (-update rewrites them).
func TestProfileGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbsd")
	}
	l := testbin.StartLimbsd(t, false)
	c, err := client.New("unix://"+l.Sock, l.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range profileCases {
		t.Run(pc.profile+"_"+pc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			rec := &recorder{Client: c}
			sh := tool.NewShell(rec, pc.opts)
			t.Cleanup(func() {
				if id, err := sh.DefaultSession(context.Background()); err == nil {
					_ = c.DeleteSession(context.Background(), id)
				}
			})
			specs, err := tool.Profile(pc.profile, sh, c.FileStore())
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]tool.Spec{}
			for _, s := range specs {
				byName[s.Name] = s
			}
			var files []txtarFile
			for i, cl := range pc.calls {
				s, ok := byName[cl.tool]
				if !ok {
					t.Fatalf("profile %s has no tool %s", pc.profile, cl.tool)
				}
				r, err := s.Call(ctx, json.RawMessage(cl.args))
				if err != nil {
					t.Fatalf("%s %s: %v", cl.tool, cl.args, err)
				}
				p := strconv.Itoa(i+1) + "."
				files = append(files, txtarFile{p + "call", nl(cl.tool + " " + cl.args)})
				if lr := rec.take(); lr != nil {
					files = append(files, txtarFile{p + "result.json", nl(normalize(l.Dir, relResult(*lr)))})
				}
				text := wallTime.ReplaceAllString(normalize(l.Dir, r.Text), "Wall time: D seconds")
				if r.IsError {
					text = "(is_error)\n" + text
				}
				out := wallTimeJ.ReplaceAllString(normalize(l.Dir, r.Structured), `"wall_time_seconds": 0`)
				files = append(files, txtarFile{p + "text", nl(text)}, txtarFile{p + "out.json", nl(out)})
			}
			path := filepath.Join("testdata", "golden", pc.profile+"_"+pc.name+".txtar")
			comment := pc.doc + "\nProfile " + pc.profile + ". N.call is the tool call, N.result.json what limbsd answered (offsets relative to offset_start, between left out),\nN.text and N.out.json what the profile made of it. Regenerate: go test ./internal/tool -run TestProfileGolden -update\n"
			checkGolden(t, path, comment, files)
		})
	}
}
