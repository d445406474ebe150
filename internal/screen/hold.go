package screen

import (
	"bytes"
	"cmp"
	"unicode/utf8"
)

// x/vt copies every cell of the screen, one by one, for each line it
// scrolls (and clones the line into its scrollback): on a 160x40 screen that
// is ~0.7 MB moved per output line, a few hundred KB/s of `cat`. Yet after a
// long run of ordinary text, the screen shows only its last lines. holder
// sits in front of the emulator and holds back runs of such text, dropping
// their middle, so a 50 MiB log costs a few screens of scrolling.
//
// Dropping is exact, not a guess. A "plain" run holds only printable text,
// CR, LF, BS, TAB and the SGR and EL sequences (colors, erase in line): it
// never moves the cursor up nor changes a mode. If the part Y kept at the
// end of a run starts with a CR (so its first column is known whatever came
// before) and holds at least 2*rows line feeds, then every row on screen
// after Y was scrolled in blank and written by Y alone, wherever the cursor
// started: the middle M before Y is invisible, in X+M+Y as in X+Y. Colors
// of blank cells can differ, but a snapshot has no colors. With a scroll
// region set (DECSTBM, as apt's progress bar does) rows above or below it
// keep what was written there, so nothing is dropped then.
//
// Its tracking of escape sequences only has to find where plain runs may
// start; a CAN written before the kept part forces the emulator's parser
// to its ground state, should the two ever disagree.
type holder struct {
	rows   int
	state  uint8
	osc    bool   // the string being skipped is an OSC (BEL ends it)
	seq    []byte // a CSI held back while it may still be SGR or EL
	run    []byte // plain text not yet given to the emulator
	lfs    int    // line feeds in run
	trimAt int
	region bool // a scroll region other than the whole screen may be set
	one    [1]byte
	out    func([]byte)
}

// Holder states: where the emulator's parser is, as far as plain runs go.
const (
	hGround uint8 = iota
	hEsc
	hEscInter
	hCSI // a CSI; held in seq while seq is not empty, else given through
	hString
	hStringEsc
)

const (
	can       = 0x18
	maxHeldCS = 64 // a longer CSI is no color; give it through
)

func newHolder(rows int, out func([]byte)) *holder {
	h := &holder{out: out}
	h.setRows(rows)
	return h
}

// setRows follows a resize, which also resets x/vt's scroll regions.
func (h *holder) setRows(rows int) {
	h.rows = rows
	h.trimAt = 4 * rows
	h.region = false
}

// flush gives the held plain run to the emulator. A held CSI stays: it
// shows nothing until it is complete.
func (h *holder) flush() {
	if len(h.run) > 0 {
		h.out(h.run)
		h.run = h.run[:0]
	}
	h.lfs = 0
	h.trimAt = 4 * h.rows
}

// spill gives everything held to the emulator: the run, then the CSI.
func (h *holder) spill() {
	h.flush()
	if len(h.seq) > 0 {
		h.out(h.seq)
		h.seq = h.seq[:0]
	}
}

func (h *holder) emit(c byte) {
	h.one[0] = c
	h.out(h.one[:])
}

func (h *holder) write(p []byte) {
	i := 0
	for i < len(p) {
		switch h.state {
		case hGround:
			i = h.ground(p, i)
		case hEsc:
			c := p[i]
			i++
			h.escape(c)
		case hEscInter:
			c := p[i]
			i++
			h.emit(c)
			switch {
			case c == 0x1b:
				h.state = hEsc
			case c >= 0x30 && c <= 0x7e, c == can, c == 0x1a, c >= 0x80:
				h.state = hGround
			}
		case hCSI:
			c := p[i]
			i++
			h.csi(c)
		case hString:
			j := i
			for j < len(p) && !h.endsString(p[j]) {
				j++
			}
			if j > i {
				h.out(p[i:j])
			}
			if j == len(p) {
				return
			}
			c := p[j]
			h.emit(c)
			i = j + 1
			if c == 0x1b {
				h.state = hStringEsc
			} else {
				h.state = hGround
			}
		case hStringEsc:
			if p[i] == '\\' {
				h.emit('\\')
				h.state = hGround
				i++
				continue
			}
			// ESC then anything else: the string ended and a new escape
			// sequence, whose ESC the emulator already has, begins.
			h.state = hEsc
		}
	}
}

func (h *holder) endsString(c byte) bool {
	switch c {
	case 0x1b, can, 0x1a:
		return true
	case 0x07:
		return h.osc
	}
	return false
}

