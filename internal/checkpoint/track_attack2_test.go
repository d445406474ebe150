package checkpoint

// Hostile sequences against the incremental scan, round two. Each ends
// with ss.check: an incremental scan must give what a walk gives.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Helper modes of round two, in a copy of the test binary. Commands on
// stdin, one a line; each answered "ok".
func init() {
	mode := os.Getenv("LIMBS_ATTACK2_MODE")
	if mode == "" {
		return
	}
	p := os.Getenv("LIMBS_ATTACK2_FILE")
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	in := bufio.NewReader(os.Stdin)
	switch mode {
	case "rdonly":
		// Hold p open read-only (or O_PATH): not "open for writing".
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			fail(err)
		}
		fmt.Println("ok", fd)
		_, _ = io.Copy(io.Discard, in)
	case "rdwr-then-close":
		// Hold p open for writing; on "write", write through it and
		// close it.
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			fail(err)
		}
		fmt.Println("ok")
		if l, _ := in.ReadString('\n'); l != "write\n" {
			os.Exit(0)
		}
		if _, err := unix.Pwrite(fd, []byte("WRITTEN, THEN CLOSED"), 0); err != nil {
			fail(err)
		}
		unix.Close(fd)
		fmt.Println("ok")
		_, _ = io.Copy(io.Discard, in)
	case "threadfd":
		// A thread with its own fd table (unshare(CLONE_FILES)): its fds
		// are in /proc/PID/task/TID/fd, not /proc/PID/fd.
		done := make(chan error)
		cmd := make(chan string)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			if err := unix.Unshare(unix.CLONE_FILES); err != nil {
				done <- err
				return
			}
			fd, err := unix.Open(p, unix.O_RDWR, 0)
			if err != nil {
				done <- err
				return
			}
			done <- nil
			for c := range cmd {
				if c == "write\n" {
					_, err := unix.Pwrite(fd, []byte("THREAD FD TABLE"), 0)
					done <- err
				}
			}
		}()
		if err := <-done; err != nil {
			fail(err)
		}
		fmt.Println("ok")
		for {
			l, err := in.ReadString('\n')
			if err != nil {
				os.Exit(0)
			}
			cmd <- l
			if err := <-done; err != nil {
				fail(err)
			}
			fmt.Println("ok")
		}
	case "threadmunmap":
		// The munmap-with-fd-kept write, the fd in a thread's own table.
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked; the goroutine parks forever
			if err := unix.Unshare(unix.CLONE_FILES); err != nil {
				done <- err
				return
			}
			fd, err := unix.Open(p, unix.O_RDWR, 0)
			if err != nil {
				done <- err
				return
			}
			b, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				done <- err
				return
			}
			copy(b, "THREAD MUNMAP")
			done <- unix.Munmap(b)
			select {}
		}()
		if err := <-done; err != nil {
			fail(err)
		}
		fmt.Println("ok")
		_, _ = io.Copy(io.Discard, in)
	case "mmap-twice":
		// Write through a shared mapping, say ok; on "write", write
		// again through the same (still dirty, still writable) page.
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			fail(err)
		}
		b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			fail(err)
		}
		copy(b, "FIRST")
		fmt.Println("ok")
		if l, _ := in.ReadString('\n'); l != "write\n" {
			os.Exit(0)
		}
		copy(b, "SECOND")
		fmt.Println("ok")
		_, _ = io.Copy(io.Discard, in)
	default:
		fail(fmt.Errorf("mode %q", mode))
	}
	os.Exit(0)
}

// helper2 runs a copy of the test binary in mode on file; it returns the
// helper's stdin, its stdout, and the rest of its first "ok" line.
func helper2(t *testing.T, mode, file string) (*exec.Cmd, io.Writer, *bufio.Reader, string) {
	t.Helper()
	cmd := helperCommand(t)
	cmd.Env = append(os.Environ(), "LIMBS_ATTACK2_MODE="+mode, "LIMBS_ATTACK2_FILE="+file)
	in, err := cmd.StdinPipe()
	must(t, err)
	outp, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	out := bufio.NewReader(outp)
	line, _ := out.ReadString('\n')
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "ok")
	if !ok {
		t.Fatalf("the %s helper: %q", mode, line)
	}
	return cmd, in, out, strings.TrimSpace(rest)
}

