package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
)

// The MCP clients whose configuration docs/mcp.md gives ("Client
// configuration"), run for real against limbs mcp and limbs serve's /mcp:
// Claude Code (claude mcp add, then claude mcp list, which connects to each
// server), Codex (config.toml, loaded by codex app-server, which starts the
// servers, lists their tools and calls shell_run with no login), and the
// mcpServers JSON of Claude Desktop and Cursor (through the MCP Inspector
// CLI's --config FILE --server NAME). scripts/ci-setup.sh fetches the same
// versions into npm's cache.
const (
	claudePkg = "@anthropic-ai/claude-code@2.1.332"
	codexPkg  = "@openai/codex@0.171.0"
	// inspectorPkg of internal/mcp's TestInspectorCLI.
	clientsInspectorPkg = "@modelcontextprotocol/inspector@0.15.0"
)

// requireClientsEnv, set to 1, turns the skip of a machine without npx or
// the packages into a failure (CI sets it).
const requireClientsEnv = "LIMBS_REQUIRE_MCP_CLIENTS"

// npxEnv keeps npx on npm's cache when the package is there, and quiet.
var npxEnv = []string{"npm_config_prefer_offline=true", "npm_config_update_notifier=false", "DISABLE_AUTOUPDATER=1", "NO_COLOR=1"}

// npxPackage returns npx once pkg runs (fetched from npm's cache or the
// registry), or skips (fails with requireClientsEnv=1).
func npxPackage(t *testing.T, pkg string, probe ...string) string {
	t.Helper()
	npx, err := exec.LookPath("npx")
	if err != nil {
		if os.Getenv(requireClientsEnv) == "1" {
			t.Fatalf("npx is not on PATH and %s=1 requires the MCP client tests: install Node.js (scripts/ci-setup.sh fetches the clients)", requireClientsEnv)
		}
		t.Skip("no npx: the MCP clients cannot run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npx, append([]string{"-y", pkg}, probe...)...)
	cmd.Env = append(os.Environ(), npxEnv...)
	cmd.Dir = t.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		if os.Getenv(requireClientsEnv) == "1" {
			t.Fatalf("npx cannot run %s (%v) and %s=1 requires it; run scripts/ci-setup.sh to fetch it:\n%s", pkg, err, requireClientsEnv, out)
		}
		t.Skipf("npx cannot run %s (no npm registry or cache?): %v\n%s", pkg, err, out)
	}
	return npx
}

// docBlock returns the first fenced block of kind (json, toml) after the
// heading "## Client configuration" of docs/mcp.md: the snippets the test
// tries are the ones the documentation gives.
func docBlock(t *testing.T, kind string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "mcp.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Client configuration")
	if !ok {
		t.Fatal(`docs/mcp.md has no "## Client configuration"`)
	}
	_, rest, ok = strings.Cut(rest, "```"+kind+"\n")
	if !ok {
		t.Fatalf("docs/mcp.md has no %s block under Client configuration", kind)
	}
	block, _, _ := strings.Cut(rest, "```")
	return block
}

// clientEnv is the environment of a client run: its own home (so that no
// user configuration is read or written), limbs on PATH, and limbs serve's
// address and token for limbs mcp --image.
func clientEnv(t *testing.T, home, addr string) []string {
	bin := filepath.Dir(testbin.Path(t, "limbs", false))
	env := []string{"HOME=" + home, "CODEX_HOME=" + filepath.Join(home, ".codex"), "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "LIMBS_ADDR=" + addr, "LIMBS_TOKEN=tok"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "PATH", "CODEX_HOME", "XDG_CONFIG_HOME", "LIMBS_ADDR", "LIMBS_TOKEN", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODEX_API_KEY":
			continue // ours, or a key: the clients must work without one
		}
		env = append(env, kv)
	}
	return append(env, npxEnv...)
}

