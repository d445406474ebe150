package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// statKey is what tells a scan that a path is as it was: a file whose
// size, mtime, ctime, inode and device are the same has the same content
// (ctime cannot be set back by a program in the sandbox).
type statKey struct {
	typ              byte
	mode             uint32
	uid, gid         uint32
	size, mtime, cti int64
	ino, dev         uint64
	link             string
}

// table is a scan's statKey of every path.
type table map[string]statKey

func keyOf(st *unix.Stat_t, link string) statKey {
	k := statKey{
		mode: st.Mode & 0o7777, uid: st.Uid, gid: st.Gid, size: st.Size,
		mtime: st.Mtim.Nano(), cti: st.Ctim.Nano(), ino: st.Ino, dev: uint64(st.Dev), link: link,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		k.typ = TypeFile
	case unix.S_IFDIR:
		k.typ = TypeDir
		k.size = 0
	case unix.S_IFLNK:
		k.typ = TypeSymlink
	}
	return k
}

func entryOf(p string, k statKey) Entry {
	return Entry{Path: p, Type: k.typ, Mode: k.mode, UID: int(k.uid), GID: int(k.gid), Size: k.size, Mtime: k.mtime, Link: k.link}
}

// openDir opens the absolute directory abs without following a symlink
// in any of its components.
func openDir(abs string) (int, error) {
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(strings.Trim(abs, "/"), "/") {
		if c == "" {
			continue
		}
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("opening %s (at %q; a symlink there is refused): %w", abs, c, err)
		}
		fd = nfd
	}
	return fd, nil
}

// readNames lists the directory fd (which stays open), sorted.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// statWindow is how many names of a directory walk stats at once.
const statWindow = 256

// statAll lstats names of the directory fd. The frozen part of a
// checkpoint after a small change is this: one fstatat per path, a few
// microseconds each in a VM, so a large directory is split between the
// CPUs (the sandbox's other processes are stopped and leave them free).
func statAll(fd int, names []string) ([]unix.Stat_t, []error) {
	sts := make([]unix.Stat_t, len(names))
	errs := make([]error, len(names))
	one := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			errs[i] = unix.Fstatat(fd, names[i], &sts[i], unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), 4, len(names)/32)
	if workers < 2 {
		one(0, len(names))
		return sts, errs
	}
	var wg sync.WaitGroup
	chunk := (len(names) + workers - 1) / workers
	for lo := 0; lo < len(names); lo += chunk {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one(lo, min(lo+chunk, len(names)))
		}()
	}
	wg.Wait()
	return sts, errs
}

// scanner walks roots and writes a scan stream.
type scanner struct {
	w       *bufio.Writer
	base    table // nil: send everything
	next    table
	content bool
	skip    map[string]bool // relative paths not to enter
	buf     []byte
	copyBuf []byte
	sent    int64
	files   int
	skipped int
	err     error // the first file that could not be read whole
	// track, when set, is given a watch and the names of every directory
	// walked (track.go).
	track *tracker
	// collect: emit gathers the changes instead of writing them (an
	// incremental scan writes them once it knows all of them); forgot
	// are the paths it took out of next.
	collect bool
	changes []change
	forgot  []string
	listed  int // directories listed
	// mapped are the inodes of the files a process of the sandbox maps
	// shared, with their device: sent whatever their stat says.
	mapped map[uint64]uint64
}

// openRoot opens the scan root abs (openDir) and states it; rel is its
// path as a scan names it. The caller closes fd.
func openRoot(abs string) (rel string, fd int, st unix.Stat_t, err error) {
	rel = strings.TrimPrefix(filepath.Clean(abs), "/")
	if fd, err = openDir(abs); err != nil {
		return rel, -1, st, err
	}
	if err = unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return rel, -1, st, err
	}
	return rel, fd, st, nil
}

func (s *scanner) scanRoot(abs string) error {
	rel, fd, st, err := openRoot(abs)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := s.emit(rel, keyOf(&st, ""), -1, ""); err != nil {
		return err
	}
	return s.walk(fd, rel, 0)
}

