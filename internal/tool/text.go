package tool

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxEditBytes is the largest file the editing tools read whole. Larger
// files are for grep and sed in the shell.
const maxEditBytes = 10 << 20

// checkText refuses what the editor must not rewrite as text: binary
// content and bytes that are not UTF-8 (a rewrite would corrupt them).
func checkText(p string, data []byte) string {
	if len(data) > maxEditBytes {
		return fmt.Sprintf("%s is %d bytes, more than the %d the editor reads whole. Look inside it with `grep -n` or `sed -n 'A,Bp'` in the shell instead.", p, len(data), maxEditBytes)
	}
	head := data
	if len(head) > 8192 {
		head = head[:8192]
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return fmt.Sprintf("%s is a binary file (it has NUL bytes); the editor only edits text. Use the shell to inspect it.", p)
	}
	if !utf8.Valid(data) {
		return fmt.Sprintf("%s is not valid UTF-8 text; the editor would corrupt it. Use the shell (iconv, sed) to change it.", p)
	}
	return ""
}

// splitLines splits content into lines without their "\n"; a final line
// break does not start another line, so "" has no lines and "a\n" one.
// A "\r" before the "\n" stays in the line: callers decide what CRLF means.
func splitLines(content string) []string {
	if content == "" {
		return nil
	}
	ls := strings.Split(content, "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	return ls
}

// isCRLF reports whether every line break of content is "\r\n" (and there
// is at least one).
func isCRLF(content string) bool {
	n := strings.Count(content, "\n")
	return n > 0 && strings.Count(content, "\r\n") == n
}

// toCRLF gives text "\r\n" line breaks when it has "\n" ones and no "\r"
// of its own, so that text a model wrote with "\n" fits a CRLF file.
func toCRLF(text string) string {
	if strings.Contains(text, "\r") || !strings.Contains(text, "\n") {
		return text
	}
	return strings.ReplaceAll(text, "\n", "\r\n")
}

// visible shows the whitespace a model cannot see in a view: tabs as \t,
// carriage returns as \r.
func visible(s string) string {
	return strings.NewReplacer("\t", `\t`, "\r", `\r`).Replace(s)
}

// catN numbers lines from start as `cat -n` does ("%6d\t"), dropping the
// "\r" of CRLF lines (the view shows text, the file keeps its bytes).
func catN(ls []string, start int) string {
	var b strings.Builder
	for i, l := range ls {
		b.WriteString(fmt.Sprintf("%6d\t", start+i))
		b.WriteString(strings.TrimSuffix(l, "\r"))
		b.WriteByte('\n')
	}
	return b.String()
}

// lineOf is the 1-based line that byte offset off of content falls on.
func lineOf(content string, off int) int {
	return strings.Count(content[:off], "\n") + 1
}

// pyInts prints ns as Python prints a list, as Anthropic's tool does.
func pyInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func itoa(n int) string { return strconv.Itoa(n) }
