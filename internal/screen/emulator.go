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
//
// Cost (BenchmarkEmulatorWrite, 2-core VM): a stream of plain lines runs at
// a few hundred MB/s, most of it held and skipped (see holder); cursor
// addressing and colors (top, vim redraws) go through x/vt at ~5-7 MB/s.
// That is too slow for a PTY read loop that must keep up with any program:
// feed it lazily, or from a goroutine of its own.
type Emulator struct {
	mu   sync.Mutex
	term *vt.Emulator
	hold *holder // nil: every write goes straight to term (tests)
	// batch collects what hold gives out during one call, for a single
	// term.Write: x/vt ends a grapheme cluster at the end of each write, so
	// more writes than the program made would split its characters.
	batch  []byte
	title  string
	closed bool

	replies *io.PipeWriter
	drained chan struct{}
}

// NewEmulator returns an empty screen of cols x rows (each at least 1).
// Close it to stop its goroutine.
func NewEmulator(cols, rows int) *Emulator {
	e := &Emulator{}
	e.start(max(cols, 1), max(rows, 1))
	e.hold = newHolder(max(cols, 1), max(rows, 1), func(p []byte) { e.batch = append(e.batch, p...) })
	return e
}

// start makes a new, empty terminal and its reply drain.
func (e *Emulator) start(cols, rows int) {
	term := vt.NewEmulator(cols, rows)
	// x/vt keeps only titles without ';' (it splits the OSC on every ';');
	// a title is everything after the first one.
	for _, cmd := range []int{0, 2} {
		term.RegisterOscHandler(cmd, func(data []byte) bool {
			_, title, _ := bytes.Cut(data, []byte{';'})
			e.title = strings.ToValidUTF8(string(title), "\uFFFD")
			return true
		})
	}
	e.term = term
	// The reply pipe is where x/vt writes its answers to queries (cursor
	// position, device attributes): each write blocks until read. Keep the
	// writer to close it directly: vt.Emulator.Close flips a flag that its
	// Read checks without a lock, a data race with the drain goroutine.
	e.replies, _ = term.InputPipe().(*io.PipeWriter)
	e.drained = make(chan struct{})
	go drain(term, e.drained)
}

// stop ends the reply drain of the current terminal.
func (e *Emulator) stop() {
	if e.replies != nil {
		_ = e.replies.CloseWithError(io.EOF)
	} else {
		_ = e.term.Close() // ends drain too, through the flag
	}
	<-e.drained
}

// drain reads and discards the terminal's replies: the program must never
// receive them (the session's real terminal already answered), and an
// unread reply would block Write forever.
func drain(term *vt.Emulator, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 512)
	for {
		if _, err := term.Read(buf); err != nil {
			return
		}
	}
}

// guard runs f on the terminal and survives a panic in x/vt (it has some on
// odd input, and the caller is a session's output loop): the screen then
// starts over, blank, at the same size.
func (e *Emulator) guard(f func()) {
	defer func() {
		if recover() == nil {
			return
		}
		cols, rows := e.term.Width(), e.term.Height()
		e.stop()
		e.start(cols, rows)
		e.batch = e.batch[:0]
		if e.hold != nil {
			e.hold.reset()
		}
	}()
	f()
}

// Write feeds output of the program to the screen. It never blocks on
// anything but the lock, and does nothing after Close.
func (e *Emulator) Write(p []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.guard(func() {
		if e.hold == nil {
			_, _ = e.term.Write(p)
			return
		}
		e.hold.write(p)
		e.writeBatch()
	})
}

// writeBatch gives the emulator what the holder let through.
func (e *Emulator) writeBatch() {
	if len(e.batch) > 0 {
		_, _ = e.term.Write(e.batch)
	}
	if cap(e.batch) > 1<<20 {
		e.batch = nil // one huge write should not pin its buffer
	} else {
		e.batch = e.batch[:0]
	}
}

// Resize changes the screen size (each at least 1), as the terminal of the
// session was resized.
func (e *Emulator) Resize(cols, rows int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.guard(func() {
		if e.hold != nil {
			e.hold.settle()
			e.hold.spill() // what came before the resize is laid out at the old size
			e.writeBatch()
			e.hold.resize(max(cols, 1), max(rows, 1))
		}
		e.term.Resize(max(cols, 1), max(rows, 1))
	})
}

// Snapshot returns what the screen shows now: one string per row with
// trailing spaces trimmed (a wide character is one rune in its row), the
// zero-based cursor, whether the alternate screen (full-screen programs) is
// active, and the title set by OSC 0 or 2.
func (e *Emulator) Snapshot() wire.Screen {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hold != nil && !e.closed {
		e.guard(func() {
			e.hold.settle()
			e.writeBatch()
		})
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
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if e.hold != nil {
		e.guard(func() {
			e.hold.settle()
			e.hold.spill() // held text is part of the last screen
			e.writeBatch()
		})
	}
	e.closed = true
	e.stop()
}
