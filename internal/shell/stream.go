package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/wire"
)

// ringSize is how much of the newest output stays in memory (API.md: at
// least 8 MiB).
const ringSize = 8 << 20

// ringMin is the first size of a ring on the heap (when the mapping of
// newRing fails). It grows (doubling, up to ringSize) before it would lose
// a byte, so it keeps what a full-size one keeps; an idle session's costs
// ringMin instead of ringSize, and the garbage collector's heap goal,
// which the ring raises, stays low.
const ringMin = 64 << 10

// ringFor is the ring size that holds n bytes: ringMin doubled as often
// as needed, at most ringSize.
func ringFor(n int64) int64 {
	c := int64(ringMin)
	for c < n && c < ringSize {
		c *= 2
	}
	return min(c, ringSize)
}

// mappedRings makes each ring an anonymous mapping (newRing); false in
// the test of the heap ring that grows.
var mappedRings = true

// newRing gives s its ring. It is ringSize bytes of an anonymous mapping,
// outside the Go heap: the kernel backs only the pages output reaches (an
// idle session's ring costs the pages written to it), the garbage
// collector neither scans it nor counts it toward its goal (full rings on
// the heap let it grow to twice their size: a limbsd of 8 busy sessions
// held 173 MiB), and nothing copies it to grow. It is unmapped once the
// stream is unreachable, so no reader can outlive it. (Under
// vm.overcommit_memory=2 MAP_NORESERVE is ignored and each ring counts
// its 8 MiB against the commit limit from the start.) When the mapping
// fails the ring is ringMin bytes of heap that grows (growLocked).
func (s *stream) newRing() {
	if mappedRings {
		b, err := unix.Mmap(-1, 0, ringSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err == nil {
			s.ring = b
			s.mapped = true
			runtime.AddCleanup(s, func(b []byte) { _ = unix.Munmap(b) }, b)
			return
		}
	}
	s.ring = make([]byte, ringMin)
}

// ringGC coalesces the collections collectRingsSoon asks for.
var ringGC struct {
	sync.Mutex
	pending bool
}

// collectRingsSoon runs a garbage collection a second from now, one for
// any number of streams closed in that second, so that their mappings'
// cleanups run: the collector paces itself on the heap alone, and a
// limbsd whose heap does not grow would keep a deleted session's 8 MiB
// until its forced collection, two minutes later (a loop that creates,
// fills and deletes sessions would have its memory limit reached first).
func collectRingsSoon() {
	ringGC.Lock()
	defer ringGC.Unlock()
	if ringGC.pending {
		return
	}
	ringGC.pending = true
	time.AfterFunc(time.Second, func() {
		ringGC.Lock()
		ringGC.pending = false
		ringGC.Unlock()
		runtime.GC()
	})
}

// memLowLocked is the offset from which the ring holds the output.
func (s *stream) memLowLocked() int64 {
	return max(s.memBase, s.end-int64(len(s.ring)))
}

// growLocked makes the ring hold at least n bytes (at most ringSize),
// keeping what it holds at the same offsets.
func (s *stream) growLocked(n int64) {
	old := int64(len(s.ring))
	if n <= old || old >= ringSize {
		return
	}
	ring := make([]byte, ringFor(n))
	size := int64(len(ring))
	for off := s.memLowLocked(); off < s.end; {
		i := off % old
		k := min(old-i, s.end-off)
		j := off % size
		k = min(k, size-j)
		copy(ring[j:j+k], s.ring[i:i+k])
		off += k
	}
	s.ring = ring
}

// stream is a session's output stream: every byte the terminal showed,
// markers removed, addressed by absolute offset. The newest ringSize bytes
// live in memory; the rest is written to a file at its own offset, so that
// older ranges stay readable while the session exists, within the
// session's disk bound (see disk.go): past it, the oldest bytes are
// punched out of the file (it stays addressed by offset, with holes) and
// the ranges gone are kept in holes.
type stream struct {
	mu     sync.Mutex
	file   *os.File
	ring   []byte
	mapped bool  // ring is a mapping (newRing)
	end    int64 // offset one past the newest byte
	synced int64 // offset up to which the file was written (or given up)
	notify chan struct{}
	closed bool

	pool    *diskPool
	limit   int64  // bytes the file may hold; <= 0: no bound
	stored  int64  // bytes the file holds
	holes   []span // ranges below synced the file does not hold, in order
	keep    []span // ranges to punch last (the heads of commands' logs)
	memBase int64  // the ring holds nothing valid below this offset
	gen     int    // counts changes of holes, for readers outside mu
	noPunch bool   // the file system cannot punch holes
	block   int64  // the file system's block size
	log     *slog.Logger
	werr    error // the newest write error, logged once per failing spell
	wfails  int   // failed writes so far
	// onAppend, when set, is told of every append after mu is released
	// (the journal's timing index: journal.go). Appends are serialised
	// by the session's mu, so it sees them in order.
	onAppend func(off int64, p []byte)
}

// syncAhead is how much of the newest output may be in memory only. Output
// goes to the file in blocks (a write per terminal read cost a tenth of
// the throughput) and at once when the terminal falls silent (see
// Session.readPTY); within syncAhead of the end, reads are served from
// the ring.
const syncAhead = 256 << 10

// punchMin is the least a punch frees, so that a flood past the bound
// costs a system call per MiB, not per write.
const punchMin = 1 << 20

func openStream(path string, pool *diskPool, limit int64, log *slog.Logger) (*stream, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("output log %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &stream{file: f, notify: make(chan struct{}), pool: pool, limit: limit, block: 4096, log: log}
	s.newRing()
	// A restarted daemon continues the stream where the old one stopped;
	// the tail of the old stream is reloaded into memory, and the holes
	// the old one punched (or could not write) are found again.
	s.end = st.Size()
	s.synced = s.end
	s.stored = s.end
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.stored = min(s.end, sys.Blocks*512)
		s.block = max(4096, int64(sys.Blksize))
	}
	s.holes = findHoles(f, s.end)
	pool.take(s.stored)
	if s.end > 0 {
		from := max(0, s.end-ringSize)
		for _, h := range s.holes {
			if h.to > from {
				from = max(from, h.to)
			}
		}
		s.memBase = from
		buf := make([]byte, s.end-from)
		if len(s.ring) < ringSize {
			s.ring = make([]byte, ringFor(s.end-from))
		}
		if _, err := f.ReadAt(buf, from); err == nil {
			size := int64(len(s.ring))
			for i, b := range buf {
				s.ring[(from+int64(i))%size] = b
			}
		} else {
			s.memBase = s.end
		}
	}
	return s, nil
}

// findHoles lists the holes of f's first size bytes.
func findHoles(f *os.File, size int64) []span {
	var holes []span
	fd := int(f.Fd())
	for off, i := int64(0), 0; off < size && i < 1<<16; i++ {
		h, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil || h >= size {
			break
		}
		d, err := unix.Seek(fd, h, unix.SEEK_DATA)
		if err != nil || d > size {
			d = size
		}
		if d > h {
			holes = append(holes, span{h, d})
		}
		off = d
	}
	return holes
}

// append adds p at the end and returns the offset it starts at. It never
// blocks on readers.
func (s *stream) append(p []byte) int64 {
	s.mu.Lock()
	start := s.end
	if len(p) == 0 {
		s.mu.Unlock()
		return start
	}
	if s.end+int64(len(p))-s.synced > syncAhead {
		// Whatever the ring is about to lose must be on disk first.
		s.syncLocked()
	}
	if int64(len(p)) > syncAhead {
		s.writeLocked(p, s.end)
		s.synced = s.end + int64(len(p))
	}
	s.growLocked(s.end + int64(len(p)) - s.memLowLocked())
	size := int64(len(s.ring))
	q := p
	if int64(len(q)) > size {
		q = q[int64(len(q))-size:]
	}
	at := (s.end + int64(len(p)-len(q))) % size
	n := copy(s.ring[at:], q)
	copy(s.ring, q[n:])
	s.end += int64(len(p))
	ch := s.notify
	s.notify = make(chan struct{})
	s.mu.Unlock()
	close(ch)
	if s.onAppend != nil {
		s.onAppend(start, p)
	}
	return start
}

// sync writes the output held only in memory to the file.
func (s *stream) sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked()
}

