package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Running names a command that runs now, for the watcher to say which
// command a change happened under.
type Running struct {
	Session, Command string
}

// WatchOptions configure Journal.Watch.
type WatchOptions struct {
	// Root is the tree to watch (limbsd: --workdir).
	Root string
	// Skip lists trees under Root not to watch (limbsd's state directory).
	Skip []string
	// Running lists the commands running now.
	Running func() []Running
	// MaxDirs bounds the directories watched (0: DefaultWatchDirs).
	MaxDirs int
}

// Bounds of the watcher.
const (
	DefaultWatchDirs = 8192
	// watchEvery coalesces changes: one file.changed per path per period.
	watchEvery = 100 * time.Millisecond
	// watchPaths bounds the paths held between two flushes; past it, one
	// file.changed of kind overflow stands for the rest.
	watchPaths = 4096
)

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK | unix.IN_DONT_FOLLOW

// watcher is the state of one Watch (its goroutine's alone).
type watcher struct {
	j        *Journal
	opts     WatchOptions
	fd       int
	wds      map[int]string
	full     bool // the watch bound or the kernel's limit was reached
	pending  map[string]*change
	order    []string
	overflow bool
	moves    map[uint32]string // cookie: the path a rename left
	root     *os.File          // Root, opened on first use (openDir)
}

type change struct {
	kind    string
	from    string
	running []Running
}

// Watch records changes under opts.Root as file.changed events until ctx
// ends: path (relative to Root), kind (create, write, remove, rename),
// size, and the commands running when the change was seen. It watches at
// most MaxDirs directories, and says so with one file.changed of kind
// unwatched (the path of the first directory left out) when a tree is
// larger or the kernel's inotify limits are reached; a kernel queue
// overflow is a file.changed of kind overflow. It returns when the
// watcher cannot start (no inotify).
func (j *Journal) Watch(ctx context.Context, opts WatchOptions) error {
	if j == nil {
		return nil
	}
	if opts.MaxDirs <= 0 {
		opts.MaxDirs = DefaultWatchDirs
	}
	if opts.Running == nil {
		opts.Running = func() []Running { return nil }
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	w := &watcher{j: j, opts: opts, fd: fd, wds: map[int]string{}, pending: map[string]*change{}, moves: map[uint32]string{}}
	w.addTree(opts.Root)
	defer func() {
		if w.root != nil {
			w.root.Close()
		}
	}()
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	reads := make(chan []byte)
	go func() {
		defer close(reads)
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				if errors.Is(err, os.ErrClosed) || ctx.Err() != nil {
					return
				}
				if n <= 0 {
					return
				}
			}
			b := append([]byte(nil), buf[:n]...)
			select {
			case reads <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case b, ok := <-reads:
			if !ok {
				w.flush()
				return nil
			}
			w.parse(b)
		case <-tick.C:
			w.flush()
		case <-ctx.Done():
			w.flush()
			return nil
		}
	}
}

func (w *watcher) skipped(p string) bool {
	for _, s := range w.opts.Skip {
		if s != "" && (p == s || strings.HasPrefix(p, s+"/")) {
			return true
		}
	}
	return false
}

// addTree watches dir and the directories under it, within the bound.
// The agent can turn any component of a path into a symlink between the
// event that named a directory and this walk, so every directory is
// opened from the root without following one (openDir), and watched
// through its descriptor: limbsd (root) never watches what lies outside
// the workspace, or its own state directory under another name.
func (w *watcher) addTree(dir string) {
	rel, err := filepath.Rel(w.opts.Root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return
	}
	queue := []string{rel}
	for len(queue) > 0 && !w.full {
		r := queue[0]
		queue = queue[1:]
		p := filepath.Join(w.opts.Root, r)
		if w.skipped(p) {
			continue
		}
		if len(w.wds) >= w.opts.MaxDirs {
			w.unwatched(p, "the watch bound")
			return
		}
		f, err := w.openDir(r)
		if err != nil {
			continue
		}
		wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), watchMask&^unix.IN_DONT_FOLLOW)
		if errors.Is(err, unix.ENOENT) {
			// No /proc: by its path (what the walk checked may have
			// changed since, in a component other than the last).
			wd, err = unix.InotifyAddWatch(w.fd, p, watchMask)
		}
		if err != nil {
			f.Close()
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.ENOMEM) {
				w.unwatched(p, "the kernel's inotify limit (fs.inotify.max_user_watches)")
				return
			}
			continue
		}
		w.wds[wd] = p
		for {
			ents, err := f.ReadDir(1024)
			for _, e := range ents {
				if e.IsDir() && len(w.wds)+len(queue) <= w.opts.MaxDirs {
					queue = append(queue, filepath.Join(r, e.Name()))
				}
			}
			if err != nil || len(ents) == 0 {
				break
			}
		}
		f.Close()
	}
}

