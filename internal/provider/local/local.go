// Package local is the sandbox provider that needs no container engine: each
// sandbox is a limbsd process on the host with its own workspace and state
// directories, isolated with bubblewrap when it is installed and works
// (read-only host root, writable workspace, private /tmp, no network, own
// PID namespace), and run plainly otherwise.
//
// It must never claim isolation that is not there: without bubblewrap every
// sandbox it creates carries a note saying it is NOT isolated, which the
// control plane logs and shows. It never touches a process it did not start:
// every pid it acts on is checked against the start time it recorded.
//
// Per sandbox, under Options.Root/ID:
//
//	sandbox.json  the spec (with the limbsd token: mode 0600), pid and start time
//	workspace/    the default working directory (unless Spec.Workspace names a host dir)
//	state/        limbsd's --state-dir: session state and output logs, kept
//	              across Stop/Start so limbsd restores its sessions
//	run/          limbsd's socket (limbsd.sock), which Dial connects to
//	limbsd.log    limbsd's stderr
//
// Create and Start return once limbsd listens (its socket is there) or
// exited; the control plane waits for its health through Dial.
package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Isolation modes.
const (
	IsolateAuto  = "auto"  // bubblewrap when it works, else none with a warning
	IsolateBwrap = "bwrap" // bubblewrap or fail
	IsolateNone  = "none"  // never isolate (still warned about)
)

// Options configure a Provider.
type Options struct {
	// Root holds one directory per sandbox (Root/ID).
	Root string
	// Isolation is IsolateAuto (default), IsolateBwrap or IsolateNone.
	Isolation string
	// Hide lists host paths masked by an empty tmpfs inside an isolated
	// sandbox (the control plane's state dir, with its token), before the
	// sandbox's own directories are bound back in.
	Hide []string
	// LimbsdPath is the limbsd binary (an absolute path) each sandbox
	// runs; it is read at every start, so a new build takes effect at the
	// next Start. Without it the provider can only stop, list and remove.
	LimbsdPath string
	Logger     *slog.Logger
}

// Provider runs sandboxes as host processes.
type Provider struct {
	opts  Options
	log   *slog.Logger
	bwrap string // bubblewrap binary; empty when not isolating
	why   string // why not isolating

	mu    sync.Mutex
	procs map[string]*proc
	subs  []subscriber
}

type subscriber struct {
	ctx context.Context
	ch  chan sandbox.Event
}

// proc is one sandbox's current limbsd process.
type proc struct {
	meta meta
	done chan struct{} // closed when the process has exited
	// Guarded by Provider.mu.
	stopping bool // the exit was asked for: no event
}

// meta is sandbox.json.
type meta struct {
	Spec      sandbox.Spec `json:"spec"`
	Isolated  bool         `json:"isolated"`
	Pid       int          `json:"pid"`
	StartTime uint64       `json:"start_time"` // clock ticks since boot, from /proc/PID/stat
	Workdir   string       `json:"workdir"`
}

// New checks once whether bubblewrap works here.
func New(opts Options) (*Provider, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Root == "" {
		return nil, errors.New("local provider without a root directory")
	}
	if err := os.MkdirAll(opts.Root, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", opts.Root, err)
	}
	p := &Provider{opts: opts, log: opts.Logger, procs: map[string]*proc{}}
	switch opts.Isolation {
	case "", IsolateAuto, IsolateBwrap:
		path, err := probeBwrap()
		if err != nil {
			if opts.Isolation == IsolateBwrap {
				return nil, fmt.Errorf("isolation bwrap asked for, but %v", err)
			}
			p.why = err.Error()
			p.log.Warn("local sandboxes will NOT be isolated", "why", p.why)
		}
		p.bwrap = path
	case IsolateNone:
		p.why = "isolation is turned off (isolation none)"
	default:
		return nil, fmt.Errorf("isolation %q: use auto, bwrap or none", opts.Isolation)
	}
	return p, nil
}

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

// Name is "local".
func (p *Provider) Name() string { return "local" }

// Isolated says whether sandboxes run under bubblewrap.
func (p *Provider) Isolated() bool { return p.bwrap != "" }

// Why says why sandboxes are not isolated (empty when they are).
func (p *Provider) Why() string { return p.why }

