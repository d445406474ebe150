package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrImpostor: the socket of a sandbox's daemon is answered by another
// process (a link to another socket, a listener of the agent's). The
// caller never sends it a request, let alone the sandbox's token.
var ErrImpostor = errors.New("not the sandbox's daemon")

// ErrNotRunning: a provider's Dial found the sandbox stopped (its daemon
// exited, its container is gone). Waiting for the daemon to answer is
// pointless: the error says why it stopped.
var ErrNotRunning = errors.New("the sandbox is not running")

// Peer is the process at the other end of a Unix socket connection, as
// the kernel reports it (SO_PEERCRED, taken when it called listen).
type Peer struct {
	Pid, UID, GID int
}

// PeerCheck says whether peer is the daemon of sandbox id (nil) or not.
type PeerCheck func(ctx context.Context, peer Peer) error

// DialDaemon connects to the daemon socket at sock, which sits in a
// directory the sandbox may write. A path that is not a socket (a link,
// a file) is refused, and so is a peer that check refuses: a connect
// follows a link that replaces the socket after the check, the peer's
// credentials cannot be replaced. check may be nil (no provider that can
// tell its daemon): only the Lstat is done then.
func DialDaemon(ctx context.Context, sock string, check PeerCheck) (net.Conn, error) {
	fi, err := os.Lstat(sock)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("%s is a %s, not a socket: something in the sandbox replaced limbsd's socket; restart or remove the sandbox: %w", sock, kindOf(fi.Mode()), ErrImpostor)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil || check == nil {
		return c, err
	}
	peer, err := PeerOf(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := check(ctx, peer); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s is answered by pid %d (uid %d), not the sandbox's daemon (%v); no request was sent to it; restart or remove the sandbox: %w", sock, peer.Pid, peer.UID, err, ErrImpostor)
	}
	return c, nil
}

func kindOf(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "symbolic link"
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}

// PeerOf returns the credentials of c's peer.
func PeerOf(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, fmt.Errorf("not a Unix socket connection: %T", c)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if gerr != nil {
		return Peer{}, fmt.Errorf("SO_PEERCRED: %w", gerr)
	}
	return Peer{Pid: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}, nil
}

// ProcStat is what the host reads of a process to tell who it is.
type ProcStat struct {
	Pid, PPid, Pgrp int
	// State is the one-letter state: R, S, D, Z (zombie), X (dead), ...
	State string
	Start uint64 // start time in clock ticks after boot
}

// ReadProcStat reads /proc/PID/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, err
	}
	// The name may hold spaces and parentheses: fields start after the
	// last ')'. Then: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// threads itrealvalue starttime.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	st := ProcStat{Pid: pid, State: f[0]}
	st.PPid, _ = strconv.Atoi(f[1])
	st.Pgrp, _ = strconv.Atoi(f[2])
	st.Start, _ = strconv.ParseUint(f[19], 10, 64)
	return st, nil
}

// FirstChild returns the oldest child of parent (by start time, then
// pid): a daemon started by an init before anything else is its first
// child for as long as it lives, while an orphan the init adopted later
// is younger.
func FirstChild(parent int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(parent) + "/task/" + strconv.Itoa(parent) + "/children")
	if err != nil {
		return 0, err
	}
	best, bestStart := 0, uint64(0)
	for _, s := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(s)
		if err != nil {
			continue
		}
		st, err := ReadProcStat(pid)
		if err != nil || st.PPid != parent {
			continue
		}
		if best == 0 || st.Start < bestStart || (st.Start == bestStart && pid < best) {
			best, bestStart = pid, st.Start
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("process %d has no children", parent)
	}
	return best, nil
}

// ProcStats reads the stat of every process in /proc; one that exits
// while it reads is left out.
func ProcStats() ([]ProcStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []ProcStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if st, err := ReadProcStat(pid); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}