// openDir opens the directory rel (relative to the root) without
// following a symlink in any component.
func (w *watcher) openDir(rel string) (*os.File, error) {
	if w.root == nil {
		fd, err := unix.Open(w.opts.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		w.root = os.NewFile(uintptr(fd), w.opts.Root)
	}
	fd, err := unix.Openat2(int(w.root.Fd()), rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		// No openat2 (an old kernel, a seccomp profile that refuses it):
		// one component at a time, none followed.
		fd, err = openNoFollow(int(w.root.Fd()), rel)
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(w.opts.Root, rel)), nil
}

func openNoFollow(dirfd int, rel string) (int, error) {
	fd, err := unix.Dup(dirfd)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "." || c == "" {
			continue
		}
		if c == ".." {
			unix.Close(fd)
			return -1, unix.EXDEV
		}
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// lstat is os.Lstat of p (under the root) without following a symlink in
// any component: the size of a file outside the workspace is no one's.
func (w *watcher) lstat(p string) (size int64, regular, exists bool) {
	rel, err := filepath.Rel(w.opts.Root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return 0, false, false
	}
	d, err := w.openDir(filepath.Dir(rel))
	if err != nil {
		// Its directory is gone, or a link now: nothing to tell.
		return 0, false, false
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), filepath.Base(rel), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, false, !errors.Is(err, unix.ENOENT)
	}
	return st.Size, st.Mode&unix.S_IFMT == unix.S_IFREG, true
}

func (w *watcher) unwatched(p, why string) {
	w.full = true
	w.j.log.Warn("the workspace watcher reached "+why+": changes under the directories left out are not in the journal", "dir", p, "watched", len(w.wds))
	w.j.Append(wire.Event{Type: wire.EventFileChanged, Source: wire.SourceSystem}, wire.FileData{Path: w.rel(p), Kind: "unwatched"})
}

func (w *watcher) rel(p string) string {
	if r, err := filepath.Rel(w.opts.Root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func (w *watcher) parse(buf []byte) {
	running := w.opts.Running()
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameLen := int(ev.Len)
		end := off + unix.SizeofInotifyEvent + nameLen
		if end > len(buf) {
			return
		}
		name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:end]), "\x00")
		off = end
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			w.overflow = true
			continue
		}
		dir, ok := w.wds[int(ev.Wd)]
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(w.wds, int(ev.Wd))
			continue
		}
		if !ok || name == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if w.skipped(p) || w.j.byAPI(p, w.opts.Root) {
			continue
		}
		isDir := ev.Mask&unix.IN_ISDIR != 0
		switch {
		case ev.Mask&unix.IN_CREATE != 0:
			w.add(p, "create", "", running)
			if isDir {
				w.addTree(p)
			}
		case ev.Mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
			w.add(p, "write", "", running)
		case ev.Mask&unix.IN_DELETE != 0:
			w.add(p, "remove", "", running)
		case ev.Mask&unix.IN_MOVED_FROM != 0:
			w.moves[ev.Cookie] = p
			w.add(p, "remove", "", running)
		case ev.Mask&unix.IN_MOVED_TO != 0:
			from, paired := w.moves[ev.Cookie]
			delete(w.moves, ev.Cookie)
			if paired {
				if c := w.pending[from]; c != nil && c.kind == "remove" {
					delete(w.pending, from)
				}
				w.add(p, "rename", w.rel(from), running)
			} else {
				w.add(p, "create", "", running)
			}
			if isDir {
				w.addTree(p)
			}
		}
	}
	if len(w.moves) > 1024 {
		w.moves = map[uint32]string{}
	}
}