func (s *scanner) walk(fd int, rel string, depth int) error {
	if depth > 256 {
		return fmt.Errorf("%s: directories nested deeper than 256", rel)
	}
	if s.track != nil {
		s.track.watch(fd, rel)
	}
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("listing /%s: %w", rel, err)
	}
	s.listed++
	if s.track != nil {
		s.track.names[rel] = names
	}
	// Stat a window of names at a time: a directory of millions of
	// entries must not cost limbsd a Stat_t for each at once.
	for lo := 0; lo < len(names); lo += statWindow {
		win := names[lo:min(lo+statWindow, len(names))]
		sts, errs := statAll(fd, win)
		for i, name := range win {
			p := rel + "/" + name
			if s.skip[p] {
				continue
			}
			if err := errs[i]; err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("stat /%s: %w", p, err)
			}
			if err := s.one(fd, p, name, &sts[i], depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// one records the path p, named name in the directory fd, and walks it
// when it is a directory.
func (s *scanner) one(fd int, p, name string, st *unix.Stat_t, depth int) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := s.emit(p, keyOf(st, ""), fd, name); err != nil {
			return err
		}
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening /%s: %w", p, err)
		}
		err = s.walk(cfd, p, depth+1)
		unix.Close(cfd)
		return err
	case unix.S_IFREG:
		if s.collect && st.Nlink > 1 && s.track.multi[p] != st.Ino {
			// A new link to a file: its other names changed (ctime,
			// nlink) in directories that had no event. Only a walk
			// finds them.
			return errWalkAll
		}
		if s.track != nil {
			if st.Nlink > 1 {
				s.track.multi[p] = st.Ino
			} else {
				delete(s.track.multi, p)
			}
		}
		return s.emit(p, keyOf(st, ""), fd, name)
	case unix.S_IFLNK:
		buf := make([]byte, MaxPath+1)
		n, err := unix.Readlinkat(fd, name, buf)
		if err != nil || n > MaxPath {
			s.skipped++
			return nil
		}
		return s.emit(p, keyOf(st, string(buf[:n])), fd, name)
	default:
		s.skipped++ // fifos, sockets, devices are not kept
		return nil
	}
}

// emit records p in the next table and writes it when it changed since
// the base; a changed file's content follows when the scan carries it.
func (s *scanner) emit(p string, k statKey, dirfd int, name string) error {
	s.next[p] = k
	if k.typ == TypeFile {
		s.files++
	}
	if s.base != nil {
		// A file mapped shared may have been written through a page that
		// was dirty already, which changes neither mtime nor ctime.
		if old, ok := s.base[p]; ok && old == k && !(k.typ == TypeFile && s.isMapped(k)) {
			return nil
		}
	}
	if s.collect {
		s.changes = append(s.changes, change{path: p, key: k})
		return nil
	}
	return s.write(p, k, dirfd, name)
}

// isMapped: k is a file a process of the sandbox maps shared.
func (s *scanner) isMapped(k statKey) bool {
	dev, ok := s.mapped[k.ino]
	return ok && dev == k.dev
}

// write writes the entry of p, and its content when the scan carries it
// (read as name in the directory dirfd).
func (s *scanner) write(p string, k statKey, dirfd int, name string) error {
	e := entryOf(p, k)
	flag := byte(FlagMeta)
	if k.typ == TypeFile && s.content {
		flag = FlagContent
	}
	s.buf = AppendEntry(s.buf[:0], &e, flag)
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	if flag != FlagContent {
		return nil
	}
	n, err := s.copyFile(dirfd, name, k.size)
	s.sent += n
	if n < k.size {
		// The stream promised Size bytes: keep it parseable, and fail the
		// scan in its trailer.
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		if s.err == nil {
			s.err = fmt.Errorf("reading /%s: %v (was it changed by a process outside the sandbox?)", p, err)
		}
		delete(s.next, p)
		if _, werr := io.CopyN(s.w, zeros{}, k.size-n); werr != nil {
			return werr
		}
	}
	return nil
}

// flush writes what an incremental scan collected: each changed path
// once, as it is in next, then the paths gone.
func (s *scanner) flush() error {
	s.collect = false
	slices.SortStableFunc(s.changes, func(a, b change) int { return strings.Compare(a.path, b.path) })
	dirfd, dir := -1, ""
	defer func() {
		if dirfd >= 0 {
			unix.Close(dirfd)
		}
	}()
	for i, c := range s.changes {
		if i+1 < len(s.changes) && s.changes[i+1].path == c.path {
			continue // listed twice (a directory and its parent): the later one
		}
		k, ok := s.next[c.path]
		if !ok {
			continue // taken out after it was listed
		}
		name := c.path[strings.LastIndexByte(c.path, '/')+1:]
		if k.typ == TypeFile && s.content && k.size > 0 {
			if d := parentOf(c.path); dirfd < 0 || d != dir {
				if dirfd >= 0 {
					unix.Close(dirfd)
				}
				dir = d
				dirfd, _ = openDir("/" + d) // -1 fails the read below, and the scan
			}
		}
		if err := s.write(c.path, k, dirfd, name); err != nil {
			return err
		}
	}
	slices.Sort(s.forgot)
	for i, p := range s.forgot {
		if i > 0 && s.forgot[i-1] == p {
			continue
		}
		if _, back := s.next[p]; back {
			continue
		}
		if _, was := s.base[p]; !was {
			continue
		}
		if _, err := s.w.Write(AppendRemoved(nil, p)); err != nil {
			return err
		}
	}
	return nil
}

func (s *scanner) copyFile(dirfd int, name string, size int64) (int64, error) {
	if size == 0 {
		return 0, nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if s.copyBuf == nil {
		s.copyBuf = make([]byte, 256<<10)
	}
	n, err := io.CopyBuffer(s.w, io.LimitReader(struct{ io.Reader }{f}, size), s.copyBuf)
	runtime.KeepAlive(f)
	return n, err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