func (s *stream) syncLocked() {
	if s.synced >= s.end || s.closed {
		return
	}
	size := int64(len(s.ring))
	start := s.synced % size
	n := s.end - s.synced
	if start+n <= size {
		s.writeLocked(s.ring[start:start+n], s.synced)
	} else {
		s.writeLocked(s.ring[start:], s.synced)
		s.writeLocked(s.ring[:start+n-size], s.synced+size-start)
	}
	s.synced = s.end
}

// writeLocked writes p, which starts at stream offset off, to the file,
// within the bounds: first the oldest bytes are punched out to make room;
// what still does not fit, or does not get written (a full disk), becomes
// a hole. It never fails: the output goes on in memory.
func (s *stream) writeLocked(p []byte, off int64) {
	n := int64(len(p))
	if n == 0 {
		return
	}
	if s.limit > 0 && s.stored+n > s.limit {
		s.punchLocked(s.stored + n - s.limit)
	}
	if short := s.pool.short(n); short > 0 {
		s.punchLocked(short)
	}
	want := n
	if s.limit > 0 {
		want = min(want, max(0, s.limit-s.stored))
	}
	got := s.pool.take(want)
	var done int64
	var err error
	if got > 0 {
		var w int
		w, err = s.file.WriteAt(p[:got], off)
		done = int64(w)
	}
	s.pool.release(got - done)
	s.stored += done
	if done < n {
		s.addHoleLocked(off+done, off+n)
	}
	if err != nil {
		s.wfails++
		if s.werr == nil {
			s.werr = err
			s.log.Warn("writing the output stream failed; the output goes on, the bytes not written are reported missing", "file", s.file.Name(), "err", err)
		}
	} else if done == n {
		s.werr = nil
	}
}

