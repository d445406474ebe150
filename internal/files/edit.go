package files

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/wire"
)

// MaxEditSize is the largest file the editor reads; bigger ones are for a
// shell (grep -n, sed -n) or the raw file API.
const MaxEditSize = 10 << 20

const (
	// maxOutput is where views are clipped, in characters: what the common
	// str_replace_editor implementations use.
	maxOutput = 16000
	// snippetWindow is how many lines of context an edit's snippet shows
	// on each side of the change.
	snippetWindow = 4
)

// The wording of every message below follows the str_replace_editor tool
// of Anthropic and OpenHands closely, because models are trained on it;
// where limbs adds a hint, it comes after the familiar sentence.
const (
	fileClipped = "<response clipped><NOTE>To save on context only part of this file has been shown to you: lines %d-%d of %d. " +
		"To see more, view it again with view_range [%d, %d], or search inside the file with `grep -n` to find the line numbers of what you are looking for.</NOTE>"
	lineClipped = "<response clipped><NOTE>Line %d is longer than %d characters and only its beginning has been shown to you. " +
		"Read it in parts with a shell command such as `sed -n '%dp' %s | cut -c1-4000`.%s</NOTE>"
	dirClipped = "<response clipped><NOTE>To save on context only part of this directory has been shown to you. " +
		"You should use `ls -la` instead to view large directories incrementally, or view a subdirectory.</NOTE>"
	reviewEdit   = "Review the changes and make sure they are as expected. Edit the file again if necessary."
	reviewInsert = "Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary."
	editCommands = "view, create, str_replace, insert, undo_edit"
)

// editError is an editor failure whose message is meant for a model to
// read and act on; kind is the wire sentinel deciding the status.
type editError struct {
	msg  string
	kind error
}

func (e *editError) Error() string { return e.msg }
func (e *editError) Unwrap() error { return e.kind }

func toolErr(format string, args ...any) error {
	return &editError{msg: fmt.Sprintf(format, args...), kind: wire.ErrBadRequest}
}

func missingParam(command, param string) error {
	return toolErr("Parameter `%s` is required for command: %s.", param, command)
}

func invalidParam(param, value, hint string) error {
	return toolErr("Invalid `%s` parameter: %s. %s", param, value, hint)
}

func (s *Server) serveEdit(w http.ResponseWriter, r *http.Request) error {
	var req wire.Edit
	if err := wire.DecodeJSON(r, &req, false); err != nil {
		return err
	}
	out, sum, err := s.Edit(req)
	if err != nil {
		return err
	}
	if sum != "" {
		w.Header().Set(HeaderSHA256, sum)
	}
	wire.WriteJSON(w, http.StatusOK, wire.EditResult{Output: out})
	return nil
}

// Edit runs one str_replace_editor command. It returns the text for the
// model and, after a change, the sha256 of the file as it now is. Errors
// wrap wire.ErrBadRequest (with a message a model can act on),
// wire.ErrTooLarge or wire.ErrConflict.
func (s *Server) Edit(req wire.Edit) (output, sha string, err error) {
	switch req.Command {
	case "view", "create", "str_replace", "insert", "undo_edit":
	case "":
		return "", "", toolErr("Parameter `command` is required. The allowed commands for the str_replace_editor tool are: %s", editCommands)
	default:
		return "", "", toolErr("Unrecognized command %s. The allowed commands for the str_replace_editor tool are: %s", req.Command, editCommands)
	}
	if req.Path == "" {
		return "", "", missingParam(req.Command, "path")
	}
	p, err := s.resolve(req.Path)
	if err != nil {
		return "", "", toolErr("Invalid `path` parameter: %q. It contains a NUL byte.", req.Path)
	}
	if req.Command == "view" {
		out, err := s.view(p, req.ViewRange)
		return out, "", err
	}

	target, err := writeTarget(p)
	if err != nil {
		return "", "", toolErr("Invalid `path` parameter: %s. It is a symlink whose target cannot be resolved; edit the target or remove the link.", p)
	}
	unlock := s.lock(target)
	defer unlock()

	fi, statErr := os.Stat(target)
	if req.Command == "create" {
		if req.FileText == nil {
			return "", "", missingParam("create", "file_text")
		}
		if _, err := os.Lstat(p); err == nil {
			return "", "", invalidParam("path", p, fmt.Sprintf("File already exists at: %s. Cannot overwrite files using command `create`.", p))
		}
		return s.create(p, target, *req.FileText)
	}
	if statErr != nil {
		if errors.Is(statErr, os.ErrNotExist) {
			return "", "", invalidParam("path", p, fmt.Sprintf("The path %s does not exist. Please provide a valid path.", p))
		}
		return "", "", invalidParam("path", p, fmt.Sprintf("It cannot be read: %v.", statErr))
	}
	if fi.IsDir() {
		return "", "", invalidParam("path", p, fmt.Sprintf("The path %s is a directory and only the `view` command can be used on directories.", p))
	}
	if req.Command == "undo_edit" {
		return s.undo(p, target, req.IfMatch)
	}
	content, err := readText(p, fi)
	if err != nil {
		return "", "", err
	}
	if err := checkIfMatch(target, req.IfMatch); err != nil {
		return "", "", err
	}
	if req.Command == "str_replace" {
		return s.strReplace(p, target, content, req)
	}
	return s.insert(p, target, content, req)
}

