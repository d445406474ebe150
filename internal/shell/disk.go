package shell

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Bounds of the output kept on disk (docs/api.md "State on disk"). The
// output of a sandbox lands in its state directory, which is a directory
// of the host: without a bound a command printing without end fills the
// host's disk.
const (
	DefaultMaxSessionDisk = 256 << 20
	DefaultMaxDisk        = 1 << 30
)

// A session's bound is split in two halves: one for its output stream
// (stream.log), one for its command logs (c_N.log), which hold the same
// bytes a second time (see logHead). A command's log keeps its first and
// its last eighth of the bound.
const (
	streamShare = 2 // the stream may hold 1/streamShare of the bound
	logShare    = 2 // the command logs together, 1/logShare
	logPart     = 8 // a command log keeps 1/logPart as head and as tail
)

// ParseSize reads a byte count: a whole number with an optional unit (B,
// K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB; every unit is a power of 1024).
// "0", "none" and "unlimited" mean no bound and return -1.
func ParseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	switch strings.ToLower(s) {
	case "0", "none", "unlimited":
		return -1, nil
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: use a whole number of bytes with an optional unit, such as 256MiB or 1GiB", v)
	}
	var shift uint
	switch strings.ToLower(strings.TrimSpace(s[i:])) {
	case "", "b":
	case "k", "kb", "kib":
		shift = 10
	case "m", "mb", "mib":
		shift = 20
	case "g", "gb", "gib":
		shift = 30
	case "t", "tb", "tib":
		shift = 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q; use B, KiB, MiB, GiB or TiB", v, s[i:])
	}
	if n > (1<<62)>>shift {
		return 0, fmt.Errorf("size %q is too large", v)
	}
	return n << shift, nil
}

// diskPool counts the output bytes every session of a daemon keeps on
// disk against the daemon's bound (limit <= 0: none).
type diskPool struct {
	mu    sync.Mutex
	used  int64
	limit int64
}

// short is how many of n more bytes do not fit.
func (p *diskPool) short(n int64) int64 {
	if p == nil || p.limit <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(0, p.used+n-p.limit)
}

// take reserves up to n bytes and returns how many it reserved.
func (p *diskPool) take(n int64) int64 {
	if p == nil || n <= 0 {
		return max(n, 0)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limit > 0 {
		n = min(n, max(0, p.limit-p.used))
	}
	p.used += n
	return n
}

func (p *diskPool) release(n int64) {
	if p == nil || n <= 0 {
		return
	}
	p.mu.Lock()
	p.used = max(0, p.used-n)
	p.mu.Unlock()
}

// span is the byte range [from, to) of an output stream.
type span struct{ from, to int64 }

// logAccount keeps a session's command logs within their share of the
// session's bound, dropping the oldest finished logs first.
type logAccount struct {
	pool  *diskPool
	limit int64 // the logs' share of the session bound; <= 0: none
	head  int64 // bytes of its start and of its end a command log keeps; <= 0: all
	// free asks the session's stream to free n bytes, the oldest first,
	// when the daemon's bound is reached.
	free func(n int64)
	// most is how many closed logs are kept (maxLogs): past it the
	// oldest goes, whatever its size.
	most int
	mu   sync.Mutex
	dir  string // the session's directory, which holds its logs
	used int64
	done []loggedFile // closed logs, oldest first
}

// maxLogs bounds the closed command logs a session keeps. Short commands
// print little and their logs never reach the bytes' bound (most link to
// empty.log), so without a count a session kept a file and an entry for
// every command it ever ran: a soak's limbsds grew 160 bytes a command,
// half a MiB a minute each, and a restart lists them all.
const maxLogs = 10000

// loggedFile is a closed log, dir/c_NUM.log: 16 bytes, not its path,
// for each of the maxLogs a session may keep.
type loggedFile struct {
	num  int
	size int64
}

// path is the file of log l.
func (a *logAccount) path(l loggedFile) string {
	return filepath.Join(a.dir, "c_"+strconv.Itoa(l.num)+".log")
}

func newLogAccount(pool *diskPool, sessionLimit int64) *logAccount {
	a := &logAccount{pool: pool, most: maxLogs}
	if sessionLimit > 0 {
		a.limit = sessionLimit / logShare
		a.head = max(4096, sessionLimit/logPart)
	}
	return a
}

// load counts the logs a session directory holds already (a restarted
// daemon).
func (a *logAccount) load(dir string) {
	a.dir = dir
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		num, ok := logNumber(e.Name())
		if !ok {
			continue
		}
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		size := fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			size = 0 // a link to empty.log
		}
		a.done = append(a.done, loggedFile{num: num, size: size})
		a.used += size
	}
	sort.Slice(a.done, func(i, j int) bool { return a.done[i].num < a.done[j].num })
	a.pool.take(a.used)
	a.mu.Lock()
	a.trimLocked()
	a.mu.Unlock()
}

// trimLocked deletes the oldest closed logs past a.most, never the newest
// (command ids continue from it).
func (a *logAccount) trimLocked() {
	for a.most > 0 && len(a.done) > max(a.most, 1) {
		a.dropOldestLocked()
	}
}

// dropOldestLocked deletes the oldest closed log and gives back its bytes.
func (a *logAccount) dropOldestLocked() {
	old := a.done[0]
	a.done = a.done[1:]
	if err := os.Remove(a.path(old)); err != nil && !os.IsNotExist(err) {
		return
	}
	a.used -= old.size
	a.pool.release(old.size)
}

func logNumber(name string) (int, bool) {
	if !strings.HasPrefix(name, "c_") || !strings.HasSuffix(name, ".log") {
		return 0, false
	}
	n, err := strconv.Atoi(name[2 : len(name)-4])
	return n, err == nil
}

// take reserves up to n bytes for a log being written, first dropping the
// oldest closed logs (never the newest: command ids follow from it) when
// the session's logs or the daemon are at their bound.
func (a *logAccount) take(n int64) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.done) > 1 && ((a.limit > 0 && a.used+n > a.limit) || a.pool.short(n) > 0) {
		a.dropOldestLocked()
	}
	if short := a.pool.short(n); short > 0 && a.free != nil {
		a.free(short)
	}
	if a.limit > 0 {
		n = min(n, max(0, a.limit-a.used))
	}
	n = a.pool.take(n)
	a.used += n
	return n
}

func (a *logAccount) release(n int64) {
	if n <= 0 {
		return
	}
	a.mu.Lock()
	a.used = max(0, a.used-n)
	a.mu.Unlock()
	a.pool.release(n)
}

// closed notes a finished log file of size bytes.
func (a *logAccount) closed(path string, size int64) {
	num, ok := logNumber(filepath.Base(path))
	if !ok {
		return
	}
	a.mu.Lock()
	a.dir = filepath.Dir(path)
	a.done = append(a.done, loggedFile{num: num, size: size})
	a.trimLocked()
	a.mu.Unlock()
}

// drop releases everything (the session is deleted).
func (a *logAccount) drop() {
	a.mu.Lock()
	n := a.used
	a.used, a.done = 0, nil
	a.mu.Unlock()
	a.pool.release(n)
}
