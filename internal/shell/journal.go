package shell

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Recorder is where a Manager records what happens in its sessions (limbsd:
// a *journal.Journal). Both methods must return at once: they are called
// on the read loop, often with a session's mu held, and must take no lock
// of this package.
type Recorder interface {
	// Append records ev with data and returns its seq.
	Append(ev wire.Event, data any) uint64
	// Output notes that session's output stream got p at offset off.
	Output(session string, off int64, p []byte)
}

// outputEnder is the part of a Recorder that knows where a session's
// output events ended (journal.Journal.OutputEnd).
type outputEnder interface {
	OutputEnd(session string) (int64, bool)
}

// maxReplay bounds the output a restored session hands the journal again.
const maxReplay = 64 << 20

// alignJournal makes a restored session's stream and the journal agree on
// where the output ends. A limbsd killed with kill -9 may have written
// more to the journal than to stream.log (written in blocks, see
// syncAhead): the stream then continues at the journal's end, the bytes
// between a hole (410 gone; the journal has them). Or the other way
// round: the journal gets the stream's bytes it misses (the newest
// maxReplay of them; the rest is a hole of the output events).
func (m *Manager) alignJournal(id string, out *stream) {
	oe, ok := m.opts.Journal.(outputEnder)
	if !ok {
		return
	}
	je, known := oe.OutputEnd(id)
	end := out.size()
	switch {
	case !known || je == end:
	case je > end:
		out.skipTo(je)
	default:
		from := max(je, end-maxReplay)
		buf := make([]byte, 64<<10)
		for off := from; off < end; {
			n, err := out.readAt(buf[:min(int64(len(buf)), end-off)], off)
			if n > 0 {
				m.opts.Journal.Output(id, off, buf[:n])
				off += int64(n)
				continue
			}
			var g *wire.GoneError
			if errors.As(err, &g) && g.To > off {
				off = g.To
				continue
			}
			break
		}
	}
}

// maxEventText bounds the text of one command.started or input event; the
// command's log has all of it.
const maxEventText = 64 << 10

// Who typed into a session last: the via of a command a person started.
const (
	viaExec   = "exec"
	viaInput  = "input"
	viaAttach = "attach"
)

// note records an event of the session; it returns its seq (0 without a
// journal).
func (s *Session) note(typ wire.EventType, src wire.EventSource, cmd string, cause uint64, data any) uint64 {
	j := s.m.opts.Journal
	if j == nil {
		return 0
	}
	return j.Append(wire.Event{Session: s.id, Command: cmd, Type: typ, Source: src, Cause: cause}, data)
}

func cut(text string) string {
	if len(text) > maxEventText {
		return text[:maxEventText]
	}
	return text
}

// cutKeys bounds the keys of one input event as cut bounds its text: an
// input call may name millions of keys (its body is bounded at 64 MiB),
// and one event's record must stay far below what the journal reads back.
func cutKeys(keys []string) []string {
	n := 0
	for i, k := range keys {
		n += len(k) + 3 // as JSON: quotes and a comma
		if n > maxEventText {
			return keys[:i]
		}
	}
	return keys
}

// noteStartedLocked records c's start once; s.mu is held.
func (s *Session) noteStartedLocked(c *command) {
	if c.startSeq != 0 || s.m.opts.Journal == nil {
		return
	}
	via, src := viaExec, wire.SourceAPI
	if c.text == "" {
		via = s.lastVia
		if via == "" {
			via = viaAttach
		}
		if via == viaAttach {
			src = wire.SourceTerminal
		}
	}
	c.via = via
	c.startSeq = s.note(wire.EventCommandStarted, src, c.id, 0, wire.CommandStartedData{
		Text: cut(c.text), Cwd: s.cwd, Via: via, OffsetStart: c.startOff,
	})
}

// noteFinishedLocked records c's end; s.mu is held.
func (s *Session) noteFinishedLocked(c *command) {
	if s.m.opts.Journal == nil || c.endSeq != 0 {
		return
	}
	s.noteStartedLocked(c)
	d := wire.CommandFinishedData{
		Status: c.status, Cwd: s.cwd, DurationMs: c.endAt.Sub(c.typedAt).Milliseconds(),
		OffsetStart: c.startOff, OffsetEnd: c.endOff,
	}
	code := c.exitCode
	d.ExitCode = &code
	if code > 128 && code <= 128+64 {
		// bash reports a command killed by signal N as 128+N.
		d.Signal = unix.SignalName(unix.Signal(code - 128))
	}
	switch {
	case c.replaced:
		d.ExitCode, d.Signal = nil, ""
		d.Reason = "the shell was replaced by another program at its prompt"
	case c.recovered:
		d.Reason = c.endNote
		if c.codeLost {
			d.ExitCode, d.Signal = nil, ""
		}
	case c.shellEnd:
		d.Reason = "the shell exited while the command ran"
	}
	src := wire.SourceAPI
	if c.via == viaAttach {
		src = wire.SourceTerminal
	}
	c.endSeq = s.note(wire.EventCommandFinished, src, c.id, c.startSeq, d)
}

// noteInput records input typed into the session, masked while the
// terminal's echo is off (a password prompt).
func (s *Session) noteInput(p *proc, via, text string, keys []string) {
	if s.m.opts.Journal == nil {
		return
	}
	// Readline at the shell's own prompt is raw too: a command line that
	// names a token is no password.
	masked := p != nil && (p.echoOff() || (p.rawNoEcho() && !p.atPrompt() && s.passwordPrompt()))
	if masked {
		text = strings.Repeat("*", len(text))
		// A key that is not a named key is typed text too.
		ks := make([]string, len(keys))
		for i, k := range keys {
			if isNamedKey(k) {
				ks[i] = k
			} else {
				ks[i] = strings.Repeat("*", len(k))
			}
		}
		keys = ks
	}
	s.mu.Lock()
	s.lastVia = via
	cmd := ""
	if s.cur != nil {
		cmd = s.cur.id
	}
	s.mu.Unlock()
	src := wire.SourceAPI
	if via == viaAttach {
		src = wire.SourceTerminal
	}
	s.note(wire.EventInput, src, cmd, 0, wire.InputData{Text: cut(text), Keys: cutKeys(keys), Masked: masked})
}

// secretPrompt is what a prompt for a secret says.
var secretPrompt = regexp.MustCompile(`(?i)(password|passphrase|passcode|passwd|\bpin\b|token|secret|credential|api[ _-]?key)`)

// passwordPrompt reports whether the screen's cursor line, or the line
// above it, asks for a secret: a prompt that reads key by key in raw
// mode (ECHO and ICANON clear, as an editor also has) is told from an
// editor by what it shows.
func (s *Session) passwordPrompt() bool {
	sc, err := s.Screen()
	if err != nil {
		return false
	}
	for r := sc.Cursor.Row - 1; r <= sc.Cursor.Row; r++ {
		if r >= 0 && r < len(sc.Lines) && secretPrompt.MatchString(sc.Lines[r]) {
			return true
		}
	}
	return false
}

// isNamedKey reports whether k names a key (Enter, C-c, Up) rather than
// being text.
func isNamedKey(k string) bool {
	_, err := encodeInput("", []string{k}, false, false)
	return err == nil && len(k) > 1
}

// noteSignal records a signal the stop of c sent.
func (s *Session) noteSignal(c *command, sig unix.Signal, why string) {
	switch why {
	case wire.StatusTimeout:
		why = "timeout"
	case wire.StatusInterrupted:
		why = "interrupt"
	}
	s.note(wire.EventCommandSignal, wire.SourceSystem, c.id, c.startSeq, wire.SignalData{Signal: unix.SignalName(sig), Why: why})
}

// noteWaitingLocked records that c began or stopped waiting for input;
// s.mu is held.
func (s *Session) noteWaitingLocked(c *command, waiting, echoOff bool) {
	if c.waitNoted == waiting || s.m.opts.Journal == nil {
		return
	}
	c.waitNoted = waiting
	d := wire.WaitingData{Waiting: waiting}
	if waiting {
		d.EchoOff = echoOff
	}
	s.note(wire.EventCommandWaiting, wire.SourceSystem, c.id, c.startSeq, d)
}

// noteShellStartLocked records a new shell of a session that had one;
// s.mu is held.
func (s *Session) noteShellStartLocked() {
	s.shellStarts++
	if s.shellStarts == 1 && !s.restored {
		return
	}
	why, src := s.endWhy, wire.SourceSystem
	switch {
	case s.shellStarts == 1:
		why = "limbsd restarted"
	case why == "":
		why = "the shell exited"
	case why == reasonRestart:
		src = wire.SourceAPI
	}
	s.endWhy = ""
	s.note(wire.EventSessionRestarted, src, "", 0, wire.SessionData{Name: s.name, Cwd: s.cwd, Reason: why, Cols: s.cols, Rows: s.rows})
}

// Reasons a shell ended on purpose.
const (
	reasonRestart = "restart requested"
	reasonDeleted = "session deleted"
	reasonStop    = "limbsd stopping"
)

// noteExitLocked records the end of the session's shell; s.mu is held.
func (s *Session) noteExitLocked(p *proc) {
	why := s.endWhy
	switch {
	case s.closing && s.deleted:
		why = reasonDeleted
	case s.closing:
		why = reasonStop
	case why == "":
		why = "the shell exited with status " + strconv.Itoa(p.status)
	}
	s.note(wire.EventSessionExited, wire.SourceSystem, "", 0, wire.SessionData{Name: s.name, Cwd: s.cwd, Reason: why})
}

// Running names a command that runs now.
type Running struct {
	Session, Command string
}

// runningGrace is how long after its end a command is still named as
// running: the file watcher reads a change after the command made it, and
// the read loop may see a command's start after its first step ran.
const runningGrace = 200 * time.Millisecond

// Running lists the commands running now (typed, whether or not their
// start marker was read yet) or that ended within runningGrace, for the
// file watcher to name the commands a change happened under.
func (m *Manager) Running() []Running {
	var out []Running
	now := time.Now()
	for _, s := range m.List() {
		s.mu.Lock()
		if c := s.cur; c != nil {
			out = append(out, Running{s.id, c.id})
		} else if c := s.last; c != nil && c.ended && now.Sub(c.endAt) < runningGrace {
			out = append(out, Running{s.id, c.id})
		}
		s.mu.Unlock()
	}
	return out
}

// noteSession records a session event from outside the session's locks.
func (s *Session) noteSession(typ wire.EventType, src wire.EventSource, d wire.SessionData) {
	s.note(typ, src, "", 0, d)
}
