package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/mcp"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// bearer adds the token to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// httpServer serves the MCP endpoint of one limbsd, as sandbox "sb", on
// 127.0.0.1.
func httpServer(t *testing.T, l *testbin.Limbsd, opts mcp.Options) *httptest.Server {
	t.Helper()
	h, err := mcp.NewHTTPHandler(mcp.HTTPOptions{
		Token:          "serve-token",
		AllowedOrigins: []string{"https://allowed.example"},
		Server:         opts,
		Connect: func(ctx context.Context, sandbox string) (tool.Sessions, tool.Files, error) {
			if sandbox != "sb" {
				return nil, nil, fmt.Errorf("no sandbox %q: %w", sandbox, wire.ErrNotFound)
			}
			c, err := client.New("unix://"+l.Sock, l.Token, "")
			if err != nil {
				return nil, nil, err
			}
			return c, c.FileStore(), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mcp.Mount(h, http.NotFoundHandler()))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// progressLog collects the progress notifications a client receives.
type progressLog struct {
	mu   sync.Mutex
	msgs []*sdk.ProgressNotificationParams
}

func (p *progressLog) add(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, req.Params)
}

func (p *progressLog) all() []*sdk.ProgressNotificationParams {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*sdk.ProgressNotificationParams(nil), p.msgs...)
}

func newClient(p *progressLog) *sdk.Client {
	return sdk.NewClient(&sdk.Implementation{Name: "limbs-test", Version: "0"}, &sdk.ClientOptions{ProgressNotificationHandler: p.add})
}

func connectHTTP(t *testing.T, url string, p *progressLog) *sdk.ClientSession {
	t.Helper()
	return connectHTTPToken(t, url, "serve-token", p)
}

func connectHTTPToken(t *testing.T, url, token string, p *progressLog) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}
	cs, err := newClient(p).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func connectStdio(t *testing.T, l *testbin.Limbsd, p *progressLog, extra ...string) *sdk.ClientSession {
	t.Helper()
	bin := testbin.Path(t, "limbs", false)
	cmd := exec.Command(bin, append([]string{"mcp", "--addr", "unix://" + l.Sock, "--token", l.Token}, extra...)...)
	var stderr testbin.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := newClient(p).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("%v; stderr:\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("limbs mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// result is what the tests read of a call.
type result struct {
	text    string
	isError bool
	out     map[string]any
}

func callTool(t *testing.T, ctx context.Context, cs *sdk.ClientSession, name string, args map[string]any, token any) result {
	t.Helper()
	p := &sdk.CallToolParams{Name: name, Arguments: args}
	if token != nil {
		p.SetProgressToken(token)
	}
	r, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	var res result
	res.isError = r.IsError
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			res.text += tc.Text
		}
	}
	if r.StructuredContent != nil {
		b, _ := json.Marshal(r.StructuredContent)
		_ = json.Unmarshal(b, &res.out)
	}
	return res
}

func run(t *testing.T, cs *sdk.ClientSession, args map[string]any) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return callTool(t, ctx, cs, "shell_run", args, nil)
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return callTool(t, ctx, cs, name, args, nil)
}

// running reports whether limbsd runs a command in the session named
// name ("": in any session).
func running(t *testing.T, c *client.Client, name string) bool {
	t.Helper()
	ss, err := c.ListSessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if (name == "" || s.Name == name) && s.State == wire.StateRunning {
			return true
		}
	}
	return false
}

func want(t *testing.T, what string, r result, substrs ...string) {
	t.Helper()
	for _, s := range substrs {
		if !strings.Contains(r.text, s) {
			t.Errorf("%s: the text lacks %q:\n%s", what, s, r.text)
		}
	}
}

// TestMCP runs the acceptance scenarios through a real MCP client, over
// streamable HTTP and over stdio (bin/limbs mcp), against a real limbsd.
func TestMCP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs limbsd and limbs")
	}
	for _, transport := range []string{"http", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			l := testbin.StartLimbsd(t, false)
			p := &progressLog{}
			var cs *sdk.ClientSession
			if transport == "http" {
				srv := httpServer(t, l, mcp.Options{ProgressInterval: 200 * time.Millisecond})
				cs = connectHTTP(t, srv.URL+mcp.Path("sb"), p)
			} else {
				cs = connectStdio(t, l, p)
			}
			sb, err := client.New("unix://"+l.Sock, l.Token, "")
			if err != nil {
				t.Fatal(err)
			}
			scenarios(t, cs, sb, filepath.Join(l.Dir, "workspace"), p)
			// limbsd runs on the host here: the server takes a free port of it.
			untilScenarios(t, cs, freePort(t))
			t.Run("close ends the default session", func(t *testing.T) {
				cs.Close()
				testbin.Eventually(t, "the default session is closed", 30*time.Second, func() bool {
					c, err := client.New("unix://"+l.Sock, l.Token, "")
					if err != nil {
						t.Fatal(err)
					}
					ss, err := c.ListSessions(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					for _, s := range ss {
						if strings.HasPrefix(s.Name, "mcp-") {
							return false
						}
					}
					return true
				})
			})
		})
	}
}

