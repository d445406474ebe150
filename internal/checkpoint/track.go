package checkpoint

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Tracking: a checkpoint after a small change must not stat every path
// of the workspace (one fstatat each, 35 ms for 10,000 files here, all of
// it with the sandbox frozen). So a full scan with content also puts an
// inotify watch on every directory it walks, and the next scan, based on
// it, lists and stats only the directories that had an event since, plus
// the subtrees that are new. The walk stays the ground truth: whenever
// the watches may have missed something the next scan walks everything
// again, and builds new watches.
//
// What inotify does not see, and the answer to each:
//   - A write through a shared writable mmap raises no event. At the scan,
//     with the sandbox frozen, the directories of every file mapped shared
//     and writable (/proc/PID/maps) are listed; a mapping gone since raised
//     IN_CLOSE_WRITE when its file was released.
//   - A write through a hard link in a directory that is not watched raises
//     no event for the watched name. Links cannot cross mounts, so a root
//     is tracked only when it is a whole mount (the workspace volume, a
//     fork's overlay), and the directory of a file with more than one link
//     is always listed.
//   - A full event queue (IN_Q_OVERFLOW), a watch that cannot be added
//     (the watch limit), a directory that is not where its watch says:
//     the next scan walks everything.
//
// Processes outside the sandbox's mount (the host, writing to a bind
// mount's directory through a hard link made there) are not covered; the
// local provider's workspace is a bind mount of a host directory, and a
// host user who hard-links into it from outside and writes through the
// link must take the next checkpoint with a full walk (restart limbsd).

// trackMask is what a watched directory reports: any change of the names
// in it, of their content or metadata, and of itself.
const trackMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_CREATE | unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR

// maxDirty bounds the directories an incremental scan lists: past it a
// full walk is as cheap, and simpler.
const maxDirty = 4096

// errWalkAll tells an incremental scan to give way to a full walk.
var errWalkAll = errors.New("the watches cannot vouch for the last scan")

// tracker knows, from inotify, which directories changed since the scan
// it was built in (or last brought up to date by).
type tracker struct {
	fd     int
	roots  []string            // relative, sorted: the roots of the scans it serves
	scan   string              // the scan id it vouches for changes since
	wdPath map[int32]string    // watch → the directory it was added for
	pathWd map[string]int32    // directory → its watch, while it is there
	names  map[string][]string // directory → its sorted names at the last scan
	multi  map[string]bool     // files with more than one link: always stated
	dirty  map[string]bool     // directories to list at the next scan
	// base is the table the events since the last scan are read against,
	// and seen what they said of each file name (nameBorn...).
	base   table
	seen   map[string]uint8
	broken string // why the next scan must walk everything
	buf    []byte
}

// What the events of one interval said of a file's name.
const (
	// nameBorn: the name is not, or no longer, the file the base has
	// there (made, or moved there, since). It may be a second link to a
	// file under another name, which then changes with no event there.
	nameBorn uint8 = 1 << iota
	// nameWritten: a born name was written (or chmod'ed, touched).
	nameWritten
)

// maxSeen bounds the names one interval's events may name.
const maxSeen = 1 << 16

// mountRoot reports whether the directory fd is the root of a mount.
func mountRoot(fd int) bool {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS, &stx); err != nil {
		return false
	}
	return stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// trackAnyRoot lets tests track a root that is not a mount.
var trackAnyRoot = false

