package mcp_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/mcp"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

const dockerImage = "limbs/base:latest"

// TestMCPDockerThroughServe runs the acceptance scenarios with the SDK's
// streamable HTTP client against a Docker sandbox (limbs/base, network
// none) through a real `limbs serve` and its /v1/sandboxes/ID/mcp.
func TestMCPDockerThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve and a Docker sandbox")
	}
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", dockerImage).CombinedOutput(); err != nil {
		testbin.NoDocker(t, "no Docker engine or no "+dockerImage+" (run scripts/docker-up.sh and scripts/build-base-image.sh): "+string(out))
	}
	limbs := testbin.Path(t, "limbs", false)
	limbsd := testbin.Path(t, "limbsd", false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	state, err := os.MkdirTemp("", "serve") // short: sandbox socket paths
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(limbs, "serve", "--listen", addr, "--token", "tok", "--state-dir", state, "--provider", "docker", "--limbsd", limbsd)
	var logs testbin.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(state)
		if t.Failed() {
			t.Logf("limbs serve output:\n%s", logs.String())
		}
	})
	testbin.Eventually(t, "limbs serve answers", 60*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/v1/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	ctl, err := client.New(addr, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var sb wire.Sandbox
	if err := ctl.JSON(ctx, http.MethodPost, "/sandboxes", wire.CreateSandbox{Image: dockerImage}, &sb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before limbs serve stops (cleanups run last first)
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := ctl.JSON(dctx, http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil); err != nil {
			t.Errorf("removing sandbox %s: %v", sb.ID, err)
		}
	})
	direct, err := client.New(addr, "tok", "/sandboxes/"+sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	p := &progressLog{}
	cs := connectHTTPToken(t, "http://"+addr+mcp.Path(sb.ID), "tok", p)
	scenarios(t, cs, direct, "/workspace", p)
	// The sandbox has its own network namespace (network none): 8000 is
	// free there whatever the host runs.
	untilScenarios(t, cs, 8000)
}