// add notes a change of p; a path already pending keeps its first kind
// (a create then writes is a create) unless it was removed.
func (w *watcher) add(p, kind, from string, running []Running) {
	if c := w.pending[p]; c != nil {
		if kind == "remove" || c.kind == "remove" || kind == "rename" {
			c.kind, c.from = kind, from
		}
		c.running = mergeRunning(c.running, running)
		return
	}
	if len(w.pending) >= watchPaths {
		w.overflow = true
		return
	}
	w.pending[p] = &change{kind: kind, from: from, running: running}
	w.order = append(w.order, p)
}

func mergeRunning(a, b []Running) []Running {
	for _, r := range b {
		found := false
		for _, o := range a {
			if o == r {
				found = true
			}
		}
		if !found {
			a = append(a, r)
		}
	}
	return a
}

func (w *watcher) flush() {
	for _, p := range w.order {
		c := w.pending[p]
		if c == nil {
			continue
		}
		d := wire.FileData{Path: w.rel(p), Kind: c.kind, From: c.from}
		if c.kind != "remove" {
			size, regular, exists := w.lstat(p)
			if !exists {
				continue // created and gone again within the period
			}
			if regular {
				d.Size = size
			}
		}
		ev := wire.Event{Type: wire.EventFileChanged, Source: wire.SourceSystem}
		switch len(c.running) {
		case 0:
		case 1:
			ev.Session, ev.Command = c.running[0].Session, c.running[0].Command
		default:
			for _, r := range c.running {
				d.Running = append(d.Running, r.Session+"/"+r.Command)
			}
		}
		w.j.Append(ev, d)
	}
	w.pending = map[string]*change{}
	w.order = w.order[:0]
	if w.overflow {
		w.overflow = false
		w.j.Append(wire.Event{Type: wire.EventFileChanged, Source: wire.SourceSystem}, wire.FileData{Path: ".", Kind: "overflow"})
	}
}

// apiGrace is how long after the file API changed a path the watcher
// leaves that path's changes to the file API's own events.
const apiGrace = 2 * time.Second

// ChangingByAPI tells the watcher that the file API is about to change
// path (relative to the watched root, or absolute), and the tree under it
// when tree is set: those changes are its file.written, file.edited or
// file.deleted, not a command's file.changed.
func (j *Journal) ChangingByAPI(path string, tree bool) {
	if j == nil || path == "" {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	now := time.Now()
	if len(j.apiPaths) > 1024 {
		for p, t := range j.apiPaths {
			if now.Sub(t.at) > apiGrace {
				delete(j.apiPaths, p)
			}
		}
	}
	if j.apiPaths == nil {
		j.apiPaths = map[string]apiChange{}
	}
	j.apiPaths[filepath.Clean(path)] = apiChange{at: now, tree: tree}
}

type apiChange struct {
	at   time.Time
	tree bool
}

// byAPI reports whether the change of p is the file API's.
func (j *Journal) byAPI(p, root string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.apiPaths) == 0 {
		return false
	}
	now := time.Now()
	for q, c := range j.apiPaths {
		if now.Sub(c.at) > apiGrace {
			continue
		}
		if !filepath.IsAbs(q) {
			q = filepath.Join(root, q)
		}
		if p == q || (c.tree && strings.HasPrefix(p, q+"/")) {
			return true
		}
		// The file API writes through a temporary file next to the target.
		if filepath.Dir(p) == filepath.Dir(q) && strings.HasPrefix(filepath.Base(p), "."+filepath.Base(q)+".") {
			return true
		}
	}
	return false
}
