package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Filter selects events by type: each entry is a type (command.finished)
// or a prefix ending in '*' (command.*). An empty Filter selects all.
type Filter []string

// ParseFilter parses a type= parameter: entries separated by ',' or '|'.
func ParseFilter(s string) (Filter, error) {
	var f Filter
	for _, t := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '|' }) {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if strings.ContainsAny(t[:len(t)-1], "*") {
			return nil, fmt.Errorf("type %q: a '*' may only end a prefix, as in command.*: %w", t, wire.ErrBadRequest)
		}
		f = append(f, t)
	}
	return f, nil
}

// Match says whether f selects type t. log.gap always matches: a reader
// must know what it did not get.
func (f Filter) Match(t wire.EventType) bool {
	if len(f) == 0 || t == wire.EventGap {
		return true
	}
	for _, p := range f {
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(string(t), pre) {
				return true
			}
		} else if string(t) == p {
			return true
		}
	}
	return false
}

// maxScan bounds the lines one Read looks at, so that a filter matching
// little does not read a whole log in one call: the reader goes on from
// Next.
const maxScan = 200_000

// Reader reads one sandbox's log in order from a seq on. It is not safe
// for concurrent use.
type Reader struct {
	l      *Log
	id     string
	filter Filter
	next   uint64
	// Where next is in the segments, when known: the segment's first seq
	// and the offset of the line of seq next.
	seg uint64
	off int64
}

// NewReader returns a reader of sandbox id's log from seq from on (0 and
// 1: from the start).
func (l *Log) NewReader(id string, from uint64, f Filter) *Reader {
	return &Reader{l: l, id: id, filter: f, next: max(from, 1)}
}

// Next is the seq the next Read starts at: the from= that continues.
func (r *Reader) Next() uint64 { return r.next }

