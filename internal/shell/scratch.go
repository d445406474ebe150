package shell

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The scratch files of a session (the command file, the saved
// environment) are written and read on every command. They live on a
// memory filesystem and are handled with bare system calls: an *os.File
// costs a finalizer and a failed attempt to register with the network
// poller each time.

// readScratch reads path into buf's storage, growing it as needed. The
// shell writes these files: a link or anything but a regular file is
// refused, and no more than maxAgentFile bytes are read.
func readScratch(path string, buf []byte) ([]byte, error) {
	fd, err := openAgentFile(path)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) > maxAgentFile {
			return nil, &os.PathError{Op: "read", Path: path, Err: errors.New("the file grew past its bound while read")}
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, max(4096, cap(buf)))...)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// scratchFile is a scratch file rewritten in place through a descriptor
// kept open: opening a tmpfs file with O_TRUNC frees its page and the
// write allocates a new one, tens of microseconds on every command.
type scratchFile struct {
	path  string
	fd    int       // -1 when not open
	owner *Identity // the shell's user, who must read the file; nil: the daemon's
}

func newScratchFile(path string, owner *Identity) *scratchFile {
	return &scratchFile{path: path, fd: -1, owner: owner}
}

// write makes data the file's contents. A file that something inside the
// sandbox deleted is created again.
func (f *scratchFile) write(data []byte) error {
	if f.fd >= 0 {
		var st unix.Stat_t
		if err := unix.Fstat(f.fd, &st); err != nil || st.Nlink == 0 {
			f.close()
		}
	}
	if f.fd < 0 {
		// The directory is the shell's: never write through its link.
		flags := unix.O_WRONLY | unix.O_CREAT | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK
		fd, err := unix.Open(f.path, flags, 0o600)
		if errors.Is(err, unix.ENOENT) {
			if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
				return err
			}
			if err := f.owner.give(filepath.Dir(f.path)); err != nil {
				return err
			}
			fd, err = unix.Open(f.path, flags, 0o600)
		}
		if err != nil {
			return &os.PathError{Op: "open", Path: f.path, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return &os.PathError{Op: "open", Path: f.path, Err: errNotRegular}
		}
		if err := f.owner.giveFD(fd); err != nil {
			unix.Close(fd)
			return &os.PathError{Op: "chown", Path: f.path, Err: err}
		}
		f.fd = fd
	}
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(f.fd, data[off:], int64(off))
		if err != nil {
			return &os.PathError{Op: "write", Path: f.path, Err: err}
		}
		off += n
	}
	if err := unix.Ftruncate(f.fd, int64(len(data))); err != nil {
		return &os.PathError{Op: "truncate", Path: f.path, Err: err}
	}
	return nil
}

func (f *scratchFile) close() {
	if f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
	}
}
