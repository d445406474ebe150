package control_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/provider/local"
	"github.com/limbs-dev/limbs/internal/wire"
)

// genTree makes the acceptance workspace under $W/tree: 9,800 text files
// in 100 directories, 201 binary ones, 100 symlinks, an absolute and a
// dangling link, empty directories, several modes, and a file of BIG
// bytes.
const genTree = `set -e
cd "$W"; rm -rf tree; mkdir tree; cd tree
for d in $(seq 0 99); do mkdir -p d$d/sub; done
awk 'BEGIN { for (d = 0; d < 100; d++) for (f = 0; f < 98; f++) { p = sprintf("d%d/f%d.txt", d, f); printf "line one of %d\nfile %d in d%d\nend\n", f, f, d > p; close(p) } }'
mkdir bins; head -c 600000 /dev/urandom | (cd bins && split -b 3000 -d -a 3 - bin)
for d in $(seq 0 99); do ln -s f1.txt d$d/link; done
head -c 1000 /dev/urandom > d10/bin10
ln -s /etc/passwd abs-link; ln -s nowhere dangling
mkdir -p empty/a/b emptyd swapdir
ln -s d0 swaplink
chmod 700 d1; chmod 600 d2/f1.txt; chmod 755 d3/f2.txt; chmod 444 d4/f3.txt; chmod 1777 emptyd; chmod 555 d6
head -c $BIG /dev/urandom > big.bin
echo made`

// destroy is the destructive script: deletions, edits, a chmod, new
// files, a symlink swapped for a directory, a link retargeted.
const destroy = `cd "$W/tree" || exit 1
rm -rf d7 d8 empty
echo changed >> d0/f0.txt
printf 'brand new\n' > d1/new.txt
chmod 600 d9/f9.txt
rm swaplink && mkdir swaplink && echo inner > swaplink/inner
head -c 1000 /dev/urandom > d10/bin10
ln -sfn f2.txt d11/link
chmod 755 d6 && rm d6/f5.txt
echo destroyed`

// treeSum writes a listing of $W/tree (type, mode, mtime, link target,
// path, and every file's sha256) to $1 and prints its hash.
const treeSum = `(cd "$W/tree" && { find . -printf '%y %m %T@ %l %p\n' | LC_ALL=C sort; find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } > "$L" && sha256sum < "$L")`

func execIn(t testing.TB, c *client.Client, command string) string {
	t.Helper()
	defer func(start time.Time) { t.Logf("%s: %.40q", time.Since(start).Round(time.Millisecond), command) }(time.Now())
	yield := 120.0
	r, err := c.Exec(context.Background(), "main", wire.Exec{Command: command, YieldAfter: &yield})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	if r.Status != wire.StatusExited || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("exec %.60q: status %s exit %v: %s", command, r.Status, r.ExitCode, r.Output)
	}
	return strings.TrimSpace(r.Output)
}

