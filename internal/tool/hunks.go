package tool

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// hunkFailure is a hunk that did not apply, with the text for the model.
type hunkFailure struct {
	PatchFailure
	text string
}

// applyHunks applies op's hunks to content. Lines are matched the way
// Codex matches them: exactly, then ignoring trailing whitespace, then
// ignoring surrounding whitespace, then also treating typographic dashes,
// quotes and spaces as their ASCII forms. A CRLF file is matched without
// its "\r"s and keeps them; the result ends with a line break (as Codex's).
func applyHunks(content string, op FileOp) (string, *hunkFailure) {
	crlf := isCRLF(content)
	eol := "\n"
	lines := splitLines(content)
	if crlf {
		eol = "\r\n"
		for i, l := range lines {
			lines[i] = strings.TrimSuffix(l, "\r")
		}
	}
	type repl struct {
		at, n int
		with  []string
	}
	var rs []repl
	next := 0 // hunks apply in file order
	for hi, h := range op.Hunks {
		fail := func(what string, want []string, show bool) (string, *hunkFailure) {
			f := &hunkFailure{PatchFailure: PatchFailure{Hunk: hi + 1, PatchLine: h.Line}}
			var b strings.Builder
			fmt.Fprintf(&b, "Hunk %d of '*** Update File: %s' (patch line %d) did not apply: %s", hi+1, op.Path, h.Line, what)
			if next > 0 {
				fmt.Fprintf(&b, " after line %d (where the previous hunk or @@ line matched)", next)
			}
			if show {
				b.WriteString(":\n" + strings.Join(want, "\n") + "\n")
			} else {
				b.WriteString(".\n")
			}
			if c, ok := nearest(lines, want); ok {
				f.NearestLine = c.line
				b.WriteString(describeNearest(c, strings.Join(want, "\n")))
			}
			b.WriteString("View the file and copy its context lines exactly.")
			f.text = b.String()
			return "", f
		}
		for _, c := range h.Context {
			at := seek(lines, []string{c}, next, false)
			if at < 0 {
				return fail(fmt.Sprintf("its @@ line %q was not found", c), []string{c}, false)
			}
			next = at + 1
		}
		if len(h.Old) == 0 {
			// Pure addition: after the @@ line if it has one, else at the
			// end (before a last empty line, as Codex does).
			at := len(lines)
			if len(h.Context) > 0 {
				at = next
			} else if at > 0 && lines[at-1] == "" {
				at--
			}
			rs = append(rs, repl{at: at, with: h.New})
			continue
		}
		old, with := h.Old, h.New
		at := seek(lines, old, next, h.EOF)
		if at < 0 && old[len(old)-1] == "" {
			// A trailing empty context line is often just the patch's end.
			old = old[:len(old)-1]
			if len(with) > 0 && with[len(with)-1] == "" {
				with = with[:len(with)-1]
			}
			at = seek(lines, old, next, h.EOF)
		}
		if at < 0 {
			what := "these lines were not found"
			if h.EOF {
				what = "these lines were not found at the end of the file"
			}
			return fail(what, h.Old, true)
		}
		if len(h.Ops) == len(h.Old)+len(h.New)-strings.Count(h.Ops, " ") {
			with = keepContext(lines[at:at+len(old)], h, len(old))
		}
		rs = append(rs, repl{at: at, n: len(old), with: with})
		next = at + len(old)
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].at < rs[j].at })
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i]
		tail := append([]string(nil), lines[r.at+r.n:]...)
		lines = append(append(lines[:r.at], r.with...), tail...)
	}
	if len(lines) == 0 {
		return "", nil
	}
	return strings.Join(lines, eol) + eol, nil
}

// keepContext is the replacement of a matched window: the hunk's added
// lines, and its context lines as the file has them (a context line that
// matched once whitespace was ignored keeps the file's whitespace). n is
// how many of the hunk's old lines were matched (a trailing empty context
// line may have been dropped).
func keepContext(window []string, h Hunk, n int) []string {
	var out []string
	oi, ni := 0, 0
	for _, op := range h.Ops {
		switch op {
		case ' ':
			if oi < n {
				out = append(out, window[oi])
			}
			oi++
			ni++
		case '-':
			oi++
		case '+':
			out = append(out, h.New[ni])
			ni++
		}
	}
	return out
}

// seek finds pattern in lines at or after start (only at the very end when
// eof is set, if it fits there), trying ever looser comparisons; -1 if not
// found.
func seek(lines, pattern []string, start int, eof bool) int {
	if len(pattern) == 0 {
		return start
	}
	if len(pattern) > len(lines) {
		return -1
	}
	from := start
	if eof {
		from = len(lines) - len(pattern)
	}
	for _, eq := range []func(a, b string) bool{
		func(a, b string) bool { return a == b },
		func(a, b string) bool {
			return strings.TrimRightFunc(a, unicode.IsSpace) == strings.TrimRightFunc(b, unicode.IsSpace)
		},
		func(a, b string) bool { return strings.TrimSpace(a) == strings.TrimSpace(b) },
		func(a, b string) bool {
			return asciiPunct(strings.TrimSpace(a)) == asciiPunct(strings.TrimSpace(b))
		},
	} {
	positions:
		for i := from; i <= len(lines)-len(pattern); i++ {
			for j, p := range pattern {
				if !eq(lines[i+j], p) {
					continue positions
				}
			}
			return i
		}
	}
	return -1
}

// asciiPunct maps the typographic dashes, quotes and spaces that models
// and editors swap for ASCII ones to those ASCII ones.
func asciiPunct(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '\u2010', '\u2011', '\u2012', '\u2013', '\u2014', '\u2015', '\u2212':
			return '-'
		case '\u2018', '\u2019', '\u201A', '\u201B':
			return '\''
		case '\u201C', '\u201D', '\u201E', '\u201F':
			return '"'
		case '\u00A0', '\u2002', '\u2003', '\u2004', '\u2005', '\u2006', '\u2007', '\u2008', '\u2009', '\u200A', '\u202F', '\u205F', '\u3000':
			return ' '
		}
		return r
	}, s)
}
