package checkpoint

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
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
//   - A write through a shared mapping raises no event, and a read-only
//     one may be made writable (mprotect). At the scan, with the sandbox
//     frozen, the directories of every file a process maps shared
//     (/proc/PID/maps, by device and inode) are listed, and those files
//     are sent whatever their stat says (a write to a page dirty already
//     changes neither mtime nor ctime; this holds for walks too).
//   - A write through a name in a directory no watch covers raises no
//     event a watch sees. Links cannot cross mounts, so a root is tracked
//     only when it is a whole mount (the workspace volume, a fork's
//     overlay), and then the only such directories are new ones: a
//     directory made since the last scan (or moved in unpaired) makes the
//     next scan walk everything. The directory of a file with more than
//     one link is listed at every scan, and a new link makes the scan walk
//     everything (multi-link files are known by path and inode). A name
//     made, written and then removed, renamed over, or written again after
//     its removal may have been a link to a file elsewhere: that walks
//     everything too; a name moved carries what was known of it, and an
//     exchange of two names (RENAME_EXCHANGE) walks everything.
//   - An fd open for writing may have been opened by a name since removed,
//     in a directory since removed: the directories of the files open for
//     writing in a process of the sandbox (each thread's table,
//     /proc/PID/task/TID/fd, by device and inode) are listed.
//   - A full event queue (IN_Q_OVERFLOW), a watch that cannot be added
//     (the watch limit), a directory that is not where its watch says, a
//     process whose maps or fds cannot be read, more than maxProcFds open
//     files or maxMapLines mappings in all: the scan walks everything.
//
// What costs a walk in common use: a temporary file made, written and
// removed (vim's swap file, git's HEAD.lock on a commit) is
// indistinguishable from a link made, written through and removed.
//
// What is left: an fd held where no process table shows it (in flight in
// an SCM_RIGHTS message, or an io_uring's registered files) during a
// scan, opened by a name in a directory since removed, and written
// through after the scan; and a host process writing into a bind-mounted
// workspace through a hard link made outside the mount. Both need intent;
// to bound their effect, the watches serve at most maxScans scans or
// maxAge, after which a scan walks everything and builds them again.

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
	multi  map[string]uint64   // files with more than one link (their inode): always stated
	dirty  map[string]bool     // directories to list at the next scan
	// base is the table the events since the last scan are read against,
	// and seen what they said of each file name (nameBorn...).
	base     table
	seen     map[string]uint8
	fileFrom map[uint32]uint8 // a file's name moved away: what was known of it, by cookie
	dirFrom  map[uint32]bool  // a watched directory moved away, by cookie
	lastTo   string           // the name the last event moved a file to
	broken   string           // why the next scan must walk everything
	buf      []byte
	// made is when the watches were built, scans how many scans they
	// served since: past maxAge or maxScans the next scan walks
	// everything anyway, which bounds how long a change inotify could not
	// see (see the header) stays out of the checkpoints.
	made  time.Time
	scans int
}

const (
	maxAge   = 10 * time.Minute
	maxScans = 100
)

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
		names: map[string][]string{}, multi: map[string]uint64{}, dirty: map[string]bool{}, seen: map[string]uint8{},
		fileFrom: map[uint32]uint8{}, dirFrom: map[uint32]bool{}, made: time.Now(),
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
	return t != nil && t.fd >= 0 && t.broken == "" && scan != "" && t.scan == scan && slices.Equal(t.roots, roots) &&
		t.scans < maxScans && time.Since(t.made) < maxAge
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
			t.note(ev, name)
		}
	}
	t.broken = "the inotify queue did not empty"
}

func (t *tracker) note(ev *unix.InotifyEvent, name string) {
	wd, mask := ev.Wd, ev.Mask
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
	if name == "" || mask&unix.IN_ISDIR != 0 {
		t.lastTo = ""
	}
	if name == "" {
		return
	}
	if mask&unix.IN_ISDIR != 0 {
		switch {
		case mask&unix.IN_CREATE != 0:
			// Nothing watched it between its making and now: a link made,
			// written through and removed in it left no event anywhere.
			t.broken = "a directory was made since the last scan"
		case mask&unix.IN_MOVED_FROM != 0:
			t.dirFrom[ev.Cookie] = true
		case mask&unix.IN_MOVED_TO != 0:
			if !t.dirFrom[ev.Cookie] {
				t.broken = "a directory was moved in from outside the watched tree"
			}
			delete(t.dirFrom, ev.Cookie)
		}
		return
	}
	t.noteName(dir+"/"+name, mask, ev.Cookie)
}

