package screen

import (
	"bytes"
	"cmp"
	"strconv"
	"unicode/utf8"
)

// holder sits between a session's output and x/vt, for two reasons.
//
// Speed: x/vt copies every cell of the screen, one by one, for each line it
// scrolls (and clones the line into its scrollback): on a 160x40 screen
// that is ~0.7 MB moved per output line, a few hundred KB/s of `cat`. Yet
// after a long run of ordinary text the screen shows only its last lines,
// so holder holds such runs back and drops their middle: a 50 MiB log costs
// a few screens of scrolling.
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
// keep what was written there, so nothing is dropped then. A CAN written
// before Y forces x/vt's parser to its ground state, should holder's
// tracking of escape sequences and x/vt's ever disagree.
//
// Safety: x/vt has traps, found by fuzzing. A control inside a CSI can make
// it dispatch a count of billions (seconds of work); a broken UTF-8 lead
// byte makes it swallow the next bytes, an ESC or a line feed included; an
// ESC that ends a DCS without ST leaves it swallowing all later output; a
// scroll margin past the bottom makes it panic. holder reads each escape
// sequence whole before giving it on, so it gives x/vt a tidied stream:
// controls executed ahead of the sequence (as a DEC terminal does), numbers
// capped, REP shortened, margins cut to the screen, U+FFFD for broken
// runes, an ST where a string ends with a bare ESC. Where the stream had
// none of these, x/vt sees the same bytes in the same order.
type holder struct {
	cols   int
	rows   int
	state  uint8
	osc    bool   // the string being skipped is an OSC (BEL ends it)
	seq    []byte // the escape sequence being read, held back until complete
	pend   []byte // the start of a UTF-8 rune cut by the end of a write
	escFed int    // 1: the ESC starting seq went to the emulator (see settle)
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
	hEsc          // after ESC (and intermediates), held in seq
	hCSI          // a CSI, held in seq
	hString       // OSC, DCS, SOS, PM, APC: given through
	hStringEsc
)

var st = []byte("\x1b\\")

const (
	can       = 0x18
	maxHeldCS = 64 // bytes of a sequence kept: a longer one is garbage
)

func newHolder(cols, rows int, out func([]byte)) *holder {
	h := &holder{out: out}
	h.resize(cols, rows)
	return h
}

// reset forgets everything held, for a terminal that starts over.
func (h *holder) reset() {
	h.state, h.escFed = hGround, 0
	h.seq, h.run, h.pend = h.seq[:0], h.run[:0], h.pend[:0]
	h.lfs, h.trimAt, h.region = 0, 4*h.rows, false
}

