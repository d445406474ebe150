package runtime

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/wire"
)

// session finds the session named by the {id} path value; the manager's
// error already says how to list or create sessions.
func (s *Server) session(r *http.Request) (*shell.Session, error) {
	return s.opts.Manager.Get(r.PathValue("id"))
}

// commandContext is the context a command-running call hands to the shell.
// A client that disconnects (or whose own timeout fires) during a blocking
// exec must not kill the command. package shell treats a cancelled context
// as the caller leaving: it stops waiting, the command keeps running, and
// the output not yet returned is handed to the next wait, so nothing is lost
// with a dead client. The conformance case ClientDisconnectKeepsCommand
// holds it to that.
//
// It also carries the API base the client reaches the session under, for
// the note of a truncated output: limbs serve's proxy names it in the
// X-Limbs-Api-Base header (/v1/sandboxes/{id}); limbsd's own is /v1.
func commandContext(r *http.Request) context.Context {
	if b := r.Header.Get(APIBaseHeader); b != "" {
		return shell.WithAPIBase(r.Context(), b)
	}
	return r.Context()
}

// APIBaseHeader is the request header in which a proxy in front of limbsd
// names the base path its clients use for limbsd's /v1.
const APIBaseHeader = "X-Limbs-Api-Base"

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateSession
	if err := decode(w, r, &req, true); err != nil {
		s.fail(w, r, err)
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
		s.fail(w, r, err)
		return
	}
	s.log.Info("session deleted", "session", id)
	w.WriteHeader(http.StatusNoContent)
}

// serveCall is the shape of every command route: decode the JSON body
// strictly, find the session, call it, answer its result. Validation of
// the values lives in package shell, next to their meaning.
func serveCall[Req, Resp any](s *Server, w http.ResponseWriter, r *http.Request, allowEmpty bool, call func(*shell.Session, context.Context, Req) (Resp, error)) {
	var req Req
	if err := decode(w, r, &req, allowEmpty); err != nil {
		s.fail(w, r, err)
		return
	}
	sess, err := s.session(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := call(sess, commandContext(r), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	serveCall(s, w, r, false, (*shell.Session).Exec)
}

func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	serveCall(s, w, r, true, (*shell.Session).Wait)
}

func (s *Server) input(w http.ResponseWriter, r *http.Request) {
	serveCall(s, w, r, false, (*shell.Session).Input)
}

func (s *Server) interrupt(w http.ResponseWriter, r *http.Request) {
	serveCall(s, w, r, true, (*shell.Session).Interrupt)
}

func (s *Server) restart(w http.ResponseWriter, r *http.Request) {
	serveCall(s, w, r, true, func(sess *shell.Session, ctx context.Context, _ struct{}) (wire.Session, error) {
		info, err := sess.Restart(ctx)
		if err == nil {
			s.log.Info("session restarted", "session", info.ID)
		}
		return info, err
	})
}

func (s *Server) resize(w http.ResponseWriter, r *http.Request) {
	serveCall(s, w, r, false, func(sess *shell.Session, _ context.Context, req wire.Resize) (wire.Session, error) {
		return sess.Resize(req.Cols, req.Rows)
	})
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
