package shell

import (
	"bytes"
	"errors"
	"unicode/utf8"
)

// ErrFellBehind is returned by StreamReader.Next when a live reader lags
// further behind the newest output than the in-memory buffer holds.
var ErrFellBehind = errors.New("reader fell behind the output buffer")

// unfinishedTail returns how many bytes at the end of b may be the first
// part of something the next bytes complete: an escape sequence, a UTF-8
// character, or a \r that may be the start of \r\n. A running command's
// result stops before them so that nothing is cleaned in two halves.
func unfinishedTail(b []byte) int {
	end := len(b)
	if i := bytes.LastIndexByte(b, 0x1b); i >= 0 && !escapeComplete(b[i:]) {
		end = i
	}
	if end > 0 && b[end-1] == '\r' {
		end--
	}
	// A truncated UTF-8 sequence: find the last start byte.
	for k := 1; k <= 3 && end-k >= 0; k++ {
		c := b[end-k]
		if c < 0x80 {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[end-k : end]) {
				end -= k
			}
			break
		}
	}
	return len(b) - end
}

// escapeComplete reports whether b, starting with ESC, holds a whole
// escape sequence.
func escapeComplete(b []byte) bool {
	if len(b) < 2 {
		return false
	}
	switch b[1] {
	case '[':
		for _, c := range b[2:] {
			if c >= 0x40 && c <= 0x7e {
				return true
			}
		}
		return false
	case ']':
		return bytes.IndexByte(b, 0x07) > 0 || bytes.Contains(b, []byte("\x1b\\"))
	case 'P', 'X', '^', '_':
		return bytes.Contains(b[2:], []byte("\x1b\\"))
	}
	for _, c := range b[1:] {
		if c < 0x20 || c > 0x2f {
			return true
		}
	}
	return false
}
