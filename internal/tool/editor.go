package tool

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/wire"
)

// EditInput is the input of str_replace_based_edit_tool, field for field
// Anthropic's text_editor_20250728 (plus undo_edit, which that version
// dropped and the OpenHands profile keeps).
type EditInput struct {
	Command    string  `json:"command"`
	Path       string  `json:"path"`
	FileText   *string `json:"file_text,omitempty"`
	OldStr     *string `json:"old_str,omitempty"`
	NewStr     *string `json:"new_str,omitempty"`
	InsertLine *int    `json:"insert_line,omitempty"`
	// InsertText is what Claude 4 models send for insert; NewStr is what
	// Anthropic's documentation names. Either is accepted.
	InsertText *string `json:"insert_text,omitempty"`
	ViewRange  []int   `json:"view_range,omitempty"`
}

// EditOutput is the structured result of one editor call.
type EditOutput struct {
	Command string `json:"command"`
	Path    string `json:"path"` // absolute
	// ETag is the file's sha256 after the call (of what was viewed, or
	// written); empty for directories and removed files.
	ETag string `json:"etag,omitempty"`
	// Changed: the call wrote or removed the file.
	Changed bool `json:"changed"`
	// Lines: the lines shown (view), the first line of the change
	// (str_replace, insert), or every line old_str occurs at (a refused
	// str_replace with several matches).
	Lines []int `json:"lines,omitempty"`
	// Clipped: the view was cut to the tool's max_characters.
	Clipped bool `json:"clipped,omitempty"`
}

// Editor is str_replace_based_edit_tool over Files. It keeps, per file, the
// content before each of its last edits, for undo_edit. One Editor serves
// one agent (an MCP connection); it is safe for concurrent calls.
type Editor struct {
	// MaxCharacters is the tool-level max_characters of text_editor_20250728:
	// a view longer than this is clipped (at a line when it can be) with a
	// note saying how to see the rest. 0 shows whole files, as Anthropic's
	// default is.
	MaxCharacters int

	mu      sync.Mutex            // guards the fields below
	history map[string][]undoStep // absolute path -> oldest first
	held    int                   // bytes of content held in history
	seq     int                   // numbers undo steps, oldest first
}

// undoStep is what undo_edit restores: the content before an edit (or that
// there was no file), and the etag the edit left, so that an undo does not
// overwrite a change made by someone else since.
type undoStep struct {
	prev    []byte
	existed bool
	after   string
	seq     int
}

// maxUndo is how many edits of one file undo_edit can revert, and
// maxUndoBytes how much old content one Editor keeps for all files: past
// it the oldest edits (of any file) can no longer be undone.
const (
	maxUndo      = 10
	maxUndoBytes = 64 << 20
)

// NewEditor returns an editor that clips views at maxCharacters (0: never).
func NewEditor(maxCharacters int) *Editor {
	return &Editor{MaxCharacters: maxCharacters}
}

// Tool describes the editor as Anthropic's str_replace_based_edit_tool.
func (e *Editor) Tool() Tool[EditInput, EditOutput] {
	return Tool[EditInput, EditOutput]{
		Name:        "str_replace_based_edit_tool",
		Description: editorDescription,
		InputSchema: []byte(textEditorSchema),
		Handle:      e.Run,
	}
}

const editorDescription = `Custom editing tool for viewing, creating and editing files.
* If ` + "`path`" + ` is a file, ` + "`view`" + ` displays the result of applying ` + "`cat -n`" + `. If ` + "`path`" + ` is a directory, ` + "`view`" + ` lists non-hidden files and directories up to 2 levels deep.
* The ` + "`create`" + ` command cannot be used if the specified ` + "`path`" + ` already exists as a file.
* ` + "`str_replace`" + `: ` + "`old_str`" + ` must match EXACTLY one run of consecutive characters of the file, whitespace included; include enough context to make it unique.
* ` + "`insert`" + ` adds ` + "`insert_text`" + ` after line ` + "`insert_line`" + ` (0 for the top of the file).
* ` + "`undo_edit`" + ` reverts the last edit made to the file at ` + "`path`" + `.
* Tabs and CRLF line endings are kept as the file has them.`

