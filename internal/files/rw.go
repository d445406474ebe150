package files

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"

	"github.com/limbs-dev/limbs/internal/wire"
)

// HeaderSHA256 carries the sha256 of the content a PUT wrote or an edit
// left, so that the caller can pass it as if_match next time.
const HeaderSHA256 = "X-Limbs-Sha256"

// maxListEntries bounds one listing so a deep depth on a huge tree answers
// with an error to narrow it instead of an unbounded body.
const maxListEntries = 100000

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

func (s *Server) serveRead(w http.ResponseWriter, r *http.Request) error {
	p, err := s.queryPath(r)
	if err != nil {
		return err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return statErr(p, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory; list it with GET /v1/files/list or fetch it with GET /v1/files/archive: %w", p, wire.ErrBadRequest)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s); only regular files can be read: %w", p, fi.Mode().Type(), wire.ErrBadRequest)
	}
	f, err := os.Open(p)
	if err != nil {
		return statErr(p, err)
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	// ServeContent streams from the file (sendfile where it can) and gives
	// Range requests for free.
	http.ServeContent(w, r, "", fi.ModTime(), f)
	return nil
}

func parseMode(s string) (os.FileMode, bool, error) {
	if s == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, false, fmt.Errorf("mode %q is not an octal file mode such as 0644 or 755: %w", s, wire.ErrBadRequest)
	}
	return unixMode(uint32(v)), true, nil
}

// unixMode converts permission and set-id bits as written in octal to an
// os.FileMode.
func unixMode(v uint32) os.FileMode {
	m := os.FileMode(v & 0o777)
	if v&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if v&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if v&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

func (s *Server) serveWrite(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p, err := s.queryPath(r)
	if err != nil {
		return err
	}
	mode, haveMode, err := parseMode(q.Get("mode"))
	if err != nil {
		return err
	}
	sum, err := s.writeFile(p, r.Body, mode, haveMode, q.Get("if_match"))
	if err != nil {
		return err
	}
	w.Header().Set(HeaderSHA256, sum)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// writeTarget is where a write to p lands: p itself, or, when p is a
// symlink, the file it points to, so that a link (a dotfile managed
// elsewhere, say) stays a link.
func writeTarget(p string) (string, error) {
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return p, nil
	}
	t, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%s is a symlink whose target cannot be resolved (%v); write to the target path or remove the link first: %w", p, err, wire.ErrBadRequest)
	}
	return t, nil
}

// writeFile streams body into p atomically: a temp file in the same
// directory, fsync, rename. It keeps the mode and ownership of a file it
// replaces; new files take mode 0644 (or mode) and the owner of their
// directory. ifMatch, when set, must equal the current sha256 of p at
// the moment of the rename.
func (s *Server) writeFile(p string, body io.Reader, mode os.FileMode, haveMode bool, ifMatch string) (string, error) {
	target, err := writeTarget(p)
	if err != nil {
		return "", err
	}
	// Refuse before streaming what could be gigabytes into a temp file;
	// commit checks again under the lock.
	if fi, err := os.Stat(target); err == nil && fi.IsDir() {
		return "", fmt.Errorf("%s is a directory; a file cannot replace it: %w", target, wire.ErrBadRequest)
	}
	dir := filepath.Dir(target)
	if err := mkdirAllOwned(dir); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".limbs-*")
	if err != nil {
		return "", statErr(dir, err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), body); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return "", fmt.Errorf("body of %s over %d bytes: %w", p, mbe.Limit, wire.ErrTooLarge)
		}
		return "", fmt.Errorf("writing %s: %v; the upload was cut, nothing was changed: %w", p, err, wire.ErrBadRequest)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("writing %s: fsync: %w", p, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}

	unlock := s.lock(target)
	defer unlock()
	if err := checkIfMatch(target, ifMatch); err != nil {
		return "", err
	}
	if err := s.commit(tmp.Name(), target, mode, haveMode); err != nil {
		return "", err
	}
	committed = true
	return sum, nil
}

// commit gives tmp the mode and owner target should have and renames it
// over target. The caller holds the lock of target.
func (s *Server) commit(tmp, target string, mode os.FileMode, haveMode bool) error {
	uid, gid := -1, -1
	fi, err := os.Stat(target)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%s is a directory; a file cannot replace it: %w", target, wire.ErrBadRequest)
	case err == nil:
		if !haveMode {
			mode = fi.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
		}
		uid, gid = owner(fi)
	default:
		if !haveMode {
			mode = 0o644
		}
		if di, err := os.Stat(filepath.Dir(target)); err == nil {
			uid, gid = owner(di)
		}
	}
	if os.Geteuid() == 0 && uid >= 0 {
		if err := os.Lchown(tmp, uid, gid); err != nil {
			return fmt.Errorf("writing %s: keeping its owner: %w", target, err)
		}
	}
	// After chown, which clears set-id bits.
	if err := os.Chmod(tmp, mode); err != nil {
		return fmt.Errorf("writing %s: mode: %w", target, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		return statErr(target, err)
	}
	syncDir(filepath.Dir(target))
	return nil
}

func owner(fi os.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}

