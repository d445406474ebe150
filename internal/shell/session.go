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
//   - an until watcher (until.go) per Exec, Wait or Input call that asks
//     for until conditions, for the life of that call: it reads the
//     stream, takes mu briefly and emuMu through Screen, and hands the
//     first condition that held to the call;
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
// persistMu or a command's logMu, then mu, then the stream's lock. The
// journal (Options.Journal, journal.go) is told of events with mu held
// and of output after the stream's lock is released; its own lock is
// innermost and it calls nothing back.
// Manager.mu is never held while a session lock is taken; proc.killMu is
// taken only by killTree, which is never called with mu held. close runs once:
// a second caller (Delete racing the daemon's Close) waits for the first.
package shell

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
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

	mu     sync.Mutex
	p      *proc
	parser *parser
	cols   int
	rows   int
	cwd    string
	// lostCwd is the cwd the shell was to start in when it was missing
	// (the workspace not mounted yet), and got the workdir instead.
	lostCwd  string
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

	// The journal (journal.go), guarded by mu: who typed last, how many
	// shells this daemon started, why the shell is being ended, and
	// whether the session was restored from an earlier daemon.
	lastVia     string
	shellStarts int
	endWhy      string
	restored    bool

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
	lastPid  int // the last pid allocated before limbs typed it (pidwindow.go)
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

	// The journal's seqs of its start and end, who started it, and
	// whether a wait for input was recorded (journal.go); guarded by mu.
	startSeq, endSeq uint64
	via              string
	waitNoted        bool

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
	if cwd != s.cwd { // s.mu is held
		s.lostCwd = s.cwd
	} else {
		s.lostCwd = ""
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
	s.noteShellStartLocked()
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
		s.mu.Lock()
		s.endWhy = reasonRestart
		s.mu.Unlock()
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