// scenarios runs the acceptance scenarios through cs, in a sandbox that
// sb reaches directly (to look at its sessions and files) and where ws is
// a writable directory.
func scenarios(t *testing.T, cs *sdk.ClientSession, sb *client.Client, ws string, p *progressLog) {
	t.Run("list tools", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lt, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]*sdk.Tool{}
		for _, tl := range lt.Tools {
			got[tl.Name] = tl
		}
		for _, n := range []string{"shell_run", "shell_input", "shell_wait", "shell_read", "shell_screen", "session", "str_replace_based_edit_tool", "apply_patch"} {
			tl := got[n]
			if tl == nil {
				t.Errorf("tool %s is not listed", n)
				continue
			}
			if tl.OutputSchema == nil || tl.InputSchema == nil || tl.Annotations == nil {
				t.Errorf("%s: output schema %v, input schema %v, annotations %v", n, tl.OutputSchema, tl.InputSchema, tl.Annotations)
			}
		}
		if a := got["shell_read"].Annotations; a == nil || !a.ReadOnlyHint {
			t.Errorf("shell_read is not read-only: %+v", a)
		}
		if a := got["shell_run"].Annotations; a == nil || a.ReadOnlyHint || a.DestructiveHint == nil || !*a.DestructiveHint {
			t.Errorf("shell_run is not destructive: %+v", a)
		}
	})

	t.Run("heredoc", func(t *testing.T) {
		r := run(t, cs, map[string]any{"command": "cd " + ws + " && cat <<'EOF' > here.txt\nfirst $HOME\n\tsecond\nEOF\ncat here.txt"})
		if r.isError || r.out["status"] != "exited" || r.out["exit_code"] != float64(0) {
			t.Fatalf("heredoc: %+v\n%s", r.out, r.text)
		}
		want(t, "heredoc", r, "first $HOME\n\tsecond\n", "exit code 0")
	})

	t.Run("read -p answered with shell_input", func(t *testing.T) {
		r := run(t, cs, map[string]any{"command": `read -p "Your name? " name; echo "hello, $name"`, "yield": 3})
		if r.out["waiting_for_input"] != true {
			t.Fatalf("not waiting for input: %+v\n%s", r.out, r.text)
		}
		want(t, "prompt", r, "Your name? ")
		r = call(t, cs, "shell_input", map[string]any{"text": "limbs", "keys": []string{"Enter"}})
		want(t, "answer", r, "hello, limbs")
		if r.out["status"] != "exited" {
			t.Errorf("after the answer: %+v", r.out)
		}
	})

	t.Run("vim", func(t *testing.T) {
		if r := run(t, cs, map[string]any{"command": "command -v vim"}); r.out["exit_code"] != float64(0) {
			t.Skip("no vim in the sandbox")
		}
		r := run(t, cs, map[string]any{"command": "vim -u NONE -N " + filepath.Join(ws, "vim.txt"), "yield": 3})
		if r.out["on_screen"] != "full_screen" {
			t.Fatalf("vim is not seen as full-screen: %+v\n%s", r.out, r.text)
		}
		s := call(t, cs, "shell_screen", nil)
		if s.out["alt_screen"] != true || !strings.Contains(s.text, "~") {
			t.Fatalf("screen of vim: %+v\n%s", s.out, s.text)
		}
		r = call(t, cs, "shell_input", map[string]any{"text": ":q!", "keys": []string{"Enter"}, "yield": 5})
		if r.out["status"] != "exited" {
			t.Fatalf("vim did not quit: %+v\n%s", r.out, r.text)
		}
	})

	t.Run("edit and patch", func(t *testing.T) {
		f := filepath.Join(ws, "edit.go")
		if r := call(t, cs, "str_replace_based_edit_tool", map[string]any{"command": "create", "path": f, "file_text": "package x\n\nfunc f() {\n\treturn\n}\n"}); r.isError {
			t.Fatal(r.text)
		}
		if r := call(t, cs, "str_replace_based_edit_tool", map[string]any{"command": "str_replace", "path": f, "old_str": "\treturn", "new_str": "\tprintln(1)"}); r.isError {
			t.Fatal(r.text)
		}
		r := call(t, cs, "apply_patch", map[string]any{"input": "*** Begin Patch\n*** Update File: " + f + "\n@@ func f() {\n-\tprintln(1)\n+\tprintln(2)\n*** End Patch\n"})
		if r.isError {
			t.Fatal(r.text)
		}
		b, _, err := sb.FileStore().ReadFile(context.Background(), f)
		if err != nil || string(b) != "package x\n\nfunc f() {\n\tprintln(2)\n}\n" {
			t.Errorf("the file after the edits: %q %v", b, err)
		}
		r = call(t, cs, "str_replace_based_edit_tool", map[string]any{"command": "str_replace", "path": f, "old_str": "println(3)", "new_str": "x"})
		if !r.isError {
			t.Errorf("a failed match is not an error: %s", r.text)
		}
	})

	t.Run("cancel interrupts", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "shell_run", Arguments: map[string]any{"command": "sleep 1000", "yield": 900}})
			done <- err
		}()
		testbin.Eventually(t, "sleep 1000 runs", 30*time.Second, func() bool { return running(t, sb, "") })
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the cancelled call did not return")
		}
		r := run(t, cs, map[string]any{"command": "echo after-cancel"})
		if r.isError || r.out["status"] != "exited" {
			t.Fatalf("the session is not free after the cancel: %+v\n%s", r.out, r.text)
		}
		want(t, "after cancel", r, "after-cancel")
	})

	t.Run("busy and parallel", func(t *testing.T) {
		flag := filepath.Join(ws, "flag-"+strconv.Itoa(os.Getpid()))
		for _, n := range []string{"par-a", "par-b"} {
			if r := call(t, cs, "session", map[string]any{"action": "create", "name": n}); r.isError {
				t.Fatal(r.text)
			}
		}
		// a waits for b: if calls on different sessions were served one
		// after the other, a would still be running when its yield ends.
		var wg sync.WaitGroup
		var ra result
		wg.Add(1)
		go func() {
			defer wg.Done()
			ra = run(t, cs, map[string]any{"session": "par-a", "command": fmt.Sprintf("for i in $(seq 600); do [ -e %s ] && break; sleep 0.1; done; echo a-saw-b", flag), "yield": 50})
		}()
		testbin.Eventually(t, "session par-a runs", 30*time.Second, func() bool { return running(t, sb, "par-a") })
		busy := run(t, cs, map[string]any{"session": "par-a", "command": "echo second"})
		if !busy.isError {
			t.Errorf("a second call on a busy session is not an error: %s", busy.text)
		}
		want(t, "busy", busy, "shell_wait", "C-c")
		if r := run(t, cs, map[string]any{"session": "par-b", "command": "touch " + flag}); r.isError || r.out["exit_code"] != float64(0) {
			t.Errorf("b: %s", r.text)
		}
		wg.Wait()
		if ra.out["status"] != "exited" {
			t.Errorf("a did not end while b ran: %+v\n%s", ra.out, ra.text)
		}
		want(t, "a", ra, "a-saw-b")
	})

	t.Run("progress", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r := callTool(t, ctx, cs, "shell_run", map[string]any{"command": "for i in $(seq 1 12); do echo chatty line $i; sleep 0.3; done"}, "tok-1")
		if r.out["status"] != "exited" {
			t.Fatalf("%+v\n%s", r.out, r.text)
		}
		var mine []*sdk.ProgressNotificationParams
		for _, m := range p.all() {
			if m.ProgressToken == "tok-1" {
				mine = append(mine, m)
			}
		}
		if len(mine) < 2 {
			t.Fatalf("%d progress notifications, want several: %+v", len(mine), mine)
		}
		for i, m := range mine {
			if i > 0 && m.Progress <= mine[i-1].Progress {
				t.Errorf("progress did not increase: %v after %v", m.Progress, mine[i-1].Progress)
			}
			if !regexp.MustCompile(`^\d+ bytes of output so far; last line: .*chatty line \d+`).MatchString(m.Message) {
				t.Errorf("progress message %q lacks the bytes and the last line", m.Message)
			}
		}
	})

	t.Run("200000 lines read back", func(t *testing.T) {
		r := run(t, cs, map[string]any{"command": "seq 1 200000"})
		if r.out["status"] != "exited" || r.out["truncated"] != true {
			t.Fatalf("%+v", r.out)
		}
		var exp strings.Builder
		for i := 1; i <= 200000; i++ {
			fmt.Fprintf(&exp, "%d\n", i)
		}
		shown := r.out["shown"].([]any)
		a := int64(shown[0].([]any)[1].(float64))
		b := int64(shown[1].([]any)[0].(float64))
		out := r.out["output"].(string)
		i := strings.Index(out, "[... bytes ")
		j := strings.Index(out[i:], "not shown ...]\n")
		head, tail := out[:i], out[i+j+len("not shown ...]\n"):]
		var middle strings.Builder
		from := a
		for n := 0; n < 100; n++ {
			pg := call(t, cs, "shell_read", map[string]any{"command": r.out["command"], "from": from, "to": b, "max_output": 1 << 20})
			if pg.isError {
				t.Fatal(pg.text)
			}
			middle.WriteString(pg.out["output"].(string))
			next, ok := pg.out["next"].(float64)
			if !ok {
				break
			}
			from = int64(next)
		}
		if got := head + middle.String() + tail; got != exp.String() {
			t.Errorf("head + shell_read of bytes %d-%d + tail is not seq's output: %d bytes, want %d", a, b, len(got), exp.Len())
		}
	})

	t.Run("resources", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lt, err := cs.ListResourceTemplates(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var uris []string
		for _, rt := range lt.ResourceTemplates {
			uris = append(uris, rt.URITemplate)
		}
		if strings.Join(uris, " ") != "limbs://command/{session}/{command}/output limbs://session/{session}/screen" && strings.Join(uris, " ") != "limbs://session/{session}/screen limbs://command/{session}/{command}/output" {
			t.Errorf("resource templates: %v", uris)
		}
		r := run(t, cs, map[string]any{"command": "echo resource-text"})
		sid, _ := r.out["session"].(string)
		cid, _ := r.out["command"].(string)
		rr, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "limbs://command/" + sid + "/" + cid + "/output"})
		if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, "resource-text") {
			t.Errorf("command output resource: %v %+v", err, rr)
		}
		rr, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "limbs://session/" + sid + "/screen"})
		if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, "resource-text") {
			t.Errorf("screen resource: %v %+v", err, rr)
		}
	})
}

