package files_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/files"
	"github.com/limbs-dev/limbs/internal/wire"
)

func countOverlapping(s, sub string) int {
	n := 0
	for i := 0; ; {
		j := strings.Index(s[i:], sub)
		if j < 0 {
			return n
		}
		n++
		i += j + 1
	}
}

// FuzzStrReplace feeds the editor arbitrary files and strings: it must
// never panic, must replace exactly when old_str occurs once, and must
// leave the file untouched whenever it refuses.
func FuzzStrReplace(f *testing.F) {
	f.Add("a\nb\nc\n", "b", "B")
	f.Add("\tx\n\tx\n", "\tx", "y")
	f.Add("aaa", "aa", "b")
	f.Add("one\r\ntwo\r\n", "one\ntwo", "1\n2")
	f.Add("", "x", "")
	f.Add("x\x00y", "x", "z")
	f.Fuzz(func(t *testing.T, content, old, repl string) {
		dir := t.TempDir()
		srv, err := files.New(files.Options{Workdir: dir, StateDir: filepath.Join(dir, ".state")})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "f.txt")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err = srv.Edit(wire.Edit{Command: "str_replace", Path: p, OldStr: &old, NewStr: &repl})
		got, rerr := os.ReadFile(p)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			if !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("refusal is not a bad request: %v", err)
			}
			if string(got) != content {
				t.Fatalf("refused (%v) but the file changed from %q to %q", err, content, got)
			}
			return
		}
		plain := !strings.Contains(content, "\r") && !strings.Contains(old, "\r") && !strings.Contains(repl, "\r")
		if plain {
			if countOverlapping(content, old) != 1 {
				t.Fatalf("replaced although old_str %q occurs %d times in %q", old, countOverlapping(content, old), content)
			}
			if want := strings.Replace(content, old, repl, 1); string(got) != want {
				t.Fatalf("file is %q, want %q", got, want)
			}
		}
		if strings.IndexByte(content, 0) >= 0 || !utf8.ValidString(content) {
			t.Fatalf("edited a file that is not UTF-8 text: %q", content)
		}
	})
}

// FuzzInsert checks insert never panics, refuses out-of-range lines
// without touching the file, and on success adds new_str's lines.
func FuzzInsert(f *testing.F) {
	f.Add("a\nb\n", "x", 1)
	f.Add("a\nb", "x\ny\n", 2)
	f.Add("", "x", 0)
	f.Add("a\r\nb\r\n", "x", 2)
	f.Fuzz(func(t *testing.T, content, text string, line int) {
		dir := t.TempDir()
		srv, err := files.New(files.Options{Workdir: dir, StateDir: filepath.Join(dir, ".state")})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "f.txt")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err = srv.Edit(wire.Edit{Command: "insert", Path: p, InsertLine: &line, NewStr: &text})
		got, _ := os.ReadFile(p)
		if err != nil {
			if string(got) != content {
				t.Fatalf("refused (%v) but the file changed from %q to %q", err, content, got)
			}
			return
		}
		noCR := func(s string) string { return strings.ReplaceAll(s, "\r", "") }
		if !strings.Contains(noCR(string(got)), noCR(strings.TrimSuffix(text, "\n"))) {
			t.Fatalf("inserted %q into %q at %d and got %q", text, content, line, got)
		}
		if len(got) < len(content) {
			t.Fatalf("insert shrank %q to %q", content, got)
		}
	})
}
