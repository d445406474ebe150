package files_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/wire"
)

func ptr[T any](v T) *T { return &v }

func numberedLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

const goSource = "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tif true {\n\t\tfmt.Println(\"hello\")\n\t}\n}\n"

type editCase struct {
	name  string
	files map[string]string // relative path -> content, before the steps
	steps []wire.Edit
	// show lists files whose content after the steps goes in the golden
	// file ("" for none).
	show []string
}

// editCases is the editor's behaviour table. Paths are relative to the
// workdir unless they start with $W, which stands for it.
var editCases = []editCase{
	{name: "create",
		steps: []wire.Edit{{Command: "create", Path: "$W/new/dir/hello.py", FileText: ptr("print('hi')\n")}},
		show:  []string{"new/dir/hello.py"}},
	{name: "create_existing",
		files: map[string]string{"a.txt": "keep me\n"},
		steps: []wire.Edit{{Command: "create", Path: "$W/a.txt", FileText: ptr("overwrite\n")}},
		show:  []string{"a.txt"}},
	{name: "create_missing_file_text",
		steps: []wire.Edit{{Command: "create", Path: "$W/a.txt"}}},
	{name: "view_file",
		files: map[string]string{"main.go": goSource},
		steps: []wire.Edit{{Command: "view", Path: "$W/main.go"}}},
	{name: "view_empty_file",
		files: map[string]string{"empty": ""},
		steps: []wire.Edit{{Command: "view", Path: "$W/empty"}}},
	{name: "view_range",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{
			{Command: "view", Path: "$W/ten.txt", ViewRange: []int{3, 6}},
			{Command: "view", Path: "$W/ten.txt", ViewRange: []int{8, -1}},
			{Command: "view", Path: "$W/ten.txt", ViewRange: []int{9, 50}},
			{Command: "view", Path: "$W/ten.txt", ViewRange: []int{0, 2}},
			{Command: "view", Path: "$W/ten.txt", ViewRange: []int{6, 3}},
			{Command: "view", Path: "$W/ten.txt", ViewRange: []int{2}},
		}},
	{name: "view_directory",
		files: map[string]string{
			"README.md": "x", "src/main.go": "x", "src/lib/deep.go": "x", "src/.cache": "x",
			".git/config": "x", ".env": "x", "docs/guide.md": "x", "empty/.keep": "x",
		},
		steps: []wire.Edit{
			{Command: "view", Path: "$W"},
			{Command: "view", Path: "$W/src", ViewRange: []int{1, 2}},
		}},
	{name: "view_large_clipped",
		files: map[string]string{"big.txt": numberedLines(3000)},
		steps: []wire.Edit{{Command: "view", Path: "$W/big.txt"}}},
	{name: "view_long_line_clipped",
		files: map[string]string{"min.js": strings.Repeat("var a=1;", 2500) + "\nnext\n"},
		steps: []wire.Edit{{Command: "view", Path: "$W/min.js"}}},
	{name: "str_replace_single",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/ten.txt", OldStr: ptr("line 5\n"), NewStr: ptr("line five\n")}},
		show:  []string{"ten.txt"}},
	{name: "str_replace_multiline",
		files: map[string]string{"main.go": goSource},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/main.go",
			OldStr: ptr("\tif true {\n\t\tfmt.Println(\"hello\")\n\t}"),
			NewStr: ptr("\tfor i := 0; i < 3; i++ {\n\t\tfmt.Println(\"hello\", i)\n\t}\n\tfmt.Println(\"done\")")}},
		show: []string{"main.go"}},
	{name: "str_replace_tabs",
		files: map[string]string{"Makefile": "all:\n\tgo build ./...\n\ntest:\n\tgo test ./...\n"},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/Makefile", OldStr: ptr("\tgo test ./..."), NewStr: ptr("\tgo test -race ./...")}},
		show:  []string{"Makefile"}},
	{name: "str_replace_no_match",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/ten.txt", OldStr: ptr("line eleven"), NewStr: ptr("x")}},
		show:  []string{"ten.txt"}},
	{name: "str_replace_whitespace_differs",
		files: map[string]string{"main.go": goSource},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/main.go",
			OldStr: ptr("    if true {\n        fmt.Println(\"hello\")"), NewStr: ptr("x")}},
		show: []string{"main.go"}},
	{name: "str_replace_line_numbers_copied",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/ten.txt", OldStr: ptr("     4\tline 4\n     5\tline 5"), NewStr: ptr("x")}}},
	{name: "str_replace_two_matches",
		files: map[string]string{"dup.py": "def f():\n    return 1\n\ndef g():\n    return 1\n"},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/dup.py", OldStr: ptr("    return 1"), NewStr: ptr("    return 2")}},
		show:  []string{"dup.py"}},
	{name: "str_replace_empty_new_str_deletes",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{
			{Command: "str_replace", Path: "$W/ten.txt", OldStr: ptr("line 3\n"), NewStr: ptr("")},
			{Command: "str_replace", Path: "$W/ten.txt", OldStr: ptr("line 4\n")},
		},
		show: []string{"ten.txt"}},
	{name: "str_replace_same_strings",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/ten.txt", OldStr: ptr("line 3"), NewStr: ptr("line 3")}}},
	{name: "str_replace_crlf_kept",
		files: map[string]string{"win.txt": "one\r\ntwo\r\nthree\r\n"},
		steps: []wire.Edit{
			{Command: "view", Path: "$W/win.txt"},
			{Command: "str_replace", Path: "$W/win.txt", OldStr: ptr("one\ntwo"), NewStr: ptr("one\n1.5\ntwo")},
		},
		show: []string{"win.txt"}},
	{name: "insert_at_0",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{{Command: "insert", Path: "$W/ten.txt", InsertLine: ptr(0), NewStr: ptr("# header")}},
		show:  []string{"ten.txt"}},
	{name: "insert_at_end",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{{Command: "insert", Path: "$W/ten.txt", InsertLine: ptr(10), NewStr: ptr("line 11\nline 12\n")}},
		show:  []string{"ten.txt"}},
	{name: "insert_at_end_no_final_newline",
		files: map[string]string{"short.txt": "a\nb"},
		steps: []wire.Edit{{Command: "insert", Path: "$W/short.txt", InsertLine: ptr(2), NewStr: ptr("c")}},
		show:  []string{"short.txt"}},
	{name: "insert_past_end",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{
			{Command: "insert", Path: "$W/ten.txt", InsertLine: ptr(11), NewStr: ptr("x")},
			{Command: "insert", Path: "$W/ten.txt", InsertLine: ptr(-1), NewStr: ptr("x")},
			{Command: "insert", Path: "$W/ten.txt", NewStr: ptr("x")},
		},
		show: []string{"ten.txt"}},
	{name: "undo",
		files: map[string]string{"ten.txt": numberedLines(10)},
		steps: []wire.Edit{
			{Command: "str_replace", Path: "$W/ten.txt", OldStr: ptr("line 2\n"), NewStr: ptr("line two\n")},
			{Command: "insert", Path: "$W/ten.txt", InsertLine: ptr(1), NewStr: ptr("inserted")},
			{Command: "undo_edit", Path: "$W/ten.txt"},
			{Command: "undo_edit", Path: "$W/ten.txt"},
			{Command: "undo_edit", Path: "$W/ten.txt"},
		},
		show: []string{"ten.txt"}},
	{name: "undo_no_history",
		files: map[string]string{"ten.txt": numberedLines(3)},
		steps: []wire.Edit{{Command: "undo_edit", Path: "$W/ten.txt"}}},
	{name: "undo_create_removes",
		steps: []wire.Edit{
			{Command: "create", Path: "$W/made.txt", FileText: ptr("new\n")},
			{Command: "undo_edit", Path: "$W/made.txt"},
			{Command: "view", Path: "$W/made.txt"},
		}},
	{name: "relative_path",
		files: map[string]string{"src/app.py": "print(1)\n"},
		steps: []wire.Edit{
			{Command: "view", Path: "src/app.py"},
			{Command: "str_replace", Path: "src/app.py", OldStr: ptr("1"), NewStr: ptr("2")},
		},
		show: []string{"src/app.py"}},
	{name: "missing_file",
		steps: []wire.Edit{
			{Command: "view", Path: "$W/nope.txt"},
			{Command: "str_replace", Path: "$W/nope.txt", OldStr: ptr("a"), NewStr: ptr("b")},
			{Command: "insert", Path: "$W/nope.txt", InsertLine: ptr(0), NewStr: ptr("b")},
			{Command: "undo_edit", Path: "$W/nope.txt"},
		}},
	{name: "binary_file",
		files: map[string]string{"blob.bin": "\x7fELF\x02\x01\x01\x00\x00\x00binary"},
		steps: []wire.Edit{
			{Command: "view", Path: "$W/blob.bin"},
			{Command: "str_replace", Path: "$W/blob.bin", OldStr: ptr("ELF"), NewStr: ptr("FLE")},
		}},
	{name: "latin1_file",
		files: map[string]string{"old.txt": "caf\xe9\n"},
		steps: []wire.Edit{{Command: "view", Path: "$W/old.txt"}}},
	{name: "directory_only_view",
		files: map[string]string{"d/x": "x"},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/d", OldStr: ptr("a"), NewStr: ptr("b")}}},
	{name: "bad_command",
		steps: []wire.Edit{
			{Command: "delete", Path: "$W/x"},
			{Command: "", Path: "$W/x"},
			{Command: "view"},
		}},
	{name: "if_match_stale",
		files: map[string]string{"ten.txt": numberedLines(3)},
		steps: []wire.Edit{{Command: "str_replace", Path: "$W/ten.txt", OldStr: ptr("line 1"), NewStr: ptr("x"),
			IfMatch: "0000000000000000000000000000000000000000000000000000000000000000"}},
		show: []string{"ten.txt"}},
}

// TestEditGolden runs the editor's behaviour table through real HTTP and
// compares every answer with testdata/edit/NAME.golden (go test -update
// rewrites them). The workdir shows as /workspace.
func TestEditGolden(t *testing.T) {
	for _, tc := range editCases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			for rel, content := range tc.files {
				f.write(t, rel, content)
			}
			var b strings.Builder
			for i, step := range tc.steps {
				step.Path = strings.ReplaceAll(step.Path, "$W", f.workdir)
				req, _ := json.Marshal(step)
				fmt.Fprintf(&b, "=== step %d: %s\n", i+1, strings.ReplaceAll(string(req), f.workdir, "/workspace"))
				out, err := f.c.Edit(context.Background(), step)
				status := 200
				if err != nil {
					status, _ = wire.StatusOf(err)
					out = err.Error()
					var re *wire.RemoteError
					if !errors.As(err, &re) {
						t.Fatalf("step %d: not an API error: %v", i+1, err)
					}
				}
				fmt.Fprintf(&b, "status %d\n%s\n", status, strings.ReplaceAll(out, f.workdir, "/workspace"))
			}
			for _, rel := range tc.show {
				content, err := os.ReadFile(f.path(rel))
				if err != nil {
					fmt.Fprintf(&b, "=== file %s: %v\n", rel, errors.Unwrap(err))
					continue
				}
				fmt.Fprintf(&b, "=== file %s (\\r shown as ␍)\n%s", rel, strings.ReplaceAll(string(content), "\r", "␍"))
			}
			golden := filepath.Join("testdata", "edit", tc.name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v; run go test ./internal/files -run TestEditGolden -update to create it", err)
			}
			if diff := cmp.Diff(string(want), b.String()); diff != "" {
				t.Errorf("%s differs (-golden +got):\n%s", golden, diff)
			}
		})
	}
}

