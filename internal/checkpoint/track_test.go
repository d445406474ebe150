package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A helper process for the mmap case: it maps the file shared and
// writable, writes through the mapping, says so, and waits.
func init() {
	p := os.Getenv("LIMBS_TEST_MMAP_WRITE")
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	copy(b, "MMAP")
	fmt.Println("ok")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it
	os.Exit(0)
}

// scanState is what the scan streams have said the tree is: each path's
// entry and content, built up from the first full scan by every
// incremental one after it, as the host's store does.
type scanState struct {
	t       *testing.T
	d       *Daemon
	root    string
	scan    string
	entries map[string]Entry
	content map[string][]byte
}

func (ss *scanState) take() ScanEnd {
	t := ss.t
	t.Helper()
	q := url.Values{"root": {ss.root}, "content": {"1"}}
	if ss.scan != "" {
		q.Set("base", ss.scan)
	}
	rec := httptest.NewRecorder()
	ss.d.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/checkpoint/scan?"+q.Encode(), nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scan: %d %s", rec.Code, rec.Body)
	}
	rd := NewReader(rec.Body, Limits{MaxEntries: 1 << 20, MaxFile: 1 << 30, MaxTotal: 1 << 32, MaxLine: 1 << 20, MaxState: 1 << 20})
	var end ScanEnd
	seen := map[string]bool{}
	full := ss.scan == ""
	if full {
		ss.entries, ss.content = map[string]Entry{}, map[string][]byte{}
	}
	for {
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the scan: %v", err)
		}
		switch r.Kind {
		case KindEntry:
			if seen[r.Entry.Path] {
				t.Fatalf("path %s twice in one scan", r.Entry.Path)
			}
			seen[r.Entry.Path] = true
			ss.entries[r.Entry.Path] = r.Entry
			delete(ss.content, r.Entry.Path)
			if r.Flag == FlagContent {
				b, err := io.ReadAll(rd.Content())
				if err != nil {
					t.Fatal(err)
				}
				ss.content[r.Entry.Path] = b
			}
		case KindRemoved:
			delete(ss.entries, r.Entry.Path)
			delete(ss.content, r.Entry.Path)
		case KindEnd:
			if err := json.Unmarshal(r.JSON, &end); err != nil {
				t.Fatal(err)
			}
		}
	}
	if end.Error != "" {
		t.Fatalf("scan failed: %s", end.Error)
	}
	if end.Base == "" && !full {
		// Not based on the last: the stream was everything.
		t.Fatalf("the scan was not based on the last one")
	}
	ss.scan = end.Scan
	return end
}