// Read returns up to max events from Next on (fewer, maybe none, at the
// end of the log or after maxScan lines not matching the filter). When
// retention removed events from Next on, the first event returned is a
// log.gap (Seq 0) saying which.
func (r *Reader) Read(max int) ([]wire.Event, error) {
	l := r.l
	l.mu.Lock()
	sl := l.logs[r.id]
	if sl == nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("event log of sandbox %q: %w", r.id, ErrNotFound)
	}
	segs := append([]segment(nil), sl.segs...)
	last := sl.last
	l.mu.Unlock()
	var out []wire.Event
	if r.next > last {
		return out, nil
	}
	if len(segs) == 0 || r.next < segs[0].first {
		to := last + 1
		if len(segs) > 0 {
			to = segs[0].first
		}
		out = append(out, gapEvent(r.id, r.next, to, "retention: removed by the log's size or age bound"))
		r.next, r.seg, r.off = to, 0, 0
		if len(segs) == 0 {
			return out, nil
		}
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first > r.next }) - 1
	off := int64(0)
	if r.seg == segs[i].first && r.off <= segs[i].size {
		off = r.off
	}
	scanned := 0
	for ; i < len(segs) && len(out) < max && scanned < maxScan; i, off = i+1, 0 {
		seg := segs[i]
		var perr error
		err := scan(seg, off, func(raw []byte, at int64) bool {
			seq, ok := quickSeq(raw)
			if !ok {
				perr = fmt.Errorf("event log of %s: a line at %d of %s is not an event: the log is damaged", r.id, at, seg.path)
				return false
			}
			if seq < r.next {
				return true
			}
			scanned++
			var ln line
			if err := json.Unmarshal(raw, &ln); err != nil {
				perr = fmt.Errorf("event log of %s: event %d: %w", r.id, seq, err)
				return false
			}
			r.next, r.seg, r.off = seq+1, seg.first, at+int64(len(raw))+1
			if r.filter.Match(ln.Type) {
				out = append(out, ln.Event)
			}
			return len(out) < max && scanned < maxScan
		})
		if err == nil {
			err = perr
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// Wait returns once an event after Next is in the log, or ctx ends.
func (r *Reader) Wait(ctx context.Context) error {
	l := r.l
	l.mu.Lock()
	sl := l.logs[r.id]
	if sl == nil {
		l.mu.Unlock()
		return fmt.Errorf("event log of sandbox %q: %w", r.id, ErrNotFound)
	}
	if sl.last >= r.next {
		l.mu.Unlock()
		return nil
	}
	ch := sl.notify
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func gapEvent(id string, from, to uint64, reason string) wire.Event {
	d, _ := json.Marshal(wire.GapData{From: from, To: to, Reason: reason})
	return wire.Event{Sandbox: id, Type: wire.EventGap, Source: wire.SourceSystem, Data: d}
}

// quickSeq reads the seq of a stored line, which starts {"seq":N,.
func quickSeq(raw []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(raw, []byte(`{"seq":`))
	if !ok {
		return 0, false
	}
	i := bytes.IndexByte(rest, ',')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	return n, err == nil
}

// GlobalReader reads the events of every sandbox in cursor order from a
// cursor on. It is not safe for concurrent use.
type GlobalReader struct {
	l      *Log
	filter Filter
	cursor uint64
}

// NewGlobalReader returns a reader of every sandbox's events after cursor
// (0: from the oldest kept).
func (l *Log) NewGlobalReader(cursor uint64, f Filter) *GlobalReader {
	return &GlobalReader{l: l, filter: f, cursor: cursor}
}

// Cursor is the cursor of the last event read (or skipped by the filter):
// the from= that continues.
func (g *GlobalReader) Cursor() uint64 { return g.cursor }

// Read returns up to max events after Cursor, in cursor order: from the
// ring of recent events when it still holds them, else merged from every
// sandbox's segments on disk.
func (g *GlobalReader) Read(limit int) ([]wire.Event, error) {
	l := g.l
	l.mu.Lock()
	if g.cursor >= l.cursor {
		l.mu.Unlock()
		return nil, nil
	}
	if n := l.ring.len(); n > 0 && l.ring.at(0).Cursor <= g.cursor+1 {
		i := sort.Search(n, func(i int) bool { return l.ring.at(i).Cursor > g.cursor })
		var out []wire.Event
		for ; i < n && len(out) < limit; i++ {
			ev := *l.ring.at(i)
			g.cursor = ev.Cursor
			if g.filter.Match(ev.Type) {
				out = append(out, ev)
			}
		}
		l.mu.Unlock()
		return out, nil
	}
	type snap struct {
		id   string
		segs []segment
	}
	var snaps []snap
	for _, sl := range l.logs {
		if sl.lastCursor > g.cursor {
			snaps = append(snaps, snap{sl.id, append([]segment(nil), sl.segs...)})
		}
	}
	upTo := l.cursor
	l.mu.Unlock()
	var all []wire.Event
	for _, s := range snaps {
		if len(s.segs) == 0 {
			continue
		}
		i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].firstCursor > g.cursor+1 }) - 1
		i = max(i, 0)
		n := 0
		for ; i < len(s.segs) && n < limit; i++ {
			var perr error
			err := scan(s.segs[i], 0, func(raw []byte, _ int64) bool {
				var ln line
				if err := json.Unmarshal(raw, &ln); err != nil {
					perr = fmt.Errorf("event log of %s: %w", s.id, err)
					return false
				}
				if ln.Cursor > g.cursor && ln.Cursor <= upTo {
					all = append(all, ln.Event)
					n++
				}
				return n < limit
			})
			if err == nil {
				err = perr
			}
			if err != nil {
				return nil, err
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Cursor < all[j].Cursor })
	if len(all) > limit {
		all = all[:limit]
	}
	out := all[:0:0]
	for _, ev := range all {
		g.cursor = ev.Cursor
		if g.filter.Match(ev.Type) {
			out = append(out, ev)
		}
	}
	if len(all) == 0 {
		// What is left was removed by retention: nothing to wait for.
		g.cursor = upTo
	}
	return out, nil
}

// Wait returns once an event after Cursor is in some log, or ctx ends.
func (g *GlobalReader) Wait(ctx context.Context) error {
	l := g.l
	l.mu.Lock()
	if l.cursor > g.cursor {
		l.mu.Unlock()
		return nil
	}
	ch := l.notify
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