// noteName follows what happened to the file that a name stood for. A
// born name written and then removed may have been a second link to a
// file elsewhere, written with no event in that file's directory: the
// next scan must walk everything. A name moved takes what was known of it
// to where it went (the two events share a cookie). A name the base has
// was stated there, and its other names, if any, are listed at every
// scan.
func (t *tracker) noteName(p string, mask, cookie uint32) {
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
	case mask&unix.IN_CREATE != 0:
		st = nameBorn
	case mask&unix.IN_MOVED_TO != 0:
		if st&nameWritten != 0 {
			// Renamed over: like a removal of what the name stood for.
			t.broken = "/" + p + " was made, written and renamed over since the last scan: it may have been a link to a file elsewhere"
		}
		st = nameBorn | t.fileFrom[cookie]&nameWritten
		delete(t.fileFrom, cookie)
	case mask&(unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_CLOSE_WRITE) != 0:
		if st&nameBorn != 0 {
			st |= nameWritten
		}
	case mask&unix.IN_MOVED_FROM != 0:
		if p == t.lastTo {
			// Moved to and at once from: an exchange of two names
			// (RENAME_EXCHANGE), whose two moves each event tells as if
			// the other had not happened.
			t.broken = "/" + p + " was exchanged with another name"
		}
		t.fileFrom[cookie] = st
		st = nameBorn
	case mask&unix.IN_DELETE != 0:
		if st&nameWritten != 0 {
			t.broken = "/" + p + " was made, written and removed since the last scan: it may have been a link to a file elsewhere"
		}
		st = nameBorn
	}
	t.seen[p] = st
	t.lastTo = ""
	if mask&unix.IN_MOVED_TO != 0 {
		t.lastTo = p
	}
}

// markProcs marks the directories of the files under the roots that a
// process of the sandbox has mapped shared (a write through a mapping
// raises no event, and a read-only one may be made writable by
// mprotect) or open for writing (the fd may have been opened by a name
// since removed, in a directory not watched: its writes reach no watch).
// Files are matched by device and inode against the table, mappings of
// other devices (an overlay shows the layer's) by path. What cannot be
// read breaks the tracking: the next scan walks everything.
func (s *scanner) markProcs(t *tracker, pids []int) {
	devs := map[uint64]bool{}
	for _, r := range t.roots {
		if k, ok := s.next[r]; ok {
			devs[k.dev] = true
		}
	}
	b := &procBudget{}
	inodes, err := mappedFiles(pids, devs, t, b)
	if err != nil {
		t.broken = err.Error()
		return
	}
	s.mapped = maps.Clone(inodes) // the fds below are not mappings
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid)
		// Each thread's table: a thread may have its own (unshare).
		tasks, err := os.ReadDir(dir + "/task")
		if err != nil {
			if !gone(err) {
				t.broken = "listing " + dir + "/task: " + err.Error()
				return
			}
			continue
		}
		for _, task := range tasks {
			tdir := dir + "/task/" + task.Name()
			ents, err := os.ReadDir(tdir + "/fd")
			if err != nil {
				if !gone(err) {
					t.broken = "listing " + tdir + "/fd: " + err.Error()
					return
				}
				continue
			}
			for _, e := range ents {
				if b.fds++; b.fds > maxProcFds {
					t.broken = "too many open files in the sandbox to check"
					return
				}
				var st unix.Stat_t
				if unix.Stat(tdir+"/fd/"+e.Name(), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || !devs[uint64(st.Dev)] {
					continue
				}
				info, err := os.ReadFile(tdir + "/fdinfo/" + e.Name())
				if err != nil {
					continue // closed since
				}
				if writable(info) {
					inodes[st.Ino] = uint64(st.Dev)
				}
			}
		}
	}
	if len(inodes) == 0 {
		return
	}
	for p, k := range s.next {
		if dev, ok := inodes[k.ino]; ok && k.typ == TypeFile && dev == k.dev {
			t.dirty[parentOf(p)] = true
		}
	}
}

