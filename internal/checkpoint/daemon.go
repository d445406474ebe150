package checkpoint

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Sessions is what a Daemon needs of limbsd's sessions (shell.Manager).
type Sessions interface {
	States() []wire.SessionState
	Reinstate(ctx context.Context, states []wire.SessionState) ([]string, error)
}

// Options configure a Daemon.
type Options struct {
	// Workdir is the root scanned when a request names none.
	Workdir string
	// Skip are absolute paths never scanned nor removed (limbsd's state).
	Skip     []string
	Sessions Sessions
	// Remounted is called when the host says it mounted the workspace
	// anew (POST /v1/checkpoint/remounted): limbsd's watcher starts again.
	Remounted func()
	Logger    *slog.Logger
}

// Daemon serves limbsd's side of checkpoints:
//
//	POST /v1/checkpoint/scan?root=ABS&base=SCAN&content=1&hold=1
//	POST /v1/checkpoint/restore   (body: a restore stream)
//	POST /v1/checkpoint/remounted?sessions=close|restart
//	POST /v1/checkpoint/adopt     (body: AdoptRequest)
//
// A scan answers a stream: an E record for every path that changed since
// the scan named by base (every path when base is not the daemon's last
// scan), with content when asked, a D record for every path gone, the
// sessions (S) and a trailer (Z, ScanEnd). With hold=1 the sandbox stays
// frozen after the answer until a restore (or holdMax).
type Daemon struct {
	opts   Options
	log    *slog.Logger
	freeze *freezer

	mu     sync.Mutex // guards the fields below; held for a whole scan or restore
	last   table      // the last scan with content, or restore
	lastID string
	// meta is the last scan without content: a restore may plan FlagKeep
	// entries from it (the host vouches for the content, as for a fork's
	// copy-on-write workspace), never a checkpoint.
	meta   table
	metaID string
	hold   *frozen
	holdT  *time.Timer
	// track vouches for what changed since the scan lastID, so that the
	// next scan lists only that (track.go); nil: the next walks all.
	track *tracker
}

// holdMax is how long a hold=1 scan keeps the sandbox frozen at most.
const holdMax = 10 * time.Second

// ScanEnd is a scan's trailer.
type ScanEnd struct {
	Scan string `json:"scan,omitempty"` // this scan's id, the base of the next
	// MetaScan is a scan without content's id: a restore's header may name
	// it as its base, for FlagKeep entries only.
	MetaScan string   `json:"meta_scan,omitempty"`
	Base     string   `json:"base,omitempty"` // the base used: only changes were sent
	Roots    []string `json:"roots"`
	FrozenMS int64    `json:"frozen_ms"`
	StopMS   int64    `json:"stop_ms"` // of FrozenMS, the time to stop every process
	WalkMS   int64    `json:"walk_ms"` // of FrozenMS, the walk
	// Tracked: only the directories inotify named since the base were
	// listed (Listed of them); otherwise every directory was.
	Tracked bool   `json:"tracked,omitempty"`
	Listed  int    `json:"listed"`
	Files   int    `json:"files"`
	Sent    int64  `json:"sent"`
	Skipped int    `json:"skipped,omitempty"`
	Error   string `json:"error,omitempty"`
}

// RestoreHeader is the H record that starts a restore stream.
type RestoreHeader struct {
	Roots    []string            `json:"roots"`
	Base     string              `json:"base,omitempty"` // the scan FlagKeep entries were planned from
	Sessions []wire.SessionState `json:"sessions,omitempty"`
}

// RestoreResult is the answer of a restore.
type RestoreResult struct {
	Scan     string   `json:"scan"`
	Written  int      `json:"written"`
	Removed  int      `json:"removed"`
	Bytes    int64    `json:"bytes"`
	FrozenMS int64    `json:"frozen_ms"`
	Sessions []string `json:"sessions"`
	Warning  string   `json:"warning,omitempty"`
}

// NewDaemon returns limbsd's checkpoint handler.
func NewDaemon(opts Options) *Daemon {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Daemon{opts: opts, log: opts.Logger, freeze: newFreezer()}
}

