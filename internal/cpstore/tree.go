package cpstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/checkpoint"
)

// Trees: a fork does not copy a checkpoint's files into its workspace. The
// checkpoint is written out once, as a plain directory tree the store
// alone can reach (trees/SANDBOX.CHECKPOINT, under the store's 0700
// directory), and every fork's workspace is an overlay whose read-only
// lower layer is that tree: the forks share its blocks until they write,
// and nothing they do reaches it (a write is a copy-up into the fork's own
// upper layer). A tree is never changed once built; it is removed when its
// checkpoint is gone and no sandbox uses it (SweepTrees).

// treeName is a tree's directory name: SANDBOX.CHECKPOINT.
func treeName(sb, cp string) string { return sb + "." + cp }

// TreeDir is where the tree of checkpoint cp of sandbox sb is (or would be).
func (s *Store) TreeDir(sb, cp string) string {
	return filepath.Join(s.dir, "trees", treeName(sb, cp))
}

// Tree returns the directory of m's tree, building it if needed, and the
// bytes it wrote (0 when the tree existed). Only a checkpoint of one root
// has a tree; it needs root, to give every path its owner.
func (s *Store) Tree(m *Manifest) (string, int64, error) {
	if len(m.Meta.Roots) != 1 {
		return "", 0, fmt.Errorf("checkpoint %s holds %d paths: only a checkpoint of one path can be shared by forks", m.Meta.ID, len(m.Meta.Roots))
	}
	if !validID(m.Meta.Sandbox, "sb_") || !validID(m.Meta.ID, "cp_") {
		return "", 0, fmt.Errorf("checkpoint %s/%s: not a stored checkpoint's ids", m.Meta.Sandbox, m.Meta.ID)
	}
	dst := s.TreeDir(m.Meta.Sandbox, m.Meta.ID)
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	s.touchTree(treeName(m.Meta.Sandbox, m.Meta.ID))
	if fi, err := os.Lstat(dst); err == nil && fi.IsDir() {
		return dst, 0, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", 0, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), "tree")
	if err != nil {
		return "", 0, err
	}
	n, err := s.writeTree(m, filepath.Join(tmp, "t"))
	if err == nil {
		err = os.Rename(filepath.Join(tmp, "t"), dst)
	}
	os.RemoveAll(tmp)
	if err != nil {
		return "", 0, fmt.Errorf("writing checkpoint %s out for forks: %w", m.Meta.ID, err)
	}
	return dst, n, nil
}

// writeTree writes m's entries under dir. The manifest came from the
// sandbox: every entry's parent must be a directory this walk made, so no
// path can lead out of dir or through a link.
func (s *Store) writeTree(m *Manifest, dir string) (int64, error) {
	root := strings.TrimPrefix(m.Meta.Roots[0], "/")
	made := map[string]bool{}
	var dirs, files []treeItem
	var bytes int64
	if len(m.Entries) == 0 || m.Entries[0].Path != root || m.Entries[0].Type != checkpoint.TypeDir {
		return 0, fmt.Errorf("the manifest does not start with its root directory /%s: %w", root, checkpoint.ErrInvalid)
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		var p string
		if e.Path == root {
			p = dir
		} else {
			rel, ok := strings.CutPrefix(e.Path, root+"/")
			parent := filepath.Dir(e.Path)
			_, dup := made[e.Path]
			if !ok || !checkpoint.ValidPath(e.Path) || !made[parent] || dup {
				return bytes, fmt.Errorf("entry /%s is not beneath a directory listed before it: %w", e.Path, checkpoint.ErrInvalid)
			}
			p = filepath.Join(dir, rel)
		}
		switch e.Type {
		case checkpoint.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil {
				return bytes, err
			}
			made[e.Path] = true
			dirs = append(dirs, treeItem{p, e})
		case checkpoint.TypeSymlink:
			made[e.Path] = false // a path, not a directory to make paths in
			if err := os.Symlink(e.Link, p); err != nil {
				return bytes, err
			}
			if err := os.Lchown(p, e.UID, e.GID); err != nil {
				return bytes, err
			}
			if err := setMtime(p, e.Mtime); err != nil {
				return bytes, err
			}
		case checkpoint.TypeFile:
			made[e.Path] = false
			files = append(files, treeItem{p, e})
		default:
			return bytes, fmt.Errorf("entry /%s has type %q: %w", e.Path, e.Type, checkpoint.ErrInvalid)
		}
	}
	// The files, by a few writers at once: each is a handful of system
	// calls, which the file system runs side by side.
	n, err := s.writeFiles(files)
	bytes += n
	if err != nil {
		return bytes, err
	}
	// Directories last, deepest first: making their children moved their
	// mtimes.
	for i := len(dirs) - 1; i >= 0; i-- {
		p, e := dirs[i].path, dirs[i].e
		if err := os.Lchown(p, e.UID, e.GID); err != nil {
			return bytes, err
		}
		if err := os.Chmod(p, os.FileMode(e.Mode&0o777)|modeBits(e.Mode)); err != nil {
			return bytes, err
		}
		if err := setMtime(p, e.Mtime); err != nil {
			return bytes, err
		}
	}
	return bytes, nil
}

// treeItem is a path of a tree being written and its entry.
type treeItem struct {
	path string
	e    *checkpoint.Entry
}

// treeWriters is how many files writeFiles writes at once.
const treeWriters = 2

// writeFiles writes the files of a tree (a path and its entry each), a
// directory's files by one writer (writers in one directory wait on its
// lock); on an error the rest are left unwritten.
func (s *Store) writeFiles(files []treeItem) (int64, error) {
	var groups [][]treeItem
	for i := 0; i < len(files); {
		j, dir := i+1, filepath.Dir(files[i].path)
		for j < len(files) && filepath.Dir(files[j].path) == dir {
			j++
		}
		groups = append(groups, files[i:j])
		i = j
	}
	var (
		mu    sync.Mutex
		next  int
		total int64
		first error
	)
	take := func() ([]treeItem, bool) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil || next == len(groups) {
			return nil, false
		}
		next++
		return groups[next-1], true
	}
	var wg sync.WaitGroup
	for range min(treeWriters, len(groups)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				g, ok := take()
				if !ok {
					return
				}
				for _, f := range g {
					n, err := s.writeFile(f.path, f.e)
					mu.Lock()
					total += n
					if err != nil && first == nil {
						first = err
					}
					failed := first != nil
					mu.Unlock()
					if failed {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return total, first
}

func (s *Store) writeFile(p string, e *checkpoint.Entry) (int64, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, err
	}
	var n int64
	if e.Size > 0 {
		b, err := s.OpenBlob(e.Hash)
		if err != nil {
			f.Close()
			return 0, err
		}
		n, err = io.Copy(f, b)
		b.Close()
		if err == nil && n != e.Size {
			err = fmt.Errorf("blob %s holds %d bytes, not %d: the store is damaged; delete the checkpoint", e.Hash, n, e.Size)
		}
		if err != nil {
			f.Close()
			return n, err
		}
	}
	// The owner first: chown clears the setuid and setgid bits.
	err = f.Chown(e.UID, e.GID)
	if err == nil {
		err = f.Chmod(os.FileMode(e.Mode&0o777) | modeBits(e.Mode))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = setMtime(p, e.Mtime)
	}
	return n, err
}

// modeBits are the setuid, setgid and sticky bits of a Unix mode as an
// os.FileMode.
func modeBits(mode uint32) os.FileMode {
	var m os.FileMode
	if mode&unix.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}

func setMtime(p string, mtime int64) error {
	ts := unix.NsecToTimespec(mtime)
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// TreeIdle is how long a tree no sandbox uses is kept for the next fork
// of its checkpoint (which would write it again).
const TreeIdle = 10 * time.Minute

// touchTree records that the tree name was asked for now, in
// trees-used/NAME (not in trees/: a tree is never changed once built).
func (s *Store) touchTree(name string) {
	d := filepath.Join(s.dir, "trees-used")
	if os.MkdirAll(d, 0o700) == nil {
		_ = os.WriteFile(filepath.Join(d, name), nil, 0o600)
	}
}

// SweepTrees removes every tree that inUse does not claim (a sandbox's
// workspace has it as its lower layer) and whose checkpoint is gone or
// that no fork asked for within TreeIdle (a tree nothing uses is a full
// copy of its checkpoint kept for nothing), and what a Tree cut short
// by a crash left in tmp/.
func (s *Store) SweepTrees(inUse func(name string) bool) error {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	var errs []error
	// Trees half-written by a limbs serve that died meanwhile: with
	// treeMu held, Tree writes none now.
	half, _ := filepath.Glob(filepath.Join(s.dir, "tmp", "tree*"))
	for _, d := range half {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	des, err := os.ReadDir(filepath.Join(s.dir, "trees"))
	if errors.Is(err, os.ErrNotExist) {
		return errors.Join(errs...)
	} else if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, de := range des {
		sb, cp, ok := strings.Cut(de.Name(), ".")
		dir := filepath.Join(s.dir, "trees", de.Name())
		used := filepath.Join(s.dir, "trees-used", de.Name())
		if ok {
			if p, err := s.path(sb, cp); err == nil {
				if _, err := os.Lstat(p); err == nil {
					if fi, err := os.Lstat(used); err == nil && time.Since(fi.ModTime()) < TreeIdle {
						continue
					}
				}
			}
		}
		if inUse(de.Name()) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(used)
	}
	return errors.Join(errs...)
}
