package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Create creates and starts a sandbox and returns once its container is
// started (the control plane waits for limbsd through Dial). On any failure
// it removes what it created and says why.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	spec = withDefaults(spec)
	if err := p.opts.validate(spec); err != nil {
		return sandbox.Instance{}, err
	}
	log := p.log.With("sandbox", spec.ID)
	// A second Create of the same id must not reach the cleanup below,
	// which would take the first one's volume.
	if _, err := p.cli.ContainerInspect(ctx, containerName(spec.ID), client.ContainerInspectOptions{}); err == nil {
		return sandbox.Instance{}, fmt.Errorf("sandbox %q: container %s already exists; remove the sandbox first or use another id: %w", spec.ID, containerName(spec.ID), wire.ErrConflict)
	}
	dir := p.opts.socketDir(spec.ID)
	if err := prepareSocketDir(dir); err != nil {
		return sandbox.Instance{}, fmt.Errorf("sandbox %q: %w", spec.ID, err)
	}

	var cleanups []func()
	fail := func(err error) (sandbox.Instance, error) {
		// The caller's context may be what failed: clean up regardless.
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		return sandbox.Instance{}, err
	}

	noCopy := false
	if classifyWorkspace(spec.Workspace) == wsNewVolume {
		name := volumeName(spec.ID)
		vc := client.VolumeCreateOptions{
			Name: name,
			Labels: map[string]string{
				sandbox.LabelManaged:  "true",
				sandbox.LabelInstance: spec.Instance,
				sandbox.LabelSandbox:  spec.ID,
			},
		}
		if spec.WorkspaceLower != "" {
			ov := p.opts.overlayDir(spec.ID)
			if err := makeOverlayDirs(ov, spec.WorkspaceLower); err != nil {
				return fail(fmt.Errorf("sandbox %q: preparing its copy-on-write workspace: %w", spec.ID, err))
			}
			cleanups = append(cleanups, func() { _ = os.RemoveAll(ov) })
			vc.Driver = "local"
			vc.DriverOpts = map[string]string{
				"type":   "overlay",
				"device": "overlay",
				"o":      "lowerdir=" + spec.WorkspaceLower + ",upperdir=" + filepath.Join(ov, "upper") + ",workdir=" + filepath.Join(ov, "work"),
			}
			vc.Labels[labelLower] = spec.WorkspaceLower
		}
		vctx, cancel := engineCallContext(ctx)
		vol, err := p.cli.VolumeCreate(vctx, vc)
		cancel()
		if err != nil {
			return fail(engineErr(fmt.Sprintf("sandbox %q: creating workspace volume %s", spec.ID, name), err))
		}
		// The engine hands back an existing volume of that name: only one a
		// failed Create of this sandbox left may be reused.
		if l := vol.Volume.Labels; l[sandbox.LabelManaged] != "true" || l[sandbox.LabelSandbox] != spec.ID {
			return fail(fmt.Errorf("sandbox %q: a volume named %s exists and is not this sandbox's; remove it or use another id: %w", spec.ID, name, wire.ErrConflict))
		}
		cleanups = append(cleanups, func() { p.removeVolume(context.WithoutCancel(ctx), name, spec.ID) })
		if spec.WorkspaceLower != "" {
			noCopy = true // the lower layer's root has the owner
		} else {
			noCopy = giveVolume(vol.Volume.Mountpoint, spec.User)
		}
	}

	opts := p.opts.createOptions(spec, noCopy)
	cctx, cancel := engineCallContext(ctx)
	created, err := p.cli.ContainerCreate(cctx, opts)
	cancel()
	if err != nil {
		err = engineErr(fmt.Sprintf("sandbox %q: creating container", spec.ID), err)
		if errors.Is(err, wire.ErrNotFound) {
			err = fmt.Errorf("sandbox %q: image %s not found (no registry is used): build limbs/base with scripts/build-base-image.sh, or pass an image that exists locally: %w", spec.ID, spec.Image, wire.ErrBadRequest)
		}
		return fail(err)
	}
	cleanups = append(cleanups, func() {
		_, _ = p.cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	})
	for _, w := range created.Warnings {
		log.Warn("docker create", "warning", w)
	}
	if _, err := p.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		if strings.Contains(err.Error(), "unable to find user") {
			return fail(fmt.Errorf("sandbox %q: image %s has no user %q: pass a numeric uid:gid or a user the image has: %w", spec.ID, spec.Image, spec.User, wire.ErrBadRequest))
		}
		return fail(engineErr(fmt.Sprintf("sandbox %q: starting container", spec.ID), err))
	}
	p.dirs.set(spec.ID, dir)
	inst, err := p.Inspect(ctx, spec.ID)
	if err != nil {
		p.dirs.drop(spec.ID)
		return fail(err)
	}
	log.Info("sandbox created", "container", created.ID[:12], "image", spec.Image)
	return inst, nil
}

