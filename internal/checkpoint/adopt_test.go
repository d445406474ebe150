package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// adoptTree makes a small workspace of each kind of path under root.
func adoptTree(t *testing.T, root string) {
	t.Helper()
	for _, d := range []string{"a/b/c", "empty", "x"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range map[string]string{"a/one": "1", "a/b/two": "22", "a/b/c/three": "333", "x/pad": strings.Repeat("p", 20000), "top": "t"} {
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "a/one"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("one", filepath.Join(root, "a/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nowhere", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "top"), filepath.Join(root, "x/top2")); err != nil {
		t.Fatal(err)
	}
}

func postAdopt(t *testing.T, d *Daemon, req AdoptRequest) (int, AdoptResult, string) {
	t.Helper()
	body, ctype := AdoptBody(req)
	hr := httptest.NewRequest(http.MethodPost, "/v1/checkpoint/adopt", body)
	hr.Header.Set("Content-Type", ctype)
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, hr)
	var res AdoptResult
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
	}
	return rec.Code, res, rec.Body.String()
}

// An adopt with the tree's stats lists only directories, and leaves a
// base the next scans build on exactly: after changes in some
// directories, the tracked scan sends only what changed, and what the
// scans say is what is on disk.
func TestAdoptStatedIsAnExactBase(t *testing.T) {
	ss := newScanState(t)
	adoptTree(t, ss.root)
	ss.take() // the checkpoint the fork is of, as the host's store has it
	rel := strings.TrimPrefix(ss.root, "/")
	stats, err := StatTree(ss.root, rel)
	if err != nil {
		t.Fatal(err)
	}
	code, res, body := postAdopt(t, ss.d, AdoptRequest{Roots: []string{ss.root}, Stats: stats})
	if code != http.StatusOK {
		t.Fatalf("adopt: %d %s", code, body)
	}
	if !res.Stated || res.Fallback != "" {
		t.Fatalf("adopt did not use the stats: %+v", res)
	}
	if res.Entries != len(ss.entries) {
		t.Fatalf("adopt has %d paths; the checkpoint %d", res.Entries, len(ss.entries))
	}
	ss.scan = res.Scan
	ss.check("after the adopt")
	if err := os.WriteFile(filepath.Join(ss.root, "x/new"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ss.root, "a/b/two"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ss.root, "a/b/c/three")); err != nil {
		t.Fatal(err)
	}
	end := ss.take()
	if !end.Tracked {
		t.Fatalf("the scan after an adopt walked everything: %+v", end)
	}
	// x/pad (20,000 bytes) is beside x/new: a stat of the adopt's that
	// did not match would send it again.
	if end.Sent != int64(len("new")+len("changed")) {
		t.Errorf("the scan after the adopt sent %d bytes; want only the two written files", end.Sent)
	}
	ss.check("after changes since the adopt")
}

// Stats that do not say what the workspace holds (a path more, a path
// fewer, a directory that is a file, garbage) make limbsd walk it in
// full: the adopt still answers, with every path.
func TestAdoptStatsNotAsTheWorkspaceWalks(t *testing.T) {
	ss := newScanState(t)
	adoptTree(t, ss.root)
	ss.take()
	rel := strings.TrimPrefix(ss.root, "/")
	good, err := StatTree(ss.root, rel)
	if err != nil {
		t.Fatal(err)
	}
	one := func(p string, typ byte) []byte {
		return appendStat(nil, p, statKey{typ: typ, mode: 0o644}, 1)
	}
	cases := map[string][]byte{
		"a path more":          append(append([]byte(nil), good...), one(rel+"/ghost", TypeFile)...),
		"a directory a file":   append(append([]byte(nil), good...), one(rel+"/top/in", TypeFile)...),
		"garbage":              []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"),
		"a path out of root":   append(append([]byte(nil), good...), one("etc/passwd", TypeFile)...),
		"a path with ..":       append(append([]byte(nil), good...), one(rel+"/../x", TypeFile)...),
		"a path twice":         append(append([]byte(nil), good...), one(rel+"/top", TypeFile)...),
		"a huge length":        binary.AppendUvarint(nil, 1<<40),
		"no root":              one(rel+"/top", TypeFile),
		"a file is a dir here": append(append([]byte(nil), good...), one(rel+"/empty/d", TypeDir)...),
	}
	// The same names, another type: a/link said to be a file.
	var swapped []byte
	for b := good; len(b) > 0; {
		n, k := binary.Uvarint(b)
		p := string(b[k : k+int(n)])
		next := skipStat(t, b[k+int(n):])
		e := append([]byte(nil), b[:len(b)-len(next)]...)
		if p == rel+"/a/link" {
			e[k+int(n)] = TypeFile
		}
		swapped = append(swapped, e...)
		b = next
	}
	cases["a symlink said a file"] = swapped
	// A path fewer: the stats as they were before a file was made.
	if err := os.WriteFile(filepath.Join(ss.root, "a/late"), []byte("late"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases["a path fewer"] = good
	for name, stats := range cases {
		t.Run(name, func(t *testing.T) {
			code, res, body := postAdopt(t, ss.d, AdoptRequest{Roots: []string{ss.root}, Stats: stats})
			if code != http.StatusOK {
				t.Fatalf("adopt: %d %s", code, body)
			}
			if res.Stated || res.Fallback == "" {
				t.Fatalf("adopt took stats that are not the workspace's: %+v", res)
			}
			ss.entries = nil
			ss.scan = ""
			ss.take()
			if res.Entries != len(ss.entries) {
				t.Fatalf("the adopt's walk has %d paths; the workspace %d", res.Entries, len(ss.entries))
			}
		})
	}
	_ = os.Remove(filepath.Join(ss.root, "a/late"))
}

// A body of the stats' type must start with a line of JSON.
func TestAdoptBodyMalformed(t *testing.T) {
	ss := newScanState(t)
	for _, body := range []string{"", "not json\n", "{\"roots\":[\"x\"]"} {
		hr := httptest.NewRequest(http.MethodPost, "/v1/checkpoint/adopt", strings.NewReader(body))
		hr.Header.Set("Content-Type", AdoptStatsType)
		rec := httptest.NewRecorder()
		ss.d.ServeHTTP(rec, hr)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("adopt of %q: %d %s; want 400", body, rec.Code, rec.Body)
		}
		b, _ := io.ReadAll(rec.Body)
		if !strings.Contains(string(b), AdoptStatsType) {
			t.Errorf("adopt of %q: %s; want the error to say the format", body, b)
		}
	}
}

// skipStat is b after the rest of one stat whose path was read.
func skipStat(t *testing.T, b []byte) []byte {
	t.Helper()
	b = b[1:] // type
	for range 5 {
		_, n := binary.Uvarint(b)
		b = b[n:]
	}
	for range 3 {
		_, n := binary.Varint(b)
		b = b[n:]
	}
	l, n := binary.Uvarint(b)
	return b[n+int(l):]
}