// syncDir makes a rename durable. Failure only weakens durability, so it is
// not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// mkdirAllOwned is os.MkdirAll whose new directories belong to the owner
// of the deepest directory that already existed, so that a daemon running
// as root does not leave root-owned directories in the sandbox user's tree.
func mkdirAllOwned(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory, so nothing can be created under it: %w", dir, wire.ErrBadRequest)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return statErr(dir, err)
	}
	parent := filepath.Dir(dir)
	if parent == dir {
		return statErr(dir, err)
	}
	if err := mkdirAllOwned(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return statErr(dir, err)
	}
	if os.Geteuid() == 0 {
		if pi, err := os.Stat(parent); err == nil {
			uid, gid := owner(pi)
			_ = os.Lchown(dir, uid, gid)
		}
	}
	return nil
}

// fileSHA256 is the hex sha256 of the file at p.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkIfMatch enforces the if_match precondition on p. The caller holds
// the lock of p.
func checkIfMatch(p, ifMatch string) error {
	if ifMatch == "" {
		return nil
	}
	cur, err := fileSHA256(p)
	// The message is for a model as much as for a program: no sentinel
	// suffix, but the sentinel is wrapped all the same.
	if errors.Is(err, os.ErrNotExist) {
		return &editError{msg: fmt.Sprintf("%s was deleted since you read it (if_match %s). Nothing was written; look at the directory again before writing.", p, ifMatch), kind: wire.ErrConflict}
	}
	if err != nil {
		return statErr(p, err)
	}
	if cur != ifMatch {
		return &editError{msg: fmt.Sprintf("%s changed since you read it (its sha256 is now %s, not %s). Nothing was written; read it again and redo your change.", p, cur, ifMatch), kind: wire.ErrConflict}
	}
	return nil
}

func (s *Server) serveDelete(w http.ResponseWriter, r *http.Request) error {
	p, err := s.queryPath(r)
	if err != nil {
		return err
	}
	recursive, err := boolParam(r, "recursive")
	if err != nil {
		return err
	}
	if p == "/" || p == s.opts.Workdir {
		return fmt.Errorf("refusing to delete %s itself; delete what is inside it instead: %w", p, wire.ErrBadRequest)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return statErr(p, err)
	}
	unlock := s.lock(p)
	defer unlock()
	// Lstat above and RemoveAll below never follow a symlink: deleting a
	// link removes the link, never what it points to.
	if fi.IsDir() && recursive {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		if fi.IsDir() && !recursive {
			return fmt.Errorf("%s is a directory that is not empty; pass recursive=true to delete it with everything in it: %w", p, wire.ErrBadRequest)
		}
		return statErr(p, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query parameter %s=%q is not true or false: %w", name, v, wire.ErrBadRequest)
	}
	return b, nil
}

func (s *Server) serveList(w http.ResponseWriter, r *http.Request) error {
	p, err := s.queryPath(r)
	if err != nil {
		return err
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		depth, err = strconv.Atoi(v)
		if err != nil || depth < 1 {
			return fmt.Errorf("depth=%q is not a whole number of at least 1: %w", v, wire.ErrBadRequest)
		}
	}
	entries, err := list(p, depth)
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, wire.FileList{Entries: entries})
	return nil
}

// list returns what is under p, depth levels deep, sorted by path; for a
// file (or a symlink to one) it returns that entry alone. p itself is
// followed when it is a symlink to a directory, since the caller named it;
// symlinks under it are reported as symlinks and never descended into.
func list(p string, depth int) ([]wire.FileEntry, error) {
	fi, err := os.Stat(p)
	if err != nil || !fi.IsDir() {
		li, lerr := os.Lstat(p)
		if lerr != nil {
			return nil, statErr(p, lerr)
		}
		return []wire.FileEntry{entryOf(p, li)}, nil
	}
	entries := []wire.FileEntry{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		des, err := os.ReadDir(dir)
		if err != nil {
			if dir == p {
				return statErr(dir, err)
			}
			return nil // an unreadable subdirectory is listed, not entered
		}
		for _, de := range des {
			fp := filepath.Join(dir, de.Name())
			fi, err := de.Info()
			if err != nil {
				continue // removed while listing
			}
			entries = append(entries, entryOf(fp, fi))
			if len(entries) > maxListEntries {
				return fmt.Errorf("%s holds more than %d entries at depth %d; list with a smaller depth or a deeper path: %w", p, maxListEntries, depth, wire.ErrTooLarge)
			}
			if de.IsDir() && level < depth {
				if err := walk(fp, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	return entries, nil
}

func entryOf(p string, fi fs.FileInfo) wire.FileEntry {
	e := wire.FileEntry{
		Path:  p,
		Name:  filepath.Base(p),
		Type:  "file",
		Size:  fi.Size(),
		Mode:  modeString(fi.Mode()),
		Mtime: fi.ModTime().UTC(),
	}
	switch {
	case fi.IsDir():
		e.Type = "dir"
	case fi.Mode()&os.ModeSymlink != 0:
		e.Type = "symlink"
		e.Target, _ = os.Readlink(p)
	case !fi.Mode().IsRegular():
		// Extension: sockets, fifos and devices are named for what they are.
		e.Type = typeName(fi.Mode())
	}
	return e
}

func typeName(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "fifo"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	default:
		return "other"
	}
}

// modeString is the octal permission and set-id bits, as chmod takes them.
func modeString(m os.FileMode) string {
	v := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}
