// Package shell runs persistent interactive shells on pseudo-terminals and
// knows, from the shell itself, exactly where each command's output starts
// and ends, with its exit status and working directory.
//
// It must never guess a command boundary from timing or text: boundaries
// come only from marker sequences carrying the session's secret token, and
// nothing on the hot path polls or sleeps.
package shell

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/limbs-dev/limbs/internal/screen"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Options configure a Manager.
type Options struct {
	// StateDir holds per-session state and output logs (StateDir/sessions/ID).
	StateDir string
	// Workdir is the default working directory of new sessions.
	Workdir string
	// Shell is the default shell; empty means bash when found, else sh.
	Shell string
	// Env is the base environment of every shell (os.Environ() if nil).
	Env    []string
	Logger *slog.Logger
}

// Timing of the stop escalation and of input detection. Variables so that
// tests of the escalation itself can shorten them.
var (
	graceInt    = time.Second // after SIGINT, before SIGTERM
	graceTerm   = time.Second // after SIGTERM, before SIGKILL
	quietPeriod = time.Second // no output for this long: look for a prompt
	settleIdle  = 300 * time.Millisecond
	readyWait   = 20 * time.Second
)

const (
	defaultCols = 160
	defaultRows = 40
)

// Manager owns every session of one daemon.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool
	// runDir is scratch space on a memory filesystem when there is one:
	// command files and the shells' environment saves are written there on
	// every command, and creating files on a disk costs 0.3 ms or more.
	runDir string
}

var resetSignals sync.Once