func (d *Daemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/checkpoint/scan"):
		d.scan(w, r)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/checkpoint/restore"):
		d.restore(w, r)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/checkpoint/remounted"):
		d.remounted(w, r)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/checkpoint/adopt"):
		d.adopt(w, r)
	default:
		wire.WriteError(w, fmt.Errorf("no route %s %s; use POST /v1/checkpoint/scan or /v1/checkpoint/restore: %w", r.Method, r.URL.Path, wire.ErrNotFound))
	}
}

// roots checks the absolute roots asked for (the workdir when none).
func (d *Daemon) roots(list []string) ([]string, error) {
	if len(list) == 0 {
		list = []string{d.opts.Workdir}
	}
	var out []string
	for _, r := range list {
		if !filepath.IsAbs(r) || filepath.Clean(r) != r || r == "/" {
			return nil, fmt.Errorf("path %q: a checkpoint path must be an absolute clean path other than /: %w", r, wire.ErrBadRequest)
		}
		rel := strings.TrimPrefix(r, "/")
		for _, o := range out {
			if Under(rel, o) || Under(o, rel) {
				return nil, fmt.Errorf("paths %q and %q overlap: name one of them: %w", "/"+o, r, wire.ErrBadRequest)
			}
		}
		out = append(out, rel)
	}
	sort.Strings(out)
	return out, nil
}

func (d *Daemon) skipSet() map[string]bool {
	m := map[string]bool{}
	for _, s := range d.opts.Skip {
		if abs, err := filepath.Abs(s); err == nil {
			m[strings.TrimPrefix(abs, "/")] = true
		}
	}
	return m
}

func newScanID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "scan_" + hex.EncodeToString(b)
}

// forgetLocked drops what limbsd knew of the files (the last scans and
// the watches): they are about to change under it. d.mu is held.
func (d *Daemon) forgetLocked() {
	d.last, d.lastID = nil, ""
	d.meta, d.metaID = nil, ""
	d.track.close()
	d.track = nil
}

// release ends a hold; d.mu is held.
func (d *Daemon) releaseLocked() time.Duration {
	if d.holdT != nil {
		d.holdT.Stop()
		d.holdT = nil
	}
	t := d.hold.thaw()
	d.hold = nil
	return t
}