// newTracker returns a tracker for roots, or nil when one of them cannot
// be tracked (not a whole mount) or inotify is not available.
func newTracker(roots []string) *tracker {
	for _, r := range roots {
		fd, err := openDir("/" + r)
		if err != nil {
			return nil
		}
		ok := trackAnyRoot || mountRoot(fd)
		unix.Close(fd)
		if !ok {
			return nil
		}
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	return &tracker{
		fd: fd, roots: slices.Clone(roots), wdPath: map[int32]string{}, pathWd: map[string]int32{},
		names: map[string][]string{}, multi: map[string]bool{}, dirty: map[string]bool{}, seen: map[string]uint8{},
	}
}

func (t *tracker) close() {
	if t != nil && t.fd >= 0 {
		unix.Close(t.fd)
		t.fd = -1
	}
}

// serves reports whether t can tell the changes since scan of roots.
func (t *tracker) serves(roots []string, scan string) bool {
	return t != nil && t.fd >= 0 && t.broken == "" && scan != "" && t.scan == scan && slices.Equal(t.roots, roots)
}

// watch adds the watch of directory rel, open as fd, before it is listed:
// a change after this is an event, one before it is in the listing.
func (t *tracker) watch(fd int, rel string) {
	if t.broken != "" {
		return
	}
	wd, err := unix.InotifyAddWatch(t.fd, "/proc/self/fd/"+strconv.Itoa(fd), trackMask)
	if err != nil {
		t.broken = fmt.Sprintf("watching /%s: %v", rel, err)
		return
	}
	w := int32(wd)
	if old, ok := t.wdPath[w]; ok && old != rel && t.pathWd[old] == w {
		delete(t.pathWd, old) // the same directory, moved: it is here now
	}
	t.wdPath[w] = rel
	t.pathWd[rel] = w
}

// drain reads every event queued and marks the directories they name.
func (t *tracker) drain() {
	if t.buf == nil {
		t.buf = make([]byte, 64<<10)
	}
	for range 1 << 16 {
		n, err := unix.Read(t.fd, t.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			if err != nil && err != unix.EAGAIN {
				t.broken = "reading inotify events: " + err.Error()
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&t.buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			var name string
			if ev.Len > 0 {
				raw := t.buf[off-int(ev.Len) : off]
				if i := bytes.IndexByte(raw, 0); i >= 0 {
					raw = raw[:i]
				}
				name = string(raw)
			}
			t.note(ev.Wd, ev.Mask, name)
		}
	}
	t.broken = "the inotify queue did not empty"
}

func (t *tracker) note(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		t.broken = "the inotify queue overflowed"
		return
	}
	dir, ok := t.wdPath[wd]
	if !ok {
		return
	}
	switch {
	case mask&unix.IN_IGNORED != 0:
		delete(t.wdPath, wd)
		if t.pathWd[dir] == wd {
			delete(t.pathWd, dir)
		}
		return
	case mask&(unix.IN_MOVE_SELF|unix.IN_DELETE_SELF) != 0:
		// It is no longer at dir: until a walk finds it again, no
		// directory there is vouched for by this watch.
		if t.pathWd[dir] == wd {
			delete(t.pathWd, dir)
		}
	}
	t.dirty[dir] = true
	if name != "" && mask&unix.IN_ISDIR == 0 {
		t.noteName(dir+"/"+name, mask)
	}
}

// noteName follows what happened to the file that a name stood for. A
// born name written and then removed may have been a second link to a
// file elsewhere, written with no event in that file's directory: the
// next scan must walk everything. (A name moved away is found where it
// went, which is listed; a name the base has was stated there, and its
// other names, if any, are listed at every scan.)
func (t *tracker) noteName(p string, mask uint32) {
	st, ok := t.seen[p]
	if !ok {
		if k, had := t.base[p]; !had || k.typ != TypeFile {
			st = nameBorn
		}
		if len(t.seen) >= maxSeen {
			t.broken = "too many files changed since the last scan"
			return
		}
	}
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		st = nameBorn
	case mask&(unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_CLOSE_WRITE) != 0:
		if st&nameBorn != 0 {
			st |= nameWritten
		}
	case mask&unix.IN_MOVED_FROM != 0:
		st = nameBorn // what it stood for is where it moved, and listed
	case mask&unix.IN_DELETE != 0:
		if st&nameWritten != 0 {
			t.broken = "/" + p + " was made, written and removed since the last scan: it may have been a link to a file elsewhere"
		}
		st = nameBorn
	}
	t.seen[p] = st
}

// markMaps marks the directory of every file under the roots that a
// process has mapped shared and writable: its writes raise no event.
func (t *tracker) markMaps(pids []int) {
	for _, pid := range pids {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 4096), 1<<16)
		for sc.Scan() {
			// address perms offset dev inode path
			fields := strings.SplitN(sc.Text(), " ", 6)
			if len(fields) < 6 || len(fields[1]) < 4 || fields[1][1] != 'w' || fields[1][3] != 's' {
				continue
			}
			p := strings.TrimLeft(fields[5], " ")
			if !strings.HasPrefix(p, "/") {
				continue
			}
			p = strings.TrimSuffix(p, " (deleted)")
			rel := strings.TrimPrefix(p, "/")
			for _, r := range t.roots {
				if Under(rel, r) && rel != r {
					t.dirty[parentOf(rel)] = true
				}
			}
		}
		f.Close()
	}
}