// check compares what the streams said with the tree on disk, and the
// daemon's table with a fresh full walk.
func (ss *scanState) check(what string) {
	t := ss.t
	t.Helper()
	want := map[string]Entry{}
	wantContent := map[string][]byte{}
	err := filepath.WalkDir(ss.root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		rel := strings.TrimPrefix(p, "/")
		e := Entry{Path: rel, Mode: uint32(st.Mode) & 0o7777, UID: int(st.Uid), GID: int(st.Gid), Mtime: st.Mtim.Nano()}
		switch {
		case fi.Mode().IsRegular():
			e.Type, e.Size = TypeFile, st.Size
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			wantContent[rel] = b
		case fi.IsDir():
			e.Type = TypeDir
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Type, e.Size = TypeSymlink, st.Size
			e.Link, _ = os.Readlink(p)
		default:
			return nil
		}
		want[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, e := range want {
		got, ok := ss.entries[p]
		if !ok {
			t.Fatalf("%s: /%s is on disk, the scans lost it", what, p)
		}
		if got != e {
			t.Fatalf("%s: /%s is %+v on disk, the scans say %+v", what, p, e, got)
		}
		if e.Type == TypeFile && !bytes.Equal(ss.content[p], wantContent[p]) {
			t.Fatalf("%s: /%s holds %q on disk, the scans say %q", what, p, wantContent[p], ss.content[p])
		}
	}
	for p := range ss.entries {
		if _, ok := want[p]; !ok {
			t.Fatalf("%s: the scans still have /%s, gone from disk", what, p)
		}
	}
	fresh := &scanner{next: table{}, content: false, w: bufio.NewWriter(io.Discard)}
	if err := fresh.scanRoot(ss.root); err != nil {
		t.Fatal(err)
	}
	if len(fresh.next) != len(ss.d.last) {
		t.Fatalf("%s: the daemon's table has %d paths, a walk %d", what, len(ss.d.last), len(fresh.next))
	}
	for p, k := range fresh.next {
		// A link made and removed since a scan changes only the ctime of
		// the file it linked to: that is not in a checkpoint, and a stale
		// one can only make a later scan send the file again.
		got := ss.d.last[p]
		got.cti, k.cti = 0, 0
		if got != k {
			t.Fatalf("%s: the daemon's table has /%s as %+v, a walk %+v", what, p, ss.d.last[p], k)
		}
	}
}

func newScanState(t *testing.T) *scanState {
	trackAnyRoot = true
	t.Cleanup(func() { trackAnyRoot = false })
	root := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	d := NewDaemon(Options{Workdir: root})
	t.Cleanup(func() {
		d.mu.Lock()
		d.track.close()
		d.mu.Unlock()
	})
	return &scanState{t: t, d: d, root: root}
}

// TestTrackedScanMatchesWalk: after every kind of change a program can
// make (writes, truncates, chmod, utimes, new and removed files and
// directories, renames of files and of directories across the tree, a
// directory removed and made again under the same name, a symlink
// swapped for a directory, hard links), an incremental scan that lists
// only what inotify named gives the same table as a full walk, and its
// stream, applied to the last, gives the tree on disk.
func TestTrackedScanMatchesWalk(t *testing.T) {
	ss := newScanState(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	root := ss.root
	for i := range 20 {
		dir := filepath.Join(root, fmt.Sprintf("d%d", i%5), fmt.Sprintf("e%d", i))
		must(t, os.MkdirAll(dir, 0o755))
		for j := range 5 {
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", j)), []byte(fmt.Sprint(i, j)), 0o644))
		}
	}
	ss.take()
	ss.check("the first scan")
	if !ss.d.track.serves([]string{strings.TrimPrefix(root, "/")}, ss.scan) {
		t.Fatalf("no watches after the first scan (broken: %q)", ss.d.track.broken)
	}
	// Every path of the tree now, to pick from.
	pick := func(dirs bool) string {
		var all []string
		_ = filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
			if err == nil && p != root && de.IsDir() == dirs {
				all = append(all, p)
			}
			return nil
		})
		if len(all) == 0 {
			return ""
		}
		return all[rng.IntN(len(all))]
	}
	n := 0
	ops := []func(){
		func() { // write
			if p := pick(false); p != "" {
				if f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0); err == nil {
					fmt.Fprint(f, "more")
					f.Close()
				}
			}
		},
		func() { // write in place, keeping size and mtime
			if p := pick(false); p != "" {
				if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
					if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
						f.WriteAt([]byte("Z"), 0)
						f.Close()
						os.Chtimes(p, fi.ModTime(), fi.ModTime())
					}
				}
			}
		},
		func() { // truncate
			if p := pick(false); p != "" {
				os.Truncate(p, 0)
			}
		},
		func() { // chmod
			if p := pick(rng.IntN(2) == 0); p != "" {
				os.Chmod(p, fs.FileMode(0o700|rng.IntN(0o77)))
			}
		},
		func() { // utimes
			if p := pick(false); p != "" {
				ts := time.Unix(int64(rng.IntN(1e9)), 0)
				os.Chtimes(p, ts, ts)
			}
		},
		func() { // new file
			if d := pick(true); d != "" {
				n++
				os.WriteFile(filepath.Join(d, fmt.Sprintf("new%d", n)), []byte("new"), 0o600)
			}
		},
		func() { // remove a file
			if p := pick(false); p != "" {
				os.Remove(p)
			}
		},
		func() { // new directory tree
			if d := pick(true); d != "" {
				n++
				nd := filepath.Join(d, fmt.Sprintf("nd%d", n), "sub")
				os.MkdirAll(nd, 0o755)
				os.WriteFile(filepath.Join(nd, "x"), []byte("x"), 0o644)
			}
		},
		func() { // rm -rf of a directory
			if d := pick(true); d != "" {
				os.RemoveAll(d)
			}
		},
		func() { // rm -rf and mkdir again, same name
			if d := pick(true); d != "" {
				os.RemoveAll(d)
				os.Mkdir(d, 0o755)
				os.WriteFile(filepath.Join(d, "again"), []byte("again"), 0o644)
			}
		},
		func() { // rename a directory somewhere else
			a, b := pick(true), pick(true)
			if a != "" && b != "" && !strings.HasPrefix(b+"/", a+"/") {
				n++
				os.Rename(a, filepath.Join(b, fmt.Sprintf("mv%d", n)))
			}
		},
		func() { // swap two directories' names
			a, b := pick(true), pick(true)
			if a != "" && b != "" && a != b && !strings.HasPrefix(b+"/", a+"/") && !strings.HasPrefix(a+"/", b+"/") {
				tmp := a + ".swap"
				if os.Rename(a, tmp) == nil {
					os.Rename(b, a)
					os.Rename(tmp, b)
				}
			}
		},
		func() { // rename a file over another
			a, b := pick(false), pick(false)
			if a != "" && b != "" {
				os.Rename(a, b)
			}
		},
		func() { // a symlink swapped for a directory and back
			if d := pick(true); d != "" {
				l := filepath.Join(d, "link")
				if fi, err := os.Lstat(l); err == nil && fi.IsDir() {
					os.RemoveAll(l)
					os.Symlink("/etc", l)
				} else {
					os.Remove(l)
					os.Mkdir(l, 0o755)
					os.WriteFile(filepath.Join(l, "in"), []byte("in"), 0o644)
				}
			}
		},
		func() { // a hard link, written through later
			a, d := pick(false), pick(true)
			if a != "" && d != "" {
				n++
				os.Link(a, filepath.Join(d, fmt.Sprintf("hl%d", n)))
			}
		},
	}
	tracked := 0
	for round := range 150 {
		for range 1 + rng.IntN(4) {
			ops[rng.IntN(len(ops))]()
		}
		end := ss.take()
		if end.Tracked {
			tracked++
		}
		ss.check(fmt.Sprintf("round %d", round))
	}
	// A round that makes a directory walks everything (track.go): about
	// a third of them here.
	if tracked < 30 {
		t.Errorf("only %d of 150 scans were incremental: the watches keep breaking (last: %q)", tracked, ss.d.track.broken)
	}
	t.Logf("%d of 150 scans were incremental", tracked)
}