// NewManager restores the sessions persisted under opts.StateDir.
func NewManager(ctx context.Context, opts Options) (*Manager, error) {
	if opts.StateDir == "" {
		return nil, fmt.Errorf("no state directory given: %w", wire.ErrBadRequest)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	if opts.Workdir == "" {
		opts.Workdir, _ = os.Getwd()
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "sessions"), 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	// Signals the daemon inherited as ignored (a daemon started with & has
	// SIGINT and SIGQUIT ignored; some supervisors ignore SIGPIPE) would
	// be inherited by every shell and program: Ctrl-C would do nothing and
	// `yes | head` would print EPIPE errors. Handling them here makes
	// exec reset them to their defaults in children.
	resetSignals.Do(func() {
		for _, sig := range []os.Signal{syscall.SIGPIPE, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP} {
			if sig == syscall.SIGPIPE || signal.Ignored(sig) {
				signal.Notify(make(chan os.Signal, 1), sig)
			}
		}
	})
	m := &Manager{opts: opts, log: opts.Logger, sessions: map[string]*Session{}, runDir: makeRunDir(opts.StateDir)}
	if err := m.restore(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// persisted is StateDir/sessions/ID/session.json.
type persisted struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	CreatedAt time.Time         `json:"created_at"`
	Cols      int               `json:"cols"`
	Rows      int               `json:"rows"`
	Cwd       string            `json:"cwd"`
	Shell     string            `json:"shell"`
	Env       map[string]string `json:"env,omitempty"`
	NextCmd   int               `json:"next_cmd,omitempty"` // read by old state; ids come from the c_N.log files
	Restarts  int               `json:"restarts"`
}

func (m *Manager) restore(ctx context.Context) error {
	dirs, err := os.ReadDir(filepath.Join(m.opts.StateDir, "sessions"))
	if err != nil {
		return err
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(m.opts.StateDir, "sessions", d.Name(), "session.json"))
		if err != nil {
			continue
		}
		var ps persisted
		if err := json.Unmarshal(b, &ps); err != nil || ps.ID != d.Name() {
			m.log.Warn("skipping unreadable session state", "session", d.Name(), "err", err)
			continue
		}
		s, err := m.newSession(ps)
		if err != nil {
			m.log.Warn("cannot restore session", "session", ps.ID, "err", err)
			continue
		}
		m.sessions[s.id] = s
		go func() {
			if _, err := s.shell(context.WithoutCancel(ctx)); err != nil {
				m.log.Warn("restoring session shell", "session", s.id, "err", err)
			}
		}()
	}
	return nil
}

// makeRunDir makes a private directory on /dev/shm, or in the state
// directory when there is no usable /dev/shm.
func makeRunDir(stateDir string) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "limbs-"); err == nil {
			return d
		}
	}
	d := filepath.Join(stateDir, "run")
	_ = os.RemoveAll(d)
	_ = os.MkdirAll(d, 0o700)
	return d
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Create starts a new session.
func (m *Manager) Create(ctx context.Context, req wire.CreateSession) (*Session, error) {
	if req.Cols < 0 || req.Rows < 0 || req.Cols > 1000 || req.Rows > 1000 {
		return nil, fmt.Errorf("cols and rows must be between 1 and 1000, got %dx%d: %w", req.Cols, req.Rows, wire.ErrBadRequest)
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("env name %q is not a valid variable name: %w", k, wire.ErrBadRequest)
		}
	}
	shellPath, err := findShell(req.Shell)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, wire.ErrBadRequest)
	}
	if req.Shell == "" && m.opts.Shell != "" {
		if shellPath, err = findShell(m.opts.Shell); err != nil {
			return nil, err
		}
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = m.opts.Workdir
	} else if !filepath.IsAbs(cwd) {
		cwd = filepath.Join(m.opts.Workdir, cwd)
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cwd %q is not an existing directory: create it first or leave cwd out: %w", cwd, wire.ErrBadRequest)
	}
	ps := persisted{
		ID: "s_" + randomHex(6), Name: req.Name, CreatedAt: time.Now().UTC(),
		Cols: req.Cols, Rows: req.Rows, Cwd: cwd, Shell: shellPath, Env: req.Env,
	}
	if ps.Cols == 0 {
		ps.Cols = defaultCols
	}
	if ps.Rows == 0 {
		ps.Rows = defaultRows
	}
	if ps.Name == "" {
		ps.Name = ps.ID
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("daemon is shutting down: %w", wire.ErrUnavailable)
	}
	for _, o := range m.sessions {
		if o.name == ps.Name {
			m.mu.Unlock()
			return nil, fmt.Errorf("a session named %q exists already (%s): use it, delete it, or pick another name: %w", ps.Name, o.id, wire.ErrConflict)
		}
	}
	s, err := m.newSession(ps)
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	m.sessions[s.id] = s
	m.mu.Unlock()
	if _, err := s.shell(ctx); err != nil {
		_ = m.Delete(s.id)
		return nil, err
	}
	return s, nil
}

// Get finds a session by id or name (wire.ErrNotFound otherwise).
func (m *Manager) Get(idOrName string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[idOrName]; ok {
		return s, nil
	}
	for _, s := range m.sessions {
		if s.name == idOrName {
			return s, nil
		}
	}
	return nil, fmt.Errorf("session %q does not exist: list sessions with GET /v1/sessions or create it with POST /v1/sessions: %w", idOrName, wire.ErrNotFound)
}

// List returns every session, oldest first.
func (m *Manager) List() []*Session {
	m.mu.Lock()
	out := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, s)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].created.Equal(out[j].created) {
			return out[i].created.Before(out[j].created)
		}
		return out[i].id < out[j].id
	})
	return out
}

// Delete kills the session's whole process tree and forgets it.
func (m *Manager) Delete(idOrName string) error {
	s, err := m.Get(idOrName)
	if err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.sessions, s.id)
	m.mu.Unlock()
	s.close(true)
	return nil
}

// Close kills every shell; their state stays on disk for the next daemon.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() { defer wg.Done(); s.close(false) }()
	}
	wg.Wait()
	_ = os.RemoveAll(m.runDir)
	return nil
}

