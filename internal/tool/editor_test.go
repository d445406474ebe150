package tool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/limbs-dev/limbs/internal/wire"
)

func sp(s string) *string { return &s }
func ip(n int) *int       { return &n }

// call is one editor call and what its answer must hold.
type call struct {
	in      EditInput
	isError bool
	text    string   // the whole answer, if set
	has     []string // substrings of the answer
	lines   []int    // EditOutput.Lines, if set
}

func TestEditor(t *testing.T) {
	ten := ""
	for i := 1; i <= 10; i++ {
		ten += "line " + itoa(i) + "\n"
	}
	for _, tc := range []struct {
		name  string
		max   int
		files map[string]string
		calls []call
		want  map[string]string // files afterwards (only those named)
		gone  []string          // files that must not exist afterwards
	}{
		{
			name:  "view file with tabs and CRLF",
			files: map[string]string{"/w/a.go": "package a\r\n\r\nfunc f() {\r\n\treturn\r\n}\r\n"},
			calls: []call{{
				in:   EditInput{Command: "view", Path: "a.go"},
				text: "Here's the result of running `cat -n` on /w/a.go:\n     1\tpackage a\n     2\t\n     3\tfunc f() {\n     4\t\treturn\n     5\t}\n",
			}},
		},
		{
			name:  "view_range",
			files: map[string]string{"/w/ten": ten},
			calls: []call{
				{in: EditInput{Command: "view", Path: "/w/ten", ViewRange: []int{3, 4}}, text: "Here's the result of running `cat -n` on /w/ten:\n     3\tline 3\n     4\tline 4\n", lines: []int{3, 4}},
				{in: EditInput{Command: "view", Path: "/w/ten", ViewRange: []int{9, -1}}, text: "Here's the result of running `cat -n` on /w/ten:\n     9\tline 9\n    10\tline 10\n"},
				{in: EditInput{Command: "view", Path: "/w/ten", ViewRange: []int{9, 50}}, has: []string{"    10\tline 10\nNOTE: We only show up to 10 since there's only 10 lines in this file"}},
				{in: EditInput{Command: "view", Path: "/w/ten", ViewRange: []int{0, 2}}, isError: true, has: []string{"should be within the range of lines of the file: [1, 10]"}},
				{in: EditInput{Command: "view", Path: "/w/ten", ViewRange: []int{6, 3}}, isError: true, has: []string{"greater than or equal"}},
			},
		},
		{
			name:  "view empty file",
			files: map[string]string{"/w/empty": ""},
			calls: []call{{in: EditInput{Command: "view", Path: "/w/empty"}, text: "Here's the result of running `cat -n` on /w/empty:\n\nThe file /w/empty is empty.\n"}},
		},
		{
			name:  "view directory two levels, hidden left out",
			files: map[string]string{"/w/README": "r", "/w/src/main.go": "m", "/w/src/deep/x/y.go": "y", "/w/.git/config": "c", "/w/src/.env": "e"},
			calls: []call{{
				in:   EditInput{Command: "view", Path: "/w"},
				text: "Here's the files and directories up to 2 levels deep in /w, excluding hidden items:\n/w/\n/w/README\n/w/src/\n/w/src/deep/\n/w/src/main.go\n\n1 hidden files/directories in this directory are excluded. You can use 'ls -la /w' to see them.\n",
			}},
		},
		{
			name:  "max_characters clips at a line and says how to go on",
			max:   42,
			files: map[string]string{"/w/ten": ten},
			calls: []call{{
				in:    EditInput{Command: "view", Path: "/w/ten"},
				has:   []string{"     1\tline 1\n     2\tline 2\n     3\tline 3\n<response clipped>", "lines 1-3 of 10", "view_range [4, 6]"},
				lines: []int{1, 3},
			}},
		},
		{
			name:  "missing file",
			calls: []call{{in: EditInput{Command: "view", Path: "/w/nope"}, isError: true, text: "Invalid `path` parameter: /w/nope. The path /w/nope does not exist. Please provide a valid path."}},
		},
		{
			name:  "create, then create again is refused",
			files: map[string]string{},
			calls: []call{
				{in: EditInput{Command: "create", Path: "new/é.txt", FileText: sp("naïve ✓\n")}, text: "File created successfully at: /w/new/é.txt"},
				{in: EditInput{Command: "create", Path: "new/é.txt", FileText: sp("other")}, isError: true, has: []string{"File already exists at: /w/new/é.txt. Cannot overwrite files using command `create`."}},
			},
			want: map[string]string{"/w/new/é.txt": "naïve ✓\n"},
		},
		{
			name:  "create an empty file",
			calls: []call{{in: EditInput{Command: "create", Path: "/w/e", FileText: sp("")}, text: "File created successfully at: /w/e"}},
			want:  map[string]string{"/w/e": ""},
		},
		{
			name:  "str_replace once, tabs kept byte-exact",
			files: map[string]string{"/w/m.go": "func f() {\n\tx := 1\n\treturn\n}\n"},
			calls: []call{{
				in:    EditInput{Command: "str_replace", Path: "/w/m.go", OldStr: sp("\tx := 1\n"), NewStr: sp("\tx := 2\n\ty := 3\n")},
				text:  "The file /w/m.go has been edited. Here's the result of running `cat -n` on a snippet of /w/m.go:\n     1\tfunc f() {\n     2\t\tx := 2\n     3\t\ty := 3\n     4\t\treturn\n     5\t}\nReview the changes and make sure they are as expected. Edit the file again if necessary.",
				lines: []int{2},
			}},
			want: map[string]string{"/w/m.go": "func f() {\n\tx := 2\n\ty := 3\n\treturn\n}\n"},
		},
		{
			name:  "str_replace in a CRLF file keeps CRLF",
			files: map[string]string{"/w/c.txt": "one\r\ntwo\r\nthree\r\n"},
			calls: []call{{in: EditInput{Command: "str_replace", Path: "/w/c.txt", OldStr: sp("one\ntwo"), NewStr: sp("1\n2")}, has: []string{"     1\t1\n     2\t2\n"}}},
			want:  map[string]string{"/w/c.txt": "1\r\n2\r\nthree\r\n"},
		},
		{
			name:  "str_replace unicode",
			files: map[string]string{"/w/u": "grüße — “quotes” 日本\n"},
			calls: []call{{in: EditInput{Command: "str_replace", Path: "/w/u", OldStr: sp("“quotes”"), NewStr: sp("«q»")}}},
			want:  map[string]string{"/w/u": "grüße — «q» 日本\n"},
		},
		{
			name:  "str_replace without new_str deletes",
			files: map[string]string{"/w/d": "keep\ndrop\nkeep\n"},
			calls: []call{{in: EditInput{Command: "str_replace", Path: "/w/d", OldStr: sp("drop\n")}}},
			want:  map[string]string{"/w/d": "keep\nkeep\n"},
		},
		{
			name:  "several matches name every line",
			files: map[string]string{"/w/p.py": "def f():\n    return 1\n\ndef g():\n    return 1\n"},
			calls: []call{{
				in:      EditInput{Command: "str_replace", Path: "/w/p.py", OldStr: sp("    return 1"), NewStr: sp("    return 2")},
				isError: true,
				text:    "No replacement was performed. Multiple occurrences of old_str `    return 1` in lines [2, 5]. Please ensure it is unique.",
				lines:   []int{2, 5},
			}},
			want: map[string]string{"/w/p.py": "def f():\n    return 1\n\ndef g():\n    return 1\n"},
		},
		{
			name:  "no match names the nearest text with tabs visible",
			files: map[string]string{"/w/m.go": "package main\n\nfunc main() {\n\tif true {\n\t\tprintln(1)\n\t}\n}\n"},
			calls: []call{{
				in:      EditInput{Command: "str_replace", Path: "/w/m.go", OldStr: sp("    if true {\n        println(1)"), NewStr: sp("x")},
				isError: true,
				has: []string{
					"did not appear verbatim in /w/m.go.",
					"The nearest text in the file is at line 4 and matches once whitespace is ignored (the file indents with tabs where old_str has spaces)",
					"4: \\tif true {\n5: \\t\\tprintln(1)\n",
				},
			}},
		},
		{
			name:  "no match in a CRLF file shows the \\r",
			files: map[string]string{"/w/c": "alpha\r\nbeta\n"},
			calls: []call{{
				in:      EditInput{Command: "str_replace", Path: "/w/c", OldStr: sp("alpha\nbeta"), NewStr: sp("x")},
				isError: true,
				has:     []string{"at line 1", "1: alpha\\r\n2: beta\n"},
			}},
		},
		{
			name:  "old_str with view line numbers gets a hint",
			files: map[string]string{"/w/t": "a\nb\n"},
			calls: []call{{in: EditInput{Command: "str_replace", Path: "/w/t", OldStr: sp("     2\tb")}, isError: true, has: []string{"line numbers of a view"}}},
		},
		{
			name:  "insert at the top, the end, and after a last line without a break",
			files: map[string]string{"/w/i": "a\nb", "/w/j": "x\n"},
			calls: []call{
				{in: EditInput{Command: "insert", Path: "/w/i", InsertLine: ip(0), InsertText: sp("top")}, lines: []int{1}, has: []string{"     1\ttop\n     2\ta\n"}},
				{in: EditInput{Command: "insert", Path: "/w/i", InsertLine: ip(3), NewStr: sp("end\n")}},
				{in: EditInput{Command: "insert", Path: "/w/j", InsertLine: ip(1), InsertText: sp("y")}},
				{in: EditInput{Command: "insert", Path: "/w/j", InsertLine: ip(9), InsertText: sp("z")}, isError: true, has: []string{"Invalid `insert_line` parameter: 9. It should be within the range of lines of the file: [0, 2]"}},
			},
			want: map[string]string{"/w/i": "top\na\nb\nend\n", "/w/j": "x\ny\n"},
		},
		{
			name:  "insert into a CRLF file",
			files: map[string]string{"/w/c": "a\r\nb\r\n"},
			calls: []call{{in: EditInput{Command: "insert", Path: "/w/c", InsertLine: ip(1), InsertText: sp("m1\nm2")}}},
			want:  map[string]string{"/w/c": "a\r\nm1\r\nm2\r\nb\r\n"},
		},
		{
			name:  "undo_edit reverts edits in turn, and a create",
			files: map[string]string{"/w/u": "one\n"},
			calls: []call{
				{in: EditInput{Command: "str_replace", Path: "/w/u", OldStr: sp("one"), NewStr: sp("two")}},
				{in: EditInput{Command: "insert", Path: "/w/u", InsertLine: ip(1), InsertText: sp("three")}},
				{in: EditInput{Command: "undo_edit", Path: "/w/u"}, text: "Last edit to /w/u undone successfully. Here's the result of running `cat -n` on /w/u:\n     1\ttwo\n"},
				{in: EditInput{Command: "undo_edit", Path: "/w/u"}},
				{in: EditInput{Command: "undo_edit", Path: "/w/u"}, isError: true, text: "No edit history found for /w/u."},
				{in: EditInput{Command: "create", Path: "/w/n", FileText: sp("n")}},
				{in: EditInput{Command: "undo_edit", Path: "/w/n"}, has: []string{"removed"}},
			},
			want: map[string]string{"/w/u": "one\n"},
			gone: []string{"/w/n"},
		},
		{
			name:  "binary and directories are refused",
			files: map[string]string{"/w/bin": "a\x00b", "/w/d/x": "x"},
			calls: []call{
				{in: EditInput{Command: "str_replace", Path: "/w/bin", OldStr: sp("a")}, isError: true, has: []string{"binary"}},
				{in: EditInput{Command: "str_replace", Path: "/w/d", OldStr: sp("a")}, isError: true, has: []string{"is a directory"}},
				{in: EditInput{Command: "view", Path: "/w/d", ViewRange: []int{1, 2}}, isError: true, has: []string{"not allowed when `path` points to a directory"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMem(tc.files)
			m.dirs["/w"] = true
			e := NewEditor(tc.max)
			for i, c := range tc.calls {
				r, err := e.Run(context.Background(), m, "/w", c.in)
				if err != nil {
					t.Fatalf("call %d %+v: %v", i, c.in, err)
				}
				if r.IsError != c.isError {
					t.Errorf("call %d %s: IsError = %v, want %v; text:\n%s", i, c.in.Command, r.IsError, c.isError, r.Text)
				}
				if c.text != "" {
					if d := cmp.Diff(c.text, r.Text); d != "" {
						t.Errorf("call %d %s: text (-want +got):\n%s", i, c.in.Command, d)
					}
				}
				for _, h := range c.has {
					if !strings.Contains(r.Text, h) {
						t.Errorf("call %d %s: text lacks %q:\n%s", i, c.in.Command, h, r.Text)
					}
				}
				if c.lines != nil {
					if d := cmp.Diff(c.lines, r.Out.Lines); d != "" {
						t.Errorf("call %d: lines (-want +got):\n%s", i, d)
					}
				}
			}
			for p, want := range tc.want {
				got, ok := m.get(p)
				if !ok {
					t.Errorf("%s is missing", p)
				} else if got != want {
					t.Errorf("%s = %q, want %q", p, got, want)
				}
			}
			for _, p := range tc.gone {
				if _, ok := m.get(p); ok {
					t.Errorf("%s still exists", p)
				}
			}
		})
	}
}

// TestEditorConcurrentWrite: a program that writes the file between the
// editor's read and its write wins; the edit is refused, not lost silently.
func TestEditorConcurrentWrite(t *testing.T) {
	m := newMem(map[string]string{"/w/f": "v1\n"})
	m.beforeWrite = func(p string) {
		m.beforeWrite = nil
		m.mu.Lock()
		m.files[p] = memFile{data: []byte("other writer\n"), mode: 0o644}
		m.mu.Unlock()
	}
	e := NewEditor(0)
	r, err := e.Run(context.Background(), m, "/", EditInput{Command: "str_replace", Path: "/w/f", OldStr: sp("v1"), NewStr: sp("v2")})
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError || !strings.Contains(r.Text, "changed since it was read") {
		t.Errorf("got IsError=%v %q, want a refusal saying the file changed", r.IsError, r.Text)
	}
	if got, _ := m.get("/w/f"); got != "other writer\n" {
		t.Errorf("file = %q, want the other writer's content", got)
	}
	// undo_edit has nothing to undo: the edit did not happen.
	r, _ = e.Run(context.Background(), m, "/", EditInput{Command: "undo_edit", Path: "/w/f"})
	if !r.IsError || !strings.Contains(r.Text, "No edit history") {
		t.Errorf("undo after a refused edit: %q", r.Text)
	}
}

// TestEditorUndoRefusesOverOthersChange: undo_edit must not throw away a
// change another program made after the edit.
func TestEditorUndoRefusesOverOthersChange(t *testing.T) {
	m := newMem(map[string]string{"/w/f": "v1\n"})
	e := NewEditor(0)
	if r, _ := e.Run(context.Background(), m, "/", EditInput{Command: "str_replace", Path: "/w/f", OldStr: sp("v1"), NewStr: sp("v2")}); r.IsError {
		t.Fatal(r.Text)
	}
	m.files["/w/f"] = memFile{data: []byte("v3\n"), mode: 0o644}
	r, _ := e.Run(context.Background(), m, "/", EditInput{Command: "undo_edit", Path: "/w/f"})
	if !r.IsError {
		t.Errorf("undo over another change was done: %q", r.Text)
	}
	if got, _ := m.get("/w/f"); got != "v3\n" {
		t.Errorf("file = %q, want v3", got)
	}
}

// TestDetailLeavesOutTheAPI: the daemon's hints name its HTTP routes and
// query parameters; what a model reads must not.
func TestDetailLeavesOutTheAPI(t *testing.T) {
	for _, msg := range []string{
		"/w/d is a directory; list it with GET /v1/files/list or fetch it with GET /v1/files/archive: bad request",
		"/w/d is a directory that is not empty; pass recursive=true to delete it with everything in it",
	} {
		got := detail(errors.New(msg))
		if strings.Contains(got, "/v1/") || strings.Contains(got, "=true") || strings.HasSuffix(got, "bad request") {
			t.Errorf("detail(%q) = %q", msg, got)
		}
	}
}

// TestRefusalsLeaveOutTheAPI: a write the daemon refuses reaches the model
// in the tool's words, without the daemon's route hints.
func TestRefusalsLeaveOutTheAPI(t *testing.T) {
	m := newMem(map[string]string{"/w/f": "a\n"})
	m.failWrite["/w/f"] = fmt.Errorf("/w/f is a directory; list it with GET /v1/files/list or fetch it with GET /v1/files/archive: %w", wire.ErrBadRequest)
	r, err := NewEditor(0).Run(context.Background(), m, "/", EditInput{Command: "str_replace", Path: "/w/f", OldStr: sp("a"), NewStr: sp("b")})
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError || strings.Contains(r.Text, "/v1/") || !strings.Contains(r.Text, "Cannot write /w/f: /w/f is a directory.") {
		t.Errorf("text: %q", r.Text)
	}
	pr, err := RunApplyPatch(context.Background(), m, "/w", patch("*** Update File: f\n@@\n-a\n+b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !pr.IsError || strings.Contains(pr.Text, "/v1/") {
		t.Errorf("patch text: %q", pr.Text)
	}
}

// TestUndoHistoryBounded: the editor keeps at most maxUndo edits per file
// and maxUndoBytes of old content overall, dropping the oldest first.
func TestUndoHistoryBounded(t *testing.T) {
	e := NewEditor(0)
	big := make([]byte, maxUndoBytes/3+1)
	for i := 0; i < 4; i++ {
		e.record("/f"+itoa(i), undoStep{prev: big, existed: true})
	}
	for i := 0; i < maxUndo+5; i++ {
		e.record("/small", undoStep{prev: []byte("x"), existed: true})
	}
	if _, ok := e.history["/f0"]; ok {
		t.Errorf("the oldest file's history was kept over the byte limit")
	}
	if len(e.history["/f3"]) != 1 || len(e.history["/small"]) != maxUndo {
		t.Errorf("history: f3 %d steps, small %d steps", len(e.history["/f3"]), len(e.history["/small"]))
	}
	if e.held > maxUndoBytes {
		t.Errorf("held %d > %d", e.held, maxUndoBytes)
	}
}