func tell(t *testing.T, in io.Writer, out *bufio.Reader, c string) {
	t.Helper()
	fmt.Fprintln(in, c)
	if l, _ := out.ReadString('\n'); l != "ok\n" {
		t.Fatalf("helper, %s: %q", c, l)
	}
}

// linkInDoomedDir: b/new made and watched at a first scan, then a link
// b/new/l to a/x; the caller gets a reference to it, and removeDoomed
// removes the link and b/new. After that, writes through the reference
// raise events only in a removed directory: no watch hears them.
func linkInDoomedDir(t *testing.T) (*scanState, string, string) {
	ss, x := trackedSetup(t)
	d := filepath.Join(ss.root, "b", "new")
	must(t, os.Mkdir(d, 0o755))
	mustTracked(t, ss, "b/new made") // walks, and watches b/new
	l := filepath.Join(d, "l")
	must(t, os.Link(x, l))
	return ss, x, l
}

func removeDoomed(t *testing.T, l string) {
	t.Helper()
	must(t, os.Remove(l))
	must(t, os.Remove(filepath.Dir(l)))
}

// The four below pass, and are kept as regressions: while a dentry of the
// link is pinned (an fd, a mapping), so is its removed parent, whose
// inode, and so its watch, lives on (IN_DELETE_SELF only comes when the
// last reference goes); the writes are heard there, as a born name
// written and gone, and the scan walks.
//
// A read-only (here O_PATH) fd of a link in a removed directory, held by
// a sandbox process, is not "open for writing" at the scan; after the
// scan another process opens /proc/PID/fd/N for writing (a new open of
// the same dentry, in the removed directory), writes and closes it. No
// event, no fd open for writing at the next scan.
func TestAttack2ReopenReadOnlyFd(t *testing.T) {
	ss, x, l := linkInDoomedDir(t)
	cmd, _, _, fd := helper2(t, "rdonly", l)
	removeDoomed(t, l)
	scan2(t, ss, "after the link and its directory went")
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("REOPENED FOR WRITING"), 0)
	must(t, err)
	must(t, f.Close())
	if b, _ := os.ReadFile(x); !bytes.HasPrefix(b, []byte("REOPENED")) {
		t.Fatalf("the write did not reach a/x")
	}
	scan2(t, ss, "after a write through a reopened read-only fd")
}

// The same with chmod through the O_PATH fd (fchmodat on
// /proc/PID/fd/N): a mode change with no event.
func TestAttack2ChmodThroughPathFd(t *testing.T) {
	ss, _, l := linkInDoomedDir(t)
	cmd, _, _, fd := helper2(t, "rdonly", l)
	removeDoomed(t, l)
	scan2(t, ss, "after the link and its directory went")
	must(t, os.Chmod(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd), 0o4711))
	scan2(t, ss, "after a chmod through an O_PATH fd")
}

// An fd open for writing at a scan (so its directory was listed then),
// written through after that scan and closed before the next: the next
// scan sees no fd and no event.
func TestAttack2WritableFdClosedBeforeNextScan(t *testing.T) {
	ss, _, l := linkInDoomedDir(t)
	_, in, out, _ := helper2(t, "rdwr-then-close", l)
	removeDoomed(t, l)
	scan2(t, ss, "after the link and its directory went, its fd open")
	tell(t, in, out, "write")
	scan2(t, ss, "after a write through the fd, and its close")
}

// An fd open for writing in a thread that unshared its fd table: it is in
// /proc/PID/task/TID/fd, and markProcs reads /proc/PID/fd only.
func TestAttack2ThreadFdTable(t *testing.T) {
	ss, _, l := linkInDoomedDir(t)
	_, in, out, _ := helper2(t, "threadfd", l)
	removeDoomed(t, l)
	tell(t, in, out, "write")
	scan2(t, ss, "after a write through an fd of a thread's own table")
}

