package mcp_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/mcp"
)

// TestUnreachableSandbox: a call whose sandbox cannot be reached is an
// isError result that says so and what to do, without the HTTP route.
func TestUnreachableSandbox(t *testing.T) {
	c, err := client.New("unix://"+filepath.Join(t.TempDir(), "gone.sock"), "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.NewServer(c, c.FileStore(), mcp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { _ = srv.Run(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "shell_run", Arguments: map[string]any{"command": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	text := r.Content[0].(*sdk.TextContent).Text
	if !r.IsError || !strings.Contains(text, "shell_run could not be carried out") || !strings.Contains(text, "could not be reached") || strings.Contains(text, "POST /") || strings.Contains(text, "/sessions") {
		t.Errorf("isError %v, text:\n%s", r.IsError, text)
	}
}
