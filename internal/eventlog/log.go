// Package eventlog is the control plane's durable event log: one
// append-only log of wire.Events per sandbox, on disk under the state dir,
// that survives the sandbox (for a retention period), with reads from a
// sequence number, reads across all sandboxes from a cursor, and follows
// that wait for what comes next.
//
// Layout (Options.Dir, STATE_DIR/events):
//
//	SANDBOX_ID/
//	  meta.json                 name, deleted_at, first_seq (written by rename)
//	  SSSSSSSSSSSSSSSSSSSS-CCCCCCCCCCCCCCCCCCCC.jsonl
//	                            a segment: the events from seq S on, the
//	                            first with cursor C, one JSON line each
//	                            (wire.Event, plus "up" on the last event of
//	                            each batch ingested from limbsd's journal)
//
// Every event goes through one path (append): its seq (per sandbox, from 1,
// no gaps) and cursor (across all sandboxes, increasing) are assigned and
// its secrets masked under one lock, and its line written to the segment
// with write(2) before anyone can read it: a `kill -9` of the process loses
// nothing a reader has seen. Segments are fsynced once per
// Options.SyncEvery (and on rotation and Close): a host crash loses at most
// the events of that last interval; a torn last line is cut at the next
// Open.
//
// Goroutines: callers of Append/Ingest and readers (any number); one
// syncer; one sweeper (retention). Log.mu guards the map of sandboxes and
// every sandboxLog's fields; it is held across the write(2) of an append
// (which is what orders the cursor), never across an fsync or a read of a
// segment (readers read segments without it, up to the size committed when
// they looked). sandboxLog.ingest serialises Ingest per sandbox and is
// taken before Log.mu.
//
// It must never decide what happens to a sandbox: it records what the
// control plane hands it, and never reads anything a sandbox wrote but the
// events given to it.
package eventlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Defaults of Options.
const (
	DefaultSegmentSize = 4 << 20
	DefaultSyncEvery   = time.Second
	DefaultKeepDeleted = 7 * 24 * time.Hour
	DefaultMaxSize     = 1 << 30
	DefaultMaxAge      = 30 * 24 * time.Hour
	DefaultSweepEvery  = time.Minute
)

// ErrNotFound is wrapped by reads of a sandbox that has no log (never had
// one, or its retention removed it).
var ErrNotFound = wire.ErrNotFound

// Options configure a Log.
type Options struct {
	// Dir holds the logs (STATE_DIR/events).
	Dir string
	// SegmentSize is the size past which a sandbox's log starts a new
	// segment file (retention removes whole segments).
	SegmentSize int64
	// SyncEvery is how often written segments are fsynced.
	SyncEvery time.Duration
	// MaxSize and MaxAge bound each sandbox's log: its oldest segments
	// are removed past them (the last one is always kept). 0: defaults;
	// negative: no bound.
	MaxSize int64
	MaxAge  time.Duration
	// KeepDeleted is how long a deleted sandbox's log stays readable.
	KeepDeleted time.Duration
	// SweepEvery is how often retention runs.
	SweepEvery time.Duration
	// RingBytes bounds the recent events kept in memory for followers of
	// every sandbox (GET /v1/events); older ones are read from disk.
	RingBytes int
	Logger    *slog.Logger
	// Now, when set, is the clock (tests).
	Now func() time.Time
}

// Upstream is the position of a sandbox's log in limbsd's journal: the
// journal's id and the seq of its last event ingested.
type Upstream struct {
	Journal string `json:"journal"`
	Seq     uint64 `json:"seq"`
}

// line is an event as a segment stores it.
type line struct {
	wire.Event
	Up *Upstream `json:"up,omitempty"`
	// dataOK: Data was encoded here (valid JSON on one line), so it is
	// spliced in as it is rather than checked again by json.Marshal
	// (most of the cost of a large output event).
	dataOK bool
}

