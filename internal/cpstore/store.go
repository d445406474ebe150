// Package cpstore is the control plane's checkpoint store: content-
// addressed blobs (sha256) and one manifest per checkpoint, in limbs
// serve's state directory, outside every sandbox. It reads the scan
// streams limbsd sends (package checkpoint) as hostile input, computes
// every hash itself, and diffs manifests.
//
// It must never read or walk a sandbox's files itself, never trust a hash
// or a path it did not check, and never delete a blob a manifest names.
//
// Concurrency: Store.mu serialises writes of manifests and the blob
// garbage collection; blob writes are atomic renames and need no lock.
package cpstore

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/checkpoint"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Meta is a manifest's header.
type Meta struct {
	wire.Checkpoint
	Roots    []string            `json:"roots"`
	Scan     string              `json:"scan,omitempty"` // limbsd's scan this manifest matches
	Sessions []wire.SessionState `json:"session_states,omitempty"`
	// Spec is the create of the sandbox it was taken of, for forks.
	Spec wire.CreateSandbox `json:"spec"`
}

// Manifest is a checkpoint: its header and its entries, sorted by path.
type Manifest struct {
	Meta    Meta
	Entries []checkpoint.Entry
}

// Index maps each path to its entry.
func (m *Manifest) Index() map[string]*checkpoint.Entry {
	ix := make(map[string]*checkpoint.Entry, len(m.Entries))
	for i := range m.Entries {
		ix[m.Entries[i].Path] = &m.Entries[i]
	}
	return ix
}

// Store is the checkpoint store under one directory.
type Store struct {
	dir    string
	mu     sync.Mutex
	treeMu sync.Mutex // guards trees/ (tree.go)
}

// Open opens (creating) the store in dir.
func Open(dir string) (*Store, error) {
	for _, d := range []string{dir, filepath.Join(dir, "blobs"), filepath.Join(dir, "sandboxes"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("checkpoint store: %w; pass a writable --state-dir", err)
		}
	}
	return &Store{dir: dir}, nil
}

func validID(id, prefix string) bool {
	if !strings.HasPrefix(id, prefix) || len(id) > 64 || len(id) <= len(prefix) {
		return false
	}
	for _, c := range id[len(prefix):] {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func (s *Store) sbDir(sb string) (string, error) {
	if !validID(sb, "sb_") {
		return "", fmt.Errorf("sandbox id %q: %w", sb, wire.ErrNotFound)
	}
	return filepath.Join(s.dir, "sandboxes", sb), nil
}

func (s *Store) path(sb, cp string) (string, error) {
	d, err := s.sbDir(sb)
	if err != nil {
		return "", err
	}
	if cp != "head" && !validID(cp, "cp_") {
		return "", fmt.Errorf("checkpoint %q: ids look like cp_...; list them with GET /v1/sandboxes/%s/checkpoints: %w", cp, sb, wire.ErrNotFound)
	}
	return filepath.Join(d, cp+".ckpt"), nil
}

// BlobPath is where the blob of hash lives.
func (s *Store) BlobPath(hash string) string {
	return filepath.Join(s.dir, "blobs", hash[:2], hash)
}

// OpenBlob opens the blob of hash.
func (s *Store) OpenBlob(hash string) (*os.File, error) {
	if len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		// A file the sandbox listed without sending its content.
		return nil, fmt.Errorf("the checkpoint holds a file without content (hash %q): the sandbox's scan left it out; delete the checkpoint: %w", hash, checkpoint.ErrInvalid)
	}
	f, err := os.Open(s.BlobPath(hash))
	if err != nil {
		return nil, fmt.Errorf("blob %s of the checkpoint store is missing (%v); the checkpoint cannot be restored: delete it", hash, err)
	}
	return f, nil
}

// putBlob stores r (size bytes), returning its hash and whether it was new.
func (s *Store) putBlob(r io.Reader, size int64, buf []byte) (string, bool, error) {
	h := sha256.New()
	if size <= int64(len(buf)) {
		b := buf[:size]
		if _, err := io.ReadFull(r, b); err != nil {
			return "", false, fmt.Errorf("checkpoint stream cut in a file's content: %w", err)
		}
		h.Write(b)
		sum := hex.EncodeToString(h.Sum(nil))
		if _, err := os.Lstat(s.BlobPath(sum)); err == nil {
			return sum, false, nil
		}
		tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob")
		if err != nil {
			return "", false, err
		}
		_, err = tmp.Write(b)
		return s.commitBlob(tmp, sum, err)
	}
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob")
	if err != nil {
		return "", false, err
	}
	n, err := io.CopyBuffer(io.MultiWriter(tmp, h), r, buf)
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	return s.commitBlob(tmp, hex.EncodeToString(h.Sum(nil)), err)
}

func (s *Store) commitBlob(tmp *os.File, sum string, err error) (string, bool, error) {
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", false, err
	}
	dst := s.BlobPath(sum)
	if _, err := os.Lstat(dst); err == nil {
		os.Remove(tmp.Name())
		return sum, false, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		os.Remove(tmp.Name())
		return "", false, err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return "", false, err
	}
	return sum, true, nil
}

