package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// MountWorkspace puts a copy-on-write workspace over the /workspace of
// the running sandbox id: an overlay whose lower layer is lower (a
// checkpoint's tree) and whose upper and work layers are in
// overlayDir(id), the same layers a fork created with Spec.WorkspaceLower
// gets. It is for a sandbox that exists already (a warm-pool one a fork
// claims), whose mounts Docker fixed when it was created: the overlay is
// made on the host (fsopen, fsconfig and fsmount, so that its layers'
// paths are the host's) and moved into the container's mount namespace
// over /workspace, where only the container sees it; it goes when the
// container stops, and the next start must mount it again. Mounting an
// overlay that is there already does nothing.
func (p *Provider) MountWorkspace(ctx context.Context, id, lower string) (bool, error) {
	if !filepath.IsAbs(lower) || filepath.Clean(lower) != lower {
		return false, fmt.Errorf("sandbox %q: the lower layer %q must be a clean absolute path: %w", id, lower, wire.ErrBadRequest)
	}
	unlock := p.mounts.lock(id)
	defer unlock()
	c, err := p.container(ctx, id)
	if err != nil {
		return false, err
	}
	if c.State == nil || !c.State.Running || c.State.Pid <= 0 {
		return false, fmt.Errorf("sandbox %q: its container is not running; start it first: %w", id, wire.ErrConflict)
	}
	// What /workspace must be in the container before the overlay goes
	// over it: the sandbox's own volume (checked by device and inode in
	// the namespace entered, whatever process the pid turns out to name).
	vol, err := p.cli.VolumeInspect(ctx, volumeName(id), client.VolumeInspectOptions{})
	if err != nil {
		return false, engineErr(fmt.Sprintf("sandbox %q: its workspace volume", id), err)
	}
	if l := vol.Volume.Labels; l[sandbox.LabelManaged] != "true" || l[sandbox.LabelSandbox] != id || vol.Volume.Mountpoint == "" {
		return false, fmt.Errorf("sandbox %q: volume %s is not this sandbox's; remove the sandbox: %w", id, volumeName(id), wire.ErrConflict)
	}
	var want unix.Stat_t
	if err := unix.Lstat(vol.Volume.Mountpoint, &want); err != nil || want.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, fmt.Errorf("sandbox %q: its workspace volume's directory %s: %v; remove the sandbox", id, vol.Volume.Mountpoint, err)
	}
	pid := c.State.Pid
	ov := p.opts.overlayDir(id)
	upper, work := filepath.Join(ov, "upper"), filepath.Join(ov, "work")
	if _, err := os.Lstat(ov); errors.Is(err, os.ErrNotExist) {
		if err := makeOverlayDirs(ov, lower); err != nil {
			return false, fmt.Errorf("sandbox %q: preparing its copy-on-write workspace: %w", id, err)
		}
	} else if err != nil {
		return false, err
	}
	for _, d := range []string{ov, upper, work} {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return false, fmt.Errorf("sandbox %q: %s is not the directory its copy-on-write workspace needs (%v); remove the sandbox", id, d, err)
		}
	}
	// The process is pinned (a pidfd) and then checked to be the
	// container's still: a pid the container left could name another
	// process by now, even one of the host.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false, fmt.Errorf("sandbox %q: its container's process %d: %w; start the sandbox again", id, pid, err)
	}
	defer unix.Close(pidfd)
	if again, err := p.container(ctx, id); err != nil {
		return false, err
	} else if again.State == nil || !again.State.Running || again.State.Pid != pid {
		return false, fmt.Errorf("sandbox %q: its container stopped or restarted while its workspace was being mounted; start it again: %w", id, wire.ErrConflict)
	}
	if mounted, err := overlayAt(pid, "/workspace", upper); err != nil {
		return false, fmt.Errorf("sandbox %q: %w", id, err)
	} else if mounted {
		return false, nil
	}
	errc := make(chan error, 1)
	go func() {
		// The thread enters the container's mount namespace and is never
		// given back: the runtime ends it with this goroutine.
		runtime.LockOSThread()
		errc <- mountInto(pidfd, lower, upper, work, &want)
	}()
	if err := <-errc; err != nil {
		return false, fmt.Errorf("sandbox %q: mounting its copy-on-write workspace: %w", id, err)
	}
	p.log.Info("copy-on-write workspace mounted", "sandbox", id, "lower", lower)
	return true, nil
}

// mountLocks serializes the mounts of one sandbox.
type mountLocks struct {
	mu sync.Mutex
	by map[string]*sync.Mutex
}

func (m *mountLocks) lock(id string) func() {
	m.mu.Lock()
	if m.by == nil {
		m.by = map[string]*sync.Mutex{}
	}
	l := m.by[id]
	if l == nil {
		l = &sync.Mutex{}
		m.by[id] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// mountInto makes the overlay and moves it over /workspace in the mount
// namespace of the process pidfd; it must run on a locked thread it may
// spoil.
func mountInto(pidfd int, lower, upper, work string, want *unix.Stat_t) error {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w (copy-on-write workspaces need Linux 5.2 and root)", err)
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"lowerdir", lower}, {"upperdir", upper}, {"workdir", work}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return fmt.Errorf("overlay %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("making the overlay: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID)
	if err != nil {
		return fmt.Errorf("fsmount: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Setns(pidfd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("entering the container's mount namespace: %w", err)
	}
	// /workspace is a mount point (the sandbox's volume): a process in the
	// sandbox can neither rename nor replace it, and O_NOFOLLOW refuses a
	// link there all the same.
	tfd, err := unix.Open("/workspace", unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening /workspace in the container: %w", err)
	}
	defer unix.Close(tfd)
	var stx unix.Statx_t
	if err := unix.Statx(tfd, "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS, &stx); err != nil {
		return err
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return fmt.Errorf("/workspace in the container is not a mount point")
	}
	if unix.Mkdev(stx.Dev_major, stx.Dev_minor) != uint64(want.Dev) || stx.Ino != want.Ino {
		return fmt.Errorf("/workspace where the container's process is is not the sandbox's volume (an overlay there already, or another process); start the sandbox again")
	}
	return unix.MoveMount(mfd, "", tfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// overlayAt reports whether the top mount at target in pid's mount
// namespace is an overlay with upper as its upper layer (the kernel's
// mountinfo: the sandbox cannot mount, so it cannot forge a line).
func overlayAt(pid int, target, upper string) (bool, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return false, fmt.Errorf("reading the container's mounts: %w", err)
	}
	defer f.Close()
	top := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[4] != target {
			continue
		}
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		// Later lines are mounted over earlier ones: the last one at target
		// is what the container sees.
		top = sep > 0 && sep+3 < len(fields) && fields[sep+1] == "overlay" &&
			strings.Contains(","+fields[sep+3]+",", ",upperdir="+upper+",")
	}
	return top, sc.Err()
}
