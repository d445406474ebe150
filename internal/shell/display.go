package shell

import (
	"fmt"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Resize changes the terminal size.
func (s *Session) Resize(cols, rows int) (wire.Session, error) {
	if cols < 1 || rows < 1 || cols > 1000 || rows > 1000 {
		return wire.Session{}, fmt.Errorf("cols and rows must be between 1 and 1000, got %dx%d: %w", cols, rows, wire.ErrBadRequest)
	}
	s.mu.Lock()
	s.cols, s.rows = cols, rows
	if s.p != nil {
		s.p.setSize(cols, rows)
	}
	off := s.out.size()
	info := s.infoLocked()
	s.mu.Unlock()
	s.emuMu.Lock()
	s.resizes = append(s.resizes, resizeAt{off: off, cols: cols, rows: rows})
	s.emuMu.Unlock()
	s.persist()
	s.noteSession(wire.EventSessionResized, wire.SourceAPI, wire.SessionData{Cols: cols, Rows: rows})
	return info, nil
}

// screenLag bounds how much output the emulator replays when it has
// fallen behind: older output is skipped (a full-screen program redraws).
const screenLag = 2 << 20

// Screen renders what a terminal showing the session displays now. The
// emulator is fed lazily, here, so that it costs nothing on the read loop.
func (s *Session) Screen() (wire.Screen, error) {
	end := s.out.size()
	s.emuMu.Lock()
	defer s.emuMu.Unlock()
	if end-s.emuOff > screenLag {
		// Start afresh at the size in force there.
		from := end - screenLag
		cols, rows := s.sizeAt(from)
		s.emu.Close()
		s.emu = newEmulator(cols, rows)
		s.emuOff = from
	}
	buf := make([]byte, 64<<10)
	for s.emuOff < end {
		stop := end
		for len(s.resizes) > 0 && s.resizes[0].off <= s.emuOff {
			s.emu.Resize(s.resizes[0].cols, s.resizes[0].rows)
			s.resizes = s.resizes[1:]
		}
		if len(s.resizes) > 0 && s.resizes[0].off < stop {
			stop = s.resizes[0].off
		}
		n := min(int64(len(buf)), stop-s.emuOff)
		got, err := s.out.readAt(buf[:n], s.emuOff)
		if got > 0 {
			s.emu.Write(buf[:got])
			s.emuOff += int64(got)
		}
		if err != nil && got == 0 {
			break
		}
	}
	for len(s.resizes) > 0 && s.resizes[0].off <= s.emuOff {
		s.emu.Resize(s.resizes[0].cols, s.resizes[0].rows)
		s.resizes = s.resizes[1:]
	}
	return s.emu.Snapshot(), nil
}

// sizeAt is the terminal size in force at offset off; emuMu is held.
func (s *Session) sizeAt(off int64) (int, int) {
	s.mu.Lock()
	cols, rows := s.cols, s.rows
	s.mu.Unlock()
	for i := len(s.resizes) - 1; i >= 0; i-- {
		if s.resizes[i].off <= off {
			return s.resizes[i].cols, s.resizes[i].rows
		}
	}
	return cols, rows
}
