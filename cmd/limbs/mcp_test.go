package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/mcp"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// sandboxesOf lists the sandboxes of the limbs serve at addr.
func sandboxesOf(t *testing.T, addr string) []wire.Sandbox {
	t.Helper()
	c, err := client.New(addr, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	var l wire.SandboxList
	if err := c.JSON(context.Background(), http.MethodGet, "/sandboxes", nil, &l); err != nil {
		t.Fatal(err)
	}
	return l.Sandboxes
}

func mcpText(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var s string
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			s += tc.Text
		}
	}
	return s, r.IsError
}

// TestMCPImage: limbs mcp --image creates a sandbox through limbs serve,
// serves the tools in it, and removes it when the client closes stdin,
// and when it gets SIGTERM.
func TestMCPImage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	for _, end := range []string{"stdin EOF", "SIGTERM"} {
		t.Run(end, func(t *testing.T) {
			cmd := exec.Command(testbin.Path(t, "limbs", false), "mcp", "--addr", addr, "--token", "tok", "--image", localImage)
			var stderr testbin.Buffer
			cmd.Stderr = &stderr
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			text, isErr := mcpText(t, cs, "shell_run", map[string]any{"command": "cat <<EOF\nin the $((40+2)) sandbox\nEOF"})
			if isErr || !strings.Contains(text, "in the 42 sandbox") {
				t.Errorf("shell_run: %s", text)
			}
			if n := len(sandboxesOf(t, addr)); n != 1 {
				t.Errorf("%d sandboxes while limbs mcp runs, want 1", n)
			}
			if end == "SIGTERM" {
				_ = cmd.Process.Signal(syscall.SIGTERM)
			}
			cs.Close() // closes stdin, waits for the exit
			testbin.Eventually(t, "the sandbox is removed", 60*time.Second, func() bool { return len(sandboxesOf(t, addr)) == 0 })
			if t.Failed() {
				t.Logf("limbs mcp stderr:\n%s", stderr.String())
			}
		})
	}
}

// TestServeMCP: limbs serve serves MCP at /v1/sandboxes/ID/mcp behind its
// token and the Origin check, with the local provider, and with the Docker
// provider when an engine and limbs/base are here.
func TestServeMCP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	for _, provider := range []string{"local", "docker"} {
		t.Run(provider, func(t *testing.T) {
			image := localImage
			if provider == "docker" {
				if err := exec.Command("docker", "image", "inspect", "limbs/base:latest").Run(); err != nil {
					testbin.NoDocker(t, "no Docker engine or no limbs/base:latest image")
				}
				image = "limbs/base:latest"
			}
			addr, _ := realServe(t, "--provider", provider)
			c, err := client.New(addr, "tok", "")
			if err != nil {
				t.Fatal(err)
			}
			var sb wire.Sandbox
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := c.JSON(ctx, http.MethodPost, "/sandboxes", wire.CreateSandbox{Image: image}, &sb); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = c.JSON(context.Background(), http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil)
			})
			url := "http://" + addr + mcp.Path(sb.ID)

			post := func(origin, token string) int {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
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
			if code := post("https://evil.example", "tok"); code != http.StatusForbidden {
				t.Errorf("a foreign Origin got %d, want 403", code)
			}
			if code := post("", ""); code != http.StatusUnauthorized {
				t.Errorf("no token got %d, want 401", code)
			}

			tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerRT{"tok"}}}
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			text, isErr := mcpText(t, cs, "shell_run", map[string]any{"command": "cat <<'EOF'\nthrough limbs serve\nEOF\nread -p 'ok? ' a; echo got-$a", "yield": 3})
			if isErr || !strings.Contains(text, "through limbs serve") || !strings.Contains(text, "waiting for input") {
				t.Fatalf("shell_run: %s", text)
			}
			text, _ = mcpText(t, cs, "shell_input", map[string]any{"text": "yes", "keys": []string{"Enter"}})
			if !strings.Contains(text, "got-yes") {
				t.Errorf("shell_input: %s", text)
			}
			text, isErr = mcpText(t, cs, "apply_patch", map[string]any{"input": "*** Begin Patch\n*** Add File: mcp-added.txt\n+added over MCP\n*** End Patch\n"})
			if isErr {
				t.Fatal(text)
			}
			text, _ = mcpText(t, cs, "shell_run", map[string]any{"command": "cat mcp-added.txt"})
			if !strings.Contains(text, "added over MCP") {
				t.Errorf("the patched file: %s", text)
			}
			b, _ := json.Marshal(sb)
			t.Logf("sandbox %s", b)
		})
	}
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
