package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// errStale is a restore's FlagKeep entry whose file changed since the scan
// the host planned it from: the host sends the content and tries again.
var errStale = errors.New("a file changed since the scan the restore was planned from")

type dirFD struct {
	path string
	fd   int
}

// applier puts a restore stream's entries in place under its roots,
// through directory descriptors opened without following symlinks.
type applier struct {
	roots   []string // relative
	base    table    // the scan FlagKeep entries were planned from
	skip    map[string]bool
	chown   bool
	stack   []dirFD
	want    map[string]bool
	next    table // what each entry is on disk once put: the next scan's base
	dirs    []Entry
	written int
	removed int
	bytes   int64
	tmpN    int
}

func (a *applier) close() {
	for _, d := range a.stack {
		unix.Close(d.fd)
	}
	a.stack = nil
}

// dir returns a descriptor of directory p (relative), opening what is
// missing from the stack of open ones.
func (a *applier) dir(p string) (int, error) {
	for len(a.stack) > 0 {
		top := a.stack[len(a.stack)-1]
		if Under(p, top.path) {
			break
		}
		unix.Close(top.fd)
		a.stack = a.stack[:len(a.stack)-1]
	}
	if len(a.stack) == 0 {
		root := ""
		for _, r := range a.roots {
			if Under(p, r) {
				root = r
			}
		}
		if root == "" {
			return -1, fmt.Errorf("%q is under none of the restore's roots: %w", p, ErrInvalid)
		}
		fd, err := openDir("/" + root)
		if err != nil {
			return -1, err
		}
		a.stack = append(a.stack, dirFD{root, fd})
	}
	for {
		top := a.stack[len(a.stack)-1]
		if top.path == p {
			return top.fd, nil
		}
		rest := strings.TrimPrefix(p, top.path+"/")
		c, _, _ := strings.Cut(rest, "/")
		fd, err := unix.Openat(top.fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("opening /%s/%s: %w", top.path, c, err)
		}
		a.stack = append(a.stack, dirFD{top.path + "/" + c, fd})
	}
}

func isRoot(roots []string, p string) bool {
	for _, r := range roots {
		if r == p {
			return true
		}
	}
	return false
}

