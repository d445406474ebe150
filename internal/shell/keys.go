package shell

import (
	"fmt"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

var plainKeys = map[string]string{
	"Enter":     "\r",
	"Tab":       "\t",
	"Escape":    "\x1b",
	"Esc":       "\x1b",
	"Backspace": "\x7f",
	"Space":     " ",
	"Delete":    "\x1b[3~",
	"Insert":    "\x1b[2~",
	"PageUp":    "\x1b[5~",
	"PageDown":  "\x1b[6~",
	"F1":        "\x1bOP",
	"F2":        "\x1bOQ",
	"F3":        "\x1bOR",
	"F4":        "\x1bOS",
	"F5":        "\x1b[15~",
	"F6":        "\x1b[17~",
	"F7":        "\x1b[18~",
	"F8":        "\x1b[19~",
	"F9":        "\x1b[20~",
	"F10":       "\x1b[21~",
	"F11":       "\x1b[23~",
	"F12":       "\x1b[24~",
}

// cursorKeys change with DECCKM (application cursor keys: ESC O x).
var cursorKeys = map[string]byte{
	"Up": 'A', "Down": 'B', "Right": 'C', "Left": 'D', "Home": 'H', "End": 'F',
}

// encodeInput turns text and key names into the bytes a terminal sends,
// for the modes the program has set.
func encodeInput(text string, keys []string, appCursor, paste bool) ([]byte, error) {
	var b []byte
	if text != "" {
		body, nl := text, ""
		if paste && strings.Contains(strings.TrimRight(text, "\n"), "\n") {
			// A multi-line paste into a program that asked for bracketed
			// paste; the final newline stays outside so it submits.
			if strings.HasSuffix(body, "\n") {
				body, nl = strings.TrimSuffix(body, "\n"), "\r"
			}
			b = append(b, "\x1b[200~"...)
			b = append(b, body...)
			b = append(b, "\x1b[201~"...)
			b = append(b, nl...)
		} else {
			b = append(b, text...)
		}
	}
	for _, k := range keys {
		if s, ok := plainKeys[k]; ok {
			b = append(b, s...)
			continue
		}
		if c, ok := cursorKeys[k]; ok {
			if appCursor {
				b = append(b, 0x1b, 'O', c)
			} else {
				b = append(b, 0x1b, '[', c)
			}
			continue
		}
		if len(k) == 3 && (k[0] == 'C' || k[0] == 'c') && k[1] == '-' {
			c := k[2] | 0x20 // lower case
			switch {
			case c >= 'a' && c <= 'z':
				b = append(b, c-'a'+1)
				continue
			case k[2] == '[':
				b = append(b, 0x1b)
				continue
			case k[2] == '\\':
				b = append(b, 0x1c)
				continue
			case k[2] == ']':
				b = append(b, 0x1d)
				continue
			}
		}
		if len(k) == 3 && (k[0] == 'M' || k[0] == 'A') && k[1] == '-' {
			b = append(b, 0x1b, k[2])
			continue
		}
		return nil, fmt.Errorf("unknown key %q: use Enter, Tab, Escape, Backspace, Up, Down, Left, Right, Home, End, PageUp, PageDown, Delete, C-a..C-z, M-x or F1..F12: %w", k, wire.ErrBadRequest)
	}
	return b, nil
}
