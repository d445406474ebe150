package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/files"
	"github.com/limbs-dev/limbs/internal/wire"
)

// newFilesDaemon serves the real file API on 127.0.0.1 over a workdir
// standing for the sandbox's.
func newFilesDaemon(t *testing.T, h http.Handler) (*client.Client, string, string) {
	t.Helper()
	workdir := t.TempDir()
	srv, err := files.New(files.Options{Workdir: workdir, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		h = srv
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	c, err := client.New(hs.URL, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	return c, workdir, hs.URL
}

func mustWrite(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// tree describes the files under dir: path, mode and content, symlinks as
// links.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out = append(out, rel+" -> "+l)
		case fi.IsDir():
			out = append(out, rel+"/")
		default:
			b, _ := os.ReadFile(p)
			out = append(out, rel+" "+fi.Mode().Perm().String()+" "+string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCpBothWays(t *testing.T) {
	c, sandbox, _ := newFilesDaemon(t, nil)
	ctx := context.Background()
	local := t.TempDir()
	mustWrite(t, filepath.Join(local, "proj/main.go"), "package main\n", 0o644)
	mustWrite(t, filepath.Join(local, "proj/run.sh"), "#!/bin/sh\n", 0o755)
	mustWrite(t, filepath.Join(local, "proj/sub/data.bin"), "\x00\x01", 0o600)
	if err := os.Symlink("main.go", filepath.Join(local, "proj/link")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(local, "one.txt"), "one", 0o640)
	if err := os.MkdirAll(filepath.Join(sandbox, "existing"), 0o755); err != nil {
		t.Fatal(err)
	}

	steps := []struct{ name, src, dst string }{
		{"directory up to a new path", filepath.Join(local, "proj"), ":copy"},
		{"directory up into an existing directory", filepath.Join(local, "proj"), ":existing"},
		{"file up to a new path", filepath.Join(local, "one.txt"), ":renamed.txt"},
		{"file up into a directory", filepath.Join(local, "one.txt"), ":" + filepath.Join(sandbox, "existing") + "/"},
		{"directory down to a new path", ":copy", filepath.Join(local, "back")},
		{"file down into a directory", ":renamed.txt", local},
	}
	for _, s := range steps {
		src, dst := parseLoc(s.src), parseLoc(s.dst)
		var err error
		if dst.remote {
			err = copyUp(ctx, c, src.path, dst.path)
		} else {
			err = copyDown(ctx, c, src.path, dst.path)
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	want := tree(t, filepath.Join(local, "proj"))
	for _, got := range []string{filepath.Join(sandbox, "copy"), filepath.Join(sandbox, "existing/proj"), filepath.Join(local, "back")} {
		if diff := cmp.Diff(want, tree(t, got)); diff != "" {
			t.Errorf("%s differs from the source (-want +got):\n%s", got, diff)
		}
	}
	for _, p := range []string{filepath.Join(sandbox, "renamed.txt"), filepath.Join(sandbox, "existing/one.txt"), filepath.Join(local, "renamed.txt")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if b, _ := os.ReadFile(p); string(b) != "one" || fi.Mode().Perm() != 0o640 {
			t.Errorf("%s: %q mode %v, want \"one\" mode 0640", p, b, fi.Mode().Perm())
		}
	}
	if err := copyDown(ctx, c, "missing", local); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("copying a missing file down: %v, want not found", err)
	}
}

// TestCpDownRefusesEscapingArchive stands for a hostile sandbox: its
// archive tries to write outside the destination on the host.
func TestCpDownRefusesEscapingArchive(t *testing.T) {
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	_ = tw.WriteHeader(&tar.Header{Name: "../escaped", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	c, _, _ := newFilesDaemon(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/files/list"):
			wire.WriteJSON(w, 200, wire.FileList{Entries: []wire.FileEntry{{Path: "/d", Name: "d", Type: "dir"}}})
		case strings.HasSuffix(r.URL.Path, "/files/archive"):
			_, _ = w.Write(evil.Bytes())
		default:
			http.NotFound(w, r)
		}
	}))
	local := t.TempDir()
	dst := filepath.Join(local, "inner", "dst")
	err := copyDown(context.Background(), c, "/d", dst)
	if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "../escaped") {
		t.Errorf("hostile archive: %v, want a refusal naming ../escaped", err)
	}
	if _, err := os.Stat(filepath.Join(local, "inner", "escaped")); err == nil {
		t.Errorf("the archive wrote outside the destination")
	}
}

func TestCpArgs(t *testing.T) {
	tests := []struct {
		arg  string
		want loc
	}{
		{":/workspace/a", loc{remote: true, path: "/workspace/a"}},
		{":", loc{remote: true, path: "."}},
		{"box:rel/p", loc{remote: true, sandbox: "box", path: "rel/p"}},
		{"./a:b", loc{path: "./a:b"}},
		{"/abs/x", loc{path: "/abs/x"}},
		{"-", loc{path: "-"}},
	}
	for _, tc := range tests {
		if got := parseLoc(tc.arg); got != tc.want {
			t.Errorf("parseLoc(%q) = %+v, want %+v", tc.arg, got, tc.want)
		}
	}
	if code := runCp(context.Background(), []string{"a", "b"}); code != exitUsage {
		t.Errorf("two local paths: exit %d, want %d", code, exitUsage)
	}
}

func TestEditCLI(t *testing.T) {
	_, sandbox, url := newFilesDaemon(t, nil)
	mustWrite(t, filepath.Join(sandbox, "a.py"), "x = 1\ny = 2\n", 0o644)
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := editMain(context.Background(), append(args, "--addr", url, "--token", "tok"), strings.NewReader(stdin), &out, &errb)
		return code, strings.ReplaceAll(out.String(), sandbox, "/sb"), strings.ReplaceAll(errb.String(), sandbox, "/sb")
	}
	tests := []struct {
		name     string
		stdin    string
		args     []string
		code     int
		out, err string
	}{
		{"view range", "", []string{"view", "a.py", "--range", "2:2"}, 0,
			"Here's the result of running `cat -n` on /sb/a.py:\n     2\ty = 2\n", ""},
		{"str_replace", "", []string{"str_replace", "a.py", "--old", "y = 2", "--new", "y = 3"}, 0,
			"The file /sb/a.py has been edited. Here's the result of running `cat -n` on a snippet of /sb/a.py:\n     1\tx = 1\n     2\ty = 3\nReview the changes and make sure they are as expected. Edit the file again if necessary.\n", ""},
		{"no match goes to stderr", "", []string{"str_replace", "a.py", "--old", "zzz", "--new", "y"}, 1,
			"", "No replacement was performed, old_str `zzz` did not appear verbatim in /sb/a.py.\n"},
		{"create from stdin", "hello\n", []string{"create", "new.txt"}, 0, "File created successfully at: /sb/new.txt\n", ""},
		{"undo alias", "", []string{"undo", "a.py"}, 0,
			"Last edit to /sb/a.py undone successfully. Here's the result of running `cat -n` on /sb/a.py:\n     1\tx = 1\n     2\ty = 2\n", ""},
		{"bad range", "", []string{"view", "a.py", "--range", "2"}, exitUsage, "", "limbs edit: --range \"2\" is not START:END, such as 10:40 or 10:-1\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := run(tc.stdin, tc.args...)
			if code != tc.code || out != tc.out || errs != tc.err {
				t.Errorf("exit %d\nstdout %q\nstderr %q\nwant exit %d\nstdout %q\nstderr %q", code, out, errs, tc.code, tc.out, tc.err)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(sandbox, "new.txt")); string(b) != "hello\n" {
		t.Errorf("created file holds %q", b)
	}
}