// encode appends ln's JSON line (without the newline) to buf.
func (ln *line) encode(buf *bytes.Buffer) error {
	if !ln.dataOK || len(ln.Data) == 0 {
		b, err := json.Marshal(ln)
		buf.Write(b)
		return err
	}
	data := ln.Data
	ln.Data = nil
	b, err := json.Marshal(ln)
	ln.Data = data
	if err != nil {
		return err
	}
	buf.Write(b[:len(b)-1])
	buf.WriteString(`,"data":`)
	buf.Write(data)
	buf.WriteByte('}')
	return nil
}

// meta is a sandbox log's meta.json.
type meta struct {
	Name      string    `json:"name,omitempty"`
	DeletedAt time.Time `json:"deleted_at,omitzero"`
	// FirstSeq is the first seq still kept (retention); 0: 1.
	FirstSeq uint64 `json:"first_seq,omitempty"`
	// Up is the upstream position when the last segment was started, so
	// that finding the position reads that segment alone.
	Up *Upstream `json:"up,omitempty"`
}

type segment struct {
	first, firstCursor uint64
	size               int64 // bytes committed
	path               string
}

// sandboxLog is one sandbox's log. Its fields are guarded by Log.mu, but
// ingest.
type sandboxLog struct {
	// ingest serialises Ingest calls (taken before Log.mu).
	ingest sync.Mutex

	id   string
	dir  string
	meta meta
	segs []segment
	f    *os.File // the last segment, open for appending; nil until needed
	// last and lastCursor are the seq and cursor of its last event.
	last, lastCursor uint64
	dirty            bool
	up               Upstream
	upKnown          bool
	// causes maps the journal seqs of the commands running, and of the
	// last endedCauses that ended, to this log's seqs, for Cause (bounded
	// by maxCauses).
	causes   map[uint64]uint64
	causesOf string   // the journal causes maps
	ended    []uint64 // the journal seqs of the starts of the last commands ended, oldest first
	secrets  [][]byte
	// notify is closed when an event is appended.
	notify chan struct{}
}

// Log is the set of every sandbox's log.
type Log struct {
	opts Options
	log  *slog.Logger
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex // guards the fields below and every sandboxLog
	logs   map[string]*sandboxLog
	cursor uint64 // the last cursor assigned
	ring   eventRing
	notify chan struct{} // closed when any event is appended
	closed bool
	// enc is append's encoding of the lines it writes, kept from one
	// append to the next: a fresh buffer grew (and was cleared) anew for
	// every api.call and follower batch.
	enc bytes.Buffer
}

// maxEncKeep bounds the encoding buffer Log keeps between appends; one
// grown past it by a large batch is let go.
const maxEncKeep = 256 << 10

// Open opens the logs in opts.Dir, creating it, cutting torn last lines,
// and starts the syncer and the sweeper.
func Open(opts Options) (*Log, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.SyncEvery <= 0 {
		opts.SyncEvery = DefaultSyncEvery
	}
	if opts.MaxSize == 0 {
		opts.MaxSize = DefaultMaxSize
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.KeepDeleted <= 0 {
		opts.KeepDeleted = DefaultKeepDeleted
	}
	if opts.SweepEvery <= 0 {
		opts.SweepEvery = DefaultSweepEvery
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = 8 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the event log directory: %w; pass a writable --state-dir", err)
	}
	l := &Log{opts: opts, log: opts.Logger, stop: make(chan struct{}), logs: map[string]*sandboxLog{}, notify: make(chan struct{})}
	ents, err := os.ReadDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("reading the event log directory: %w", err)
	}
	for _, de := range ents {
		if !de.IsDir() || !strings.HasPrefix(de.Name(), "sb_") {
			continue
		}
		sl, err := l.load(de.Name())
		if err != nil {
			return nil, err
		}
		l.logs[sl.id] = sl
		l.cursor = max(l.cursor, sl.lastCursor)
	}
	if b, err := os.ReadFile(filepath.Join(opts.Dir, "cursor")); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			l.cursor = max(l.cursor, n)
		}
	}
	l.wg.Add(2)
	go l.syncer()
	go l.sweeper()
	return l, nil
}

// Close syncs and closes every segment. Later calls fail.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.stop)
	l.mu.Unlock()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, sl := range l.logs {
		if sl.f != nil {
			errs = append(errs, sl.f.Sync(), sl.f.Close())
			sl.f = nil
		}
	}
	return errors.Join(errs...)
}