// Save writes m as checkpoint m.Meta.ID (or "head") of its sandbox.
func (s *Store) Save(m *Manifest, as string) error {
	p, err := s.path(m.Meta.Sandbox, as)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	js, err := json.Marshal(m.Meta)
	if err != nil {
		return err
	}
	b := make([]byte, 0, 64+len(js)+len(m.Entries)*96)
	b = checkpoint.AppendJSON(b, checkpoint.KindHeader, js)
	for i := range m.Entries {
		b = checkpoint.AppendEntry(b, &m.Entries[i], checkpoint.FlagMeta)
	}
	b = checkpoint.AppendJSON(b, checkpoint.KindEnd, []byte("{}"))
	s.mu.Lock()
	defer s.mu.Unlock()
	tmp, err := os.CreateTemp(filepath.Dir(p), ".ckpt")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil && as != "head" {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("saving checkpoint %s: %w", as, err)
	}
	return nil
}

// Load reads checkpoint cp (or "head") of sandbox sb.
func (s *Store) Load(sb, cp string) (*Manifest, error) {
	p, err := s.path(sb, cp)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %s has no checkpoint %s; list them with GET /v1/sandboxes/%s/checkpoints: %w", sb, cp, sb, wire.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readManifest(f, false)
}

func readManifest(r io.Reader, metaOnly bool) (*Manifest, error) {
	rd := checkpoint.NewReader(r, checkpoint.DefaultLimits)
	rec, err := rd.Next()
	if err != nil || rec.Kind != checkpoint.KindHeader {
		return nil, fmt.Errorf("unreadable checkpoint manifest: %v", err)
	}
	m := &Manifest{}
	if err := json.Unmarshal(rec.JSON, &m.Meta); err != nil {
		return nil, fmt.Errorf("unreadable checkpoint manifest: %v", err)
	}
	if metaOnly {
		return m, nil
	}
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return m, nil
		}
		if err != nil {
			return nil, fmt.Errorf("unreadable checkpoint manifest: %v", err)
		}
		if rec.Kind == checkpoint.KindEntry {
			m.Entries = append(m.Entries, rec.Entry)
		}
	}
}