func (m *Manager) newSession(ps persisted) (*Session, error) {
	dir := filepath.Join(m.opts.StateDir, "sessions", ps.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("session state directory: %w", err)
	}
	rdir := filepath.Join(m.runDir, ps.ID)
	if err := os.MkdirAll(rdir, 0o700); err != nil {
		return nil, fmt.Errorf("session run directory: %w", err)
	}
	ps.NextCmd = max(ps.NextCmd, lastCommandNumber(dir))
	out, err := openStream(filepath.Join(dir, "stream.log"))
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(m.opts.Env)+len(agentEnv)+len(ps.Env))
	env = append(env, m.opts.Env...)
	env = append(env, agentEnv...)
	for k, v := range ps.Env {
		env = append(env, k+"="+v)
	}
	s := &Session{
		m: m, id: ps.ID, name: ps.Name, created: ps.CreatedAt, dir: dir, rdir: rdir,
		token: randomHex(16), shellPath: ps.Shell, env: dedupEnv(env), reqEnv: ps.Env,
		log: m.log.With("session", ps.ID), out: out,
		cols: ps.Cols, rows: ps.Rows, cwd: ps.Cwd, nextCmd: ps.NextCmd, restarts: ps.Restarts,
		persistC: make(chan struct{}, 1), stopPersist: make(chan struct{}),
		emu: newEmulator(ps.Cols, ps.Rows), emuOff: out.size(),
	}
	go s.persistLoop()
	s.persist()
	return s, nil
}

// lastCommandNumber is the highest N of the c_N.log files in dir, so that
// command ids never repeat across daemon restarts.
func lastCommandNumber(dir string) int {
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, "c_") && strings.HasSuffix(name, ".log") {
			if v, err := strconv.Atoi(name[2 : len(name)-4]); err == nil {
				n = max(n, v)
			}
		}
	}
	return n
}

// dedupEnv keeps the last value of each variable.
func dedupEnv(env []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// Session is one persistent shell.
type Session struct {
	m         *Manager
	id, name  string
	created   time.Time
	dir       string // state: survives daemon and machine restarts
	rdir      string // scratch on a memory filesystem
	token     string
	shellPath string
	env       []string
	reqEnv    map[string]string
	log       *slog.Logger
	out       *stream

	lastOut atomic.Int64 // unix nanoseconds of the newest output
	lastIn  atomic.Int64 // unix nanoseconds of the newest input

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
	cur      *command // the running command
	last     *command // the newest finished one
	seq      int      // commands started, typed by us or by a person
	deleted  bool     // removed for good
	closing  bool     // deleted, or the daemon is stopping: no new shell
	startErr string   // what a shell printed before dying at start-up

	emuMu   sync.Mutex
	emu     emulator
	emuOff  int64
	resizes []resizeAt

	persistC    chan struct{}
	stopPersist chan struct{}

	persistMu  sync.Mutex // serialises writeState
	savedEnv   []byte
	savedState []byte
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
	logMu    sync.Mutex // guards logf and logged
	logf     *os.File
	logged   int64 // stream offset up to which the log file is written
	typedAt  time.Time
	started  bool
	startOff int64
	startAt  time.Time
	returned int64  // output up to here was returned already
	echo     []byte // the terminal's echo of the typed line, until the start marker
	ended    bool
	endOff   int64
	endAt    time.Time
	exitCode int
	status   string
	shellEnd bool
	reported bool   // the final result was handed out
	stopping string // timeout or interrupted, once a stop began
	timer    *time.Timer
	done     chan struct{}
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
		return p, nil
	case <-p.done:
		s.mu.Lock()
		msg := s.startErr
		s.mu.Unlock()
		return nil, fmt.Errorf("the shell %s exited while starting (status %d); it printed: %q; check that the image has a working shell, or pass another one in \"shell\": %w", s.shellPath, p.status, msg, wire.ErrUnavailable)
	case <-t.C:
		p.killTree()
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
		if b, err := os.ReadFile(f); err == nil && bytes.HasSuffix(b, []byte(envEnd+"\n")) {
			envFile = f
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
		rc = bashRC(s.token, s.dir, s.rdir, cwd, envFile)
	} else {
		rc = shRC(s.token, cwd)
	}
	if err := writeFile(rcPath, []byte(rc), 0o600); err != nil {
		return nil, fmt.Errorf("writing the shell's rc file: %w", err)
	}
	p, err := spawn(s.shellPath, s.env, cwd, s.cols, s.rows, rcPath)
	if err != nil {
		return nil, err
	}
	p.rc = rcPath
	s.p = p
	s.parser = newParser(s.token)
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
	_, err := p.ptmx.Write(b)
	return err
}

// readLoop is the only reader of p's terminal.
func (s *Session) readLoop(p *proc, ps *parser) {
	buf := make([]byte, 64<<10)
	for {
		n, err := p.ptmx.Read(buf)
		if n > 0 {
			s.ingest(p, ps, buf[:n])
		}
		if err != nil {
			break
		}
	}
	// EIO once the last process holding the terminal has gone.
	err := p.cmd.Wait()
	status := 0
	if p.cmd.ProcessState != nil {
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status = 128 + int(ws.Signal())
		} else {
			status = p.cmd.ProcessState.ExitCode()
		}
	} else if err != nil {
		status = 255
	}
	p.status = status
	s.onExit(p)
}

