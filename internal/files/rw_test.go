package files_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/wire"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readAll(t *testing.T, f *fixture, path string) ([]byte, error) {
	t.Helper()
	rc, err := f.c.ReadFile(context.Background(), path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestWriteRead(t *testing.T) {
	binary := make([]byte, 256*3)
	for i := range binary {
		binary[i] = byte(i)
	}
	tests := []struct {
		name     string
		path     string
		content  []byte
		mode     os.FileMode
		wantMode os.FileMode
	}{
		{name: "binary with NULs and CRs", path: "bin/blob", content: binary, wantMode: 0o644},
		{name: "parents created", path: "a/b/c/d.txt", content: []byte("deep\n"), wantMode: 0o644},
		{name: "mode honoured", path: "run.sh", content: []byte("#!/bin/sh\n"), mode: 0o755, wantMode: 0o755},
		{name: "private mode", path: "secret", content: []byte("k"), mode: 0o600, wantMode: 0o600},
		{name: "empty file", path: "empty", content: nil, wantMode: 0o644},
		{name: "absolute path", path: "$W/abs.txt", content: []byte("abs"), wantMode: 0o644},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			p := strings.ReplaceAll(tc.path, "$W", f.workdir)
			sum, err := f.c.WriteFile(context.Background(), p, bytes.NewReader(tc.content), tc.mode, "")
			if err != nil {
				t.Fatal(err)
			}
			if sum != sha(tc.content) {
				t.Errorf("write answered sha256 %s, want %s", sum, sha(tc.content))
			}
			got, err := readAll(t, f, p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.content) {
				t.Errorf("read back %q, want %q", got, tc.content)
			}
			abs := p
			if !filepath.IsAbs(abs) {
				abs = f.path(p)
			}
			fi, err := os.Stat(abs)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != tc.wantMode {
				t.Errorf("mode %v, want %v", fi.Mode().Perm(), tc.wantMode)
			}
			leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(abs), ".*limbs-*"))
			if len(leftovers) > 0 {
				t.Errorf("temp files left behind: %v", leftovers)
			}
		})
	}
}

func TestOverwriteKeepsModeAndOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	f := newFixture(t)
	f.write(t, "owned/x.sh", "old")
	if err := os.Chown(f.path("owned"), 1234, 1234); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f.path("owned/x.sh"), 1234, 1234); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f.path("owned/x.sh"), 0o750); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := f.c.WriteFile(ctx, "owned/x.sh", strings.NewReader("new"), 0, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.WriteFile(ctx, "owned/sub/new.txt", strings.NewReader("n"), 0, ""); err != nil {
		t.Fatal(err)
	}
	check := func(rel string, wantMode os.FileMode) {
		t.Helper()
		fi, err := os.Stat(f.path(rel))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 1234 || st.Gid != 1234 {
			t.Errorf("%s owned by %d:%d, want 1234:1234", rel, st.Uid, st.Gid)
		}
		if wantMode != 0 && fi.Mode().Perm() != wantMode {
			t.Errorf("%s mode %v, want %v", rel, fi.Mode().Perm(), wantMode)
		}
	}
	check("owned/x.sh", 0o750)
	check("owned/sub", 0)
	check("owned/sub/new.txt", 0o644)
}

func TestReadErrors(t *testing.T) {
	f := newFixture(t)
	f.write(t, "dir/file", "x")
	tests := []struct {
		path string
		want error
	}{
		{"missing.txt", wire.ErrNotFound},
		{"dir", wire.ErrBadRequest},
		{"dir/file/below", wire.ErrBadRequest},
		{"", wire.ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			_, err := readAll(t, f, tc.path)
			if !errors.Is(err, tc.want) {
				t.Errorf("read %q: %v, want %v", tc.path, err, tc.want)
			}
		})
	}
}