// Bounds of one scan's look at the sandbox's processes, all of it frozen:
// past them the scan walks everything.
const (
	maxProcFds  = 1 << 14
	maxMapLines = 1 << 17
)

type procBudget struct{ fds, lines int }

// mappedFiles returns the inodes (with their device) of the files on
// devs that a process of pids maps shared; with t, the directories of
// mappings of other devices under t's roots (an overlay shows the
// layer's) are marked by path.
func mappedFiles(pids []int, devs map[uint64]bool, t *tracker, b *procBudget) (map[uint64]uint64, error) {
	inodes := map[uint64]uint64{}
	for _, pid := range pids {
		if err := markMaps("/proc/"+strconv.Itoa(pid)+"/maps", devs, inodes, t, b); err != nil {
			return nil, err
		}
	}
	return inodes, nil
}

func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}

// writable reads an fdinfo's flags (octal): opened for writing?
func writable(info []byte) bool {
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			f, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err != nil || f&unix.O_ACCMODE != unix.O_RDONLY
		}
	}
	return true
}

// markMaps adds the inodes of the shared file mappings in the maps file
// at path to inodes, and (with t) marks by path those of other devices.
func markMaps(path string, devs map[uint64]bool, inodes map[uint64]uint64, t *tracker, b *procBudget) error {
	f, err := os.Open(path)
	if err != nil {
		if gone(err) {
			return nil
		}
		return fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 8192)
	for {
		if b.lines++; b.lines > maxMapLines {
			return fmt.Errorf("too many mappings in the sandbox to check")
		}
		chunk, err := br.ReadSlice('\n')
		// address perms offset dev inode path: a shared one has 's' last
		// in perms, and only those are taken apart.
		sp := bytes.IndexByte(chunk, ' ')
		shared := sp >= 0 && len(chunk) > sp+4 && chunk[sp+4] == 's'
		line := ""
		if shared {
			line = string(chunk) // ReadSlice's slice is the reader's buffer
		}
		long := false
		for err == bufio.ErrBufferFull {
			long = true
			_, err = br.ReadSlice('\n') // a path past the buffer: only its start counts
		}
		if err != nil && err != io.EOF {
			if gone(err) {
				return nil
			}
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if shared {
			if err := markMapLine(path, line, long, devs, inodes, t); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

func markMapLine(path, line string, long bool, devs map[uint64]bool, inodes map[uint64]uint64, t *tracker) error {
	fields := strings.SplitN(strings.TrimRight(line, "\n"), " ", 6)
	if len(fields) < 5 {
		return nil
	}
	ino, _ := strconv.ParseUint(fields[4], 10, 64)
	if ino == 0 {
		return nil // anonymous shared memory
	}
	if maj, mnr, ok := strings.Cut(fields[3], ":"); ok {
		a, err1 := strconv.ParseUint(maj, 16, 32)
		b, err2 := strconv.ParseUint(mnr, 16, 32)
		if dev := unix.Mkdev(uint32(a), uint32(b)); err1 == nil && err2 == nil && devs[dev] {
			inodes[ino] = dev
			return nil
		}
	}
	if t == nil || len(fields) < 6 {
		return nil
	}
	p := strings.TrimLeft(fields[5], " ")
	if !strings.HasPrefix(p, "/") {
		return nil
	}
	p = strings.TrimSuffix(p, " (deleted)")
	rel := strings.TrimPrefix(p, "/")
	for _, r := range t.roots {
		if !Under(rel, r) {
			continue
		}
		if long || strings.ContainsRune(rel, '\\') {
			return fmt.Errorf("%s: a mapping under /%s whose path cannot be read back", path, r)
		}
		if rel != r {
			t.dirty[parentOf(rel)] = true
		}
	}
	return nil
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
	for _, st := range t.fileFrom {
		if st&nameWritten != 0 {
			t.broken = "a file made and written was moved out of the watched tree"
		}
	}
	s.markProcs(t, pids)
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
	clear(t.fileFrom)
	clear(t.dirFrom)
	t.lastTo = ""
	t.base = nil
	t.scans++
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
	depth := 0
	for _, r := range t.roots {
		if Under(rel, r) {
			depth = strings.Count(rel, "/") - strings.Count(r, "/")
		}
	}
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
