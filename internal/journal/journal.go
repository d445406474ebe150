// Package journal is limbsd's record of everything that happens in its
// sandbox: sessions, commands, input, signals, files and a timing index of
// every session's output (docs/api.md, "Events"). Events get absolute
// sequence numbers from 1 that continue across limbsd restarts; the newest
// live in an in-memory ring, and a writer goroutine appends them to
// segment files in the journal's directory, bounded by size (the oldest
// segment is dropped). The bytes of the output events go to a separate
// spool, bounded on its own, so that a flood of output never pushes the
// commands out of the journal.
//
// It must never block the shell or the API: Append only takes the
// journal's lock for a copy into memory; disk writes, and their failures,
// are the writer's alone. A reader that falls behind is served from the
// files, and told with a log.gap event what is gone from both.
//
// # Concurrency
//
// Goroutines: any number of appenders (the shell's read loops and API
// callers, often with their session's lock held: the journal takes no
// other lock and calls nothing outside itself while holding mu), the
// writer (one per journal: the only writer of the files), one timer per
// session with output waiting to be coalesced, any number of readers, and
// the workspace watcher's two goroutines (watch.go: the inotify reader,
// and the loop that coalesces changes and appends them; it takes mu only
// through Append and to check the file API's paths).
// mu guards the ring, the counters and the segment lists; the writer does
// its file I/O without mu. Readers see only events the writer has handed
// to the kernel (seq < written), so that an event a client has seen is
// never numbered again by a limbsd restarted after a kill -9.
package journal

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
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

// Defaults of Options. The in-memory bounds are small beside the disk's:
// what the ring holds is what a follower that keeps up reads (limbs
// serve's reads the newest events, within milliseconds), and a reader
// further behind is served from the files. Filled, they cost a limbsd
// a few MiB (a soak of 25,000 commands took a limbsd to 167 MiB with
// 65,536 events and 16 MiB of output in memory: docs/load.md).
const (
	DefaultMaxDisk       = 32 << 20  // the event segments together
	DefaultMaxOutputDisk = 128 << 20 // the output spool's segments together
	DefaultRingEvents    = 1 << 13
	DefaultRingBytes     = 4 << 20 // output bytes held in memory
	// Output is coalesced into one event per session per OutputEvery, or
	// per OutputMax bytes, whichever comes first.
	OutputEvery = 15 * time.Millisecond
	OutputMax   = 64 << 10
	// burstChunk: a chunk of output this large (more than a line or
	// two; a burst's PTY reads are a few KiB) starts an event with
	// OutputMax of room, so the reads that follow never regrow it.
	burstChunk = 512
	// MaxText bounds the text of one command.started or input event; the
	// rest is cut (the command's own log has all of it).
	MaxText = 64 << 10
)

// segments per bound: a bound is kept by dropping whole segments.
const segmentsPerBound = 8

// ReasonLimbsdExited is the reason of the ends a restarted limbsd records
// for what the previous one left running.
const ReasonLimbsdExited = "limbsd exited while the command ran"

// Options configure a Journal.
type Options struct {
	// Dir holds the journal (limbsd: StateDir/journal).
	Dir string
	// MaxDisk bounds the event segments, MaxOutputDisk the output spool;
	// 0 means the default.
	MaxDisk       int64
	MaxOutputDisk int64
	// RingEvents and RingBytes bound memory; 0 means the default.
	RingEvents int
	RingBytes  int64
	Logger     *slog.Logger
}

// Journal is one limbsd's event journal.
type Journal struct {
	opts Options
	log  *slog.Logger
	id   string
	wake chan struct{} // buffered 1: the writer has work
	quit chan struct{}
	done chan struct{}

	mu      sync.Mutex // guards the fields below
	ring    []entry    // circular, indexed by seq % len(ring)
	first   uint64     // oldest seq in the ring (== next when empty)
	next    uint64     // seq of the next event
	written uint64     // events below this are in the files or given up
	notify  chan struct{}
	memOut  int64 // output bytes held by ring entries
	pending map[string]*outPending
	lost    []gap // seq ranges the files do not hold, oldest first
	evSegs  []segment
	outSegs []segment
	outEnd  int64 // spool offset one past the newest byte written
	closed  bool
	werr    error // the newest write error, logged once per failing spell
	// apiPaths are the paths the file API changes (watch.go).
	apiPaths map[string]apiChange
	// outEnds is where each session's output events ended when the
	// journal was opened (OutputEnd); set by Open, read-only after.
	outEnds map[string]int64
}

