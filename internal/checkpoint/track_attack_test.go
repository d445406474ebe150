package checkpoint

// Hostile sequences against the incremental (inotify-tracked) scan: each
// ends with a scan that says Tracked and a check against a full walk.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Helper modes, run in a copy of the test binary (see mmapHelper).
func init() {
	mode := os.Getenv("LIMBS_ATTACK_MODE")
	if mode == "" {
		return
	}
	p := os.Getenv("LIMBS_ATTACK_FILE")
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		fail(err)
	}
	switch mode {
	case "munmap":
		// Write through a shared writable mapping, unmap it, keep the fd:
		// the file is not released, so no IN_CLOSE_WRITE, and no mapping
		// shows in /proc/PID/maps.
		b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			fail(err)
		}
		copy(b, "MUNMAP")
		if err := syscall.Munmap(b); err != nil {
			fail(err)
		}
	case "mprotect":
		// A shared mapping, read-only in /proc/PID/maps at every scan,
		// made writable for a moment in between.
		b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			fail(err)
		}
		f.Close() // the mapping holds the file
		must2(syscall.Mprotect(b, syscall.PROT_READ|syscall.PROT_WRITE))
		copy(b, "MPROTECT")
		must2(syscall.Mprotect(b, syscall.PROT_READ))
	case "nodump":
		// A process limbsd may not read /proc/PID/maps of (a root agent:
		// limbsd has no CAP_SYS_PTRACE then).
		must2(unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0))
		b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			fail(err)
		}
		copy(b, "NODUMP")
	case "longline":
		// The target mapped shared and writable, then a file with a path
		// longer than 64 KiB mapped below it: bufio.Scanner stops at that
		// line of /proc/PID/maps and never reads the target's.
		b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			fail(err)
		}
		fd, err := openDeep(os.Getenv("LIMBS_ATTACK_DEEP"))
		if err != nil {
			fail(err)
		}
		l, err := syscall.Mmap(fd, 0, 4096, syscall.PROT_READ, syscall.MAP_PRIVATE)
		if err != nil {
			fail(err)
		}
		if uintptr(unsafe.Pointer(&l[0])) > uintptr(unsafe.Pointer(&b[0])) {
			fail(fmt.Errorf("the long mapping is above the target"))
		}
		copy(b, "LONGLINE")
	case "holdfd":
		// Hold the file open for writing (opened by a name the test then
		// removes), and write through it when told to.
		fmt.Println("ok")
		in := bufio.NewReader(os.Stdin)
		if line, _ := in.ReadString('\n'); line != "write\n" {
			os.Exit(0)
		}
		if _, err := f.WriteAt([]byte("WRITTEN LATER"), 0); err != nil {
			fail(err)
		}
		fmt.Println("ok")
		_, _ = io.Copy(io.Discard, in)
		os.Exit(0)
	default:
		fail(fmt.Errorf("mode %q", mode))
	}
	fmt.Println("ok")
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