// readText reads a file the editor may show or change.
func readText(p string, fi os.FileInfo) (string, error) {
	if !fi.Mode().IsRegular() {
		return "", toolErr("File validation failed for %s: it is not a regular file (%s). Only regular text files can be viewed or edited.", p, fi.Mode().Type())
	}
	if fi.Size() > MaxEditSize {
		return "", &editError{
			msg: fmt.Sprintf("File validation failed for %s: File is too large (%.1fMB). Maximum allowed size is %dMB. "+
				"Use a shell command such as `grep -n` or `sed -n 'START,ENDp'` on it instead.", p, float64(fi.Size())/(1<<20), MaxEditSize>>20),
			kind: wire.ErrTooLarge,
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", toolErr("Ran into %v while trying to read %s", err, p)
	}
	if isBinary(b) {
		return "", toolErr("File validation failed for %s: File appears to be binary and this file type cannot be read or edited by this tool. "+
			"Use a shell command such as `file` or `xxd` to inspect it.", p)
	}
	if !utf8.Valid(b) {
		return "", toolErr("The editor only supports UTF-8 encoding files, please use bash commands for files with other encoding: %s", p)
	}
	return string(b), nil
}

// isBinary says whether b looks like something other than text: a NUL byte
// early on, as file(1) and git decide.
func isBinary(b []byte) bool {
	head := b
	if len(head) > 8192 {
		head = head[:8192]
	}
	return strings.IndexByte(string(head), 0) >= 0
}

// isCRLF says whether every line of s ends in \r\n, so that the editor
// writes new lines the same way.
func isCRLF(s string) bool {
	n := strings.Count(s, "\n")
	return n > 0 && strings.Count(s, "\r\n") == n
}

// adaptEOL gives text typed with \n the line endings of a CRLF file.
func adaptEOL(text string, crlf bool) string {
	if !crlf || strings.Contains(text, "\r") {
		return text
	}
	return strings.ReplaceAll(text, "\n", "\r\n")
}

// lines splits content the way `cat -n` shows it: a final newline ends the
// last line rather than starting an empty one, and a CRLF file's \r is not
// shown.
func lines(content string) []string {
	if content == "" {
		return nil
	}
	ls := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
	for i, l := range ls {
		ls[i] = strings.TrimSuffix(l, "\r")
	}
	return ls
}

// numbered formats ls as `cat -n` does, the first one numbered start.
// It stops before maxOutput characters and returns how many lines it
// showed; a first line longer than that is cut, and cut says so.
func numbered(ls []string, start int) (body string, shown int, cut bool) {
	var b strings.Builder
	for i, l := range ls {
		row := fmt.Sprintf("%6d\t%s", start+i, l)
		if i > 0 {
			row = "\n" + row
		}
		if b.Len()+len(row) > maxOutput {
			if i > 0 {
				return b.String(), i, false
			}
			row = row[:maxOutput]
			for !utf8.ValidString(row) {
				row = row[:len(row)-1]
			}
			return row, 1, true
		}
		b.WriteString(row)
	}
	return b.String(), len(ls), false
}

// catN is the familiar "Here's the result of running `cat -n`" block for
// lines ls, which start at line start of a file of total lines, with a
// note saying how to see the rest when it had to be clipped.
func catN(desc, path string, ls []string, start, total int) string {
	body, shown, cut := numbered(ls, start)
	out := "Here's the result of running `cat -n` on " + desc + ":\n" + body + "\n"
	last := start + shown - 1
	switch {
	case cut:
		rest := ""
		if start < total {
			rest = fmt.Sprintf(" View the lines after it with view_range [%d, %d].", start+1, total)
		}
		out += fmt.Sprintf(lineClipped, start, maxOutput, start, path, rest) + "\n"
	case shown < len(ls):
		out += fmt.Sprintf(fileClipped, start, last, total, last+1, min(total, last+shown)) + "\n"
	}
	return out
}

func pyInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (s *Server) view(p string, viewRange []int) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", invalidParam("path", p, fmt.Sprintf("The path %s does not exist. Please provide a valid path.", p))
		}
		return "", invalidParam("path", p, fmt.Sprintf("It cannot be read: %v.", err))
	}
	if fi.IsDir() {
		if viewRange != nil {
			return "", invalidParam("view_range", pyInts(viewRange), "The `view_range` parameter is not allowed when `path` points to a directory.")
		}
		return viewDir(p)
	}
	content, err := readText(p, fi)
	if err != nil {
		return "", err
	}
	ls := lines(content)
	n := len(ls)
	if viewRange == nil {
		if n == 0 {
			return fmt.Sprintf("Here's the result of running `cat -n` on %s:\n\nThe file %s is empty.\n", p, p), nil
		}
		return catN(p, p, ls, 1, n), nil
	}
	if len(viewRange) != 2 {
		return "", invalidParam("view_range", pyInts(viewRange), "It should be a list of two integers.")
	}
	start, end := viewRange[0], viewRange[1]
	if start < 1 || start > n {
		return "", invalidParam("view_range", pyInts(viewRange), fmt.Sprintf("Its first element `%d` should be within the range of lines of the file: %s.", start, pyInts([]int{1, n})))
	}
	warning := ""
	switch {
	case end == -1:
		end = n
	case end > n:
		warning = fmt.Sprintf("NOTE: We only show up to %d since there's only %d lines in this file\n", n, n)
		end = n
	}
	if end < start {
		return "", invalidParam("view_range", pyInts(viewRange), fmt.Sprintf("Its second element `%d` should be greater than or equal to the first element `%d`.", end, start))
	}
	return catN(p, p, ls[start-1:end], start, n) + warning, nil
}

