package sandbox

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/wire"
)

// SystemPaths are host directories no sandbox gets as its workspace, nor
// anything inside them, nor any directory above them (which would hold
// them): the host's processes, devices, configuration, programs and
// engine state. root's home directory is added at run time.
var SystemPaths = []string{
	"/proc", "/sys", "/dev", "/etc", "/boot", "/root", "/run", "/var/run",
	"/var/lib/docker", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
}

// WorkspacePolicy says which host directories may be a sandbox's
// workspace (bind-mounted read-write for the docker provider, the working
// directory of the local one). The zero value refuses SystemPaths only.
type WorkspacePolicy struct {
	// Private are the control plane's own directories (its state dir with
	// the registry and the tokens): never a workspace, nor inside or above
	// one.
	Private []string
	// Roots, when set, are the directories (--workspace-root) host
	// workspaces must be inside of. A root itself is refused: it holds
	// the workspaces of many sandboxes.
	Roots []string
}

// CheckHostWorkspace checks the host directory dir against p and returns
// the path it resolves to, which is what the sandbox must get (never dir
// again: a symlink in it may be changed after the check). dir must be
// absolute. The path is checked as written (so /etc/../etc is /etc) and
// resolved (so a symlink to /etc is /etc), and the resolved directory is
// opened without following a last symlink to see that it still is that
// path. Errors wrap wire.ErrBadRequest and say what to pass instead.
func (p WorkspacePolicy) CheckHostWorkspace(dir string) (string, error) {
	bad := func(format string, a ...any) (string, error) {
		return "", fmt.Errorf("workspace %q: %s: %w", dir, fmt.Sprintf(format, a...), wire.ErrBadRequest)
	}
	if !filepath.IsAbs(dir) {
		return bad("a host workspace is an absolute path to an existing directory")
	}
	if why := p.denied(filepath.Clean(dir)); why != "" {
		return bad("%s", why)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return bad("%v; create the directory first", err)
	}
	if why := p.denied(real); why != "" {
		return bad("it resolves to %s, which %s", real, strings.TrimPrefix(why, "it "))
	}
	fd, err := unix.Open(real, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return bad("opening %s: %v; pass an existing directory", real, err)
	}
	opened, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	unix.Close(fd)
	if err != nil || opened != real {
		return bad("it resolved to %s but opened as %q: a symlink in it changed while it was checked; pass a path without symlinks", real, opened)
	}
	if len(p.Roots) == 0 {
		return real, nil
	}
	for _, r := range p.Roots {
		root := resolved(r)
		if real == root {
			return bad("it is the workspace root %s itself, which holds the workspaces of every sandbox; pass a directory inside it", r)
		}
		if under(real, root) {
			return real, nil
		}
	}
	return bad("it resolves to %s, outside every --workspace-root (%s); pass a directory inside one of them, or start limbs serve with another --workspace-root", real, strings.Join(p.Roots, ", "))
}

// denied says why path may not be a workspace, or "" when it may.
func (p WorkspacePolicy) denied(path string) string {
	check := func(what, d string) string {
		for _, form := range []string{filepath.Clean(d), resolved(d)} {
			switch {
			case path == form:
				return fmt.Sprintf("it is %s %s", what, d)
			case under(path, form):
				return fmt.Sprintf("it is inside %s %s", what, d)
			case under(form, path):
				return fmt.Sprintf("it contains %s %s", what, d)
			}
		}
		return ""
	}
	for _, d := range p.Private {
		if why := check("the control plane's state directory", d); why != "" {
			return why + " (its registry and tokens); pass a project directory elsewhere"
		}
	}
	sys := SystemPaths
	if u, err := user.Lookup("root"); err == nil && u.HomeDir != "" && u.HomeDir != "/" {
		sys = append(sys[:len(sys):len(sys)], u.HomeDir)
	}
	for _, d := range sys {
		if why := check("the host's system directory", d); why != "" {
			return why + "; pass a project directory (for example under /home or /srv)"
		}
	}
	return ""
}

// resolved is d with symlinks resolved when it exists, else d cleaned.
func resolved(d string) string {
	if r, err := filepath.EvalSymlinks(d); err == nil {
		return r
	}
	return filepath.Clean(d)
}

// under reports whether p is strictly inside dir.
func under(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+"/")
}
