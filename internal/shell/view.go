package shell

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/wire"
)

// What a result says beyond the bytes: whether its first line redraws the
// previous result's last one (a \r progress bar spread over several
// running results), and, for a running command, what the terminal shows
// (a full-screen program) and where the command is (its own cwd, not the
// shell's from before it started).

// redrawWindow bounds how far back a result looks for the start of the line
// its first bytes redraw; a longer unfinished line is not redrawn.
const redrawWindow = 4 << 10

// redrawStart returns where the line that the output [from, to) continues
// starts, when [from, to) moves the cursor within that line before ending it
// (a \r, a backspace or an escape sequence) and the line began before from,
// inside the command's output (start on). The result then covers the whole
// line, and says so with overwrite: a client replaces the last, unfinished
// line it has with the first line of the new output.
func (s *Session) redrawStart(start, from, to int64) (int64, bool) {
	if start < 0 || from <= start || to <= from {
		return from, false
	}
	head := make([]byte, min(to-from, redrawWindow))
	n, _ := s.out.readAt(head, from)
	head = head[:n]
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = bytes.TrimRight(head[:i], "\r") // \r\n only ends the line
	}
	if !bytes.ContainsAny(head, "\r\b\x1b") {
		return from, false // appends to the line: joining is right
	}
	back := min(from-start, redrawWindow)
	prev := make([]byte, back)
	n, _ = s.out.readAt(prev, from-back)
	prev = prev[:n]
	i := bytes.LastIndexByte(prev, '\n')
	if i < 0 && back < from-start {
		return from, false // the line is longer than the window
	}
	ls := from - int64(len(prev)) + int64(i+1)
	if ls >= from {
		return from, false // the previous result ended its line
	}
	return ls, true
}

// altScreenOn reports whether the last alternate-screen switch in the
// command's output [start, to) turned it on (ESC[?1049h, ?1047h, ?47h),
// looking back at most 1 MiB.
func (s *Session) altScreenOn(start, to int64) bool {
	const block, limit = 64 << 10, 1 << 20
	buf := make([]byte, block+16)
	for end := to; end > start && to-end < limit; end -= block {
		from := max(start, end-block)
		n, _ := s.out.readAt(buf[:min(int64(len(buf)), to-from)], from)
		b := buf[:n]
		for len(b) > 0 {
			i := bytes.LastIndex(b, []byte("\x1b[?"))
			if i < 0 {
				break
			}
			if on, ok := altSwitch(b[i+3:]); ok {
				return on
			}
			b = b[:i]
		}
	}
	return false
}

// altSwitch reads "1049h" and the like after ESC [ ?.
func altSwitch(b []byte) (on, ok bool) {
	for _, mode := range []string{"1049", "1047", "47"} {
		if rest, found := bytes.CutPrefix(b, []byte(mode)); found && len(rest) > 0 && (rest[0] == 'h' || rest[0] == 'l') {
			return rest[0] == 'h', true
		}
	}
	return false, false
}

// liveView fills in what a running command's result says about now: the
// cwd of its foreground process, and the screen of a full-screen program
// in place of the bytes that drew it.
func (s *Session) liveView(r *wire.Result, start, to int64, maxOut int) {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p != nil {
		if pg := p.foreground(); pg > 0 && pg != p.pid {
			if cwd := cwdOf(pg); cwd != "" {
				r.Cwd = cwd
			}
		}
	}
	if start < 0 || !s.altScreenOn(start, to) {
		return
	}
	sc, err := s.Screen()
	if err != nil || !sc.AltScreen {
		return
	}
	r.AltScreen = true
	lines := sc.Lines
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	text := strings.Join(lines, "\n")
	if maxOut >= 0 && utf8.RuneCountInString(text) > maxOut {
		text = string([]rune(text)[:maxOut])
		r.Truncated = true
	}
	r.Output = text
}