// checkpointAcceptance is acceptance 1 and 4 of docs/checkpoints.md on
// sandbox sb: checkpoint, destroy, checkpoint, diff, restore, compare.
func checkpointAcceptance(t *testing.T, p *plane, sb string, big int, listDir string) {
	ctx := context.Background()
	sbs := p.c.Sandboxes()
	c := p.sandboxClient(t, sb)
	if _, err := c.GetSession(ctx, "main"); errors.Is(err, wire.ErrNotFound) {
		if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"}); err != nil {
			t.Fatal(err)
		}
	}
	w := execIn(t, c, "pwd")
	env := fmt.Sprintf("export W=%q BIG=%d L=%q/list-", w, big, listDir)
	execIn(t, c, env+"; "+genTree)
	execIn(t, c, `cd "$W/tree/d3" && export CKPT_VAR=before`)
	before := execIn(t, c, `L=${L}before; `+treeSum)

	cp1, err := sbs.Checkpoint(ctx, sb, wire.CreateCheckpoint{Name: "before"})
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	t.Logf("first checkpoint: %d files, %d dirs, %d symlinks, %d bytes, frozen %d ms, took %d ms", cp1.Files, cp1.Dirs, cp1.Symlinks, cp1.Size, cp1.FrozenMS, cp1.DurationMS)
	if cp1.Files < 10000 || cp1.Symlinks < 100 || cp1.Size < int64(big) {
		t.Fatalf("checkpoint holds %d files, %d symlinks, %d bytes; want the whole tree", cp1.Files, cp1.Symlinks, cp1.Size)
	}
	execIn(t, c, destroy)
	execIn(t, c, `cd / && export CKPT_VAR=after`)
	cp2, err := sbs.Checkpoint(ctx, sb, wire.CreateCheckpoint{Name: "after"})
	if err != nil {
		t.Fatalf("second checkpoint: %v", err)
	}
	t.Logf("second checkpoint: sent %d bytes, new %d bytes, frozen %d ms (stop %d, walk %d), took %d ms", cp2.Sent, cp2.NewBytes, cp2.FrozenMS, cp2.StopMS, cp2.WalkMS, cp2.DurationMS)
	if cp2.Sent > 1<<20 {
		t.Errorf("the second checkpoint sent %d bytes: it should send only what changed", cp2.Sent)
	}

	// Acceptance 4: the diff names what the script did.
	df, err := sbs.Diff(ctx, sb, cp1.ID, cp2.ID)
	if err != nil {
		t.Fatalf("diff: %v", err)
	}
	tr := w + "/tree/"
	for _, want := range []struct {
		list []string
		path string
	}{
		{df.Removed, tr + "d7"}, {df.Removed, tr + "d7/f3.txt"}, {df.Removed, tr + "d8/sub"}, {df.Removed, tr + "empty/a/b"}, {df.Removed, tr + "d6/f5.txt"},
		{df.Added, tr + "d1/new.txt"}, {df.Added, tr + "swaplink/inner"},
		{df.Changed, tr + "d0/f0.txt"}, {df.Changed, tr + "d9/f9.txt"}, {df.Changed, tr + "swaplink"}, {df.Changed, tr + "d10/bin10"}, {df.Changed, tr + "d11/link"}, {df.Changed, tr + "d6"},
	} {
		if !slices.Contains(want.list, want.path) {
			t.Errorf("diff misses %s (added %d, changed %v, removed %d)", want.path, len(df.Added), df.Changed, len(df.Removed))
		}
	}
	if len(df.Added) != 2 || len(df.Changed) != 6 {
		t.Errorf("diff: added %v, changed %v; want exactly what the script did", df.Added, df.Changed)
	}
	if !strings.Contains(df.Diff, "+changed") || !strings.Contains(df.Diff, "+++ b/"+strings.TrimPrefix(tr, "/")+"d1/new.txt") {
		t.Errorf("the unified diff misses the edit or the new file:\n%.2000s", df.Diff)
	}

	// Acceptance 1: restore, and the tree is as it was.
	res, err := sbs.Restore(ctx, sb, cp1.ID)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Logf("restore: wrote %d, removed %d, %d bytes, frozen %d ms, took %d ms", res.Written, res.Removed, res.Bytes, res.FrozenMS, res.DurationMS)
	after := execIn(t, c, `L=${L}after; `+treeSum)
	if after != before {
		t.Errorf("the tree differs after the restore:\n%s", execIn(t, c, `diff "${L}before" "${L}after" | head -40; true`))
	}
	if got := execIn(t, c, `echo "$(pwd) $CKPT_VAR"`); got != w+"/tree/d3 before" {
		t.Errorf("after the restore the session is in %q; want %q", got, w+"/tree/d3 before")
	}
	cur, err := sbs.Diff(ctx, sb, cp1.ID, "current")
	if err != nil {
		t.Fatalf("diff to current: %v", err)
	}
	if len(cur.Added)+len(cur.Changed)+len(cur.Removed) != 0 {
		t.Errorf("diff to current after the restore: added %v changed %v removed %v", cur.Added, cur.Changed, cur.Removed)
	}
	// The event log has it.
	evs, err := p.srv.Events(ctx, sb, 0, []string{string(wire.EventCheckpointRestored)}, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs.Events {
		found = found || ev.Type == wire.EventCheckpointRestored
	}
	if !found {
		t.Error("no checkpoint.restored event")
	}
}

func TestLocalCheckpointRestore(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	p := newPlane(t, dir, local.IsolateNone, nil)
	sb := p.create(t, wire.CreateSandbox{Provider: "local"})
	t.Cleanup(func() { _ = p.c.Sandboxes().Remove(context.Background(), sb.ID) })
	start := time.Now()
	checkpointAcceptance(t, p, sb.ID, 100<<20, t.TempDir())
	t.Logf("acceptance took %s", time.Since(start))
}
