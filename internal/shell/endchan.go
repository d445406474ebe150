package shell

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A bash shell's end and exit markers are proven by the kernel, not by the
// bytes on the terminal: any process of a command can read the marker
// token from the shell's memory (/proc/PID/mem, same uid) and print a
// marker, but none can send a message that the kernel stamps with the
// shell's pid.
//
// Each bash gets one end of a SOCK_SEQPACKET socket pair as descriptor
// endFD. Its prompt function first sends "E SEQ STATUS CWD" there (the
// exit trap "X SEQ CWD"), from the shell process itself (printf is a
// builtin), and only then prints the terminal marker with the same SEQ.
// limbsd's end has SO_PASSCRED, so every message arrives with the
// sender's real pid (SCM_CREDENTIALS: a process can name another pid only
// with CAP_SYS_ADMIN over its pid namespace, and shells get no
// capabilities). A terminal marker counts only when a message from the
// shell's pid with the same kind and SEQ has arrived; status and cwd come
// from that message, the marker only says where in the output it ended.
// Messages from any other pid (a child inherits the descriptor and may
// write to it) are dropped. A marker without its message is output.

// endFD is the shell's descriptor of the channel: high, so that scripts do
// not close or reuse it (they use 3-9, flock idioms 200; bash keeps 255
// and allocates {var} descriptors upwards from 10). The shell gets it as
// descriptor 3 and its rc moves it here.
const endFD = 251

// maxEndMsg bounds a message: the rc sends no cwd longer than 1000
// characters (bash's printf writes through a 4 KiB buffer).
const maxEndMsg = 4096

// endMsg is a verified message from the shell.
type endMsg struct {
	kind   byte // evEnd or evExit
	seq    string
	status int
	cwd    string
}

// endChan is limbsd's end of one shell's channel.
//
// It is not in the network poller: a goroutine woken by each message
// would cost every command a thread wake-up (a tenth of a millisecond on
// a busy virtual machine). The read loop receives when it parses a
// marker; the shell sent its message before it printed the marker, so
// the message is already queued. A child that floods the channel with
// junk fills the socket's buffer and would block the shell's own send:
// a backstop timer drains it, every drainMin while it finds junk, backing
// off to drainMax while it finds none.
type endChan struct {
	pid int    // the shell: the only sender that counts
	ino uint64 // inode of the shell's end, to tell whether it still has it
	log *slog.Logger

	mu      sync.Mutex
	fd      int // -1 once closed
	buf     []byte
	oob     []byte
	last    endMsg // the newest verified message not yet matched
	have    bool
	lost    bool  // every writer closed or shut down the shell's end
	dropped int64 // messages from other pids, or malformed
	warned  bool
	timer   *time.Timer
	every   time.Duration
}

// The backstop drain's period bounds how long a flood can hold up the
// shell's send.
const (
	drainMin = 20 * time.Millisecond
	drainMax = time.Second
)

// maxDrain bounds one drain. The socket's buffer holds a few hundred
// messages (the sender's SO_SNDBUF, at most net.core.wmem_max), and the
// shell's message is behind them in order.
const maxDrain = 1 << 16

// newEndChan makes the socket pair; shell is the end the shell inherits,
// to close once it is started.
func newEndChan() (c *endChan, shell *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("making the end-of-command channel: %w (is the file descriptor limit reached?)", err)
	}
	var st unix.Stat_t
	err = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	if err == nil {
		err = unix.Fstat(fds[1], &st)
	}
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("setting up the end-of-command channel: %w", err)
	}
	c = &endChan{
		fd:  fds[0],
		ino: st.Ino,
		buf: make([]byte, maxEndMsg+1),
		oob: make([]byte, unix.CmsgSpace(unix.SizeofUcred)*4),
	}
	return c, os.NewFile(uintptr(fds[1]), "end-channel"), nil
}

// start accepts messages from the shell pid only, and starts the backstop
// drain.
func (c *endChan) start(pid int, log *slog.Logger) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pid, c.log = pid, log
	c.every = drainMin
	c.timer = time.AfterFunc(c.every, c.backstop)
}

func (c *endChan) backstop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return
	}
	before := c.dropped
	c.drainLocked(maxDrain, nil)
	if c.lost {
		return
	}
	if c.dropped != before {
		c.every = drainMin
	} else {
		c.every = min(2*c.every, drainMax)
	}
	c.timer.Reset(c.every)
}

