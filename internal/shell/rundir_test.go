package shell

import (
	"os"
	"path/filepath"
	"testing"
)

// The run directory's name follows from the state directory, so a second
// daemon on the same state finds it; a directory of that name that others
// may enter (squatted on the shared /dev/shm) is never used.
func TestRunDirFollowsStateDir(t *testing.T) {
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		t.Skip("no /dev/shm here: the run directory lives in the state directory")
	}
	state := t.TempDir()
	a := makeRunDir(state, 0o700)
	t.Cleanup(func() { os.RemoveAll(a) })
	if filepath.Dir(a) != "/dev/shm" {
		t.Fatalf("run directory %s, want one on /dev/shm", a)
	}
	if b := makeRunDir(state, 0o700); b != a {
		t.Errorf("a second daemon on the same state directory got %s, want %s", b, a)
	}
	if other := makeRunDir(t.TempDir(), 0o700); other == a {
		t.Errorf("two state directories share the run directory %s", a)
	} else {
		os.RemoveAll(other)
	}

	// Opened to others: somebody else's, or tampered with.
	if err := os.Chmod(a, 0o755); err != nil {
		t.Fatal(err)
	}
	c := makeRunDir(state, 0o700)
	t.Cleanup(func() { os.RemoveAll(c) })
	if c == a {
		t.Errorf("a run directory open to others (mode 0755) was used: %s", c)
	}
	if fi, err := os.Stat(c); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("fallback run directory %s: %v %v, want a private directory", c, fi, err)
	}

	// A symlink in its place is not followed.
	os.RemoveAll(a)
	if err := os.Symlink(t.TempDir(), a); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(a) })
	d := makeRunDir(state, 0o700)
	t.Cleanup(func() { os.RemoveAll(d) })
	if d == a {
		t.Errorf("a symlink at the run directory's name was used")
	}
}