func (d *Daemon) scan(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	roots, err := d.roots(q["root"])
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	content := q.Get("content") != "0"
	hold := q.Get("hold") == "1"
	d.mu.Lock()
	defer d.mu.Unlock()
	d.releaseLocked()
	s := &scanner{next: make(table, len(d.last)), content: content, skip: d.skipSet()}
	end := ScanEnd{Roots: make([]string, len(roots))}
	for i, r := range roots {
		end.Roots[i] = "/" + r
	}
	if b := q.Get("base"); b != "" && b == d.lastID && d.last != nil {
		s.base = d.last
		end.Base = b
	}
	tracked := content && s.base != nil && d.track.serves(roots, d.lastID)
	if tracked {
		s.next = maps.Clone(d.last) // before the freeze: it is 10,000 entries
	} else if content {
		// A content scan walks all: it builds new watches. (A scan without
		// content leaves the watches of the last one with content alone.)
		d.track.close()
		d.track = nil
	}
	w.Header().Set("Content-Type", "application/x-limbs-checkpoint")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 256<<10)
	s.w = bw
	fz := d.freeze.freeze()
	end.StopMS = time.Since(fz.start).Milliseconds()
	thawed := false
	defer func() {
		if !thawed {
			fz.thaw()
		}
	}()
	var werr error
	if tracked {
		if err := s.incremental(d.track, fz.procs); err != nil {
			d.log.Debug("checkpoint scan: walking everything", "why", err, "broken", d.track.broken)
			d.track.close()
			d.track = nil
			tracked = false
			s.next, s.changes, s.forgot, s.collect, s.track, s.files, s.listed, s.skipped = make(table, len(d.last)), nil, nil, false, nil, 0, 0, 0
		} else {
			werr = s.flush()
			end.Tracked = true
		}
	}
	if !tracked {
		if content {
			d.track = newTracker(roots)
			s.track = d.track
			// Files mapped shared are sent whatever their stat says.
			devs := map[uint64]bool{}
			for _, r := range roots {
				var st unix.Stat_t
				if unix.Stat("/"+r, &st) == nil {
					devs[uint64(st.Dev)] = true
				}
			}
			if inodes, err := mappedFiles(fz.procs, devs, nil, &procBudget{}); err == nil {
				s.mapped = inodes
			}
		}
		for _, root := range roots {
			if werr = s.scanRoot("/" + root); werr != nil {
				break
			}
		}
	}
	end.WalkMS = time.Since(fz.start).Milliseconds() - end.StopMS
	// Only the roots' paths count as removed.
	if werr == nil && s.base != nil && !tracked {
		var gone []string
		for p := range s.base {
			if _, ok := s.next[p]; !ok {
				for _, root := range roots {
					if Under(p, root) {
						gone = append(gone, p)
					}
				}
			}
		}
		sort.Strings(gone)
		for _, p := range gone {
			if _, werr = bw.Write(AppendRemoved(nil, p)); werr != nil {
				break
			}
		}
	}
	states := []wire.SessionState{}
	if d.opts.Sessions != nil {
		states = d.opts.Sessions.States()
	}
	if hold && werr == nil {
		d.hold = fz
		d.holdT = time.AfterFunc(holdMax, func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.hold == fz {
				d.releaseLocked()
			}
		})
		thawed = true
		end.FrozenMS = time.Since(fz.start).Milliseconds()
	} else {
		thawed = true
		end.FrozenMS = fz.thaw().Milliseconds()
	}
	end.Files, end.Sent, end.Skipped, end.Listed = s.files, s.sent, s.skipped, s.listed
	switch {
	case werr != nil:
		end.Error = werr.Error()
	case s.err != nil:
		end.Error = s.err.Error()
	}
	switch {
	case end.Error == "" && content:
		d.last, d.lastID = s.next, newScanID()
		end.Scan = d.lastID
		if d.track != nil {
			d.track.scan = d.lastID
		}
	case end.Error == "":
		d.meta, d.metaID = s.next, newScanID()
		end.MetaScan = d.metaID
	default:
		d.last, d.lastID = nil, ""
	}
	if d.last == nil || d.track != nil && d.track.broken != "" {
		d.track.close()
		d.track = nil
	}
	js, _ := json.Marshal(states)
	_, _ = bw.Write(AppendJSON(nil, KindState, js))
	js, _ = json.Marshal(end)
	_, _ = bw.Write(AppendJSON(nil, KindEnd, js))
	_ = bw.Flush()
	if end.Error != "" {
		d.log.Warn("checkpoint scan failed", "err", end.Error)
	}
}

