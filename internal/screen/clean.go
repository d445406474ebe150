package screen

import (
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxPadColumn bounds how far cursor movement may carry the cursor past the
// end of a line. A real terminal clamps at its right margin; without one, a
// stream of "ESC[9999Cx" would turn a few input bytes into kilobytes of
// spaces (and a 50 MiB stream into gigabytes).
const maxPadColumn = 512

// maxCSIParam caps a parsed CSI parameter so digits never overflow.
const maxCSIParam = 1 << 16

// Parser states. Only ground state prints; every other state is inside an
// escape sequence whose bytes are dropped.
const (
	stGround    uint8 = iota
	stEsc             // after ESC
	stEscInter        // ESC + intermediate bytes, waiting for the final
	stCSI             // ESC [ or 8-bit CSI, until a final byte 0x40-0x7E
	stString          // OSC, DCS, SOS, PM, APC: until BEL or ST
	stStringEsc       // ESC inside a string: ST if '\' follows
)

// textByte marks the ASCII bytes that print as themselves: NUL (kept: a
// valid character in JSON), TAB, and 0x20-0x7E.
var textByte = func() (t [256]bool) {
	t[0] = true
	t['\t'] = true
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	return t
}()

var (
	replacement = []byte(string(utf8.RuneError))
	newline     = []byte{'\n'}
)

// asciiRun returns the end of the run of printable ASCII (textByte) that
// starts at p[i]. Plain text is nearly all such runs, so it tests eight
// bytes at a time: no byte below 0x20, none at or above 0x7F.
func asciiRun(p []byte, i int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for i+8 <= len(p) {
		x := binary.LittleEndian.Uint64(p[i:])
		if ((x-0x20*ones)&^x|(x+ones)|x)&highs != 0 {
			break
		}
		i += 8
	}
	for i < len(p) && textByte[p[i]] {
		i++
	}
	return i
}

// Clean returns raw as a person would read it (no truncation): escape
// sequences removed, "\r\n" as "\n", carriage-return overwrites,
// backspaces and in-line cursor movement and erasure applied, invalid UTF-8
// replaced by U+FFFD, NUL kept, other control characters (C0 and C1)
// dropped. Text drawn elsewhere on the screen between a saved and a
// restored cursor (apt's progress bar on the bottom row) is dropped too, and
// so is what a full-screen program draws on the alternate screen (DEC
// modes 47, 1047, 1049): it is gone once the program switches back.
//
// The last 128 lines at least stay within reach of the cursor: a program
// that moves it up to redraw a block of lines (docker's layer bars, rich's
// multi-line progress) leaves the block in its last state. An absolute
// row (ESC[H, a `clear`) is unknown here and ignored.
func Clean(raw []byte) string {
	t := NewText(0)
	t.out.head = make([]byte, 0, len(raw))
	t.Write(raw)
	s, _, _ := t.Result()
	return s
}

// Text accumulates a stream chunk by chunk (chunks split anywhere: inside an
// escape sequence, inside a UTF-8 rune, between \r and \n) and keeps only the
// first and last max/2 characters in memory, counting what it drops. Its
// output is the same as [Clean] of the concatenated chunks, whatever the
// split.
//
// Characters are runes, not display columns: a wide CJK character or an
// emoji counts as one. Besides head and tail, a Text holds the last 128 to
// 256 lines (see [Clean]) and the line being written, whole until its
// newline (a progress bar rewritten with \r stays small; a 50 MiB line
// without a newline is held).
//
// A Text is not safe for concurrent use.
type Text struct {
	state uint8

	// CSI being parsed: its first parameter, and whether it can matter to
	// the text at all (no private marker, no intermediates).
	csiN      int
	csiSep    bool
	csiIgnore bool
	csiPriv   bool // a DEC private mode sequence (ESC[?...h/l)

	// pend holds the first bytes of a UTF-8 rune cut by a chunk boundary.
	pend  [utf8.UTFMax]byte
	npend int
	// eof makes an incomplete rune at the end of the input invalid instead
	// of pending (set only on the throwaway copy Result works on).
	eof bool

	// The current line, valid UTF-8, and the cursor in it: cur is a byte
	// offset at a rune boundary, col the rune column of cur, pad the
	// columns the cursor stands past the end of the line (pad > 0 only when
	// cur == len(line)).
	line      []byte
	lineRunes int
	cur       int
	col       int
	pad       int

	// A saved cursor (ESC 7, CSI s) followed by a jump to another row means
	// the program is drawing somewhere else on the screen (apt's progress
	// bar on the last row) until it restores the cursor: that drawing is
	// not part of the flow of text, so it is dropped while away.
	saved bool
	away  bool
	// alt: the program switched to the alternate screen (vim, less,
	// top): what it draws there is gone once it switches back, as on a
	// terminal, so it is dropped (away stays set meanwhile).
	alt                                 bool
	savedCol, savedLine, lines, savedAt int

	// win holds the last finished lines, oldest first, for a program that
	// moves the cursor up to redraw them (docker's layer bars, multi-line
	// progress): they go to out only once out of reach. at is the line of
	// the cursor: win[at], whose content is then in line, or len(win) for
	// the open line at the bottom, kept in open while the cursor is above.
	win []segment
	// winBytes estimates the bytes in win: lines rewritten from above
	// are not counted again, so newline recounts it when it drops lines.
	winBytes int
	at       int
	open     segment
	free     [][]byte

	out accumulator
}

// NewText returns a Text that keeps at most max characters (plus the note
// saying how many were left out); max <= 0 means no limit.
func NewText(max int) *Text {
	t := &Text{}
	if max <= 0 {
		t.out.head1 = -1
	} else {
		t.out.head1 = max / 2
		t.out.tail1 = max - max/2
	}
	return t
}

// Write feeds the next chunk of the raw stream. It never fails.
func (t *Text) Write(p []byte) (int, error) {
	n := len(p)
	if t.npend > 0 {
		p = t.finishPending(p)
	}
	t.feed(p)
	return n, nil
}

// finishPending completes the rune cut by the previous chunk boundary with
// the first bytes of p and returns the rest of p.
func (t *Text) finishPending(p []byte) []byte {
	var buf [2 * utf8.UTFMax]byte
	b := append(buf[:0], t.pend[:t.npend]...)
	b = append(b, p[:min(len(p), utf8.UTFMax-t.npend)]...)
	if !utf8.FullRune(b) {
		// Still cut: p was shorter than the rest of the rune.
		t.npend = copy(t.pend[:], b)
		return nil
	}
	r, size := utf8.DecodeRune(b)
	if size > t.npend {
		used := size - t.npend
		t.npend = 0
		t.putRune(r, b[:size])
		return p[used:]
	}
	// The pending bytes do not start a valid rune after all: the first one is
	// invalid, and the others are decoded again, as they would have been
	// had the stream arrived in one piece.
	var rest [utf8.UTFMax]byte
	nrest := copy(rest[:], t.pend[1:t.npend])
	t.npend = 0
	t.putText(replacement, 1)
	t.feed(rest[:nrest])
	return p
}

// putRune writes one decoded non-ASCII rune: C1 controls are invisible.
func (t *Text) putRune(r rune, enc []byte) {
	if r >= 0x80 && r <= 0x9f {
		return
	}
	t.putText(enc, 1)
}

// feed runs the parser over p. Ground state is the hot path: it scans runs of
// printable text and hands each run over in one piece.
func (t *Text) feed(p []byte) {
	i := 0
	for i < len(p) {
		if t.state != stGround {
			i = t.escape(p, i)
			continue
		}
		start, runes := i, 0
		for i < len(p) {
			j := asciiRun(p, i)
			runes += j - i
			i = j
			if i == len(p) || p[i] < 0x80 {
				break
			}
			if !utf8.FullRune(p[i:]) {
				break
			}
			r, size := utf8.DecodeRune(p[i:])
			if (r == utf8.RuneError && size == 1) || r <= 0x9f {
				break
			}
			i += size
			runes++
		}
		if i > start && !t.away {
			if len(t.line) == 0 && t.pad == 0 {
				// A whole line with nothing under it goes straight to the
				// output ("\r\n" ends a line exactly as "\n" does).
				nl := 0
				if i < len(p) && p[i] == '\n' {
					nl = 1
				} else if i+1 < len(p) && p[i] == '\r' && p[i+1] == '\n' {
					nl = 2
				}
				if nl > 0 {
					t.line = append(t.line, p[start:i]...)
					t.lineRunes = runes
					t.newline()
					i += nl
					continue
				}
			}
			t.putText(p[start:i], runes)
		}
		if i == len(p) {
			return
		}
		c := p[i]
		if c < 0x80 {
			if c == 0x1b {
				t.state = stEsc
			} else {
				t.control(c)
			}
			i++
			continue
		}
		if !utf8.FullRune(p[i:]) && !t.eof {
			t.npend = copy(t.pend[:], p[i:])
			return
		}
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			if c == 0x9b {
				// A raw 8-bit CSI (it is not part of any valid rune).
				t.startCSI()
			} else if !t.away {
				t.putText(replacement, 1)
			}
		case t.away:
		default:
			t.putRune(r, p[i:i+size])
		}
		i += size
	}
}

