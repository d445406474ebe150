package shell

import (
	"io"
	"os"
	goruntime "runtime"
	"syscall"
	"time"
)

// readLoop is the only reader of p's terminal.
func (s *Session) readLoop(p *proc, ps *parser) {
	buf := make([]byte, 64<<10)
	rc, err := p.ptmx.SyscallConn()
	for err == nil {
		var n int
		n, err = s.readPTY(rc, buf)
		// A command that ended has a caller waiting: it answers before
		// the loop reads on (with one scheduler thread it would wait).
		ended := n > 0 && s.ingest(p, ps, buf[:n])
		if n > 0 {
			s.inflight.Add(-1)
		}
		if ended {
			goruntime.Gosched()
		}
	}
	// EIO once the last process holding the terminal has gone, or the
	// master was closed by killTree.
	close(p.readEnded)
	t := time.NewTimer(hangupWait)
	select {
	case <-p.exited:
	case <-t.C:
		// The shell lives on without its terminal.
		if err := p.killTree(); err != nil {
			s.log.Warn("ending a shell that closed its terminal", "err", err)
		}
		<-p.exited
	}
	t.Stop()
	p.ends.close()
	s.onExit(p)
}

// readPTY reads from the terminal master through its raw connection. When
// the terminal has nothing more, the output kept in memory goes to disk
// before the loop waits (see stream.sync).
func (s *Session) readPTY(rc syscall.RawConn, buf []byte) (int, error) {
	var n int
	var errno error
	err := rc.Read(func(fd uintptr) bool {
		for {
			// Counted before the read: between a read that took the
			// terminal's last bytes and a count after it, the terminal
			// and the counter would both say nothing is on its way
			// (drained), with an end marker in buf.
			s.inflight.Add(1)
			n, errno = syscall.Read(int(fd), buf)
			if n <= 0 {
				s.inflight.Add(-1)
			}
			switch errno {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				s.out.sync()
				return false
			}
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != nil:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// ingest takes in a chunk of the terminal's output and reports whether a
// command ended in it.
func (s *Session) ingest(p *proc, ps *parser, chunk []byte) (ended bool) {
	data, evs := ps.feed(chunk)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p != s.p {
		return false
	}
	pos := 0
	ready := isClosed(p.ready)
	for _, ev := range evs {
		if ready {
			s.appendLocked(data[pos:ev.pos])
		} else {
			s.noteStartup(data[pos:ev.pos])
		}
		if ev.kind == evCandidate {
			// An end marker without its message: output, and an end only
			// once the shell is at its prompt (recover.go).
			pos = ev.pos
			s.candidateLocked(ev)
			continue
		}
		if ev.pos > pos || ev.kind != evEnd {
			s.envSavedLocked()
		}
		pos = ev.pos
		s.eventLocked(p, ev, ready)
		if ev.kind == evEnd {
			s.gapStartLocked()
		}
		ended = ended || ev.kind != evStart
		if ev.kind == evEnd {
			p.learnPromptSoon(p.typed.Load())
		}
		if !ready && ev.kind == evEnd {
			ready = true
			if p.rc != "" {
				os.Remove(p.rc)
			}
			p.image = imageOf(p.pid)
			close(p.ready)
		}
	}
	if pos < len(data) {
		s.envSavedLocked()
	}
	if ready {
		s.appendLocked(data[pos:])
	} else {
		s.noteStartup(data[pos:])
	}
	return ended
}

// envSavedLocked notes that the shell finished saving its environment
// after an end marker: it printed something after it, which it only does
// once the prompt function returned. The persist loop then copies the
// save to disk.
func (s *Session) envSavedLocked() {
	if s.saving != nil {
		close(s.saving)
		s.saving = nil
		s.persist()
	}
}

// awaitEnvSave gives a shell that just ended a command the moment it takes
// to save its environment before it is killed on purpose.
func (s *Session) awaitEnvSave(p *proc) {
	s.mu.Lock()
	ch := s.saving
	s.mu.Unlock()
	if ch == nil {
		return
	}
	t := time.NewTimer(envSaveWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-p.done:
	case <-t.C:
	}
}

func (s *Session) noteStartup(b []byte) {
	if len(s.startErr) < 4096 {
		s.startErr += string(b[:min(len(b), 4096-len(s.startErr))])
	}
}

// maxEcho bounds the echo of a typed command line held back until its
// start marker.
const maxEcho = 64 << 10

func (s *Session) appendLocked(d []byte) {
	if len(d) == 0 {
		return
	}
	if c := s.cur; c != nil && !c.started && c.text != "" && len(c.echo)+len(d) <= maxEcho {
		// The terminal's echo of the line limbs typed to run a command
		// file: the stream shows the command itself instead.
		c.echo = append(c.echo, d...)
		s.gap.afterEnd = false // the prompt, if it was in it
		return
	}
	off := s.out.append(d)
	if c := s.cur; c != nil && c.waitNoted {
		s.noteWaitingLocked(c, false, false)
	}
	if s.cur == nil {
		s.gapOutputLocked(off, len(d))
	}
	s.lastOut.Store(time.Now().UnixNano())
	if c := s.cur; c != nil && c.started {
		if c.clean != nil && c.cleanTo == off {
			_, _ = c.clean.Write(d)
			c.cleanTo += int64(len(d))
		}
	}
}
