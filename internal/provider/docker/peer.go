package docker

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"

	"github.com/moby/moby/client"

	limbsclient "github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/sandbox"
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

// daemonClient is a client of sandbox id's limbsd that refuses any other
// peer on its socket.
func (p *Provider) daemonClient(id, socketDir string) *limbsclient.Client {
	sock := filepath.Join(socketDir, "limbsd.sock")
	check := func(ctx context.Context, peer sandbox.Peer) error { return p.CheckPeer(ctx, id, peer) }
	return limbsclient.NewDialed(func(ctx context.Context) (net.Conn, error) {
		return sandbox.DialDaemon(ctx, sock, check)
	}, "")
}
