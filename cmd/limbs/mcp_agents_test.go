package main

import (
	"context"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// mcpHTTP connects the SDK's client to the streamable HTTP endpoint u with
// the token tok, and closes it when the test ends.
func mcpHTTP(t *testing.T, u string) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr := &sdk.StreamableClientTransport{Endpoint: u, HTTPClient: &http.Client{Transport: bearerRT{"tok"}}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", u, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func toolNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range l.Tools {
		names = append(names, tl.Name)
	}
	return names
}

func createSandbox(t *testing.T, addr string, req wire.CreateSandbox) wire.Sandbox {
	t.Helper()
	c, err := client.New(addr, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.Sandboxes().Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Sandboxes().Remove(context.Background(), sb.ID) })
	return sb
}

// TestServeMCPRoot: limbs serve serves MCP at /mcp: /mcp?sandbox=ID is the
// sandbox's endpoint; /mcp alone makes a sandbox for the MCP session and
// removes it when the session ends; the token and Origin checks come
// first, and make no sandbox.
func TestServeMCPRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	root := "http://" + addr + "/mcp"

	post := func(u, origin, token string) int {
		req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(root, "https://evil.example", "tok"); code != http.StatusForbidden {
		t.Errorf("/mcp with a foreign Origin got %d, want 403", code)
	}
	if code := post(root, "", ""); code != http.StatusUnauthorized {
		t.Errorf("/mcp without the token got %d, want 401", code)
	}
	if code := post(root, "", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("/mcp with a wrong token got %d, want 401", code)
	}
	if code := post(root+"?sandbox=nosuch", "", "tok"); code != http.StatusNotFound {
		t.Errorf("/mcp?sandbox=nosuch got %d, want 404", code)
	}
	if n := len(sandboxesOf(t, addr)); n != 0 {
		t.Fatalf("refused requests left %d sandboxes", n)
	}

	// /mcp?sandbox=ID: the sandbox's own endpoint.
	sb := createSandbox(t, addr, wire.CreateSandbox{Image: localImage, Name: "named"})
	cs := mcpHTTP(t, root+"?sandbox="+url.QueryEscape("named"))
	if names := toolNames(t, cs); !slices.Contains(names, "shell_run") || slices.Contains(names, "sandbox_create") {
		t.Errorf("tools %v: want shell_run and, without --mcp-allow-sandboxes, no sandbox tools", names)
	}
	text, isErr := mcpText(t, cs, "shell_run", map[string]any{"command": "touch /tmp/in-named-$$ && echo named-ok"})
	if isErr || !strings.Contains(text, "named-ok") {
		t.Fatalf("shell_run over /mcp?sandbox=: %s", text)
	}
	if n := len(sandboxesOf(t, addr)); n != 1 {
		t.Errorf("%d sandboxes after /mcp?sandbox=%s, want 1", n, sb.ID)
	}
	mcpRollback(t, cs)

	// /mcp: a sandbox of its own per MCP session, made on first use and
	// removed when the session ends. Connecting and listing the tools (a
	// client's health check) make none.
	auto := mcpHTTP(t, root)
	if names := toolNames(t, auto); !slices.Contains(names, "shell_run") {
		t.Fatalf("tools of /mcp: %v", names)
	}
	if n := len(sandboxesOf(t, addr)); n != 1 {
		t.Errorf("%d sandboxes after an initialize and a tools/list on /mcp, want still 1", n)
	}
	healthCheck := mcpHTTP(t, root)
	healthCheck.Close()
	text, isErr = mcpText(t, auto, "shell_run", map[string]any{"command": "echo auto-$((6*7))"})
	if isErr || !strings.Contains(text, "auto-42") {
		t.Fatalf("shell_run over /mcp: %s", text)
	}
	mcpRollback(t, auto)
	var made []string
	for _, s := range sandboxesOf(t, addr) {
		if s.ID != sb.ID {
			made = append(made, s.Name)
		}
	}
	if len(made) != 1 || !strings.HasPrefix(made[0], "mcp-") {
		t.Fatalf("sandboxes made for the /mcp session: %v, want one mcp-*", made)
	}
	auto2 := mcpHTTP(t, root)
	if text, _ := mcpText(t, auto2, "shell_run", map[string]any{"command": "echo second"}); !strings.Contains(text, "second") {
		t.Fatalf("a second /mcp session: %s", text)
	}
	if n := len(sandboxesOf(t, addr)); n != 3 {
		t.Errorf("%d sandboxes with two /mcp sessions, want 3 (one each, and the named one)", n)
	}
	auto.Close() // DELETE of the MCP session
	auto2.Close()
	testbin.Eventually(t, "the sandboxes of ended /mcp sessions are removed", 60*time.Second, func() bool {
		return len(sandboxesOf(t, addr)) == 1
	})
	if l := sandboxesOf(t, addr); len(l) != 1 || l[0].ID != sb.ID {
		t.Errorf("left: %+v, want only the named sandbox", l)
	}
}