func segName(first, cursor uint64) string { return fmt.Sprintf("%020d-%020d.jsonl", first, cursor) }

func parseSegName(name string) (first, cursor uint64, ok bool) {
	base, ok := strings.CutSuffix(name, ".jsonl")
	a, b, ok2 := strings.Cut(base, "-")
	if !ok || !ok2 {
		return 0, 0, false
	}
	first, err1 := strconv.ParseUint(a, 10, 64)
	cursor, err2 := strconv.ParseUint(b, 10, 64)
	return first, cursor, err1 == nil && err2 == nil && first > 0
}

// load reads a sandbox log's meta and segment list, and its last event
// (cutting a torn tail).
func (l *Log) load(id string) (*sandboxLog, error) {
	sl := &sandboxLog{id: id, dir: filepath.Join(l.opts.Dir, id), notify: make(chan struct{})}
	if b, err := os.ReadFile(filepath.Join(sl.dir, "meta.json")); err == nil {
		if err := json.Unmarshal(b, &sl.meta); err != nil {
			return nil, fmt.Errorf("event log of %s: meta.json: %w; move %s aside", id, err, sl.dir)
		}
	}
	ents, err := os.ReadDir(sl.dir)
	if err != nil {
		return nil, fmt.Errorf("event log of %s: %w", id, err)
	}
	for _, de := range ents {
		first, cursor, ok := parseSegName(de.Name())
		if !ok || !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			return nil, err
		}
		sl.segs = append(sl.segs, segment{first: first, firstCursor: cursor, size: fi.Size(), path: filepath.Join(sl.dir, de.Name())})
	}
	sort.Slice(sl.segs, func(i, j int) bool { return sl.segs[i].first < sl.segs[j].first })
	for len(sl.segs) > 0 {
		last := &sl.segs[len(sl.segs)-1]
		ev, size, err := lastLine(last.path)
		if err != nil {
			return nil, fmt.Errorf("event log of %s: %w", id, err)
		}
		if size != last.size {
			l.log.Warn("cutting a torn end of an event log (a host crash?)", "sandbox", id, "segment", last.path, "kept", size, "was", last.size)
			if err := os.Truncate(last.path, size); err != nil {
				return nil, fmt.Errorf("event log of %s: cutting its torn end: %w", id, err)
			}
			last.size = size
		}
		if ev != nil {
			sl.last, sl.lastCursor = ev.Seq, ev.Cursor
			break
		}
		// An empty segment: its events are those before it.
		_ = os.Remove(last.path)
		sl.segs = sl.segs[:len(sl.segs)-1]
	}
	if sl.last == 0 && sl.meta.FirstSeq > 1 {
		sl.last = sl.meta.FirstSeq - 1
	}
	return sl, nil
}

// lastLine returns the last whole, parseable line of a segment and the
// size up to its end.
func lastLine(path string) (*line, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	end := fi.Size()
	const chunk = 1 << 20
	for tries := 0; end > 0 && tries < 64; tries++ {
		start := max(0, end-chunk)
		buf := make([]byte, end-start)
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, err
		}
		// buf ends at end; find the last newline-terminated line.
		if buf[len(buf)-1] != '\n' {
			i := bytes.LastIndexByte(buf, '\n')
			if i < 0 && start > 0 {
				end = start // a line longer than a chunk: not ours
				continue
			}
			end = start + int64(i+1)
			continue
		}
		body := buf[:len(buf)-1]
		i := bytes.LastIndexByte(body, '\n')
		if i < 0 && start > 0 {
			end = start
			continue
		}
		var ln line
		if err := json.Unmarshal(body[i+1:], &ln); err == nil && ln.Seq > 0 {
			return &ln, end, nil
		}
		end = start + int64(i+1) // a garbled line: drop it
	}
	return nil, max(end, 0), nil
}