// control executes a C0 control character (ESC excluded).
func (t *Text) control(c byte) {
	if t.away {
		return
	}
	switch c {
	case '\n':
		t.newline()
	case '\r':
		t.cur, t.col, t.pad = 0, 0, 0
	case '\b':
		t.left(1)
	}
	// Every other control (BEL, SO, SI, ...) shows nothing.
}

func (t *Text) startCSI() {
	t.state = stCSI
	t.csiN, t.csiSep, t.csiIgnore, t.csiPriv = 0, false, false, false
}

// escape consumes bytes of an escape sequence from p[i:] and returns where
// it stopped: at the end of p, or just after the sequence ended.
func (t *Text) escape(p []byte, i int) int {
	for ; i < len(p); i++ {
		c := p[i]
		// Controls act the same in every escape state (as in a DEC parser):
		// CAN and SUB abort, ESC restarts, the rest execute in place.
		if c < 0x20 {
			switch {
			case t.state == stString || t.state == stStringEsc:
				switch c {
				case 0x07, 0x18, 0x1a: // BEL ends a string (xterm); CAN, SUB abort
					t.state = stGround
					return i + 1
				case 0x1b:
					t.state = stStringEsc
				}
			case c == 0x18 || c == 0x1a:
				t.state = stGround
				return i + 1
			case c == 0x1b:
				t.state = stEsc
			default:
				t.control(c)
			}
			continue
		}
		switch t.state {
		case stEsc:
			switch {
			case c == '[':
				t.startCSI()
			case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
				t.state = stString
			case c >= 0x20 && c <= 0x2f:
				t.state = stEscInter
			case c >= 0x30 && c <= 0x7e:
				t.state = stGround
				switch c {
				case '7': // DECSC
					t.saveCursor()
				case '8': // DECRC
					t.restoreCursor()
				}
				return i + 1
			case c == 0x7f:
			default:
				// Not an escape sequence after all: print from here.
				t.state = stGround
				return i
			}
		case stEscInter:
			switch {
			case c >= 0x20 && c <= 0x2f, c == 0x7f:
			case c >= 0x30 && c <= 0x7e:
				t.state = stGround
				return i + 1
			default:
				t.state = stGround
				return i
			}
		case stCSI:
			switch {
			case c >= '0' && c <= '9':
				if !t.csiSep {
					t.csiN = min(t.csiN*10+int(c-'0'), maxCSIParam)
				}
			case c == ';' || c == ':':
				t.csiSep = true
			case c >= 0x3c && c <= 0x3f:
				// A private marker (ESC[?25l): nothing for plain text,
				// but for the alternate screen.
				t.csiPriv = c == '?' && !t.csiIgnore && t.csiN == 0 && !t.csiSep
				t.csiIgnore = true
			case c >= 0x20 && c <= 0x2f:
				t.csiIgnore, t.csiPriv = true, false
			case c >= 0x40 && c <= 0x7e:
				t.state = stGround
				if !t.csiIgnore {
					t.csi(c)
				} else if t.csiPriv && (c == 'h' || c == 'l') {
					t.altScreen(c == 'h', t.csiN)
				}
				return i + 1
			case c == 0x7f:
			default:
				// A byte no CSI can hold (binary garbage): the sequence was
				// not one; print from here rather than swallow text.
				t.state = stGround
				return i
			}
		case stString:
			// Skip the string body fast: only BEL, CAN, SUB and ESC end it.
			for i < len(p) && p[i] >= 0x20 {
				i++
			}
			i--
		case stStringEsc:
			if c == '\\' {
				t.state = stGround
				return i + 1
			}
			// ESC then anything else ends the string and starts a new
			// escape sequence with that byte.
			t.state = stEsc
			i--
		}
	}
	return i
}

