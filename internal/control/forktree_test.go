package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/limbs-dev/limbs/internal/checkpoint"
	"github.com/limbs-dev/limbs/internal/cpstore"
	"github.com/limbs-dev/limbs/internal/wire"
)

// A checkpoint deleted while forks of it start: the tree handed to the
// forks is not removed before their records name it, which would leave
// forks whose workspace loses its files under them.
func TestForkTreeSurvivesDeleteDuringFork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("copy-on-write forks need root")
	}
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	s, err := NewPlane(context.Background(), Options{
		StateDir:  t.TempDir(),
		Token:     testToken,
		Providers: map[string]Provider{"docker": fp},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	st, err := s.cpStore()
	if err != nil {
		t.Fatal(err)
	}
	m := &cpstore.Manifest{Entries: []checkpoint.Entry{{Path: "workspace", Type: checkpoint.TypeDir, Mode: 0o755}}}
	m.Meta.Sandbox, m.Meta.ID, m.Meta.Roots = "sb_src", "cp_one", []string{"/workspace"}
	if err := st.Save(m, m.Meta.ID); err != nil {
		t.Fatal(err)
	}
	dir, _ := s.forkLower(m, []wire.CreateSandbox{{}})
	if dir == "" {
		t.Fatal("no tree for a fork of a /workspace checkpoint as root")
	}
	// The checkpoint goes before the forks' records are added.
	if err := st.Delete(m.Meta.Sandbox, m.Meta.ID); err != nil {
		t.Fatal(err)
	}
	s.sweepTrees()
	if _, err := os.Lstat(dir); err != nil {
		t.Fatalf("the tree a fork is being made over was removed: %v", err)
	}
}

// A fork's record names its tree as the state dir was spelled when it
// was made (here through a symlink); limbs serve restarted with another
// spelling of the same dir must still see the tree in use, or a sweep
// after the checkpoint's deletion empties running forks' workspaces.
func TestForkTreeInUseUnderAnotherSpelling(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "state")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	s, err := NewPlane(context.Background(), Options{
		StateDir:  real,
		Token:     testToken,
		Providers: map[string]Provider{"docker": fp},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// The record first: opening the store starts a sweep.
	rec, err := s.validate(wire.CreateSandbox{Provider: "docker"})
	if err != nil {
		t.Fatal(err)
	}
	rec.Lower = filepath.Join(link, "checkpoints", "trees", "sb_src.cp_gone")
	rec.Status = wire.SandboxRunning
	if _, err := s.add(rec); err != nil {
		t.Fatal(err)
	}
	st, err := s.cpStore()
	if err != nil {
		t.Fatal(err)
	}
	dir := st.TreeDir("sb_src", "cp_gone")
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	s.sweepTrees()
	if _, err := os.Lstat(dir); err != nil {
		t.Fatalf("the tree of a running fork (recorded as %s) was removed: %v", rec.Lower, err)
	}
}