// get returns the log of id, creating it (in memory) when create is set.
// l.mu is held.
func (l *Log) get(id string, create bool) (*sandboxLog, error) {
	if sl := l.logs[id]; sl != nil {
		return sl, nil
	}
	if !create {
		return nil, fmt.Errorf("event log of sandbox %q: %w", id, ErrNotFound)
	}
	if !validID(id) {
		return nil, fmt.Errorf("event log of sandbox %q: not a sandbox id: %w", id, wire.ErrBadRequest)
	}
	sl := &sandboxLog{id: id, dir: filepath.Join(l.opts.Dir, id), notify: make(chan struct{}), upKnown: true}
	l.logs[id] = sl
	return sl, nil
}

func validID(id string) bool {
	if !strings.HasPrefix(id, "sb_") || len(id) > 64 {
		return false
	}
	for _, c := range id[3:] {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// writeMeta replaces meta.json (temp file + rename). l.mu is held.
func (sl *sandboxLog) writeMeta() error {
	if err := os.MkdirAll(sl.dir, 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(sl.meta)
	tmp := filepath.Join(sl.dir, ".meta.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(sl.dir, "meta.json"))
}

// SetName records the name of a sandbox, by which its log is found after
// the sandbox is deleted.
func (l *Log) SetName(id, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sl, err := l.get(id, true)
	if err != nil {
		return err
	}
	if sl.meta.Name == name {
		return nil
	}
	sl.meta.Name = name
	return sl.writeMeta()
}

// SetSecrets sets the values masked (as "***") in every event of sandbox
// id appended from now on. It is kept in memory only: the caller sets it
// again after a restart.
func (l *Log) SetSecrets(id string, values []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sl, err := l.get(id, true)
	if err != nil {
		return err
	}
	sl.secrets = secretBytes(values)
	return nil
}

// MarkDeleted records that sandbox id was deleted at: its log stays
// readable for Options.KeepDeleted, then the sweeper removes it.
func (l *Log) MarkDeleted(id string, at time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sl, err := l.get(id, true)
	if err != nil {
		return err
	}
	sl.meta.DeletedAt = at.UTC()
	if sl.f != nil {
		_ = sl.f.Sync()
		sl.f.Close()
		sl.f = nil
		sl.dirty = false
	}
	return sl.writeMeta()
}

// Deleted is a deleted sandbox whose log is kept.
type Deleted struct {
	ID, Name  string
	DeletedAt time.Time
}

// FindDeleted returns the deleted sandbox whose id or name is idOrName
// (the last deleted one of that name), if its log is still kept.
func (l *Log) FindDeleted(idOrName string) (Deleted, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best *sandboxLog
	for _, sl := range l.logs {
		if sl.meta.DeletedAt.IsZero() || (sl.id != idOrName && sl.meta.Name != idOrName) {
			continue
		}
		if sl.id == idOrName {
			best = sl
			break
		}
		if best == nil || sl.meta.DeletedAt.After(best.meta.DeletedAt) {
			best = sl
		}
	}
	if best == nil {
		return Deleted{}, false
	}
	return Deleted{ID: best.id, Name: best.meta.Name, DeletedAt: best.meta.DeletedAt}, true
}

// Last returns the seq of sandbox id's last event (0 when it has none).
func (l *Log) Last(id string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sl := l.logs[id]; sl != nil {
		return sl.last
	}
	return 0
}

// Append appends events to sandbox id's log, in order, and returns them
// as stored: Seq, Cursor and Sandbox assigned, Time set where it was zero,
// secrets masked. Seq and Cause given by the caller are ignored (Cause is
// kept when it names an earlier event of this log).
func (l *Log) Append(id string, evs ...wire.Event) ([]wire.Event, error) {
	lines := make([]line, len(evs))
	for i := range evs {
		lines[i].Event = evs[i]
		lines[i].Seq = 0
	}
	return l.append(id, lines, nil)
}

// Ingest appends events of limbsd's journal (journal is the journal's id)
// as Append does, and records the journal seq of the last one as the
// log's upstream position (Upstream), in the same write. Each event
// carries the journal's own Seq and Cause: events at or before the
// recorded position of the same journal are skipped (a follower resuming
// after a restart of either side may send them again), and a Cause is
// turned into the seq of this log's event it names. Consecutive output
// events of one session whose bytes follow each other are coalesced into
// one (up to 64 KiB). Calls for one sandbox are serialised.
func (l *Log) Ingest(id, journal string, evs ...wire.Event) ([]wire.Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	l.mu.Lock()
	sl, err := l.get(id, true)
	if err == nil {
		err = l.loadUpstream(sl)
	}
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// The check against the position and the append are one step.
	sl.ingest.Lock()
	defer sl.ingest.Unlock()
	l.mu.Lock()
	up := sl.up
	l.mu.Unlock()
	lines := make([]line, 0, len(evs))
	var upSeqs []uint64
	// outs[i] is line i's output data, decoded, while it may grow.
	var outs []*wire.OutputData
	for _, ev := range evs {
		if up.Journal == journal && ev.Seq <= up.Seq {
			continue
		}
		var od *wire.OutputData
		if ev.Type == wire.EventOutput && len(ev.Data) > maxMergeData {
			// Too big to merge with much: spliced in as it came (the
			// follower's decoder checked it is JSON), not decoded and
			// encoded again, which was most of the cost of a flood.
			lines = append(lines, line{Event: ev, dataOK: bytes.IndexByte(ev.Data, '\n') < 0})
			upSeqs = append(upSeqs, ev.Seq)
			outs = append(outs, nil)
			continue
		}
		if ev.Type == wire.EventOutput {
			od = new(wire.OutputData)
			if json.Unmarshal(ev.Data, od) != nil || int64(len(od.Bytes)) != od.Size {
				od = nil
			}
		}
		if n := len(lines); n > 0 && coalesce(&lines[n-1].Event, outs[n-1], ev, od) {
			upSeqs[n-1] = ev.Seq
			continue
		}
		lines = append(lines, line{Event: ev})
		upSeqs = append(upSeqs, ev.Seq)
		outs = append(outs, od)
	}
	if len(lines) == 0 {
		return nil, nil
	}
	for i, od := range outs {
		if od != nil {
			lines[i].Data, _ = json.Marshal(od)
			lines[i].dataOK = true
		}
	}
	pos := &Upstream{Journal: journal, Seq: upSeqs[len(upSeqs)-1]}
	return l.append(id, lines, func(sl *sandboxLog, i int, ev *line) {
		if sl.causes == nil || sl.causesOf != journal {
			sl.causes, sl.causesOf = map[uint64]uint64{}, journal
		}
		if up := ev.Cause; up != 0 {
			ev.Cause = sl.causes[up]
			if ev.Type == wire.EventCommandFinished {
				sl.endedLocked(up)
			}
		}
		if ev.Type == wire.EventCommandStarted {
			// Only a command's start is ever a cause (of its signals,
			// waits and end), so the map holds the commands running.
			if len(sl.causes) >= maxCauses {
				clear(sl.causes)
			}
			sl.causes[upSeqs[i]] = ev.Seq
		}
		if i == len(lines)-1 {
			ev.Up = pos
		}
	})
}

// maxCauses bounds a sandbox's causes: commands whose end never came
// (a journal lost), cleared when full.
const maxCauses = 1 << 14

// endedCauses is how many ended commands keep their start in causes: an
// end ingested again (its batch's write failed and the follower sends it
// again) and a signal noted just after the end still name the start.
const endedCauses = 64

// endedLocked records that the command started at journal seq up ended,
// and forgets the start of the command that ended endedCauses before.
func (sl *sandboxLog) endedLocked(up uint64) {
	if len(sl.ended) >= endedCauses {
		delete(sl.causes, sl.ended[0])
		sl.ended = append(sl.ended[:0], sl.ended[1:]...)
	}
	sl.ended = append(sl.ended, up)
}

// maxCoalesce is the most output bytes one coalesced event holds.
const maxCoalesce = 64 << 10

// coalesce merges ev (its output data b) into prev (a) when both are
// output of one session with contiguous bytes; prev's Data is encoded
// again by the caller.
// maxMergeData is the largest data of an output event Ingest decodes to
// merge it with its neighbours: half a merged chunk, in base64 and JSON.
const maxMergeData = maxCoalesce/2*4/3 + 128

func coalesce(prev *wire.Event, a *wire.OutputData, ev wire.Event, b *wire.OutputData) bool {
	if a == nil || b == nil || prev.Session != ev.Session || prev.Command != ev.Command {
		return false
	}
	if a.Offset+a.Size != b.Offset || len(a.Bytes)+len(b.Bytes) > maxCoalesce {
		return false
	}
	if a.Size == int64(len(a.Bytes)) && cap(a.Bytes) < maxCoalesce {
		a.Bytes = append(make([]byte, 0, maxCoalesce), a.Bytes...)
	}
	a.Size += b.Size
	a.Bytes = append(a.Bytes, b.Bytes...)
	return true
}

// Upstream returns sandbox id's position in limbsd's journal: where a
// follower resumes (from Seq+1 of that Journal). Zero when nothing was
// ingested.
func (l *Log) Upstream(id string) (Upstream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sl := l.logs[id]
	if sl == nil {
		return Upstream{}, nil
	}
	err := l.loadUpstream(sl)
	return sl.up, err
}

// loadUpstream finds the last recorded upstream position: in the last
// segment, else in meta.json (as it was when that segment started). l.mu
// is held.
func (l *Log) loadUpstream(sl *sandboxLog) error {
	if sl.upKnown {
		return nil
	}
	if sl.meta.Up != nil {
		sl.up = *sl.meta.Up
	}
	for i := len(sl.segs) - 1; i >= 0 && i >= len(sl.segs)-1; i-- {
		var found *Upstream
		err := scan(sl.segs[i], 0, func(raw []byte, _ int64) bool {
			if !bytes.Contains(raw, []byte(`"up":{`)) {
				return true
			}
			var ln line
			if json.Unmarshal(raw, &ln) == nil && ln.Up != nil {
				found = ln.Up
			}
			return true
		})
		if err != nil {
			return err
		}
		if found != nil {
			sl.up = *found
			break
		}
	}
	sl.upKnown = true
	return nil
}

// append assigns, masks, encodes and writes lines. each, when set, sees
// every line once its Seq is assigned, before it is encoded.
func (l *Log) append(id string, lines []line, each func(sl *sandboxLog, i int, ln *line)) ([]wire.Event, error) {
	if len(lines) == 0 {
		return nil, nil
	}
	now := l.opts.Now().UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("event log is closed")
	}
	sl, err := l.get(id, true)
	if err != nil {
		return nil, err
	}
	buf := &l.enc
	buf.Reset()
	defer func() {
		if buf.Cap() > maxEncKeep {
			l.enc = bytes.Buffer{}
		}
	}()
	out := make([]wire.Event, len(lines))
	seq, cursor := sl.last, l.cursor
	for i := range lines {
		ln := &lines[i]
		seq++
		cursor++
		if ln.Cause != 0 && each == nil && ln.Cause > sl.last {
			ln.Cause = 0
		}
		ln.Seq, ln.Cursor, ln.Sandbox = seq, cursor, id
		if ln.Time.IsZero() {
			ln.Time = now
		}
		if ln.Source == "" {
			ln.Source = wire.SourceSystem
		}
		if each != nil {
			each(sl, i, ln)
		}
		if len(sl.secrets) > 0 {
			ln.Event = maskEvent(ln.Event, sl.secrets)
		}
		n := buf.Len()
		if err := ln.encode(buf); err != nil {
			buf.Truncate(n)
			return nil, fmt.Errorf("encoding event %s of %s: %w", ln.Type, id, err)
		}
		buf.WriteByte('\n')
		out[i] = ln.Event
	}
	if err := l.write(sl, buf.Bytes(), lines[0].Seq, lines[0].Cursor); err != nil {
		return nil, err
	}
	sl.last, sl.lastCursor, l.cursor = seq, cursor, cursor
	for i := range lines {
		if lines[i].Up != nil {
			sl.up, sl.upKnown = *lines[i].Up, true
		}
	}
	l.toRing(out)
	close(sl.notify)
	sl.notify = make(chan struct{})
	close(l.notify)
	l.notify = make(chan struct{})
	return out, nil
}

// write writes b, the lines from seq first (cursor firstCursor) on, to the
// log's last segment, starting a new one past SegmentSize. l.mu is held.
func (l *Log) write(sl *sandboxLog, b []byte, first, firstCursor uint64) error {
	if n := len(sl.segs); n == 0 || sl.segs[n-1].size >= l.opts.SegmentSize {
		if sl.f != nil {
			_ = sl.f.Sync()
			sl.f.Close()
			sl.f = nil
		}
		if err := os.MkdirAll(sl.dir, 0o700); err != nil {
			return fmt.Errorf("event log of %s: %w", sl.id, err)
		}
		if len(sl.segs) > 0 && l.loadUpstream(sl) == nil && sl.up.Journal != "" {
			up := sl.up
			sl.meta.Up = &up
			if err := sl.writeMeta(); err != nil {
				return fmt.Errorf("event log of %s: %w", sl.id, err)
			}
		}
		sl.segs = append(sl.segs, segment{first: first, firstCursor: firstCursor, path: filepath.Join(sl.dir, segName(first, firstCursor))})
		l.boundSizeLocked(sl) // retention.go
	}
	seg := &sl.segs[len(sl.segs)-1]
	if sl.f == nil {
		f, err := os.OpenFile(seg.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("event log of %s: %w", sl.id, err)
		}
		sl.f = f
	}
	n, err := sl.f.Write(b)
	seg.size += int64(n)
	if err != nil {
		// What was written in part is cut, so that the next line starts
		// on a line of its own.
		_ = sl.f.Truncate(seg.size - int64(n))
		seg.size -= int64(n)
		return fmt.Errorf("writing the event log of %s: %w", sl.id, err)
	}
	sl.dirty = true
	if !sl.meta.DeletedAt.IsZero() {
		// The last words of a deleted sandbox (its DELETE's api.call):
		// no descriptor stays open for it.
		_ = sl.f.Sync()
		sl.f.Close()
		sl.f, sl.dirty = nil, false
	}
	return nil
}

// toRing keeps evs in the ring of recent events, and lets the oldest go
// past RingBytes (the newest always stays). l.mu is held.
func (l *Log) toRing(evs []wire.Event) {
	for _, ev := range evs {
		l.ring.push(ev)
	}
	for l.ring.bytes > l.opts.RingBytes && l.ring.len() > 1 {
		l.ring.dropOldest()
	}
}

func evSize(ev wire.Event) int { return 128 + len(ev.Data) }

func (l *Log) syncer() {
	defer l.wg.Done()
	t := time.NewTicker(l.opts.SyncEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.syncAll()
	}
}

// syncAll fsyncs every segment written since the last sync, without l.mu
// held across the syncs.
func (l *Log) syncAll() {
	l.mu.Lock()
	var fs []*os.File
	for _, sl := range l.logs {
		if sl.dirty && sl.f != nil {
			// A duplicate descriptor: the log may close its own meanwhile.
			if f, err := dup(sl.f); err == nil {
				fs = append(fs, f)
			}
			sl.dirty = false
		}
	}
	l.mu.Unlock()
	for _, f := range fs {
		if err := f.Sync(); err != nil {
			l.log.Warn("syncing the event log", "err", err)
		}
		f.Close()
	}
}

func dup(f *os.File) (*os.File, error) { return os.OpenFile(f.Name(), os.O_WRONLY|os.O_APPEND, 0) }

// scan reads the complete lines of seg from offset off up to its committed
// size, calling fn with each (without its newline) and its offset, until fn
// returns false.
func scan(seg segment, off int64, fn func(raw []byte, off int64) bool) error {
	f, err := os.Open(seg.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	br := bufio.NewReaderSize(io.LimitReader(f, seg.size-off), 256<<10)
	for off < seg.size {
		raw, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it.
			full := append([]byte(nil), raw...)
			for errors.Is(err, bufio.ErrBufferFull) {
				raw, err = br.ReadSlice('\n')
				full = append(full, raw...)
			}
			raw = full
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		start := off
		off += int64(len(raw))
		if !fn(raw[:len(raw)-1], start) {
			return nil
		}
	}
	return nil
}

// Cursor is the last cursor assigned: a reader of every sandbox's events
// from Cursor()+1 on gets what is logged from now on.
func (l *Log) Cursor() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cursor
}
