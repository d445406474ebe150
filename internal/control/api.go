package control

import (
	"context"
	"net/http"
	"sort"

	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateSandbox
	if err := wire.DecodeJSON(r, &req, true); err != nil {
		wire.WriteError(w, err)
		return
	}
	create := s.Create
	if req.FromCheckpoint != "" {
		create = s.CreateFromCheckpoint // checkpoints.go
	}
	sb, err := create(r.Context(), req)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	setCreated(r.Context(), sb.ID)
	wire.WriteJSON(w, http.StatusCreated, sb)
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	sbs, err := s.List(r.Context())
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, wire.SandboxList{Sandboxes: sbs})
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	sb, err := s.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, sb)
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	if err := s.Remove(r.Context(), r.PathValue("id")); err != nil {
		wire.WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleStop(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, s.Stop)
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, s.Start)
}

func (s *Server) lifecycle(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, idOrName string) (wire.Sandbox, error)) {
	if err := wire.DecodeJSON(r, &struct{}{}, true); err != nil {
		wire.WriteError(w, err)
		return
	}
	sb, err := op(r.Context(), r.PathValue("id"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, sb)
}

func sortRecords(recs []store.Record) {
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].CreatedAt.Equal(recs[j].CreatedAt) {
			return recs[i].CreatedAt.Before(recs[j].CreatedAt)
		}
		return recs[i].ID < recs[j].ID
	})
}
