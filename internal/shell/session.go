// Package shell runs persistent interactive shells on pseudo-terminals and
// knows, from the shell itself, exactly where each command's output starts
// and ends, with its exit status and working directory.
//
// It must never guess a command boundary from timing or text: boundaries
// come only from marker sequences carrying the session's secret token,
// bash's ends proven on its end-of-command channel (endchan.go), and
// nothing on the hot path polls or sleeps.
//
// Every end of a shell (restart, delete, the daemon's shutdown) goes
// through one mechanism that stops all of the session's processes before
// it kills them, so that a fork bomb cannot outrun it; kill.go describes
// it, and which goroutine reads, waits for and closes each shell.
//
// # User hooks and traps
//
// bash sources each command from a file (rc.go: runLine, cmdPrefix), so
// that it runs as bash -c runs a script's lines (not interactive, LINENO
// from 1), and what the user changes in the shell's hooks cannot move its
// end: limbs' steps write their trace to /dev/null, limbs' trap function
// wraps DEBUG, RETURN and ERR actions so that they skip limbs' steps,
// functrace is on only while source starts (it would keep a DEBUG trap
// off otherwise), and the keys limbs types are bound again after a
// command that called bind. What still differs from bash -c (trap -p
// shows wrapped actions, a top-level trap - ERR takes effect at the end
// of the command, BASH_SOURCE and return are those of a sourced file,
// PS1 and PROMPT_COMMAND hold limbs' hooks) is listed in docs/api.md
// ("What a user may change"), and FuzzHookChanges (internal/runtime)
// checks the rest against bash -c.
//
// # Concurrency
//
// Goroutines of a session, and what each owns:
//   - the read loop (Session.readLoop), one per shell: the only reader of
//     the terminal master; it owns the parser (markers.go), whose terminal
//     modes (appCursor, paste) it publishes as atomics for Input to load;
//     it appends to the output stream and ends commands (under mu);
//   - the waiter (proc.wait), one per shell: the only caller of Wait; it
//     closes exited and may hang the terminal up (kill.go);
//   - the end channel's reader and backstop timer (endchan.go), per bash;
//   - the persist loop (Session.persistLoop): writes session.json and the
//     logs of finished commands, until close stops it;
//   - a command's timeout timer, and the callers (HTTP handlers) of Exec,
//     Wait, Input, Interrupt, Screen, Restart and Delete, any number at
//     once: they wait on a command's done channel and on the stream's
//     change channel, never on the read loop itself; stop, killTree and
//     waiting() run in the caller's goroutine.
//
// Data: mu guards the session's fields (the shell, the running and the
// last command, cwd, sizes) and every command's fields except those of its
// log (logMu); the stream has its own lock; the terminal master is written
// only under writeMu, never with mu held (a full input buffer would stall
// the read loop behind it); the emulator is guarded by emuMu.
//
// Lock order (outer first; no other nesting): closeMu, then startMu, then
// persistMu or a command's logMu, then mu, then the stream's lock.
// Manager.mu is never held while a session lock is taken; proc.killMu is
// taken only by killTree, which is never called with mu held. close runs once:
// a second caller (Delete racing the daemon's Close) waits for the first.
package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/limbs-dev/limbs/internal/screen"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Session is one persistent shell.
type Session struct {
	m         *Manager
	id, name  string
	created   time.Time
	dir       string // state: survives daemon and machine restarts
	rdir      string // scratch on a memory filesystem, the shell's (see Identity)
	hdir      string // where the shell keeps its history: dir, or the agent's directory in it
	token     string
	shellPath string
	env       []string
	reqEnv    map[string]string
	log       *slog.Logger
	out       *stream
	logs      *logAccount // the disk share of the command logs

	lastOut atomic.Int64 // unix nanoseconds of the newest output
	lastIn  atomic.Int64 // unix nanoseconds of the newest input

	waitChecks atomic.Int64 // rounds of waiting()'s settle loop (tests)

	startMu sync.Mutex // serialises shell starts
	writeMu sync.Mutex // serialises writes to the terminal

	mu       sync.Mutex
	p        *proc
	parser   *parser
	cols     int
	rows     int
	cwd      string
	restarts int
	nextCmd  int
	cur      *command     // the running command
	last     *command     // the newest finished one
	seq      int          // commands started, typed by us or by a person
	inputs   int          // writes of input and attach clients
	inputsAt int          // inputs at the newest command start or end
	deleted  bool         // removed for good
	closing  bool         // deleted, or the daemon is stopping: no new shell
	startErr string       // what a shell printed before dying at start-up
	cmdFile  *scratchFile // the command file the shell sources
	gap      gapState     // output between commands (between.go)
	// saving is open from an end marker until the shell shows it has
	// saved its environment (output after the marker: the prompt, or any
	// other marker); see envSavedLocked.
	saving chan struct{}
	// cand is the running command's newest end marker without its
	// message, and endStat the end file as limbsd wrote it (recover.go).
	cand    candidate
	endStat endFileStat
	// inflight counts chunks read from the terminal and not yet taken
	// in (recover.go).
	inflight atomic.Int64

	emuMu   sync.Mutex
	emu     emulator
	emuOff  int64
	resizes []resizeAt

	persistC    chan struct{}
	stopPersist chan struct{}

	closeMu   sync.Mutex // serialises close; guards the two below
	closeDone bool
	removed   bool

	persistMu sync.Mutex // serialises writeState and guards the three below
	savedEnv  []byte
	envBuf    []byte
	savedKey  stateKey // zero until session.json is first written
	// Finished commands whose log file the persist loop still has to
	// write. Guarded by mu.
	pendingLogs []*command
}

