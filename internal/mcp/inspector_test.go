package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"
)

// inspectorPkg is the MCP Inspector the test runs; scripts/ci-setup.sh
// fetches the same version into npm's cache.
const inspectorPkg = "@modelcontextprotocol/inspector@0.15.0"

// requireInspectorEnv, set to 1, turns the skip of a machine without npx
// into a failure (CI sets it).
const requireInspectorEnv = "LIMBS_REQUIRE_INSPECTOR"

// TestInspectorCLI runs the official MCP Inspector CLI against `limbs mcp
// --addr` on a real limbsd: it lists the tools and calls shell_run.
func TestInspectorCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs npx, limbsd and limbs")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		if os.Getenv(requireInspectorEnv) == "1" {
			t.Fatalf("npx is not on PATH and %s=1 requires the MCP Inspector test: install Node.js (scripts/ci-setup.sh fetches the inspector)", requireInspectorEnv)
		}
		t.Skip("no npx: the MCP Inspector CLI cannot run")
	}
	// Fetching the package needs the npm registry (or npm's cache, which
	// scripts/ci-setup.sh fills): without either, only CI fails.
	fctx, fcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer fcancel()
	fetch := exec.CommandContext(fctx, npx, "-y", inspectorPkg, "--cli", "--help")
	fetch.Env = append(os.Environ(), "npm_config_prefer_offline=true", "npm_config_update_notifier=false")
	if out, err := fetch.CombinedOutput(); err != nil {
		if os.Getenv(requireInspectorEnv) == "1" {
			t.Fatalf("npx cannot run %s (%v) and %s=1 requires it; run scripts/ci-setup.sh to fetch it:\n%s", inspectorPkg, err, requireInspectorEnv, out)
		}
		t.Skipf("npx cannot run %s (no npm registry or cache?): %v\n%s", inspectorPkg, err, out)
	}
	l := testbin.StartLimbsd(t, false)
	bin := testbin.Path(t, "limbs", false)
	// A script, so that the inspector never reads limbs's flags as its own.
	script := filepath.Join(t.TempDir(), "limbs-mcp.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec "+shq(bin)+" mcp --addr "+shq("unix://"+l.Sock)+" --token "+shq(l.Token)+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	inspect := func(args ...string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npx, append([]string{"-y", inspectorPkg, "--cli", script}, args...)...)
		cmd.Env = append(os.Environ(), "npm_config_prefer_offline=true", "npm_config_update_notifier=false")
		var stderr testbin.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("inspector %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, stderr.String())
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("inspector %v printed no JSON: %v\n%s", args, err, out)
		}
		return v
	}
	v := inspect("--method", "tools/list")
	var names []string
	tools, _ := v["tools"].([]any)
	for _, tl := range tools {
		m, _ := tl.(map[string]any)
		n, _ := m["name"].(string)
		names = append(names, n)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "shell_run") || !strings.Contains(got, "apply_patch") {
		t.Errorf("tools/list: %s", got)
	}
	v = inspect("--method", "tools/call", "--tool-name", "shell_run", "--tool-arg", "command=echo hi from the inspector")
	b, _ := json.Marshal(v)
	if v["isError"] == true || !strings.Contains(string(b), "hi from the inspector\\n") || !strings.Contains(string(b), `"exit_code":0`) {
		t.Errorf("tools/call shell_run: %s", b)
	}
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
