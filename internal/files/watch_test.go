package files_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// collect reads events until done says it has seen enough.
func collect(t *testing.T, w *client.FileWatch, done func([]wire.WatchEvent) bool) []wire.WatchEvent {
	t.Helper()
	var evs []wire.WatchEvent
	for !done(evs) {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("watch stream ended after %d events: %v", len(evs), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func runScript(t *testing.T, dir, script string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("needs bash to run the file script")
	}
	cmd := exec.Command(bash, "-euc", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
}

// TestWatchThousandFiles is acceptance 5: a script creates, writes, renames
// and deletes 1,000 files; every event arrives, in order for each file.
func TestWatchThousandFiles(t *testing.T) {
	f := newFixture(t)
	dir := f.path("watched")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := f.c.Watch(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// The script: each file is created, written, renamed, then removed.
	// Only mv forks per file (rm takes them all at once), so it stays fast.
	const n = 1000
	runScript(t, dir, fmt.Sprintf(`for i in $(seq 1 %d); do : > f$i; echo "content $i" >> f$i; mv f$i g$i; done; rm g*`, n))

	removed := 0
	evs := collect(t, w, func(evs []wire.WatchEvent) bool {
		if len(evs) > 0 && evs[len(evs)-1].Type == "remove" {
			removed++
		}
		return removed == n
	})
	perFile := map[int][]string{}
	for _, ev := range evs {
		var i int
		name := filepath.Base(ev.Path)
		if _, err := fmt.Sscanf(name[1:], "%d", &i); err != nil || filepath.Dir(ev.Path) != dir {
			t.Fatalf("event for an unexpected path: %+v", ev)
		}
		desc := ev.Type + " " + name
		if ev.From != "" {
			desc += " from " + filepath.Base(ev.From)
		}
		perFile[i] = append(perFile[i], desc)
		if ev.Time.IsZero() {
			t.Fatalf("event without a time: %+v", ev)
		}
	}
	for i := 1; i <= n; i++ {
		want := []string{
			fmt.Sprintf("create f%d", i),
			fmt.Sprintf("write f%d", i),
			fmt.Sprintf("rename g%d from f%d", i, i),
			fmt.Sprintf("remove g%d", i),
		}
		if diff := cmp.Diff(want, perFile[i]); diff != "" {
			t.Fatalf("events of file %d (-want +got):\n%s", i, diff)
		}
	}
}

// TestWatchNewDirectories checks recursion: directories made after the
// watch started are watched too, and files created in them before their
// watch existed are reported by a scan.
func TestWatchNewDirectories(t *testing.T) {
	f := newFixture(t)
	dir := f.path("w")
	if err := os.MkdirAll(filepath.Join(dir, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := f.c.Watch(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	runScript(t, dir, `
echo x > old/in-old
mkdir -p new/a/b && echo y > new/a/b/deep
mv new renamed
echo z > renamed/a/later
rm renamed/a/b/deep
echo end > end`)
	evs := collect(t, w, func(evs []wire.WatchEvent) bool {
		return len(evs) > 0 && evs[len(evs)-1].Path == filepath.Join(dir, "end") && evs[len(evs)-1].Type == "write"
	})
	var got []string
	seen := map[string]bool{}
	for _, ev := range evs {
		s := ev.Type + " " + strings.TrimPrefix(ev.Path, dir+"/")
		if ev.From != "" {
			s += " from " + strings.TrimPrefix(ev.From, dir+"/")
		}
		got = append(got, s)
		seen[s] = true
	}
	for _, want := range []string{
		"create old/in-old", "write old/in-old",
		"create new", "create new/a", "create new/a/b", "create new/a/b/deep", "write new/a/b/deep",
		"rename renamed from new",
		"create renamed/a/later", "write renamed/a/later",
		"remove renamed/a/b/deep",
		"create end", "write end",
	} {
		if !seen[want] {
			t.Errorf("missing event %q in:\n%s", want, strings.Join(got, "\n"))
		}
	}
	// Order per path: a file's create comes before its write.
	pos := map[string]int{}
	for i, s := range got {
		if _, ok := pos[s]; !ok {
			pos[s] = i
		}
	}
	if pos["create new/a/b/deep"] > pos["write new/a/b/deep"] {
		t.Errorf("write of new/a/b/deep reported before its create:\n%s", strings.Join(got, "\n"))
	}
}

func TestWatchMovedOutAndRootRemoved(t *testing.T) {
	f := newFixture(t)
	dir := f.path("w")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := f.c.Watch(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	runScript(t, f.workdir, `echo x > w/leaving && mv w/leaving elsewhere && rm -r w`)
	evs := collect(t, w, func(evs []wire.WatchEvent) bool {
		return len(evs) > 0 && evs[len(evs)-1].Type == "remove" && evs[len(evs)-1].Path == dir
	})
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Type+" "+strings.TrimPrefix(ev.Path, f.workdir+"/"))
	}
	want := []string{"create w/leaving", "write w/leaving", "remove w/leaving", "remove w"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if _, err := w.Next(); err == nil {
		t.Errorf("the stream goes on after its directory was removed")
	}
}

// TestWatchHidesOwnTempFiles checks that a write through the API shows as
// one write of the file, not as the temp file and rename behind it.
func TestWatchHidesOwnTempFiles(t *testing.T) {
	f := newFixture(t)
	dir := f.path("w")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := f.c.Watch(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := f.c.WriteFile(ctx, filepath.Join(dir, "put.txt"), strings.NewReader("v1"), 0, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Edit(ctx, wire.Edit{Command: "create", Path: filepath.Join(dir, "made.txt"), FileText: ptr("x\n")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Edit(ctx, wire.Edit{Command: "str_replace", Path: filepath.Join(dir, "made.txt"), OldStr: ptr("x"), NewStr: ptr("y")}); err != nil {
		t.Fatal(err)
	}
	runScript(t, dir, `echo end > end`)
	evs := collect(t, w, func(evs []wire.WatchEvent) bool {
		return len(evs) > 0 && evs[len(evs)-1].Path == filepath.Join(dir, "end") && evs[len(evs)-1].Type == "write"
	})
	var got []string
	for _, ev := range evs {
		e := ev.Type + " " + strings.TrimPrefix(ev.Path, dir+"/") + ev.From
		// inotify merges an event into an identical one still unread
		// in its queue: two quick writes of one file may be one event.
		if len(got) > 0 && got[len(got)-1] == e {
			continue
		}
		got = append(got, e)
	}
	want := []string{"write put.txt", "write made.txt", "create end", "write end"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
