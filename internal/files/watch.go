package files

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Watch event types beyond the contract's create, write, remove and
// rename: ready opens every stream (events after it are all reported) and
// overflow says the kernel dropped events (list the directory again).
const (
	EventReady    = "ready"
	EventOverflow = "overflow"
)

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// maxScanned bounds the memory of paths already reported by a scan.
const maxScanned = 100000

// moveWait is how long a rename's second half is awaited when the first
// half ended a read. The kernel queues both halves in the same rename
// call, so this only matters when a read buffer split them.
const moveWait = 50 * time.Millisecond

// keepAlive is how long an idle stream waits before sending a comment.
const keepAlive = 25 * time.Second

// serveWatch streams events under a directory as Server-Sent Events: one
// `data: {json}` message per wire.WatchEvent. It uses inotify directly
// (limbsd takes no dependency beyond x/sys) with one watch per directory,
// added as directories appear. The kernel's queue is the only buffer: a
// client that reads too slowly gets an overflow event, never a stalled
// daemon.
func (s *Server) serveWatch(w http.ResponseWriter, r *http.Request) error {
	root, err := s.queryPath(r)
	if err != nil {
		return err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return statErr(root, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory; watch the directory that holds it: %w", root, wire.ErrBadRequest)
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return fmt.Errorf("this connection cannot stream: %w", wire.ErrUnavailable)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %v; too many watchers? raise fs.inotify.max_user_instances: %w", err, wire.ErrUnavailable)
	}
	// os.NewFile on a non-blocking descriptor puts it in the runtime's
	// poller, so Close wakes a blocked Read and read deadlines work.
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()

	wt := &watcher{fd: fd, root: root, wds: map[int]string{}, scanned: map[string]bool{}}
	// The root may be a symlink the caller named; directories under it are
	// watched with IN_DONT_FOLLOW.
	rootWd, err := unix.InotifyAddWatch(fd, root, watchMask)
	if err != nil {
		return fmt.Errorf("watching %s: %v; raise fs.inotify.max_user_watches or watch a smaller tree: %w", root, err, wire.ErrUnavailable)
	}
	wt.wds[rootWd] = root
	wt.addTree(root, false)

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	wt.emit(EventReady, root, "")
	if _, err := w.Write(wt.flush()); err != nil {
		return errResponded
	}
	fl.Flush()

	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-r.Context().Done():
			f.Close()
		case <-stop:
		}
	}()

	buf := make([]byte, 64<<10)
	_ = f.SetReadDeadline(time.Now().Add(keepAlive))
	for !wt.done {
		n, err := f.Read(buf)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded) && wt.pending != nil:
			wt.flushMove()
		case errors.Is(err, os.ErrDeadlineExceeded):
			// An SSE comment: keeps proxies from closing an idle stream
			// and finds clients that vanished without closing.
			wt.out.WriteString(": keep-alive\n\n")
		case err != nil:
			return errResponded // closed: the client went away
		default:
			wt.parse(buf[:n])
		}
		if wt.pending != nil {
			_ = f.SetReadDeadline(time.Now().Add(moveWait))
		} else {
			_ = f.SetReadDeadline(time.Now().Add(keepAlive))
		}
		if out := wt.flush(); len(out) > 0 {
			if _, err := w.Write(out); err != nil {
				return errResponded
			}
			fl.Flush()
		}
	}
	return errResponded
}

type pendingMove struct {
	cookie uint32
	path   string
	dir    bool
	temp   bool // one of the daemon's own temp files
}

// ownTemp matches the temp files of the daemon's atomic writes
// (.NAME.limbs-DIGITS). Their create, write and rename are one change of
// NAME, reported as a single write of it.
var ownTemp = regexp.MustCompile(`^\..+\.limbs-[0-9]+$`)

// watcher turns one inotify instance's events into wire events. Only the
// serving goroutine touches it.
type watcher struct {
	fd      int
	root    string
	wds     map[int]string // watch descriptor -> directory
	pending *pendingMove   // a rename's first half, awaiting its second
	// scanned holds paths a scan of a new directory reported, so that the
	// kernel's own create event for them, if it comes, is not sent twice.
	scanned map[string]bool
	out     bytes.Buffer
	last    wire.WatchEvent
	done    bool
}

func (wt *watcher) emit(typ, path, from string) {
	// inotify reports each write call; consecutive writes to one file in
	// one batch say nothing more than the first.
	if typ == "write" && wt.last.Type == "write" && wt.last.Path == path {
		return
	}
	ev := wire.WatchEvent{Type: typ, Path: path, Time: time.Now().UTC(), From: from}
	wt.last = ev
	b, _ := json.Marshal(ev)
	wt.out.WriteString("data: ")
	wt.out.Write(b)
	wt.out.WriteString("\n\n")
}