// drainLocked receives up to limit queued messages, or until one of the
// shell's matches want.
func (c *endChan) drainLocked(limit int, want func(endMsg) bool) {
	for i := 0; i < limit && c.fd >= 0 && !c.lost; i++ {
		n, oobn, flags, _, err := unix.Recvmsg(c.fd, c.buf, c.oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		switch err {
		case nil:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return
		default:
			c.lost = true
			return
		}
		if n == 0 && oobn == 0 {
			// End of file: every copy of the shell's end is closed, or
			// one was shut down. (An empty message still has credentials.)
			c.lost = true
			return
		}
		// Any process holding the channel can pass descriptors with a
		// message; the kernel has installed them in the daemon already.
		closeRights(c.oob[:oobn])
		pid := credPid(c.oob[:oobn])
		if pid != c.pid || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			c.drop(pid, "not from the shell")
			continue
		}
		m, ok := parseEndMsg(c.buf[:n])
		if !ok {
			c.drop(pid, "malformed")
			continue
		}
		c.last, c.have = m, true
		if want != nil && want(m) {
			return
		}
	}
}

func (c *endChan) drop(pid int, why string) {
	c.dropped++
	// A flood logs its first message and then one in 1024.
	if c.log != nil && (c.dropped == 1 || c.dropped%1024 == 0) {
		c.log.Debug("dropped a message on the end-of-command channel", "why", why, "sender_pid", pid, "shell_pid", c.pid, "dropped", c.dropped)
	}
}

// credPid is the sender's pid from the SCM_CREDENTIALS control message
// the kernel attached, or -1.
func credPid(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1
	}
	for i := range msgs {
		if cred, err := unix.ParseUnixCredentials(&msgs[i]); err == nil {
			return int(cred.Pid)
		}
	}
	return -1
}

// closeRights closes the descriptors an SCM_RIGHTS control message
// installed.
func closeRights(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for i := range msgs {
		if fds, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}
}

// parseEndMsg reads "E SEQ STATUS CWD" or "X SEQ CWD" (CWD may be empty
// and may hold spaces).
func parseEndMsg(b []byte) (endMsg, bool) {
	kind, rest, ok := bytes.Cut(b, []byte{' '})
	if !ok || len(kind) != 1 {
		return endMsg{}, false
	}
	seq, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok || !isDigits(seq) {
		return endMsg{}, false
	}
	m := endMsg{seq: string(seq)}
	switch kind[0] {
	case 'E':
		st, cwd, ok := bytes.Cut(rest, []byte{' '})
		if !ok {
			return endMsg{}, false
		}
		n, err := strconv.Atoi(string(st))
		if err != nil {
			n = -1
		}
		m.kind, m.status, m.cwd = evEnd, n, string(cwd)
	case 'X':
		m.kind, m.cwd = evExit, string(rest)
	default:
		return endMsg{}, false
	}
	return m, true
}

func isDigits(b []byte) bool {
	if len(b) == 0 || len(b) > 19 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// take matches a terminal marker of the given kind and SEQ with the
// shell's message: it reports the verified event, or false when the shell
// sent no such message (the marker is then output). It runs on the read
// loop, without waiting: one system call when nothing else is queued.
func (c *endChan) take(kind byte, seq []byte) (event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	match := func(m endMsg) bool { return m.kind == kind && m.seq == string(seq) }
	if !c.have || !match(c.last) {
		c.drainLocked(maxDrain, match)
	}
	if !c.have || !match(c.last) {
		c.noteUnverifiedLocked()
		return event{}, false
	}
	c.have = false
	return event{kind: kind, status: c.last.status, cwd: c.last.cwd}, true
}

// noteUnverifiedLocked warns, once per shell, when a marker came without
// its message because the shell no longer holds its end of the channel
// (`exec 251>&-`): its commands then end by process state (recover.go).
func (c *endChan) noteUnverifiedLocked() {
	if c.warned || c.log == nil {
		return
	}
	if c.lost || !c.shellHolds() {
		c.warned = true
		c.log.Warn("the shell closed its end-of-command channel (descriptor "+strconv.Itoa(endFD)+"); its commands end by process state from now on (end_recovered): restart the session for the fast path", "shell_pid", c.pid)
	}
}

// shellHolds reports whether the shell's endFD is still its end of the
// channel.
func (c *endChan) shellHolds() bool {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(c.pid)+"/fd/"+strconv.Itoa(endFD), &st); err != nil {
		return false
	}
	return st.Ino == c.ino && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

// close releases limbsd's end.
func (c *endChan) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// droppedCount is how many messages the channel dropped.
func (c *endChan) droppedCount() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}
