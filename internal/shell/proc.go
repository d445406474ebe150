package shell

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// proc is one incarnation of a session's shell.
type proc struct {
	cmd  *exec.Cmd
	ptmx *os.File
	pid  int
	tty  uint64 // device number of the terminal, to recognise it in /proc
	// The terminal's inode: device of its devpts instance, and number.
	ttyDev, ttyIno uint64
	bash           bool
	// done is closed once the read loop has drained the terminal and the
	// process has been waited for; status is valid then.
	done   chan struct{}
	status int
	ready  chan struct{} // closed at the first prompt marker
	rc     string        // rc file to remove once read
	image  string        // imageOf the shell at its first prompt (s.mu)
	ends   *endChan      // bash: the channel that proves its end markers
	reaper               // see kill.go

	recoverState // see recover.go

	// started is the shell's start time (clock ticks after boot), read at
	// spawn before p is shared, 0 when its stat could not be read
	// (newProcGroupAt then reads it).
	started uint64
}

// findShell picks the shell: the requested one, else bash, else sh.
func findShell(want string) (string, error) {
	if want != "" {
		p, err := exec.LookPath(want)
		if err != nil {
			return "", fmt.Errorf("shell %q not found: %v; pass an installed shell such as /bin/bash or /bin/sh", want, err)
		}
		return p, nil
	}
	for _, c := range []string{"bash", "sh"} {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	for _, c := range []string{"/bin/bash", "/usr/bin/bash", "/bin/sh"} {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return "", errors.New("no shell found (neither bash nor sh on PATH): the image needs /bin/sh")
}

func isBash(path string) bool {
	if strings.HasSuffix(filepath.Base(path), "bash") {
		return true
	}
	// /bin/sh may be bash itself; then it runs in POSIX mode, which we
	// do not want: treat it as sh.
	return false
}

// spawn starts shellPath on a new terminal of the given size, as agent
// when it is set (the terminal is then the agent's too, as login makes it);
// endFile, when not nil, is the shell's descriptor 3 (its end of the
// end-of-command channel).
func spawn(shellPath string, env []string, dir string, cols, rows int, shRCPath string, agent *Identity, endFile *os.File) (*proc, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("opening a pseudo-terminal: %w (is /dev/pts mounted?)", err)
	}
	defer tty.Close()
	if ptmx, err = pollable(ptmx); err != nil {
		return nil, err
	}
	_ = unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	var st unix.Stat_t
	if err := unix.Fstat(int(tty.Fd()), &st); err != nil {
		ptmx.Close()
		return nil, err
	}
	if err := agent.giveFD(int(tty.Fd())); err != nil {
		ptmx.Close()
		return nil, fmt.Errorf("giving the terminal to uid %d: %w", agent.UID, err)
	}
	p := &proc{ptmx: ptmx, tty: st.Rdev, ttyDev: uint64(st.Dev), ttyIno: st.Ino, bash: isBash(shellPath), done: make(chan struct{}), ready: make(chan struct{})}
	var args []string
	if p.bash {
		args = []string{"--norc", "--noprofile", "-i"}
	} else {
		args = []string{"-i"}
		env = append(env, "ENV="+shRCPath)
	}
	c := exec.Command(shellPath, args...)
	c.Env = env
	c.Dir = dir
	c.Stdin, c.Stdout, c.Stderr = tty, tty, tty
	if endFile != nil {
		c.ExtraFiles = []*os.File{endFile}
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: agent.Credential()}
	if err := c.Start(); err != nil {
		ptmx.Close()
		return nil, fmt.Errorf("starting %s: %w", shellPath, err)
	}
	p.cmd = c
	p.pid = c.Process.Pid
	// Not yet waited for, so not reaped: the pid is the shell's, and exec
	// does not change a start time.
	if st, ok := readStat(p.pid); ok {
		p.started = st.start
	}
	return p, nil
}

// pollable returns the terminal master as a non-blocking file served by
// Go's network poller. pty.Open leaves it in blocking mode (its ioctls go
// through Fd()), and a blocking read holds an OS thread: every wake-up of
// the read loop, and of a caller waiting for a command, would then cross
// threads, which costs a millisecond on an idle virtual machine.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating the pseudo-terminal: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pseudo-terminal non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// foreground returns the terminal's foreground process group.
func (p *proc) foreground() int {
	pg := 0
	_ = p.control(func(fd int) {
		if v, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil {
			pg = v
		}
	})
	return pg
}

// control runs f on the terminal's descriptor unless it was closed: the
// descriptor number of a closed file may already name another file.
func (p *proc) control(f func(fd int)) error {
	rc, err := p.ptmx.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { f(int(fd)) })
}

