package mcp

import (
	"net/http/httptest"
	"testing"
)

// TestMatch: which requests are for an MCP endpoint, and whose. Every
// request limbs serve gets passes through Match, so a path that is not
// exactly /v1/sandboxes/{one segment}/mcp (or /mcp) must not be taken.
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		target, sandbox string
		ok              bool
	}{
		{"/v1/sandboxes/sb_1/mcp", "sb_1", true},
		{"/v1/sandboxes/my%20box/mcp", "my box", true},
		{"/v1/sandboxes/sb_1/mcp?x=1", "sb_1", true},
		{"/v1/sandboxes//mcp", "", false},
		{"/v1/sandboxes/mcp", "", false},
		{"/v1/sandboxes/a/b/mcp", "", false},
		{"/v1/sandboxes/a%2Fb/mcp", "", false},
		{"/v1/sandboxes/a%00/mcp", "", false},
		{"/v1/sandboxes/sb_1/mcp/", "", false},
		{"/v1/sandboxes/sb_1/mcpx", "", false},
		{"/v1/sandboxes/sb_1/sessions/main/exec", "", false},
		{"/x/v1/sandboxes/sb_1/mcp", "", false},
		{"/mcp?sandbox=sb_2", "sb_2", true},
	} {
		r := httptest.NewRequest("POST", tc.target, nil)
		sandbox, ok := Match(r)
		if ok != tc.ok || sandbox != tc.sandbox {
			t.Errorf("Match(%s) = %q, %v; want %q, %v", tc.target, sandbox, ok, tc.sandbox, tc.ok)
		}
	}
}