// TestUndoSurvivesRestart checks that the undo history is on disk: a new
// server on the same state directory reverts an edit made by the old one.
func TestUndoSurvivesRestart(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.txt", "before\n")
	ctx := context.Background()
	if _, err := f.c.Edit(ctx, wire.Edit{Command: "str_replace", Path: "a.txt", OldStr: ptr("before"), NewStr: ptr("after")}); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	if _, err := f.c.Edit(ctx, wire.Edit{Command: "undo_edit", Path: "a.txt"}); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, "a.txt"); got != "before\n" {
		t.Errorf("after undo across a restart the file is %q, want %q", got, "before\n")
	}
}

// TestUndoHistoryBounded checks that only the last 10 edits are kept.
func TestUndoHistoryBounded(t *testing.T) {
	f := newFixture(t)
	f.write(t, "n.txt", "0\n")
	ctx := context.Background()
	for i := 0; i < 12; i++ {
		_, err := f.c.Edit(ctx, wire.Edit{Command: "str_replace", Path: "n.txt", OldStr: ptr(fmt.Sprint(i)), NewStr: ptr(fmt.Sprint(i + 1))})
		if err != nil {
			t.Fatal(err)
		}
	}
	undone := 0
	for {
		if _, err := f.c.Edit(ctx, wire.Edit{Command: "undo_edit", Path: "n.txt"}); err != nil {
			if !errors.Is(err, wire.ErrBadRequest) {
				t.Fatal(err)
			}
			break
		}
		undone++
	}
	if undone != 10 {
		t.Errorf("undid %d edits, want 10", undone)
	}
	if got := f.read(t, "n.txt"); got != "2\n" {
		t.Errorf("after all undos the file is %q, want %q", got, "2\n")
	}
}

// TestEditKeepsModeAndSymlink checks that an edit keeps the file's mode and
// edits through a symlink without replacing the link.
func TestEditKeepsModeAndSymlink(t *testing.T) {
	f := newFixture(t)
	f.write(t, "real.sh", "echo a\n")
	if err := os.Chmod(f.path("real.sh"), 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.sh", f.path("link.sh")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Edit(context.Background(), wire.Edit{Command: "str_replace", Path: "link.sh", OldStr: ptr("a"), NewStr: ptr("b")}); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, "real.sh"); got != "echo b\n" {
		t.Errorf("target content %q, want %q", got, "echo b\n")
	}
	fi, err := os.Lstat(f.path("link.sh"))
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link.sh is no longer a symlink (%v, %v)", fi.Mode(), err)
	}
	fi, err = os.Stat(f.path("real.sh"))
	if err != nil || fi.Mode().Perm() != 0o751 {
		t.Errorf("real.sh mode %v, want 0751 (%v)", fi.Mode().Perm(), err)
	}
}