// flush hands over the events so far. Writes are only folded together
// within one batch: once a write is sent, the client may read the file,
// and a later write must be reported again.
func (wt *watcher) flush() []byte {
	b := bytes.Clone(wt.out.Bytes())
	wt.out.Reset()
	wt.last = wire.WatchEvent{}
	return b
}

// addTree watches dir and every directory under it (symlinks are not
// followed). With scan set it also reports what is already inside, since
// a new directory can fill up before its watch exists.
func (wt *watcher) addTree(dir string, scan bool) {
	_ = filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if scan && p != dir && !(de.Type().IsRegular() && ownTemp.MatchString(de.Name())) {
			wt.emit("create", p, "")
			if len(wt.scanned) > maxScanned {
				clear(wt.scanned)
			}
			wt.scanned[p] = true
			if de.Type().IsRegular() {
				if fi, err := de.Info(); err == nil && fi.Size() > 0 {
					wt.emit("write", p, "")
				}
			}
		}
		if !de.IsDir() || p == wt.root {
			return nil
		}
		wd, err := unix.InotifyAddWatch(wt.fd, p, watchMask|unix.IN_DONT_FOLLOW)
		if err != nil {
			return filepath.SkipDir // gone already, or out of watches
		}
		wt.wds[wd] = p
		return nil
	})
}

// forget drops the watches of dir and everything under it.
func (wt *watcher) forget(dir string, rm bool) {
	for wd, p := range wt.wds {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			if rm {
				_, _ = unix.InotifyRmWatch(wt.fd, uint32(wd))
			}
			delete(wt.wds, wd)
		}
	}
}

// moveTree renames the watched directories under from to under to.
func (wt *watcher) moveTree(from, to string) {
	for wd, p := range wt.wds {
		if p == from {
			wt.wds[wd] = to
		} else if strings.HasPrefix(p, from+"/") {
			wt.wds[wd] = to + strings.TrimPrefix(p, from)
		}
	}
}

// flushMove reports a rename whose second half never came: the file left
// the watched tree.
func (wt *watcher) flushMove() {
	if wt.pending == nil {
		return
	}
	pm := wt.pending
	wt.pending = nil
	if pm.temp {
		return
	}
	wt.emit("remove", pm.path, "")
	if pm.dir {
		wt.forget(pm.path, true)
	}
}

func (wt *watcher) parse(buf []byte) {
	const hdr = unix.SizeofInotifyEvent
	for len(buf) >= hdr {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		nameLen := int(ev.Len)
		if hdr+nameLen > len(buf) {
			return
		}
		name := string(bytes.TrimRight(buf[hdr:hdr+nameLen], "\x00"))
		buf = buf[hdr+nameLen:]
		wt.handle(int(ev.Wd), ev.Mask, ev.Cookie, name)
	}
}

func (wt *watcher) handle(wd int, mask, cookie uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		wt.flushMove()
		wt.emit(EventOverflow, wt.root, "")
		return
	}
	dir, ok := wt.wds[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(wt.wds, wd)
		return
	}
	if !ok {
		return
	}
	p := dir
	if name != "" {
		p = filepath.Join(dir, name)
	}
	isDir := mask&unix.IN_ISDIR != 0
	if wt.pending != nil && !(mask&unix.IN_MOVED_TO != 0 && cookie == wt.pending.cookie) {
		wt.flushMove()
	}
	temp := !isDir && ownTemp.MatchString(name)
	if temp && mask&unix.IN_MOVED_FROM == 0 {
		return // create, write or removal of a temp file: not a change yet
	}
	switch {
	case mask&unix.IN_DELETE_SELF != 0:
		if dir == wt.root {
			wt.emit("remove", wt.root, "")
			wt.done = true
		}
	case mask&unix.IN_CREATE != 0:
		if wt.scanned[p] {
			delete(wt.scanned, p)
			return
		}
		wt.emit("create", p, "")
		if isDir {
			wt.addTree(p, true)
		}
	case mask&unix.IN_MODIFY != 0:
		wt.emit("write", p, "")
	case mask&unix.IN_DELETE != 0:
		delete(wt.scanned, p)
		wt.emit("remove", p, "")
	case mask&unix.IN_MOVED_FROM != 0:
		wt.pending = &pendingMove{cookie: cookie, path: p, dir: isDir, temp: temp}
	case mask&unix.IN_MOVED_TO != 0:
		if wt.pending != nil {
			from := wt.pending.path
			wasTemp := wt.pending.temp
			wt.pending = nil
			if wasTemp {
				wt.emit("write", p, "")
				return
			}
			wt.emit("rename", p, from)
			if isDir {
				wt.moveTree(from, p)
			}
			return
		}
		// Moved in from outside the tree.
		wt.emit("create", p, "")
		if isDir {
			wt.addTree(p, true)
		}
	}
}