// Run carries out one editor call.
func (e *Editor) Run(ctx context.Context, f Files, cwd string, in EditInput) (Result[EditOutput], error) {
	if in.Path == "" {
		return refusal[EditOutput]("Parameter `path` is required for command: " + in.Command), nil
	}
	p := resolve(cwd, in.Path)
	var r Result[EditOutput]
	var err error
	switch in.Command {
	case "view":
		r, err = e.view(ctx, f, p, in.ViewRange)
	case "create":
		r, err = e.create(ctx, f, p, in.FileText)
	case "str_replace":
		r, err = e.strReplace(ctx, f, p, in.OldStr, in.NewStr)
	case "insert":
		text := in.InsertText
		if text == nil {
			text = in.NewStr
		}
		r, err = e.insert(ctx, f, p, in.InsertLine, text)
	case "undo_edit":
		r, err = e.undo(ctx, f, p)
	default:
		return refusal[EditOutput](fmt.Sprintf("Unrecognized command %q. The allowed commands for the str_replace_based_edit_tool are: view, create, str_replace, insert, undo_edit", in.Command)), nil
	}
	r.Out.Command, r.Out.Path = in.Command, p
	return r, err
}

// readErr turns an error of Files into a refusal for the model, or returns
// it when the model cannot act on it.
func readErr(p string, err error) (Result[EditOutput], error) {
	switch {
	case errors.Is(err, wire.ErrNotFound):
		return refusal[EditOutput](fmt.Sprintf("Invalid `path` parameter: %s. The path %s does not exist. Please provide a valid path.", p, p)), nil
	case errors.Is(err, wire.ErrTooLarge):
		return refusal[EditOutput](fmt.Sprintf("%s is too large for the editor to read whole. Look inside it with `grep -n` or `sed -n 'A,Bp'` in the shell instead.", p)), nil
	case errors.Is(err, wire.ErrBadRequest):
		return refusal[EditOutput](fmt.Sprintf("Cannot read %s: %s.", p, detail(err))), nil
	}
	return Result[EditOutput]{}, fmt.Errorf("reading %s: %w", p, err)
}

// writeErr is readErr for writes: a conflict tells the model to read again.
func writeErr(p string, err error) (Result[EditOutput], error) {
	if errors.Is(err, wire.ErrConflict) {
		return refusal[EditOutput](fmt.Sprintf("%s changed since it was read (another program wrote it). Nothing was written; view it again and redo the edit.", p)), nil
	}
	if errors.Is(err, wire.ErrBadRequest) {
		return refusal[EditOutput](fmt.Sprintf("Cannot write %s: %s.", p, detail(err))), nil
	}
	return Result[EditOutput]{}, fmt.Errorf("writing %s: %w", p, err)
}

// readText reads p for editing: its content, etag, or a refusal.
func readText(ctx context.Context, f Files, p string) (string, string, *Result[EditOutput], error) {
	data, etag, err := f.ReadFile(ctx, p)
	if err != nil {
		if st, serr := f.Stat(ctx, p); serr == nil && st.Type == "dir" {
			r := refusal[EditOutput](fmt.Sprintf("The path %s is a directory and only the `view` command can be used on directories.", p))
			return "", "", &r, nil
		}
		r, err := readErr(p, err)
		return "", "", &r, err
	}
	if msg := checkText(p, data); msg != "" {
		r := refusal[EditOutput](msg)
		return "", "", &r, nil
	}
	return string(data), etag, nil, nil
}