// TestHTTPRefusals: a foreign Origin is 403, a missing or wrong token
// 401, an unknown sandbox 404; the server's own origin is served.
func TestHTTPRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs limbsd")
	}
	l := testbin.StartLimbsd(t, false)
	srv := httpServer(t, l, mcp.Options{})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	for _, tc := range []struct {
		name, path, origin, token string
		want                      int
	}{
		{"foreign origin", mcp.Path("sb"), "https://evil.example", "serve-token", http.StatusForbidden},
		{"null origin", mcp.Path("sb"), "null", "serve-token", http.StatusForbidden},
		{"no token", mcp.Path("sb"), "", "", http.StatusUnauthorized},
		{"wrong token", mcp.Path("sb"), "", "nope", http.StatusUnauthorized},
		{"no such sandbox", mcp.Path("other"), "", "serve-token", http.StatusNotFound},
		{"own origin", mcp.Path("sb"), srv.URL, "serve-token", http.StatusOK},
		{"allowed origin", mcp.Path("sb"), "https://allowed.example", "serve-token", http.StatusOK},
		{"no origin", mcp.Path("sb"), "", "serve-token", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+tc.path, strings.NewReader(init))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
			if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
				dr, _ := http.NewRequest(http.MethodDelete, srv.URL+tc.path, nil)
				dr.Header.Set("Authorization", "Bearer serve-token")
				dr.Header.Set("Mcp-Session-Id", id)
				if resp, err := http.DefaultClient.Do(dr); err == nil {
					resp.Body.Close()
				}
			}
		})
	}
}