// engineCallTimeout bounds an engine call that Create makes whatever
// becomes of its caller.
const engineCallTimeout = 2 * time.Minute

// engineCallContext is ctx without its cancellation, bounded by
// engineCallTimeout, for the engine calls that make something: the engine
// goes on with a create whose client hung up, so a create cut short would
// leave a container or volume that no cleanup knows of (a client killed
// in the middle of a create left its container behind). Once the call
// returns, what it made is known and the cleanups can take it.
func engineCallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), engineCallTimeout)
}

// giveVolume hands a fresh volume's root to the sandbox's user by chowning
// its host mountpoint, which works when the engine is local and we may
// (root). It reports whether it did; if not, the volume takes the image's
// /workspace ownership on first mount (agent in limbs/base).
func giveVolume(mountpoint, user string) bool {
	uid, gid, ok := parseUser(user)
	if !ok || mountpoint == "" {
		return false
	}
	return os.Chown(mountpoint, uid, gid) == nil
}

// Start starts a stopped sandbox, as Create does. A running sandbox whose
// limbsd does not answer (its socket file deleted, limbsd hung) is
// restarted, so that Start is the one way back for every failure.
func (p *Provider) Start(ctx context.Context, id string) error {
	c, err := p.container(ctx, id)
	if err != nil {
		return err
	}
	dir := c.Config.Labels[labelSocketDir]
	if dir == "" {
		return fmt.Errorf("sandbox %q: container %s has no %s label; remove it and create the sandbox again: %w", id, c.ID[:12], labelSocketDir, wire.ErrConflict)
	}
	p.dirs.set(id, dir)
	if c.State != nil && c.State.Running {
		if p.healthy(ctx, id) {
			return nil
		}
		p.log.Warn("limbsd does not answer in a running sandbox; restarting it", "sandbox", id)
		t := int(p.opts.StopTimeout.Seconds())
		if _, err := p.cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &t}); err != nil {
			return engineErr(fmt.Sprintf("sandbox %q: stopping the unresponsive container", id), err)
		}
	}
	// The host may have cleaned the directory (a tmpfs /run after a reboot).
	if err := prepareSocketDir(dir); err != nil {
		return fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := checkWorkspaceMount(c); err != nil {
		return fmt.Errorf("sandbox %q: %w", id, err)
	}
	if _, err := p.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return engineErr(fmt.Sprintf("sandbox %q: starting container", id), err)
	}
	return nil
}

// checkWorkspaceMount checks a host workspace again before every start:
// the engine resolves a bind mount's source each time it starts the
// container, and a directory checked at Create may since have become a
// symbolic link (replaced by another sandbox whose workspace holds it, or
// by anyone who can write its parent), which would give this sandbox the
// directory it points to (/etc, /root). The source stored at Create is
// the resolved path, so it must still resolve to itself and pass the
// checks of Create.
func checkWorkspaceMount(c container.InspectResponse) error {
	if c.HostConfig == nil {
		return nil
	}
	for _, m := range c.HostConfig.Mounts {
		if m.Target != Workspace || m.Type != mount.TypeBind {
			continue
		}
		real, err := filepath.EvalSymlinks(m.Source)
		if err == nil && real != m.Source {
			return fmt.Errorf("host workspace %s now resolves to %s: a component became a symbolic link after the sandbox was created; it is not started, so that it cannot get that directory; restore the directory, or remove the sandbox: %w", m.Source, real, sandbox.ErrUnsafe)
		}
		if err := checkHostWorkspace(m.Source); err != nil {
			return fmt.Errorf("host workspace %s: %w", m.Source, err)
		}
	}
	return nil
}

// Stop stops a sandbox: SIGTERM to limbsd through the init, SIGKILL after
// Options.StopTimeout. Stopping a stopped sandbox is not an error.
func (p *Provider) Stop(ctx context.Context, id string) error {
	c, err := p.container(ctx, id)
	if err != nil {
		return err
	}
	t := int(p.opts.StopTimeout.Seconds())
	if _, err := p.cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &t}); err != nil {
		return engineErr(fmt.Sprintf("sandbox %q: stopping container", id), err)
	}
	return nil
}

