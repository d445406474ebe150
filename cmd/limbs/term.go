package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// safe returns s as it may be printed on the operator's terminal. Text
// from a sandbox or the registry (names, reasons, messages, file names,
// error messages that quote them) may carry escape sequences that set the
// window title, colours or worse: every control character, DEL, C1 control,
// invalid UTF-8 byte and Unicode format character (bidi overrides) is
// shown as a visible escape (\x1b, \n, \u009b, \u202e), the rest as is.
// A string without any of them comes back unchanged.
func safe(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// safeErr is an error's message made safe to print.
func safeErr(err error) string { return safe(err.Error()) }

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r < 0x20 || unsafeRune(r) {
			return true
		}
		i += size
	}
	return false
}

// unsafeRune: DEL, the C1 controls (U+0080-U+009F: some terminals take
// U+009B as CSI) and format characters (U+202E and the other bidi
// controls, zero-width characters) that make text show as something else.
func unsafeRune(r rune) bool {
	return r == 0x7f || r >= 0x80 && r <= 0x9f || unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029
}

// safeJSON escapes, in encoding/json's output, the runes it leaves raw
// that a terminal may act on; the result is the same JSON value.
func safeJSON(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafeRune(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
