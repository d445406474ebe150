package control_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Acceptance 1 to 4 of docs/checkpoints.md in a Docker sandbox: the
// 10,000-file workspace restored exactly with its session; an agent that
// removes everything it can write reaches no checkpoint; ten forks run
// independently and are all removed.
func TestDockerCheckpoints(t *testing.T) {
	dir := stateDir(t)
	dp := dockerOrSkip(t, dir)
	p := newDockerPlane(t, dir, dp, nil)
	ctx := context.Background()
	sbs := p.c.Sandboxes()
	sb, err := sbs.Create(ctx, wire.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sbs.Remove(context.Background(), sb.ID) })
	checkpointAcceptance(t, p, sb.ID, 100<<20, "/tmp")

	// Acceptance 2: the agent removes everything it may write, and looks
	// for the store; the checkpoint is whole and restores.
	c := p.sandboxClient(t, sb.ID)
	cps, err := sbs.Checkpoints(ctx, sb.ID)
	if err != nil || len(cps) < 2 {
		t.Fatalf("checkpoints: %v %v", cps, err)
	}
	first := cps[0]
	before := execIn(t, c, `L=/tmp/list-again; `+treeSum)
	out := execIn(t, c, fmt.Sprintf(`id -u; ls -d %q 2>&1; for d in / /workspace /tmp /dev/shm "$HOME"; do rm -rf --no-preserve-root --one-file-system "$d" 2>/dev/null; done; test -e "$W/tree/d0/f0.txt" || echo gone`, dir+"/checkpoints"))
	if !strings.Contains(out, "No such file") || !strings.HasSuffix(out, "gone") {
		t.Fatalf("inside the sandbox after rm -rf: %q; want the store unreachable and the workspace empty", out)
	}
	if _, err := sbs.Restore(ctx, sb.ID, first.ID); err != nil {
		t.Fatalf("restore after rm -rf: %v", err)
	}
	if got := execIn(t, c, `L=/tmp/list-again; `+treeSum); got != before {
		t.Errorf("after rm -rf and a restore the tree differs")
	}

	// Acceptance 3: ten forks of the prepared sandbox (without its big
	// file, to spare the shared disk).
	execIn(t, c, `rm "$W/tree/big.bin"`)
	prepSum := execIn(t, c, `L=/tmp/list-prep; `+treeSum)
	prep, err := sbs.Checkpoint(ctx, sb.ID, wire.CreateCheckpoint{Name: "prepared"})
	if err != nil {
		t.Fatal(err)
	}
	fk, err := sbs.Fork(ctx, sb.ID, wire.Fork{Count: 10, Checkpoint: prep.ID})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	t.Logf("10 forks of %d files took %d ms; disk used %d bytes, shared %v", prep.Files, fk.DurationMS, fk.DiskBytes, fk.Shared)
	shared := os.Geteuid() == 0 // copy-on-write workspaces need serve as root
	switch {
	case len(fk.Sandboxes) != 10:
		t.Fatalf("fork: %d sandboxes", len(fk.Sandboxes))
	case fk.Shared != shared:
		t.Fatalf("fork: shared %v, want %v (as uid %d)", fk.Shared, shared, os.Geteuid())
	case shared && (fk.DiskBytes < prep.Size || fk.DiskBytes >= 2*prep.Size):
		t.Fatalf("shared forks wrote %d bytes; want one copy of the checkpoint's %d", fk.DiskBytes, prep.Size)
	case !shared && fk.DiskBytes < 10*prep.Size:
		t.Fatalf("forks wrote %d bytes; want 10 copies of %d", fk.DiskBytes, prep.Size)
	}
	var ids []string
	for i, f := range fk.Sandboxes {
		ids = append(ids, f.ID)
		fc := p.sandboxClient(t, f.ID)
		got := execIn(t, fc, fmt.Sprintf(`export W=%q; head -1 "$W/tree/d0/f0.txt"; echo fork%d > "$W/tree/mine"; ls "$W/tree" | wc -l`, strings.TrimSuffix(execIn(t, c, `echo "$W"`), "\n"), i))
		if !strings.HasPrefix(got, "line one of 0") {
			t.Errorf("fork %s: %q", f.ID, got)
		}
	}
	for i, id := range ids {
		fc := p.sandboxClient(t, id)
		if got := execIn(t, fc, `cat "$W/tree/mine" 2>/dev/null || cat /workspace/tree/mine`); got != fmt.Sprintf("fork%d", i) {
			t.Errorf("fork %s sees %q in its own file: the forks are not independent", id, got)
		}
	}
	if got := execIn(t, c, `cat "$W/tree/mine" 2>&1; true`); !strings.Contains(got, "No such file") {
		t.Errorf("the source sandbox sees a fork's write: %q", got)
	}
	if shared {
		forkCOW(t, p, fk.Sandboxes, prep, prepSum)
	}
	for _, id := range ids {
		if err := sbs.Remove(ctx, id); err != nil {
			t.Errorf("removing fork %s: %v", id, err)
		}
	}
	left := dockerLeftovers(t, p.srv.Instance())
	if len(left) != 2 {
		t.Errorf("after removing the forks, the instance holds %v; want only the source's container and volume", left)
	}
	// Checkpoints outlive their sandbox.
	if err := sbs.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	after, err := sbs.Checkpoints(ctx, sb.ID)
	if err != nil || len(after) != len(cps)+1 {
		t.Fatalf("checkpoints of the deleted sandbox: %d, %v; want %d", len(after), err, len(cps)+1)
	}
	if !slices.ContainsFunc(after, func(c wire.Checkpoint) bool { return c.ID == prep.ID }) {
		t.Error("the prepared checkpoint is gone with its sandbox")
	}
	if err := sbs.DeleteCheckpoint(ctx, sb.ID, prep.ID); err != nil {
		t.Fatal(err)
	}
	// Nothing of the forks' workspaces is left: layers, nor the tree.
	for _, glob := range []string{"sandboxes/*.ws", "checkpoints/trees/*"} {
		if m, _ := filepath.Glob(filepath.Join(dir, glob)); len(m) > 0 {
			t.Errorf("left over after the forks and their checkpoint were removed: %v", m)
		}
	}
}