// resize follows a resize, which also resets x/vt's scroll regions.
func (h *holder) resize(cols, rows int) {
	h.cols, h.rows = cols, rows
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

// settle makes the emulator's screen current: the held run goes, and an
// ESC that may end a string is given, so the string takes effect (a title
// set by "ESC ] 0 ; t ESC"). The ESC stays first in seq, marked as given.
func (h *holder) settle() {
	h.flush()
	if h.state == hStringEsc {
		h.emit(0x1b)
		h.seq, h.escFed = append(h.seq[:0], 0x1b), 1
		h.state = hEsc
	}
}

// spill gives everything held to the emulator: the run, then the CSI.
func (h *holder) spill() {
	h.flush()
	if len(h.seq) > 0 {
		h.out(h.seq[h.escFed:])
		h.seq, h.escFed = h.seq[:0], 0
	}
}

func (h *holder) emit(c byte) {
	h.one[0] = c
	h.out(h.one[:])
}

func (h *holder) write(p []byte) {
	if len(h.pend) > 0 {
		p = h.finishRune(p)
	}
	i := 0
	for i < len(p) {
		switch h.state {
		case hGround:
			i = h.ground(p, i)
		case hEsc:
			if h.escape(p[i]) {
				i++
			}
		case hCSI:
			if h.csi(p[i]) {
				i++
			}
		case hString:
			j := i
			for j < len(p) && !h.endsString(p[j]) {
				j++
			}
			if j < len(p) && p[j] >= 0x80 {
				// x/vt ends an SOS, PM or APC at any high byte (a UTF-8
				// rune prints): what follows counts from ground state.
				if j > i {
					h.out(p[i:j])
				}
				i = j
				h.state = hGround
				continue
			}
			if j > i {
				h.out(p[i:j])
			}
			if j == len(p) {
				return
			}
			c := p[j]
			i = j + 1
			if c == 0x1b {
				h.state = hStringEsc
				continue
			}
			h.emit(c)
			h.state = hGround
		case hStringEsc:
			// ST ends the string; so does ESC followed by anything else, which
			// starts a new sequence: the emulator gets an ST for the ESC, and
			// the new sequence is read (and held) from its start.
			h.out(st)
			h.seq, h.escFed = append(h.seq[:0], 0x1b), 0
			h.state = hEsc
			if p[i] == '\\' {
				h.seq = h.seq[:0]
				h.state = hGround
				i++
			}
		}
	}
}

// execute gives a C0 control met inside an escape sequence to the emulator
// at once, ahead of the held sequence: it acts right away, and the
// sequence goes on, as in a DEC parser. (x/vt, given a control inside a
// CSI itself, can dispatch it with a wild count and spend seconds on it.)
func (h *holder) execute(c byte) {
	h.flush()
	h.emit(c)
}

// finishRune completes the rune cut by the previous write with the first
// bytes of p and returns the rest of p.
func (h *holder) finishRune(p []byte) []byte {
	n := len(h.pend)
	b := append(h.pend, p[:min(len(p), utf8.UTFMax-n)]...)
	if !utf8.FullRune(b) {
		h.pend = b
		return nil
	}
	h.pend = h.pend[:0]
	r, size := utf8.DecodeRune(b)
	if size > n {
		if r <= 0x9f { // a C1 control, spelled in UTF-8
			h.flush()
			h.out(b[:size])
		} else {
			h.hold(b[:size], 0)
		}
		return p[size-n:]
	}
	// Not a rune after all: the lead byte is invalid; the bytes after it
	// count again, as they would have in one write.
	rest := append([]byte(nil), b[1:n]...)
	h.flush()
	h.out(replacement)
	h.write(rest)
	return p
}

// hold appends plain bytes holding lf line feeds to the run. A run starts
// at a CR: what comes before goes through at once, so that the run, written
// later on its own, never begins inside a character (x/vt ends a grapheme
// cluster at the end of each write; a CR ends it anyway).
func (h *holder) hold(b []byte, lf int) {
	if len(h.run) == 0 {
		k := bytes.IndexByte(b, '\r')
		if k < 0 {
			h.out(b)
			return
		}
		if k > 0 {
			lf -= bytes.Count(b[:k], newline)
			h.out(b[:k])
			b = b[k:]
		}
	}
	h.run = append(h.run, b...)
	h.lfs += lf
	if h.lfs >= h.trimAt {
		h.trim()
	}
}

// escape handles a byte after ESC (and intermediates), held in seq. It
// reports whether c was consumed.
func (h *holder) escape(c byte) bool {
	switch {
	case c == can || c == 0x1a:
		h.spill()
		h.emit(c)
		h.state = hGround
	case c == 0x1b:
		h.spill()
		h.seq = append(h.seq, c)
	case c < 0x20:
		h.execute(c)
	case c == '[' && len(h.seq) == 1:
		h.seq = append(h.seq, c)
		h.state = hCSI
	case c >= 0x20 && c <= 0x2f:
		if len(h.seq) < maxHeldCS {
			h.seq = append(h.seq, c)
		}
	case c >= 0x30 && c <= 0x7e:
		first := len(h.seq) == 1
		h.seq = append(h.seq, c)
		h.spill()
		h.state = hGround
		switch {
		case first && c == ']':
			h.state, h.osc = hString, true
		case first && (c == 'P' || c == 'X' || c == '^' || c == '_'):
			h.state, h.osc = hString, false
		case first && c == 'c': // RIS: a full reset, margins included
			h.region = false
		}
	case c == 0x7f:
		// Ignored inside a sequence.
	default:
		// A high byte ends the sequence; it counts from ground state.
		h.spill()
		h.state = hGround
		return false
	}
	return true
}

// csi handles a byte of a CSI, held in seq. It reports whether c was
// consumed. Past maxHeldCS bytes, parameters are dropped: x/vt keeps at
// most 32 parameters anyway, and a sequence that long is noise.
func (h *holder) csi(c byte) bool {
	switch {
	case c == can || c == 0x1a:
		h.spill()
		h.emit(c)
		h.state = hGround
	case c == 0x1b:
		h.spill()
		h.seq = append(h.seq, c)
		h.state = hEsc
	case c < 0x20:
		h.execute(c)
	case c >= 0x30 && c <= 0x3f && isIntermediate(h.seq[len(h.seq)-1]):
		// A parameter after an intermediate: x/vt drops the sequence there
		// and goes back to ground state.
		h.seq = append(h.seq, c)
		h.spill()
		h.state = hGround
	case c <= 0x3f:
		if len(h.seq) < maxHeldCS {
			h.seq = append(h.seq, c)
		}
	case c <= 0x7e:
		h.seq = append(h.seq, c)
		h.state = hGround
		h.clampParams()
		if plainCSI(h.seq) {
			h.hold(h.seq[h.escFed:], 0)
			h.seq, h.escFed = h.seq[:0], 0
			return true
		}
		switch c {
		case 'b':
			h.clampRepeat()
		case 'r':
			h.clampRegion()
			if full, ok := decstbm(h.seq, h.rows); ok {
				h.region = !full
			}
		}
		h.spill()
	case c == 0x7f:
		// Ignored inside a sequence.
	default:
		h.spill()
		h.state = hGround
		return false
	}
	return true
}

// clampParams caps every number of the held CSI at maxCSIParam. x/vt takes
// numbers of any size and loops on some (a back tab of 10^10 stops runs for
// seconds); no terminal has 65536 of anything.
func (h *holder) clampParams() {
	p := params(h.seq)
	long, digits := false, 0
	for _, c := range p {
		if c >= '0' && c <= '9' {
			if digits++; digits > 5 {
				long = true
				break
			}
		} else {
			digits = 0
		}
	}
	if !long {
		return
	}
	start := len(h.seq) - len(p) - 1
	out := append([]byte(nil), h.seq[:start]...)
	n, in := 0, false
	for _, c := range p {
		if c >= '0' && c <= '9' {
			n, in = min(n*10+int(c-'0'), maxCSIParam), true
			continue
		}
		if in {
			out = strconv.AppendInt(out, int64(n), 10)
			n, in = 0, false
		}
		out = append(out, c)
	}
	if in {
		out = strconv.AppendInt(out, int64(n), 10)
	}
	h.seq = append(out, h.seq[len(h.seq)-1])
}

func isIntermediate(c byte) bool { return c >= 0x20 && c <= 0x2f }

// params returns the parameter and intermediate bytes of the CSI seq
// (ESC [ ... final, or 0x9b ... final).
func params(seq []byte) []byte {
	if seq[0] == 0x9b {
		return seq[1 : len(seq)-1]
	}
	return seq[2 : len(seq)-1]
}

func (h *holder) endsString(c byte) bool {
	switch c {
	case 0x1b, can, 0x1a:
		return true
	case 0x07:
		return h.osc
	}
	return c >= 0x80 && !h.osc
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
			// A rune cut by the end of the write waits for the next one.
			h.hold(p[start:i], lf)
			h.pend = append(h.pend[:0], p[i:]...)
			return len(p)
		default:
			r, size := utf8.DecodeRune(p[i:])
			if (r == utf8.RuneError && size == 1) || r <= 0x9f {
				break scan
			}
			i += size
		}
	}
	h.hold(p[start:i], lf)
	if i == len(p) {
		return i
	}
	c := p[i]
	if c == 0x1b {
		h.seq, h.escFed = append(h.seq[:0], c), 0
		h.state = hEsc
		return i + 1
	}
	if c == 0x9b { // a raw 8-bit CSI, held as ESC [ is
		h.seq, h.escFed = append(h.seq[:0], c), 0
		h.state = hCSI
		return i + 1
	}
	// A control, an invalid byte or a C1 control: to the emulator now.
	h.flush()
	size := 1
	if c >= utf8.RuneSelf {
		_, size = utf8.DecodeRune(p[i:])
	}
	if c >= 0xc2 && c <= 0xf4 && size == 1 {
		// A UTF-8 lead byte without its continuation: x/vt would take the
		// next bytes as the rest of the rune, whatever they are (an ESC, a
		// line feed). It gets a U+FFFD instead, as the rune it shows.
		h.out(replacement)
		return i + 1
	}
	h.out(p[i : i+size])
	if size == 1 {
		switch c {
		case 0x9d:
			h.state, h.osc = hString, true
		case 0x90, 0x98, 0x9e, 0x9f:
			h.state, h.osc = hString, false
		}
	}
	return i + size
}

