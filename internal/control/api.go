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
	s.mu.Lock()
	recs := make([]store.Record, 0, len(s.sandboxes))
	for _, e := range s.sandboxes {
		if e.rec.Pool == "" {
			recs = append(recs, e.rec)
		}
	}
	s.mu.Unlock()
	sortRecords(recs)
	out := wire.SandboxList{Sandboxes: make([]wire.Sandbox, 0, len(recs))}
	for _, rec := range recs {
		out.Sandboxes = append(out.Sandboxes, toWire(rec))
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	e, err := s.lookup(r.PathValue("id"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, toWire(s.record(e)))
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	e, err := s.lookup(r.PathValue("id"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	if err := s.Remove(r.Context(), e); err != nil {
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

func (s *Server) lifecycle(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, e *entry) (store.Record, error)) {
	if err := wire.DecodeJSON(r, &struct{}{}, true); err != nil {
		wire.WriteError(w, err)
		return
	}
	e, err := s.lookup(r.PathValue("id"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	rec, err := op(r.Context(), e)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, toWire(rec))
}

// EventList is the body of GET /v1/sandboxes/{id}/events.
type EventList = wire.SandboxEventList

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	e, err := s.lookup(r.PathValue("id"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	var from uint64
	if v := r.URL.Query().Get("from"); v != "" {
		if from, err = strconv.ParseUint(v, 10, 64); err != nil {
			wire.WriteError(w, fmt.Errorf("from=%q: want a sequence number (0, 1, ...): %w", v, wire.ErrBadRequest))
			return
		}
	}
	evs, err := s.db.Events(s.record(e).ID, from)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, EventList{Events: eventsToWire(evs)})
}

func sortRecords(recs []store.Record) {
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].CreatedAt.Equal(recs[j].CreatedAt) {
			return recs[i].CreatedAt.Before(recs[j].CreatedAt)
		}
		return recs[i].ID < recs[j].ID
	})
}