func must2(err error) {
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

// deepLevels of 255-byte names make a path longer than 64 KiB.
const deepLevels = 260

var deepName = strings.Repeat("d", 255)

// makeDeep makes base/d.../d.../.../f (deepLevels directories) holding a
// page, with openat since the path is far past PATH_MAX.
func makeDeep(base string) error {
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	for range deepLevels {
		if err := unix.Mkdirat(fd, deepName, 0o755); err != nil {
			return err
		}
		nfd, err := unix.Openat(fd, deepName, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = nfd
	}
	ffd, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_RDWR, 0o644)
	unix.Close(fd)
	if err != nil {
		return err
	}
	defer unix.Close(ffd)
	return unix.Ftruncate(ffd, 4096)
}

func openDeep(base string) (int, error) {
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	for range deepLevels {
		nfd, err := unix.Openat(fd, deepName, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = nfd
	}
	ffd, err := unix.Openat(fd, "f", unix.O_RDONLY, 0)
	unix.Close(fd)
	return ffd, err
}

// attackHelper runs a copy of the test binary in mode on file (the
// freezer would take the test binary itself for a limbsd worker), and
// returns once it says ok; it lives until the test ends.
func attackHelper(t *testing.T, mode, file string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := helperCommand(t)
	cmd.Env = append(append(os.Environ(), "LIMBS_ATTACK_MODE="+mode, "LIMBS_ATTACK_FILE="+file), env...)
	in, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ok\n" {
		t.Fatalf("the %s helper: %q", mode, line)
	}
	return cmd
}

// trackedSetup: a/x (a page of dots, old and clean), b/, and a first
// full scan with watches.
func trackedSetup(t *testing.T) (*scanState, string) {
	ss := newScanState(t)
	must(t, os.MkdirAll(filepath.Join(ss.root, "a"), 0o755))
	must(t, os.MkdirAll(filepath.Join(ss.root, "b"), 0o755))
	x := filepath.Join(ss.root, "a", "x")
	must(t, os.WriteFile(x, bytes.Repeat([]byte("."), 4096), 0o644))
	syscall.Sync()
	ss.take()
	ss.check("the first scan")
	return ss, x
}

// mustTracked takes a scan and checks it against the tree on disk: an
// incremental one must be right, or the scan must have walked everything.
func mustTracked(t *testing.T, ss *scanState, what string) {
	t.Helper()
	ss.take()
	ss.check(what)
}

// A hard link made in a directory new since the last scan (so not
// watched yet), written through and removed: no event reaches a/.
func TestAttackLinkInNewDir(t *testing.T) {
	ss, x := trackedSetup(t)
	d := filepath.Join(ss.root, "b", "new")
	must(t, os.Mkdir(d, 0o755))
	l := filepath.Join(d, "l")
	must(t, os.Link(x, l))
	must(t, os.WriteFile(l, []byte("changed through a link in an unwatched directory"), 0o644))
	must(t, os.Remove(l))
	mustTracked(t, ss, "after a write through a link in a new directory")
}

// The same, the link kept (ln into a new directory, then edit it): the
// new subtree is walked, and its link is stated, but the walk of a new
// subtree does not give way on a file with more than one link, and a/x
// is never stated again.
func TestAttackLinkInNewDirKept(t *testing.T) {
	ss, x := trackedSetup(t)
	d := filepath.Join(ss.root, "b", "new")
	must(t, os.Mkdir(d, 0o755))
	l := filepath.Join(d, "l")
	must(t, os.Link(x, l))
	f, err := os.OpenFile(l, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("EDITED"), 0)
	must(t, err)
	must(t, f.Close())
	mustTracked(t, ss, "after a write through a link kept in a new directory")
}

// The same, the new directory removed too: the link was never in a
// directory the scan lists.
func TestAttackLinkInNewDirRemoved(t *testing.T) {
	ss, x := trackedSetup(t)
	d := filepath.Join(ss.root, "b", "new")
	must(t, os.Mkdir(d, 0o755))
	l := filepath.Join(d, "l")
	must(t, os.Link(x, l))
	must(t, os.WriteFile(l, []byte("changed through a link in an unwatched directory"), 0o644))
	must(t, os.Remove(l))
	must(t, os.Remove(d))
	mustTracked(t, ss, "after a write through a link in a new directory, gone")
	// And it stays wrong: later scans list nothing of a/.
	must(t, os.WriteFile(filepath.Join(ss.root, "b", "other"), []byte("o"), 0o644))
	mustTracked(t, ss, "a later scan")
}

// A born name written, then renamed (MOVED_FROM forgets "written") and
// removed under its new name.
func TestAttackLinkWrittenRenamedRemoved(t *testing.T) {
	ss, x := trackedSetup(t)
	l := filepath.Join(ss.root, "b", "l")
	must(t, os.Link(x, l))
	must(t, os.WriteFile(l, []byte("changed, then the link renamed and removed"), 0o644))
	m := filepath.Join(ss.root, "b", "m")
	must(t, os.Rename(l, m))
	must(t, os.Remove(m))
	mustTracked(t, ss, "after a write through a link renamed and removed")
}

// An fd opened through a link, the link moved into a new directory and
// both removed; written after the next scan. The fd's dentry's parent is
// a removed directory with no watch: no event at all.
func TestAttackFdOfLinkInRemovedDir(t *testing.T) {
	ss, x := trackedSetup(t)
	d := filepath.Join(ss.root, "b", "new")
	must(t, os.Mkdir(d, 0o755))
	l := filepath.Join(d, "l")
	must(t, os.Link(x, l))
	// A process of the sandbox holds the file open by that name.
	cmd := helperCommand(t)
	cmd.Env = append(os.Environ(), "LIMBS_ATTACK_MODE=holdfd", "LIMBS_ATTACK_FILE="+l)
	in, err := cmd.StdinPipe()
	must(t, err)
	outp, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	defer func() {
		in.Close()
		cmd.Wait()
	}()
	out := bufio.NewReader(outp)
	if line, _ := out.ReadString('\n'); line != "ok\n" {
		t.Fatalf("the holdfd helper: %q", line)
	}
	must(t, os.Remove(l))
	must(t, os.Remove(d))
	mustTracked(t, ss, "after the link went")
	fmt.Fprintln(in, "write")
	if line, _ := out.ReadString('\n'); line != "ok\n" {
		t.Fatalf("the holdfd helper's write: %q", line)
	}
	end := ss.take()
	ss.check("after a write through the fd")
	if !end.Tracked {
		t.Errorf("the scan after the write walked everything: the open fd should have pointed at the file")
	}
}

// Written through a shared writable mapping, unmapped, the fd kept
// open: no mapping to see, and no IN_CLOSE_WRITE yet.
func TestAttackMunmapKeepFd(t *testing.T) {
	ss, x := trackedSetup(t)
	attackHelper(t, "munmap", x)
	if b, _ := os.ReadFile(x); !bytes.HasPrefix(b, []byte("MUNMAP")) {
		t.Fatalf("the helper's write is not in the file")
	}
	mustTracked(t, ss, "after a write through a mapping gone, its fd kept")
}

// A shared mapping read-only at every scan, writable in between.
func TestAttackMprotect(t *testing.T) {
	ss, x := trackedSetup(t)
	attackHelper(t, "mprotect", x)
	if b, _ := os.ReadFile(x); !bytes.HasPrefix(b, []byte("MPROTECT")) {
		t.Fatalf("the helper's write is not in the file")
	}
	mustTracked(t, ss, "after a write through a mapping made writable and back")
}

// A mapped file in a directory whose name has a newline: /proc/PID/maps
// prints it as \012, and that path is not in the table.
func TestAttackMmapNewlineDir(t *testing.T) {
	ss := newScanState(t)
	dir := filepath.Join(ss.root, "a\nb")
	must(t, os.MkdirAll(dir, 0o755))
	x := filepath.Join(dir, "x")
	must(t, os.WriteFile(x, bytes.Repeat([]byte("."), 4096), 0o644))
	syscall.Sync()
	ss.take()
	ss.check("the first scan")
	attackHelperMmap(t, x)
	mustTracked(t, ss, "after a write through a mapping of a file under a\\nb")
}

// attackHelperMmap: the existing helper, mapped shared+writable and kept.
func attackHelperMmap(t *testing.T, file string) {
	t.Helper()
	cmd := helperCommand(t)
	cmd.Env = append(os.Environ(), "LIMBS_TEST_MMAP_WRITE="+file)
	in, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ok\n" {
		t.Fatalf("the mmap helper: %q", line)
	}
}

