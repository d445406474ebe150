package shell

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The processes a command left running were all forked after limbs typed
// it: their pids were allocated after the pid the kernel last allocated
// then. Reading /proc/sys/kernel/ns_last_pid before the command is typed
// and again once it ended bounds the pids worth a look, so that the look
// at a command's end reads the stat of the few processes the command
// made, not of every process on the machine (a host with 500 processes
// spent 2 ms a command on that). The kernel allocates pids in order,
// wrapping at pid_max: the window is (from, now], or (from, pid_max) and
// [1, now] when it wrapped. It is trusted only while the command was too
// short to have made pid_max processes and threads (100 ns each, ten
// times faster than a many-core machine makes threads; 3 ms at Linux's
// default pid_max of 32768, 0.4 s at systemd's 4194304), and only when it
// holds few pids; otherwise every pid is looked at, as before. Writing
// ns_last_pid (or a pid_max of its own) takes CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE, which sandboxes do not have; with one, an agent
// could only hide a process from the report of what a command left
// running, never from a kill, which does not use the window.

const (
	maxWindowPids  = 256             // more: walk /proc and filter by the window
	maxWindowSpan  = 5 * time.Second // the longest command the window is trusted for
	forkAtFastest  = 100 * time.Nanosecond
	lastPidUnknown = -1
)

var pidMax = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || n <= 1 {
		return 0
	}
	return n
})

// lastPidFD is /proc/sys/kernel/ns_last_pid, opened once (NewManager
// opens it, before any session exists, so that it is limbsd's and never
// looks like a descriptor a session leaked) and read with pread: an open,
// a second read and a close more per read cost some 17 µs on a virtual
// machine, twice a command. -1 when it cannot be opened; lastPid then
// opens the file each time. Close-on-exec: no shell inherits it.
var lastPidFD = sync.OnceValue(func() int {
	fd, err := unix.Open("/proc/sys/kernel/ns_last_pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
})

// lastPid is the last pid the kernel allocated in limbsd's pid namespace,
// or lastPidUnknown.
func lastPid() int {
	var buf [24]byte
	var b []byte
	if fd := lastPidFD(); fd >= 0 {
		n, err := unix.Pread(fd, buf[:], 0)
		for err == unix.EINTR {
			n, err = unix.Pread(fd, buf[:], 0)
		}
		if err != nil || n <= 0 {
			return lastPidUnknown
		}
		b = buf[:n]
	} else {
		var err error
		if b, err = readProc("/proc/sys/kernel/ns_last_pid", buf[:0], len(buf)); err != nil {
			return lastPidUnknown
		}
	}
	if len(b) == 0 || len(b) == len(buf) {
		return lastPidUnknown
	}
	v, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || v < 0 {
		return lastPidUnknown
	}
	return v
}

// pidWindow is the pids allocated after from and up to now.
type pidWindow struct {
	from, now, max int
}

// newPidWindow is the window of a command typed when the last pid was
// from and that ran for ran; false when it cannot be trusted.
func newPidWindow(from int, ran time.Duration) (pidWindow, bool) {
	m := pidMax()
	if from < 0 || m == 0 || ran < 0 || ran > min(maxWindowSpan, time.Duration(m)*forkAtFastest) {
		return pidWindow{}, false
	}
	now := lastPid()
	if now < 0 || now >= m || from >= m {
		return pidWindow{}, false
	}
	return pidWindow{from: from, now: now, max: m}, true
}

// has tells whether pid was allocated in the window.
func (w pidWindow) has(pid int) bool {
	if w.now >= w.from {
		return pid > w.from && pid <= w.now
	}
	return pid > w.from || (pid > 0 && pid <= w.now)
}

// size is how many pids the window holds.
func (w pidWindow) size() int {
	if w.now >= w.from {
		return w.now - w.from
	}
	return w.max - 1 - w.from + w.now
}

// pids lists the window's pids, in allocation order.
func (w pidWindow) pids() []int {
	out := make([]int, 0, w.size())
	if w.now >= w.from {
		for p := w.from + 1; p <= w.now; p++ {
			out = append(out, p)
		}
		return out
	}
	for p := w.from + 1; p < w.max; p++ {
		out = append(out, p)
	}
	for p := 1; p <= w.now; p++ {
		out = append(out, p)
	}
	return out
}

// isProcess tells whether pid is a process (a thread group's leader), not
// another thread of one: /proc/TID answers for threads too, though /proc
// does not list them.
func isProcess(pid int) bool {
	b := readBounded("/proc/"+strconv.Itoa(pid)+"/status", 4096)
	_, rest, ok := bytes.Cut(b, []byte("\nTgid:"))
	if !ok {
		return false
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	tgid, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	return err == nil && tgid == pid
}