// Note says what a sandbox created from spec will lack.
func (p *Provider) Note(spec sandbox.Spec) string {
	var notes []string
	if p.bwrap == "" {
		notes = append(notes, fmt.Sprintf("local sandbox %s is NOT isolated: %s", spec.ID, p.why))
	}
	if spec.Cpus > 0 || spec.MemoryMB > 0 || spec.Pids > 0 || spec.TmpMB > 0 {
		notes = append(notes, fmt.Sprintf("local sandbox %s: cpus, memory_mb, pids and tmp_mb limits are not enforced by the local provider; use the docker provider for them", spec.ID))
	}
	if spec.User != "" {
		notes = append(notes, fmt.Sprintf("local sandbox %s: user %q is ignored: it runs as the user of limbs serve", spec.ID, spec.User))
	}
	return strings.Join(notes, "; ")
}

func (p *Provider) dir(id string) string { return filepath.Join(p.opts.Root, id) }

// Create starts limbsd for a new sandbox and returns once it listens.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	if !strings.HasPrefix(spec.ID, "sb_") || strings.ContainsAny(spec.ID, "/.") {
		return sandbox.Instance{}, fmt.Errorf("sandbox id %q: %w", spec.ID, wire.ErrBadRequest)
	}
	if err := p.checkLimbsd(); err != nil {
		return sandbox.Instance{}, err
	}
	dir := p.dir(spec.ID)
	workdir := filepath.Join(dir, "workspace")
	if spec.Workspace != "" {
		real, err := sandbox.WorkspacePolicy{Private: p.opts.Hide}.CheckHostWorkspace(spec.Workspace)
		if err != nil {
			return sandbox.Instance{}, fmt.Errorf("the local provider takes an existing absolute host directory: %w", err)
		}
		workdir = real
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return sandbox.Instance{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	if spec.Workspace == "" {
		if err := sandbox.MkdirBeneath(dir, "workspace", 0o700); err != nil {
			return sandbox.Instance{}, err
		}
	}
	if err := p.prepareDirs(spec); err != nil {
		return sandbox.Instance{}, err
	}
	m := meta{Spec: spec, Isolated: p.bwrap != "", Workdir: workdir}
	p.mu.Lock()
	if _, ok := p.procs[spec.ID]; ok {
		p.mu.Unlock()
		return sandbox.Instance{}, fmt.Errorf("sandbox %s exists already: %w", spec.ID, wire.ErrConflict)
	}
	pr, err := p.spawn(m)
	p.mu.Unlock()
	if err != nil {
		return sandbox.Instance{}, err
	}
	if err := p.waitStartedRetrying(ctx, pr); err != nil {
		return sandbox.Instance{}, err
	}
	return p.Inspect(ctx, spec.ID)
}

func (p *Provider) checkLimbsd() error {
	if !filepath.IsAbs(p.opts.LimbsdPath) {
		return fmt.Errorf("local provider: limbsd binary %q: want an absolute path; build it with `make build` and pass --limbsd: %w", p.opts.LimbsdPath, wire.ErrBadRequest)
	}
	return nil
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

// stateDir is where limbsd keeps a sandbox's durable state: sessions and
// output logs, kept across Stop and Start.
func (p *Provider) stateDir(id string) string { return filepath.Join(p.dir(id), "state") }

// socketDir holds limbsd's socket; the sandbox may write in it.
func (p *Provider) socketDir(id string) string { return filepath.Join(p.dir(id), "run") }

func (p *Provider) socket(id string) string { return filepath.Join(p.socketDir(id), "limbsd.sock") }

// prepareDirs creates or checks limbsd's state and socket directories,
// never following a link in their place.
func (p *Provider) prepareDirs(spec sandbox.Spec) error {
	for _, d := range []string{"state", "run"} {
		if err := sandbox.MkdirBeneath(p.dir(spec.ID), d, 0o700); err != nil {
			return fmt.Errorf("local sandbox %s: %w", spec.ID, err)
		}
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

func (p *Provider) save(m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(p.dir(m.Spec.ID), "sandbox.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("saving sandbox %s: %w", m.Spec.ID, err)
	}
	return os.Rename(tmp, path)
}

func (p *Provider) load(id string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(p.dir(id), "sandbox.json"))
	if errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("local sandbox %s: %w", id, wire.ErrNotFound)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("local sandbox %s: sandbox.json: %w", id, err)
	}
	return m, nil
}

// exited runs once a sandbox's process is gone; unless that was asked for,
// the control plane hears that the daemon died.
func (p *Provider) exited(pr *proc) {
	p.mu.Lock()
	close(pr.done)
	report := !pr.stopping
	subs := append([]subscriber(nil), p.subs...)
	p.mu.Unlock()
	if !report {
		return
	}
	p.log.Warn("local sandbox daemon exited", "sandbox", pr.meta.Spec.ID, "pid", pr.meta.Pid)
	ev := sandbox.Event{ID: pr.meta.Spec.ID, Kind: sandbox.EventDied, Reason: "daemon_exited", Time: time.Now().UTC()}
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.ctx.Done():
		}
	}
}