// TestTrackedScanSeesMmapWrites: a write through a shared writable
// mapping raises no inotify event; the scan finds it from the writer's
// /proc/PID/maps.
func TestTrackedScanSeesMmapWrites(t *testing.T) {
	ss := newScanState(t)
	dir := filepath.Join(ss.root, "a", "b")
	must(t, os.MkdirAll(dir, 0o755))
	f := filepath.Join(dir, "mapped")
	must(t, os.WriteFile(f, bytes.Repeat([]byte("."), 4096), 0o644))
	must(t, os.WriteFile(filepath.Join(ss.root, "other"), []byte("x"), 0o644))
	// Old enough that the page cache is clean and the first write through
	// the mapping faults (and updates the mtime).
	syscall.Sync()
	ss.take()
	ss.check("the first scan")
	// A copy of the test binary: limbsd's freezer takes a child running
	// its own executable for one of its workers, and leaves it out.
	cmd := helperCommand(t)
	cmd.Env = append(os.Environ(), "LIMBS_TEST_MMAP_WRITE="+f)
	in, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	defer func() {
		in.Close()
		cmd.Wait()
	}()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ok\n" {
		t.Fatalf("the mmap helper: %q", line)
	}
	b, _ := os.ReadFile(f)
	if !bytes.HasPrefix(b, []byte("MMAP")) {
		t.Fatalf("the helper's write is not in the file: %q", b[:8])
	}
	end := ss.take()
	if !end.Tracked {
		t.Fatalf("the scan walked everything; want an incremental one")
	}
	ss.check("after the mmap write")
}

