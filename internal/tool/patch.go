package tool

import (
	"fmt"
	"strings"
)

// The Codex patch format (testdata/codex_apply_patch.lark):
//
//	*** Begin Patch
//	*** Add File: PATH        then "+" lines: the new file
//	*** Delete File: PATH
//	*** Update File: PATH     then optionally "*** Move to: PATH",
//	@@ [context line]         then hunks of " ", "-" and "+" lines,
//	*** End of File           optionally ending a hunk that must end the file
//	*** End Patch

const (
	markBegin  = "*** Begin Patch"
	markEnd    = "*** End Patch"
	markAdd    = "*** Add File: "
	markDelete = "*** Delete File: "
	markUpdate = "*** Update File: "
	markMove   = "*** Move to: "
	markEOF    = "*** End of File"
)

// Patch is a parsed apply_patch input: file operations in order.
type Patch struct {
	Ops []FileOp
}

// OpKind is what a FileOp does to its file.
type OpKind string

// The kinds of file operation.
const (
	OpAdd    OpKind = "add"
	OpDelete OpKind = "delete"
	OpUpdate OpKind = "update"
)

// FileOp is one "*** Add/Delete/Update File:" section.
type FileOp struct {
	Kind OpKind
	Path string // as written in the patch
	// MoveTo is the new path of an update that also renames ("" if none).
	MoveTo string
	// Contents is the whole new file of an add.
	Contents string
	// Hunks are an update's changes, in file order.
	Hunks []Hunk
	// Line is the patch line (1-based) of the section's header.
	Line int
}

// Hunk is one "@@" block of an update.
type Hunk struct {
	// Context holds the lines after "@@ " (one per "@@" line): each must be
	// found, in order, before Old is looked for.
	Context []string
	// Old are the lines the hunk expects (context and removed lines), New
	// what replaces them (context and added lines).
	Old, New []string
	// Ops is the first character of each of the hunk's lines, in order
	// (' ', '-' or '+'), so that context lines can keep the file's bytes.
	Ops string
	// EOF: Old must end the file ("*** End of File").
	EOF bool
	// Line is the patch line (1-based) where the hunk starts.
	Line int
}

// ParseError says where a patch is malformed.
type ParseError struct {
	Line int // 0 when the patch as a whole is at fault
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return "invalid patch: " + e.Msg
	}
	return fmt.Sprintf("invalid patch at line %d: %s", e.Line, e.Msg)
}

// ParsePatch parses text in the Codex patch format, with the leniencies of
// the Codex parser: surrounding whitespace around the patch and its markers,
// "\r\n" line breaks, a heredoc wrapper (<<'EOF' ... EOF), a first hunk
// without its "@@" line and blank lines between hunks. Unlike Codex's, it
// also takes several "@@ context" lines in a row (its tool description
// tells models to use them to jump to a nested scope).
func ParsePatch(text string) (*Patch, error) {
	text = strings.TrimSpace(text)
	var lines []string
	if text != "" {
		lines = strings.Split(text, "\n")
		for i, l := range lines {
			lines[i] = strings.TrimSuffix(l, "\r")
		}
	}
	body, first, err := patchBody(lines)
	if err != nil {
		return nil, err
	}
	p := &Patch{}
	for i := 0; i < len(body); {
		op, n, err := parseOp(body[i:], first+i)
		if err != nil {
			return nil, err
		}
		p.Ops = append(p.Ops, op)
		i += n
	}
	return p, nil
}

// patchBody checks the Begin and End markers (inside a heredoc wrapper if
// there is one) and returns the lines between them and the patch line
// number of the first of them.
func patchBody(lines []string) ([]string, int, error) {
	errStrict := checkEnds(lines)
	if errStrict == nil {
		return lines[1 : len(lines)-1], 2, nil
	}
	if n := len(lines); n >= 4 {
		switch lines[0] {
		case "<<EOF", "<<'EOF'", `<<"EOF"`:
			if strings.HasSuffix(lines[n-1], "EOF") {
				inner := lines[1 : n-1]
				if err := checkEnds(inner); err != nil {
					return nil, 0, err
				}
				return inner[1 : len(inner)-1], 3, nil
			}
		}
	}
	return nil, 0, errStrict
}

func checkEnds(lines []string) error {
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != markBegin {
		return &ParseError{Msg: "the first line of the patch must be '" + markBegin + "'"}
	}
	if len(lines) < 2 || strings.TrimSpace(lines[len(lines)-1]) != markEnd {
		return &ParseError{Msg: "the last line of the patch must be '" + markEnd + "'"}
	}
	return nil
}

