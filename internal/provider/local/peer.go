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

// CheckPeer says whether peer, the process answering sandbox id's socket,
// is its limbsd: the process the provider started, or (isolated) the
// first process inside bubblewrap. The sandbox's own processes fail the
// check, even though, here, they run as the same user.
func (p *Provider) CheckPeer(ctx context.Context, id string, peer sandbox.Peer) error {
	p.mu.Lock()
	pr, ok := p.procs[id]
	var m meta
	if ok {
		m = pr.meta
	}
	p.mu.Unlock()
	if !ok || !p.sameProcess(m) {
		return fmt.Errorf("sandbox %s has no running daemon", id)
	}
	return p.daemonIs(m, peer.Pid)
}

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

// dialer returns a dialer of sandbox id's socket that refuses any other
// peer than its limbsd, for pr's incarnation.
func (p *Provider) dialer(pr *proc) func(ctx context.Context, _, _ string) (net.Conn, error) {
	sock := filepath.Join(pr.meta.Spec.SocketDir, "limbsd.sock")
	check := func(ctx context.Context, peer sandbox.Peer) error { return p.daemonIs(pr.meta, peer.Pid) }
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		return sandbox.DialDaemon(ctx, sock, check)
	}
}
