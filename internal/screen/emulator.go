package screen

import (
	"bytes"
	"io"
	"strings"
	"sync"

	"github.com/charmbracelet/x/vt"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Emulator is the screen of one session: a terminal emulator fed with the
// session's output, answering "what does the terminal show now" for
// full-screen programs (vim, less, top) as well as for a plain shell.
//
// It is safe for concurrent use. Write never blocks on a reader: the
// emulator's answers to terminal queries are read and thrown away by a
// goroutine the Emulator owns until Close.
type Emulator struct {
	mu     sync.Mutex
	term   *vt.Emulator
	hold   *holder // nil: every write goes straight to term (tests)
	title  string
	closed bool

	replies *io.PipeWriter
	drained chan struct{}
}

// NewEmulator returns an empty screen of cols x rows (each at least 1).
// Close it to stop its goroutine.
func NewEmulator(cols, rows int) *Emulator {
	e := &Emulator{
		term:    vt.NewEmulator(max(cols, 1), max(rows, 1)),
		drained: make(chan struct{}),
	}
	// x/vt keeps only titles without ';' (it splits the OSC on every ';');
	// a title is everything after the first one.
	for _, cmd := range []int{0, 2} {
		e.term.RegisterOscHandler(cmd, func(data []byte) bool {
			_, title, _ := bytes.Cut(data, []byte{';'})
			e.title = strings.ToValidUTF8(string(title), "\uFFFD")
			return true
		})
	}
	// The reply pipe is where x/vt writes its answers to queries (cursor
	// position, device attributes): each write blocks until read. Keep the
	// writer to close it directly: vt.Emulator.Close flips a flag that its
	// Read checks without a lock, a data race with the drain goroutine.
	e.replies, _ = e.term.InputPipe().(*io.PipeWriter)
	e.hold = newHolder(max(rows, 1), func(p []byte) { _, _ = e.term.Write(p) })
	go e.drain()
	return e
}

// drain reads and discards the terminal's replies: the program must never
// receive them (the session's real terminal already answered), and an
// unread reply would block Write forever.
func (e *Emulator) drain() {
	defer close(e.drained)
	buf := make([]byte, 512)
	for {
		if _, err := e.term.Read(buf); err != nil {
			return
		}
	}
}

// Write feeds output of the program to the screen. It never blocks on
// anything but the lock, and does nothing after Close.
func (e *Emulator) Write(p []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if e.hold == nil {
		_, _ = e.term.Write(p)
		return
	}
	e.hold.write(p)
}

// Resize changes the screen size (each at least 1), as the terminal of the
// session was resized.
func (e *Emulator) Resize(cols, rows int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if e.hold != nil {
		e.hold.spill() // what came before the resize is laid out at the old size
		e.hold.setRows(max(rows, 1))
	}
	e.term.Resize(max(cols, 1), max(rows, 1))
}

// Snapshot returns what the screen shows now: one string per row with
// trailing spaces trimmed (a wide character is one rune in its row), the
// zero-based cursor, whether the alternate screen (full-screen programs) is
// active, and the title set by OSC 0 or 2.
func (e *Emulator) Snapshot() wire.Screen {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hold != nil && !e.closed {
		e.hold.flush()
	}
	cols, rows := e.term.Width(), e.term.Height()
	s := wire.Screen{
		Cols:      cols,
		Rows:      rows,
		Lines:     make([]string, rows),
		AltScreen: e.term.IsAltScreen(),
		Title:     e.title,
	}
	var b strings.Builder
	for y := range rows {
		b.Reset()
		for x := 0; x < cols; x++ {
			c := e.term.CellAt(x, y)
			switch {
			case c == nil:
				b.WriteByte(' ')
			case c.Width == 0 && c.Content == "":
				// The second column of a wide character.
			case c.Content == "":
				b.WriteByte(' ')
			default:
				b.WriteString(c.Content)
			}
		}
		s.Lines[y] = strings.ToValidUTF8(strings.TrimRight(b.String(), " "), "\uFFFD")
	}
	pos := e.term.CursorPosition()
	s.Cursor = wire.Cursor{Row: pos.Y, Col: pos.X}
	return s
}

// Close stops the reply drain. The Emulator ignores writes after Close;
// Snapshot still answers with the last screen.
func (e *Emulator) Close() {
	e.mu.Lock()
	if !e.closed && e.hold != nil {
		e.hold.spill() // held text is part of the last screen
	}
	if e.replies == nil && !e.closed {
		_ = e.term.Close() // ends drain too, through the flag
	}
	e.closed = true
	e.mu.Unlock()
	if e.replies != nil {
		_ = e.replies.CloseWithError(io.EOF)
	}
	<-e.drained
}
