package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// probeBwrap finds bubblewrap and checks that it can build the namespaces a
// sandbox needs: inside an unprivileged container it often cannot.
func probeBwrap() (string, error) {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		return "", errors.New("bubblewrap not found; install it (apt-get install bubblewrap)")
	}
	out, err := exec.Command(path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--cap-drop", "ALL", "--unshare-pid", "--unshare-net", "true").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("bubblewrap does not work here (%s); on a container host allow user namespaces, or run limbs serve with Docker", strings.TrimSpace(firstLine(string(out), err)))
	}
	return path, nil
}

func firstLine(s string, err error) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return err.Error()
	}
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// errMountRace: bubblewrap failed to remount a mount of the host that
// appeared or went while it made the host's root read-only (the Docker
// engine adds and removes an overlay mount for every container it
// starts); the next try succeeds.
var errMountRace = errors.New("a host mount changed while bubblewrap set up the sandbox")

func mountRace(log string) bool {
	return strings.Contains(log, "bwrap: Can't bind mount") && strings.Contains(log, "Unable to apply mount flags")
}

// waitStartedRetrying is waitStarted, starting limbsd again (three times
// at most) when bubblewrap lost a race with a host mount.
func (p *Provider) waitStartedRetrying(ctx context.Context, pr *proc) error {
	for try := 0; ; try++ {
		err := p.waitStarted(ctx, pr)
		if !errors.Is(err, errMountRace) || try == 3 {
			return err
		}
		p.log.Info("bubblewrap lost a race with a host mount; starting the sandbox again", "sandbox", pr.meta.Spec.ID, "try", try+1)
		p.mu.Lock()
		pr, err = p.spawn(pr.meta)
		p.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// spawn starts limbsd for m; p.mu is held.
func (p *Provider) spawn(m meta) (*proc, error) {
	dir := p.dir(m.Spec.ID)
	sock := p.socket(m.Spec.ID)
	// The sandbox writes in both: a link in their place would have limbsd
	// (the host's user) write wherever it points.
	if err := p.prepareDirs(m.Spec); err != nil {
		return nil, err
	}
	if err := p.checkWorkdir(m); err != nil {
		return nil, err
	}
	_ = os.Remove(sock) // a socket left by a killed daemon (unlink never follows a link)
	args := []string{p.opts.LimbsdPath,
		"--listen", "unix://" + sock,
		"--workdir", m.Workdir,
		"--state-dir", p.stateDir(m.Spec.ID),
	}
	args = append(args, m.Spec.DiskFlags()...)
	if m.Isolated {
		if p.bwrap == "" {
			return nil, fmt.Errorf("sandbox %s was created isolated with bubblewrap, which does not work now (%s); install it again or remove the sandbox: %w", m.Spec.ID, p.why, wire.ErrUnavailable)
		}
		args = append(p.bwrapArgs(m), args...)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "limbsd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = sandboxEnv(m)
	cmd.Dir = m.Workdir
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Its own session: the sandbox outlives `limbs serve` (a restarted one
	// re-adopts it) and a Ctrl-C meant for serve does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting limbsd for sandbox %s: %w", m.Spec.ID, err)
	}
	m.Pid = cmd.Process.Pid
	m.StartTime, _ = startTime(m.Pid)
	pr := &proc{meta: m, done: make(chan struct{})}
	p.procs[m.Spec.ID] = pr
	if err := p.save(m); err != nil {
		_ = syscall.Kill(-m.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		delete(p.procs, m.Spec.ID)
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		p.exited(pr)
	}()
	return pr, nil
}

// bwrapArgs builds the bubblewrap command line: the host root read-only,
// a fresh /dev, /proc and /tmp, the Hide paths masked, and writable only
// what limbsd needs: its workspace, state dir and socket dir. Never the
// sandbox's directory as a whole: sandbox.json there says how to start it
// again, and a sandbox that could rewrite it could start itself unisolated.
// Order matters: a later mount covers an earlier one. There is no
// --die-with-parent: like a container, the sandbox outlives a crash of
// limbs serve, whose next run re-adopts it with its running commands.
func (p *Provider) bwrapArgs(m meta) []string {
	a := []string{p.bwrap,
		"--ro-bind", "/", "/",
		"--dev", "/dev",
		"--proc", "/proc",
		"--tmpfs", "/tmp",
	}
	// A read-only mount does not stop connect() on a Unix socket: the host's
	// daemons (Docker's above all, which is root on the host) listen under
	// /run, so it is masked.
	for _, d := range []string{"/run", "/var/run"} {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			a = append(a, "--tmpfs", d)
		}
	}
	for _, h := range p.opts.Hide {
		if _, err := os.Stat(h); err == nil {
			a = append(a, "--tmpfs", h)
		}
	}
	// limbsd itself may live under /tmp or a hidden path (a test build).
	a = append(a, "--ro-bind", p.opts.LimbsdPath, p.opts.LimbsdPath)
	for _, d := range []string{m.Workdir, p.stateDir(m.Spec.ID), p.socketDir(m.Spec.ID)} {
		a = append(a, "--bind", d, d)
	}
	// As root, bubblewrap keeps every capability unless told otherwise:
	// with CAP_SYS_ADMIN a sandbox would simply remount / read-write.
	a = append(a, "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--chdir", m.Workdir)
	if m.Spec.Network != sandbox.NetworkBridge {
		a = append(a, "--unshare-net")
	}
	return append(a, "--")
}

// checkWorkdir checks the workspace again before every start of the
// daemon: a host workspace checked at Create may since have become a
// symbolic link (replaced by another sandbox whose workspace holds it),
// which limbsd and bubblewrap's --bind would follow. Create stored the
// resolved path: it must still resolve to itself and pass the checks of
// Create; the provider's own workspace must still be a directory of its
// own.
func (p *Provider) checkWorkdir(m meta) error {
	if m.Spec.Workspace == "" {
		if err := sandbox.CheckBeneath(p.dir(m.Spec.ID), "workspace"); err != nil {
			return fmt.Errorf("local sandbox %s: %w", m.Spec.ID, err)
		}
		return nil
	}
	real, err := filepath.EvalSymlinks(m.Workdir)
	if err == nil && real != m.Workdir {
		return fmt.Errorf("local sandbox %s: host workspace %s now resolves to %s: a component became a symbolic link after the sandbox was created; it is not started, so that it cannot get that directory; restore the directory, or remove the sandbox: %w", m.Spec.ID, m.Workdir, real, sandbox.ErrUnsafe)
	}
	if _, err := (sandbox.WorkspacePolicy{Private: p.opts.Hide}).CheckHostWorkspace(m.Workdir); err != nil {
		return fmt.Errorf("local sandbox %s: %w", m.Spec.ID, err)
	}
	return nil
}

// sandboxEnv is limbsd's environment, hence every shell's: a small base
// (nothing of the control plane's own environment, which may hold secrets),
// the spec's env, and the sandbox token for limbsd.
func sandboxEnv(m meta) []string {
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": m.Workdir,
		"LANG": "C.UTF-8",
	}
	for _, k := range []string{"PATH", "LANG", "LC_ALL", "USER", "LOGNAME", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	for k, v := range m.Spec.Env {
		env[k] = v
	}
	env["LIMBS_TOKEN"] = m.Spec.Token
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}
