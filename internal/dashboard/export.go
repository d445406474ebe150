package dashboard

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"

	"github.com/limbs-dev/limbs/internal/atif"
	"github.com/limbs-dev/limbs/internal/cast"
	"github.com/limbs-dev/limbs/internal/wire"
)

// maxExportPages bounds the pages of events one download reads
// (control.MaxEventsPage events each).
const maxExportPages = 200

// safeName is what a downloaded file's name may hold.
var safeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// allEvents reads a sandbox's whole event log (a deleted one's within
// the retention) through the Plane, masked as every read is.
func (h *Handler) allEvents(r *http.Request, id string) ([]wire.Event, error) {
	var all []wire.Event
	from := uint64(1)
	for range maxExportPages {
		page, err := h.opts.Plane.Events(r.Context(), id, from, nil, 0)
		if err != nil {
			return nil, err
		}
		for _, e := range page.Events {
			if e.Seq == 0 || (len(all) > 0 && e.Seq <= all[len(all)-1].Seq) {
				continue // a gap marker, or a repeat
			}
			all = append(all, e)
		}
		if len(page.Events) == 0 || page.Next <= from {
			return all, nil
		}
		from = page.Next
	}
	return nil, fmt.Errorf("sandbox %s: its event log is longer than a download takes (%d pages); use limbs export: %w", id, maxExportPages, wire.ErrTooLarge)
}

func attachment(w http.ResponseWriter, name, ctype string) {
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Disposition", `attachment; filename="`+safeName.ReplaceAllString(name, "_")+`"`)
}

// serveCast answers GET /ui/sandboxes/{id}/cast?session=S: the session's
// terminal as asciicast v2, with a marker at each command.
func (h *Handler) serveCast(w http.ResponseWriter, r *http.Request, id string) {
	events, err := h.allEvents(r, id)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	rec, err := cast.Build(events, cast.Options{Session: r.URL.Query().Get("session"), Markers: true})
	if err != nil {
		wire.WriteError(w, fmt.Errorf("sandbox %s: %v: %w", id, err, wire.ErrNotFound))
		return
	}
	var b bytes.Buffer
	if err := rec.WriteV2(&b, cast.WriteOptions{}); err != nil {
		wire.WriteError(w, err)
		return
	}
	attachment(w, id+"-"+rec.Session+".cast", "application/x-asciicast")
	_, _ = w.Write(b.Bytes())
}

// serveATIF answers GET /ui/sandboxes/{id}/atif?run=R: a run of limbs
// agent (the last one by default) as an ATIF trajectory.
func (h *Handler) serveATIF(w http.ResponseWriter, r *http.Request, id string) {
	events, err := h.allEvents(r, id)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	t, err := atif.Build(events, r.URL.Query().Get("run"))
	if err != nil {
		wire.WriteError(w, fmt.Errorf("sandbox %s: %v: %w", id, err, wire.ErrNotFound))
		return
	}
	var b bytes.Buffer
	if err := atif.Write(&b, t); err != nil {
		wire.WriteError(w, err)
		return
	}
	attachment(w, id+"-"+t.SessionID+".atif.json", "application/json")
	_, _ = w.Write(b.Bytes())
}
