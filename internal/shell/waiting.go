package shell

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Whether a program waits for the user is read from the kernel, not guessed
// from its output: a process of the terminal's foreground group is asleep
// in a read of the terminal, or in select/poll/epoll with the terminal
// among the descriptors it waits to read.

// waitingForInput reports whether the foreground job is blocked reading
// the terminal.
func (p *proc) waitingForInput() bool {
	pg := p.foreground()
	if pg <= 0 {
		return false
	}
	for _, pid := range groupMembers(pg) {
		if p.readsTerminal(pid) {
			return true
		}
	}
	return false
}

func (p *proc) readsTerminal(pid int) bool { return p.sleepsOnTerminal(pid, false) }

// sleepsOnTerminal reports whether pid sleeps in a read of the session's
// terminal, or waits for it in select, poll or epoll. The shell's own
// select is readline at its prompt: it counts only with prompt set.
func (p *proc) sleepsOnTerminal(pid int, prompt bool) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	st, ok := readStat(pid)
	if !ok || st.state != 'S' {
		return false
	}
	b, err := os.ReadFile(dir + "/syscall")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return false // "running" or unreadable
	}
	nr, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return false
	}
	arg := func(i int) uint64 {
		if i+1 >= len(f) {
			return 0
		}
		v, _ := strconv.ParseUint(strings.TrimPrefix(f[i+1], "0x"), 16, 64)
		return v
	}
	switch sysKind(nr) {
	case sysRead:
		return p.isTerminalFD(dir, int(arg(0)))
	case sysSelect:
		if pid == p.pid && p.bash && !prompt && !p.readlineInCommand(f) {
			// bash itself in pselect is readline at the prompt: the
			// command has ended and its end marker is on its way.
			return false
		}
		return p.selectWaitsOnTerminal(pid, dir, int(arg(0)), arg(1))
	case sysPoll:
		return p.pollWaitsOnTerminal(pid, dir, arg(0), int(arg(1)))
	case sysEpoll:
		return p.epollWaitsOnTerminal(dir, int(arg(0)))
	}
	return false
}

// isTerminalFD reports whether descriptor fd of the process at dir is the
// session's terminal: the same device number on the same devpts instance
// (every container mounts its own, and numbers repeat across them).
func (p *proc) isTerminalFD(dir string, fd int) bool {
	var st unix.Stat_t
	if err := unix.Stat(dir+"/fd/"+strconv.Itoa(fd), &st); err != nil {
		return false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return false
	}
	if st.Rdev == devTTY {
		pid, err := strconv.Atoi(filepath.Base(dir))
		return err == nil && p.controlledBy(pid)
	}
	return st.Rdev == p.tty && (p.ttyDev == 0 || st.Dev == p.ttyDev)
}

// devTTY is /dev/tty's device number (5, 0): whoever opens it gets its
// controlling terminal.
var devTTY = unix.Mkdev(5, 0)

// controlledBy reports whether the session's terminal is pid's
// controlling terminal, what pid's /dev/tty opens: pid is in the shell's
// session (the shell leads it, and its controlling terminal is the
// session's). Password prompts (getpass, ssh-keygen, sudo) read /dev/tty.
func (p *proc) controlledBy(pid int) bool {
	ps, ok := readStat(pid)
	return ok && ps.session == p.pid && ps.tty == p.tty
}

// echoOff reports whether the terminal reads lines without echoing them,
// as password prompts set it (ECHO clear, ICANON set); programs that echo
// themselves (readline, editors) read keys with ICANON clear. The
// master's termios are the terminal's.
func (p *proc) echoOff() bool {
	off := false
	_ = p.control(func(fd int) {
		if t, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
			off = t.Lflag&unix.ECHO == 0 && t.Lflag&unix.ICANON != 0
		}
	})
	return off
}

// rawNoEcho reports whether the terminal reads keys one by one without
// echoing them (ECHO and ICANON clear): an editor, or a password prompt
// that reads key by key (see Session.passwordPrompt).
func (p *proc) rawNoEcho() bool {
	raw := false
	_ = p.control(func(fd int) {
		if t, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
			raw = t.Lflag&unix.ECHO == 0 && t.Lflag&unix.ICANON == 0
		}
	})
	return raw
}

// readMem reads n bytes of another process's memory; the daemon is the
// ancestor of every process it asks about, which is what ptrace access
// needs.
func readMem(pid int, addr uint64, n int) []byte {
	if n <= 0 || n > 1<<16 || addr == 0 {
		return nil
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, int64(addr)); err != nil {
		return nil
	}
	return buf
}

func (p *proc) selectWaitsOnTerminal(pid int, dir string, nfds int, readfds uint64) bool {
	if readfds == 0 || nfds <= 0 || nfds > 1<<15 {
		return false
	}
	set := readMem(pid, readfds, (nfds+7)/8)
	if set == nil {
		return p.fallbackWaits(dir)
	}
	for fd := 0; fd < nfds; fd++ {
		if set[fd/8]&(1<<(fd%8)) != 0 && p.isTerminalFD(dir, fd) {
			return true
		}
	}
	return false
}

func (p *proc) pollWaitsOnTerminal(pid int, dir string, fds uint64, nfds int) bool {
	if nfds <= 0 || nfds > 4096 {
		return false
	}
	raw := readMem(pid, fds, nfds*8)
	if raw == nil {
		return p.fallbackWaits(dir)
	}
	for i := 0; i < nfds; i++ {
		fd := int(int32(binary.NativeEndian.Uint32(raw[i*8:])))
		events := binary.NativeEndian.Uint16(raw[i*8+4:])
		if fd >= 0 && events&unix.POLLIN != 0 && p.isTerminalFD(dir, fd) {
			return true
		}
	}
	return false
}

func (p *proc) epollWaitsOnTerminal(dir string, epfd int) bool {
	b, err := os.ReadFile(dir + "/fdinfo/" + strconv.Itoa(epfd))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		// tfd:        0 events:       19 data: ...
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "tfd:" || f[2] != "events:" {
			continue
		}
		fd, err1 := strconv.Atoi(f[1])
		ev, err2 := strconv.ParseUint(f[3], 16, 32)
		if err1 == nil && err2 == nil && ev&unix.EPOLLIN != 0 && p.isTerminalFD(dir, fd) {
			return true
		}
	}
	return false
}

// fallbackWaits is used when another process's memory cannot be read: a
// process asleep in select or poll with the terminal on stdin and no
// socket open is taken to wait for the user.
func (p *proc) fallbackWaits(dir string) bool {
	if !p.isTerminalFD(dir, 0) {
		return false
	}
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return false
	}
	for _, e := range ents {
		l, _ := os.Readlink(dir + "/fd/" + e.Name())
		if strings.HasPrefix(l, "socket:") {
			return false
		}
	}
	return true
}

type syscallKind int

const (
	sysOther syscallKind = iota
	sysRead
	sysSelect
	sysPoll
	sysEpoll
)
