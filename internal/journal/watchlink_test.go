package journal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWatchFollowsNoLink: a directory the watcher learns of (a create
// event) may be reached, by the time limbsd walks it, through a component
// the agent turned into a symlink (mkdir a/journal; mv a a2; ln -s
// /run/limbs/state a). limbsd (root) must not watch what lies behind it:
// outside the workspace, or its own state directory under another name
// (whose writes would feed the journal its own changes forever).
func TestWatchFollowsNoLink(t *testing.T) {
	base := t.TempDir()
	root, state := filepath.Join(base, "work"), filepath.Join(base, "state")
	for _, d := range []string{filepath.Join(root, "real", "sub"), filepath.Join(state, "journal", "deep")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(state, filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	j, err := Open(Options{Dir: filepath.Join(base, "jdir")})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Skipf("no inotify: %v", err)
	}
	defer unix.Close(fd)
	w := &watcher{j: j, opts: WatchOptions{Root: root, Skip: []string{state}, MaxDirs: DefaultWatchDirs}, fd: fd,
		wds: map[int]string{}, pending: map[string]*change{}, moves: map[uint32]string{}}
	w.addTree(root)
	w.addTree(filepath.Join(root, "a", "journal")) // as after the swap
	var got []string
	for _, p := range w.wds {
		got = append(got, p)
	}
	if len(w.wds) != 3 {
		t.Errorf("watching %q; want the workspace's 3 directories only", got)
	}
	for _, p := range got {
		if strings.Contains(p, "journal") || strings.HasPrefix(p, state) {
			t.Errorf("watching %s: behind a symlink", p)
		}
	}
}

func TestOpenNoFollow(t *testing.T) {
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "a"), filepath.Join(base, "l")); err != nil {
		t.Fatal(err)
	}
	root, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	for rel, ok := range map[string]bool{".": true, "a": true, "a/b": true, "l": false, "l/b": false, "a/../a": false} {
		fd, err := openNoFollow(root, rel)
		if (err == nil) != ok {
			t.Errorf("openNoFollow(%q): %v, want success %v", rel, err, ok)
		}
		if err == nil {
			unix.Close(fd)
		}
	}
}