func TestWriteThroughSymlinkKeepsLink(t *testing.T) {
	f := newFixture(t)
	f.write(t, "target.txt", "old")
	if err := os.Symlink("target.txt", f.path("link.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.WriteFile(context.Background(), "link.txt", strings.NewReader("new"), 0, ""); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, "target.txt"); got != "new" {
		t.Errorf("target holds %q, want %q", got, "new")
	}
	if fi, err := os.Lstat(f.path("link.txt")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link.txt is no longer a symlink")
	}
}

func TestCutUploadChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.write(t, "keep.txt", "original")
	body := io.MultiReader(strings.NewReader("partial"), errReader{})
	_, err := f.c.WriteFile(context.Background(), "keep.txt", body, 0, "")
	if err == nil {
		t.Fatal("an upload cut half way succeeded")
	}
	f.http.Close() // waits for the handler to finish cleaning up
	if got := f.read(t, "keep.txt"); got != "original" {
		t.Errorf("file holds %q after a cut upload, want %q", got, "original")
	}
	leftovers, _ := filepath.Glob(f.path(".keep.txt.limbs-*"))
	if len(leftovers) > 0 {
		t.Errorf("temp files left behind: %v", leftovers)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection dropped") }

func TestDelete(t *testing.T) {
	f := newFixture(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "precious"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.write(t, "tree/a/b.txt", "b")
	if err := os.Symlink(outside, f.path("tree/out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, f.path("lonelink")); err != nil {
		t.Fatal(err)
	}
	f.write(t, "single.txt", "s")
	ctx := context.Background()

	if err := f.c.DeleteFile(ctx, "tree", false); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("deleting a full directory without recursive: %v, want bad request", err)
	}
	if err := f.c.DeleteFile(ctx, "tree", true); err != nil {
		t.Fatal(err)
	}
	if err := f.c.DeleteFile(ctx, "lonelink", false); err != nil {
		t.Fatal(err)
	}
	if err := f.c.DeleteFile(ctx, "single.txt", false); err != nil {
		t.Fatal(err)
	}
	if err := f.c.DeleteFile(ctx, "single.txt", false); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("deleting a missing file: %v, want not found", err)
	}
	if err := f.c.DeleteFile(ctx, f.workdir, true); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("deleting the workdir itself: %v, want bad request", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "precious")); err != nil {
		t.Errorf("a file behind a deleted symlink is gone: %v", err)
	}
	entries, err := f.c.ListFiles(ctx, f.workdir, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("workdir still holds %v", entries)
	}
}

func TestList(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.txt", "aaa")
	f.write(t, "d/b.txt", "b")
	f.write(t, "d/e/c.txt", "c")
	if err := os.Symlink("/etc", f.path("etc-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f.path("a.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", f.path("d-link")); err != nil {
		t.Fatal(err)
	}
	type row struct{ Path, Type, Mode, Target string }
	rows := func(es []wire.FileEntry) []row {
		var out []row
		for _, e := range es {
			out = append(out, row{strings.TrimPrefix(e.Path, f.workdir), e.Type, e.Mode, e.Target})
		}
		return out
	}
	tests := []struct {
		path  string
		depth int
		want  []row
	}{
		{".", 1, []row{{"/a.txt", "file", "0640", ""}, {"/d", "dir", "0755", ""}, {"/d-link", "symlink", "0777", "d"}, {"/etc-link", "symlink", "0777", "/etc"}}},
		{".", 3, []row{{"/a.txt", "file", "0640", ""}, {"/d", "dir", "0755", ""}, {"/d-link", "symlink", "0777", "d"}, {"/d/b.txt", "file", "0644", ""},
			{"/d/e", "dir", "0755", ""}, {"/d/e/c.txt", "file", "0644", ""}, {"/etc-link", "symlink", "0777", "/etc"}}},
		{"a.txt", 1, []row{{"/a.txt", "file", "0640", ""}}},
		// A named symlink to a directory is followed; the names stay the
		// caller's.
		{"d-link", 1, []row{{"/d-link/b.txt", "file", "0644", ""}, {"/d-link/e", "dir", "0755", ""}}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/depth%d", tc.path, tc.depth), func(t *testing.T) {
			es, err := f.c.ListFiles(context.Background(), tc.path, tc.depth)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, rows(es)); diff != "" {
				t.Errorf("listing (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := f.c.ListFiles(context.Background(), "nope", 1); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("listing a missing path: %v, want not found", err)
	}
}

func TestPutIfMatch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	first, err := f.c.WriteFile(ctx, "x.txt", strings.NewReader("v1"), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.WriteFile(ctx, "x.txt", strings.NewReader("v2"), 0, first); err != nil {
		t.Fatalf("write with the current sha256: %v", err)
	}
	_, err = f.c.WriteFile(ctx, "x.txt", strings.NewReader("v3"), 0, first)
	if !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("write with a stale sha256: %v, want conflict", err)
	}
	if got := f.read(t, "x.txt"); got != "v2" {
		t.Errorf("file holds %q, want v2", got)
	}
}

// TestWriteRacingEditWithStaleIfMatch is acceptance 4: a PUT and an edit
// that both saw the same version race; exactly one lands, the other is
// refused with a conflict, and the one that landed is intact.
func TestWriteRacingEditWithStaleIfMatch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	base := "alpha\nbeta\ngamma\n"
	putContent := "written by PUT\n"
	editContent := "alpha\nBETA\ngamma\n"
	wins := map[string]int{}
	for i := 0; i < 50; i++ {
		f.write(t, "race.txt", base)
		seen := sha([]byte(base))
		var wg sync.WaitGroup
		var putErr, editErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, putErr = f.c.WriteFile(ctx, "race.txt", strings.NewReader(putContent), 0, seen)
		}()
		go func() {
			defer wg.Done()
			_, editErr = f.c.Edit(ctx, wire.Edit{Command: "str_replace", Path: "race.txt", OldStr: ptr("beta"), NewStr: ptr("BETA"), IfMatch: seen})
		}()
		wg.Wait()
		got := f.read(t, "race.txt")
		switch {
		case putErr == nil && errors.Is(editErr, wire.ErrConflict):
			wins["put"]++
			if got != putContent {
				t.Fatalf("round %d: PUT won but the file holds %q", i, got)
			}
		case editErr == nil && errors.Is(putErr, wire.ErrConflict):
			wins["edit"]++
			if got != editContent {
				t.Fatalf("round %d: the edit won but the file holds %q", i, got)
			}
		default:
			t.Fatalf("round %d: put: %v, edit: %v; want exactly one conflict (file holds %q)", i, putErr, editErr, got)
		}
	}
	t.Logf("winners over 50 rounds: %v", wins)
}

func TestMethodsAndRoutes(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		method, path string
		want         int
	}{
		{http.MethodPost, "/v1/files?path=x", http.StatusBadRequest},
		{http.MethodGet, "/v1/files/nope", http.StatusNotFound},
		{http.MethodGet, "/v1/files/edit", http.StatusBadRequest},
		{http.MethodPut, "/v1/files?path=x&mode=999", http.StatusBadRequest},
		{http.MethodGet, "/v1/files/list?path=.&depth=0", http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, f.http.URL+tc.path, strings.NewReader(""))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

func TestReadRangeAndWriteOverDirectory(t *testing.T) {
	f := newFixture(t)
	f.write(t, "r.txt", "0123456789")
	req, _ := http.NewRequest(http.MethodGet, f.http.URL+"/v1/files?path=r.txt", nil)
	req.Header.Set("Range", "bytes=2-4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || string(b) != "234" {
		t.Errorf("range read: %d %q, want 206 \"234\"", resp.StatusCode, b)
	}
	if err := os.Mkdir(f.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.WriteFile(context.Background(), "d", strings.NewReader("x"), 0, ""); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("writing over a directory: %v, want bad request", err)
	}
}
