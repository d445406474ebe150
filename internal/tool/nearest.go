package tool

import (
	"strings"
	"unicode"
)

// candidate is the run of lines of a file that looks most like what a
// model asked for when an exact match failed.
type candidate struct {
	line  int      // 1-based first line
	lines []string // as in the file, "\r" included
	score float64  // 0..1, 1 is equal
	// wsOnly: the run equals what was asked for once all whitespace is
	// removed, so the difference is whitespace alone.
	wsOnly bool
}

// maxNearestWork bounds the line comparisons one search may do, so that a
// long old_str against a long file stays quick; past it only the first
// wanted line is compared.
const maxNearestWork = 2_000_000

// nearest finds the window of len(want) lines of file most similar to
// want. ok is false when nothing is similar enough to be worth showing.
func nearest(file, want []string) (c candidate, ok bool) {
	if len(file) == 0 || len(want) == 0 {
		return candidate{}, false
	}
	k := len(want)
	if k > len(file) {
		k = len(file)
	}
	windows := len(file) - k + 1
	probe := want[:k]
	if windows*k > maxNearestWork {
		probe = want[:1]
	}
	// Stripped once: the comparisons below would otherwise strip each
	// file line len(probe) times.
	fs, ws := stripAll(file), stripAll(probe)
	best, bestAt := -1.0, 0
	for i := 0; i < windows; i++ {
		s := 0.0
		for j, w := range probe {
			s += lineSim(file[i+j], w, fs[i+j], ws[j])
		}
		if s > best {
			best, bestAt = s, i
		}
	}
	score := best / float64(len(want))
	if len(probe) < k {
		score = best // one line compared
	}
	if score < 0.4 {
		return candidate{}, false
	}
	lines := file[bestAt : bestAt+k]
	return candidate{
		line:   bestAt + 1,
		lines:  lines,
		score:  score,
		wsOnly: len(want) == k && stripSpace(strings.Join(lines, "\n")) == stripSpace(strings.Join(want, "\n")),
	}, true
}

func stripAll(ls []string) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = stripSpace(l)
	}
	return out
}

// lineSim scores how alike a file line and a wanted line are, from 1
// (equal) down to 0; h and w are them without whitespace.
func lineSim(have, want, h, w string) float64 {
	if have == want {
		return 1
	}
	if strings.TrimRightFunc(have, unicode.IsSpace) == strings.TrimRightFunc(want, unicode.IsSpace) {
		return 0.97
	}
	if h == w {
		return 0.95
	}
	if w != "" && strings.Contains(h, w) {
		return 0.85
	}
	n := max(len(h), len(w))
	if n == 0 {
		return 1
	}
	p := 0
	for p < len(h) && p < len(w) && h[p] == w[p] {
		p++
	}
	s := 0
	for s < len(h)-p && s < len(w)-p && h[len(h)-1-s] == w[len(w)-1-s] {
		s++
	}
	return 0.8 * float64(p+s) / float64(n)
}

func stripSpace(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}

// whitespaceHint says how a run that differs from want only in
// whitespace differs, in words a model can act on.
func whitespaceHint(have, want string) string {
	switch {
	case strings.Contains(have, "\t") && !strings.Contains(want, "\t"):
		return "the file indents with tabs where old_str has spaces"
	case !strings.Contains(have, "\t") && strings.Contains(want, "\t"):
		return "the file has spaces where old_str has tabs"
	case strings.Contains(have, "\r") && !strings.Contains(want, "\r"):
		return "the file's lines end in \\r\\n"
	default:
		return "they differ only in whitespace"
	}
}

// describeNearest renders c for a model: where it is, and its lines and
// want with \t and \r made visible, so that a difference a view hides can
// be seen.
func describeNearest(c candidate, want string) string {
	var b strings.Builder
	b.WriteString("The nearest text in the file is at line ")
	b.WriteString(itoa(c.line))
	if c.wsOnly {
		b.WriteString(" and matches once whitespace is ignored (")
		b.WriteString(whitespaceHint(strings.Join(c.lines, "\n"), want))
		b.WriteString(")")
	}
	b.WriteString("; tabs are shown as \\t and carriage returns as \\r:\n")
	for i, l := range c.lines {
		b.WriteString(itoa(c.line + i))
		b.WriteString(": ")
		b.WriteString(visible(l))
		b.WriteByte('\n')
	}
	b.WriteString("what was asked for, shown the same way:\n")
	for _, l := range strings.Split(want, "\n") {
		b.WriteString(visible(l))
		b.WriteByte('\n')
	}
	return b.String()
}
