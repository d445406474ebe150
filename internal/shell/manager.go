package shell

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	"syscall"
	"time"

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
	Env []string
	// Agent is the user the shells run as; nil runs them as the daemon's
	// own user (see Identity).
	Agent  *Identity
	Logger *slog.Logger
	// MaxSessionDisk bounds the output one session keeps on disk (its
	// stream and command logs), MaxDisk that of every session together:
	// 0 means the default (DefaultMaxSessionDisk, DefaultMaxDisk), < 0 no
	// bound. See disk.go.
	MaxSessionDisk int64
	MaxDisk        int64
	// Journal records the sessions' events (journal.go); nil: none.
	Journal Recorder
}

// Timing of the stop escalation and of input detection. Variables so that
// tests of the escalation itself can shorten them.
var (
	graceInt    = time.Second // after SIGINT, before SIGTERM
	graceTerm   = time.Second // after SIGTERM, before SIGKILL
	quietPeriod = time.Second // no output for this long: look for a prompt
	settleIdle  = 300 * time.Millisecond
	readyWait   = 20 * time.Second
	// A shell saves its environment right after an end marker (well under
	// a millisecond); a restart waits at most this long for it.
	envSaveWait = 500 * time.Millisecond
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
	deleting map[*Session]bool // being deleted: Close waits for them
	closed   bool
	// runDir is scratch space on a memory filesystem when there is one:
	// command files and the shells' environment saves are written there on
	// every command, and creating files on a disk costs 0.3 ms or more.
	runDir string
	disk   *diskPool
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
	if opts.MaxSessionDisk == 0 {
		opts.MaxSessionDisk = DefaultMaxSessionDisk
	}
	if opts.MaxDisk == 0 {
		opts.MaxDisk = DefaultMaxDisk
	}
	lastPidFD() // limbsd's for good: see lastPidFD
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "sessions"), 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if opts.Agent != nil {
		// The shells reach their own directory in each session's state
		// (their history) through these, and may not list or change them.
		for _, d := range []string{opts.StateDir, filepath.Join(opts.StateDir, "sessions")} {
			if err := os.Chmod(d, opts.Agent.dirMode()); err != nil {
				return nil, fmt.Errorf("state directory: %w", err)
			}
		}
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
	m := &Manager{opts: opts, log: opts.Logger, sessions: map[string]*Session{}, runDir: makeRunDir(opts.StateDir, opts.Agent.dirMode()), disk: &diskPool{limit: opts.MaxDisk}}
	if err := m.restore(ctx); err != nil {
		return nil, err
	}
	m.pruneRunDir()
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
		s.restored = true
		m.sessions[s.id] = s
		go func() {
			if _, err := s.shell(context.WithoutCancel(ctx)); err != nil {
				m.log.Warn("restoring session shell", "session", s.id, "err", err)
			}
		}()
	}
	return nil
}

// makeRunDir makes the daemon's private directory on /dev/shm, or in the
// state directory when there is no usable /dev/shm. Its name follows from
// the state directory, so a daemon restarted after a kill -9 finds the
// environment its shells saved there when the terminal hung up (and leaves
// no directory behind per restart). A directory of that name that is not
// ours alone (another owner, open to others, a symlink) is never used:
// /dev/shm is shared, so the name is only a preference.
//
// With an Agent the directory is mode 0711 (each shell passes through it to
// its own session's directory, which the agent owns) and stays the
// daemon's: the agent can neither list it nor create anything in it.
func makeRunDir(stateDir string, mode os.FileMode) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		abs, err := filepath.Abs(stateDir)
		if err != nil {
			abs = stateDir
		}
		sum := sha256.Sum256([]byte(abs))
		d := filepath.Join("/dev/shm", "limbs-"+hex.EncodeToString(sum[:8]))
		if err := os.Mkdir(d, 0o700); err == nil || ownPrivateDir(d) {
			_ = os.Chmod(d, mode)
			return d
		}
		if d, err := os.MkdirTemp("/dev/shm", "limbs-"); err == nil {
			_ = os.Chmod(d, mode)
			return d
		}
	}
	d := filepath.Join(stateDir, "run")
	_ = os.MkdirAll(d, 0o700)
	_ = os.Chmod(d, mode)
	return d
}