// The munmap-with-fd-kept write (TestAttackMunmapKeepFd), the fd kept
// in a thread that unshared its fd table: /proc/PID/fd does not show it.
func TestAttack2ThreadMunmapKeepFd(t *testing.T) {
	ss, x := trackedSetup(t)
	helper2(t, "threadmunmap", x)
	if b, _ := os.ReadFile(x); !bytes.HasPrefix(b, []byte("THREAD MUNMAP")) {
		t.Fatalf("the helper's write is not in the file")
	}
	scan2(t, ss, "after a write through a mapping gone, its fd kept in a thread's table")
}

// A link written through, then another file renamed over it: MOVED_TO
// sets the name's state to the moved file's, and the written link's
// "written" is lost with no IN_DELETE.
func TestAttack2RenameOverWrittenLink(t *testing.T) {
	ss, x := trackedSetup(t)
	l := filepath.Join(ss.root, "b", "l")
	must(t, os.Link(x, l))
	f, err := os.OpenFile(l, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("WRITTEN THROUGH A LINK"), 0)
	must(t, err)
	must(t, f.Close())
	other := filepath.Join(ss.root, "b", "other")
	must(t, unix.Mknod(other, unix.S_IFREG|0o644, 0)) // made, never written
	must(t, os.Rename(other, l))
	scan2(t, ss, "after a file renamed over a written link")
}

// RENAME_EXCHANGE of a written link with a file: the two moves' events
// interleave (FROM l, TO m, FROM m, TO l), and the "written" ends on the
// wrong name; the link, now at m, is removed unnoticed.
func TestAttack2ExchangeWrittenLink(t *testing.T) {
	ss, x := trackedSetup(t)
	m := filepath.Join(ss.root, "b", "m")
	must(t, unix.Mknod(m, unix.S_IFREG|0o644, 0))
	mustTracked(t, ss, "b/m made")
	l := filepath.Join(ss.root, "b", "l")
	must(t, os.Link(x, l))
	f, err := os.OpenFile(l, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("EXCHANGED"), 0)
	must(t, err)
	must(t, f.Close())
	must(t, unix.Renameat2(unix.AT_FDCWD, l, unix.AT_FDCWD, m, unix.RENAME_EXCHANGE))
	must(t, os.Remove(m)) // the link
	scan2(t, ss, "after a written link exchanged and removed")
}

