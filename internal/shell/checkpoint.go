package shell

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// What a checkpoint keeps of the sessions (internal/checkpoint): each one's
// cwd and saved exported environment, and the way back to them. Programs
// running in a session are never part of it.

// maxStateEnv bounds the environment a state carries: a larger save is
// left out (the shell then starts with its create's env only).
const maxStateEnv = 1 << 20

// States reports every session's cwd and newest complete environment
// save, oldest session first.
func (m *Manager) States() []wire.SessionState {
	var out []wire.SessionState
	for _, s := range m.List() {
		s.mu.Lock()
		st := wire.SessionState{ID: s.id, Name: s.name, Cwd: s.cwd, Shell: s.shellPath, Cols: s.cols, Rows: s.rows}
		if len(s.reqEnv) > 0 {
			st.Vars = make(map[string]string, len(s.reqEnv))
			for k, v := range s.reqEnv {
				st.Vars[k] = v
			}
		}
		s.mu.Unlock()
		for _, f := range []string{filepath.Join(s.rdir, "env"), filepath.Join(s.dir, "env")} {
			if b, err := readScratch(f, nil); err == nil && len(b) <= maxStateEnv && bytes.HasSuffix(b, []byte(envEnd+"\n")) {
				st.Env = string(b)
				break
			}
		}
		out = append(out, st)
	}
	return out
}

// Reinstate gives each recorded session a new shell in its recorded cwd
// and environment: the session of that id, else of that name, else a new
// session of that name. Sessions the states do not name are left alone.
// It returns the ids of the sessions it started shells in.
func (m *Manager) Reinstate(ctx context.Context, states []wire.SessionState) ([]string, error) {
	var ids []string
	var errs []error
	for _, st := range states {
		s, err := m.Get(st.ID)
		if err != nil && st.Name != "" {
			s, err = m.Get(st.Name)
		}
		made := false
		if err != nil {
			cwd := st.Cwd
			if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
				cwd = ""
			}
			// Its shell is started once, by reinstate, in the recorded
			// environment.
			s, err = m.create(ctx, wire.CreateSession{Name: st.Name, Cols: st.Cols, Rows: st.Rows, Cwd: cwd, Env: st.Vars, Shell: st.Shell}, false)
			if err != nil {
				errs = append(errs, fmt.Errorf("session %q: %w", st.Name, err))
				continue
			}
			made = true
		}
		if err := s.reinstate(ctx, st); err != nil {
			if made {
				_ = m.Delete(s.id)
			}
			errs = append(errs, fmt.Errorf("session %q: %w", st.Name, err))
			continue
		}
		ids = append(ids, s.id)
	}
	if len(errs) > 0 {
		return ids, fmt.Errorf("restarting the checkpoint's sessions: %v: %w", errs, wire.ErrUnavailable)
	}
	return ids, nil
}

// reinstate ends the session's shell and starts a new one in st's cwd and
// environment, as Restart does with the session's own.
func (s *Session) reinstate(ctx context.Context, st wire.SessionState) error {
	s.startMu.Lock()
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p != nil {
		s.mu.Lock()
		s.endWhy = reasonRestart
		s.mu.Unlock()
		if err := p.killTree(); err != nil {
			s.log.Warn("ending the shell a checkpoint replaces", "err", err)
		}
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
	// The old shell is gone: nothing writes its saves any more. The
	// persist loop's memory of what it copied to disk goes too, so that
	// the new shell's first save reaches the disk whatever it holds.
	s.persistMu.Lock()
	s.savedEnv = nil
	s.persistMu.Unlock()
	if st.Env != "" && len(st.Env) <= maxStateEnv && bytes.HasSuffix([]byte(st.Env), []byte(envEnd+"\n")) {
		for _, f := range []string{filepath.Join(s.rdir, "env"), filepath.Join(s.dir, "env")} {
			if err := writeFile(f, []byte(st.Env), 0o600); err != nil {
				s.startMu.Unlock()
				return fmt.Errorf("writing the recorded environment: %w", err)
			}
		}
		if err := s.m.opts.Agent.give(filepath.Join(s.rdir, "env")); err != nil {
			s.startMu.Unlock()
			return err
		}
	} else {
		_ = os.Remove(filepath.Join(s.rdir, "env"))
		_ = os.Remove(filepath.Join(s.dir, "env"))
	}
	s.mu.Lock()
	if st.Cwd != "" {
		s.cwd = st.Cwd
	}
	s.mu.Unlock()
	s.startMu.Unlock()
	s.persist()
	_, err := s.shell(ctx)
	return err
}

// CloseAll deletes every session, as DELETE /v1/sessions/{id} does: a
// workspace mounted over the one the shells started in (a warm-pool
// sandbox that becomes a fork) leaves them in the old one. The sessions
// are gone when it returns; their shells end in the background (Close
// waits for them), so that a fork does not wait on the old shells.
func (m *Manager) CloseAll(context.Context) error {
	m.mu.Lock()
	if m.deleting == nil {
		m.deleting = map[*Session]bool{}
	}
	var ss []*Session
	for id, s := range m.sessions {
		delete(m.sessions, id)
		m.deleting[s] = true
		ss = append(ss, s)
	}
	m.mu.Unlock()
	for _, s := range ss {
		go func() {
			s.close(true)
			s.noteSession(wire.EventSessionClosed, wire.SourceAPI, wire.SessionData{Name: s.name})
			m.mu.Lock()
			delete(m.deleting, s)
			m.mu.Unlock()
		}()
	}
	return nil
}

// RemountStates is States with each session's cwd the one its shell was
// to start in when that was missing: a sandbox restarted before its
// workspace was mounted again (a fork from the warm pool) started its
// shells in the workdir.
func (m *Manager) RemountStates() []wire.SessionState {
	out := m.States()
	for i := range out {
		if s, err := m.Get(out[i].ID); err == nil {
			s.mu.Lock()
			if s.lostCwd != "" {
				out[i].Cwd = s.lostCwd
			}
			s.mu.Unlock()
		}
	}
	return out
}