func (d *Daemon) restore(w http.ResponseWriter, r *http.Request) {
	rd := NewReader(r.Body, Limits{MaxEntries: DefaultLimits.MaxEntries, MaxFile: 1 << 62, MaxTotal: 1 << 62, MaxLine: DefaultLimits.MaxLine, MaxState: DefaultLimits.MaxState})
	rec, err := rd.Next()
	if err != nil || rec.Kind != KindHeader {
		wire.WriteError(w, fmt.Errorf("a restore stream starts with its header (H): %v: %w", err, wire.ErrBadRequest))
		return
	}
	var h RestoreHeader
	if err := json.Unmarshal(rec.JSON, &h); err != nil {
		wire.WriteError(w, fmt.Errorf("restore header: %v: %w", err, wire.ErrBadRequest))
		return
	}
	roots, err := d.roots(h.Roots)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fz := d.hold
	d.hold = nil
	if d.holdT != nil {
		d.holdT.Stop()
		d.holdT = nil
	}
	if fz == nil {
		fz = d.freeze.freeze()
	}
	defer fz.thaw()
	a := &applier{roots: roots, skip: d.skipSet(), chown: os.Geteuid() == 0, want: map[string]bool{}, next: table{}}
	switch {
	case h.Base == "":
	case h.Base == d.lastID:
		a.base = d.last
	case h.Base == d.metaID:
		a.base = d.meta
	}
	// Whatever happens now, the last scans no longer tell what is on disk.
	d.forgetLocked()
	err = d.apply(a, rd)
	a.close()
	if err != nil {
		fz.thaw()
		if errors.Is(err, errStale) {
			err = fmt.Errorf("%v; restore again: %w", err, wire.ErrConflict)
		} else if errors.Is(err, ErrInvalid) {
			err = fmt.Errorf("%v: %w", err, wire.ErrBadRequest)
		} else {
			err = fmt.Errorf("restoring: %w", err)
		}
		d.log.Warn("checkpoint restore failed", "err", err)
		wire.WriteError(w, err)
		return
	}
	// What is on disk now is the next scan's base.
	res := RestoreResult{Written: a.written, Removed: a.removed, Bytes: a.bytes, Sessions: []string{}}
	d.last, d.lastID = a.next, newScanID()
	res.Scan = d.lastID
	res.FrozenMS = fz.thaw().Milliseconds()
	if d.opts.Sessions != nil && len(h.Sessions) > 0 {
		ids, err := d.opts.Sessions.Reinstate(r.Context(), h.Sessions)
		res.Sessions = append(res.Sessions, ids...)
		if err != nil {
			res.Warning = err.Error()
		}
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

func (d *Daemon) apply(a *applier, rd *Reader) error {
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		switch rec.Kind {
		case KindEntry:
			if err := a.put(rec.Entry, rec.Flag, rd.Content()); err != nil {
				return err
			}
		case KindEnd:
		default:
			return fmt.Errorf("record %c in a restore: %w", rec.Kind, ErrInvalid)
		}
	}
	if err := a.prune(); err != nil {
		return err
	}
	return a.finish()
}

// Remounter is what remounted needs of the sessions beyond Sessions.
type Remounter interface {
	CloseAll(ctx context.Context) error
	// RemountStates are States with the cwd each shell was to start in.
	RemountStates() []wire.SessionState
}

// remounted: the host mounted a workspace over the one limbsd started
// with (a warm-pool sandbox that became a fork, or a fork's container
// started again). What limbsd knew of the old one goes: the last scans,
// the watches, the file watcher's; and the sessions, whose shells sit in
// the old one, are closed (sessions=close: a restore brings the fork's
// own) or restarted in their cwd and environment (sessions=restart).
func (d *Daemon) remounted(w http.ResponseWriter, r *http.Request) {
	mode := r.URL.Query().Get("sessions")
	if mode != "close" && mode != "restart" {
		wire.WriteError(w, fmt.Errorf("remounted: sessions=close or sessions=restart: %w", wire.ErrBadRequest))
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.releaseLocked()
	d.forgetLocked()
	if d.opts.Remounted != nil {
		d.opts.Remounted()
	}
	var err error
	if d.opts.Sessions != nil {
		switch mode {
		case "close":
			if c, ok := d.opts.Sessions.(Remounter); ok {
				err = c.CloseAll(r.Context())
			}
		case "restart":
			states := d.opts.Sessions.States()
			if c, ok := d.opts.Sessions.(Remounter); ok {
				states = c.RemountStates()
			}
			_, err = d.opts.Sessions.Reinstate(r.Context(), states)
		}
	}
	if err != nil {
		wire.WriteError(w, fmt.Errorf("the workspace was remounted, but its sessions: %w", err))
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]string{"sessions": mode})
}

// AdoptRequest is the body of POST /v1/checkpoint/adopt.
type AdoptRequest struct {
	Roots    []string            `json:"roots"`
	Sessions []wire.SessionState `json:"sessions,omitempty"`
	// Stats, when the host has them, are StatTree's of the tree the
	// workspace (one root) shows: limbsd then lists only directories.
	// They follow the JSON, raw (AdoptStatsType).
	Stats []byte `json:"-"`
}

// AdoptStatsType is the Content-Type of an adopt with stats: the
// AdoptRequest as one line of JSON, then the stats' bytes to the end.
const AdoptStatsType = "application/x-limbs-adopt"

// AdoptBody is the body of an adopt of req, with its stats if any, and
// its Content-Type.
func AdoptBody(req AdoptRequest) (io.Reader, string) {
	js, _ := json.Marshal(req)
	if len(req.Stats) == 0 {
		return bytes.NewReader(js), "application/json"
	}
	return io.MultiReader(bytes.NewReader(append(js, '\n')), bytes.NewReader(req.Stats)), AdoptStatsType
}

// maxAdopt bounds the body of an adopt.
const maxAdopt = 64 << 20

func readAdopt(r *http.Request) (AdoptRequest, error) {
	var req AdoptRequest
	body := io.LimitReader(r.Body, maxAdopt)
	if r.Header.Get("Content-Type") != AdoptStatsType {
		err := json.NewDecoder(body).Decode(&req)
		return req, err
	}
	br := bufio.NewReaderSize(body, 64<<10)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return req, fmt.Errorf("no line of JSON first: %v", err)
	}
	if err := json.Unmarshal(line, &req); err != nil {
		return req, err
	}
	req.Stats, err = io.ReadAll(br)
	return req, err
}