// multi is keyed by path: a name that had more than one link at the last
// scan, replaced by a link to another file, is not a "new link", and the
// other file's directory is never listed.
func TestAttack2MultiByPath(t *testing.T) {
	ss, x := trackedSetup(t)
	must(t, os.MkdirAll(filepath.Join(ss.root, "c"), 0o755))
	must(t, os.MkdirAll(filepath.Join(ss.root, "e"), 0o755))
	y := filepath.Join(ss.root, "c", "y")
	must(t, os.Link(x, y))
	w := filepath.Join(ss.root, "e", "w")
	must(t, os.WriteFile(w, []byte("w"), 0o644))
	ss.take() // walks (new dirs): multi = {a/x, c/y}
	ss.check("c/y a second link of a/x")
	mustTracked(t, ss, "a scan with watches")
	must(t, os.Remove(y))
	must(t, os.Link(w, y))
	f, err := os.OpenFile(y, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString(" changed through c/y")
	must(t, err)
	must(t, f.Close())
	scan2(t, ss, "after c/y became a link of e/w and was written")
	// And it stays so: c/ is listed at every scan, e/ never.
	f, err = os.OpenFile(y, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString(" again")
	must(t, err)
	must(t, f.Close())
	scan2(t, ss, "after a second write through c/y")
}

// Not the tracking's own: a second write through a shared mapping whose
// page is still dirty and writable faults nothing, so neither mtime nor
// ctime moves; no scan based on the last (walk or not) sends it. Written
// here as a check of the stream against the disk.
func TestAttack2MmapSecondWriteSameKey(t *testing.T) {
	ss, x := trackedSetup(t)
	_, in, out, _ := helper2(t, "mmap-twice", x)
	scan2(t, ss, "after the first write through the mapping")
	tell(t, in, out, "write")
	if b, _ := os.ReadFile(x); !bytes.HasPrefix(b, []byte("SECOND")) {
		t.Fatalf("the second write is not in the file")
	}
	scan2(t, ss, "after a second write through the same dirty page")
}

// scan2 takes a scan, checks it, and logs which kind it was (and why a
// walk, when it was one).
func scan2(t *testing.T, ss *scanState, what string) ScanEnd {
	t.Helper()
	why := ""
	if ss.d.track != nil {
		why = ss.d.track.broken
	}
	end := ss.take()
	t.Logf("%s: tracked=%v listed=%d (broken before: %q)", what, end.Tracked, end.Listed, why)
	ss.check(what)
	return end
}

// Cost: common tools must not make every scan walk everything.
func costScan(t *testing.T, ss *scanState, what string) {
	t.Helper()
	var why bytes.Buffer
	ss.d.log = slog.New(slog.NewTextHandler(&why, &slog.HandlerOptions{Level: slog.LevelDebug}))
	end := ss.take()
	ss.d.log = slog.New(slog.DiscardHandler)
	ss.check(what)
	if !end.Tracked {
		t.Errorf("%s: the scan walked everything (listed %d): %s", what, end.Listed, why.String())
	}
}

func run(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	c := exec.Command(name, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b", "HOME="+dir)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func costSetup(t *testing.T) *scanState {
	ss := newScanState(t)
	for i := range 40 {
		d := filepath.Join(ss.root, "src", strconv.Itoa(i%4))
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.go", i)), []byte(fmt.Sprintf("package p // %d\n", i)), 0o644))
	}
	return ss
}

// sed -i writes a temporary and renames it over the file.
func TestCost2SedInPlace(t *testing.T) {
	ss := costSetup(t)
	ss.take()
	ss.check("the first scan")
	run(t, ss.root, "sed", "-i", "s/package/package /", filepath.Join(ss.root, "src", "2", "f2.go"))
	costScan(t, ss, "after sed -i")
}

// Cost of markProcs, all of it with the sandbox frozen: a process may
// hold ~65,000 shared mappings (vm.max_map_count) of a file on another
// device, each line of its maps going through Sscanf and the path checks;
// nothing bounds the lines over all processes.
func TestCost2ManyMappings(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	ss, _ := trackedSetup(t)
	shm := filepath.Join(t.TempDir(), "shm")
	must(t, os.WriteFile(shm, make([]byte, 4096), 0o644))
	c := exec.Command(py, "-c", `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
f = os.open(sys.argv[1], os.O_RDWR)
n = 0
for i in range(65000):
    # PROT_READ|PROT_WRITE, MAP_SHARED; alternate the protection so that
    # neighbours never merge
    if libc.mmap(None, 4096, 1 if i % 2 else 3, 1, f, 0) in (None, ctypes.c_void_p(-1).value):
        break
    n += 1
print(n, flush=True)
sys.stdin.read()
`, shm)
	in, err := c.StdinPipe()
	must(t, err)
	out, err := c.StdoutPipe()
	must(t, err)
	must(t, c.Start())
	defer func() { in.Close(); c.Wait() }()
	line, _ := bufio.NewReader(out).ReadString('\n')
	t.Logf("mappings: %s", strings.TrimSpace(line))
	s := &scanner{next: ss.d.last}
	tr := newTracker([]string{strings.TrimPrefix(ss.root, "/")})
	defer tr.close()
	pids := make([]int, 20) // as if 20 such processes
	for i := range pids {
		pids[i] = c.Process.Pid
	}
	start := testingNow()
	if err := markMaps(fmt.Sprintf("/proc/%d/maps", c.Process.Pid), map[uint64]bool{}, map[uint64]uint64{}, tr, &procBudget{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("one maps file: %v", testingSince(start))
	start = testingNow()
	s.markProcs(tr, pids)
	el := testingSince(start)
	t.Logf("markProcs over 20 processes of %s mappings: %v (broken %q)", strings.TrimSpace(line), el, tr.broken)
	if el.Seconds() > 1 {
		t.Errorf("markProcs took %v, frozen", el)
	}
}