// forkCOW checks copy-on-write forks: each workspace is an overlay with
// the checkpoint's tree exactly; one that destroys everything it can
// write changes neither another fork nor a fork made after it; a fork's
// own checkpoint is incremental on the shared files.
func forkCOW(t *testing.T, p *plane, forks []wire.Sandbox, prep wire.Checkpoint, prepSum string) {
	ctx := context.Background()
	sbs := p.c.Sandboxes()
	var made []string
	defer func() {
		for _, id := range made {
			if err := sbs.Remove(context.Background(), id); err != nil {
				t.Errorf("removing fork %s: %v", id, err)
			}
		}
	}()
	fresh := func() (string, *client.Client) {
		sb, err := sbs.Create(ctx, wire.CreateSandbox{FromCheckpoint: prep.Sandbox + "/" + prep.ID})
		if err != nil {
			t.Fatalf("a fork from %s: %v", prep.ID, err)
		}
		made = append(made, sb.ID)
		return sb.ID, p.sandboxClient(t, sb.ID)
	}
	a := p.sandboxClient(t, forks[0].ID)
	bID, b := fresh()
	if fs := execIn(t, b, `stat -f -c %T /workspace`); fs != "overlayfs" {
		t.Errorf("a fork's /workspace is %q, want overlayfs", fs)
	}
	if got := execIn(t, b, `export W=/workspace L=/tmp/list-fork; `+treeSum); got != prepSum {
		t.Errorf("a fork's tree differs from the checkpoint's")
	}
	out := execIn(t, a, `cd /; for f in $(find /workspace -type f | head -50); do echo x >> "$f"; done; chmod 000 /workspace/tree/d3/f1.txt; rm -rf /workspace/tree/d4 && ln -s / /workspace/tree/d4; rm -rf /workspace/* /workspace/.[!.]* 2>/dev/null; test -e /workspace/tree/d0/f0.txt || echo gone`)
	if out != "gone" {
		t.Fatalf("the destroying fork still holds its files: %q", out)
	}
	if got := execIn(t, b, `export W=/workspace L=/tmp/list-fork2; `+treeSum); got != prepSum {
		t.Errorf("a fork's tree changed when another fork destroyed its own")
	}
	_, late := fresh()
	if got := execIn(t, late, `export W=/workspace L=/tmp/list-late; `+treeSum); got != prepSum {
		t.Errorf("a fork made after another destroyed its workspace differs from the checkpoint")
	}
	execIn(t, b, `echo more >> /workspace/tree/d0/f1.txt`)
	cp, err := sbs.Checkpoint(ctx, bID, wire.CreateCheckpoint{})
	if err != nil {
		t.Fatalf("checkpoint of a fork: %v", err)
	}
	if cp.Files != prep.Files || cp.Sent > prep.Size/10 {
		t.Errorf("checkpoint of a fork: %d files (want %d), %d bytes sent of %d: want only the changed file's", cp.Files, prep.Files, cp.Sent, prep.Size)
	}
	t.Logf("a fork's first checkpoint: %d ms, frozen %d, %d bytes sent", cp.DurationMS, cp.FrozenMS, cp.Sent)
}

// A fork whose copy-on-write workspace the engine cannot make (here: a
// state dir whose path has a comma, which the overlay's options cannot
// carry) gets a full copy instead of failing.
func TestDockerForkFallsBackToCopy(t *testing.T) {
	dir := filepath.Join(stateDir(t), "state,with-comma")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p, sb, c := dockerSession(t, dir)
	ctx := context.Background()
	sbs := p.c.Sandboxes()
	execIn(t, c, `mkdir -p /workspace/d && echo kept > /workspace/d/f && ln -s d/f /workspace/link`)
	cp, err := sbs.Checkpoint(ctx, sb, wire.CreateCheckpoint{})
	if err != nil {
		t.Fatal(err)
	}
	fk, err := sbs.Fork(ctx, sb, wire.Fork{Count: 2, Checkpoint: cp.ID})
	if err != nil {
		t.Fatalf("fork when the overlay cannot be made: %v", err)
	}
	defer func() {
		for _, f := range fk.Sandboxes {
			_ = sbs.Remove(context.Background(), f.ID)
		}
	}()
	if fk.Shared || len(fk.Sandboxes) != 2 || fk.DiskBytes < 2*cp.Size {
		t.Fatalf("fork: shared %v, %d sandboxes, %d bytes written (want copies: 2 x %d)", fk.Shared, len(fk.Sandboxes), fk.DiskBytes, cp.Size)
	}
	for _, f := range fk.Sandboxes {
		fc := p.sandboxClient(t, f.ID)
		if got := execIn(t, fc, `cat /workspace/link; stat -f -c %T /workspace`); got == "" || !strings.HasPrefix(got, "kept\n") || strings.HasSuffix(got, "overlayfs") {
			t.Errorf("fork %s: %q; want the file, not on an overlay", f.ID, got)
		}
	}
}