// csi applies the CSI sequences that change what a line reads; every other
// one (colors, modes, cursor rows, scrolling) is dropped.
func (t *Text) csi(final byte) {
	n := t.csiN
	count := max(n, 1) // a missing or zero count means one
	switch final {
	case 's':
		if n == 0 && !t.csiSep {
			t.saveCursor()
		}
		return
	case 'u':
		t.restoreCursor()
		return
	case 'H', 'f', 'A', 'B', 'd', 'E', 'F':
		// Another row: with a saved cursor to come back to, what follows is
		// drawn elsewhere. Without one, relative moves go up and down the
		// lines still in reach; an absolute row (a `clear`, a full redraw)
		// is unknown here and dropped.
		if t.saved {
			t.away = true
			return
		}
		if t.away {
			return
		}
		switch final {
		case 'A', 'F':
			t.moveTo(max(t.at-count, 0), final == 'A')
		case 'B', 'E':
			t.moveTo(min(t.at+count, len(t.win)), final == 'B')
		}
		return
	}
	if t.away {
		return
	}
	switch final {
	case 'K': // EL: erase in line
		t.erase(n)
	case 'J': // ED: the cursor's line as EL, and the lines below for 0
		if n < 2 {
			t.erase(n)
		}
		if n == 0 {
			t.eraseBelow()
		}
	case 'D': // CUB
		t.left(count)
	case 'C': // CUF
		t.right(count)
	case 'G', '`': // CHA, HPA: 1-based column
		t.cur, t.col, t.pad = 0, 0, 0
		t.right(count - 1)
	case 'X': // ECH: blank count characters, cursor stays
		t.blank(t.cur, count)
	case 'P': // DCH: delete count characters, the rest shifts left
		end := t.runeEnd(t.cur, count)
		t.lineRunes -= utf8.RuneCount(t.line[t.cur:end])
		t.line = slices.Delete(t.line, t.cur, end)
	case '@': // ICH: insert count blanks, the rest shifts right
		if t.cur < len(t.line) {
			// What is pushed past the (assumed) right margin is lost, as on
			// a terminal: repeated inserts never grow a line without bound.
			limit := max(t.lineRunes, maxPadColumn)
			count = min(count, maxPadColumn)
			t.line = slices.Insert(t.line, t.cur, spaces(count)...)
			t.lineRunes += count
			if t.lineRunes > limit {
				t.line = t.line[:t.runeEnd(0, limit)]
				t.lineRunes = limit
			}
		}
	}
}

