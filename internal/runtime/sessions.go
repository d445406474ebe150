package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/wire"
)

// session finds the session named by the {id} path value.
func (s *Server) session(r *http.Request) (*shell.Session, error) {
	id := r.PathValue("id")
	sess, err := s.opts.Manager.Get(id)
	if err != nil {
		if errors.Is(err, wire.ErrNotFound) {
			return nil, fmt.Errorf("session %q does not exist; list them with GET /v1/sessions or create it with POST /v1/sessions: %w", id, wire.ErrNotFound)
		}
		return nil, fmt.Errorf("session %q: %w", id, err)
	}
	return sess, nil
}

// commandContext is the context a command-running call hands to the shell.
// A client that disconnects (or whose own timeout fires) during a blocking
// exec must not kill the command. package shell treats a cancelled context
// as the caller leaving: it stops waiting, the command keeps running, and
// the output not yet returned is handed to the next wait, so nothing is lost
// with a dead client. The conformance case ClientDisconnectKeepsCommand
// holds it to that.
func commandContext(r *http.Request) context.Context {
	return r.Context()
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateSession
	if err := decode(r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Cols < 0 || req.Rows < 0 || req.Cols > 10000 || req.Rows > 10000 {
		s.fail(w, r, fmt.Errorf("cols=%d rows=%d: each must be between 1 and 10000 (or absent for the default): %w", req.Cols, req.Rows, wire.ErrBadRequest))
		return
	}
	sess, err := s.opts.Manager.Create(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	info := sess.Info()
	s.log.Info("session created", "session", info.ID, "name", info.Name)
	wire.WriteJSON(w, http.StatusCreated, info)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	list := wire.SessionList{Sessions: []wire.Session{}}
	for _, sess := range s.opts.Manager.List() {
		list.Sessions = append(list.Sessions, sess.Info())
	}
	wire.WriteJSON(w, http.StatusOK, list)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, sess.Info())
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.opts.Manager.Delete(id); err != nil {
		if errors.Is(err, wire.ErrNotFound) {
			err = fmt.Errorf("session %q does not exist; list them with GET /v1/sessions: %w", id, wire.ErrNotFound)
		}
		s.fail(w, r, err)
		return
	}
	s.log.Info("session deleted", "session", id)
	w.WriteHeader(http.StatusNoContent)
}

func validYield(y *float64) error {
	if y != nil && *y < 0 {
		return fmt.Errorf("yield_after=%v: must be 0 (block until the command ends) or a positive number of seconds: %w", *y, wire.ErrBadRequest)
	}
	return nil
}

func validMaxOutput(m *int) error {
	if m != nil && *m < 0 {
		return fmt.Errorf("max_output=%d: must be 0 or more characters: %w", *m, wire.ErrBadRequest)
	}
	return nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req wire.Exec
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Command == "" {
		s.fail(w, r, fmt.Errorf("command is missing: send {\"command\": \"...\"}: %w", wire.ErrBadRequest))
		return
	}
	if req.Timeout < 0 {
		s.fail(w, r, fmt.Errorf("timeout=%v: must be 0 (none) or a positive number of seconds: %w", req.Timeout, wire.ErrBadRequest))
		return
	}
	if err := errors.Join(validYield(req.YieldAfter), validMaxOutput(req.MaxOutput)); err != nil {
		s.fail(w, r, err)
		return
	}
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := sess.Exec(commandContext(r), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	var req wire.Wait
	if err := decode(r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := errors.Join(validYield(req.YieldAfter), validMaxOutput(req.MaxOutput)); err != nil {
		s.fail(w, r, err)
		return
	}
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := sess.Wait(commandContext(r), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

func (s *Server) input(w http.ResponseWriter, r *http.Request) {
	var req wire.Input
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Text == "" && len(req.Keys) == 0 {
		s.fail(w, r, fmt.Errorf("nothing to type: send {\"text\": \"...\"} and/or {\"keys\": [\"Enter\"]}: %w", wire.ErrBadRequest))
		return
	}
	if err := errors.Join(validYield(req.YieldAfter), validMaxOutput(req.MaxOutput)); err != nil {
		s.fail(w, r, err)
		return
	}
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := sess.Input(commandContext(r), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

func (s *Server) interrupt(w http.ResponseWriter, r *http.Request) {
	var req wire.Interrupt
	if err := decode(r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := validMaxOutput(req.MaxOutput); err != nil {
		s.fail(w, r, err)
		return
	}
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := sess.Interrupt(commandContext(r), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

func (s *Server) restart(w http.ResponseWriter, r *http.Request) {
	if err := decode(r, &struct{}{}, true); err != nil {
		s.fail(w, r, err)
		return
	}
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := sess.Restart(commandContext(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("session restarted", "session", info.ID)
	wire.WriteJSON(w, http.StatusOK, info)
}

func (s *Server) resize(w http.ResponseWriter, r *http.Request) {
	var req wire.Resize
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := validSize(req.Cols, req.Rows); err != nil {
		s.fail(w, r, err)
		return
	}
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := sess.Resize(req.Cols, req.Rows)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, info)
}

func validSize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > 10000 || rows > 10000 {
		return fmt.Errorf("cols=%d rows=%d: send both, each between 1 and 10000: %w", cols, rows, wire.ErrBadRequest)
	}
	return nil
}

func (s *Server) screen(w http.ResponseWriter, r *http.Request) {
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	scr, err := sess.Screen()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if scr.Lines == nil {
		scr.Lines = []string{}
	}
	wire.WriteJSON(w, http.StatusOK, scr)
}

// offsetParam parses an optional absolute byte offset; def when absent.
func offsetParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: must be a byte offset, a whole number >= 0: %w", name, v, wire.ErrBadRequest)
	}
	return n, nil
}

func (s *Server) output(w http.ResponseWriter, r *http.Request) {
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	end := sess.Info().OutputOffset
	from, err := offsetParam(r, "from", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	to, err := offsetParam(r, "to", end)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if from > to || to > end {
		s.fail(w, r, fmt.Errorf("range from=%d to=%d is outside the session's output: use 0 <= from <= to <= %d: %w", from, to, end, wire.ErrBadRequest))
		return
	}
	rd, n, err := sess.Output(from, to)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	if rc, ok := rd.(io.Closer); ok {
		defer rc.Close()
	}
	if _, err := io.Copy(w, rd); err != nil {
		// The status is sent; all that is left is to tell the operator.
		s.log.Debug("output copy ended early", "session", sess.Info().ID, "err", err)
	}
}
