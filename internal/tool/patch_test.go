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

func TestParsePatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    []FileOp
		wantErr string
	}{
		{
			name: "every kind of section",
			in: "*** Begin Patch\n*** Add File: a/new.txt\n+hello\n+\n*** Delete File: old.txt\n" +
				"*** Update File: src/app.py\n*** Move to: src/main.py\n@@ def greet():\n-print(\"Hi\")\n+print(\"Hello\")\n*** End Patch\n",
			want: []FileOp{
				{Kind: OpAdd, Path: "a/new.txt", Contents: "hello\n\n", Line: 2},
				{Kind: OpDelete, Path: "old.txt", Line: 5},
				{Kind: OpUpdate, Path: "src/app.py", MoveTo: "src/main.py", Line: 6, Hunks: []Hunk{
					{Context: []string{"def greet():"}, Old: []string{`print("Hi")`}, New: []string{`print("Hello")`}, Ops: "-+", Line: 8},
				}},
			},
		},
		{
			name: "first hunk without @@, blank context line, EOF marker, second hunk",
			in:   "*** Begin Patch\n*** Update File: f\n a\n\n-b\n+B\n@@\n x\n-y\n*** End of File\n*** End Patch",
			want: []FileOp{{Kind: OpUpdate, Path: "f", Line: 2, Hunks: []Hunk{
				{Old: []string{"a", "", "b"}, New: []string{"a", "", "B"}, Ops: "  -+", Line: 3},
				{Old: []string{"x", "y"}, New: []string{"x"}, Ops: " -", EOF: true, Line: 7},
			}}},
		},
		{
			name: "several @@ lines jump to a nested scope",
			in:   "*** Begin Patch\n*** Update File: f\n@@ class A\n@@ \tdef m():\n-x\n+y\n*** End Patch",
			want: []FileOp{{Kind: OpUpdate, Path: "f", Line: 2, Hunks: []Hunk{
				{Context: []string{"class A", "\tdef m():"}, Old: []string{"x"}, New: []string{"y"}, Ops: "-+", Line: 3},
			}}},
		},
		{
			name: "heredoc wrapper, CRLF and padded markers",
			in:   "<<'EOF'\r\n  *** Begin Patch \r\n*** Delete File: x\r\n*** End Patch  \r\nEOF\r\n",
			want: []FileOp{{Kind: OpDelete, Path: "x", Line: 3}},
		},
		{name: "empty patch", in: "*** Begin Patch\n*** End Patch"},
		{name: "no begin", in: "*** Add File: x\n+y\n*** End Patch", wantErr: "invalid patch: the first line of the patch must be '*** Begin Patch'"},
		{name: "no end", in: "*** Begin Patch\n*** Add File: x\n+y", wantErr: "invalid patch: the last line of the patch must be '*** End Patch'"},
		{name: "bad header", in: "*** Begin Patch\n*** Frobnicate File: x\n*** End Patch", wantErr: "invalid patch at line 2: '*** Frobnicate File: x' is not a valid file header"},
		{name: "update without hunks", in: "*** Begin Patch\n*** Update File: x\n*** End Patch", wantErr: "invalid patch at line 2: the update of x has no hunks"},
		{name: "bad hunk line", in: "*** Begin Patch\n*** Update File: x\n@@\n?what\n*** End Patch", wantErr: "invalid patch at line 4: unexpected line in the hunk: '?what'"},
		{name: "second hunk without @@", in: "*** Begin Patch\n*** Update File: x\n-a\n+b\n\n?c\n*** End Patch", wantErr: "invalid patch at line 6: expected the hunk to start with an '@@' line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePatch(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want prefix %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, p.Ops); d != "" {
				t.Errorf("ops (-want +got):\n%s", d)
			}
		})
	}
}

func patch(body string) PatchInput {
	return PatchInput{Input: "*** Begin Patch\n" + body + "*** End Patch\n"}
}

func TestApplyPatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		in      PatchInput
		isError bool
		has     []string
		want    map[string]string // every file afterwards
		failed  *PatchFailure
	}{
		{
			name:  "add, update and delete",
			files: map[string]string{"/w/m.txt": "a\nb\nc\n", "/w/old": "x"},
			in:    patch("*** Add File: d/new.txt\n+hello\n*** Update File: m.txt\n@@\n a\n-b\n+B\n c\n*** Delete File: old\n"),
			has:   []string{"Success. Updated the following files:\nA d/new.txt\nM m.txt\nD old\n"},
			want:  map[string]string{"/w/m.txt": "a\nB\nc\n", "/w/d/new.txt": "hello\n"},
		},
		{
			name:  "move and update",
			files: map[string]string{"/w/src/a.py": "def f():\n    pass\n", "/w/keep": "k"},
			in:    patch("*** Update File: src/a.py\n*** Move to: lib/b.py\n@@ def f():\n-    pass\n+    return 1\n"),
			has:   []string{"M lib/b.py"},
			want:  map[string]string{"/w/lib/b.py": "def f():\n    return 1\n", "/w/keep": "k"},
		},
		{
			name:  "a patch of 3 files whose third hunk fails writes nothing",
			files: map[string]string{"/w/1": "one\n", "/w/2": "two\n", "/w/3": "a\nb\nc\nd\n"},
			in: patch("*** Update File: 1\n@@\n-one\n+ONE\n*** Update File: 2\n@@\n-two\n+TWO\n" +
				"*** Update File: 3\n@@\n a\n-b\n+B\n@@\n-x\n+X\n@@\n-c\n+C\n"),
			isError: true,
			has:     []string{"Hunk 2 of '*** Update File: 3' (patch line 15) did not apply: these lines were not found after line 2 (where the previous hunk or @@ line matched):\nx\n", "Nothing was written"},
			want:    map[string]string{"/w/1": "one\n", "/w/2": "two\n", "/w/3": "a\nb\nc\nd\n"},
			failed:  &PatchFailure{Path: "/w/3", Hunk: 2, PatchLine: 15, NearestLine: 0},
		},
		{
			name:    "the failed hunk names the nearest context",
			files:   map[string]string{"/w/g.go": "func f() {\n\tx := 1\n\treturn x\n}\n"},
			in:      patch("*** Update File: g.go\n@@\n func f() {\n-\tx := 2\n+\tx := 3\n"),
			isError: true,
			has:     []string{"The nearest text in the file is at line 1", "2: \\tx := 1\n"},
			want:    map[string]string{"/w/g.go": "func f() {\n\tx := 1\n\treturn x\n}\n"},
			failed:  &PatchFailure{Path: "/w/g.go", Hunk: 1, PatchLine: 3, NearestLine: 1},
		},
		{
			name:    "add over an existing file is refused",
			files:   map[string]string{"/w/a": "mine\n"},
			in:      patch("*** Add File: a\n+theirs\n"),
			isError: true,
			has:     []string{"*** Add File: a: the file already exists (/w/a)"},
			want:    map[string]string{"/w/a": "mine\n"},
			failed:  &PatchFailure{Path: "/w/a"},
		},
		{
			name:    "delete of a missing file is refused",
			files:   map[string]string{"/w/a": "a"},
			in:      patch("*** Add File: b\n+b\n*** Delete File: gone\n"),
			isError: true,
			has:     []string{"*** Delete File: gone: there is no file at /w/gone"},
			want:    map[string]string{"/w/a": "a"},
		},
		{
			name:    "update of a missing file is refused",
			in:      patch("*** Update File: nope\n@@\n-a\n+b\n"),
			isError: true,
			has:     []string{"Use '*** Add File:' to create it"},
			want:    map[string]string{},
		},
		{
			name:  "CRLF file keeps CRLF, tabs kept",
			files: map[string]string{"/w/c": "a\r\n\tb\r\nc\r\n"},
			in:    patch("*** Update File: c\n@@\n a\n-\tb\n+\tB\n+\tB2\n"),
			want:  map[string]string{"/w/c": "a\r\n\tB\r\n\tB2\r\nc\r\n"},
		},
		{
			name:  "fuzzy: trailing whitespace, then surrounding whitespace, then typographic punctuation",
			files: map[string]string{"/w/f": "alpha  \n    beta\nsay “hi” — ok\nend\n"},
			in:    patch("*** Update File: f\n@@\n alpha\n beta\n-say \"hi\" - ok\n+said\n"),
			want:  map[string]string{"/w/f": "alpha  \n    beta\nsaid\nend\n"},
		},
		{
			name:  "unicode content",
			files: map[string]string{"/w/u": "日本語\nΩ\n"},
			in:    patch("*** Update File: u\n@@\n-Ω\n+ω ✓\n*** Add File: ü.txt\n+ä\n"),
			want:  map[string]string{"/w/u": "日本語\nω ✓\n", "/w/ü.txt": "ä\n"},
		},
		{
			name:  "empty files: add one, empty another",
			files: map[string]string{"/w/one": "only\n"},
			in:    patch("*** Add File: empty\n*** Update File: one\n@@\n-only\n"),
			want:  map[string]string{"/w/empty": "", "/w/one": ""},
		},
		{
			name:  "End of File anchors at the end, @@ scopes nest",
			files: map[string]string{"/w/f": "class A:\n  def m():\n    x\nclass B:\n  def m():\n    x\nx\n"},
			in:    patch("*** Update File: f\n@@ class B:\n@@   def m():\n-    x\n+    y\n@@\n-x\n+z\n*** End of File\n"),
			want:  map[string]string{"/w/f": "class A:\n  def m():\n    x\nclass B:\n  def m():\n    y\nz\n"},
		},
		{
			name:  "pure addition after an @@ line",
			files: map[string]string{"/w/f": "a\nb\n"},
			in:    patch("*** Update File: f\n@@ a\n+inserted\n"),
			want:  map[string]string{"/w/f": "a\ninserted\nb\n"},
		},
		{
			name:  "absolute paths and several ops on one file",
			files: map[string]string{},
			in:    patch("*** Add File: /abs/x\n+1\n*** Update File: /abs/x\n@@\n-1\n+2\n"),
			want:  map[string]string{"/abs/x": "2\n"},
		},
		{
			name:    "a malformed patch says where",
			files:   map[string]string{"/w/a": "a\n"},
			in:      PatchInput{Input: "*** Begin Patch\n*** Update File: a\n@@\n!a\n*** End Patch"},
			isError: true,
			has:     []string{"invalid patch at line 4"},
			want:    map[string]string{"/w/a": "a\n"},
		},
		{
			name:    "an empty patch is refused",
			in:      PatchInput{Input: "*** Begin Patch\n*** End Patch"},
			isError: true,
			has:     []string{"names no files"},
			want:    map[string]string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMem(tc.files)
			r, err := RunApplyPatch(context.Background(), m, "/w", tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if r.IsError != tc.isError {
				t.Errorf("IsError = %v, want %v; text:\n%s", r.IsError, tc.isError, r.Text)
			}
			for _, h := range tc.has {
				if !strings.Contains(r.Text, h) {
					t.Errorf("text lacks %q:\n%s", h, r.Text)
				}
			}
			if tc.want != nil {
				if d := cmp.Diff(tc.want, m.snapshot()); d != "" {
					t.Errorf("files (-want +got):\n%s", d)
				}
			}
			if tc.isError && m.writes != 0 {
				t.Errorf("%d writes were made by a refused patch", m.writes)
			}
			if tc.failed != nil {
				if d := cmp.Diff(tc.failed, r.Out.Failed); d != "" {
					t.Errorf("failed (-want +got):\n%s", d)
				}
			}
		})
	}
}