// TestClientConfigs tries the configuration snippets of docs/mcp.md with
// the real clients, none logged in.
func TestClientConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs npx, limbs serve and limbsd")
	}
	addr, _ := realServe(t)
	// The documented image is Docker's limbs/base; limbs serve here runs
	// the local provider, whose image is "host".
	image := func(s string) string { return strings.ReplaceAll(s, "limbs/base", localImage) }

	t.Run("claude", func(t *testing.T) {
		npx := npxPackage(t, claudePkg, "--version")
		l := testbin.StartLimbsd(t, false)
		home, dir := t.TempDir(), t.TempDir()
		env := clientEnv(t, home, addr)
		claude := func(args ...string) string {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, npx, append([]string{"-y", claudePkg}, args...)...)
			cmd.Env, cmd.Dir = env, dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("claude %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		// docs/mcp.md's three forms: a fresh sandbox per session, one
		// limbsd, and limbs serve over HTTP (at /mcp, and one sandbox's).
		claude("mcp", "add", "limbs", "--", "limbs", "mcp", "--image", localImage)
		claude("mcp", "add", "limbs-one", "--", "limbs", "mcp", "--addr", "unix://"+l.Sock, "--token", l.Token)
		claude("mcp", "add", "--transport", "http", "limbs-http", "http://"+addr+"/mcp", "--header", "Authorization: Bearer tok")
		out := claude("mcp", "list")
		for _, name := range []string{"limbs", "limbs-one", "limbs-http"} {
			if !strings.Contains(out, name+": ") || !lineOf(out, name+": ", "Connected") {
				t.Errorf("claude mcp list: %s is not connected:\n%s", name, out)
			}
		}
		if l := sandboxesOf(t, addr); len(l) != 0 {
			t.Errorf("claude mcp list left sandboxes: %+v", l)
		}
	})

	t.Run("codex", func(t *testing.T) {
		npx := npxPackage(t, codexPkg, "--version")
		home := t.TempDir()
		env := clientEnv(t, home, addr)
		if err := os.MkdirAll(filepath.Join(home, ".codex"), 0o700); err != nil {
			t.Fatal(err)
		}
		// The documented config.toml, with the HTTP form uncommented
		// under its own name and pointed at this limbs serve. Codex gives
		// a stdio server only a few variables of its environment: the
		// address and token go in env (a real setup finds limbs serve's
		// token file instead).
		toml := image(docBlock(t, "toml"))
		toml = strings.ReplaceAll(toml, "args = [\"mcp\", \"--image\", \""+localImage+"\"]",
			"args = [\"mcp\", \"--image\", \""+localImage+"\"]\nenv = { LIMBS_ADDR = \""+addr+"\", LIMBS_TOKEN = \"tok\" }")
		toml = strings.ReplaceAll(toml, "# [mcp_servers.limbs]", "[mcp_servers.limbs-http]")
		toml = strings.ReplaceAll(toml, "# url = \"http://127.0.0.1:7878/mcp\"", "url = \"http://"+addr+"/mcp\"")
		toml = strings.ReplaceAll(toml, "# bearer_token_env_var", "bearer_token_env_var")
		if !strings.Contains(toml, "[mcp_servers.limbs-http]") || !strings.Contains(toml, "LIMBS_TOKEN = \"tok\"") || !strings.Contains(toml, "url = \"http://"+addr) {
			t.Fatalf("the config.toml of docs/mcp.md changed shape; update this test:\n%s", toml)
		}
		if err := os.WriteFile(filepath.Join(home, ".codex", "config.toml"), []byte(toml), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npx, "-y", codexPkg, "app-server")
		cmd.Env, cmd.Dir = env, home
		rpc := startRPC(t, cmd)
		rpc.call(t, "initialize", map[string]any{"clientInfo": map[string]any{"name": "limbs-test", "version": "0"}})
		rpc.notify(t, "initialized")
		var st struct {
			Data []struct {
				Name       string         `json:"name"`
				Tools      map[string]any `json:"tools"`
				ToolsError any            `json:"toolsError"`
			} `json:"data"`
		}
		rpc.decode(t, rpc.call(t, "mcpServerStatus/list", map[string]any{}), &st)
		got := map[string]bool{}
		for _, d := range st.Data {
			if d.Tools["shell_run"] == nil {
				t.Errorf("codex lists no shell_run for %s (error %v)", d.Name, d.ToolsError)
			}
			got[d.Name] = true
		}
		if !got["limbs"] || !got["limbs-http"] {
			t.Fatalf("codex reached %v, want limbs and limbs-http", got)
		}
		var th struct {
			Thread struct {
				ID string `json:"id"`
			} `json:"thread"`
		}
		rpc.decode(t, rpc.call(t, "thread/start", map[string]any{"cwd": home}), &th)
		for _, server := range []string{"limbs", "limbs-http"} {
			var res struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			}
			rpc.decode(t, rpc.call(t, "mcpServer/tool/call", map[string]any{"server": server, "threadId": th.Thread.ID, "tool": "shell_run",
				"arguments": map[string]any{"command": "echo codex-$((6*7))"}}), &res)
			if len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, "codex-42\n[exit code 0;") {
				t.Errorf("codex called shell_run on %s: %+v", server, res)
			}
		}
	})

	t.Run("mcpServers JSON", func(t *testing.T) {
		npx := npxPackage(t, clientsInspectorPkg, "--cli", "--help")
		home := t.TempDir()
		cfg := filepath.Join(home, "claude_desktop_config.json")
		js := image(docBlock(t, "json"))
		var v map[string]any
		if err := json.Unmarshal([]byte(js), &v); err != nil {
			t.Fatalf("the mcpServers JSON of docs/mcp.md: %v\n%s", err, js)
		}
		if err := os.WriteFile(cfg, []byte(js), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npx, "-y", clientsInspectorPkg, "--cli", "--config", cfg, "--server", "limbs",
			"--method", "tools/call", "--tool-name", "shell_run", "--tool-arg", "command=echo desktop-$((6*7))")
		cmd.Env, cmd.Dir = clientEnv(t, home, addr), home
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("inspector --config: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), `desktop-42\n[exit code 0;`) {
			t.Errorf("inspector --config called shell_run: %s", out)
		}
	})
	// Every /mcp session's sandbox goes with its session.
	testbin.Eventually(t, "the /mcp sessions' sandboxes are removed", 60*time.Second, func() bool {
		for _, sb := range sandboxesOf(t, addr) {
			if strings.HasPrefix(sb.Name, "mcp-") {
				return false
			}
		}
		return true
	})
	// A stdio `limbs mcp --image` removes its sandbox when its client
	// ends it; a client that kills it (Codex, under load, a server it
	// started twice) leaves the sandbox behind (docs/mcp.md says so).
	// Those are removed here, and named in the log.
	deadline := time.Now().Add(30 * time.Second)
	for left := sandboxesOf(t, addr); len(left) > 0; left = sandboxesOf(t, addr) {
		if time.Now().Before(deadline) {
			time.Sleep(time.Second)
			continue
		}
		c, err := client.New(addr, "tok", "")
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range left {
			t.Logf("a killed stdio limbs mcp --image left sandbox %s (%s): removing it", sb.ID, sb.Name)
			if err := c.Sandboxes().Remove(context.Background(), sb.ID); err != nil {
				t.Errorf("removing %s: %v", sb.ID, err)
			}
		}
		break
	}
}