func parentOf(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

// change is a path an incremental scan found changed, written after the
// listing (the sandbox is frozen all along).
type change struct {
	path string
	key  statKey
}

// incremental brings s.next (a copy of the base) up to date from the
// directories t marked, without writing: s.collect gathers the changes,
// and the caller writes them. errWalkAll means a full walk must be done.
func (s *scanner) incremental(t *tracker, pids []int) error {
	t.base = s.base
	t.drain()
	t.markMaps(pids)
	for p := range t.multi {
		t.dirty[parentOf(p)] = true
	}
	if t.broken != "" {
		return errWalkAll
	}
	if len(t.dirty) > maxDirty {
		return errWalkAll
	}
	dirs := make([]string, 0, len(t.dirty))
	for d := range t.dirty {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs) // parents before their children
	s.collect = true
	s.track = t
	for _, d := range dirs {
		k, ok := s.next[d]
		if !ok || k.typ != TypeDir {
			continue // gone with a parent listed before it
		}
		in := false
		for _, r := range t.roots {
			in = in || Under(d, r)
		}
		if !in {
			continue
		}
		if err := s.relist(d); err != nil {
			return err
		}
	}
	// A born name written and not there now: written through an fd kept
	// after its removal, it may have been a link to a file elsewhere.
	for p, st := range t.seen {
		if k, there := s.next[p]; st&nameWritten != 0 && (!there || k.typ != TypeFile) {
			return errWalkAll
		}
	}
	clear(t.dirty)
	clear(t.seen)
	t.base = nil
	return nil
}

// relist lists the directory rel again: its own key, each name in it, the
// names gone, and the subtrees that are new or not vouched for by a watch.
func (s *scanner) relist(rel string) error {
	t := s.track
	fd, err := openDir("/" + rel)
	if err != nil {
		// In the table but not there: its parent was not marked, so the
		// watches missed something.
		return errWalkAll
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return errWalkAll
	}
	k := keyOf(&st, "")
	if old := s.next[rel]; old.ino != k.ino || old.dev != k.dev {
		return errWalkAll // another directory is there now
	}
	if err := s.emit(rel, k, fd, ""); err != nil {
		return err
	}
	// Watch before listing, as a walk does (a no-op for a watched one).
	t.watch(fd, rel)
	names, err := readNames(fd)
	if err != nil {
		return errWalkAll
	}
	s.listed++
	old := t.names[rel]
	t.names[rel] = names
	for _, name := range old {
		if _, found := slices.BinarySearch(names, name); !found {
			s.forget(rel + "/" + name)
		}
	}
	depth := strings.Count(rel, "/")
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
					s.forget(p)
					continue
				}
				return fmt.Errorf("stat /%s: %w", p, err)
			}
			st := &sts[i]
			prev, had := s.next[p]
			isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
			if had && prev.typ == TypeDir {
				_, watched := t.pathWd[p]
				if !isDir || !watched || prev.ino != st.Ino || prev.dev != uint64(st.Dev) {
					s.forget(p) // a new or unvouched directory, or none
				} else {
					// Its own watch tells whether its names changed.
					if err := s.emit(p, keyOf(st, ""), fd, name); err != nil {
						return err
					}
					continue
				}
			}
			if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 && !t.multi[p] {
				// A new link to a file: its other names changed (ctime,
				// nlink) in directories that had no event. Only a walk
				// finds them.
				return errWalkAll
			}
			if err := s.one(fd, p, name, st, depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// forget removes p, and all under it, from the next table.
func (s *scanner) forget(p string) {
	k, ok := s.next[p]
	if !ok {
		return
	}
	delete(s.next, p)
	delete(s.track.multi, p)
	s.forgot = append(s.forgot, p)
	if k.typ != TypeDir {
		return
	}
	for _, name := range s.track.names[p] {
		s.forget(p + "/" + name)
	}
	delete(s.track.names, p)
}
