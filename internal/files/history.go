package files

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// maxHistory is how many edits of one file undo_edit can revert.
const maxHistory = 10

// history is the editor's per-file undo stack, kept on disk so that it
// survives a daemon restart. Layout, under dir:
//
//	<sha256(path)[:32]>/path        the file's absolute path (for people)
//	<sha256(path)[:32]>/<seq>.prev  content before edit number seq
//	<sha256(path)[:32]>/<seq>.none  the file did not exist before edit seq
//
// The highest seq is the newest edit. Only the editor's goroutine for that
// path (under the server's path lock) touches a file's stack.
type history struct {
	dir string
}

func newHistory(dir string) (*history, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("files: undo history directory %s: %w; pass a writable --state-dir", dir, err)
	}
	return &history{dir: dir}, nil
}

func (h *history) fileDir(path string) string {
	sum := sha256.Sum256([]byte(path))
	return filepath.Join(h.dir, hex.EncodeToString(sum[:16]))
}

// seqs lists the stored edits of dir, oldest first.
func seqs(dir string) []int {
	des, _ := os.ReadDir(dir)
	var out []int
	for _, de := range des {
		name := de.Name()
		ext := filepath.Ext(name)
		if ext != ".prev" && ext != ".none" {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSuffix(name, ext)); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// push records the content of path before an edit; existed=false means
// the edit created the file.
func (h *history) push(path string, prev []byte, existed bool) error {
	dir := h.fileDir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("saving undo history of %s: %w", path, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "path"), []byte(path+"\n"), 0o600); err != nil {
		return fmt.Errorf("saving undo history of %s: %w", path, err)
	}
	ss := seqs(dir)
	next := 1
	if len(ss) > 0 {
		next = ss[len(ss)-1] + 1
	}
	name := filepath.Join(dir, strconv.Itoa(next))
	var err error
	if existed {
		err = writeFileAtomic(name+".prev", prev)
	} else {
		err = writeFileAtomic(name+".none", nil)
	}
	if err != nil {
		return fmt.Errorf("saving undo history of %s: %w", path, err)
	}
	for len(ss)+1 > maxHistory {
		h.removeSeq(dir, ss[0])
		ss = ss[1:]
	}
	return nil
}

func (h *history) removeSeq(dir string, n int) {
	base := filepath.Join(dir, strconv.Itoa(n))
	os.Remove(base + ".prev")
	os.Remove(base + ".none")
}

// errNoHistory means undo_edit has nothing to revert.
var errNoHistory = errors.New("no edit history")

// peek returns the newest recorded state of path without removing it.
func (h *history) peek(path string) (prev []byte, existed bool, seq int, err error) {
	dir := h.fileDir(path)
	ss := seqs(dir)
	if len(ss) == 0 {
		return nil, false, 0, errNoHistory
	}
	n := ss[len(ss)-1]
	base := filepath.Join(dir, strconv.Itoa(n))
	if _, err := os.Stat(base + ".none"); err == nil {
		return nil, false, n, nil
	}
	b, err := os.ReadFile(base + ".prev")
	if err != nil {
		return nil, false, 0, fmt.Errorf("reading undo history of %s: %w", path, err)
	}
	return b, true, n, nil
}

// drop forgets edit seq of path, once it has been undone.
func (h *history) drop(path string, seq int) {
	h.removeSeq(h.fileDir(path), seq)
}

// writeFileAtomic writes a small file of the daemon's own state.
func writeFileAtomic(name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, name)
}