// plainCSI reports whether seq (ESC [ ... final) is SGR or EL: it only
// colors or erases within the cursor's line.
func plainCSI(seq []byte) bool {
	final := seq[len(seq)-1]
	if final != 'm' && final != 'K' {
		return false
	}
	for _, c := range params(seq) {
		if (c < '0' || c > '9') && c != ';' && c != ':' {
			return false
		}
	}
	return true
}

// clampRepeat shortens a REP (ESC [ n b) whose count would print more than
// fills the screen a few times: x/vt prints (and scrolls) it one character
// at a time, and n goes up to 65535. Once the screen is all that character,
// only the final column matters, so n keeps its remainder modulo a whole
// number of rows (of narrow and of wide characters alike).
func (h *holder) clampRepeat() {
	n := atoiCapped(params(h.seq))
	filled := h.cols * (h.rows + 2)
	period := h.cols * max(h.cols/2, 1)
	if n <= filled+period {
		return
	}
	n = filled + (n-filled)%period
	h.seq = append(append(h.seq[:len(h.seq)-len(params(h.seq))-1], strconv.Itoa(n)...), 'b')
}

// clampRegion keeps the bottom margin of a DECSTBM on the screen: x/vt
// keeps a margin past the bottom as it is, and panics on it later.
func (h *holder) clampRegion() {
	p := params(h.seq)
	top, bottom, ok := bytes.Cut(p, []byte{';'})
	if !ok || atoiCapped(bottom) <= h.rows || atoiCapped(top) < 0 {
		return
	}
	start := len(h.seq) - len(p) - 1
	h.seq = append(append(append(h.seq[:start], top...), ';'), strconv.Itoa(h.rows)+"r"...)
}

// decstbm reads the DECSTBM seq (ESC [ top ; bottom r) as x/vt does:
// whether it sets the scroll region to the whole screen, and whether it
// does anything at all (x/vt ignores top >= bottom, and keeps a bottom
// below the screen as it is).
func decstbm(seq []byte, rows int) (full, ok bool) {
	top, bottom, _ := bytes.Cut(params(seq), []byte{';'})
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
