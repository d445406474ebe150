package files_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/wire"
)

type tarEntry struct {
	name, link, body string
	typ              byte
	mode             int64
}

func makeTar(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: mode}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// snapshot describes every path under dir (symlinks not followed) with its
// type and content, to show that nothing changed.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case de.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out = append(out, rel+" -> "+l)
		case de.IsDir():
			out = append(out, rel+"/")
		default:
			b, _ := os.ReadFile(p)
			fi, _ := de.Info()
			out = append(out, rel+" "+fi.Mode().Perm().String()+" "+string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestArchiveRoundTrip(t *testing.T) {
	f := newFixture(t)
	f.write(t, "src/a.txt", "a")
	f.write(t, "src/sub/b.bin", "\x00\x01\x02")
	f.write(t, "src/sub/deeper/c", "c")
	f.write(t, "src/.hidden", "h")
	if err := os.Chmod(f.path("src/sub/b.bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/b.bin", f.path("src/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", f.path("src/abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.path("src/empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rc, err := f.c.GetArchive(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.c.PutArchive(ctx, "copy", bytes.NewReader(tarball)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snapshot(t, f.path("src")), snapshot(t, f.path("copy"))); diff != "" {
		t.Errorf("extracted copy differs from the source (-src +copy):\n%s", diff)
	}
	// A named symlink to the directory is followed.
	if err := os.Symlink("src", f.path("src-link")); err != nil {
		t.Fatal(err)
	}
	rc, err = f.c.GetArchive(ctx, "src-link")
	if err != nil {
		t.Fatal(err)
	}
	err = f.c.PutArchive(ctx, "copy2", rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snapshot(t, f.path("src")), snapshot(t, f.path("copy2"))); diff != "" {
		t.Errorf("archive of a symlink to the directory differs (-src +copy):\n%s", diff)
	}
	if _, err := f.c.GetArchive(ctx, "src/a.txt"); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("archive of a file: %v, want bad request", err)
	}
}

// TestArchiveRefusesEscapes is acceptance 3: every crafted entry that
// would land outside the target is refused with an error naming it, and
// nothing is written, outside the target or in it.
func TestArchiveRefusesEscapes(t *testing.T) {
	tests := []struct {
		name    string
		entries []tarEntry
		// onDisk prepares the target before extraction (relative symlinks
		// that already point out).
		onDisk map[string]string
		bad    string // the entry the error must name
	}{
		{name: "dot-dot", entries: []tarEntry{{name: "ok.txt", body: "ok"}, {name: "../evil", body: "x"}}, bad: "../evil"},
		{name: "dot-dot inside", entries: []tarEntry{{name: "a/", typ: tar.TypeDir}, {name: "a/../../evil", body: "x"}}, bad: "a/../../evil"},
		{name: "absolute", entries: []tarEntry{{name: "ok.txt", body: "ok"}, {name: "$OUT/evil", body: "x"}}, bad: "$OUT/evil"},
		{name: "symlink then file through it", entries: []tarEntry{
			{name: "link", typ: tar.TypeSymlink, link: "$OUT"}, {name: "link/evil", body: "x"}}, bad: "link/evil"},
		{name: "relative symlink then file through it", entries: []tarEntry{
			{name: "d/", typ: tar.TypeDir}, {name: "d/up", typ: tar.TypeSymlink, link: "../../out"}, {name: "d/up/evil", body: "x"}}, bad: "d/up/evil"},
		{name: "symlink chain", entries: []tarEntry{
			{name: "l1", typ: tar.TypeSymlink, link: "l2"}, {name: "l2", typ: tar.TypeSymlink, link: "$OUT"}, {name: "l1/evil", body: "x"}}, bad: "l1/evil"},
		{name: "symlink then directory through it", entries: []tarEntry{
			{name: "link", typ: tar.TypeSymlink, link: "$OUT"}, {name: "link/newdir/", typ: tar.TypeDir}}, bad: "link/newdir/"},
		{name: "symlink already on disk", onDisk: map[string]string{"pre": "$OUT"},
			entries: []tarEntry{{name: "pre/evil", body: "x"}}, bad: "pre/evil"},
		{name: "hard link out", entries: []tarEntry{{name: "h", typ: tar.TypeLink, link: "../out/secret"}}, bad: "h"},
		{name: "hard link absolute", entries: []tarEntry{{name: "h", typ: tar.TypeLink, link: "$OUT/secret"}}, bad: "h"},
		{name: "hard link through symlink", entries: []tarEntry{
			{name: "link", typ: tar.TypeSymlink, link: "$OUT"}, {name: "h", typ: tar.TypeLink, link: "link/secret"}}, bad: "h"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			// out sits next to the target, so ../out from the target
			// reaches it.
			target := f.path("target")
			out := f.path("out")
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
			f.write(t, "out/secret", "s3cret")
			for rel, link := range tc.onDisk {
				if err := os.Symlink(strings.ReplaceAll(link, "$OUT", out), filepath.Join(target, rel)); err != nil {
					t.Fatal(err)
				}
			}
			var entries []tarEntry
			for _, e := range tc.entries {
				e.name = strings.ReplaceAll(e.name, "$OUT", out)
				e.link = strings.ReplaceAll(e.link, "$OUT", out)
				entries = append(entries, e)
			}
			bad := strings.ReplaceAll(tc.bad, "$OUT", out)
			beforeOut := snapshot(t, out)
			beforeTarget := snapshot(t, target)
			beforeWorkdir := snapshot(t, f.workdir)

			err := f.c.PutArchive(context.Background(), target, bytes.NewReader(makeTar(t, entries)))
			if !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("extraction: %v, want bad request", err)
			}
			if !strings.Contains(err.Error(), `"`+bad+`"`) {
				t.Errorf("error %q does not name the entry %q", err, bad)
			}
			if diff := cmp.Diff(beforeOut, snapshot(t, out)); diff != "" {
				t.Errorf("outside the target changed (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(beforeTarget, snapshot(t, target)); diff != "" {
				t.Errorf("the target changed although the archive was refused (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(beforeWorkdir, snapshot(t, f.workdir)); diff != "" {
				t.Errorf("the workdir changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestArchiveAllowsInsideLinks checks that what is legitimate still
// works: symlinks that point anywhere are created as links, a symlink to a
// directory inside can be written through, hard links inside are made.
func TestArchiveAllowsInsideLinks(t *testing.T) {
	f := newFixture(t)
	entries := []tarEntry{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "real/", typ: tar.TypeDir, mode: 0o755},
		{name: "alias", typ: tar.TypeSymlink, link: "real"},
		{name: "alias/through.txt", body: "via alias"},
		{name: "dangling", typ: tar.TypeSymlink, link: "/nowhere/at/all"},
		{name: "real/orig", body: "orig", mode: 0o600},
		{name: "hard", typ: tar.TypeLink, link: "real/orig"},
		{name: "fifo", typ: tar.TypeFifo},
	}
	if err := f.c.PutArchive(context.Background(), "x", bytes.NewReader(makeTar(t, entries))); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"./",
		"alias -> real",
		"dangling -> /nowhere/at/all",
		"hard -rw------- orig",
		"real/",
		"real/orig -rw------- orig",
		"real/through.txt -rw-r--r-- via alias",
	}
	if diff := cmp.Diff(want, snapshot(t, f.path("x"))); diff != "" {
		t.Errorf("extracted tree (-want +got):\n%s", diff)
	}
}

func TestArchiveReplacesSymlinkInsteadOfWritingThrough(t *testing.T) {
	f := newFixture(t)
	f.write(t, "out/secret", "s3cret")
	if err := os.MkdirAll(f.path("target"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.path("out/secret"), f.path("target/file")); err != nil {
		t.Fatal(err)
	}
	err := f.c.PutArchive(context.Background(), "target", bytes.NewReader(makeTar(t, []tarEntry{{name: "file", body: "new"}})))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, "out/secret"); got != "s3cret" {
		t.Errorf("the symlink's target was written through: %q", got)
	}
	if got := f.read(t, "target/file"); got != "new" {
		t.Errorf("target/file holds %q, want new", got)
	}
}

func TestArchiveNotATar(t *testing.T) {
	f := newFixture(t)
	err := f.c.PutArchive(context.Background(), "x", strings.NewReader(strings.Repeat("not a tar ", 100)))
	if !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("garbage body: %v, want bad request", err)
	}
}

// FuzzArchiveEntries extracts archives of arbitrary names and link
// targets and checks that nothing ever appears outside the target.
func FuzzArchiveEntries(f *testing.F) {
	f.Add("a/b", "../x", "a/b/c", byte(tar.TypeSymlink))
	f.Add("l", "/tmp", "l/x", byte(tar.TypeSymlink))
	f.Add("h", "../../etc/passwd", "h2", byte(tar.TypeLink))
	f.Add("./d/", "", "d/../../e", byte(tar.TypeDir))
	f.Fuzz(func(t *testing.T, name1, link, name2 string, typ byte) {
		switch typ {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			typ = tar.TypeSymlink
		}
		fx := newFixture(t)
		if err := os.MkdirAll(fx.path("target/inner"), 0o755); err != nil {
			t.Fatal(err)
		}
		fx.write(t, "out/secret", "s")
		before := snapshot(t, fx.workdir)
		tb := makeTarLenient([]tarEntry{{name: name1, link: link, typ: typ}, {name: name2, body: "x"}})
		if tb == nil {
			return
		}
		_ = fx.c.PutArchive(context.Background(), "target/inner", bytes.NewReader(tb))
		for _, s := range snapshot(t, fx.workdir) {
			if !strings.HasPrefix(s, "target/inner/") && !contains(before, s) {
				t.Fatalf("extraction of %q(%c)->%q then %q wrote outside the target: %s", name1, typ, link, name2, s)
			}
		}
	})
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func makeTarLenient(entries []tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: 0o644}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if tw.WriteHeader(hdr) != nil {
			return nil
		}
		if typ == tar.TypeReg {
			_, _ = tw.Write([]byte(e.body))
		}
	}
	if tw.Close() != nil {
		return nil
	}
	return buf.Bytes()
}