// altScreen follows DEC private modes 47, 1047 and 1049: the alternate
// screen, on (set) or off.
func (t *Text) altScreen(set bool, mode int) {
	if mode != 47 && mode != 1047 && mode != 1049 || set == t.alt {
		return
	}
	t.alt, t.away = set, set
	if !set {
		t.saved = false
	}
}

func (t *Text) saveCursor() {
	if t.away {
		return // the position to come back to is the one saved first
	}
	t.saved = true
	t.savedCol = t.col + t.pad
	t.savedLine = t.lines
	t.savedAt = t.at
}

func (t *Text) restoreCursor() {
	if !t.saved {
		return
	}
	t.saved, t.away = false, t.alt
	// Back on a finished line is out of reach. The line may have changed
	// meanwhile, so the saved column is found again rather than trusted as
	// a byte offset.
	if t.savedLine == t.lines && t.savedAt == t.at {
		t.cur, t.col, t.pad = 0, 0, 0
		t.right(t.savedCol)
	}
}

// erase implements EL: 0 to the end of the line, 1 up to and including the
// cursor, 2 the whole line (the cursor stays where it is).
func (t *Text) erase(mode int) {
	switch mode {
	case 0:
		t.line = t.line[:t.cur]
		t.lineRunes = t.col
	case 1:
		if t.cur == len(t.line) {
			t.clearLine()
			return
		}
		t.blank(0, t.col+1)
	case 2:
		t.clearLine()
	}
}