// free punches at least n bytes out of the file, the oldest first.
func (s *stream) free(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.punchLocked(n)
}

// punchLocked frees at least need bytes (punchMin at least) of the file,
// the oldest first and the kept ranges last, by punching holes.
func (s *stream) punchLocked(need int64) {
	if s.noPunch || s.stored == 0 {
		return
	}
	need = max(need, punchMin)
	var cuts []span
	var freed int64
	for pass := 0; pass < 2 && freed < need; pass++ {
		pos := int64(0)
		for i := 0; i <= len(s.holes) && freed < need; i++ {
			next := s.synced
			if i < len(s.holes) {
				next = s.holes[i].from
			}
			var parts []span
			if pass == 0 {
				parts = subtract(span{pos, next}, s.keep)
			} else {
				parts = intersect(span{pos, next}, s.keep)
			}
			for _, sp := range parts {
				a := (sp.from + s.block - 1) / s.block * s.block
				b := min(sp.to/s.block*s.block, a+(need-freed+s.block-1)/s.block*s.block)
				if b > a {
					cuts = append(cuts, span{a, b})
					freed += b - a
				}
				if freed >= need {
					break
				}
			}
			if i < len(s.holes) {
				pos = s.holes[i].to
			}
		}
	}
	for _, c := range cuts {
		if err := unix.Fallocate(int(s.file.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, c.from, c.to-c.from); err != nil {
			s.noPunch = true
			s.log.Warn("the file system of the state directory cannot punch holes: output past the disk bound is not written", "file", s.file.Name(), "err", err)
			return
		}
		s.addHoleLocked(c.from, c.to)
		s.stored = max(0, s.stored-(c.to-c.from))
		s.pool.release(c.to - c.from)
	}
}

// subtract is iv without the ranges of cut (sorted or not).
func subtract(iv span, cut []span) []span {
	out := []span{iv}
	for _, c := range cut {
		var next []span
		for _, o := range out {
			if c.to <= o.from || c.from >= o.to {
				next = append(next, o)
				continue
			}
			if c.from > o.from {
				next = append(next, span{o.from, c.from})
			}
			if c.to < o.to {
				next = append(next, span{c.to, o.to})
			}
		}
		out = next
	}
	sort.Slice(out, func(i, j int) bool { return out[i].from < out[j].from })
	return out
}

// intersect is the parts of iv inside the ranges of in (which may
// overlap: the heads of commands that printed nothing), merged.
func intersect(iv span, in []span) []span {
	var out []span
	for _, c := range in {
		if a, b := max(iv.from, c.from), min(iv.to, c.to); b > a {
			out = append(out, span{a, b})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].from < out[j].from })
	merged := out[:0]
	for _, o := range out {
		if n := len(merged); n > 0 && o.from <= merged[n-1].to {
			merged[n-1].to = max(merged[n-1].to, o.to)
		} else {
			merged = append(merged, o)
		}
	}
	return merged
}

