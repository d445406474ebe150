package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/sandbox"
)

// proc is one sandbox's current limbsd process.
type proc struct {
	meta meta
	done chan struct{} // closed when the process has exited
	// Guarded by Provider.mu.
	stopping bool // the exit was asked for: no event
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

// startTime reads a process's start time; a zombie counts as gone.
func startTime(pid int) (uint64, error) {
	st, err := sandbox.ReadProcStat(pid)
	if err != nil {
		return 0, err
	}
	if st.State == "Z" || st.State == "X" {
		return 0, errors.New("zombie")
	}
	return st.Start, nil
}

// groupAlive says whether a process of group pgid still runs. Zombies do
// not count: when limbs serve was restarted, the sandbox's processes are
// no longer its children, and an init that does not reap (a container
// without --init) would leave them zombies forever.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	sts, err := sandbox.ProcStats()
	if err != nil {
		return true
	}
	for _, st := range sts {
		if st.Pgrp == pgid && st.State != "Z" && st.State != "X" {
			return true
		}
	}
	return false
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
