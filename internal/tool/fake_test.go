package tool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/limbs-dev/limbs/internal/wire"
)

// memFiles is an in-memory Files with the Files API's semantics: etags are
// sha256s, If-Match is checked under the lock, directories exist where
// files are under them (or where made with mkdir).
type memFiles struct {
	mu     sync.Mutex
	files  map[string]memFile
	dirs   map[string]bool
	writes int // successful WriteFile and DeleteFile calls
	// beforeWrite, if set, runs (without the lock) before each WriteFile:
	// a concurrent writer.
	beforeWrite func(p string)
	// failWrite makes the WriteFile of a path fail with that error.
	failWrite map[string]error
}

type memFile struct {
	data []byte
	mode fs.FileMode
}

func newMem(files map[string]string) *memFiles {
	m := &memFiles{files: map[string]memFile{}, dirs: map[string]bool{"/": true}, failWrite: map[string]error{}}
	for p, d := range files {
		m.files[p] = memFile{data: []byte(d), mode: 0o644}
	}
	return m
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (m *memFiles) isDir(p string) bool {
	if m.dirs[p] {
		return true
	}
	pre := strings.TrimSuffix(p, "/") + "/"
	for q := range m.files {
		if strings.HasPrefix(q, pre) {
			return true
		}
	}
	for q := range m.dirs {
		if strings.HasPrefix(q, pre) {
			return true
		}
	}
	return false
}

func (m *memFiles) ReadFile(_ context.Context, p string) ([]byte, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.files[p]; ok {
		return append([]byte(nil), f.data...), sum(f.data), nil
	}
	if m.isDir(p) {
		return nil, "", fmt.Errorf("%s is a directory: %w", p, wire.ErrBadRequest)
	}
	return nil, "", fmt.Errorf("%s: %w", p, wire.ErrNotFound)
}

func (m *memFiles) WriteFile(_ context.Context, p string, data []byte, mode fs.FileMode, ifMatch string) (string, error) {
	if m.beforeWrite != nil {
		m.beforeWrite(p)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failWrite[p]; err != nil {
		return "", err
	}
	if m.isDir(p) {
		return "", fmt.Errorf("%s is a directory: %w", p, wire.ErrBadRequest)
	}
	cur, ok := m.files[p]
	if ifMatch != "" && (!ok || sum(cur.data) != ifMatch) {
		return "", fmt.Errorf("%s changed: %w", p, wire.ErrConflict)
	}
	if mode == 0 {
		mode = 0o644
		if ok {
			mode = cur.mode
		}
	}
	m.files[p] = memFile{data: append([]byte(nil), data...), mode: mode}
	m.writes++
	return sum(data), nil
}

func (m *memFiles) DeleteFile(_ context.Context, p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[p]; !ok {
		return fmt.Errorf("%s: %w", p, wire.ErrNotFound)
	}
	delete(m.files, p)
	m.writes++
	return nil
}

func (m *memFiles) Stat(_ context.Context, p string) (wire.FileEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.files[p]; ok {
		return wire.FileEntry{Path: p, Name: path.Base(p), Type: "file", Size: int64(len(f.data)), Mode: fmt.Sprintf("%04o", uint32(f.mode.Perm()))}, nil
	}
	if m.isDir(p) {
		return wire.FileEntry{Path: p, Name: path.Base(p), Type: "dir", Mode: "0755"}, nil
	}
	return wire.FileEntry{}, fmt.Errorf("%s: %w", p, wire.ErrNotFound)
}

func (m *memFiles) List(_ context.Context, dir string, depth int) ([]wire.FileEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.isDir(dir) {
		return nil, fmt.Errorf("%s: %w", dir, wire.ErrNotFound)
	}
	pre := strings.TrimSuffix(dir, "/") + "/"
	seen := map[string]string{}
	add := func(q, typ string) {
		rel := strings.TrimPrefix(q, pre)
		parts := strings.Split(rel, "/")
		for i := range parts {
			if i >= depth {
				break
			}
			t := "dir"
			if i == len(parts)-1 {
				t = typ
			}
			seen[pre+strings.Join(parts[:i+1], "/")] = t
		}
	}
	for q := range m.files {
		if strings.HasPrefix(q, pre) {
			add(q, "file")
		}
	}
	for q := range m.dirs {
		if strings.HasPrefix(q, pre) {
			add(q, "dir")
		}
	}
	var out []wire.FileEntry
	for q, t := range seen {
		out = append(out, wire.FileEntry{Path: q, Name: path.Base(q), Type: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (m *memFiles) get(p string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[p]
	return string(f.data), ok
}

func (m *memFiles) snapshot() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := map[string]string{}
	for p, f := range m.files {
		s[p] = string(f.data)
	}
	return s
}