func (e *Editor) view(ctx context.Context, f Files, p string, vr []int) (Result[EditOutput], error) {
	st, err := f.Stat(ctx, p)
	if err != nil {
		return readErr(p, err)
	}
	if st.Type == "dir" {
		if vr != nil {
			return refusal[EditOutput](fmt.Sprintf("Invalid `view_range` parameter: %s. The `view_range` parameter is not allowed when `path` points to a directory.", pyInts(vr))), nil
		}
		return e.viewDir(ctx, f, p)
	}
	content, etag, ref, err := readText(ctx, f, p)
	if ref != nil {
		return *ref, err
	}
	ls := splitLines(content)
	head := fmt.Sprintf("Here's the result of running `cat -n` on %s:\n", p)
	if len(ls) == 0 {
		if vr != nil {
			return refusal[EditOutput](fmt.Sprintf("Invalid `view_range` parameter: %s. The file %s is empty.", pyInts(vr), p)), nil
		}
		return Result[EditOutput]{Text: head + "\nThe file " + p + " is empty.\n", Out: EditOutput{ETag: etag}}, nil
	}
	start, end := 1, len(ls)
	note := ""
	if vr != nil {
		if len(vr) != 2 {
			return refusal[EditOutput](fmt.Sprintf("Invalid `view_range` parameter: %s. It should be a list of two integers.", pyInts(vr))), nil
		}
		start, end = vr[0], vr[1]
		if start < 1 || start > len(ls) {
			return refusal[EditOutput](fmt.Sprintf("Invalid `view_range` parameter: %s. Its first element `%d` should be within the range of lines of the file: [1, %d].", pyInts(vr), start, len(ls))), nil
		}
		switch {
		case end == -1:
			end = len(ls)
		case end < start:
			return refusal[EditOutput](fmt.Sprintf("Invalid `view_range` parameter: %s. Its second element `%d` should be greater than or equal to the first element `%d`.", pyInts(vr), end, start)), nil
		case end > len(ls):
			note = fmt.Sprintf("NOTE: We only show up to %d since there's only %d lines in this file\n", len(ls), len(ls))
			end = len(ls)
		}
	}
	body, shown, clipped := e.clip(ls[start-1:end], start)
	out := EditOutput{ETag: etag, Lines: []int{start, start + shown - 1}, Clipped: clipped}
	if clipped {
		last := start + shown - 1
		if shown == 0 { // one line longer than the limit, cut
			last = start
		}
		out.Lines = []int{start, last}
		next := last + 1
		if next > len(ls) {
			note = fmt.Sprintf("<response clipped><NOTE>Line %d is longer than the %d characters this tool shows at once and was cut. Read it whole with `sed -n '%dp' %s` in the shell.</NOTE>\n", last, e.MaxCharacters, last, p)
		} else {
			note = fmt.Sprintf("<response clipped><NOTE>Only lines %d-%d of %d are shown: this tool shows at most %d characters at once. To see more, view it again with view_range [%d, %d], or search inside the file with `grep -n` in the shell.</NOTE>\n", start, last, len(ls), e.MaxCharacters, next, min(len(ls), next+max(last-start, 0)))
		}
	}
	return Result[EditOutput]{Text: head + body + note, Out: out}, nil
}

// clip renders ls numbered from start, keeping whole lines while the total
// stays within MaxCharacters. shown is how many whole lines it kept; when
// not even the first fits, it is cut and shown is 0.
func (e *Editor) clip(ls []string, start int) (body string, shown int, clipped bool) {
	full := catN(ls, start)
	if e.MaxCharacters <= 0 || utf8.RuneCountInString(full) <= e.MaxCharacters {
		return full, len(ls), false
	}
	var b strings.Builder
	n := 0
	for i, l := range ls {
		one := catN([]string{l}, start+i)
		c := utf8.RuneCountInString(one)
		if n+c > e.MaxCharacters {
			if i == 0 {
				r := []rune(one)
				return string(r[:e.MaxCharacters]) + "\n", 0, true
			}
			return b.String(), i, true
		}
		b.WriteString(one)
		n += c
	}
	return b.String(), len(ls), false
}