func (pr *proc) alive() bool {
	select {
	case <-pr.done:
		return false
	default:
		return true
	}
}

// waitStarted waits until limbsd listens (its socket is there: no
// request is sent, the control plane asks for health through Dial), the
// process exits (with errMountRace when bubblewrap lost a race with a
// host mount), or ctx ends.
func (p *Provider) waitStarted(ctx context.Context, pr *proc) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	id := pr.meta.Spec.ID
	sock := p.socket(id)
	delay := 2 * time.Millisecond
	for range 1000 {
		select {
		case <-pr.done:
			tail := p.logTail(id)
			if mountRace(tail) {
				return fmt.Errorf("limbsd of sandbox %s exited at start: %s: %w", id, tail, errMountRace)
			}
			return fmt.Errorf("limbsd of sandbox %s exited at start: %s", id, tail)
		default:
		}
		// The sandbox writes in the socket's directory, but nothing of it
		// runs before limbsd: whatever is a socket here is limbsd's, and
		// Dial checks the peer of every connection anyway.
		if fi, err := os.Lstat(sock); err == nil && fi.Mode().Type() == os.ModeSocket {
			return nil
		}
		select {
		case <-pr.done:
		case <-ctx.Done():
			return fmt.Errorf("limbsd of sandbox %s did not listen on %s: %w; its log says: %s", id, sock, ctx.Err(), p.logTail(id))
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
	return fmt.Errorf("limbsd of sandbox %s did not listen on %s; its log says: %s", id, sock, p.logTail(id))
}

func (p *Provider) logTail(id string) string {
	b, _ := os.ReadFile(filepath.Join(p.dir(id), "limbsd.log"))
	b = bytes.TrimSpace(b)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	if len(b) == 0 {
		return "(nothing)"
	}
	return string(b)
}

// track returns the sandbox's process, adopting a still-running one started
// by an earlier control plane; p.mu is held.
func (p *Provider) track(id string) (*proc, error) {
	if pr, ok := p.procs[id]; ok {
		return pr, nil
	}
	m, err := p.load(id)
	if err != nil {
		return nil, err
	}
	pr := &proc{meta: m, done: make(chan struct{})}
	p.procs[id] = pr
	if !p.sameProcess(m) {
		close(pr.done)
		return pr, nil
	}
	fd, err := unix.PidfdOpen(m.Pid, 0)
	if err != nil {
		close(pr.done)
		return pr, nil
	}
	p.log.Info("re-adopted a local sandbox process", "sandbox", id, "pid", m.Pid)
	go func() {
		defer unix.Close(fd)
		// A pidfd becomes readable when the process exits: no polling,
		// and it works for processes that are not our children.
		for {
			_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
			if err != unix.EINTR {
				break
			}
		}
		p.exited(pr)
	}()
	return pr, nil
}

// sameProcess says whether m's pid is still the process it started (not a
// zombie, not a reused pid).
func (p *Provider) sameProcess(m meta) bool {
	if m.Pid <= 0 {
		return false
	}
	st, err := startTime(m.Pid)
	return err == nil && st == m.StartTime
}

// startTime reads field 22 of /proc/PID/stat; a zombie counts as gone.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unreadable stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("short stat")
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, errors.New("zombie")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// groupAlive says whether a process of group pgid still runs. Zombies do
// not count: when limbs serve was restarted, the sandbox's processes are
// no longer its children, and an init that does not reap (a container
// without --init) would leave them zombies forever.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		// Fields after the name: state, ppid, pgrp, ...
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" && pid > 0 {
			return true
		}
	}
	return false
}