// viewDir lists p two levels deep without hidden entries, as
// `find p -maxdepth 2 -not -path '*/.*' | sort` would, directories marked
// with a trailing slash. Symlinks are listed, not followed.
func viewDir(p string) (string, error) {
	top, err := os.ReadDir(p)
	if err != nil {
		return "", invalidParam("path", p, fmt.Sprintf("The directory cannot be read: %v.", err))
	}
	hidden := 0
	paths := []string{p + "/"}
	for _, de := range top {
		if strings.HasPrefix(de.Name(), ".") {
			hidden++
			continue
		}
		fp := filepath.Join(p, de.Name())
		if !de.IsDir() {
			paths = append(paths, fp)
			continue
		}
		paths = append(paths, fp+"/")
		subs, err := os.ReadDir(fp)
		if err != nil {
			continue
		}
		for _, sde := range subs {
			if strings.HasPrefix(sde.Name(), ".") {
				continue
			}
			sp := filepath.Join(fp, sde.Name())
			if sde.IsDir() {
				sp += "/"
			}
			paths = append(paths, sp)
		}
	}
	sort.Strings(paths[1:])
	var b strings.Builder
	fmt.Fprintf(&b, "Here's the files and directories up to 2 levels deep in %s, excluding hidden items:\n", p)
	clipped := false
	for i, l := range paths {
		if b.Len()+len(l)+1 > maxOutput {
			clipped = true
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l)
	}
	b.WriteByte('\n')
	if clipped {
		b.WriteString(dirClipped + "\n")
	}
	if hidden > 0 {
		fmt.Fprintf(&b, "\n%d hidden files/directories in this directory are excluded. You can use 'ls -la %s' to see them.\n", hidden, p)
	}
	return b.String(), nil
}

