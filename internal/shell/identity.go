package shell

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Identity is the user every shell of a Manager runs as when it is not the
// daemon's own: a daemon running as root (with only the capabilities it
// needs to manage the agent's processes) starts each shell as this user,
// so that no command holds a capability, can signal or read the daemon, or
// write its state.
//
// What the shell itself must write (its environment save, its history)
// goes to directories this user owns, inside directories only the daemon
// may change; everything read back from them is hostile input: opened
// without following a link, checked to be a regular file, bounded in size.
type Identity struct {
	UID, GID int
	Groups   []int
	// Home is the user's home directory (HOME of every shell), "/" when
	// the user has none.
	Home string
}

// Credential is what spawn hands to the kernel; nil runs the shell as the
// daemon's own user.
func (id *Identity) Credential() *syscall.Credential {
	if id == nil {
		return nil
	}
	groups := make([]uint32, len(id.Groups))
	for i, g := range id.Groups {
		groups[i] = uint32(g)
	}
	return &syscall.Credential{Uid: uint32(id.UID), Gid: uint32(id.GID), Groups: groups}
}

// give makes path (a directory or file the daemon just made in a directory
// only it may change) the agent's, without following a link.
func (id *Identity) give(path string) error {
	if id == nil {
		return nil
	}
	if err := os.Lchown(path, id.UID, id.GID); err != nil {
		return fmt.Errorf("giving %s to uid %d: %w", path, id.UID, err)
	}
	return nil
}

// giveFD is give for an open file.
func (id *Identity) giveFD(fd int) error {
	if id == nil {
		return nil
	}
	return unix.Fchown(fd, id.UID, id.GID)
}

// dirMode is the mode of a directory of the daemon's that the agent must
// be able to pass through (to reach its own directory inside) but never
// list or write.
func (id *Identity) dirMode() os.FileMode {
	if id == nil {
		return 0o700
	}
	return 0o711
}

// logMode is the mode of a command's log file: log_path is the agent's
// to read through the file API (docs/api.md), which runs as the agent, so
// with an Agent the logs are readable by others (the directories above
// them let only the agent and limbsd through) and written by limbsd only.
func (id *Identity) logMode(own os.FileMode) os.FileMode {
	if id == nil {
		return own
	}
	return own | 0o044
}

// maxAgentFile bounds what the daemon reads back from a file the agent can
// write (an environment save).
const maxAgentFile = 16 << 20

// errNotRegular: something other than a regular file sits where the daemon
// expects one the shell wrote.
var errNotRegular = errors.New("not a regular file")

// openAgentFile opens a file in a directory the agent can write, never
// following a link in its last component and refusing anything but a
// regular file of at most maxAgentFile bytes.
func openAgentFile(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, &os.PathError{Op: "open", Path: path, Err: errNotRegular}
	}
	if st.Size > maxAgentFile {
		unix.Close(fd)
		return -1, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%d bytes, more than the %d a shell's save may have", st.Size, maxAgentFile)}
	}
	return fd, nil
}
