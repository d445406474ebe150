package shell

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/limbs-dev/limbs/internal/screen"
	"github.com/limbs-dev/limbs/internal/wire"
)

func (s *Session) eventLocked(p *proc, ev event, ready bool) {
	switch ev.kind {
	case evStart:
		c := s.cur
		if c == nil {
			if s.inputs == s.inputsAt {
				// Nothing was typed since the last command started: this
				// start marker was printed by a process of an earlier
				// command (it can read the token), not by the shell.
				return
			}
			// A person typed a command on an attached terminal.
			c = s.newCommandLocked("")
			s.cur = c
			s.watchLocked(c)
		}
		if !c.started {
			s.inputsAt = s.inputs
			s.cand = candidate{}
			s.gapEndLocked(c)
			if c.text != "" {
				s.out.append(echoOf(c.text))
				c.echo = nil
			}
			c.started = true
			c.startOff = s.out.size()
			c.returned = c.startOff
			c.startAt = time.Now()
			s.noteStartedLocked(c)
			if h := s.logs.head; h > 0 {
				// The head of its log is cut from the stream last.
				s.out.keepRange(c.startOff, c.startOff+h)
			}
			if c.cleanMax > 0 {
				c.clean = screen.NewText(c.cleanMax)
				c.cleanTo = c.startOff
			}
			s.seq++
		}
	case evExit:
		if ev.cwd != "" {
			s.cwd = ev.cwd
		}
		s.persist()
	case evEnd:
		if s.saving == nil {
			s.saving = make(chan struct{})
		}
		if ev.cwd != "" {
			s.cwd = ev.cwd
		} else if d := cwdOf(p.pid); d != "" {
			s.cwd = d
		}
		if !ready {
			return
		}
		// What was typed into this command was for it: only input after
		// this prompt can start the next one.
		s.inputsAt = s.inputs
		if c := s.cur; c != nil {
			if !c.started && c.text != "" && p.bash {
				// limbs typed this command and bash prints its start
				// marker before anything of it runs (PS0, or the command
				// file's first step when PS0 cannot reach the terminal):
				// an end before it is the previous command's, which was
				// ended early (an interrupt that found its processes gone,
				// an end forged by the shell's own code) and has only now
				// come back to its prompt. It is no end of this one.
				s.log.Debug("an end before the command's start: the previous command's", "command", c.id, "status", ev.status)
				return
			}
			if !c.started {
				c.started = true
				c.startOff = s.out.size()
				c.returned = c.startOff
				s.seq++
			}
			s.finishLocked(c, ev.status, false)
		}
		s.persist()
	}
}

func (s *Session) newCommandLocked(text string) *command {
	s.nextCmd++
	id := "c_" + strconv.Itoa(s.nextCmd)
	c := &command{
		id: id, text: text, logPath: filepath.Join(s.dir, id+".log"),
		startOff: -1, typedAt: time.Now(), lastPid: lastPidUnknown, done: make(chan struct{}),
	}
	return c
}

func (s *Session) finishLocked(c *command, code int, shellEnd bool) {
	if c.ended {
		return
	}
	if len(c.echo) > 0 {
		// It ended before it started (the shell died): show what was
		// held back.
		s.out.append(c.echo)
		c.echo = nil
		c.startOff = s.out.size()
		c.returned = c.startOff
	}
	c.ended = true
	c.endOff = s.out.size()
	c.endAt = time.Now()
	c.exitCode = code
	c.shellEnd = shellEnd
	switch c.stopping {
	case "":
		c.status = wire.StatusExited
	default:
		c.status = c.stopping
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.watch != nil {
		c.watch.Stop()
	}
	s.cand = candidate{}
	s.pendingLogs = append(s.pendingLogs, c)
	if s.cur == c {
		s.cur = nil
	}
	s.persist() // writes the log file
	s.last = c
	if !c.recovered {
		s.noteFinishedLocked(c) // recover.go: once its end offset is known
	}
	close(c.done)
}

func (s *Session) onExit(p *proc) {
	s.mu.Lock()
	p.closePTY()
	if s.p != p {
		s.mu.Unlock()
		close(p.done)
		return
	}
	s.p = nil
	s.envSavedLocked()
	wasReady := isClosed(p.ready)
	if c := s.cur; c != nil {
		if !c.started {
			c.started = true
			c.startOff = s.out.size()
			c.returned = c.startOff
		}
		s.finishLocked(c, p.status, true)
	}
	s.noteExitLocked(p)
	if wasReady {
		s.restarts++
	}
	deleted := s.closing
	s.mu.Unlock()
	close(p.done)
	s.log.Info("shell exited", "status", p.status)
	if wasReady && !deleted {
		// The next caller, and anyone attached, gets a fresh shell in the
		// old cwd with the old exported environment.
		go func() {
			if _, err := s.shell(context.Background()); err != nil {
				s.log.Warn("restarting shell", "err", err)
			}
		}()
	}
}

// echoOf is what a terminal would have shown had text been typed at the
// prompt: its lines, ended by CR LF.
func echoOf(text string) []byte {
	return []byte(strings.ReplaceAll(strings.TrimRight(text, "\n"), "\n", "\r\n") + "\r\n")
}