// clearLine empties the line and keeps the cursor's column.
func (t *Text) clearLine() {
	column := t.col + t.pad
	t.line = t.line[:0]
	t.lineRunes, t.cur, t.col, t.pad = 0, 0, 0, 0
	t.pad = min(column, maxPadColumn)
}

// blank overwrites up to n characters from byte offset from with spaces,
// without moving the cursor. Blanks past the end of the line are not
// written: they would only be invented trailing spaces.
func (t *Text) blank(from, n int) {
	end := t.runeEnd(from, n)
	k := utf8.RuneCount(t.line[from:end])
	if k == end-from {
		copy(t.line[from:end], spaces(k))
		return
	}
	t.line = slices.Replace(t.line, from, end, spaces(k)...)
	if t.cur > from {
		// Only reached from erase(1), with the cursor's rune included.
		t.cur = from + k - 1
	}
}

// runeEnd returns the byte offset n runes after byte offset from (or the
// end of the line).
func (t *Text) runeEnd(from, n int) int {
	i := from
	for ; n > 0 && i < len(t.line); n-- {
		if t.line[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, size := utf8.DecodeRune(t.line[i:])
		i += size
	}
	return i
}

func (t *Text) left(n int) {
	if t.pad > 0 {
		d := min(n, t.pad)
		t.pad -= d
		n -= d
	}
	for ; n > 0 && t.cur > 0; n-- {
		_, size := utf8.DecodeLastRune(t.line[:t.cur])
		t.cur -= size
		t.col--
	}
}

func (t *Text) right(n int) {
	end := t.runeEnd(t.cur, n)
	k := utf8.RuneCount(t.line[t.cur:end])
	t.cur, t.col = end, t.col+k
	if n -= k; n > 0 {
		limit := max(t.lineRunes, maxPadColumn)
		t.pad = min(t.pad+n, max(limit-t.lineRunes, 0))
	}
}

// maxRowsUp is how many finished lines a cursor-up can reach: more than
// any terminal has rows.
const maxRowsUp = 128

// maxWinBytes bounds the memory of those lines (a file of long lines must
// not stay in memory 256 lines at a time).
const maxWinBytes = 1 << 20

func (t *Text) newline() {
	if t.at < len(t.win) {
		// Not the bottom line: down to the next one, as a terminal does.
		t.moveTo(t.at+1, false)
		return
	}
	t.win = append(t.win, segment{t.line, t.lineRunes})
	t.winBytes += len(t.line)
	t.lines++
	if len(t.win) >= 2*maxRowsUp || t.winBytes > maxWinBytes {
		// Out of reach: to the output, in one batch so each line moves once.
		// Long lines go sooner: the window holds at most maxWinBytes.
		drop, bytes := max(len(t.win)-maxRowsUp, 0), 0
		for _, l := range t.win {
			bytes += len(l.b)
		}
		for _, l := range t.win[:drop] {
			bytes -= len(l.b)
		}
		for drop < len(t.win) && bytes > maxWinBytes/2 {
			bytes -= len(t.win[drop].b)
			drop++
		}
		t.winBytes = bytes
		for _, l := range t.win[:drop] {
			t.out.write(l.b, l.runes)
			t.out.write(newline, 1)
			if cap(l.b) <= 4<<10 && len(t.free) < 2*maxRowsUp {
				t.free = append(t.free, l.b[:0]) // recycled; big ones are not kept
			}
		}
		t.win = t.win[:copy(t.win, t.win[drop:])]
	}
	t.at = len(t.win)
	t.line, t.lineRunes = nil, 0
	if n := len(t.free); n > 0 {
		t.line, t.free = t.free[n-1], t.free[:n-1]
	}
	t.cur, t.col, t.pad = 0, 0, 0
}

// moveTo puts the cursor on line i of the window (len(win): the open line),
// in the same column or in the first one.
func (t *Text) moveTo(i int, keepCol bool) {
	column := t.col + t.pad
	if t.at == len(t.win) {
		t.open = segment{t.line, t.lineRunes}
	} else {
		t.win[t.at] = segment{t.line, t.lineRunes}
	}
	t.at = i
	l := t.open
	if i < len(t.win) {
		l = t.win[i]
	}
	t.line, t.lineRunes = l.b, l.runes
	t.cur, t.col, t.pad = 0, 0, 0
	if keepCol {
		t.right(column)
	}
}

// eraseBelow blanks the lines under the cursor's (ED 0).
func (t *Text) eraseBelow() {
	for i := t.at + 1; i < len(t.win); i++ {
		t.win[i] = segment{t.win[i].b[:0], 0}
	}
	if t.at < len(t.win) {
		t.open = segment{t.open.b[:0], 0}
	}
}

// putText writes s (valid UTF-8 of runes characters, no controls but NUL and
// TAB) at the cursor: overwriting what is under it, extending the line past
// its end.
func (t *Text) putText(s []byte, runes int) {
	if t.away {
		return
	}
	for len(s) > 0 && t.cur < len(t.line) {
		if s[0] < utf8.RuneSelf && t.line[t.cur] < utf8.RuneSelf {
			t.line[t.cur] = s[0]
			t.cur++
			t.col++
			s = s[1:]
			runes--
			continue
		}
		_, ns := utf8.DecodeRune(s)
		_, no := utf8.DecodeRune(t.line[t.cur:])
		if ns == no {
			copy(t.line[t.cur:], s[:ns])
		} else {
			t.line = slices.Replace(t.line, t.cur, t.cur+no, s[:ns]...)
		}
		t.cur += ns
		t.col++
		s = s[ns:]
		runes--
	}
	if len(s) == 0 {
		return
	}
	if t.pad > 0 {
		t.line = append(t.line, spaces(t.pad)...)
		t.lineRunes += t.pad
		t.pad = 0
	}
	t.line = append(t.line, s...)
	t.lineRunes += runes
	t.cur, t.col = len(t.line), t.lineRunes
}

var spaceRun = []byte("                                                                ")

// spaces returns n spaces (n <= maxPadColumn in practice).
func spaces(n int) []byte {
	if n <= len(spaceRun) {
		return spaceRun[:n]
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = ' '
	}
	return b
}

// Result finishes the text (flushes a pending partial line) and returns it,
// whether anything was left out, and the total character count.
// When truncated, a note is inserted between head and tail:
//
//	"[... N characters omitted ...]\n"
//
// (see [Text.ResultNote]). The cut is at line boundaries: the head ends
// after its last newline and the tail starts after its first one, unless
// that would leave it empty (a single line longer than the budget is cut
// inside it). The returned string is at most max characters plus the note.
//
// Result does not consume anything: the Text can keep receiving writes,
// and a later Result covers everything written so far.
func (t *Text) Result() (out string, truncated bool, total int) {
	return t.ResultNote(nil)
}

// ResultNote is [Text.Result] with the caller's wording of the note: note
// gets the count of characters left out and returns the text that stands
// for them (a line of its own: it is given a newline on each side that
// lacks one). The note is built once, here, never patched into the text
// afterwards, where the command's own output could hold the same words.
func (t *Text) ResultNote(note func(omitted int) string) (out string, truncated bool, total int) {
	line, lineRunes := t.line, t.lineRunes
	if t.npend > 0 {
		// The stream ends inside a rune: decode what is there as invalid,
		// on a copy, so that the Text itself can still continue the rune.
		c := *t
		c.line = slices.Clone(t.line)
		c.npend, c.eof = 0, true
		c.feed(t.pend[:t.npend])
		line, lineRunes = c.line, c.lineRunes
	}
	a := &t.out
	total = a.total
	segs := []segment{{a.head, a.headRunes}, {a.tail, a.tailRunes}}
	add := func(s segment) {
		segs = append(segs, s)
		total += s.runes
	}
	cursorLine := segment{line, lineRunes}
	for i, l := range t.win {
		if i == t.at {
			l = cursorLine
		}
		add(l)
		add(segment{newline, 1})
	}
	if t.at == len(t.win) {
		add(cursorLine)
	} else {
		add(t.open)
	}
	keep := a.head1 + a.tail1
	if a.head1 < 0 || total <= keep {
		return concat(segs), false, total
	}
	head := concat(prefix(segs, a.head1))
	// One character more than the tail's budget: whether the tail starts
	// a line.
	tail := concat(suffix(segs, a.tail1+1))
	_, size := utf8.DecodeRuneInString(tail)
	atLine := tail[:size] == "\n"
	tail = tail[size:]
	// Whole lines: what a reader sees cut is where the note stands.
	if i := strings.LastIndexByte(head, '\n'); i >= 0 {
		head = head[:i+1]
	}
	if i := strings.IndexByte(tail, '\n'); !atLine && i >= 0 && i+1 < len(tail) {
		tail = tail[i+1:]
	}
	omitted := total - utf8.RuneCountInString(head) - utf8.RuneCountInString(tail)
	var n string
	if note != nil {
		n = note(omitted)
	} else {
		n = "[... " + strconv.Itoa(omitted) + " characters omitted ...]"
	}
	if head != "" && !strings.HasSuffix(head, "\n") {
		n = "\n" + n
	}
	return head + n + "\n" + tail, true, total
}

// segment is a piece of valid UTF-8 and its rune count.
type segment struct {
	b     []byte
	runes int
}

func concat(segs []segment) string {
	n := 0
	for _, s := range segs {
		n += len(s.b)
	}
	b := make([]byte, 0, n)
	for _, s := range segs {
		b = append(b, s.b...)
	}
	return string(b)
}

// prefix returns the first n runes of the concatenation of segs.
func prefix(segs []segment, n int) []segment {
	var out []segment
	for _, s := range segs {
		if n == 0 {
			break
		}
		if s.runes <= n {
			out = append(out, s)
			n -= s.runes
			continue
		}
		out = append(out, segment{s.b[:firstRunes(s.b, n)], n})
		n = 0
	}
	return out
}

// suffix returns the last n runes of the concatenation of segs.
func suffix(segs []segment, n int) []segment {
	var out []segment
	for i := len(segs) - 1; i >= 0 && n > 0; i-- {
		s := segs[i]
		if s.runes <= n {
			out = append(out, s)
			n -= s.runes
			continue
		}
		out = append(out, segment{s.b[lastRunes(s.b, n):], n})
		n = 0
	}
	slices.Reverse(out)
	return out
}

// firstRunes returns the byte length of the first n runes of valid UTF-8 b.
func firstRunes(b []byte, n int) int {
	i := 0
	for ; n > 0 && i < len(b); n-- {
		if n >= 8 && i+8 <= len(b) && binary.LittleEndian.Uint64(b[i:])&0x8080808080808080 == 0 {
			i += 8 // eight ASCII runes at once
			n -= 7
			continue
		}
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return i
}

// lastRunes returns the byte offset where the last n runes of valid UTF-8 b
// start.
func lastRunes(b []byte, n int) int {
	i := len(b)
	for ; n > 0 && i > 0; n-- {
		i--
		for i > 0 && b[i]&0xc0 == 0x80 {
			i--
		}
	}
	return i
}

// accumulator keeps the first head1 and the last tail1 characters of the
// finished lines and counts the rest.
type accumulator struct {
	head1, tail1 int // budgets in runes; head1 < 0: keep everything in head

	head      []byte
	headRunes int
	tail      []byte
	tailRunes int
	total     int
}

func (a *accumulator) write(b []byte, runes int) {
	a.total += runes
	if a.head1 < 0 {
		a.head = append(a.head, b...)
		a.headRunes += runes
		return
	}
	if room := a.head1 - a.headRunes; room > 0 {
		if runes <= room {
			a.head = append(a.head, b...)
			a.headRunes += runes
			return
		}
		n := firstRunes(b, room)
		a.head = append(a.head, b[:n]...)
		a.headRunes += room
		b, runes = b[n:], runes-room
	}
	if a.tail1 == 0 {
		return
	}
	if runes >= a.tail1 {
		a.tail = append(a.tail[:0], b[lastRunes(b, a.tail1):]...)
		a.tailRunes = a.tail1
		return
	}
	a.tail = append(a.tail, b...)
	a.tailRunes += runes
	// Drop the front in batches so each byte is moved O(1) times.
	if extra := a.tailRunes - a.tail1; extra >= max(a.tail1, 4096) {
		n := firstRunes(a.tail, extra)
		a.tail = a.tail[:copy(a.tail, a.tail[n:])]
		a.tailRunes = a.tail1
	}
}