// put applies one entry; content is read when flag is FlagContent.
func (a *applier) put(e Entry, flag byte, content io.Reader) error {
	under := false
	for _, r := range a.roots {
		under = under || Under(e.Path, r)
	}
	if !under || a.skip[e.Path] {
		return fmt.Errorf("entry %q is under none of the restore's roots: %w", e.Path, ErrInvalid)
	}
	a.want[e.Path] = true
	if isRoot(a.roots, e.Path) {
		if e.Type != TypeDir {
			return fmt.Errorf("root %q must be a directory: %w", e.Path, ErrInvalid)
		}
		a.dirs = append(a.dirs, e)
		return nil
	}
	pfd, err := a.dir(path.Dir(e.Path))
	if err != nil {
		return err
	}
	name := path.Base(e.Path)
	var cur unix.Stat_t
	exists := unix.Fstatat(pfd, name, &cur, unix.AT_SYMLINK_NOFOLLOW) == nil
	curType := byte(0)
	if exists {
		curType = keyOf(&cur, "").typ
	}
	switch e.Type {
	case TypeDir:
		if curType == TypeDir {
			if cur.Mode&0o700 != 0o700 {
				_ = a.chmod(pfd, name, cur.Mode&0o7777|0o700)
			}
		} else {
			if exists {
				if err := a.removeAt(pfd, name); err != nil {
					return err
				}
			}
			if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
				return fmt.Errorf("mkdir /%s: %w", e.Path, err)
			}
			a.written++
		}
		a.dirs = append(a.dirs, e)
		return nil
	case TypeSymlink:
		keep := false
		if curType == TypeSymlink {
			buf := make([]byte, MaxPath+1)
			n, err := unix.Readlinkat(pfd, name, buf)
			keep = err == nil && string(buf[:n]) == e.Link
		}
		if !keep {
			if exists {
				if err := a.removeAt(pfd, name); err != nil {
					return err
				}
			}
			if err := unix.Symlinkat(e.Link, pfd, name); err != nil {
				return fmt.Errorf("symlink /%s: %w", e.Path, err)
			}
			a.written++
		}
		if err := a.meta(pfd, name, e, false); err != nil {
			return err
		}
		a.record(pfd, name, e.Path, e.Link)
		return nil
	}
	// A file.
	if flag == FlagKeep {
		k, ok := a.base[e.Path]
		if curType != TypeFile || !ok || k != keyOf(&cur, "") {
			return fmt.Errorf("/%s: %w", e.Path, errStale)
		}
		if cur.Mode&0o7777 == e.Mode && (!a.chown || int(cur.Uid) == e.UID && int(cur.Gid) == e.GID) && cur.Mtim.Nano() == e.Mtime {
			a.next[e.Path] = k
			return nil
		}
		if err := a.meta(pfd, name, e, true); err != nil {
			return err
		}
		a.record(pfd, name, e.Path, "")
		return nil
	}
	if flag != FlagContent {
		return fmt.Errorf("file %q comes without content: %w", e.Path, ErrInvalid)
	}
	a.tmpN++
	tmp := ".limbs-restore-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(a.tmpN)
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("creating a file in /%s: %w", path.Dir(e.Path), err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	n, err := io.Copy(f, content)
	if err == nil && n != e.Size {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = f.Chmod(os.FileMode(e.Mode&0o777) | modeBits(e.Mode))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && curType == TypeDir {
		err = a.removeAt(pfd, name)
	}
	if err == nil {
		err = unix.Renameat(pfd, tmp, pfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(pfd, tmp, 0)
		return fmt.Errorf("writing /%s: %w", e.Path, err)
	}
	a.written++
	a.bytes += n
	if err := a.meta(pfd, name, e, false); err != nil {
		return err
	}
	a.record(pfd, name, e.Path, "")
	return nil
}

// record notes name's stat in pfd as p's in the next table.
func (a *applier) record(pfd int, name, p, link string) {
	var st unix.Stat_t
	if unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		a.next[p] = keyOf(&st, link)
	}
}

// modeBits turns the set-id and sticky bits into os.FileMode's.
func modeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// meta sets mode (not of a symlink), mtime and owner of name in pfd, in
// that order: limbsd in a Docker sandbox has CAP_CHOWN but not
// CAP_FOWNER, so it may change the mode and times of a file only while
// the file is its own; a file of the agent's is taken for the moment.
func (a *applier) meta(pfd int, name string, e Entry, mode bool) error {
	set := func() error {
		if mode && e.Type != TypeSymlink {
			if err := a.chmod(pfd, name, e.Mode); err != nil {
				return fmt.Errorf("chmod /%s: %w", e.Path, err)
			}
		}
		return a.times(pfd, name, e)
	}
	err := set()
	if errors.Is(err, unix.EPERM) && a.chown {
		if unix.Fchownat(pfd, name, os.Geteuid(), os.Getegid(), unix.AT_SYMLINK_NOFOLLOW) == nil {
			err = set()
		}
	}
	if err != nil {
		return err
	}
	if a.chown {
		if err := unix.Fchownat(pfd, name, e.UID, e.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown /%s: %w", e.Path, err)
		}
	}
	return nil
}

func (a *applier) times(pfd int, name string, e Entry) error {
	ts := unix.NsecToTimespec(e.Mtime)
	if err := unix.UtimesNanoAt(pfd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting the mtime of /%s: %w", e.Path, err)
	}
	return nil
}

// chmod changes the mode of name in pfd, never through a symlink: the
// inode is opened with O_PATH|O_NOFOLLOW and changed through its
// descriptor (fchmodat cannot refuse links on every kernel).
func (a *applier) chmod(pfd int, name string, mode uint32) error {
	fd, err := unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
}

// removeAt removes name in pfd and everything under it, never following
// a symlink.
func (a *applier) removeAt(pfd int, name string) error {
	err := unix.Unlinkat(pfd, name, 0)
	if err == nil {
		a.removed++
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("removing %s: %w", name, err)
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("removing %s: %w", name, err)
	}
	_ = a.chmod(pfd, name, 0o700)
	names, err := readNames(fd)
	if err == nil {
		for _, n := range names {
			if err = a.removeAt(fd, n); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil {
		return fmt.Errorf("removing directory %s: %w", name, err)
	}
	a.removed++
	return nil
}

// prune removes everything under the roots that the restore did not name.
func (a *applier) prune() error {
	a.close()
	for _, r := range a.roots {
		fd, err := openDir("/" + r)
		if err != nil {
			return err
		}
		err = a.pruneDir(fd, r, 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) pruneDir(fd int, rel string, depth int) error {
	if depth > 256 {
		return fmt.Errorf("/%s: directories nested deeper than 256", rel)
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dup), rel)
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, de := range des {
		n := de.Name()
		p := rel + "/" + n
		if a.skip[p] {
			continue
		}
		if !a.want[p] {
			if err := a.removeAt(fd, n); err != nil {
				return err
			}
			continue
		}
		if !de.IsDir() {
			continue
		}
		cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = a.pruneDir(cfd, p, depth+1)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// finish sets the directories' owners, modes and mtimes, children first,
// once nothing is written in them any more.
func (a *applier) finish() error {
	defer a.close()
	for i := len(a.dirs) - 1; i >= 0; i-- {
		e := a.dirs[i]
		if isRoot(a.roots, e.Path) {
			a.close()
			fd, err := openDir(path.Dir("/" + e.Path))
			if err != nil {
				return err
			}
			err = a.meta(fd, path.Base(e.Path), e, true)
			a.record(fd, path.Base(e.Path), e.Path, "")
			unix.Close(fd)
			if err != nil {
				return err
			}
			continue
		}
		pfd, err := a.dir(path.Dir(e.Path))
		if err != nil {
			return err
		}
		if err := a.meta(pfd, path.Base(e.Path), e, true); err != nil {
			return err
		}
		a.record(pfd, path.Base(e.Path), e.Path, "")
	}
	return nil
}