type entry struct {
	ev    wire.Event
	bytes []byte // output bytes while in memory
	spool int64  // where the bytes are in the spool; -1: not (yet) there
}

type gap struct {
	from, to uint64
	why      string
}

// segment is one file of a bounded series, named by its first seq (events)
// or spool offset (output).
type segment struct {
	first uint64
	size  int64
}

// outPending is output of a session not yet in an event.
type outPending struct {
	off   int64
	buf   []byte
	at    time.Time
	timer *time.Timer
}

// record is an event as the files hold it.
type record struct {
	wire.Event
	Spool *int64 `json:"spool,omitempty"`
}

// Open opens (or creates) the journal in opts.Dir. A journal whose id file
// is missing is a new one: its old segments are removed and sequence
// numbers start again at 1, under a new id.
func Open(opts Options) (*Journal, error) {
	if opts.MaxDisk <= 0 {
		opts.MaxDisk = DefaultMaxDisk
	}
	if opts.MaxOutputDisk <= 0 {
		opts.MaxOutputDisk = DefaultMaxOutputDisk
	}
	if opts.RingEvents <= 0 {
		opts.RingEvents = DefaultRingEvents
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = DefaultRingBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal directory: %w; pass a writable --state-dir", err)
	}
	j := &Journal{
		opts: opts, log: opts.Logger, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		ring: make([]entry, min(opts.RingEvents, initialRing)), first: 1, next: 1, written: 1,
		notify: make(chan struct{}), pending: map[string]*outPending{},
	}
	idPath := filepath.Join(opts.Dir, "id")
	b, err := os.ReadFile(idPath)
	if id := strings.TrimSpace(string(b)); err == nil && strings.HasPrefix(id, "j_") {
		j.id = id
	} else {
		j.removeSegments()
		rb := make([]byte, 8)
		_, _ = rand.Read(rb)
		j.id = "j_" + hex.EncodeToString(rb)
		if err := os.WriteFile(idPath, []byte(j.id+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("journal id: %w; pass a writable --state-dir", err)
		}
	}
	j.evSegs = listSegments(opts.Dir, "events-")
	j.outSegs = listSegments(opts.Dir, "output-")
	if n := len(j.outSegs); n > 0 {
		j.outEnd = int64(j.outSegs[n-1].first) + j.outSegs[n-1].size
	}
	last, open := j.scan()
	j.outEnds = open.outEnd
	j.first, j.next, j.written = last+1, last+1, last+1
	go j.writer()
	j.endLeftovers(open)
	return j, nil
}

// OutputEnd is the offset where the output events of session ended when
// the journal was opened, and whether it has any: a restored session's
// stream continues there (package shell), so that its output events
// neither overlap nor leave a hole after a kill -9.
func (j *Journal) OutputEnd(session string) (int64, bool) {
	if j == nil {
		return 0, false
	}
	n, ok := j.outEnds[session]
	return n, ok
}

// ID names this journal: a reader that sees another id than before is
// reading a new journal (limbsd's state directory was wiped), whose
// sequence numbers start again.
func (j *Journal) ID() string {
	if j == nil {
		return ""
	}
	return j.id
}

func (j *Journal) removeSegments() {
	for _, p := range []string{"events-", "output-"} {
		for _, s := range listSegments(j.opts.Dir, p) {
			_ = os.Remove(segPath(j.opts.Dir, p, s.first))
		}
	}
}

func segPath(dir, prefix string, first uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%s%020d.log", prefix, first))
}

func listSegments(dir, prefix string) []segment {
	ents, _ := os.ReadDir(dir)
	var out []segment
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".log") || !e.Type().IsRegular() {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, prefix), ".log"), 10, 64)
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, segment{first: n, size: fi.Size()})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].first < out[b].first })
	return out
}

