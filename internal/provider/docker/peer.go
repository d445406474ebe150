package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	limbsclient "github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// A sandbox's limbsd is the first child of the container's init (Docker's
// --init): it is started before anything else in the container and the
// container ends when it does. Any other process, an agent's listener
// that replaced the socket included, is younger (an orphan the init
// adopted) or elsewhere; a socket that links out of the sandbox is
// answered by a host process that is nobody's child in the container.

// initProc is what the provider remembers of a container's init.
type initProc struct {
	pid   int
	start uint64
}

// inits caches the init of each sandbox's container, so that a check
// costs reading a few /proc files, no engine round trip.
type inits struct {
	mu sync.Mutex // guards m
	m  map[string]initProc
}

// CheckPeer says whether peer, the process answering sandbox id's socket,
// is its limbsd.
func (p *Provider) CheckPeer(ctx context.Context, id string, peer sandbox.Peer) error {
	for fresh := range 2 {
		in, err := p.initOf(ctx, id, fresh == 1)
		if err != nil {
			return err
		}
		first, err := sandbox.FirstChild(in.pid)
		if err == nil && first == peer.Pid {
			return nil
		}
		if fresh == 1 {
			if err != nil {
				return fmt.Errorf("the container's init (pid %d) has no daemon: %v", in.pid, err)
			}
			return fmt.Errorf("the container's daemon is pid %d", first)
		}
	}
	return nil // not reached
}

// initOf returns the container's init, from the cache unless fresh is
// set or the cached process is gone (the container restarted).
func (p *Provider) initOf(ctx context.Context, id string, fresh bool) (initProc, error) {
	p.inits.mu.Lock()
	in, ok := p.inits.m[id]
	p.inits.mu.Unlock()
	if ok && !fresh {
		if st, err := sandbox.ReadProcStat(in.pid); err == nil && st.Start == in.start {
			return in, nil
		}
	}
	res, err := p.cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{})
	if err != nil {
		return initProc{}, engineErr(fmt.Sprintf("sandbox %q: finding its daemon", id), err)
	}
	c := res.Container
	if c.Config == nil || c.Config.Labels[sandbox.LabelSandbox] != id || c.State == nil || !c.State.Running || c.State.Pid <= 0 {
		return initProc{}, fmt.Errorf("sandbox %q: its container is not running", id)
	}
	st, err := sandbox.ReadProcStat(c.State.Pid)
	if err != nil {
		return initProc{}, fmt.Errorf("sandbox %q: the container's init (pid %d) is not visible on this host (%v); run limbs serve in the host's process namespace", id, c.State.Pid, err)
	}
	in = initProc{pid: c.State.Pid, start: st.Start}
	p.inits.mu.Lock()
	if p.inits.m == nil {
		p.inits.m = map[string]initProc{}
	}
	p.inits.m[id] = in
	p.inits.mu.Unlock()
	return in, nil
}

// socketDirs caches the socket directory of each sandbox's container (its
// labelSocketDir, fixed when the container was created), so that a Dial
// costs no engine round trip.
type socketDirs struct {
	mu sync.Mutex // guards m
	m  map[string]string
}

func (d *socketDirs) get(id string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dir, ok := d.m[id]
	return dir, ok
}

func (d *socketDirs) set(id, dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]string{}
	}
	d.m[id] = dir
}

func (d *socketDirs) drop(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, id)
}

// socketDir returns the host directory of sandbox id's /run/limbs.
func (p *Provider) socketDir(ctx context.Context, id string) (string, error) {
	if dir, ok := p.dirs.get(id); ok {
		return dir, nil
	}
	c, err := p.container(ctx, id)
	if err != nil {
		return "", err
	}
	dir := c.Config.Labels[labelSocketDir]
	if dir == "" {
		return "", fmt.Errorf("sandbox %q: container %s has no %s label; remove it and create the sandbox again: %w", id, c.ID[:12], labelSocketDir, wire.ErrConflict)
	}
	p.dirs.set(id, dir)
	return dir, nil
}

// Dial connects to sandbox id's limbsd on the socket in its socket
// directory, which the sandbox may write: a path that is not a socket, or
// a peer that is not the container's daemon (CheckPeer), is refused with
// sandbox.ErrImpostor before anything is sent. When the connection fails
// and the container is not running, the error wraps sandbox.ErrNotRunning
// and says why, with limbsd's last log lines.
func (p *Provider) Dial(ctx context.Context, id string) (net.Conn, error) {
	dir, err := p.socketDir(ctx, id)
	if err != nil {
		return nil, err
	}
	check := func(ctx context.Context, peer sandbox.Peer) error { return p.CheckPeer(ctx, id, peer) }
	c, err := sandbox.DialDaemon(ctx, filepath.Join(dir, "limbsd.sock"), check)
	if err == nil || errors.Is(err, sandbox.ErrImpostor) {
		return c, err
	}
	return nil, p.unreachable(ctx, id, err)
}

// unreachable says why sandbox id's limbsd did not take a connection
// (err): its container is not running (sandbox.ErrNotRunning, with the
// exit code and log lines), or it does not answer yet.
func (p *Provider) unreachable(ctx context.Context, id string, err error) error {
	// Inspect even when ctx just ended, to say why limbsd is not there.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	c, ierr := p.container(ictx, id)
	cancel()
	if ierr != nil {
		return ierr
	}
	s := c.State
	if s == nil || s.Running {
		return fmt.Errorf("sandbox %q: limbsd does not answer on its socket: %w", id, err)
	}
	if logs := p.logTail(c.ID); s.ExitCode == 2 && strings.Contains(logs, "--user") {
		// limbsd could not resolve the agent's user in the image.
		return fmt.Errorf("sandbox %q: image %s has no user %q (%s): pass a numeric uid:gid or a user the image has: %w: %w", id, c.Config.Image, userOf(c.Config.Cmd), logs, wire.ErrBadRequest, sandbox.ErrNotRunning)
	}
	return fmt.Errorf("sandbox %q: limbsd exited with code %d (%s); its last log lines:\n%s: %w: %w",
		id, s.ExitCode, exitReason(s.ExitCode, s.OOMKilled, false), p.logTail(c.ID), wire.ErrUnavailable, sandbox.ErrNotRunning)
}

// healthy asks limbsd once, on a new connection, whether it answers.
func (p *Provider) healthy(ctx context.Context, id string) bool {
	lc := limbsclient.NewDialed(func(ctx context.Context) (net.Conn, error) { return p.Dial(ctx, id) }, "")
	defer lc.HTTPClient().CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := lc.Health(ctx)
	return err == nil
}