type resizeAt struct {
	off        int64
	cols, rows int
}

// command is one command's life: typed by Exec, or typed by a person on an
// attached terminal (text empty).
type command struct {
	id       string
	text     string
	logPath  string
	logMu    sync.Mutex // guards logf, logged and the fields of logState
	logf     *os.File
	logged   int64 // stream offset up to which the log file is written
	typedAt  time.Time
	started  bool
	startOff int64
	startAt  time.Time
	returned int64 // output up to here was returned already
	// clean is the output from startOff to cleanTo cleaned as it arrived,
	// kept until the first result, when it is that result's output (with
	// cleanMax as max_output); nil when the command is not cleaned ahead.
	clean    *screen.Text
	cleanMax int
	cleanTo  int64
	echo     []byte     // the terminal's echo of the typed line, until the start marker
	between  *gapRanges // output between the last command and this one, until reported
	ended    bool
	endOff   int64
	endAt    time.Time
	exitCode int
	status   string
	shellEnd bool
	replaced bool   // the shell was replaced by another (replaced.go)
	reported bool   // the final result was handed out
	stopping string // timeout or interrupted, once a stop began
	timer    *time.Timer
	done     chan struct{}
	logState

	// Recovery (recover.go): the watch timer and its period, whether a
	// check runs, and whether the command ended with no proven end.
	watch      *time.Timer
	watchEvery time.Duration
	checking   atomic.Bool
	pending    int // checks in a row that found the end message without its marker
	recovered  bool
	codeLost   bool
	endNote    string
}

// logState is what a command's log file holds (guarded by logMu). When
// the output outgrows twice the log's head (disk.go), the log keeps the
// head, and the tail from logTail is added at the end.
type logState struct {
	logCut   bool
	logTail  int64 // stream offset where the tail in the file starts; 0: none yet
	logSize  int64 // bytes in the file
	logErr   error // why the log is incomplete
	logFinal bool  // the log is written to the command's end
}

// Info describes the session.
func (s *Session) Info() wire.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.infoLocked()
}

func (s *Session) infoLocked() wire.Session {
	st := wire.StateIdle
	pid := 0
	switch {
	case s.p == nil:
		st = wire.StateExited
	case s.cur != nil:
		st = wire.StateRunning
	}
	if s.p != nil {
		pid = s.p.pid
	}
	return wire.Session{
		ID: s.id, Name: s.name, Cols: s.cols, Rows: s.rows, Cwd: s.cwd, State: st, Pid: pid,
		CreatedAt: s.created, Shell: s.shellPath, Restarts: s.restarts, OutputOffset: s.out.size(),
	}
}