// seqOf reads the seq of a record line without decoding it: every record
// starts with {"seq":N,.
func seqOf(line []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(line, []byte(`{"seq":`))
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

// maxLine bounds one record line a reader takes in (events are bounded far
// below it: MaxText, OutputMax).
const maxLine = 4 << 20

// lines calls f with each complete line of the segment file at path, and
// returns the offset past the last complete one. A line longer than
// maxLine is passed cut to its first maxLine bytes (not JSON then, but
// its seq is still there, see seqOf), the rest skipped: a long record
// never hides the lines after it.
func lines(path string, f func(line []byte) bool) int64 {
	fh, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer fh.Close()
	// A long line is skipped to its end, but never past the file's size
	// when it was opened (nor past maxLine for a file of no size).
	size := int64(maxLine)
	if fi, err := fh.Stat(); err == nil {
		size = max(size, fi.Size())
	}
	br := bufio.NewReaderSize(fh, 64<<10)
	var off int64
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: gather it, up to maxLine.
			long := append([]byte(nil), line...)
			n := int64(len(line))
			for err == bufio.ErrBufferFull && off+n < size {
				line, err = br.ReadSlice('\n')
				n += int64(len(line))
				if len(long) < maxLine {
					long = append(long, line[:min(len(line), maxLine-len(long))]...)
				}
			}
			if err != nil {
				return off
			}
			off += n
			if !f(bytes.TrimSuffix(long, []byte("\n"))) {
				return off
			}
			continue
		}
		if err != nil {
			return off
		}
		off += int64(len(line))
		if !f(line[:len(line)-1]) {
			return off
		}
	}
}

// openCommand is a command the previous limbsd started and did not finish.
type openCommand struct {
	seq     uint64
	session string
	command string
	source  wire.EventSource
	at      time.Time
	start   int64
}

// leftovers is what the previous limbsd left running.
type leftovers struct {
	commands []openCommand
	sessions []string // sessions whose shell was running
	outEnd   map[string]int64
	lastAt   time.Time
}

// scan reads the event segments: the last seq, and what was left running.
// A torn last line (limbsd killed while writing it) is cut off.
func (j *Journal) scan() (uint64, leftovers) {
	var last uint64
	cmds := map[string]openCommand{}
	var order []string
	live := map[string]bool{}
	var liveOrder []string
	lo := leftovers{outEnd: map[string]int64{}}
	for i, sg := range j.evSegs {
		path := segPath(j.opts.Dir, "events-", sg.first)
		good := lines(path, func(line []byte) bool {
			var r record
			if json.Unmarshal(line, &r) != nil || r.Seq == 0 {
				// A record cut by lines still holds its seq: never number
				// it again.
				if seq, ok := seqOf(line); ok {
					last = max(last, seq)
				}
				return true
			}
			last = max(last, r.Seq)
			lo.lastAt = r.Time
			key := r.Session + "/" + r.Command
			switch r.Type {
			case wire.EventCommandStarted:
				var d wire.CommandStartedData
				_ = json.Unmarshal(r.Data, &d)
				if _, ok := cmds[key]; !ok {
					order = append(order, key)
				}
				cmds[key] = openCommand{seq: r.Seq, session: r.Session, command: r.Command, source: r.Source, at: r.Time, start: d.OffsetStart}
			case wire.EventCommandFinished:
				delete(cmds, key)
			case wire.EventSessionCreated, wire.EventSessionRestarted:
				if !live[r.Session] {
					liveOrder = append(liveOrder, r.Session)
				}
				live[r.Session] = true
			case wire.EventSessionExited, wire.EventSessionClosed:
				live[r.Session] = false
			case wire.EventOutput:
				var d wire.OutputData
				_ = json.Unmarshal(r.Data, &d)
				lo.outEnd[r.Session] = max(lo.outEnd[r.Session], d.Offset+d.Size)
			}
			return true
		})
		if i == len(j.evSegs)-1 && good < sg.size {
			_ = os.Truncate(path, good)
			j.evSegs[i].size = good
		}
	}
	for _, k := range order {
		if c, ok := cmds[k]; ok {
			lo.commands = append(lo.commands, c)
		}
	}
	seen := map[string]bool{}
	for _, s := range liveOrder {
		if live[s] && !seen[s] {
			seen[s] = true
			lo.sessions = append(lo.sessions, s)
		}
	}
	return last, lo
}