// writeText replaces target's content, keeping its mode and owner. The
// caller holds target's lock.
func (s *Server) writeText(target, content string) (string, error) {
	dir := filepath.Dir(target)
	if err := mkdirAllOwned(dir); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".limbs-*")
	if err != nil {
		return "", toolErr("Ran into %v while trying to write to %s", err, target)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.WriteString(content); err != nil {
		return "", toolErr("Ran into %v while trying to write to %s", err, target)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("writing %s: fsync: %w", target, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("writing %s: %w", target, err)
	}
	if err := s.commit(tmp.Name(), target, 0, false); err != nil {
		return "", err
	}
	ok = true
	sum := sha256.Sum256([]byte(content))
	return hex.EncodeToString(sum[:]), nil
}

func (s *Server) create(p, target, text string) (string, string, error) {
	if err := s.history.push(target, nil, false); err != nil {
		return "", "", err
	}
	sum, err := s.writeText(target, text)
	if err != nil {
		return "", "", err
	}
	return "File created successfully at: " + p, sum, nil
}

// record saves content as the state before an edit of target.
func (s *Server) record(target, content string) error {
	return s.history.push(target, []byte(content), true)
}

func (s *Server) strReplace(p, target, content string, req wire.Edit) (string, string, error) {
	if req.OldStr == nil {
		return "", "", missingParam("str_replace", "old_str")
	}
	oldStr, newStr := *req.OldStr, ""
	if req.NewStr != nil {
		newStr = *req.NewStr
	}
	if oldStr == "" {
		return "", "", invalidParam("old_str", "``", "It is empty; give the exact text to replace, copied from a `view` of the file, or use `insert` to add text.")
	}
	if newStr == oldStr {
		return "", "", invalidParam("new_str", "`"+newStr+"`", "No replacement was performed. `new_str` and `old_str` must be different.")
	}
	crlf := isCRLF(content)
	old, repl := adaptEOL(oldStr, crlf), adaptEOL(newStr, crlf)
	var at []int
	for i := 0; ; {
		j := strings.Index(content[i:], old)
		if j < 0 {
			break
		}
		at = append(at, i+j)
		i += j + 1
	}
	if len(at) == 0 {
		msg := fmt.Sprintf("No replacement was performed, old_str `%s` did not appear verbatim in %s.", oldStr, p)
		if hint := noMatchHint(content, oldStr); hint != "" {
			msg += " " + hint
		}
		return "", "", toolErr("%s", msg)
	}
	if len(at) > 1 {
		var lineNos []int
		for _, i := range at {
			n := strings.Count(content[:i], "\n") + 1
			if len(lineNos) == 0 || lineNos[len(lineNos)-1] != n {
				lineNos = append(lineNos, n)
			}
		}
		return "", "", toolErr("No replacement was performed. Multiple occurrences of old_str `%s` in lines %s. Please ensure it is unique.", oldStr, pyInts(lineNos))
	}
	idx := at[0]
	updated := content[:idx] + repl + content[idx+len(old):]
	if err := s.record(target, content); err != nil {
		return "", "", err
	}
	sum, err := s.writeText(target, updated)
	if err != nil {
		return "", "", err
	}
	line := strings.Count(content[:idx], "\n") + 1
	ls := lines(updated)
	start := max(1, line-snippetWindow)
	end := min(len(ls), line+snippetWindow+strings.Count(newStr, "\n"))
	snippet := ""
	if start <= end {
		snippet = catN("a snippet of "+p, p, ls[start-1:end], start, len(ls))
	} else {
		snippet = "Here's the result of running `cat -n` on a snippet of " + p + ":\n\n"
	}
	return "The file " + p + " has been edited. " + snippet + reviewEdit, sum, nil
}

func (s *Server) insert(p, target, content string, req wire.Edit) (string, string, error) {
	if req.InsertLine == nil {
		return "", "", missingParam("insert", "insert_line")
	}
	if req.NewStr == nil {
		return "", "", missingParam("insert", "new_str")
	}
	n := len(lines(content))
	at := *req.InsertLine
	if at < 0 || at > n {
		return "", "", invalidParam("insert_line", strconv.Itoa(at), fmt.Sprintf("It should be within the range of allowed values: %s", pyInts([]int{0, n})))
	}
	crlf := isCRLF(content)
	eol := "\n"
	if crlf {
		eol = "\r\n"
	}
	// Byte offset just after line at.
	off := 0
	for i := 0; i < at; i++ {
		j := strings.IndexByte(content[off:], '\n')
		if j < 0 {
			off = len(content)
			break
		}
		off += j + 1
	}
	text := adaptEOL(*req.NewStr, crlf)
	if !strings.HasSuffix(text, "\n") {
		text += eol
	}
	if off == len(content) && content != "" && !strings.HasSuffix(content, "\n") {
		text = eol + text
	}
	updated := content[:off] + text + content[off:]
	if err := s.record(target, content); err != nil {
		return "", "", err
	}
	sum, err := s.writeText(target, updated)
	if err != nil {
		return "", "", err
	}
	added := len(lines(*req.NewStr))
	if added == 0 {
		added = 1
	}
	ls := lines(updated)
	start := max(1, at-snippetWindow+1)
	end := min(len(ls), at+added+snippetWindow)
	return "The file " + p + " has been edited. " + catN("a snippet of the edited file", p, ls[start-1:end], start, len(ls)) + reviewInsert, sum, nil
}

func (s *Server) undo(p, target, ifMatch string) (string, string, error) {
	prev, existed, seq, err := s.history.peek(target)
	if errors.Is(err, errNoHistory) {
		return "", "", toolErr("No edit history found for %s.", p)
	}
	if err != nil {
		return "", "", err
	}
	if err := checkIfMatch(target, ifMatch); err != nil {
		return "", "", err
	}
	if !existed {
		if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", "", toolErr("Ran into %v while trying to undo the creation of %s", err, p)
		}
		s.history.drop(target, seq)
		return fmt.Sprintf("Last edit to %s undone successfully. That edit created the file, so it has been removed.", p), "", nil
	}
	sum, err := s.writeText(target, string(prev))
	if err != nil {
		return "", "", err
	}
	s.history.drop(target, seq)
	ls := lines(string(prev))
	return "Last edit to " + p + " undone successfully. " + catN(p, p, ls, 1, len(ls)), sum, nil
}

