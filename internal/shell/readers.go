package shell

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Output returns the raw output stream between absolute offsets from and to
// (to < 0 means up to now), and the number of bytes it will yield.
func (s *Session) Output(from, to int64) (io.Reader, int64, error) {
	end := s.out.size()
	if to < 0 {
		to = end
	}
	if from < 0 || from > to || to > end {
		return nil, 0, fmt.Errorf("range %d..%d is outside the output stream, which holds 0..%d: %w", from, to, end, wire.ErrBadRequest)
	}
	// A range that is not all kept is refused whole (never a short or
	// zero-filled answer): the error names the first missing range, so
	// that the caller can ask for the bytes around it.
	if sp, bad := s.out.missing(from, to); bad {
		return nil, 0, fmt.Errorf("session %s: %w", s.id, goneError(sp))
	}
	return s.out.reader(from, to), to - from, nil
}

// WriteInput types raw bytes into the terminal (attach clients).
func (s *Session) WriteInput(b []byte) error {
	p, err := s.shell(context.Background())
	if err != nil {
		return err
	}
	s.lastIn.Store(time.Now().UnixNano())
	s.mu.Lock()
	s.inputs++
	s.mu.Unlock()
	s.noteInput(p, viaAttach, string(b), nil)
	return s.write(p, b)
}

// NewReader follows the output stream from offset from (live after that);
// from < 0 means from the current end.
func (s *Session) NewReader(from int64) (*StreamReader, error) {
	end := s.out.size()
	if from < 0 {
		from = end
	}
	if from > end {
		return nil, fmt.Errorf("offset %d is past the end of the output stream (%d): %w", from, end, wire.ErrBadRequest)
	}
	return &StreamReader{s: s.out, off: from}, nil
}