// Start respawns a stopped sandbox's limbsd (its state dir is kept, so it
// restores its sessions) and returns once it listens.
func (p *Provider) Start(ctx context.Context, id string) error {
	p.mu.Lock()
	pr, err := p.track(id)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	if !pr.alive() {
		if err := p.checkLimbsd(); err != nil {
			p.mu.Unlock()
			return err
		}
		if pr, err = p.spawn(pr.meta); err != nil {
			p.mu.Unlock()
			return err
		}
	}
	p.mu.Unlock()
	return p.waitStartedRetrying(ctx, pr)
}

// Stop ends the sandbox's processes: SIGTERM to its process group (limbsd
// ends its shells), then SIGKILL if it lingers.
func (p *Provider) Stop(ctx context.Context, id string) error {
	p.mu.Lock()
	pr, err := p.track(id)
	if err == nil {
		pr.stopping = true
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if !pr.alive() {
		return nil
	}
	pid := pr.meta.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	if waitGroupGone(ctx, pr, pid, 10*time.Second) {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if waitGroupGone(context.Background(), pr, pid, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("local sandbox %s: process group %d survived SIGKILL", id, pid)
}

// waitGroupGone waits until the sandbox's process has exited and its whole
// process group with it: under bubblewrap the process we started exits
// before the daemon inside has finished writing its state.
func waitGroupGone(ctx context.Context, pr *proc, pgid int, limit time.Duration) bool {
	timeout := time.After(limit)
	select {
	case <-pr.done:
	case <-timeout:
		return false
	case <-ctx.Done():
		return false
	}
	// The group has no exit notification: poll, on this cold path only.
	for groupAlive(pgid) {
		select {
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// Remove stops the sandbox and deletes its directory (a host workspace
// named in the spec is left alone).
func (p *Provider) Remove(ctx context.Context, id string) error {
	if err := p.Stop(ctx, id); err != nil {
		if errors.Is(err, wire.ErrNotFound) {
			if _, serr := os.Stat(p.dir(id)); serr == nil {
				return os.RemoveAll(p.dir(id))
			}
		}
		return err
	}
	p.mu.Lock()
	delete(p.procs, id)
	p.mu.Unlock()
	if err := os.RemoveAll(p.dir(id)); err != nil {
		return fmt.Errorf("removing local sandbox %s: %w", id, err)
	}
	return nil
}

// Inspect reports one sandbox.
func (p *Provider) Inspect(ctx context.Context, id string) (sandbox.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, err := p.track(id)
	if err != nil {
		return sandbox.Instance{}, err
	}
	return instance(pr), nil
}

func instance(pr *proc) sandbox.Instance {
	st := sandbox.State{Running: pr.alive()}
	if !st.Running && !pr.stopping {
		st.Reason = "daemon_exited"
	}
	return sandbox.Instance{
		ID:         pr.meta.Spec.ID,
		ProviderID: "pid:" + strconv.Itoa(pr.meta.Pid),
		Labels: map[string]string{
			sandbox.LabelManaged:  "true",
			sandbox.LabelInstance: pr.meta.Spec.Instance,
			sandbox.LabelSandbox:  pr.meta.Spec.ID,
		},
		State: st,
	}
}

// List returns the sandboxes under Root created by the given control plane
// instance, adopting their processes.
func (p *Provider) List(ctx context.Context, instanceID string) ([]sandbox.Instance, error) {
	entries, err := os.ReadDir(p.opts.Root)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []sandbox.Instance
	for _, de := range entries {
		if !de.IsDir() || !strings.HasPrefix(de.Name(), "sb_") {
			continue
		}
		pr, err := p.track(de.Name())
		if err != nil {
			continue // not a local sandbox (another provider's socket dir)
		}
		if pr.meta.Spec.Instance == instanceID {
			out = append(out, instance(pr))
		}
	}
	return out, nil
}

// Events reports daemons that exited on their own, until ctx ends.
func (p *Provider) Events(ctx context.Context) (<-chan sandbox.Event, error) {
	ch := make(chan sandbox.Event, 64)
	p.mu.Lock()
	p.subs = append(p.subs, subscriber{ctx: ctx, ch: ch})
	p.mu.Unlock()
	go func() {
		<-ctx.Done()
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, s := range p.subs {
			if s.ch == ch {
				p.subs = append(p.subs[:i], p.subs[i+1:]...)
				break
			}
		}
	}()
	return ch, nil
}