func (s *Session) ingest(p *proc, ps *parser, chunk []byte) {
	data, evs := ps.feed(chunk)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p != s.p {
		return
	}
	pos := 0
	ready := isClosed(p.ready)
	for _, ev := range evs {
		if ready {
			s.appendLocked(data[pos:ev.pos])
		} else {
			s.noteStartup(data[pos:ev.pos])
		}
		pos = ev.pos
		s.eventLocked(p, ev, ready)
		if !ready && ev.kind == evEnd {
			ready = true
			if p.rc != "" {
				os.Remove(p.rc)
			}
			close(p.ready)
		}
	}
	if ready {
		s.appendLocked(data[pos:])
	} else {
		s.noteStartup(data[pos:])
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
		return
	}
	s.out.append(d)
	s.lastOut.Store(time.Now().UnixNano())
}

func (s *Session) eventLocked(p *proc, ev event, ready bool) {
	switch ev.kind {
	case evStart:
		c := s.cur
		if c == nil {
			// A person typed a command on an attached terminal.
			c = s.newCommandLocked("")
			s.cur = c
		}
		if !c.started {
			if c.text != "" {
				s.out.append(echoOf(c.text))
				c.echo = nil
			}
			c.started = true
			c.startOff = s.out.size()
			c.returned = c.startOff
			c.startAt = time.Now()
			s.seq++
		}
	case evExit:
		if ev.cwd != "" {
			s.cwd = ev.cwd
		}
		s.persist()
	case evEnd:
		if ev.cwd != "" {
			s.cwd = ev.cwd
		} else if d := cwdOf(p.pid); d != "" {
			s.cwd = d
		}
		if !ready {
			return
		}
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
	s.persist() // makes the next command's log ahead
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
	if s.p != p {
		s.mu.Unlock()
		close(p.done)
		return
	}
	p.ptmx.Close()
	s.p = nil
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

// options of the exec family, with the documented defaults.
func durationOf(v *float64, def float64, what string) (time.Duration, error) {
	f := def
	if v != nil {
		f = *v
	}
	if f < 0 || f > 1e7 {
		return 0, fmt.Errorf("%s must be a number of seconds >= 0, got %v: %w", what, f, wire.ErrBadRequest)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// waitOptions reads yield_after and max_output, with their defaults.
func waitOptions(yieldAfter *float64, maxOutput *int) (time.Duration, int, error) {
	yield, err := durationOf(yieldAfter, wire.DefaultYieldAfter, "yield_after")
	if err != nil {
		return 0, 0, err
	}
	maxOut, err := maxOutputOf(maxOutput)
	return yield, maxOut, err
}

func maxOutputOf(v *int) (int, error) {
	if v == nil {
		return wire.DefaultMaxOutput, nil
	}
	if *v < 0 {
		return 0, fmt.Errorf("max_output must be >= 0, got %d: %w", *v, wire.ErrBadRequest)
	}
	return *v, nil
}

// Exec runs a command (wire.ErrBusy while another one runs).
func (s *Session) Exec(ctx context.Context, req wire.Exec) (wire.Result, error) {
	if strings.TrimSpace(req.Command) == "" {
		return wire.Result{}, fmt.Errorf("command is empty: pass the shell text to run in \"command\": %w", wire.ErrBadRequest)
	}
	if strings.ContainsRune(req.Command, 0) {
		return wire.Result{}, fmt.Errorf("command contains a NUL byte, which no shell can run: %w", wire.ErrBadRequest)
	}
	timeout, err := durationOf(&req.Timeout, 0, "timeout")
	if err != nil {
		return wire.Result{}, err
	}
	yield, maxOut, err := waitOptions(req.YieldAfter, req.MaxOutput)
	if err != nil {
		return wire.Result{}, err
	}
	p, err := s.shell(ctx)
	if err != nil {
		return wire.Result{}, err
	}
	s.mu.Lock()
	if s.cur != nil {
		id := s.cur.id
		s.mu.Unlock()
		return wire.Result{}, fmt.Errorf("session %q is running command %s: call wait to follow it, input to answer it, or interrupt to stop it: %w", s.name, id, wire.ErrBusy)
	}
	if s.p != p {
		s.mu.Unlock()
		return wire.Result{}, fmt.Errorf("the shell of session %q just exited; retry: %w", s.name, wire.ErrUnavailable)
	}
	c := s.newCommandLocked(req.Command)
	text := req.Command
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	var line string
	// The shell sources the command from a file: no typing cost, no
	// line-length limit, no continuation prompts. The shell has read the
	// whole file by the time it prints the start marker, and the file is
	// only rewritten when no command runs.
	script := filepath.Join(s.rdir, "cmd")
	if p.bash {
		// C-x C-l: the rc binds it to a macro typing ` . "$__L"` and Enter.
		line = "\x18\x0c"
	} else {
		text = "printf '\\033]633;limbs;%s;S\\007' " + shq(s.token) + "\n" + text
		line = "\x15 . " + shq(script) + "\n"
	}
	if err := os.WriteFile(script, []byte(text), 0o600); err != nil {
		s.mu.Unlock()
		return wire.Result{}, fmt.Errorf("writing the command file: %w", err)
	}
	s.cur = c
	if timeout > 0 {
		c.timer = time.AfterFunc(timeout, func() { s.stop(c, wire.StatusTimeout) })
	}
	s.mu.Unlock()
	if err := s.write(p, []byte(line)); err != nil {
		return wire.Result{}, fmt.Errorf("typing into the terminal: %w", err)
	}
	return s.await(ctx, c, yield, maxOut)
}

// Wait continues waiting for the running command (wire.ErrNoCommand when none).
func (s *Session) Wait(ctx context.Context, req wire.Wait) (wire.Result, error) {
	yield, maxOut, err := waitOptions(req.YieldAfter, req.MaxOutput)
	if err != nil {
		return wire.Result{}, err
	}
	s.mu.Lock()
	c := s.cur
	if c == nil {
		// A command that ended after its last result still owes its
		// caller the final result (exit code, remaining output), once.
		if l := s.last; l != nil && !l.reported {
			c = l
		}
	}
	s.mu.Unlock()
	if c == nil {
		return wire.Result{}, fmt.Errorf("nothing is running in session %q: start a command with exec: %w", s.name, wire.ErrNoCommand)
	}
	return s.await(ctx, c, yield, maxOut)
}

// await waits for c to end, for yield to pass, or for c to wait for input.
func (s *Session) await(ctx context.Context, c *command, yield time.Duration, maxOut int) (wire.Result, error) {
	var yieldC <-chan time.Time
	if yield > 0 {
		t := time.NewTimer(yield)
		defer t.Stop()
		yieldC = t.C
	}
	quiet := time.NewTimer(s.untilQuiet(c))
	defer quiet.Stop()
	for {
		select {
		case <-c.done:
			return s.result(c, maxOut, false), nil
		case <-yieldC:
			return s.result(c, maxOut, s.waiting(c)), nil
		case <-quiet.C:
			d := s.untilQuiet(c)
			if d <= 0 {
				if s.waiting(c) {
					return s.result(c, maxOut, true), nil
				}
				d = 250 * time.Millisecond
			}
			quiet.Reset(d)
		case <-ctx.Done():
			return wire.Result{}, ctx.Err()
		}
	}
}

// untilQuiet is how long until neither output nor input has happened for
// quietPeriod.
func (s *Session) untilQuiet(c *command) time.Duration {
	last := max(s.lastOut.Load(), s.lastIn.Load(), c.typedAt.UnixNano())
	return time.Until(time.Unix(0, last).Add(quietPeriod))
}

func (s *Session) waiting(c *command) bool {
	s.mu.Lock()
	p := s.p
	running := s.cur == c && c.started
	s.mu.Unlock()
	if !running || p == nil || !p.waitingForInput() {
		return false
	}
	// The program went to sleep after printing all it printed. If that
	// was the end of the command (the shell back at its prompt), the end
	// marker is in the terminal or in the read loop's hands: give it the
	// moment it takes to arrive before calling this a prompt.
	deadline := time.Now().Add(200 * time.Millisecond)
	settledAt := time.Time{}
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return false
		default:
		}
		if p.unread() == 0 {
			if settledAt.IsZero() {
				settledAt = time.Now()
			} else if time.Since(settledAt) > 10*time.Millisecond {
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// result reports c, handing over the output not returned before.
func (s *Session) result(c *command, maxOut int, waiting bool) wire.Result {
	s.mu.Lock()
	r := wire.Result{CommandID: c.id, LogPath: c.logPath, Cwd: s.cwd}
	var from, to int64
	if c.ended {
		from, to = c.returned, c.endOff
		code := c.exitCode
		r.ExitCode = &code
		r.Status = c.status
		r.ShellExited = c.shellEnd
		r.DurationMs = c.endAt.Sub(c.typedAt).Milliseconds()
		r.OffsetStart = c.startOff
	} else {
		r.Status = wire.StatusRunning
		r.WaitingForInput = waiting
		r.DurationMs = time.Since(c.typedAt).Milliseconds()
		if c.started {
			from, to = c.returned, s.out.size()
			r.OffsetStart = c.startOff
		} else {
			from, to = s.out.size(), s.out.size()
			r.OffsetStart = from
		}
	}
	s.mu.Unlock()
	if !c.ended && to > from {
		to -= s.holdBack(from, to)
	}
	s.mu.Lock()
	if to > c.returned || c.ended {
		c.returned = max(c.returned, to)
	}
	if c.ended {
		c.reported = true
	}
	s.mu.Unlock()
	r.OffsetEnd = to
	r.OutputBytes = to - r.OffsetStart
	r.ChunkStart = from
	r.Output, r.Truncated = s.cleanRange(from, to, maxOut)
	// The log file is written from the stream off the command's path
	// (creating a file on a disk costs a millisecond). It is complete up
	// to offset_end before a result whose output is not all in `output`
	// goes out: a running or a truncated one.
	if (!c.ended || r.Truncated) && r.OffsetStart >= 0 {
		s.writeLog(c, to)
	}
	return r
}

// writeLog brings c's log file up to stream offset upTo.
func (s *Session) writeLog(c *command, upTo int64) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	s.mu.Lock()
	start := c.startOff
	s.mu.Unlock()
	if start < 0 {
		return
	}
	if c.logf == nil {
		f, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			s.log.Warn("writing a command log", "command", c.id, "err", err)
			return
		}
		c.logf, c.logged = f, start
	}
	if upTo > c.logged {
		n, err := io.Copy(c.logf, s.out.reader(c.logged, upTo))
		c.logged += n
		if err != nil {
			s.log.Warn("writing a command log", "command", c.id, "err", err)
		}
	}
}

// closeLog completes and closes a finished command's log file.
func (s *Session) closeLog(c *command) {
	s.mu.Lock()
	end := c.endOff
	s.mu.Unlock()
	s.writeLog(c, end)
	c.logMu.Lock()
	if c.logf != nil {
		c.logf.Close()
		c.logf = nil
	}
	c.logMu.Unlock()
}

// holdBack is how many bytes at the end of [from, to) to keep for the next
// result because they may be the first half of something: an escape
// sequence, a UTF-8 character, or a \r whose \n has not arrived.
func (s *Session) holdBack(from, to int64) int64 {
	n := min(to-from, 64)
	tail := make([]byte, n)
	got, _ := s.out.readAt(tail, to-n)
	return int64(unfinishedTail(tail[:got]))
}

// cleanRange renders [from, to) of the stream as a person would read it.
func (s *Session) cleanRange(from, to int64, maxOut int) (string, bool) {
	if to <= from {
		return "", false
	}
	limit := maxOut
	if maxOut == 0 {
		limit = 1 // max_output 0: only the count
	}
	t := screen.NewText(limit)
	_, _ = io.Copy(t, s.out.reader(from, to))
	text, truncated, _ := t.Result()
	if maxOut == 0 {
		return "", to > from
	}
	if truncated {
		text = strings.Replace(text, " characters omitted ...]",
			fmt.Sprintf(" characters omitted; full output: GET /v1/sessions/%s/output?from=%d&to=%d ...]", s.id, from, to), 1)
	}
	return text, truncated
}

// stop interrupts c: SIGINT to the foreground job, then SIGTERM, then
// SIGKILL to its process group, and as a last resort the whole shell.
func (s *Session) stop(c *command, why string) {
	s.mu.Lock()
	if c.ended || c.stopping != "" {
		s.mu.Unlock()
		return
	}
	c.stopping = why
	p := s.p
	s.mu.Unlock()
	if p == nil {
		return
	}
	steps := []struct {
		sig   syscall.Signal
		grace time.Duration
	}{{syscall.SIGINT, graceInt}, {syscall.SIGTERM, graceTerm}, {syscall.SIGKILL, 2 * time.Second}}
	for _, st := range steps {
		p.signalForeground(st.sig)
		select {
		case <-c.done:
			return
		case <-p.done:
			return
		case <-time.After(st.grace):
		}
	}
	s.log.Warn("command survived SIGKILL of its process group; killing the shell", "command", c.id)
	p.killTree()
}

// Input types text and keys into the terminal.
func (s *Session) Input(ctx context.Context, req wire.Input) (wire.Result, error) {
	if req.Text == "" && len(req.Keys) == 0 {
		return wire.Result{}, fmt.Errorf("nothing to type: pass \"text\" and/or \"keys\": %w", wire.ErrBadRequest)
	}
	yield, maxOut, err := waitOptions(req.YieldAfter, req.MaxOutput)
	if err != nil {
		return wire.Result{}, err
	}
	p, err := s.shell(ctx)
	if err != nil {
		return wire.Result{}, err
	}
	s.mu.Lock()
	b, err := encodeInput(req.Text, req.Keys, s.parser.appCursor, s.parser.paste)
	c := s.cur
	seq := s.seq
	before := s.out.size()
	s.mu.Unlock()
	if err != nil {
		return wire.Result{}, err
	}
	s.lastIn.Store(time.Now().UnixNano())
	if err := s.write(p, b); err != nil {
		return wire.Result{}, fmt.Errorf("typing into the terminal: %w", err)
	}
	if c != nil {
		return s.await(ctx, c, yield, maxOut)
	}
	// The shell was idle: the input may start a command (a line and
	// Enter); otherwise report what it printed once output settles.
	deadline := time.Now().Add(yield)
	for {
		s.mu.Lock()
		var started *command
		if s.seq != seq {
			started = s.cur
			if started == nil {
				started = s.last
			}
		}
		s.mu.Unlock()
		if started != nil {
			return s.await(ctx, started, max(time.Until(deadline), time.Millisecond), maxOut)
		}
		end, ch := s.out.changed()
		wait := settleIdle
		if yield > 0 {
			wait = min(wait, time.Until(deadline))
		}
		if wait <= 0 {
			return s.idleResult(before, end, maxOut), nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ch:
			t.Stop()
		case <-t.C:
			s.mu.Lock()
			changed := s.seq != seq
			s.mu.Unlock()
			if !changed {
				return s.idleResult(before, end, maxOut), nil
			}
		case <-ctx.Done():
			t.Stop()
			return wire.Result{}, ctx.Err()
		}
	}
}

func (s *Session) idleResult(from, to int64, maxOut int) wire.Result {
	s.mu.Lock()
	r := wire.Result{Status: wire.StatusExited, Cwd: s.cwd, OffsetStart: from, OffsetEnd: to, OutputBytes: to - from, ChunkStart: from}
	s.mu.Unlock()
	r.Output, r.Truncated = s.cleanRange(from, to, maxOut)
	return r
}

// Interrupt stops the running command (SIGINT, then escalation).
func (s *Session) Interrupt(ctx context.Context, req wire.Interrupt) (wire.Result, error) {
	maxOut, err := maxOutputOf(req.MaxOutput)
	if err != nil {
		return wire.Result{}, err
	}
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	if c == nil {
		return wire.Result{}, fmt.Errorf("nothing is running in session %q to interrupt: %w", s.name, wire.ErrNoCommand)
	}
	s.stop(c, wire.StatusInterrupted)
	select {
	case <-c.done:
	case <-time.After(readyWait):
	case <-ctx.Done():
		return wire.Result{}, ctx.Err()
	}
	return s.result(c, maxOut, false), nil
}

// Restart replaces the shell, keeping cwd and exported environment.
func (s *Session) Restart(ctx context.Context) (wire.Session, error) {
	s.startMu.Lock()
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p != nil {
		p.killTree()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
	s.startMu.Unlock()
	if _, err := s.shell(ctx); err != nil {
		return wire.Session{}, err
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
	return s.out.reader(from, to), to - from, nil
}

// WriteInput types raw bytes into the terminal (attach clients).
func (s *Session) WriteInput(b []byte) error {
	p, err := s.shell(context.Background())
	if err != nil {
		return err
	}
	s.lastIn.Store(time.Now().UnixNano())
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

// close ends the session's shell; remove also deletes its state.
func (s *Session) close(remove bool) {
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
		p.killTree()
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
	s.emuMu.Lock()
	s.emu.Close()
	s.emuMu.Unlock()
	if remove {
		_ = os.RemoveAll(s.dir)
	}
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
	b, _ := json.MarshalIndent(ps, "", "  ")
	if !bytes.Equal(b, s.savedState) {
		if err := writeFile(filepath.Join(s.dir, "session.json"), b, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("saving session state", "err", err)
		} else {
			s.savedState = b
		}
	}
	if env, err := os.ReadFile(filepath.Join(s.rdir, "env")); err == nil && bytes.HasSuffix(env, []byte(envEnd+"\n")) && !bytes.Equal(env, s.savedEnv) {
		if err := writeFile(filepath.Join(s.dir, "env"), env, 0o600); err == nil {
			s.savedEnv = env
		}
	}
}
