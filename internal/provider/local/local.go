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
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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

// Create starts limbsd for a new sandbox and returns once it listens.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	if !strings.HasPrefix(spec.ID, "sb_") || strings.ContainsAny(spec.ID, "/.") {
		return sandbox.Instance{}, fmt.Errorf("sandbox id %q: %w", spec.ID, wire.ErrBadRequest)
	}
	if spec.WorkspaceLower != "" {
		return sandbox.Instance{}, fmt.Errorf("sandbox %s: the local provider has no copy-on-write workspaces; fork with the docker provider: %w", spec.ID, wire.ErrBadRequest)
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
