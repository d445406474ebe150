package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// TestFileStore checks the whole-file view of the Files API against a real
// limbsd: the etag of a read is the one a write returns and if_match
// takes, a stale one is a conflict, and Stat tells files from directories.
func TestFileStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs limbsd")
	}
	l := testbin.StartLimbsd(t, false)
	c, err := New("unix://"+l.Sock, l.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	s := c.FileStore()
	ctx := context.Background()
	ws := filepath.Join(l.Dir, "workspace")
	p := filepath.Join(ws, "d", "f.txt")

	if _, _, err := s.ReadFile(ctx, p); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("read of a missing file: %v, want ErrNotFound", err)
	}
	etag, err := s.WriteFile(ctx, p, []byte("one\r\n\tTwo\n"), 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("one\r\n\tTwo\n"))
	if etag != hex.EncodeToString(sum[:]) {
		t.Errorf("write etag %s is not the sha256 of what was written", etag)
	}
	data, got, err := s.ReadFile(ctx, p)
	if err != nil || got != etag || string(data) != "one\r\n\tTwo\n" {
		t.Errorf("read: %q %s %v, want the bytes written and etag %s", data, got, err, etag)
	}
	if _, err := s.WriteFile(ctx, p, []byte("two"), 0, etag); err != nil {
		t.Fatalf("write with the current etag: %v", err)
	}
	if _, err := s.WriteFile(ctx, p, []byte("three"), 0, etag); !errors.Is(err, wire.ErrConflict) {
		t.Errorf("write with a stale etag: %v, want ErrConflict", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Errorf("on disk: %q, want two", b)
	}

	st, err := s.Stat(ctx, p)
	if err != nil || st.Type != "file" || st.Mode != "0600" {
		t.Errorf("stat of the file: %+v %v", st, err)
	}
	for _, dir := range []string{ws, filepath.Join(ws, "d")} { // one entry, and several
		if st, err := s.Stat(ctx, dir); err != nil || st.Type != "dir" {
			t.Errorf("stat of %s: %+v %v, want a dir", dir, st, err)
		}
	}
	if _, err := s.Stat(ctx, filepath.Join(ws, "nope")); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("stat of a missing path: %v", err)
	}

	s.MaxRead = 2
	if _, _, err := s.ReadFile(ctx, p); !errors.Is(err, wire.ErrTooLarge) || !strings.Contains(err.Error(), "larger than 2 bytes") {
		t.Errorf("read over MaxRead: %v, want ErrTooLarge", err)
	}
	if err := s.DeleteFile(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("deleted file still there: %v", err)
	}
}