// ground takes the plain run starting at p[i] into run and handles the
// byte that ends it.
func (h *holder) ground(p []byte, i int) int {
	start, lf := i, 0
scan:
	for i < len(p) {
		i = asciiRun(p, i)
		if i == len(p) {
			break
		}
		switch c := p[i]; {
		case c == '\n':
			lf++
			i++
		case c == '\r' || c == '\b':
			i++
		case c < utf8.RuneSelf:
			break scan
		case !utf8.FullRune(p[i:]):
			// A rune cut by the end of the write stays with the run; its
			// continuation bytes, alone in the next write, end the run
			// there, so the emulator still gets the bytes in order.
			i = len(p)
		default:
			r, size := utf8.DecodeRune(p[i:])
			if (r == utf8.RuneError && size == 1) || r <= 0x9f {
				break scan
			}
			i += size
		}
	}
	h.run = append(h.run, p[start:i]...)
	h.lfs += lf
	if h.lfs >= h.trimAt {
		h.trim()
	}
	if i == len(p) {
		return i
	}
	c := p[i]
	if c == 0x1b {
		h.seq = append(h.seq[:0], c)
		h.state = hEsc
		return i + 1
	}
	// A control, an invalid byte or a C1 control: to the emulator now.
	h.flush()
	size := 1
	if c >= utf8.RuneSelf {
		_, size = utf8.DecodeRune(p[i:])
	}
	h.out(p[i : i+size])
	if size == 1 {
		switch c {
		case 0x9b:
			h.state = hCSI
		case 0x9d:
			h.state, h.osc = hString, true
		case 0x90, 0x98, 0x9e, 0x9f:
			h.state, h.osc = hString, false
		}
	}
	return i + size
}

// escape handles the byte after ESC; seq holds the ESC unless it was
// already given through.
func (h *holder) escape(c byte) {
	if c == '[' {
		if len(h.seq) > 0 {
			h.seq = append(h.seq, c)
		} else {
			h.emit(c)
		}
		h.state = hCSI
		return
	}
	h.spill()
	if c == 0x1b {
		h.seq = append(h.seq[:0], c)
		return
	}
	h.emit(c)
	switch {
	case c == ']':
		h.state, h.osc = hString, true
	case c == 'P' || c == 'X' || c == '^' || c == '_':
		h.state, h.osc = hString, false
	case c >= 0x20 && c <= 0x2f:
		h.state = hEscInter
	case c >= 0x30 && c <= 0x7e:
		if c == 'c' { // RIS: a full reset, margins included
			h.region = false
		}
		h.state = hGround
	case c == can || c == 0x1a || c >= 0x80:
		h.state = hGround
	}
	// Other controls execute inside the sequence, which goes on.
}

func (h *holder) csi(c byte) {
	if len(h.seq) == 0 { // given through already
		h.emit(c)
		switch {
		case c == 0x1b:
			h.state = hEsc
		case c >= 0x40 && c <= 0x7e, c == can, c == 0x1a, c >= 0x80:
			h.state = hGround
		}
		return
	}
	switch {
	case c >= 0x20 && c <= 0x3f:
		h.seq = append(h.seq, c)
		if len(h.seq) > maxHeldCS {
			h.spill()
		}
	case c >= 0x40 && c <= 0x7e:
		h.seq = append(h.seq, c)
		h.state = hGround
		if plainCSI(h.seq) {
			h.run = append(h.run, h.seq...)
			h.seq = h.seq[:0]
			return
		}
		if c == 'r' {
			if full, ok := decstbm(h.seq, h.rows); ok {
				h.region = !full
			}
		}
		h.spill()
	default:
		// A control, DEL or a high byte inside the CSI: give the sequence
		// through and let the emulator make of it what it does.
		h.spill()
		h.csi(c)
	}
}

// plainCSI reports whether seq (ESC [ ... final) is SGR or EL: it only
// colors or erases within the cursor's line.
func plainCSI(seq []byte) bool {
	final := seq[len(seq)-1]
	if final != 'm' && final != 'K' {
		return false
	}
	for _, c := range seq[2 : len(seq)-1] {
		if (c < '0' || c > '9') && c != ';' && c != ':' {
			return false
		}
	}
	return true
}

// decstbm reads the DECSTBM seq (ESC [ top ; bottom r) as x/vt does:
// whether it sets the scroll region to the whole screen, and whether it
// does anything at all (x/vt ignores top >= bottom, and keeps a bottom
// below the screen as it is).
func decstbm(seq []byte, rows int) (full, ok bool) {
	top, bottom, _ := bytes.Cut(seq[2:len(seq)-1], []byte{';'})
	t, b := 1, rows
	if len(top) > 0 {
		t = atoiCapped(top)
	}
	if len(bottom) > 0 {
		b = atoiCapped(bottom)
	}
	if t < 0 || b < 0 {
		return false, true // not plain numbers: assume a region
	}
	t, b = max(t, 1), cmp.Or(b, rows)
	if t >= b {
		return false, false
	}
	return t == 1 && b == rows, true
}

// atoiCapped parses decimal digits, -1 for anything else.
func atoiCapped(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = min(n*10+int(c-'0'), maxCSIParam)
	}
	return n
}

// trim drops the middle of the held run, keeping a part that starts at a CR
// and holds 2*rows line feeds (see holder).
func (h *holder) trim() {
	keep := 2 * h.rows
	if h.region {
		h.trimAt = h.lfs + keep
		return
	}
	q, n := -1, 0
	for j := len(h.run) - 1; j >= 0; j-- {
		if h.run[j] == '\n' {
			if n++; n == keep {
				q = j
				break
			}
		}
	}
	c := -1
	if q >= 0 {
		c = bytes.LastIndexByte(h.run[:q+1], '\r')
	}
	if c <= 0 {
		// No CR (bare line feeds: raw-mode output) or nothing before it:
		// keep everything, and look again later.
		h.trimAt = h.lfs + keep
		return
	}
	h.run[0] = can
	h.run = h.run[:1+copy(h.run[1:], h.run[c:])]
	h.lfs = bytes.Count(h.run, newline)
	h.trimAt = max(4*h.rows, h.lfs+keep)
}