// lineOf reports whether the line of out that starts with prefix holds
// want.
func lineOf(out, prefix, want string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.Contains(l, want)
		}
	}
	return false
}

// rpc is a JSON-RPC 2.0 peer on a process's stdin and stdout, one message
// a line (codex app-server).
type rpc struct {
	in   *json.Encoder
	msgs chan map[string]json.RawMessage
	next int
}

func startRPC(t *testing.T, cmd *exec.Cmd) *rpc {
	t.Helper()
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testbin.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &rpc{in: json.NewEncoder(w), msgs: make(chan map[string]json.RawMessage, 64)}
	go func() {
		defer close(p.msgs)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<16), 16<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.msgs <- m
			}
		}
	}()
	t.Cleanup(func() {
		// Let the client end its MCP servers itself (a stdio `limbs mcp
		// --image` removes its sandbox on the way out): killed, it cannot.
		w.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	})
	return p
}

func (p *rpc) notify(t *testing.T, method string) {
	t.Helper()
	if err := p.in.Encode(map[string]any{"jsonrpc": "2.0", "method": method}); err != nil {
		t.Fatal(err)
	}
}

// call sends a request and returns its result, skipping notifications
// and the server's own requests.
func (p *rpc) call(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	p.next++
	id := p.next
	if err := p.in.Encode(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case m, ok := <-p.msgs:
			if !ok {
				t.Fatalf("%s: the server exited", method)
			}
			if _, isReq := m["method"]; isReq || string(m["id"]) != fmt.Sprint(id) {
				continue
			}
			if e := m["error"]; e != nil {
				t.Fatalf("%s: %s", method, e)
			}
			return m["result"]
		case <-timeout:
			t.Fatalf("%s: no answer in 2 minutes", method)
		}
	}
}

func (p *rpc) decode(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
}