// A line of /proc/PID/maps longer than the scanner's 64 KiB buffer (a
// mapped file outside the workspace, deep enough) hides every mapping
// after it.
func TestAttackMapsLongLine(t *testing.T) {
	ss, x := trackedSetup(t)
	deep := t.TempDir()
	must(t, makeDeep(deep))
	cmd := attackHelper(t, "longline", x, "LIMBS_ATTACK_DEEP="+deep)
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
	must(t, err)
	long, target := -1, -1
	for i, l := range strings.Split(string(maps), "\n") {
		if len(l) > 1<<16 && long < 0 {
			long = i
		}
		if strings.HasSuffix(l, x) && strings.Contains(l, " rw-s ") {
			target = i
		}
	}
	if long < 0 || target < long {
		t.Fatalf("want a line over 64 KiB before the target's (long %d, target %d)", long, target)
	}
	mustTracked(t, ss, "after a write through a mapping listed after a 64 KiB line")
}

// A process whose /proc/PID/maps limbsd cannot open (non-dumpable, and
// limbsd without CAP_SYS_PTRACE, as for a root agent): its mappings are
// skipped silently. Run without CAP_SYS_PTRACE:
//
//	setpriv --bounding-set=-sys_ptrace go test -run TestAttackMapsUnreadable ...
func TestAttackMapsUnreadable(t *testing.T) {
	if hasCap(unix.CAP_SYS_PTRACE) {
		t.Skip("needs a process without CAP_SYS_PTRACE (run under setpriv --bounding-set=-sys_ptrace)")
	}
	ss, x := trackedSetup(t)
	attackHelper(t, "nodump", x)
	mustTracked(t, ss, "after a write through a mapping in a non-dumpable process")
}

func hasCap(c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:\t"); ok {
			var m uint64
			fmt.Sscanf(v, "%x", &m)
			return m&(1<<c) != 0
		}
	}
	return false
}

// Not a wrong result, a cost: a file made with O_TMPFILE, written, and
// linked into place (what some editors and tools do) keeps the scans