// parseOp parses the section at the start of lines (whose first is patch
// line ln) and returns how many lines it took.
func parseOp(lines []string, ln int) (FileOp, int, error) {
	head := strings.TrimSpace(lines[0])
	if p, ok := strings.CutPrefix(head, markAdd); ok {
		op := FileOp{Kind: OpAdd, Path: strings.TrimSpace(p), Line: ln}
		var b strings.Builder
		n := 1
		for ; n < len(lines); n++ {
			rest, ok := strings.CutPrefix(lines[n], "+")
			if !ok {
				break
			}
			b.WriteString(rest)
			b.WriteByte('\n')
		}
		op.Contents = b.String()
		return op, n, nil
	}
	if p, ok := strings.CutPrefix(head, markDelete); ok {
		return FileOp{Kind: OpDelete, Path: strings.TrimSpace(p), Line: ln}, 1, nil
	}
	if p, ok := strings.CutPrefix(head, markUpdate); ok {
		op := FileOp{Kind: OpUpdate, Path: strings.TrimSpace(p), Line: ln}
		n := 1
		if n < len(lines) {
			if m, ok := strings.CutPrefix(strings.TrimSpace(lines[n]), markMove); ok {
				op.MoveTo = strings.TrimSpace(m)
				n++
			}
		}
		for n < len(lines) {
			if strings.TrimSpace(lines[n]) == "" {
				n++ // blank lines between hunks
				continue
			}
			if strings.HasPrefix(lines[n], "*") {
				break // the next section (or a stray marker, which it reports)
			}
			h, used, err := parseHunk(lines[n:], ln+n, len(op.Hunks) == 0)
			if err != nil {
				return FileOp{}, 0, err
			}
			op.Hunks = append(op.Hunks, h)
			n += used
		}
		if len(op.Hunks) == 0 {
			return FileOp{}, 0, &ParseError{Line: ln, Msg: fmt.Sprintf("the update of %s has no hunks: add '@@' and lines starting with ' ', '-' or '+'", op.Path)}
		}
		return op, n, nil
	}
	return FileOp{}, 0, &ParseError{Line: ln, Msg: fmt.Sprintf("'%s' is not a valid file header. Valid headers: '%s{path}', '%s{path}', '%s{path}'", head, markAdd, markDelete, markUpdate)}
}

// parseHunk parses one hunk at the start of lines (the first is patch line
// ln); the first hunk of an update may lack its "@@" line.
func parseHunk(lines []string, ln int, first bool) (Hunk, int, error) {
	h := Hunk{Line: ln}
	n := 0
	for n < len(lines) {
		l := strings.TrimRight(lines[n], " \t")
		if l == "@@" {
			n++
			continue
		}
		if c, ok := strings.CutPrefix(lines[n], "@@ "); ok {
			h.Context = append(h.Context, c)
			n++
			continue
		}
		break
	}
	if n == 0 && !first {
		return Hunk{}, 0, &ParseError{Line: ln, Msg: fmt.Sprintf("expected the hunk to start with an '@@' line, got: '%s'", lines[0])}
	}
	body := 0
	for ; n < len(lines); n++ {
		l := lines[n]
		if strings.TrimSpace(l) == markEOF {
			if body == 0 {
				return Hunk{}, 0, &ParseError{Line: ln + n, Msg: "the hunk has no lines before '" + markEOF + "'"}
			}
			h.EOF = true
			n++
			break
		}
		if l == "" { // an empty context line whose space was lost
			h.Old, h.New = append(h.Old, ""), append(h.New, "")
			h.Ops += " "
			body++
			continue
		}
		switch l[0] {
		case ' ':
			h.Old, h.New = append(h.Old, l[1:]), append(h.New, l[1:])
		case '-':
			h.Old = append(h.Old, l[1:])
		case '+':
			h.New = append(h.New, l[1:])
		default:
			if body == 0 {
				return Hunk{}, 0, &ParseError{Line: ln + n, Msg: fmt.Sprintf("unexpected line in the hunk: '%s'. Every line of a hunk starts with ' ' (context), '+' (added) or '-' (removed)", l)}
			}
			return h, n, nil // the next hunk or section
		}
		h.Ops += l[:1]
		body++
	}
	if body == 0 {
		return Hunk{}, 0, &ParseError{Line: ln, Msg: "the hunk has no lines: add lines starting with ' ', '-' or '+' after '@@'"}
	}
	return h, n, nil
}
