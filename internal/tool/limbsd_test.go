package tool_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/tool"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// The Files API client is what the tools run over in limbs.
var _ tool.Files = (*client.FileStore)(nil)

// racingFiles is a client.FileStore that lets another program write a
// file on disk just before the tool writes it.
type racingFiles struct {
	*client.FileStore
	path, content string
}

func (r *racingFiles) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode, ifMatch string) (string, error) {
	if p == r.path && r.content != "" {
		if err := os.WriteFile(p, []byte(r.content), 0o644); err != nil {
			return "", err
		}
		r.content = ""
	}
	return r.FileStore.WriteFile(ctx, p, data, mode, ifMatch)
}

// TestToolsAgainstLimbsd runs the editor and apply_patch end to end
// through the real Files API client against a real limbsd on a socket,
// and checks the bytes on disk.
func TestToolsAgainstLimbsd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs limbsd")
	}
	l := testbin.StartLimbsd(t, false)
	c, err := client.New("unix://"+l.Sock, l.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(l.Dir, "workspace")
	files := c.FileStore()
	ctx := context.Background()
	ed := tool.NewEditor(0).Tool()
	patch := tool.ApplyPatch()
	disk := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(ws, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	edit := func(in tool.EditInput) tool.Result[tool.EditOutput] {
		t.Helper()
		r, err := ed.Handle(ctx, files, ws, in)
		if err != nil {
			t.Fatalf("%s: %v", in.Command, err)
		}
		return r
	}
	s := func(v string) *string { return &v }

	// create, str_replace (tabs), view, undo.
	if r := edit(tool.EditInput{Command: "create", Path: "src/main.go", FileText: s("package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n")}); r.IsError {
		t.Fatal(r.Text)
	}
	r := edit(tool.EditInput{Command: "str_replace", Path: "src/main.go", OldStr: s("\tprintln(\"hi\")"), NewStr: s("\tprintln(\"hello\")\n\treturn")})
	if r.IsError || !r.Out.Changed {
		t.Fatal(r.Text)
	}
	if got, want := disk("src/main.go"), "package main\n\nfunc main() {\n\tprintln(\"hello\")\n\treturn\n}\n"; got != want {
		t.Errorf("after str_replace: %q, want %q", got, want)
	}
	r = edit(tool.EditInput{Command: "view", Path: filepath.Join(ws, "src/main.go"), ViewRange: []int{4, 5}})
	if want := "Here's the result of running `cat -n` on " + ws + "/src/main.go:\n     4\t\tprintln(\"hello\")\n     5\t\treturn\n"; r.Text != want {
		t.Errorf("view:\n%q\nwant\n%q", r.Text, want)
	}
	r = edit(tool.EditInput{Command: "view", Path: "."})
	if !strings.Contains(r.Text, ws+"/src/\n"+ws+"/src/main.go\n") {
		t.Errorf("directory view:\n%s", r.Text)
	}
	r = edit(tool.EditInput{Command: "str_replace", Path: "src/main.go", OldStr: s("    return")})
	if !r.IsError || !strings.Contains(r.Text, `5: \treturn`) {
		t.Errorf("no-match answer lacks the nearest line with its tab shown:\n%s", r.Text)
	}
	if r := edit(tool.EditInput{Command: "undo_edit", Path: "src/main.go"}); r.IsError {
		t.Fatal(r.Text)
	}
	if got := disk("src/main.go"); !strings.Contains(got, "\tprintln(\"hi\")\n}") {
		t.Errorf("after undo: %q", got)
	}

	// CRLF stays CRLF.
	if err := os.WriteFile(filepath.Join(ws, "win.txt"), []byte("one\r\ntwo\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := edit(tool.EditInput{Command: "str_replace", Path: "win.txt", OldStr: s("one\ntwo"), NewStr: s("1\n2")}); r.IsError {
		t.Fatal(r.Text)
	}
	if got := disk("win.txt"); got != "1\r\n2\r\n" {
		t.Errorf("CRLF file: %q", got)
	}
	if fi, err := os.Stat(filepath.Join(ws, "win.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after edit: %v %v, want 0600 kept", fi.Mode(), err)
	}

	// apply_patch: update + move + add + delete in one patch.
	pr, err := patch.Handle(ctx, files, ws, tool.PatchInput{Input: "*** Begin Patch\n" +
		"*** Update File: src/main.go\n*** Move to: cmd/app/main.go\n@@ func main() {\n-\tprintln(\"hi\")\n+\tprintln(\"patched\")\n" +
		"*** Add File: README.md\n+# app\n" +
		"*** Delete File: win.txt\n" +
		"*** End Patch\n"})
	if err != nil || pr.IsError {
		t.Fatalf("%v %s", err, pr.Text)
	}
	if got, want := disk("cmd/app/main.go"), "package main\n\nfunc main() {\n\tprintln(\"patched\")\n}\n"; got != want {
		t.Errorf("moved file: %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(ws, "src/main.go")); !os.IsNotExist(err) {
		t.Errorf("the moved file's old path still exists: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "win.txt")); !os.IsNotExist(err) {
		t.Errorf("deleted file still exists: %v", err)
	}
	if got := disk("README.md"); got != "# app\n" {
		t.Errorf("added file: %q", got)
	}
	if len(pr.Out.Files) != 3 || pr.Out.Files[0].Action != "moved" || pr.Out.Files[0].ETag == "" {
		t.Errorf("structured result: %+v", pr.Out)
	}

	// A hunk that does not apply leaves every file as it was.
	pr, err = patch.Handle(ctx, files, ws, tool.PatchInput{Input: "*** Begin Patch\n" +
		"*** Update File: README.md\n@@\n-# app\n+# App\n" +
		"*** Update File: cmd/app/main.go\n@@\n-no such line\n+x\n*** End Patch"})
	if err != nil || !pr.IsError || !strings.Contains(pr.Text, "Hunk 1 of '*** Update File: cmd/app/main.go'") {
		t.Fatalf("%v %s", err, pr.Text)
	}
	if got := disk("README.md"); got != "# app\n" {
		t.Errorf("README after a failed patch: %q", got)
	}

	// Another program writes the second file between the patch's read and
	// its write: limbsd's If-Match refuses it, and the first file is put back.
	race := &racingFiles{FileStore: files, path: filepath.Join(ws, "cmd/app/main.go"), content: "theirs\n"}
	pr, err = patch.Handle(ctx, race, ws, tool.PatchInput{Input: "*** Begin Patch\n" +
		"*** Update File: README.md\n@@\n-# app\n+# App\n" +
		"*** Update File: cmd/app/main.go\n@@\n-\tprintln(\"patched\")\n+\tprintln(\"again\")\n*** End Patch"})
	if err != nil || !pr.IsError || !strings.Contains(pr.Text, "changed after the patch read it") {
		t.Fatalf("%v %s", err, pr.Text)
	}
	if got := disk("README.md"); got != "# app\n" {
		t.Errorf("README was not put back: %q", got)
	}
	if got := disk("cmd/app/main.go"); got != "theirs\n" {
		t.Errorf("the other program's write was lost: %q", got)
	}
}
