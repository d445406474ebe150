package cpstore

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/checkpoint"
	"github.com/limbs-dev/limbs/internal/wire"
)

func utf8Valid(b []byte) bool { return utf8.Valid(b) }

// Bounds of the sessions a scan may report.
const (
	maxSessions = 256
	maxEnv      = 1 << 20
)

// Ingested is what a scan stream gave: the manifest of what is in the
// sandbox now (hashes of files whose content was not sent are empty), the
// trailer, and the bytes newly stored.
type Ingested struct {
	Manifest *Manifest
	End      checkpoint.ScanEnd
	NewBytes int64
}

// Ingest reads a scan stream from limbsd, storing the content it carries
// as blobs. base is the manifest whose Scan the request named (nil: none);
// the stream's trailer says whether limbsd used it. Nothing in the stream
// is trusted: paths are checked, sizes bounded, hashes computed here.
func (s *Store) Ingest(r io.Reader, base *Manifest, lim checkpoint.Limits) (*Ingested, error) {
	rd := checkpoint.NewReader(r, lim)
	changed := map[string]checkpoint.Entry{}
	var removed []string
	var states []wire.SessionState
	var end checkpoint.ScanEnd
	var newBytes int64
	buf := make([]byte, 1<<20)
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the sandbox's checkpoint stream: %w", err)
		}
		switch rec.Kind {
		case checkpoint.KindEntry:
			e := rec.Entry
			if _, dup := changed[e.Path]; dup {
				return nil, fmt.Errorf("path %q twice in a checkpoint stream: %w", e.Path, checkpoint.ErrInvalid)
			}
			e.Hash = ""
			if rec.Flag == checkpoint.FlagContent {
				sum, isNew, err := s.putBlob(rd.Content(), e.Size, buf)
				if err != nil {
					return nil, fmt.Errorf("storing /%s: %w", e.Path, err)
				}
				e.Hash = sum
				if isNew {
					newBytes += e.Size
				}
			}
			changed[e.Path] = e
		case checkpoint.KindRemoved:
			removed = append(removed, rec.Entry.Path)
		case checkpoint.KindState:
			if err := json.Unmarshal(rec.JSON, &states); err != nil {
				return nil, fmt.Errorf("the sandbox's sessions: %v: %w", err, checkpoint.ErrInvalid)
			}
			if len(states) > maxSessions {
				return nil, fmt.Errorf("%d sessions are over the bound of %d: %w", len(states), maxSessions, checkpoint.ErrInvalid)
			}
			for _, st := range states {
				if len(st.Env) > maxEnv || !filepath.IsAbs(st.Cwd) && st.Cwd != "" {
					return nil, fmt.Errorf("session %q: environment over %d bytes or a relative cwd: %w", st.Name, maxEnv, checkpoint.ErrInvalid)
				}
			}
		case checkpoint.KindEnd:
			if err := json.Unmarshal(rec.JSON, &end); err != nil {
				return nil, fmt.Errorf("the checkpoint stream's trailer: %v: %w", err, checkpoint.ErrInvalid)
			}
		default:
			return nil, fmt.Errorf("record %c in a scan: %w", rec.Kind, checkpoint.ErrInvalid)
		}
	}
	if end.Error != "" {
		return nil, fmt.Errorf("the sandbox could not be scanned: %s: %w", end.Error, wire.ErrConflict)
	}
	var roots []string
	for _, r := range end.Roots {
		if !filepath.IsAbs(r) || filepath.Clean(r) != r || r == "/" || !checkpoint.ValidPath(strings.TrimPrefix(r, "/")) {
			return nil, fmt.Errorf("scan root %q: %w", r, checkpoint.ErrInvalid)
		}
		roots = append(roots, strings.TrimPrefix(r, "/"))
	}
	under := func(p string) bool {
		for _, r := range roots {
			if checkpoint.Under(p, r) {
				return true
			}
		}
		return false
	}
	var entries map[string]checkpoint.Entry
	if end.Base != "" {
		if base == nil || base.Meta.Scan != end.Base {
			return nil, fmt.Errorf("the sandbox answered with changes since scan %q, which this store does not hold: %w", end.Base, checkpoint.ErrInvalid)
		}
		entries = make(map[string]checkpoint.Entry, len(base.Entries)+len(changed))
		for _, e := range base.Entries {
			if under(e.Path) {
				entries[e.Path] = e
			}
		}
		for _, p := range removed {
			delete(entries, p)
		}
	} else {
		entries = make(map[string]checkpoint.Entry, len(changed))
	}
	for p, e := range changed {
		entries[p] = e
	}
	m := &Manifest{Entries: make([]checkpoint.Entry, 0, len(entries))}
	for p, e := range entries {
		if !under(p) {
			return nil, fmt.Errorf("path %q is under none of the scan's roots: %w", p, checkpoint.ErrInvalid)
		}
		m.Entries = append(m.Entries, e)
	}
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Path < m.Entries[j].Path })
	// Every entry's parent must be a directory of the manifest.
	ix := m.Index()
	for _, e := range m.Entries {
		isRoot := false
		for _, r := range roots {
			isRoot = isRoot || e.Path == r
		}
		if isRoot {
			if e.Type != checkpoint.TypeDir {
				return nil, fmt.Errorf("root /%s is not a directory: %w", e.Path, checkpoint.ErrInvalid)
			}
			continue
		}
		if p, ok := ix[filepath.Dir(e.Path)]; !ok || p.Type != checkpoint.TypeDir {
			return nil, fmt.Errorf("path %q has no parent directory in the scan: %w", e.Path, checkpoint.ErrInvalid)
		}
	}
	m.Meta.Roots = end.Roots
	m.Meta.Scan = end.Scan
	m.Meta.Sessions = states
	m.Meta.FrozenMS, m.Meta.StopMS, m.Meta.WalkMS = end.FrozenMS, end.StopMS, end.WalkMS
	m.Meta.Sent = end.Sent
	m.Meta.Paths = end.Roots
	for _, e := range m.Entries {
		switch e.Type {
		case checkpoint.TypeFile:
			m.Meta.Files++
			m.Meta.Size += e.Size
		case checkpoint.TypeDir:
			m.Meta.Dirs++
		case checkpoint.TypeSymlink:
			m.Meta.Symlinks++
		}
	}
	m.Meta.Sessions = states
	m.Meta.NewBytes = newBytes
	return &Ingested{Manifest: m, End: end, NewBytes: newBytes}, nil
}