// shell returns the live, ready shell, starting one (with the old cwd and
// exported environment) when there is none.
func (s *Session) shell(ctx context.Context) (*proc, error) {
	// The common case, a live shell at its prompt, needs no timer.
	s.mu.Lock()
	if p := s.p; p != nil && !s.closing && isClosed(p.ready) {
		s.mu.Unlock()
		return p, nil
	}
	s.mu.Unlock()
	s.startMu.Lock()
	defer s.startMu.Unlock()
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, fmt.Errorf("session %q was deleted or its daemon is stopping: %w", s.id, wire.ErrNotFound)
	}
	p := s.p
	if p == nil {
		var err error
		p, err = s.startLocked()
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	s.mu.Unlock()
	t := time.NewTimer(readyWait)
	defer t.Stop()
	select {
	case <-p.ready:
		// The first prompt is sampled before anything is typed into it
		// (prompt.go); it takes a few milliseconds, once per shell.
		p.awaitFirstPrompt()
		return p, nil
	case <-p.done:
		s.mu.Lock()
		msg := s.startErr
		s.mu.Unlock()
		return nil, fmt.Errorf("the shell %s exited while starting (status %d); it printed: %q; check that the image has a working shell, or pass another one in \"shell\": %w", s.shellPath, p.status, msg, wire.ErrUnavailable)
	case <-t.C:
		if err := p.killTree(); err != nil {
			s.log.Warn("ending a shell that showed no prompt", "err", err)
		}
		return nil, fmt.Errorf("the shell %s did not show a prompt within %s; check that it is an interactive POSIX shell: %w", s.shellPath, readyWait, wire.ErrUnavailable)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startLocked spawns a shell. s.mu is held.
func (s *Session) startLocked() (*proc, error) {
	// The newest saved environment: the scratch copy a shell of this
	// daemon wrote, else the one on disk from an earlier daemon.
	envFile := ""
	for _, f := range []string{filepath.Join(s.rdir, "env"), filepath.Join(s.dir, "env")} {
		if b, err := readScratch(f, nil); err == nil && bytes.HasSuffix(b, []byte(envEnd+"\n")) {
			envFile = f
			if f != filepath.Join(s.rdir, "env") && s.m.opts.Agent != nil {
				// The daemon's copy is not the shell's to read: hand it a
				// copy of its own.
				envFile = filepath.Join(s.rdir, "env.restored")
				if err := writeFile(envFile, b, 0o600); err != nil || s.m.opts.Agent.give(envFile) != nil {
					envFile = ""
				}
			}
			break
		}
	}
	cwd := s.cwd
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		cwd = s.m.opts.Workdir
		if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
			cwd = "/"
		}
	}
	bash := isBash(s.shellPath)
	rcPath := filepath.Join(s.rdir, "rc")
	var rc string
	if bash {
		rc = bashRC(s.token, s.hdir, s.rdir, cwd, envFile)
	} else {
		rc = shRC(s.token, cwd)
	}
	if err := writeFile(rcPath, []byte(rc), 0o600); err != nil {
		return nil, fmt.Errorf("writing the shell's rc file: %w", err)
	}
	if err := s.m.opts.Agent.give(rcPath); err != nil {
		return nil, fmt.Errorf("writing the shell's rc file: %w", err)
	}
	if bash {
		if err := s.writeEndFileLocked(); err != nil {
			return nil, fmt.Errorf("writing the shell's end file: %w", err)
		}
	}
	var ends *endChan
	var endFile *os.File
	if bash {
		var err error
		if ends, endFile, err = newEndChan(); err != nil {
			return nil, err
		}
	}
	p, err := spawn(s.shellPath, s.env, cwd, s.cols, s.rows, rcPath, s.m.opts.Agent, endFile)
	if endFile != nil {
		endFile.Close() // the shell has its copy
	}
	if err != nil {
		ends.close()
		return nil, err
	}
	p.startReaper()
	p.rc = rcPath
	s.p = p
	s.parser = newParser(s.token)
	s.gap = gapState{}
	if ends != nil {
		p.ends = ends
		ends.start(p.pid, s.log)
		s.parser.verify = ends.take
	}
	s.startErr = ""
	go s.readLoop(p, s.parser)
	if bash {
		// The rc is the first line the shell reads: no system or user rc
		// file runs before or instead of it.
		go s.write(p, []byte(" . "+shq(rcPath)+"\n"))
	}
	return p, nil
}