// ownPrivateDir reports whether path is a real directory owned by this
// process's user that nobody else may list or write.
func ownPrivateDir(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o066 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// pruneRunDir removes what the run directory holds for sessions that no
// longer exist (deleted while no daemon ran, or whose state is gone).
func (m *Manager) pruneRunDir() {
	ents, err := os.ReadDir(m.runDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if _, ok := m.sessions[e.Name()]; !ok {
			_ = os.RemoveAll(filepath.Join(m.runDir, e.Name()))
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Create starts a new session.
func (m *Manager) Create(ctx context.Context, req wire.CreateSession) (*Session, error) {
	return m.create(ctx, req, true)
}

// create makes a new session, and starts its shell when start is set
// (Reinstate starts it itself, once it has written the session's
// recorded environment).
func (m *Manager) create(ctx context.Context, req wire.CreateSession, start bool) (*Session, error) {
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
	s.noteSession(wire.EventSessionCreated, wire.SourceAPI, wire.SessionData{Name: ps.Name, Cwd: ps.Cwd, Cols: ps.Cols, Rows: ps.Rows})
	if !start {
		return s, nil
	}
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
	if m.deleting == nil {
		m.deleting = map[*Session]bool{}
	}
	m.deleting[s] = true
	m.mu.Unlock()
	s.close(true)
	s.noteSession(wire.EventSessionClosed, wire.SourceAPI, wire.SessionData{Name: s.name})
	m.mu.Lock()
	delete(m.deleting, s)
	m.mu.Unlock()
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
	// A session being deleted (by Delete, or in the background by
	// CloseAll) is closed here as deleted: its state must not be left for
	// the next daemon, whichever close runs first (Session.close runs
	// once, and removes the state when asked to after).
	deleting := make([]*Session, 0, len(m.deleting))
	for s := range m.deleting {
		deleting = append(deleting, s)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() { defer wg.Done(); s.close(false) }()
	}
	for _, s := range deleting {
		wg.Add(1)
		go func() { defer wg.Done(); s.close(true) }()
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
	// What the shell writes itself: its scratch directory (environment
	// saves, and the rc and command files it reads) and its history, in
	// directories the agent owns inside the daemon's.
	hdir := dir
	if a := m.opts.Agent; a != nil {
		hdir = filepath.Join(dir, "agent")
		if err := os.Chmod(dir, a.dirMode()); err != nil {
			return nil, fmt.Errorf("session state directory: %w", err)
		}
		if err := os.MkdirAll(hdir, 0o700); err != nil {
			return nil, fmt.Errorf("session state directory: %w", err)
		}
		for _, d := range []string{rdir, hdir} {
			if err := a.give(d); err != nil {
				return nil, fmt.Errorf("session directory: %w", err)
			}
		}
	}
	ps.NextCmd = max(ps.NextCmd, lastCommandNumber(dir))
	var streamLimit int64
	if m.opts.MaxSessionDisk > 0 {
		streamLimit = m.opts.MaxSessionDisk / streamShare
	}
	slog := m.log.With("session", ps.ID)
	out, err := openStream(filepath.Join(dir, "stream.log"), m.disk, streamLimit, slog)
	if err != nil {
		return nil, err
	}
	if j := m.opts.Journal; j != nil {
		m.alignJournal(ps.ID, out)
		id := ps.ID
		out.onAppend = func(off int64, p []byte) { j.Output(id, off, p) }
	}
	logs := newLogAccount(m.disk, m.opts.MaxSessionDisk)
	logs.free = out.free
	logs.load(dir)
	env := make([]string, 0, len(m.opts.Env)+len(agentEnv)+len(ps.Env))
	env = append(env, m.opts.Env...)
	env = append(env, agentEnv...)
	if a := m.opts.Agent; a != nil {
		env = append(env, "HOME="+a.Home)
	}
	for k, v := range ps.Env {
		env = append(env, k+"="+v)
	}
	s := &Session{
		m: m, id: ps.ID, name: ps.Name, created: ps.CreatedAt, dir: dir, rdir: rdir, hdir: hdir,
		token: randomHex(16), shellPath: ps.Shell, env: dedupEnv(env), reqEnv: ps.Env,
		log: slog, out: out, logs: logs,
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