// List returns sandbox sb's checkpoints, oldest first.
func (s *Store) List(sb string) ([]Meta, error) {
	d, err := s.sbDir(sb)
	if err != nil {
		return nil, err
	}
	des, err := os.ReadDir(d)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	out := []Meta{}
	for _, de := range des {
		id, ok := strings.CutSuffix(de.Name(), ".ckpt")
		if !ok || !validID(id, "cp_") {
			continue
		}
		m, err := s.meta(filepath.Join(d, de.Name()))
		if err != nil {
			continue
		}
		out = append(out, m.Meta)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func (s *Store) meta(p string) (*Manifest, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readManifest(bufio.NewReaderSize(f, 64<<10), true)
}

// Delete removes checkpoint cp of sb and the blobs nothing else names.
func (s *Store) Delete(sb, cp string) error {
	p, err := s.path(sb, cp)
	if err != nil {
		return err
	}
	if err := os.Remove(p); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandbox %s has no checkpoint %s: %w", sb, cp, wire.ErrNotFound)
	} else if err != nil {
		return err
	}
	return s.GC()
}

// Expire deletes the checkpoints whose expiry is past.
func (s *Store) Expire(now time.Time) (int, error) {
	des, err := os.ReadDir(filepath.Join(s.dir, "sandboxes"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, de := range des {
		list, err := s.List(de.Name())
		if err != nil {
			continue
		}
		for _, m := range list {
			if m.ExpiresAt != nil && m.ExpiresAt.Before(now) {
				if p, err := s.path(m.Sandbox, m.ID); err == nil && os.Remove(p) == nil {
					n++
				}
			}
		}
	}
	if n > 0 {
		return n, s.GC()
	}
	return 0, nil
}

// GC deletes every blob no manifest names.
func (s *Store) GC() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := map[string]bool{}
	sbs, err := os.ReadDir(filepath.Join(s.dir, "sandboxes"))
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		d := filepath.Join(s.dir, "sandboxes", sb.Name())
		files, _ := os.ReadDir(d)
		for _, f := range files {
			if !strings.HasSuffix(f.Name(), ".ckpt") {
				continue
			}
			fh, err := os.Open(filepath.Join(d, f.Name()))
			if err != nil {
				return err
			}
			m, err := readManifest(fh, false)
			fh.Close()
			if err != nil {
				return fmt.Errorf("%s/%s: %w; nothing was collected", sb.Name(), f.Name(), err)
			}
			for _, e := range m.Entries {
				if e.Hash != "" {
					live[e.Hash] = true
				}
			}
		}
		if len(files) == 0 {
			os.Remove(d)
		}
	}
	shards, _ := os.ReadDir(filepath.Join(s.dir, "blobs"))
	for _, sh := range shards {
		d := filepath.Join(s.dir, "blobs", sh.Name())
		blobs, _ := os.ReadDir(d)
		for _, b := range blobs {
			if !live[b.Name()] {
				os.Remove(filepath.Join(d, b.Name()))
			}
		}
	}
	return nil
}

// Usage is the bytes the blobs take.
func (s *Store) Usage() int64 {
	var n int64
	_ = filepath.WalkDir(filepath.Join(s.dir, "blobs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// isText reports whether b is text a unified diff can show.
func isText(b []byte) bool {
	return !bytes.ContainsRune(b, 0) && utf8Valid(b)
}

// headRef is a sandbox's head.ref: the manifest matching limbsd's last
// scan of it (a checkpoint's, or "head": a manifest of its own), and that
// scan's id.
type headRef struct {
	Manifest string `json:"manifest"`
	Scan     string `json:"scan"`
}

// SetHead records that sb's limbsd's last scan is scan, with manifest as
// (a checkpoint id, or "head" for one saved with Save(m, "head")).
func (s *Store) SetHead(sb, manifest, scan string) error {
	d, err := s.sbDir(sb)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(headRef{Manifest: manifest, Scan: scan})
	tmp := filepath.Join(d, ".head.ref.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(d, "head.ref"))
}

// Head returns the manifest of sb's last scan with its scan id, or nil.
func (s *Store) Head(sb string) *Manifest {
	d, err := s.sbDir(sb)
	if err != nil {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(d, "head.ref"))
	if err != nil {
		return nil
	}
	var ref headRef
	if json.Unmarshal(b, &ref) != nil || ref.Scan == "" {
		return nil
	}
	m, err := s.Load(sb, ref.Manifest)
	if err != nil {
		return nil
	}
	m.Meta.Scan = ref.Scan
	return m
}

// DropHead forgets sb's last scan.
func (s *Store) DropHead(sb string) {
	if d, err := s.sbDir(sb); err == nil {
		os.Remove(filepath.Join(d, "head.ref"))
		os.Remove(filepath.Join(d, "head.ckpt"))
	}
}
