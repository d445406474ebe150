// Package docker is the sandbox provider that runs each sandbox as a Docker
// container: the static limbsd binary (Options.LimbsdPath) is bind-mounted
// read-only into any image and runs as the container's command under
// Docker's init, reachable from the host only through a Unix socket in a
// bind-mounted directory (Options.SocketRoot/ID/run, the container's
// /run/limbs), which Dial connects to after checking who answers. limbsd
// keeps its durable state (sessions, output logs) in that directory's
// state/, the one place that survives a container restart.
//
// Its defaults are the secure ones (non-root uid 1000, every capability
// dropped, no-new-privileges, memory/CPU/pids limits, no network, a
// size-limited /tmp); a Spec field loosens each one explicitly.
//
// It must never publish a port, talk to a container's IP, mount a host path
// other than the workspace, limbsd's socket directory and the limbsd binary,
// mount the Docker socket, or touch a container or volume it did not create
// (everything it creates carries the sandbox.LabelManaged label).
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Options configures a Provider. The zero value works with a local engine.
type Options struct {
	Logger *slog.Logger
	// Host is the engine address (unix:///var/run/docker.sock, tcp://...);
	// empty means $DOCKER_HOST, else the default socket.
	Host string
	// SocketRoot is the host directory holding one directory per sandbox,
	// SocketRoot/ID/run, bind-mounted into the container as /run/limbs:
	// limbsd's socket and its state/ (an absolute path).
	SocketRoot string
	// LimbsdPath is the static limbsd binary on the host that is
	// bind-mounted into every container.
	LimbsdPath string
	// StopTimeout is the grace period between SIGTERM and SIGKILL on Stop
	// (default 5s).
	StopTimeout time.Duration
	// CapAdd gives capabilities back to every sandbox after --cap-drop ALL.
	// Empty by default; Spec has no per-sandbox field for it yet.
	CapAdd []string
	// AllowNewPrivileges drops no-new-privileges (setuid binaries such as
	// sudo work again). Off by default.
	AllowNewPrivileges bool
}

// Provider creates and manages sandboxes as Docker containers. It is safe
// for concurrent use; all state lives in the engine (labels), so a restarted
// control plane finds its sandboxes with List.
type Provider struct {
	cli    *client.Client
	log    *slog.Logger
	opts   Options
	inits  inits
	dirs   socketDirs
	mounts mountLocks // MountWorkspace, per sandbox
}

// New connects to the engine, negotiating the API version (the Debian
// engine speaks 1.41), and fails with wire.ErrUnavailable when no engine
// answers.
func New(ctx context.Context, opts Options) (*Provider, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 5 * time.Second
	}
	copts := []client.Opt{client.FromEnv}
	if opts.Host != "" {
		copts = append(copts, client.WithHost(opts.Host))
	}
	cli, err := client.New(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %v; check DOCKER_HOST: %w", err, wire.ErrUnavailable)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ping, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("no Docker engine answers at %s (%v); start one with scripts/docker-up.sh: %w", cli.DaemonHost(), err, wire.ErrUnavailable)
	}
	opts.Logger.Debug("docker engine", "host", cli.DaemonHost(), "api", ping.APIVersion, "client_api", cli.ClientVersion())
	return &Provider{cli: cli, log: opts.Logger, opts: opts}, nil
}

// Name is the provider's name in the API ("docker").
func (p *Provider) Name() string { return "docker" }

// Close releases the engine connection.
func (p *Provider) Close() error { return p.cli.Close() }

// engineErr maps an engine error to the wire sentinels, naming what failed.
func engineErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", what, err)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%s: %v: %w", what, err, wire.ErrNotFound)
	case cerrdefs.IsConflict(err), cerrdefs.IsAlreadyExists(err):
		return fmt.Errorf("%s: %v: %w", what, err, wire.ErrConflict)
	case cerrdefs.IsInvalidArgument(err):
		return fmt.Errorf("%s: %v: %w", what, err, wire.ErrBadRequest)
	case client.IsErrConnectionFailed(err):
		return fmt.Errorf("%s: the Docker engine does not answer (%v); start it with scripts/docker-up.sh: %w", what, err, wire.ErrUnavailable)
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}