// setSize sets the terminal size; the kernel sends SIGWINCH to the
// foreground job.
func (p *proc) setSize(cols, rows int) {
	_ = p.control(func(fd int) {
		_ = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	})
}

// unread is how many bytes the terminal holds that nobody has read yet
// (at least 1 when it holds any). What a process writes to the terminal
// reaches the master's line discipline through a kernel worker: right
// after the write, and for as long as the worker waits for a CPU on a busy
// host, TIOCINQ says 0 while the output is on its way. A poll of the
// master waits for that worker (n_tty_poll flushes the terminal's
// buffer), so output a shell wrote before it went to sleep is counted.
func (p *proc) unread() int {
	n := 0
	_ = p.control(func(fd int) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if k, err := unix.Poll(fds, 0); err == nil && k > 0 && fds[0].Revents&unix.POLLIN != 0 {
			n = 1
		}
		if v, err := unix.IoctlGetInt(fd, unix.TIOCINQ); err == nil && v > n {
			n = v
		}
	})
	return n
}

// signalForeground sends sig to the foreground process group, or to the
// shell itself when the shell is in the foreground (a builtin such as
// read, or a shell loop).
func (p *proc) signalForeground(sig syscall.Signal) {
	pg := p.foreground()
	if pg <= 0 {
		return
	}
	if pg == p.pid {
		if sig == syscall.SIGTERM {
			// An interactive bash ignores SIGTERM; SIGINT is what stops
			// the builtin it runs.
			sig = syscall.SIGINT
		}
		_ = syscall.Kill(p.pid, sig)
		return
	}
	_ = syscall.Kill(-pg, sig)
}

// procStat is the part of /proc/PID/stat we use.
type procStat struct {
	pid, ppid, pgrp, session int
	state                    byte
	tty                      uint64 // controlling terminal (tty_nr), 0 for none
	start                    uint64 // start time in clock ticks: tells a reused pid apart
}

func readStat(pid int) (procStat, bool) {
	var buf [512]byte
	b, err := readProc("/proc/"+strconv.Itoa(pid)+"/stat", buf[:0], 4096)
	if err != nil {
		return procStat{}, false
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return procStat{}, false
	}
	st := procStat{pid: pid, state: f[0][0]}
	st.ppid, _ = strconv.Atoi(f[1])
	st.pgrp, _ = strconv.Atoi(f[2])
	st.session, _ = strconv.Atoi(f[3])
	tty, _ := strconv.ParseInt(f[4], 10, 64)
	st.tty = uint64(uint32(tty))
	st.start, _ = strconv.ParseUint(f[19], 10, 64)
	return st, true
}

// readProc reads at most max bytes of a /proc file into buf's storage
// (grown as needed) with bare system calls: os.ReadFile costs a
// finalizer and a registration with the network poller a file, and the
// end of every command reads a few of these (limbsd's and the shell's
// stat, the pids allocated since the command was typed).
func readProc(path string, buf []byte, max int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for len(buf) < max {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, min(max, cap(buf)+512)-len(buf))...)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):min(cap(buf), max)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	return buf, nil
}

func allPids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

func groupMembers(pg int) []int {
	var out []int
	for _, pid := range allPids() {
		if st, ok := readStat(pid); ok && st.pgrp == pg {
			out = append(out, pid)
		}
	}
	return out
}

// cwdOf reads a process's working directory.
func cwdOf(pid int) string {
	s, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	return s
}