var lineNumberPrefix = regexp.MustCompile(`^\s*\d+\t`)

// noMatchHint explains, when it can, why old_str was not found: line
// numbers copied from a view, or whitespace (tabs, indentation, trailing
// spaces) that differs from the file.
func noMatchHint(content, oldStr string) string {
	oldLines := strings.Split(strings.TrimSuffix(strings.ReplaceAll(oldStr, "\r\n", "\n"), "\n"), "\n")
	numberedLines := 0
	for _, l := range oldLines {
		if lineNumberPrefix.MatchString(l) {
			numberedLines++
		}
	}
	if numberedLines > 0 && numberedLines == len(oldLines) {
		return "old_str seems to start with the line numbers of the `view` output (like `    12\\t`); leave them out and copy only the text after the tab."
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	k := len(oldLines)
	nold := make([]string, k)
	blank := true
	for i, l := range oldLines {
		nold[i] = norm(l)
		if nold[i] != "" {
			blank = false
		}
	}
	if blank {
		return ""
	}
	fl := lines(content)
	var found []int
	for i := 0; i+k <= len(fl); i++ {
		ok := true
		for j := 0; j < k && ok; j++ {
			f := norm(fl[i+j])
			switch {
			case k == 1:
				ok = strings.Contains(f, nold[0])
			case j == 0:
				ok = strings.HasSuffix(f, nold[0])
			case j == k-1:
				ok = strings.HasPrefix(f, nold[j])
			default:
				ok = f == nold[j]
			}
		}
		if ok {
			found = append(found, i+1)
		}
	}
	if len(found) == 0 {
		return ""
	}
	region := strings.Join(fl[found[0]-1:found[0]-1+k], "\n")
	why := "whitespace (indentation, spaces or line breaks) differs"
	switch {
	case strings.Contains(region, "\t") && !strings.Contains(oldStr, "\t"):
		why = "the file indents with tabs where old_str has spaces"
	case !strings.Contains(region, "\t") && strings.Contains(oldStr, "\t"):
		why = "old_str has tabs where the file has spaces"
	}
	where := fmt.Sprintf("line %d", found[0])
	if len(found) > 1 {
		where = "lines " + pyInts(found)
	}
	return fmt.Sprintf("It does appear at %s if whitespace is ignored: %s. View those lines and copy old_str exactly as the file has it.", where, why)
}