// endLeftovers records the ends the previous limbsd did not: each command
// it started and never finished, then each session whose shell ran.
func (j *Journal) endLeftovers(lo leftovers) {
	for _, c := range lo.commands {
		end := max(c.start, lo.outEnd[c.session])
		d := wire.CommandFinishedData{
			Status: wire.StatusLost, OffsetStart: c.start, OffsetEnd: end, Reason: ReasonLimbsdExited,
			DurationMs: max(0, lo.lastAt.Sub(c.at).Milliseconds()),
		}
		j.Append(wire.Event{Session: c.session, Command: c.command, Type: wire.EventCommandFinished, Source: wire.SourceSystem, Cause: c.seq}, d)
	}
	for _, s := range lo.sessions {
		j.Append(wire.Event{Session: s, Type: wire.EventSessionExited, Source: wire.SourceSystem}, wire.SessionData{Reason: "limbsd exited"})
	}
}

// Append adds ev with data (marshalled into ev.Data) and returns its seq.
// Seq is assigned here, and Time when zero. It never blocks on the disk.
// Output of ev's session waiting to be coalesced goes first, so that a
// command's end follows the output it ends.
func (j *Journal) Append(ev wire.Event, data any) uint64 {
	if j == nil {
		return 0
	}
	if data != nil {
		b, err := json.Marshal(data)
		if err == nil {
			ev.Data = b
		}
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if ev.Session != "" {
		j.flushLocked(ev.Session)
	}
	return j.appendLocked(ev, nil)
}

func (j *Journal) appendLocked(ev wire.Event, out []byte) uint64 {
	if j.closed {
		return 0
	}
	ev.Seq = j.next
	n := uint64(len(j.ring))
	if j.next-j.first >= n && j.growLocked() {
		n = uint64(len(j.ring))
	}
	if j.next-j.first >= n {
		// The ring is full: the oldest goes. If the writer has not taken
		// it yet (a stalled disk), the files will miss it.
		old := &j.ring[j.first%n]
		if j.first >= j.written {
			j.loseLocked(j.first, j.first+1, "the journal's writer fell behind (a slow or stalled disk) and the in-memory ring dropped it")
		}
		j.memOut -= int64(len(old.bytes))
		*old = entry{}
		j.first++
	}
	j.ring[j.next%n] = entry{ev: ev, bytes: out, spool: -1}
	j.memOut += int64(len(out))
	j.next++
	if j.memOut > j.opts.RingBytes {
		j.trimBytesLocked()
	}
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return ev.Seq
}

// initialRing is the ring's length when the journal opens: it doubles as
// events come, up to RingEvents, so that an idle limbsd does not hold the
// memory of RingEvents entries (176 bytes each, and what they point to)
// from its start.
const initialRing = 1024

// growLocked doubles the ring, up to RingEvents, keeping every entry at
// its seq; false when it is at RingEvents already.
func (j *Journal) growLocked() bool {
	n := uint64(len(j.ring))
	if n >= uint64(j.opts.RingEvents) {
		return false
	}
	m := min(2*n, uint64(j.opts.RingEvents))
	ring := make([]entry, m)
	for s := j.first; s < j.next; s++ {
		ring[s%m] = j.ring[s%n]
	}
	j.ring = ring
	return true
}

// trimBytesLocked drops output bytes from the oldest ring entries the
// writer has spooled until the ring is within RingBytes; readers then take
// them from the spool. Bytes the writer has not taken yet are dropped only
// past four times the bound (a stalled disk), and are then lost.
func (j *Journal) trimBytesLocked() {
	n := uint64(len(j.ring))
	for s := j.first; s < j.next && j.memOut > j.opts.RingBytes/2; s++ {
		e := &j.ring[s%n]
		if len(e.bytes) == 0 {
			continue
		}
		if s >= j.written && j.memOut <= 4*j.opts.RingBytes {
			return
		}
		j.memOut -= int64(len(e.bytes))
		e.bytes = nil
	}
}

func (j *Journal) loseLocked(from, to uint64, why string) {
	if k := len(j.lost); k > 0 && j.lost[k-1].to == from && j.lost[k-1].why == why {
		j.lost[k-1].to = to
		return
	}
	j.lost = append(j.lost, gap{from, to, why})
	if len(j.lost) > 1024 {
		j.lost = j.lost[len(j.lost)-1024:]
	}
}

// Output notes that session's output stream got p at offset off. Output is
// coalesced: one event per session per OutputEvery or OutputMax bytes.
func (j *Journal) Output(session string, off int64, p []byte) {
	if j == nil || len(p) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for len(p) > 0 {
		op := j.pending[session]
		if op != nil && (op.off+int64(len(op.buf)) != off || len(op.buf) >= OutputMax) {
			j.flushLocked(session)
			op = nil
		}
		if op == nil {
			// Grown by append from the first read's size, a busy
			// session's bytes were copied and cleared again at every
			// doubling; flushLocked trims what is left unused.
			room := len(p)
			if room >= burstChunk {
				room = OutputMax
			}
			op = &outPending{off: off, at: time.Now().UTC(), buf: make([]byte, 0, room)}
			j.pending[session] = op
			op.timer = time.AfterFunc(OutputEvery, func() { j.flushTimer(session, op) })
		}
		k := min(len(p), OutputMax-len(op.buf))
		op.buf = append(op.buf, p[:k]...)
		p, off = p[k:], off+int64(k)
	}
}

func (j *Journal) flushTimer(session string, op *outPending) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pending[session] == op {
		j.flushLocked(session)
	}
}

