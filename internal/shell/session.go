// Package shell runs persistent interactive shells on pseudo-terminals and
// knows, from the shell itself, exactly where each command's output starts
// and ends, with its exit status and working directory.
//
// It must never guess a command boundary from timing or text: boundaries
// come only from marker sequences carrying the session's secret token, and
// nothing on the hot path polls or sleeps.
package shell

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/limbs-dev/limbs/internal/wire"
)

// ErrFellBehind is returned by StreamReader.Next when a live reader lags
// further behind the newest output than the in-memory buffer holds.
var ErrFellBehind = errors.New("reader fell behind the output buffer")

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

// Manager owns every session of one daemon.
type Manager struct{}

// NewManager restores the sessions persisted under opts.StateDir.
func NewManager(ctx context.Context, opts Options) (*Manager, error) {
	return nil, errors.New("not implemented")
}

// Create starts a new session.
func (m *Manager) Create(ctx context.Context, req wire.CreateSession) (*Session, error) {
	return nil, errors.New("not implemented")
}

// Get finds a session by id or name (wire.ErrNotFound otherwise).
func (m *Manager) Get(idOrName string) (*Session, error) { return nil, wire.ErrNotFound }

// List returns every session, oldest first.
func (m *Manager) List() []*Session { return nil }

// Delete kills the session's whole process tree and forgets it.
func (m *Manager) Delete(idOrName string) error { return wire.ErrNotFound }

// Close kills every shell (their state stays on disk for the next daemon).
func (m *Manager) Close() error { return nil }

// Session is one persistent shell.
type Session struct{}

// Info describes the session.
func (s *Session) Info() wire.Session { return wire.Session{} }

// Exec runs a command (wire.ErrBusy while another one runs).
func (s *Session) Exec(ctx context.Context, req wire.Exec) (wire.Result, error) {
	return wire.Result{}, errors.New("not implemented")
}

// Wait continues waiting for the running command (wire.ErrNoCommand when none).
func (s *Session) Wait(ctx context.Context, req wire.Wait) (wire.Result, error) {
	return wire.Result{}, errors.New("not implemented")
}

// Input types text and keys into the terminal.
func (s *Session) Input(ctx context.Context, req wire.Input) (wire.Result, error) {
	return wire.Result{}, errors.New("not implemented")
}

// Interrupt stops the running command (SIGINT, then escalation).
func (s *Session) Interrupt(ctx context.Context, req wire.Interrupt) (wire.Result, error) {
	return wire.Result{}, errors.New("not implemented")
}

// Restart replaces the shell, keeping cwd and exported environment.
func (s *Session) Restart(ctx context.Context) (wire.Session, error) {
	return wire.Session{}, errors.New("not implemented")
}

// Resize changes the terminal size.
func (s *Session) Resize(cols, rows int) (wire.Session, error) {
	return wire.Session{}, errors.New("not implemented")
}

// Screen renders what a terminal showing the session displays now.
func (s *Session) Screen() (wire.Screen, error) { return wire.Screen{}, errors.New("not implemented") }

// Output returns the raw output stream between absolute offsets from and to
// (to < 0 means up to now), and the number of bytes it will yield.
func (s *Session) Output(from, to int64) (io.Reader, int64, error) {
	return nil, 0, errors.New("not implemented")
}

// WriteInput types raw bytes into the terminal (attach clients).
func (s *Session) WriteInput(p []byte) error { return errors.New("not implemented") }

// NewReader follows the output stream from offset from (live after that).
func (s *Session) NewReader(from int64) (*StreamReader, error) {
	return nil, errors.New("not implemented")
}

// StreamReader follows a session's output stream.
type StreamReader struct{}

// Next blocks until output past the reader's offset exists and returns at
// most max bytes of it. It returns io.EOF when the session is deleted and
// ErrFellBehind when the reader lags past the in-memory buffer.
func (r *StreamReader) Next(ctx context.Context, max int) ([]byte, error) {
	return nil, errors.New("not implemented")
}

// Offset is the absolute offset of the next byte Next returns.
func (r *StreamReader) Offset() int64 { return 0 }

// Close releases the reader.
func (r *StreamReader) Close() {}
