package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafe: something a sandbox can write holds what the host must not
// follow or trust (a symbolic link, a file of another owner). It is
// permanent: retrying does not help, the sandbox has to be removed or the
// path repaired by hand.
var ErrUnsafe = errors.New("unsafe path in a sandbox directory")

// The host works in directories a sandbox can write (the socket directory
// bind-mounted at /run/limbs, a local sandbox's state): every path below a
// trusted directory is resolved one component at a time, relative to the
// directory descriptor before it, never following a symbolic link
// (openat2 with RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH), and what is found
// must be a directory of the host's own user.

// MkdirBeneath creates the directory trusted/rel and every missing one
// between (each with mode), or checks those that exist, and sets the mode
// of each to mode. trusted is the host's own directory (resolved as it
// is); rel is relative. It refuses, with ErrUnsafe, a component that is a
// symbolic link, not a directory, or not owned by this process's user.
func MkdirBeneath(trusted, rel string, mode os.FileMode) error {
	fd, err := openBeneath(trusted, rel, true, mode)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// CheckBeneath checks trusted/rel as MkdirBeneath does, without creating
// anything; a missing directory is an fs.ErrNotExist error.
func CheckBeneath(trusted, rel string) error {
	fd, err := openBeneath(trusted, rel, false, 0)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// RemoveBeneath removes trusted/rel and everything in it without ever
// following a link out of it (a link is removed, not followed). A missing
// path is not an error.
func RemoveBeneath(trusted, rel string) error {
	dir, base := filepath.Split(filepath.Clean(rel))
	if base == "" || base == "." || base == ".." {
		return fmt.Errorf("removing %q beneath %s: not a name", rel, trusted)
	}
	pfd, err := openBeneath(trusted, strings.TrimSuffix(dir, "/"), false, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return removeAt(pfd, base, filepath.Join(trusted, rel), 0)
}

// maxRemoveDepth bounds the recursion of removeAt (a sandbox could nest
// directories deeper than any stack).
const maxRemoveDepth = 256

func removeAt(dirfd int, name, shown string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return &os.PathError{Op: "unlink", Path: shown, Err: err}
	}
	if depth > maxRemoveDepth {
		return fmt.Errorf("removing %s: nested more than %d directories deep; remove it by hand", shown, maxRemoveDepth)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: shown, Err: err}
	}
	f := os.NewFile(uintptr(fd), shown)
	names, _ := f.Readdirnames(-1)
	for _, n := range names {
		if err := removeAt(fd, n, filepath.Join(shown, n), depth+1); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: shown, Err: err}
	}
	return nil
}

// openBeneath opens trusted/rel as a directory, component by component,
// creating missing ones when create is set.
func openBeneath(trusted, rel string, create bool, mode os.FileMode) (int, error) {
	fd, err := unix.Open(trusted, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: trusted, Err: err}
	}
	rel = filepath.Clean(rel)
	if rel == "." || rel == "" {
		return fd, nil
	}
	if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
		unix.Close(fd)
		return -1, fmt.Errorf("%q is not beneath %s", rel, trusted)
	}
	shown := trusted
	for _, name := range strings.Split(rel, "/") {
		shown = filepath.Join(shown, name)
		next, err := openDirAt(fd, name, shown, create, mode)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

func openDirAt(dirfd int, name, shown string, create bool, mode os.FileMode) (int, error) {
	how := &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(dirfd, name, how)
	if errors.Is(err, unix.ENOENT) && create {
		if err := unix.Mkdirat(dirfd, name, uint32(mode.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, &os.PathError{Op: "mkdir", Path: shown, Err: err}
		}
		fd, err = unix.Openat2(dirfd, name, how)
	}
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.6: O_NOFOLLOW refuses a link in the last (here
		// the only) component just as well.
		fd, err = unix.Openat(dirfd, name, int(how.Flags), 0)
	}
	if err != nil {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFLNK:
				target := make([]byte, 256)
				n, _ := unix.Readlinkat(dirfd, name, target)
				return -1, fmt.Errorf("%s is a symbolic link (to %q), which the host never follows: something in the sandbox replaced the directory; remove the sandbox (or the link, by hand) and create it again: %w", shown, target[:max(n, 0)], ErrUnsafe)
			case unix.S_IFDIR:
			default:
				return -1, fmt.Errorf("%s is not a directory (mode %#o): something in the sandbox replaced it; remove the sandbox and create it again: %w", shown, st.Mode, ErrUnsafe)
			}
		}
		return -1, &os.PathError{Op: "open", Path: shown, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "stat", Path: shown, Err: err}
	}
	if int(st.Uid) != os.Geteuid() {
		unix.Close(fd)
		return -1, fmt.Errorf("%s is owned by uid %d, not by the control plane (uid %d): something in the sandbox made it; remove the sandbox and create it again: %w", shown, st.Uid, os.Geteuid(), ErrUnsafe)
	}
	if create && os.FileMode(st.Mode).Perm() != mode.Perm() {
		if err := unix.Fchmod(fd, uint32(mode.Perm())); err != nil {
			unix.Close(fd)
			return -1, &os.PathError{Op: "chmod", Path: shown, Err: err}
		}
	}
	return fd, nil
}