// Flush turns the output waiting to be coalesced into events.
func (j *Journal) Flush() {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for s := range j.pending {
		j.flushLocked(s)
	}
}

func (j *Journal) flushLocked(session string) {
	op := j.pending[session]
	if op == nil {
		return
	}
	delete(j.pending, session)
	op.timer.Stop()
	if cap(op.buf) > 2*len(op.buf) {
		// The room of a burst that ended early: the journal keeps (and
		// counts) only the bytes.
		op.buf = bytes.Clone(op.buf)
	}
	d, _ := json.Marshal(wire.OutputData{Offset: op.off, Size: int64(len(op.buf))})
	j.appendLocked(wire.Event{Time: op.at, Session: session, Type: wire.EventOutput, Source: wire.SourceSystem, Data: d}, op.buf)
}

// Close writes what is in memory and stops the writer.
func (j *Journal) Close() error {
	if j == nil {
		return nil
	}
	j.Flush()
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.mu.Unlock()
	close(j.quit)
	<-j.done
	j.mu.Lock()
	j.closed = true
	close(j.notify)
	j.notify = make(chan struct{})
	j.mu.Unlock()
	return nil
}

// Changed returns the seq up to which events are readable and a channel
// closed when that changes.
func (j *Journal) Changed() (uint64, <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.written, j.notify
}

// Bounds returns the oldest seq still readable (from memory or the files)
// and the seq the next readable event will have.
func (j *Journal) Bounds() (first, next uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	first = j.first
	if len(j.evSegs) > 0 {
		first = min(first, j.evSegs[0].first)
	}
	return first, j.written
}

// Closed reports whether Close was called.
func (j *Journal) Closed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closed
}

// errWriting notes a write error once per failing spell.
func (j *Journal) noteWriteErr(err error) {
	j.mu.Lock()
	first := j.werr == nil
	j.werr = err
	j.mu.Unlock()
	if first {
		j.log.Warn("writing the event journal failed; the shells go on, events not written are reported to readers as a log.gap once they leave memory; free space in --state-dir", "dir", j.opts.Dir, "err", err)
	}
}
