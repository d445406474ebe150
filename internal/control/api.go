package control

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateSandbox
	if err := wire.DecodeJSON(r, &req, true); err != nil {
		wire.WriteError(w, err)
		return
	}
	sb, err := s.Create(r.Context(), req)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
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

// EventList is the body of GET /v1/sandboxes/{id}/events.
type EventList = wire.SandboxEventList

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.Get(r.Context(), id); err != nil {
		wire.WriteError(w, err)
		return
	}
	var from uint64
	if v := r.URL.Query().Get("from"); v != "" {
		var err error
		if from, err = strconv.ParseUint(v, 10, 64); err != nil {
			wire.WriteError(w, fmt.Errorf("from=%q: want a sequence number (0, 1, ...): %w", v, wire.ErrBadRequest))
			return
		}
	}
	evs, err := s.Events(r.Context(), id, from)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, EventList{Events: evs})
}

func sortRecords(recs []store.Record) {
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].CreatedAt.Equal(recs[j].CreatedAt) {
			return recs[i].CreatedAt.Before(recs[j].CreatedAt)
		}
		return recs[i].ID < recs[j].ID
	})
}