// write types b into p's terminal. It is never called with s.mu held: a
// full terminal input buffer would otherwise stall the read loop.
func (s *Session) write(p *proc, b []byte) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	p.typed.Add(1) // before the shell can see it: prompt.go
	_, err := p.ptmx.Write(b)
	return err
}

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
			n, errno = syscall.Read(int(fd), buf)
			if n > 0 {
				s.inflight.Add(1)
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
		startOff: -1, typedAt: time.Now(), done: make(chan struct{}),
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

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Restart replaces the shell, keeping cwd and exported environment.
func (s *Session) Restart(ctx context.Context) (wire.Session, error) {
	s.startMu.Lock()
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	var killErr error
	if p != nil {
		s.awaitEnvSave(p)
		killErr = p.killTree()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
	s.startMu.Unlock()
	if _, err := s.shell(ctx); err != nil {
		return wire.Session{}, err
	}
	if killErr != nil {
		return wire.Session{}, fmt.Errorf("session %q has a new shell, but %v: %w", s.id, killErr, wire.ErrUnavailable)
	}
	return s.Info(), nil
}

// Resize changes the terminal size.
func (s *Session) Resize(cols, rows int) (wire.Session, error) {
	if cols < 1 || rows < 1 || cols > 1000 || rows > 1000 {
		return wire.Session{}, fmt.Errorf("cols and rows must be between 1 and 1000, got %dx%d: %w", cols, rows, wire.ErrBadRequest)
	}
	s.mu.Lock()
	s.cols, s.rows = cols, rows
	if s.p != nil {
		s.p.setSize(cols, rows)
	}
	off := s.out.size()
	info := s.infoLocked()
	s.mu.Unlock()
	s.emuMu.Lock()
	s.resizes = append(s.resizes, resizeAt{off: off, cols: cols, rows: rows})
	s.emuMu.Unlock()
	s.persist()
	return info, nil
}

// screenLag bounds how much output the emulator replays when it has
// fallen behind: older output is skipped (a full-screen program redraws).
const screenLag = 2 << 20

// Screen renders what a terminal showing the session displays now. The
// emulator is fed lazily, here, so that it costs nothing on the read loop.
func (s *Session) Screen() (wire.Screen, error) {
	end := s.out.size()
	s.emuMu.Lock()
	defer s.emuMu.Unlock()
	if end-s.emuOff > screenLag {
		// Start afresh at the size in force there.
		from := end - screenLag
		cols, rows := s.sizeAt(from)
		s.emu.Close()
		s.emu = newEmulator(cols, rows)
		s.emuOff = from
	}
	buf := make([]byte, 64<<10)
	for s.emuOff < end {
		stop := end
		for len(s.resizes) > 0 && s.resizes[0].off <= s.emuOff {
			s.emu.Resize(s.resizes[0].cols, s.resizes[0].rows)
			s.resizes = s.resizes[1:]
		}
		if len(s.resizes) > 0 && s.resizes[0].off < stop {
			stop = s.resizes[0].off
		}
		n := min(int64(len(buf)), stop-s.emuOff)
		got, err := s.out.readAt(buf[:n], s.emuOff)
		if got > 0 {
			s.emu.Write(buf[:got])
			s.emuOff += int64(got)
		}
		if err != nil && got == 0 {
			break
		}
	}
	for len(s.resizes) > 0 && s.resizes[0].off <= s.emuOff {
		s.emu.Resize(s.resizes[0].cols, s.resizes[0].rows)
		s.resizes = s.resizes[1:]
	}
	return s.emu.Snapshot(), nil
}

// sizeAt is the terminal size in force at offset off; emuMu is held.
func (s *Session) sizeAt(off int64) (int, int) {
	s.mu.Lock()
	cols, rows := s.cols, s.rows
	s.mu.Unlock()
	for i := len(s.resizes) - 1; i >= 0; i-- {
		if s.resizes[i].off <= off {
			return s.resizes[i].cols, s.resizes[i].rows
		}
	}
	return cols, rows
}

// Output returns the raw output stream between absolute offsets from and to
// (to < 0 means up to now), and the number of bytes it will yield.
func (s *Session) Output(from, to int64) (io.Reader, int64, error) {
	end := s.out.size()
	if to < 0 {
		to = end
	}
	if from < 0 || from > to || to > end {
		return nil, 0, fmt.Errorf("range %d..%d is outside the output stream, which holds 0..%d: %w", from, to, end, wire.ErrBadRequest)
	}
	// A range that is not all kept is refused whole (never a short or
	// zero-filled answer): the error names the first missing range, so
	// that the caller can ask for the bytes around it.
	if sp, bad := s.out.missing(from, to); bad {
		return nil, 0, fmt.Errorf("session %s: %w", s.id, goneError(sp))
	}
	return s.out.reader(from, to), to - from, nil
}

// WriteInput types raw bytes into the terminal (attach clients).
func (s *Session) WriteInput(b []byte) error {
	p, err := s.shell(context.Background())
	if err != nil {
		return err
	}
	s.lastIn.Store(time.Now().UnixNano())
	s.mu.Lock()
	s.inputs++
	s.mu.Unlock()
	return s.write(p, b)
}

// NewReader follows the output stream from offset from (live after that);
// from < 0 means from the current end.
func (s *Session) NewReader(from int64) (*StreamReader, error) {
	end := s.out.size()
	if from < 0 {
		from = end
	}
	if from > end {
		return nil, fmt.Errorf("offset %d is past the end of the output stream (%d): %w", from, end, wire.ErrBadRequest)
	}
	return &StreamReader{s: s.out, off: from}, nil
}

// close ends the session's shell; remove also deletes its state. It runs
// once: a second call (Delete racing the daemon's Close) waits for the
// first, and removes the state if it asks to and the first did not.
func (s *Session) close(remove bool) {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closeDone {
		if remove && !s.removed {
			s.mu.Lock()
			s.deleted = true
			s.mu.Unlock()
			s.removeState()
		}
		return
	}
	s.closeDone = true
	s.mu.Lock()
	s.closing = true
	s.deleted = remove
	p := s.p
	c := s.cur
	s.mu.Unlock()
	if c != nil && c.timer != nil {
		c.timer.Stop()
	}
	if p != nil {
		if !remove {
			s.awaitEnvSave(p)
		}
		if err := p.killTree(); err != nil {
			s.log.Warn("ending the session's processes", "err", err)
		}
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
	close(s.stopPersist)
	if !remove {
		// The last state, and the logs of the last commands, for the
		// next daemon.
		s.writeState()
	}
	s.out.close()
	s.mu.Lock()
	if s.cmdFile != nil {
		s.cmdFile.close()
	}
	s.mu.Unlock()
	s.emuMu.Lock()
	s.emu.Close()
	s.emuMu.Unlock()
	if remove {
		s.removeState()
	}
}

// removeState deletes what a removed session kept on disk; closeMu is held.
func (s *Session) removeState() {
	s.removed = true
	_ = os.RemoveAll(s.dir)
	_ = os.RemoveAll(s.rdir)
	s.out.dropDisk()
	s.logs.drop()
}

// persist asks the persist loop to save the session's state; it never
// blocks the caller.
func (s *Session) persist() {
	select {
	case s.persistC <- struct{}{}:
	default:
	}
}

func (s *Session) persistLoop() {
	for {
		select {
		case <-s.persistC:
			s.writeState()
		case <-s.stopPersist:
			return
		}
	}
}

func (s *Session) writeState() {
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	s.out.sync()
	s.mu.Lock()
	ps := persisted{
		ID: s.id, Name: s.name, CreatedAt: s.created, Cols: s.cols, Rows: s.rows,
		Cwd: s.cwd, Shell: s.shellPath, Env: s.reqEnv, Restarts: s.restarts,
	}
	deleted := s.deleted
	logs := s.pendingLogs
	s.pendingLogs = nil
	s.mu.Unlock()
	if !deleted {
		for _, c := range logs {
			s.closeLog(c)
		}
	}
	if deleted {
		if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
			return
		}
	}
	// Each file is written only when it changed: the disk is slow to
	// create and truncate files, and most commands change nothing here.
	key := stateKey{ps.Name, ps.Cols, ps.Rows, ps.Cwd, ps.Shell, ps.Restarts}
	if key != s.savedKey {
		b, _ := json.MarshalIndent(ps, "", "  ")
		if err := writeFile(filepath.Join(s.dir, "session.json"), b, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("saving session state", "err", err)
		} else {
			s.savedKey = key
		}
	}
	// While the shell is still saving its environment after an end
	// marker the file is incomplete; envSavedLocked asks again when done.
	s.mu.Lock()
	saving := s.saving != nil
	s.mu.Unlock()
	if saving {
		return
	}
	env, err := readScratch(filepath.Join(s.rdir, "env"), s.envBuf)
	if err == nil {
		s.envBuf = env
		if bytes.HasSuffix(env, []byte(envEnd+"\n")) && !bytes.Equal(env, s.savedEnv) {
			if err := writeFile(filepath.Join(s.dir, "env"), env, 0o600); err == nil {
				s.savedEnv = append(s.savedEnv[:0], env...)
			}
		}
	}
}

// stateKey is what of a session's saved state can change after creation.
// No session's key is the zero value (the shell path and size are never
// empty), so the zero savedKey means nothing was written yet.
type stateKey struct {
	name       string
	cols, rows int
	cwd, shell string
	restarts   int
}
