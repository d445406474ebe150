package tool

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/wire"
)

// matchedWords states which until condition held, as the model asked for
// it (until, when known, gives the expression or the seconds).
func matchedWords(r wire.Result, until *wire.Until) string {
	switch r.Matched {
	case wire.MatchedPort:
		port, host := "", ""
		if h, p, err := net.SplitHostPort(r.MatchedText); err == nil {
			port, host = p, h
		}
		if until != nil && until.Port != nil {
			port = strconv.Itoa(*until.Port)
		}
		if host != "" {
			return fmt.Sprintf("port %s is listening (on %s)", port, host)
		}
		return fmt.Sprintf("port %s is listening", port)
	case wire.MatchedQuiet:
		if until != nil && until.Quiet != nil {
			return fmt.Sprintf("no output for %s (until.quiet)", secs(*until.Quiet))
		}
		return "no output for the quiet time asked (until.quiet)"
	case wire.MatchedOutput:
		if until != nil && until.Output != nil {
			return fmt.Sprintf("the output matched until.output %s: %s", quoted(*until.Output), quoted(r.MatchedText))
		}
		return fmt.Sprintf("the output matched until.output: %s", quoted(r.MatchedText))
	case wire.MatchedScreen:
		if until != nil && until.Screen != nil {
			return fmt.Sprintf("the screen matched until.screen %s: %s", quoted(*until.Screen), quoted(r.MatchedText))
		}
		return fmt.Sprintf("the screen matched until.screen: %s", quoted(r.MatchedText))
	}
	return fmt.Sprintf("until.%s held", r.Matched)
}

// quoted puts s in double quotes as it is, so that a regular expression
// reads as the model wrote it (\d, not \\d); Go quoting only when s holds
// a quote, a control character or invalid UTF-8.
func quoted(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r == '"' || r < ' ' || r == 0x7f }) {
		return strconv.Quote(s)
	}
	return `"` + s + `"`
}