// addHoleLocked notes that [from, to) is not in the file.
func (s *stream) addHoleLocked(from, to int64) {
	if to <= from {
		return
	}
	s.gen++
	hs := append(s.holes, span{from, to})
	sort.Slice(hs, func(i, j int) bool { return hs[i].from < hs[j].from })
	out := hs[:1]
	for _, h := range hs[1:] {
		if last := &out[len(out)-1]; h.from <= last.to {
			last.to = max(last.to, h.to)
		} else {
			out = append(out, h)
		}
	}
	s.holes = out
}

// missingLocked is the first range of [from, to) that is neither in the
// file nor in memory.
func (s *stream) missingLocked(from, to int64) (span, bool) {
	to = min(to, s.memLowLocked())
	for _, h := range s.holes {
		if h.from >= to {
			break
		}
		if a, b := max(h.from, from), min(h.to, to); b > a {
			return span{a, b}, true
		}
	}
	return span{}, false
}

// missing is missingLocked for callers without mu.
func (s *stream) missing(from, to int64) (span, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.missingLocked(from, to)
}

// troubled reports whether a write to the file has failed.
func (s *stream) troubled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wfails > 0
}

// keepRange asks that [from, to) be punched out last.
func (s *stream) keepRange(from, to int64) {
	s.mu.Lock()
	s.keep = append(s.keep, span{from, to})
	s.mu.Unlock()
}