// Remove removes a sandbox's container (running or not), the workspace
// volume the provider created for it, and its socket directory with
// limbsd's state. A workspace the Spec named (volume or host directory) is
// never removed. Removing a sandbox that is already gone is ErrNotFound.
func (p *Provider) Remove(ctx context.Context, id string) error {
	c, err := p.container(ctx, id)
	found := err == nil
	p.dirs.drop(id)
	switch {
	case err == nil:
		if _, err := p.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !errors.Is(engineErr("", err), wire.ErrNotFound) {
			return engineErr(fmt.Sprintf("sandbox %q: removing container", id), err)
		}
		if dir := c.Config.Labels[labelSocketDir]; dir != "" {
			p.removeSocketDir(id, dir)
		}
	case !errors.Is(err, wire.ErrNotFound):
		return err
	case idRE.MatchString(id) && filepath.IsAbs(p.opts.SocketRoot):
		// A Create that died before its container existed (or a crash of
		// limbs serve then) may have left the directory.
		p.removeSocketDir(id, p.opts.socketDir(id))
	}
	// The volume is looked up by name even without the container, so that a
	// Create that died half-way can be cleaned up.
	if p.removeVolume(ctx, volumeName(id), id) {
		found = true
	}
	// With the container and the volume gone the overlay is unmounted:
	// its layers can go.
	p.removeOverlayDirs(ctx, id)
	if !found {
		return fmt.Errorf("sandbox %q: no such container: %w", id, wire.ErrNotFound)
	}
	p.log.Info("sandbox removed", "sandbox", id)
	return nil
}

// removeSocketDir removes a sandbox's socket directory (cleanSocketDir)
// and, when it is the provider's own SocketRoot/ID/run, the then empty
// SocketRoot/ID.
func (p *Provider) removeSocketDir(id, dir string) {
	if err := cleanSocketDir(dir); err != nil {
		p.log.Warn("removing the socket dir", "sandbox", id, "dir", dir, "err", err)
		return
	}
	if p.opts.SocketRoot != "" && dir == p.opts.socketDir(id) {
		// The parent is the provider's (the sandbox only has run/):
		// os.Remove takes an empty directory and nothing else.
		if err := os.Remove(filepath.Dir(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
			p.log.Warn("removing the sandbox's directory", "sandbox", id, "dir", filepath.Dir(dir), "err", err)
		}
	}
}

// cleanSocketDir removes what limbsd put in its socket directory, then the
// directory if that left it empty. It deletes nothing else, so a control
// plane that passed a shared directory by mistake loses nothing of its own.
//
// The directory's content is the sandbox's to change: each name is removed
// beneath the directory's descriptor, never through a link.
func cleanSocketDir(dir string) error {
	parent, base := filepath.Split(dir)
	if err := sandbox.CheckBeneath(parent, base); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, name := range []string{"limbsd.sock", "limbsd.token", "state"} {
		if err := sandbox.RemoveBeneath(parent, filepath.Join(base, name)); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			return nil // someone else's files: keep the directory
		}
		return err
	}
	return nil
}