// TestProfilesOverStdio: limbs mcp --profile serves each profile's tools,
// and a profile's shell tool runs a command through the real limbsd.
func TestProfilesOverStdio(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs limbsd and limbs")
	}
	l := testbin.StartLimbsd(t, false)
	for _, tc := range []struct {
		profile, tool string
		tools         []string
		args          map[string]any
	}{
		{"anthropic", "bash", []string{"bash", "str_replace_based_edit_tool"}, map[string]any{"command": "echo pro-$((6*7))"}},
		{"codex", "exec_command", []string{"apply_patch", "exec_command", "write_stdin"}, map[string]any{"cmd": "echo pro-$((6*7))"}},
		{"openhands", "execute_bash", []string{"execute_bash", "str_replace_editor"}, map[string]any{"command": "echo pro-$((6*7))", "security_risk": "LOW"}},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			cs := connectStdio(t, l, &progressLog{}, "--profile", tc.profile)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			lt, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range lt.Tools {
				names = append(names, tl.Name)
			}
			sort.Strings(names)
			if strings.Join(names, " ") != strings.Join(tc.tools, " ") {
				t.Fatalf("tools %v, want %v", names, tc.tools)
			}
			r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tc.tool, Arguments: tc.args})
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			for _, c := range r.Content {
				if tc, ok := c.(*sdk.TextContent); ok {
					text.WriteString(tc.Text)
				}
			}
			if r.IsError || !strings.Contains(text.String(), "pro-42") {
				t.Fatalf("%s: error %v, text %q", tc.tool, r.IsError, text.String())
			}
		})
	}
}