// unkeep drops the kept range starting at from.
func (s *stream) unkeep(from int64) {
	s.mu.Lock()
	for i, k := range s.keep {
		if k.from == from {
			s.keep = append(s.keep[:i], s.keep[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
}

// goneError says that [sp.from, sp.to) of the stream is no longer kept.
func goneError(sp span) error {
	return &wire.GoneError{From: sp.from, To: sp.to, Msg: fmt.Sprintf(
		"bytes %d..%d of the output stream are no longer kept: they were cut to keep the session within its disk bound (limbsd --max-session-disk, --max-disk) or lost when a write to the state directory failed; read the bytes before %d or from %d on",
		sp.from, sp.to, sp.from, sp.to)}
}

// copyTo appends the bytes [from, to) to f: copied by the kernel from the
// stream file (no trip through user space, which cost a tenth of a large
// command's time), or through memory when that fails.
// It stops at the first byte the stream no longer holds (a GoneError).
func (s *stream) copyTo(f *os.File, from, to int64) (int64, error) {
	s.mu.Lock()
	if to > s.synced {
		s.syncLocked()
	}
	src, ok := s.file, !s.closed
	// The kernel copies only what the file holds: up to the first hole.
	fileTo := min(to, s.synced)
	for _, h := range s.holes {
		if h.to > from {
			fileTo = min(fileTo, max(from, h.from))
			break
		}
	}
	gen := s.gen
	s.mu.Unlock()
	var done int64
	if ok {
		off := from
		for off < fileTo {
			n, err := unix.CopyFileRange(int(src.Fd()), &off, int(f.Fd()), nil, int(fileTo-off), 0)
			if err != nil || n == 0 {
				break
			}
			done += int64(n)
		}
		if done > 0 {
			// A punch while the kernel copied leaves zeros in f.
			s.mu.Lock()
			changed := s.gen != gen
			s.mu.Unlock()
			if changed {
				if sp, bad := s.missing(from, from+done); bad {
					return sp.from - from, goneError(sp)
				}
			}
		}
	}
	if from+done < to {
		n, err := io.Copy(f, s.reader(from+done, to))
		return done + n, err
	}
	return done, nil
}

// skipTo moves the end of an idle stream up to off, the bytes between a
// hole: they were shown and recorded elsewhere (the journal) but never
// reached the file. The file grows to off so that a restart finds the
// same end.
func (s *stream) skipTo(off int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off <= s.end || s.closed {
		return
	}
	s.syncLocked()
	s.addHoleLocked(s.end, off)
	s.end, s.synced, s.memBase = off, off, off
	_ = s.file.Truncate(off)
}

// size returns the current end offset.
func (s *stream) size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end
}

// changed returns the end offset and a channel closed at the next append.
func (s *stream) changed() (int64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end, s.notify
}

// readAt copies bytes starting at off into p, from memory when they are
// still there and from the file otherwise. It returns io.EOF at the end.
func (s *stream) readAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	if off >= s.end {
		s.mu.Unlock()
		return 0, io.EOF
	}
	if n := int64(len(p)); off+n > s.end {
		p = p[:s.end-off]
	}
	if sp, bad := s.missingLocked(off, off+int64(len(p))); bad {
		if sp.from == off {
			s.mu.Unlock()
			return 0, goneError(sp)
		}
		p = p[:sp.from-off]
	}
	if off >= s.memLowLocked() {
		start := off % int64(len(s.ring))
		n := copy(p, s.ring[start:])
		if n < len(p) {
			n += copy(p[n:], s.ring)
		}
		s.mu.Unlock()
		return n, nil
	}
	f, gen := s.file, s.gen
	s.mu.Unlock()
	n, err := f.ReadAt(p, off)
	if n > 0 {
		// A punch during the read may have given zeros.
		s.mu.Lock()
		changed := s.gen != gen
		s.mu.Unlock()
		if changed {
			if sp, bad := s.missing(off, off+int64(n)); bad {
				if sp.from == off {
					return 0, goneError(sp)
				}
				return int(sp.from - off), nil
			}
		}
	}
	return n, err
}

// reader returns the bytes [from, to) as a stream.
func (s *stream) reader(from, to int64) io.Reader {
	return &rangeReader{s: s, off: from, to: to}
}

// skippingReader is reader passing over the ranges no longer kept (for
// the cleaned output of a result, which says that its log was cut).
func (s *stream) skippingReader(from, to int64) io.Reader {
	return &rangeReader{s: s, off: from, to: to, skip: true}
}

type rangeReader struct {
	s       *stream
	off, to int64
	skip    bool
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.off >= r.to {
		return 0, io.EOF
	}
	if rem := r.to - r.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := r.s.readAt(p, r.off)
	var g *wire.GoneError
	if r.skip && n == 0 && errors.As(err, &g) && g.To > r.off {
		r.off = g.To
		return 0, nil
	}
	r.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (s *stream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.syncLocked()
	s.closed = true
	// Bytes lost at the end still take their offsets: a restarted daemon
	// continues after them.
	if st, err := s.file.Stat(); err == nil && st.Size() < s.end {
		_ = s.file.Truncate(s.end)
	}
	s.file.Close()
	close(s.notify)
	s.notify = make(chan struct{})
	if s.mapped {
		collectRingsSoon()
	}
}

// dropDisk releases the bytes the file held (it was removed).
func (s *stream) dropDisk() {
	s.mu.Lock()
	n := s.stored
	s.stored = 0
	s.mu.Unlock()
	s.pool.release(n)
}

func (s *stream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// StreamReader follows a session's output stream.
type StreamReader struct {
	s    *stream
	off  int64
	live bool
}

// Next blocks until output past the reader's offset exists and returns at
// most max bytes of it. It returns io.EOF when the session is deleted and
// ErrFellBehind when the reader lags past the in-memory buffer.
func (r *StreamReader) Next(ctx context.Context, max int) ([]byte, error) {
	for {
		end, ch := r.s.changed()
		if r.off < end {
			if r.live && end-r.off > ringSize {
				return nil, fmt.Errorf("%w: at offset %d, output is at %d; reconnect with from=%d to resume from disk", ErrFellBehind, r.off, end, r.off)
			}
			n := min(int64(max), end-r.off)
			buf := make([]byte, n)
			got, err := r.s.readAt(buf, r.off)
			r.off += int64(got)
			if got > 0 {
				// Once a reader has caught up it is live: from then on it
				// must keep up with the ring.
				if r.off >= end-ringSize {
					r.live = true
				}
				return buf[:got], nil
			}
			if err != nil && err != io.EOF {
				return nil, err
			}
		}
		if r.s.isClosed() {
			return nil, io.EOF
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Offset is the absolute offset of the next byte Next returns.
func (r *StreamReader) Offset() int64 { return r.off }

// Close releases the reader.
func (r *StreamReader) Close() {}
