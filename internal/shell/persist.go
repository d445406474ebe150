package shell

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
)

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
