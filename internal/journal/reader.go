package journal

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Read returns at most limit events from seq from on, and the seq to read
// next. It never blocks: from the ring when the events are still there,
// from the files otherwise. Events gone from both are one log.gap event
// standing for them (GapData: [From, To); its Seq is To-1, so that a
// reader resuming after it asks for To). With bytes, each output event
// carries its bytes (OutputData.Bytes); an output event whose bytes are
// gone from memory and spool is replaced by a log.gap for its seq.
func (j *Journal) Read(from uint64, limit int, withBytes bool) ([]wire.Event, uint64) {
	if from == 0 {
		from = 1
	}
	limit = max(1, limit)
	j.mu.Lock()
	written, first := j.written, j.first
	j.mu.Unlock()
	if from >= written {
		return nil, from
	}
	var out []wire.Event
	next := from
	if next < first {
		evs, n := j.readFiles(next, min(first, written), limit, withBytes)
		out, next = evs, n
	}
	if len(out) >= limit || next >= written {
		return out, next
	}
	type fill struct {
		i     int
		bytes []byte
		spool int64
	}
	var fills []fill
	j.mu.Lock()
	n := uint64(len(j.ring))
	if next < j.first {
		// The ring moved on while the files were read: read them again.
		j.mu.Unlock()
		more, n2 := j.Read(next, limit-len(out), withBytes)
		return append(out, more...), n2
	}
	for ; next < j.written && len(out) < limit; next++ {
		e := j.ring[next%n]
		if withBytes && e.ev.Type == wire.EventOutput {
			fills = append(fills, fill{len(out), e.bytes, e.spool})
		}
		out = append(out, e.ev)
	}
	j.mu.Unlock()
	// The bytes are put in without mu: the shell appends meanwhile.
	for _, f := range fills {
		if f.bytes != nil {
			out[f.i] = withData(out[f.i], f.bytes)
		} else {
			out[f.i] = j.spooled(out[f.i], f.spool)
		}
	}
	return out, next
}

// withData is ev (an output event) carrying p.
func withData(ev wire.Event, p []byte) wire.Event {
	var d wire.OutputData
	_ = json.Unmarshal(ev.Data, &d)
	d.Bytes = p
	ev.Data, _ = json.Marshal(d)
	return ev
}

// spooled is output event ev with its bytes read from the spool at spool,
// or a log.gap standing for it when they are gone.
func (j *Journal) spooled(ev wire.Event, spool int64) wire.Event {
	var d wire.OutputData
	_ = json.Unmarshal(ev.Data, &d)
	if spool >= 0 {
		if p, ok := j.readSpool(spool, d.Size); ok {
			return withData(ev, p)
		}
	}
	return gapEvent(ev.Seq, ev.Seq+1, fmt.Sprintf("the bytes %d..%d of session %s's output are no longer kept by the journal (its output bound, limbsd --journal-max-output-disk, or a failed write); GET /v1/sessions/%s/output?from=%d&to=%d may still have them", d.Offset, d.Offset+d.Size, ev.Session, ev.Session, d.Offset, d.Offset+d.Size))
}

func (j *Journal) readSpool(at, size int64) ([]byte, bool) {
	j.mu.Lock()
	var seg segment
	found := false
	for _, s := range j.outSegs {
		if int64(s.first) <= at && at+size <= int64(s.first)+s.size {
			seg, found = s, true
		}
	}
	j.mu.Unlock()
	if !found {
		return nil, false
	}
	f, err := os.Open(segPath(j.opts.Dir, "output-", seg.first))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	p := make([]byte, size)
	if _, err := f.ReadAt(p, at-int64(seg.first)); err != nil {
		return nil, false
	}
	return p, true
}

func gapEvent(from, to uint64, why string) wire.Event {
	d, _ := json.Marshal(wire.GapData{From: from, To: to, Reason: why})
	return wire.Event{Seq: to - 1, Time: time.Now().UTC(), Type: wire.EventGap, Source: wire.SourceSystem, Data: d}
}

// readFiles reads events [from, to) from the event segments.
func (j *Journal) readFiles(from, to uint64, limit int, withBytes bool) ([]wire.Event, uint64) {
	j.mu.Lock()
	segs := append([]segment(nil), j.evSegs...)
	lost := append([]gap(nil), j.lost...)
	j.mu.Unlock()
	why := func(seq uint64) string {
		for _, g := range lost {
			if g.from <= seq && seq < g.to {
				return g.why
			}
		}
		return "dropped by the journal's disk bound (limbsd --journal-max-disk)"
	}
	var out []wire.Event
	next := from
	start := -1
	for i, s := range segs {
		if s.first <= from {
			start = i
		}
	}
	if start < 0 {
		start = 0
	}
	type fill struct {
		i     int
		spool int64
	}
	var fills []fill
	for i := start; i < len(segs) && len(out) < limit && next < to; i++ {
		lines(segPath(j.opts.Dir, "events-", segs[i].first), func(line []byte) bool {
			seq, ok := seqOf(line)
			if !ok || seq < next {
				return true
			}
			if seq >= to || len(out) >= limit {
				return false
			}
			var r record
			if json.Unmarshal(line, &r) != nil {
				// A record longer than a reader takes in (lines): a gap
				// for it, and whatever was missing before it.
				out = append(out, gapEvent(next, seq+1, fmt.Sprintf("the record of event %d is longer than the journal reads back (%d bytes)", seq, maxLine)))
				next = seq + 1
				return len(out) < limit
			}
			if seq > next {
				out = append(out, gapEvent(next, seq, why(next)))
				next = seq
				if len(out) >= limit {
					return false
				}
			}
			ev := r.Event
			if withBytes && ev.Type == wire.EventOutput {
				sp := int64(-1)
				if r.Spool != nil {
					sp = *r.Spool
				}
				fills = append(fills, fill{len(out), sp})
			}
			out = append(out, ev)
			next = seq + 1
			return true
		})
	}
	if next < to && len(out) < limit {
		// The files end before the ring starts: what lies between is gone.
		out = append(out, gapEvent(next, to, why(next)))
		next = to
	}
	for _, f := range fills {
		out[f.i] = j.spooled(out[f.i], f.spool)
	}
	return out, next
}