// mcpRollback: the checkpoint and rollback tools of an MCP session act
// on its own sandbox: a file changed after a checkpoint is back after a
// rollback.
func mcpRollback(t *testing.T, cs *sdk.ClientSession) {
	t.Helper()
	if names := toolNames(t, cs); !slices.Contains(names, "checkpoint") || !slices.Contains(names, "rollback") {
		t.Fatalf("tools %v: want checkpoint and rollback", names)
	}
	if text, isErr := mcpText(t, cs, "shell_run", map[string]any{"command": "echo before > ck-file && cat ck-file"}); isErr || !strings.Contains(text, "before") {
		t.Fatalf("shell_run: %s", text)
	}
	if text, isErr := mcpText(t, cs, "checkpoint", map[string]any{"name": "mcp-cp"}); isErr {
		t.Fatalf("checkpoint over MCP: %s", text)
	}
	mcpText(t, cs, "shell_run", map[string]any{"command": "echo after > ck-file"})
	if text, isErr := mcpText(t, cs, "rollback", map[string]any{"checkpoint": "mcp-cp"}); isErr {
		t.Fatalf("rollback over MCP: %s", text)
	}
	if text, _ := mcpText(t, cs, "shell_run", map[string]any{"command": "cat ck-file"}); !strings.Contains(text, "before") || strings.Contains(text, "after") {
		t.Errorf("after a rollback over MCP the file holds %q, want before", text)
	}
}

// TestMCPSandboxTools: sandbox_create, sandbox_list and sandbox_delete are
// served only with the permission (limbs serve --mcp-allow-sandboxes,
// limbs mcp --allow-sandboxes), and work over the control plane.
func TestMCPSandboxTools(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t, "--mcp-allow-sandboxes")
	sb := createSandbox(t, addr, wire.CreateSandbox{Image: localImage, Name: "home"})

	check := func(t *testing.T, cs *sdk.ClientSession) {
		names := toolNames(t, cs)
		for _, n := range []string{"sandbox_create", "sandbox_list", "sandbox_delete", "shell_run"} {
			if !slices.Contains(names, n) {
				t.Fatalf("tools %v: no %s", names, n)
			}
		}
		if slices.Contains(names, "finish") {
			t.Errorf("finish is served over MCP: %v", names)
		}
		text, isErr := mcpText(t, cs, "sandbox_create", map[string]any{"image": localImage, "name": "made-by-model"})
		if isErr || !strings.Contains(text, "created sandbox") || !strings.Contains(text, "made-by-model") {
			t.Fatalf("sandbox_create: %s", text)
		}
		text, isErr = mcpText(t, cs, "sandbox_list", nil)
		if isErr || !strings.Contains(text, "made-by-model") || !strings.Contains(text, sb.ID) {
			t.Fatalf("sandbox_list: %s", text)
		}
		text, isErr = mcpText(t, cs, "sandbox_delete", map[string]any{"sandbox": "made-by-model"})
		if isErr || !strings.Contains(text, "removed sandbox made-by-model") {
			t.Fatalf("sandbox_delete: %s", text)
		}
		for _, s := range sandboxesOf(t, addr) {
			if s.Name == "made-by-model" {
				t.Fatalf("sandbox_delete left %+v", s)
			}
		}
		text, isErr = mcpText(t, cs, "sandbox_delete", map[string]any{"sandbox": "made-by-model"})
		if !isErr || !strings.Contains(text, "sandbox_list") {
			t.Errorf("sandbox_delete of a removed sandbox: isError %v, %s", isErr, text)
		}
	}
	t.Run("serve", func(t *testing.T) {
		check(t, mcpHTTP(t, "http://"+addr+"/mcp?sandbox="+sb.ID))
	})
	t.Run("stdio", func(t *testing.T) {
		cmd := exec.Command(testbin.Path(t, "limbs", false), "mcp", "--addr", addr, "--token", "tok", "--sandbox", sb.ID, "--allow-sandboxes")
		var stderr testbin.Buffer
		cmd.Stderr = &stderr
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		defer cs.Close()
		check(t, cs)
	})
	t.Run("stdio without permission", func(t *testing.T) {
		cmd := exec.Command(testbin.Path(t, "limbs", false), "mcp", "--addr", addr, "--token", "tok", "--sandbox", sb.ID)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if names := toolNames(t, cs); slices.Contains(names, "sandbox_create") || slices.Contains(names, "sandbox_delete") {
			t.Errorf("sandbox tools served without --allow-sandboxes: %v", names)
		}
	})
	t.Run("one limbsd", func(t *testing.T) {
		out, err := exec.Command(testbin.Path(t, "limbs", false), "mcp", "--addr", "unix:///nonexistent/limbsd.sock", "--token", "tok", "--allow-sandboxes").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--allow-sandboxes needs limbs serve") {
			t.Errorf("limbs mcp --allow-sandboxes on one limbsd: %v, %s", err, out)
		}
	})
}

// TestBackgroundInDocker: in a Docker sandbox (limbsd as the container's
// init), shell_run names the processes a command left running, a setsid
// one included.
func TestBackgroundInDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve and Docker")
	}
	if err := exec.Command("docker", "image", "inspect", "limbs/base:latest").Run(); err != nil {
		testbin.NoDocker(t, "no Docker engine or no limbs/base:latest image")
	}
	addr, _ := realServe(t, "--provider", "docker")
	sb := createSandbox(t, addr, wire.CreateSandbox{Image: "limbs/base:latest"})
	cs := mcpHTTP(t, "http://"+addr+"/mcp?sandbox="+sb.ID)
	text, isErr := mcpText(t, cs, "shell_run", map[string]any{"command": "sleep 100 & setsid sleep 101 & sleep 0.3; echo ok"})
	if isErr || !strings.Contains(text, "[2 background processes still running: pid ") ||
		!strings.Contains(text, "`sleep 100`") || !strings.Contains(text, "`sleep 101`") {
		t.Fatalf("shell_run: %s", text)
	}
	text, _ = mcpText(t, cs, "shell_run", map[string]any{"command": "echo next"})
	if strings.Contains(text, "background process") {
		t.Errorf("the next command lists the earlier command's processes: %s", text)
	}
}