// AdoptResult is its answer.
type AdoptResult struct {
	Scan    string `json:"scan"`
	Entries int    `json:"entries"` // paths walked: the host checks them against its manifest
	WalkMS  int64  `json:"walk_ms"`
	// Stated: the walk listed directories only and took the files'
	// stats from the request (false: it stated every path, because the
	// request had no stats or the workspace was not as they said).
	Stated   bool     `json:"stated"`
	Fallback string   `json:"fallback,omitempty"` // why the stats were not used
	Sessions []string `json:"sessions"`
	Warning  string   `json:"warning,omitempty"`
}

// adopt: the host vouches that the files under roots are a checkpoint
// already (a fork's copy-on-write workspace, its lower layer the
// checkpoint written out, nothing run in it yet). limbsd walks them
// without content, frozen, for the base of the next scan (with watches),
// and restarts the checkpoint's sessions: a restore that writes nothing
// and streams nothing. With the tree's stats (adopt.go) the walk lists
// directories only; a workspace not as they say is walked in full.
func (d *Daemon) adopt(w http.ResponseWriter, r *http.Request) {
	req, err := readAdopt(r)
	if err != nil {
		wire.WriteError(w, fmt.Errorf("adopt: the body is an AdoptRequest (as JSON, or a line of it and stats as %s): %v: %w", AdoptStatsType, err, wire.ErrBadRequest))
		return
	}
	roots, err := d.roots(req.Roots)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.releaseLocked()
	d.forgetLocked()
	d.track = newTracker(roots)
	s := &scanner{next: table{}, skip: d.skipSet(), w: bufio.NewWriter(io.Discard), track: d.track}
	fz := d.freeze.freeze()
	start := time.Now()
	stated, fallback := false, ""
	if len(req.Stats) > 0 && len(roots) == 1 {
		if err = s.adoptStated("/"+roots[0], req.Stats); err == nil {
			stated = true
		} else {
			// Walked the usual way, with new watches.
			fallback = err.Error()
			d.track.close()
			d.track = newTracker(roots)
			s = &scanner{next: table{}, skip: d.skipSet(), w: bufio.NewWriter(io.Discard), track: d.track}
		}
	}
	if !stated {
		for _, root := range roots {
			if err = s.scanRoot("/" + root); err != nil {
				break
			}
		}
	}
	walk := time.Since(start)
	fz.thaw()
	if err == nil && s.err != nil {
		err = s.err
	}
	if err != nil {
		d.track.close()
		d.track = nil
		wire.WriteError(w, fmt.Errorf("adopt: walking the workspace: %v: %w", err, wire.ErrConflict))
		return
	}
	d.last, d.lastID = s.next, newScanID()
	if d.track != nil {
		if d.track.broken != "" {
			d.track.close()
			d.track = nil
		} else {
			d.track.scan = d.lastID
		}
	}
	res := AdoptResult{Scan: d.lastID, Entries: len(s.next), WalkMS: walk.Milliseconds(), Stated: stated, Fallback: fallback, Sessions: []string{}}
	if fallback != "" {
		d.log.Info("adopt: the workspace is not as the host's stats say; walked it all", "why", fallback)
	}
	if d.opts.Sessions != nil && len(req.Sessions) > 0 {
		ids, err := d.opts.Sessions.Reinstate(r.Context(), req.Sessions)
		res.Sessions = append(res.Sessions, ids...)
		if err != nil {
			res.Warning = err.Error()
		}
	}
	wire.WriteJSON(w, http.StatusOK, res)
}
