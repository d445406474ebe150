package shell

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/wire"
)

// ringSize is how much of the newest output stays in memory (API.md: at
// least 8 MiB).
const ringSize = 8 << 20

// stream is a session's output stream: every byte the terminal showed,
// markers removed, addressed by absolute offset. The newest ringSize bytes
// live in memory; all of it is appended to a file so that older ranges stay
// readable while the session exists.
type stream struct {
	mu     sync.Mutex
	file   *os.File
	ring   []byte
	end    int64 // offset one past the newest byte
	base   int64 // first offset the file holds (0 unless truncated)
	synced int64 // offset up to which the file holds the stream
	notify chan struct{}
	closed bool
	werr   error // first disk write error, reported once
}

// syncAhead is how much of the newest output may be in memory only. Output
// goes to the file in blocks (a write per terminal read cost a tenth of
// the throughput) and at once when the terminal falls silent (see
// Session.readPTY); within syncAhead of the end, reads are served from
// the ring.
const syncAhead = 256 << 10

func openStream(path string) (*stream, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("output log %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &stream{file: f, ring: make([]byte, ringSize), notify: make(chan struct{})}
	// A restarted daemon continues the stream where the old one stopped;
	// the tail of the old stream is reloaded into memory.
	s.end = st.Size()
	s.synced = s.end
	if s.end > 0 {
		from := max(0, s.end-ringSize)
		buf := make([]byte, s.end-from)
		if _, err := f.ReadAt(buf, from); err == nil {
			for i, b := range buf {
				s.ring[(from+int64(i))%ringSize] = b
			}
		}
	}
	return s, nil
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
		s.writeLocked(p)
		s.synced = s.end + int64(len(p))
	}
	q := p
	if len(q) > ringSize {
		q = q[len(q)-ringSize:]
	}
	at := (s.end + int64(len(p)-len(q))) % ringSize
	n := copy(s.ring[at:], q)
	copy(s.ring, q[n:])
	s.end += int64(len(p))
	ch := s.notify
	s.notify = make(chan struct{})
	s.mu.Unlock()
	close(ch)
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
	start := s.synced % ringSize
	n := s.end - s.synced
	if start+n <= ringSize {
		s.writeLocked(s.ring[start : start+n])
	} else {
		s.writeLocked(s.ring[start:])
		s.writeLocked(s.ring[:start+n-ringSize])
	}
	s.synced = s.end
}

func (s *stream) writeLocked(p []byte) {
	if s.werr == nil {
		if _, err := s.file.Write(p); err != nil {
			s.werr = err
		}
	}
}

// copyTo appends the bytes [from, to) to f: copied by the kernel from the
// stream file (no trip through user space, which cost a tenth of a large
// command's time), or through memory when that fails.
func (s *stream) copyTo(f *os.File, from, to int64) (int64, error) {
	s.mu.Lock()
	if to > s.synced {
		s.syncLocked()
	}
	src, ok := s.file, s.werr == nil && !s.closed && from >= s.base
	s.mu.Unlock()
	var done int64
	if ok {
		off := from
		for off < to {
			n, err := unix.CopyFileRange(int(src.Fd()), &off, int(f.Fd()), nil, int(to-off), 0)
			if err != nil || n == 0 {
				break
			}
			done += int64(n)
		}
	}
	if from+done < to {
		n, err := io.Copy(f, s.reader(from+done, to))
		return done + n, err
	}
	return done, nil
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
	if off < s.base {
		s.mu.Unlock()
		return 0, fmt.Errorf("offset %d is no longer kept (oldest is %d): %w", off, s.base, wire.ErrNotFound)
	}
	if n := int64(len(p)); off+n > s.end {
		p = p[:s.end-off]
	}
	if off >= s.end-ringSize {
		start := off % ringSize
		n := copy(p, s.ring[start:])
		if n < len(p) {
			n += copy(p[n:], s.ring)
		}
		s.mu.Unlock()
		return n, nil
	}
	f := s.file
	s.mu.Unlock()
	return f.ReadAt(p, off)
}

// reader returns the bytes [from, to) as a stream.
func (s *stream) reader(from, to int64) io.Reader {
	return &rangeReader{s: s, off: from, to: to}
}

type rangeReader struct {
	s       *stream
	off, to int64
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.off >= r.to {
		return 0, io.EOF
	}
	if rem := r.to - r.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := r.s.readAt(p, r.off)
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
	s.file.Close()
	close(s.notify)
	s.notify = make(chan struct{})
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
