package main

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestCheckpointVerbs drives limbs checkpoint, diff, rollback, fork and
// checkpoint ls and rm against a real limbs serve with Docker sandboxes,
// and limbs agent --checkpoint-each-step: each verb prints what it did
// and the sandbox is as it says; checkpoints are found by name too.
func TestCheckpointVerbs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve and Docker")
	}
	if err := exec.Command("docker", "image", "inspect", "limbs/base:latest").Run(); err != nil {
		testbin.NoDocker(t, "no Docker engine or no limbs/base:latest image")
	}
	addr, _ := realServe(t, "--provider", "docker")
	t.Setenv("LIMBS_ADDR", addr)
	t.Setenv("LIMBS_TOKEN", "tok")
	sb := createSandbox(t, addr, wire.CreateSandbox{Name: "cpv", Image: "limbs/base:latest"})
	c, err := client.New(addr, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	sbs := c.Sandboxes()
	sc := c.Sandbox(sb.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sess, err := sc.CreateSession(ctx, wire.CreateSession{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	sh := func(cmd string) string {
		t.Helper()
		r, err := sc.Exec(ctx, sess.ID, wire.Exec{Command: cmd})
		if err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("exec %q: %v %+v", cmd, err, r)
		}
		return r.Output
	}
	cli := func(wantCode int, args ...string) string {
		t.Helper()
		out, code := captureStdout(t, func() int { return run(ctx, args) })
		if code != wantCode {
			t.Fatalf("limbs %s: exit code %d, want %d; printed:\n%s", strings.Join(args, " "), code, wantCode, out)
		}
		return out
	}

	sh("mkdir -p proj/empty && printf 'one\\ntwo\\n' > proj/a.txt && echo gone > proj/b.txt && cd proj && export STAGE=base")
	out := cli(0, "checkpoint", "cpv", "--name", "base")
	cpID := regexp.MustCompile(`cp_[0-9a-z]+`).FindString(out)
	if cpID == "" || !strings.Contains(out, "base") {
		t.Fatalf("limbs checkpoint printed %q; want the checkpoint's id and name", out)
	}
	sh("printf 'one\\nTWO\\n' > a.txt && rm b.txt && echo new > c.txt && cd / && export STAGE=later")

	out = cli(0, "diff", "cpv", "base")
	for _, want := range []string{`(?m)^\+ /\S*/proj/c\.txt$`, `(?m)^~ /\S*/proj/a\.txt$`, `(?m)^- /\S*/proj/b\.txt$`, `(?m)^-two$`, `(?m)^\+TWO$`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("limbs diff lacks %s:\n%s", want, out)
		}
	}
	if out := cli(0, "diff", "cpv", "base", "--name-only"); strings.Contains(out, "+TWO") || !strings.Contains(out, "/proj/a.txt") {
		t.Errorf("limbs diff --name-only printed:\n%s", out)
	}

	out = cli(0, "rollback", "cpv", "base")
	if !strings.Contains(out, "restored "+cpID) || !strings.Contains(out, "1 removed") {
		t.Errorf("limbs rollback printed %q", out)
	}
	if got := sh(`basename "$PWD"; echo "$STAGE"; cat a.txt b.txt; ls -1; test -d empty && echo empty-dir`); got != "proj\nbase\none\ntwo\ngone\na.txt\nb.txt\nempty\nempty-dir\n" {
		t.Errorf("after the rollback the session's cwd, $STAGE, and files are:\n%s", got)
	}
	if out := cli(0, "diff", "cpv", "base", "current"); strings.TrimSpace(out) != "" {
		t.Errorf("limbs diff after the rollback printed:\n%s", out)
	}

	out = cli(0, "fork", "cpv", "--checkpoint", "base", "--count", "2")
	forks := regexp.MustCompile(`(?m)^(sb_[0-9a-z]+)\t`).FindAllStringSubmatch(out, -1)
	for _, f := range forks {
		// Removed even when a check below fails.
		t.Cleanup(func() { _ = sbs.Remove(context.Background(), f[1]) })
	}
	if len(forks) != 2 || !strings.Contains(out, "2 sandboxes from "+sb.ID+"/"+cpID) {
		t.Fatalf("limbs fork printed %q; want 2 sandboxes from %s", out, cpID)
	}
	for i, f := range forks {
		id := f[1]
		fc := c.Sandbox(id)
		fs, err := fc.CreateSession(ctx, wire.CreateSession{Name: "f"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := fc.Exec(ctx, fs.ID, wire.Exec{Command: "cat proj/a.txt; echo fork" + string(rune('0'+i)) + " > proj/a.txt"})
		if err != nil || r.Output != "one\ntwo\n" {
			t.Errorf("fork %s: %v %+v; want the checkpoint's a.txt", id, err, r)
		}
	}
	if got := sh("cat a.txt"); got != "one\ntwo\n" {
		t.Errorf("a fork's write reached the sandbox it came from: %q", got)
	}

	// A name two checkpoints have names neither (an agent's checkpoint
	// cannot stand in for an older one of the same name); names that
	// read as an id, as "current" or as SANDBOX/CHECKPOINT are refused.
	second := regexp.MustCompile(`cp_[0-9a-z]+`).FindString(cli(0, "checkpoint", "cpv", "--name", "base"))
	cli(1, "rollback", "cpv", "base")
	cli(1, "diff", "cpv", "base")
	cli(0, "checkpoint", "rm", "cpv", second)
	for _, bad := range []string{"a/b", "current", "cp_x"} {
		cli(1, "checkpoint", "cpv", "--name", bad)
	}

	if out := cli(0, "checkpoint", "ls", "cpv"); !strings.Contains(out, cpID) {
		t.Errorf("limbs checkpoint ls printed %q; want %s", out, cpID)
	}
	cli(0, "checkpoint", "rm", "cpv", cpID)
	if out := cli(0, "checkpoint", "ls", "cpv"); strings.Contains(out, cpID) {
		t.Errorf("limbs checkpoint ls after rm printed %q", out)
	}
	if out, code := captureStdout(t, func() int { return run(ctx, []string{"rollback", "cpv"}) }); code == 0 {
		t.Errorf("limbs rollback without a checkpoint succeeded: %q", out)
	}

	// limbs agent --checkpoint-each-step: a checkpoint before each step's
	// tool calls; rolling back to the first brings the failing test back.
	sid := setupCalc(t, sc)
	srv := startFakeLLM(t, fakellmTestdata(t, "fix.json"))
	aout, code := runAgentCmd(t, calcTask, "--model", "fake", "--base-url", srv.URL,
		"--addr", addr, "--token", "tok", "--sandbox", sb.ID, "--checkpoint-each-step")
	wantFixed(t, srv, aout, code)
	calcPasses(t, sc, sid)
	list, err := sbs.Checkpoints(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cp := range list {
		names = append(names, cp.Name)
	}
	if len(names) < 2 || names[0] != "step-1" {
		t.Fatalf("the agent's checkpoints are %q; want step-1, step-2, ...", names)
	}
	cli(0, "rollback", "cpv", "step-1")
	r, err := sc.Exec(ctx, sid, wire.Exec{Command: "sh calc/test.sh"})
	if err != nil || r.ExitCode == nil || *r.ExitCode == 0 {
		t.Errorf("calc's test after rolling back to step-1: %v %+v; want it failing again", err, r)
	}
}

// TestLocalForkRefused: a local sandbox's checkpoint records its own host
// workspace, so limbs fork and a restore into another local sandbox are
// refused with what to do, and nothing is created or written.
func TestLocalForkRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbs serve")
	}
	addr, _ := realServe(t)
	t.Setenv("LIMBS_ADDR", addr)
	t.Setenv("LIMBS_TOKEN", "tok")
	a := createSandbox(t, addr, wire.CreateSandbox{Name: "la"})
	b := createSandbox(t, addr, wire.CreateSandbox{Name: "lb"})
	c, err := client.New(addr, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cp, err := c.Sandboxes().Checkpoint(ctx, a.ID, wire.CreateCheckpoint{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"fork", "la", "--checkpoint", "x"}, {"rollback", "lb", a.ID + "/" + cp.ID}} {
		out, code := captureStdout(t, func() int { return run(ctx, args) })
		if code == 0 {
			t.Errorf("limbs %s succeeded: %q", strings.Join(args, " "), out)
		}
	}
	if _, err := c.Sandboxes().Restore(ctx, b.ID, a.ID+"/"+cp.ID); err == nil || !strings.Contains(err.Error(), "docker provider") {
		t.Errorf("restoring la's checkpoint into lb: %v; want a refusal naming the docker provider", err)
	}
	if _, err := c.Sandboxes().Fork(ctx, a.ID, wire.Fork{Count: 1, Checkpoint: cp.ID}); err == nil || !strings.Contains(err.Error(), "docker provider") {
		t.Errorf("forking la: %v; want a refusal naming the docker provider", err)
	}
	list, err := c.Sandboxes().List(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("after the refusals limbs serve has %d sandboxes (%v); want la and lb", len(list), err)
	}
}