// TestApplyPatchConcurrentWrite: a file written by another program after
// the patch read it fails the patch at its If-Match, and what the patch had
// already written is put back.
func TestApplyPatchConcurrentWrite(t *testing.T) {
	m := newMem(map[string]string{"/w/a": "a\n", "/w/b": "b\n"})
	m.beforeWrite = func(p string) {
		if p == "/w/b" {
			m.mu.Lock()
			m.files["/w/b"] = memFile{data: []byte("someone else\n"), mode: 0o644}
			m.mu.Unlock()
		}
	}
	r, err := RunApplyPatch(context.Background(), m, "/w", patch("*** Update File: a\n@@\n-a\n+A\n*** Update File: b\n@@\n-b\n+B\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError || !strings.Contains(r.Text, "writing /w/b failed: it changed after the patch read it") || !strings.Contains(r.Text, "put back, so no file changed") {
		t.Errorf("text:\n%s", r.Text)
	}
	want := map[string]string{"/w/a": "a\n", "/w/b": "someone else\n"}
	if d := cmp.Diff(want, m.snapshot()); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
}

// TestApplyPatchRollback: when a later write fails for another reason,
// earlier writes, creations and deletions are undone.
func TestApplyPatchRollback(t *testing.T) {
	m := newMem(map[string]string{"/w/a": "a\n", "/w/del": "d\n", "/w/z": "z\n"})
	m.failWrite["/w/z"] = fmt.Errorf("disk full: %w", wire.ErrBadRequest)
	r, err := RunApplyPatch(context.Background(), m, "/w", patch(
		"*** Update File: a\n@@\n-a\n+A\n*** Add File: new\n+n\n*** Delete File: del\n*** Update File: z\n@@\n-z\n+Z\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError || !strings.Contains(r.Text, "writing /w/z failed") {
		t.Errorf("text:\n%s", r.Text)
	}
	want := map[string]string{"/w/a": "a\n", "/w/del": "d\n", "/w/z": "z\n"}
	if d := cmp.Diff(want, m.snapshot()); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
}

// TestApplyPatchTransportError: a failure the model cannot fix is an
// error, not a refusal.
func TestApplyPatchTransportError(t *testing.T) {
	m := newMem(map[string]string{"/w/a": "a\n"})
	m.failWrite["/w/a"] = errors.New("connection reset")
	_, err := RunApplyPatch(context.Background(), m, "/w", patch("*** Update File: a\n@@\n-a\n+b\n"))
	if err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("err = %v", err)
	}
}
