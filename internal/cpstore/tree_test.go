package cpstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/checkpoint"
)

// hostileScan is a scan stream of /workspace as a hostile limbsd could
// send it: entries given as is, content only for FlagContent files.
func hostileScan(t testing.TB, entries []checkpoint.Entry, flags []byte, content map[string]string) []byte {
	t.Helper()
	var b []byte
	for i := range entries {
		b = checkpoint.AppendEntry(b, &entries[i], flags[i])
		if flags[i] == checkpoint.FlagContent {
			b = append(b, content[entries[i].Path]...)
		}
	}
	end, _ := json.Marshal(checkpoint.ScanEnd{Roots: []string{"/workspace"}})
	return checkpoint.AppendJSON(b, checkpoint.KindEnd, end)
}

// A checkpoint whose scan listed a file without its content (a hostile
// limbsd's FlagMeta in a scan with content) has no blob for it: writing
// its tree is an error, not a panic of limbs serve, and leaves nothing.
func TestTreeFileWithoutContent(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	entries := []checkpoint.Entry{
		{Path: "workspace", Type: checkpoint.TypeDir, Mode: 0o755},
		{Path: "workspace/a", Type: checkpoint.TypeFile, Mode: 0o644, Size: 5},
		{Path: "workspace/b", Type: checkpoint.TypeFile, Mode: 0o644, Size: 3},
	}
	flags := []byte{checkpoint.FlagMeta, checkpoint.FlagContent, checkpoint.FlagMeta}
	ing, err := st.Ingest(bytes.NewReader(hostileScan(t, entries, flags, map[string]string{"workspace/a": "hello"})), nil, checkpoint.DefaultLimits)
	if err != nil {
		t.Fatalf("ingest: %v", err)
	}
	m := ing.Manifest
	m.Meta.Sandbox, m.Meta.ID = "sb_test", "cp_test"
	var tdir string
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Tree panicked on a file without content: %v", r)
			}
		}()
		tdir, _, err = st.Tree(m)
	}()
	if err == nil {
		t.Fatalf("Tree of a manifest with a file without content made %s; want an error", tdir)
	}
	if !errors.Is(err, checkpoint.ErrInvalid) {
		t.Errorf("Tree: %v; want ErrInvalid", err)
	}
	if _, err := os.Lstat(st.TreeDir("sb_test", "cp_test")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed tree is left at %s (%v)", st.TreeDir("sb_test", "cp_test"), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "tmp", "*")); len(left) > 0 {
		t.Errorf("a failed tree left %v", left)
	}
}

// A tree half-written when limbs serve died (tmp/tree*) is removed by the
// next sweep: it can be as large as the checkpoint.
func TestSweepTreesRemovesHalfWritten(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	half, err := os.MkdirTemp(filepath.Join(dir, "tmp"), "tree")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(half, "t", "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "t", "sub", "f"), []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	blob, err := os.CreateTemp(filepath.Join(dir, "tmp"), "blob")
	if err != nil {
		t.Fatal(err)
	}
	blob.Close()
	if err := st.SweepTrees(func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(half); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a half-written tree survived a sweep: %v", err)
	}
	if _, err := os.Lstat(blob.Name()); err != nil {
		t.Errorf("a sweep of trees took a blob's temporary file: %v", err)
	}
}

// A restore streams every file's blob from a goroutine of its own, where
// a panic ends limbs serve: a hash the sandbox's scan left empty is an
// error.
func TestOpenBlobNotAHash(t *testing.T) {
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"", "a", "../../../../etc/passwd", strings.Repeat("A", 64)} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("OpenBlob(%q) panicked: %v", h, r)
				}
			}()
			if f, err := st.OpenBlob(h); !errors.Is(err, checkpoint.ErrInvalid) {
				t.Errorf("OpenBlob(%q) = %v, %v; want ErrInvalid", h, f, err)
			}
		}()
	}
}

// A tree no sandbox uses is kept for the next fork of its checkpoint
// within TreeIdle, and removed after, though its checkpoint stays: it is
// a full copy kept for nothing.
func TestSweepTreesRemovesIdle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a tree gives every path its owner: it needs root")
	}
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := &Manifest{Entries: []checkpoint.Entry{{Path: "workspace", Type: checkpoint.TypeDir, Mode: 0o755}}}
	m.Meta.Sandbox, m.Meta.ID, m.Meta.Roots = "sb_src", "cp_one", []string{"/workspace"}
	if err := st.Save(m, m.Meta.ID); err != nil {
		t.Fatal(err)
	}
	dir, _, err := st.Tree(m)
	if err != nil {
		t.Fatal(err)
	}
	unused := func(string) bool { return false }
	if err := st.SweepTrees(unused); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); err != nil {
		t.Fatalf("a tree asked for just now was swept: %v", err)
	}
	old := time.Now().Add(-TreeIdle - time.Minute)
	if err := os.Chtimes(filepath.Join(st.dir, "trees-used", filepath.Base(dir)), old, old); err != nil {
		t.Fatal(err)
	}
	if err := st.SweepTrees(func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); err != nil {
		t.Fatalf("an idle tree a sandbox still uses was swept: %v", err)
	}
	if err := st.SweepTrees(unused); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an idle tree nothing uses is still there: %v", err)
	}
	if _, err := st.Load(m.Meta.Sandbox, m.Meta.ID); err != nil {
		t.Fatalf("the checkpoint went with its tree: %v", err)
	}
	if again, _, err := st.Tree(m); err != nil || again != dir {
		t.Fatalf("the tree is not written again for the next fork: %q %v", again, err)
	}
}
