package control

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// checkRequest applies the rules a create request must follow whatever
// the provider: a name that is safe to print (it reaches terminals, labels
// and logs) and a host workspace outside the host's system directories and
// the control plane's own, inside a --workspace-root when there are some.
// A host workspace is replaced by the path it resolves to, which is what
// the provider mounts.
func (s *Plane) checkRequest(req *wire.CreateSandbox) error {
	if req.Name != "" {
		if err := sandbox.CheckName(req.Name); err != nil {
			return err
		}
	}
	for k, v := range req.Env {
		if err := checkEnv(k, v); err != nil {
			return err
		}
	}
	if err := checkSecretEnv(req); err != nil {
		return err
	}
	if filepath.IsAbs(req.Workspace) {
		real, err := s.workspacePolicy().CheckHostWorkspace(req.Workspace)
		if err != nil {
			return err
		}
		req.Workspace = real
	}
	return nil
}

// envName is what a shell can export: the other names (NUL, '=', a
// newline) would reach the engine or the kernel broken.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnv refuses environment entries a sandbox cannot be given: names a
// shell cannot hold, values with NUL, and the names limbs itself uses to
// start limbsd (LIMBS_TOKEN, LIMBSD_*), which would change how it starts.
func checkEnv(k, v string) error {
	switch {
	case !envName.MatchString(k):
		return fmt.Errorf("env name %q: use letters, digits and '_', not starting with a digit: %w", k, wire.ErrBadRequest)
	case k == "LIMBS_TOKEN" || strings.HasPrefix(k, "LIMBSD_"):
		return fmt.Errorf("env name %q is limbs' own (LIMBS_TOKEN, LIMBSD_*); pick another name: %w", k, wire.ErrBadRequest)
	case strings.ContainsRune(v, 0):
		return fmt.Errorf("env %s: the value holds a NUL byte, which no process environment can carry: %w", k, wire.ErrBadRequest)
	}
	return nil
}

func (s *Plane) workspacePolicy() sandbox.WorkspacePolicy {
	state, err := filepath.Abs(s.opts.StateDir)
	if err != nil {
		state = s.opts.StateDir
	}
	return sandbox.WorkspacePolicy{Private: []string{state}, Roots: s.opts.WorkspaceRoots}
}

// checkRoom refuses a new client sandbox once MaxSandboxes exist. Called
// with s.writeMu held, so that two creates cannot both take the last place.
func (s *Plane) checkRoom() error {
	if s.opts.MaxSandboxes <= 0 {
		return nil
	}
	s.mu.Lock()
	n := 0
	for _, e := range s.sandboxes {
		if e.rec.Pool == "" {
			n++
		}
	}
	s.mu.Unlock()
	if n < s.opts.MaxSandboxes {
		return nil
	}
	return fmt.Errorf("this control plane holds %d sandboxes, its limit (limbs serve --max-sandboxes %d): remove some (limbs sandbox ls, limbs sandbox rm ID) or restart limbs serve with a higher --max-sandboxes (0 removes the cap): %w",
		n, s.opts.MaxSandboxes, wire.ErrTooMany)
}

// Defaulter is a provider that applies limits of its own where a spec
// leaves them zero (the Docker provider's 2 CPUs, 2 GiB, ...). The record
// then says what is in force, not 0.
type Defaulter interface {
	WithDefaults(sandbox.Spec) sandbox.Spec
}

// limitsInForce fills the zero limits of l with what p applies for spec.
func limitsInForce(p any, spec sandbox.Spec, l wire.Limits) wire.Limits {
	d, ok := p.(Defaulter)
	if !ok {
		return l
	}
	in := d.WithDefaults(spec)
	if l.Cpus == 0 {
		l.Cpus = in.Cpus
	}
	if l.MemoryMB == 0 {
		l.MemoryMB = in.MemoryMB
	}
	if l.Pids == 0 {
		l.Pids = in.Pids
	}
	if l.TmpMB == 0 {
		l.TmpMB = in.TmpMB
	}
	if l.Network == "" {
		l.Network = wire.Network(in.Network)
	}
	if l.User == "" {
		l.User = in.User
	}
	return l
}