func (e *Editor) viewDir(ctx context.Context, f Files, p string) (Result[EditOutput], error) {
	entries, err := f.List(ctx, p, 2)
	if err != nil {
		return readErr(p, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Here's the files and directories up to 2 levels deep in %s, excluding hidden items:\n%s/\n", p, strings.TrimSuffix(p, "/"))
	hidden := 0
	var shown []string
	for _, en := range entries {
		rel := strings.TrimPrefix(strings.TrimPrefix(en.Path, p), "/")
		if isHidden(rel) {
			if !strings.Contains(rel, "/") {
				hidden++
			}
			continue
		}
		line := path.Join(p, rel)
		if en.Type == "dir" {
			line += "/"
		}
		shown = append(shown, line)
	}
	sort.Strings(shown)
	for _, l := range shown {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if hidden > 0 {
		fmt.Fprintf(&b, "\n%d hidden files/directories in this directory are excluded. You can use 'ls -la %s' to see them.\n", hidden, p)
	}
	return Result[EditOutput]{Text: b.String()}, nil
}

// isHidden: some component of rel starts with a dot.
func isHidden(rel string) bool {
	for _, c := range strings.Split(rel, "/") {
		if strings.HasPrefix(c, ".") {
			return true
		}
	}
	return false
}

func (e *Editor) create(ctx context.Context, f Files, p string, text *string) (Result[EditOutput], error) {
	if text == nil {
		return refusal[EditOutput]("Parameter `file_text` is required for command: create"), nil
	}
	if _, err := f.Stat(ctx, p); err == nil {
		return refusal[EditOutput](fmt.Sprintf("Invalid `path` parameter: %s. File already exists at: %s. Cannot overwrite files using command `create`.", p, p)), nil
	} else if !errors.Is(err, wire.ErrNotFound) {
		return readErr(p, err)
	}
	etag, err := f.WriteFile(ctx, p, []byte(*text), 0, "")
	if err != nil {
		return writeErr(p, err)
	}
	e.record(p, undoStep{existed: false, after: etag})
	return Result[EditOutput]{Text: "File created successfully at: " + p, Out: EditOutput{ETag: etag, Changed: true}}, nil
}

func (e *Editor) strReplace(ctx context.Context, f Files, p string, oldPtr, newPtr *string) (Result[EditOutput], error) {
	if oldPtr == nil {
		return refusal[EditOutput]("Parameter `old_str` is required for command: str_replace"), nil
	}
	content, etag, ref, err := readText(ctx, f, p)
	if ref != nil {
		return *ref, err
	}
	oldStr, newStr := *oldPtr, ""
	if newPtr != nil {
		newStr = *newPtr
	}
	if oldStr == "" {
		return refusal[EditOutput]("Parameter `old_str` must not be empty: give the exact text to replace, with enough context to be unique."), nil
	}
	at := occurrences(content, oldStr)
	if len(at) == 0 && isCRLF(content) && toCRLF(oldStr) != oldStr {
		// Text a model writes has "\n" line breaks; the file's are "\r\n".
		oldStr, newStr = toCRLF(oldStr), toCRLF(newStr)
		at = occurrences(content, oldStr)
	}
	switch len(at) {
	case 0:
		msg := fmt.Sprintf("No replacement was performed, old_str `%s` did not appear verbatim in %s.", *oldPtr, p)
		if lineNumberPrefix(*oldPtr) {
			msg += " old_str seems to start with the line numbers of a view (`     5\\t`); leave them out, they are not part of the file."
		}
		if c, ok := nearest(splitLines(content), splitLines(*oldPtr)); ok {
			msg += "\n" + describeNearest(c, strings.TrimSuffix(*oldPtr, "\n")) + "View those lines and copy old_str exactly as the file has them."
		}
		return refusal[EditOutput](msg), nil
	case 1:
	default:
		lines := make([]int, len(at))
		for i, off := range at {
			lines[i] = lineOf(content, off)
		}
		r := refusal[EditOutput](fmt.Sprintf("No replacement was performed. Multiple occurrences of old_str `%s` in lines %s. Please ensure it is unique.", *oldPtr, pyInts(lines)))
		r.Out.Lines = lines
		return r, nil
	}
	off := at[0]
	updated := content[:off] + newStr + content[off+len(oldStr):]
	after, err := f.WriteFile(ctx, p, []byte(updated), 0, etag)
	if err != nil {
		return writeErr(p, err)
	}
	e.record(p, undoStep{prev: []byte(content), existed: true, after: after})
	first := lineOf(content, off)
	ls := splitLines(updated)
	from := max(1, first-4)
	to := min(len(ls), first+strings.Count(newStr, "\n")+4)
	snippet := ""
	if to >= from {
		snippet = catN(ls[from-1:to], from)
	}
	text := fmt.Sprintf("The file %s has been edited. Here's the result of running `cat -n` on a snippet of %s:\n%sReview the changes and make sure they are as expected. Edit the file again if necessary.", p, p, snippet)
	return Result[EditOutput]{Text: text, Out: EditOutput{ETag: after, Changed: true, Lines: []int{first}}}, nil
}

// occurrences are the byte offsets of every occurrence of s in content,
// overlapping ones included (a model must make old_str unique either way).
func occurrences(content, s string) []int {
	var at []int
	for i := 0; i <= len(content)-len(s); {
		j := strings.Index(content[i:], s)
		if j < 0 {
			break
		}
		at = append(at, i+j)
		_, size := utf8.DecodeRuneInString(content[i+j:])
		i += j + max(size, 1)
	}
	return at
}

// lineNumberPrefix: s starts like a line of a view ("     5\t...").
func lineNumberPrefix(s string) bool {
	t := strings.TrimLeft(s, " ")
	n := 0
	for n < len(t) && t[n] >= '0' && t[n] <= '9' {
		n++
	}
	return n > 0 && n < len(t) && t[n] == '\t'
}

func (e *Editor) insert(ctx context.Context, f Files, p string, linePtr *int, textPtr *string) (Result[EditOutput], error) {
	if linePtr == nil {
		return refusal[EditOutput]("Parameter `insert_line` is required for command: insert"), nil
	}
	if textPtr == nil {
		return refusal[EditOutput]("Parameter `insert_text` is required for command: insert"), nil
	}
	content, etag, ref, err := readText(ctx, f, p)
	if ref != nil {
		return *ref, err
	}
	ls := splitLines(content)
	n := *linePtr
	if n < 0 || n > len(ls) {
		return refusal[EditOutput](fmt.Sprintf("Invalid `insert_line` parameter: %d. It should be within the range of lines of the file: [0, %d]", n, len(ls))), nil
	}
	eol := "\n"
	if isCRLF(content) {
		eol = "\r\n"
	}
	text := *textPtr
	if eol == "\r\n" {
		text = toCRLF(text)
	}
	if !strings.HasSuffix(text, "\n") {
		text += eol
	}
	// The byte offset where line n+1 starts.
	off := 0
	for i := 0; i < n; i++ {
		off += len(ls[i]) + 1
	}
	prefix := content[:min(off, len(content))]
	if off > len(content) { // the last line has no line break
		prefix = content + eol
	}
	updated := prefix + text + content[min(off, len(content)):]
	after, err := f.WriteFile(ctx, p, []byte(updated), 0, etag)
	if err != nil {
		return writeErr(p, err)
	}
	e.record(p, undoStep{prev: []byte(content), existed: true, after: after})
	nls := splitLines(updated)
	added := strings.Count(text, "\n")
	from := max(1, n+1-4)
	to := min(len(nls), n+added+4)
	text = fmt.Sprintf("The file %s has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n%sReview the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.", p, catN(nls[from-1:to], from))
	return Result[EditOutput]{Text: text, Out: EditOutput{ETag: after, Changed: true, Lines: []int{n + 1}}}, nil
}

func (e *Editor) record(p string, s undoStep) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.history == nil {
		e.history = map[string][]undoStep{}
	}
	e.seq++
	s.seq = e.seq
	h := append(e.history[p], s)
	e.held += len(s.prev)
	for len(h) > maxUndo {
		e.held -= len(h[0].prev)
		h = h[1:]
	}
	e.history[p] = h
	for e.held > maxUndoBytes {
		e.dropOldest()
	}
}

// dropOldest forgets the oldest undo step of all files. The caller holds mu.
func (e *Editor) dropOldest() {
	oldest, at := "", 0
	for p, h := range e.history {
		if len(h) > 0 && (oldest == "" || h[0].seq < at) {
			oldest, at = p, h[0].seq
		}
	}
	if oldest == "" {
		e.held = 0
		return
	}
	h := e.history[oldest]
	e.held -= len(h[0].prev)
	if len(h) == 1 {
		delete(e.history, oldest)
	} else {
		e.history[oldest] = h[1:]
	}
}

func (e *Editor) undo(ctx context.Context, f Files, p string) (Result[EditOutput], error) {
	e.mu.Lock()
	h := e.history[p]
	var s undoStep
	ok := len(h) > 0
	if ok {
		s = h[len(h)-1]
	}
	e.mu.Unlock()
	if !ok {
		return refusal[EditOutput](fmt.Sprintf("No edit history found for %s.", p)), nil
	}
	pop := func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if h := e.history[p]; len(h) > 0 {
			e.held -= len(h[len(h)-1].prev)
			e.history[p] = h[:len(h)-1]
		}
	}
	_, cur, err := f.ReadFile(ctx, p)
	if err != nil && !errors.Is(err, wire.ErrNotFound) {
		return readErr(p, err)
	}
	if err != nil || cur != s.after {
		return refusal[EditOutput](fmt.Sprintf("%s changed since its last edit by this tool (another program wrote or removed it), so undo_edit would lose that change. Nothing was written; view the file and edit it instead.", p)), nil
	}
	if !s.existed {
		if err := f.DeleteFile(ctx, p); err != nil {
			return writeErr(p, err)
		}
		pop()
		return Result[EditOutput]{Text: fmt.Sprintf("Last edit to %s undone successfully: the file it created was removed.", p), Out: EditOutput{Changed: true}}, nil
	}
	etag, err := f.WriteFile(ctx, p, s.prev, 0, cur)
	if err != nil {
		return writeErr(p, err)
	}
	pop()
	text := fmt.Sprintf("Last edit to %s undone successfully. Here's the result of running `cat -n` on %s:\n%s", p, p, catN(splitLines(string(s.prev)), 1))
	return Result[EditOutput]{Text: text, Out: EditOutput{ETag: etag, Changed: true}}, nil
}
