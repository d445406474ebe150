package local

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/limbs-dev/limbs/internal/sandbox"
)

// daemonIs says whether peer, the process answering m's socket, is its
// limbsd: the process the provider started, or (isolated) the first
// process inside bubblewrap. The sandbox's own processes fail the check,
// even though, here, they run as the same user.
func (p *Provider) daemonIs(m meta, peer int) error {
	if peer == m.Pid {
		return nil
	}
	if !m.Isolated || p.bwrap == "" {
		return fmt.Errorf("its daemon is pid %d", m.Pid)
	}
	bwrap, err := filepath.EvalSymlinks(p.bwrap)
	if err != nil {
		bwrap = p.bwrap
	}
	// Down from bubblewrap, through its init in the new PID namespace, by
	// first children: an orphan of the sandbox's is adopted by that init
	// too, but later than limbsd.
	pid := m.Pid
	for range 4 {
		if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe != bwrap {
			break
		}
		if pid, err = sandbox.FirstChild(pid); err != nil {
			break
		}
		if pid == peer {
			return nil
		}
	}
	return fmt.Errorf("its daemon is pid %d, the first process inside bubblewrap pid %d", pid, m.Pid)
}

// Dial connects to sandbox id's limbsd on its socket, refusing any other
// peer (sandbox.ErrImpostor); a sandbox whose limbsd exited is
// sandbox.ErrNotRunning, with its last log lines.
func (p *Provider) Dial(ctx context.Context, id string) (net.Conn, error) {
	p.mu.Lock()
	pr, err := p.track(id)
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !pr.alive() {
		return nil, fmt.Errorf("limbsd of local sandbox %s is not running (%s): %w", id, p.logTail(id), sandbox.ErrNotRunning)
	}
	return p.dial(ctx, pr)
}

// dial connects to pr's socket, refusing any other peer than its limbsd,
// for pr's incarnation.
func (p *Provider) dial(ctx context.Context, pr *proc) (net.Conn, error) {
	check := func(ctx context.Context, peer sandbox.Peer) error { return p.daemonIs(pr.meta, peer.Pid) }
	return sandbox.DialDaemon(ctx, p.socket(pr.meta.Spec.ID), check)
}