// makeOverlayDirs makes dir/upper and dir/work for an overlay over lower.
// The overlay's root takes its owner and mode from the upper directory, so
// upper gets those of lower's root. dir is the provider's (0700): the
// sandbox reaches what it writes there only through the overlay.
func makeOverlayDirs(dir, lower string) error {
	var st unix.Stat_t
	if err := unix.Lstat(lower, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("the lower layer %s is not a directory (%v)", lower, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	up := filepath.Join(dir, "upper")
	for _, d := range []string{up, filepath.Join(dir, "work")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.Lchown(up, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("%w (copy-on-write workspaces need limbs serve to run as root)", err)
	}
	if err := unix.Chmod(up, st.Mode&0o7777); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, up, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// removeOverlayDirs removes a copy-on-write workspace's layers once its
// volume is gone. What the sandbox wrote there is removed beneath the
// directory, never through a link (os.RemoveAll).
func (p *Provider) removeOverlayDirs(ctx context.Context, id string) {
	if !idRE.MatchString(id) || !filepath.IsAbs(p.opts.SocketRoot) {
		return
	}
	dir := p.opts.overlayDir(id)
	if _, err := os.Lstat(dir); err != nil {
		return
	}
	if _, err := p.cli.VolumeInspect(ctx, volumeName(id), client.VolumeInspectOptions{}); err == nil {
		p.log.Warn("keeping a copy-on-write workspace's layers: its volume is still there", "sandbox", id, "dir", dir)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		p.log.Warn("removing a copy-on-write workspace's layers", "sandbox", id, "dir", dir, "err", err)
	}
}

// removeVolume removes the named volume if, and only if, its labels say
// the provider created it for this sandbox. It reports whether it did.
func (p *Provider) removeVolume(ctx context.Context, name, id string) bool {
	v, err := p.cli.VolumeInspect(ctx, name, client.VolumeInspectOptions{})
	if err != nil {
		return false
	}
	l := v.Volume.Labels
	if l[sandbox.LabelManaged] != "true" || l[sandbox.LabelSandbox] != id {
		return false
	}
	if _, err := p.cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{Force: true}); err != nil {
		p.log.Warn("removing the workspace volume", "sandbox", id, "volume", name, "err", err)
		return false
	}
	return true
}

// Inspect reports one sandbox's container and state.
func (p *Provider) Inspect(ctx context.Context, id string) (sandbox.Instance, error) {
	c, err := p.container(ctx, id)
	if err != nil {
		return sandbox.Instance{}, err
	}
	return instanceOf(c), nil
}

// List returns the sandboxes the provider created for one control-plane
// instance (every instance when instance is empty), running or not.
func (p *Provider) List(ctx context.Context, instance string) ([]sandbox.Instance, error) {
	f := client.Filters{}.Add("label", sandbox.LabelManaged+"=true")
	if instance != "" {
		f.Add("label", sandbox.LabelInstance+"="+instance)
	}
	res, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, engineErr("listing sandboxes", err)
	}
	out := make([]sandbox.Instance, 0, len(res.Items))
	for _, s := range res.Items {
		// Inspect for the exit details (OOMKilled, exit code) a summary lacks.
		c, err := p.cli.ContainerInspect(ctx, s.ID, client.ContainerInspectOptions{})
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, instanceOf(c.Container))
	}
	return out, nil
}

// container finds a sandbox's container by its name and checks that the
// provider created it: a same-named container without the label is not
// ours and stays invisible.
func (p *Provider) container(ctx context.Context, id string) (container.InspectResponse, error) {
	if !idRE.MatchString(id) {
		return container.InspectResponse{}, fmt.Errorf("sandbox %q: not a sandbox id: %w", id, wire.ErrNotFound)
	}
	res, err := p.cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{})
	if err != nil {
		return container.InspectResponse{}, engineErr(fmt.Sprintf("sandbox %q", id), err)
	}
	c := res.Container
	if c.Config == nil || c.Config.Labels[sandbox.LabelManaged] != "true" || c.Config.Labels[sandbox.LabelSandbox] != id {
		return container.InspectResponse{}, fmt.Errorf("sandbox %q: container %s is not managed by limbs: %w", id, containerName(id), wire.ErrNotFound)
	}
	return c, nil
}

func instanceOf(c container.InspectResponse) sandbox.Instance {
	inst := sandbox.Instance{ProviderID: c.ID}
	if c.Config != nil {
		inst.Labels = c.Config.Labels
		inst.ID = c.Config.Labels[sandbox.LabelSandbox]
	}
	if s := c.State; s != nil {
		inst.State.Running = s.Running
		inst.State.ExitCode = s.ExitCode
		inst.State.StartedAt, _ = time.Parse(time.RFC3339Nano, s.StartedAt)
		if !s.Running && s.Status != container.StateCreated {
			inst.State.Reason = exitReason(s.ExitCode, s.OOMKilled, false)
		}
	}
	return inst
}

// Reasons a sandbox stopped, as reported in sandbox.State and Events.
const (
	ReasonStopped      = "stopped"       // asked to (Stop, docker stop) and limbsd exited cleanly
	ReasonOOMKilled    = "oom_killed"    // limbsd or the init was killed by the memory limit
	ReasonDaemonExited = "daemon_exited" // limbsd exited or was killed on its own
	ReasonRemoved      = "removed"       // the container was removed
)

// exitReason names why a container stopped. A clean exit is a stop
// (limbsd exits 0 on SIGTERM); a SIGKILL with the engine's OOM flag is the
// memory limit. Docker keeps OOMKilled set for the whole run once any
// process of the sandbox was OOM-killed, so Events prefers a fresh "oom"
// event (oomNow) over the flag; Inspect only has the flag.
func exitReason(code int, oomFlag, oomNow bool) string {
	switch {
	case code == 0:
		return ReasonStopped
	case oomNow, oomFlag && code == 137:
		return ReasonOOMKilled
	default:
		return ReasonDaemonExited
	}
}

// logTail returns the container's last log lines, for error messages.
func (p *Provider) logTail(containerID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := p.cli.ContainerLogs(ctx, containerID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 64<<10)); err != nil && out.Len() == 0 {
		return "(no logs: " + err.Error() + ")"
	}
	s := strings.TrimSpace(out.String())
	if s == "" {
		return "(no output)"
	}
	return s
}

// userOf is the --user limbsd was started with.
func userOf(cmd []string) string {
	for i, a := range cmd {
		if a == "--user" && i+1 < len(cmd) {
			return cmd[i+1]
		}
	}
	return ""
}
