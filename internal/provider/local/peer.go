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
// first process inside bubblewrap, whose every ancestor up to the one the
// provider started is bubblewrap itself. The sandbox's own processes are
// limbsd's descendants and fail the check, even though, here, they run as
// the same user.
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

func (p *Provider) daemonIs(m meta, pid int) error {
	if pid == m.Pid {
		return nil
	}
	if !m.Isolated || p.bwrap == "" {
		return fmt.Errorf("its daemon is pid %d", m.Pid)
	}
	bwrap, err := filepath.EvalSymlinks(p.bwrap)
	if err != nil {
		bwrap = p.bwrap
	}
	st, err := sandbox.ReadProcStat(pid)
	for range 4 { // bubblewrap, and its init in the new PID namespace
		if err != nil {
			break
		}
		if st.PPid == m.Pid {
			return nil
		}
		if exe, _ := os.Readlink("/proc/" + strconv.Itoa(st.PPid) + "/exe"); exe != bwrap {
			break
		}
		st, err = sandbox.ReadProcStat(st.PPid)
	}
	return fmt.Errorf("its daemon is the child of bubblewrap pid %d", m.Pid)
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