// TestTrackedScanHardLinkFromOutside: a file with a second link outside
// the root is stated at every scan, since writes through that link raise
// no event the root's watches see.
func TestTrackedScanHardLinkFromOutside(t *testing.T) {
	ss := newScanState(t)
	must(t, os.MkdirAll(filepath.Join(ss.root, "a"), 0o755))
	f := filepath.Join(ss.root, "a", "f")
	must(t, os.WriteFile(f, []byte("one"), 0o644))
	outside := filepath.Join(filepath.Dir(ss.root), "outside")
	must(t, os.Link(f, outside))
	ss.take()
	ss.check("the first scan")
	must(t, os.WriteFile(outside, []byte("two, longer"), 0o644))
	end := ss.take()
	if !end.Tracked {
		t.Fatalf("the scan walked everything; want an incremental one")
	}
	ss.check("after a write through the outside link")
}

// TestTrackedScanLinkMadeAndRemoved: a file written through a link made
// and removed since the last scan, or through an fd opened by a link
// that is gone, changed with no event in its own directory; the scan
// must still find it.
func TestTrackedScanLinkMadeAndRemoved(t *testing.T) {
	ss := newScanState(t)
	must(t, os.MkdirAll(filepath.Join(ss.root, "a"), 0o755))
	must(t, os.MkdirAll(filepath.Join(ss.root, "b"), 0o755))
	x := filepath.Join(ss.root, "a", "x")
	must(t, os.WriteFile(x, []byte("one"), 0o644))
	ss.take()
	ss.check("the first scan")

	l := filepath.Join(ss.root, "b", "l")
	must(t, os.Link(x, l))
	f, err := os.OpenFile(l, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString(" two")
	must(t, err)
	must(t, f.Close())
	must(t, os.Remove(l))
	ss.take()
	ss.check("after a write through a link made and removed")

	// An fd opened through a link, the link removed, a scan, then a
	// write through the fd.
	must(t, os.Link(x, l))
	f, err = os.OpenFile(l, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	defer f.Close()
	must(t, os.Remove(l))
	ss.take()
	ss.check("after the link went")
	_, err = f.WriteString(" three")
	must(t, err)
	ss.take()
	ss.check("after a write through an fd of the gone link")
	// And a plain temporary file, written and renamed into place, keeps
	// the scans incremental.
	tmp := filepath.Join(ss.root, "b", ".tmp")
	must(t, os.WriteFile(tmp, []byte("saved"), 0o644))
	must(t, os.Rename(tmp, filepath.Join(ss.root, "a", "saved")))
	ss.take()
	if end := ss.take(); !end.Tracked {
		t.Errorf("a scan after an atomic save walked everything")
	}
	must(t, os.WriteFile(filepath.Join(ss.root, "b", "c"), []byte("c"), 0o644))
	must(t, os.Rename(filepath.Join(ss.root, "b", "c"), filepath.Join(ss.root, "a", "c")))
	if end := ss.take(); !end.Tracked {
		t.Errorf("the scan of an atomic save walked everything")
	}
	ss.check("after atomic saves")
}

// TestTrackedScanRestoreAndOverflow: a restore, or a full event queue,
// makes the next scan walk everything, and it is right.
func TestTrackedScanOverflowWalks(t *testing.T) {
	ss := newScanState(t)
	must(t, os.WriteFile(filepath.Join(ss.root, "f"), []byte("x"), 0o644))
	ss.take()
	// More events than the default queue holds (16,384).
	for i := range 20000 {
		must(t, os.WriteFile(filepath.Join(ss.root, "f"), []byte(fmt.Sprint(i)), 0o644))
	}
	end := ss.take()
	ss.check("after an overflow")
	if q, _ := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); strings.TrimSpace(string(q)) == "16384" && end.Tracked {
		t.Errorf("the scan after an overflow was incremental")
	}
	end = ss.take()
	if !end.Tracked {
		t.Errorf("the scan after the walk that followed the overflow was not incremental")
	}
	ss.check("after the walk")
}

// helperCommand runs a copy of the test binary (running no test): the
// freezer takes a child running limbsd's own executable for one of its
// workers and leaves it out, so a helper must be another file.
func helperCommand(t *testing.T) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	must(t, err)
	b, err := os.ReadFile(exe)
	must(t, err)
	helper := filepath.Join(t.TempDir(), "helper")
	must(t, os.WriteFile(helper, b, 0o755))
	return exec.Command(helper, "-test.run=^$")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
