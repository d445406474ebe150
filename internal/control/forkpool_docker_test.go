package control_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/provider/docker"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestDockerForkFromPool: with a warm pool, shared forks are pool
// sandboxes with the checkpoint's overlay mounted over their workspace:
// each has the checkpoint's files, session (cwd and exported variable)
// and nothing of the pool sandbox's own session; each is independent;
// one stopped and started again has its overlay back with what it wrote;
// its first checkpoint is incremental; limbsd's file watcher follows the
// new workspace; and removing them leaves no layers.
func TestDockerForkFromPool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("copy-on-write forks need limbs serve to run as root")
	}
	dir := stateDir(t)
	dp := dockerOrSkip(t, dir)
	const pool = 2
	p := newDockerPlane(t, dir, dp, map[string]int{docker.DefaultImage: pool})
	ctx := context.Background()
	sbs := p.c.Sandboxes()
	// Default limits, as the pool's (forks inherit their source's).
	src, err := sbs.Create(ctx, wire.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sbs.Remove(context.Background(), src.ID) })
	c := p.sandboxClient(t, src.ID)
	if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	execIn(t, c, `mkdir -p /workspace/t/sub && echo hi > /workspace/t/a && head -c 20000 /dev/zero > /workspace/t/pad && seq 1 1000 > /workspace/t/sub/n && cd /workspace/t && export FORKVAR=kept`)
	cp, err := sbs.Checkpoint(ctx, src.ID, wire.CreateCheckpoint{Name: "prepared"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for p.srv.PoolReady(docker.DefaultImage) < pool {
		if time.Now().After(deadline) {
			t.Fatal("the warm pool did not fill")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fk, err := sbs.Fork(ctx, src.ID, wire.Fork{Count: pool, Checkpoint: cp.ID})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	t.Logf("fork of %d from the pool: %d ms (tree %d, slowest create %d, slowest restore %d)", pool, fk.DurationMS, fk.TreeMS, fk.CreateMS, fk.RestoreMS)
	if !fk.Shared || fk.FromPool != pool {
		t.Fatalf("fork: shared %v, from the pool %d; want shared, %d from the pool", fk.Shared, fk.FromPool, pool)
	}
	for i, f := range fk.Sandboxes {
		fc := p.sandboxClient(t, f.ID)
		ss, err := fc.ListSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ss) != 1 || ss[0].Name != "main" {
			t.Errorf("fork %s has sessions %+v; want only the checkpoint's main", f.ID, ss)
		}
		got := execIn(t, fc, fmt.Sprintf(`pwd; echo "$FORKVAR"; cat a; wc -l < sub/n; grep -c ' /workspace overlay ' /proc/mounts; echo fork%d > mine`, i))
		if want := "/workspace/t\nkept\nhi\n1000\n1"; got != want {
			t.Errorf("fork %s: %q; want %q", f.ID, got, want)
		}
	}
	for i, f := range fk.Sandboxes {
		if got := execIn(t, p.sandboxClient(t, f.ID), `cat mine`); got != fmt.Sprintf("fork%d", i) {
			t.Errorf("fork %s sees %q: the forks are not independent", f.ID, got)
		}
	}
	if got := execIn(t, c, `cat /workspace/t/mine 2>&1; true`); !strings.Contains(got, "No such file") {
		t.Errorf("the source sees a fork's write: %q", got)
	}

	// limbsd's file watcher follows the mounted workspace.
	f0 := fk.Sandboxes[0].ID
	fc := p.sandboxClient(t, f0)
	execIn(t, fc, `echo watched > /workspace/t/watched`)
	seen := false
	for end := time.Now().Add(20 * time.Second); !seen && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		evs, err := fc.Events(ctx, 1, 10000, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Events {
			seen = seen || ev.Type == wire.EventFileChanged && strings.Contains(string(ev.Data), "t/watched")
		}
	}
	if !seen {
		t.Errorf("no file.changed event for a write in the fork's workspace: limbsd's watcher still watches the pool sandbox's")
	}

	// Its first checkpoint sends only what it wrote.
	own, err := sbs.Checkpoint(ctx, f0, wire.CreateCheckpoint{})
	if err != nil {
		t.Fatal(err)
	}
	if own.Sent > 4096 {
		// (t/pad, unchanged beside them, counts 20,000 bytes.)
		t.Errorf("the fork's first checkpoint sent %d bytes; want only its two small files", own.Sent)
	}

	// Stopped and started again: the overlay is mounted again, with what
	// the fork wrote, and the session is back in its cwd.
	if _, err := sbs.Stop(ctx, f0); err != nil {
		t.Fatal(err)
	}
	if _, err := sbs.Start(ctx, f0); err != nil {
		t.Fatalf("starting the fork again: %v", err)
	}
	if got := execIn(t, fc, `pwd; cat /workspace/t/mine; grep -c ' /workspace overlay ' /proc/mounts`); got != "/workspace/t\nfork0\n1" {
		t.Errorf("the fork after a restart: %q", got)
	}

	// Start on a running fork changes nothing: its shell keeps its state.
	execIn(t, fc, `UNEXPORTED=still`)
	if _, err := sbs.Start(ctx, f0); err != nil {
		t.Fatal(err)
	}
	if got := execIn(t, fc, `echo "$UNEXPORTED"`); got != "still" {
		t.Errorf("Start on a running fork restarted its shell: %q", got)
	}

	// Killed: recovered with its overlay and what it wrote.
	f1 := fk.Sandboxes[1].ID
	if out, err := exec.Command("docker", "kill", "limbs-"+f1).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	var got string
	for end := time.Now().Add(90 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if sb, err := sbs.Get(ctx, f1); err != nil || sb.Status != wire.SandboxRunning || sb.Reason == "" {
			continue
		}
		y := 10.0
		r, err := p.sandboxClient(t, f1).Exec(ctx, "main", wire.Exec{Command: `cat /workspace/t/mine; grep -c ' /workspace overlay ' /proc/mounts`, YieldAfter: &y})
		if err == nil {
			got = strings.TrimSpace(r.Output)
			break
		}
	}
	if got != "fork1\n1" {
		t.Errorf("the fork recovered after a kill: %q; want its own file on its overlay", got)
	}

	for _, f := range fk.Sandboxes {
		if err := sbs.Remove(ctx, f.ID); err != nil {
			t.Errorf("removing fork %s: %v", f.ID, err)
		}
	}
	for _, f := range fk.Sandboxes {
		if _, err := os.Lstat(filepath.Join(dir, "sandboxes", f.ID+".ws")); err == nil {
			t.Errorf("fork %s's layers are left after its removal", f.ID)
		}
	}
}
