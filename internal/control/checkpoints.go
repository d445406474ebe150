package control

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limbs-dev/limbs/internal/checkpoint"
	"github.com/limbs-dev/limbs/internal/cpstore"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Checkpoints (docs/checkpoints.md): the store lives in the state dir
// (StateDir/checkpoints), outside every sandbox; limbsd scans and restores
// inside it (package checkpoint) and the Plane only reads its streams.

// DefaultCheckpointTTL is how long a checkpoint is kept when neither the
// request nor Options.CheckpointTTL says.
const DefaultCheckpointTTL = 30 * 24 * time.Hour

// maxForks caps one fork's count.
const maxForks = 64

// checkpoints is the Plane's checkpoint state, made on first use.
type checkpoints struct {
	once  sync.Once
	store *cpstore.Store
	err   error

	mu    sync.Mutex             // guards the fields below
	locks map[string]*sync.Mutex // per sandbox: one scan or restore at a time
	// heads caches each sandbox's newest scan manifest (the store's
	// head.ref), read-only once in: a checkpoint after a small change
	// must not parse the previous manifest again.
	heads map[string]*cpstore.Manifest
	// forking counts, per tree name (SB.CP), the forks being made over
	// it whose records may not name it yet: sweepTrees keeps it meanwhile.
	forking map[string]int
}

func (s *Plane) headOf(st *cpstore.Store, sb string) *cpstore.Manifest {
	s.ck.mu.Lock()
	defer s.ck.mu.Unlock()
	if h, ok := s.ck.heads[sb]; ok {
		return h
	}
	h := st.Head(sb)
	if h != nil {
		s.ck.heads[sb] = h
	}
	return h
}

// setHead records m (saved as name) as sb's newest scan, scan.
func (s *Plane) setHead(st *cpstore.Store, sb string, m *cpstore.Manifest, name, scan string) error {
	err := st.SetHead(sb, name, scan)
	s.ck.mu.Lock()
	defer s.ck.mu.Unlock()
	if err != nil {
		delete(s.ck.heads, sb)
		return err
	}
	h := *m
	h.Meta.Scan = scan
	s.ck.heads[sb] = &h
	return nil
}

func (s *Plane) dropHead(st *cpstore.Store, sb string) {
	s.ck.mu.Lock()
	delete(s.ck.heads, sb)
	s.ck.mu.Unlock()
	st.DropHead(sb)
}

func (s *Plane) cpStore() (*cpstore.Store, error) {
	c := &s.ck
	c.once.Do(func() {
		c.store, c.err = cpstore.Open(filepath.Join(s.opts.StateDir, "checkpoints"))
		c.locks = map[string]*sync.Mutex{}
		c.heads = map[string]*cpstore.Manifest{}
		if c.err == nil {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.expireLoop(s.bg)
			}()
		}
	})
	return c.store, c.err
}

func (s *Plane) expireLoop(ctx context.Context) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if n, err := s.ck.store.Expire(time.Now()); err != nil {
			s.log.Warn("expiring checkpoints", "err", err)
		} else if n > 0 {
			s.log.Info("expired checkpoints", "count", n)
		}
		s.sweepTrees()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// forgetScans drops what the store keeps of a removed sandbox's newest
// scan (not its checkpoints, which outlive it until deleted or expired).
func (s *Plane) forgetScans(id string) {
	if st, err := s.cpStore(); err == nil {
		s.dropHead(st, id)
		_ = st.GC()
		s.sweepTrees()
	}
}

func (s *Plane) cpLock(id string) func() {
	s.ck.mu.Lock()
	l := s.ck.locks[id]
	if l == nil {
		l = &sync.Mutex{}
		s.ck.locks[id] = l
	}
	s.ck.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// scan asks the sandbox's limbsd for a scan stream.
func (s *Plane) scan(ctx context.Context, d *Daemon, roots []string, base string, content, hold bool) (*http.Response, error) {
	q := url.Values{}
	for _, r := range roots {
		q.Add("root", r)
	}
	if base != "" {
		q.Set("base", base)
	}
	if !content {
		q.Set("content", "0")
	}
	if hold {
		q.Set("hold", "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://limbsd/v1/checkpoint/scan?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	d.Authorize(req.Header)
	resp, err := d.tr.RoundTrip(req) // not masked: the stream is the files' bytes
	if err != nil {
		return nil, d.Explain(ctx, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, daemonError(resp)
	}
	return resp, nil
}

// daemonError turns limbsd's error answer into an error of the same kind.
func daemonError(resp *http.Response) error {
	var e wire.Error
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(b, &e)
	msg := e.Error.Message
	if msg == "" {
		msg = strings.TrimSpace(string(b))
	}
	if resp.StatusCode == http.StatusNotFound && e.Error.Code == "not_found" && strings.Contains(msg, "no route") {
		return fmt.Errorf("the sandbox's limbsd has no checkpoints (an older limbsd?): recreate the sandbox with this limbs' limbsd: %w", wire.ErrUnavailable)
	}
	return fmt.Errorf("the sandbox's limbsd: %s: %w", msg, sentinelOf(resp.StatusCode))
}

func sentinelOf(status int) error {
	switch status {
	case http.StatusBadRequest:
		return wire.ErrBadRequest
	case http.StatusNotFound:
		return wire.ErrNotFound
	case http.StatusConflict:
		return wire.ErrConflict
	case http.StatusRequestEntityTooLarge:
		return wire.ErrTooLarge
	default:
		return wire.ErrUnavailable
	}
}

func (s *Plane) specFor(r store.Record) wire.CreateSandbox {
	return wire.CreateSandbox{
		Image: r.Image, Provider: r.Provider, Cpus: r.Limits.Cpus, MemoryMB: r.Limits.MemoryMB,
		Pids: r.Limits.Pids, Network: r.Limits.Network, Env: r.Env, SecretEnv: r.SecretEnv,
		User: r.Limits.User, ReadOnlyRoot: r.Limits.ReadOnlyRoot, TmpMB: r.Limits.TmpMB,
		MaxDiskMB: r.Limits.MaxDiskMB, MaxSessionDiskMB: r.Limits.MaxSessionDiskMB,
	}
}

// CreateCheckpoint records the sandbox's files under req.Paths (its
// workdir when none) and its sessions' cwd and environment.
func (s *Plane) CreateCheckpoint(ctx context.Context, idOrName string, req wire.CreateCheckpoint) (wire.Checkpoint, error) {
	if len(req.Name) > 200 || strings.ContainsAny(req.Name, "\x00\n\r/") || strings.HasPrefix(req.Name, "cp_") || req.Name == "current" {
		return wire.Checkpoint{}, fmt.Errorf("checkpoint name %q: at most 200 characters, no control characters and no /, neither \"current\" nor starting with cp_ (a checkpoint is found by its id or its name, and SANDBOX/CHECKPOINT names another sandbox's): %w", req.Name, wire.ErrBadRequest)
	}
	if req.TTL < 0 || len(req.Paths) > 16 {
		return wire.Checkpoint{}, fmt.Errorf("ttl must be >= 0 seconds and paths at most 16: %w", wire.ErrBadRequest)
	}
	for _, p := range req.Paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" || !checkpoint.ValidPath(strings.TrimPrefix(p, "/")) {
			return wire.Checkpoint{}, fmt.Errorf("path %q: checkpoint paths are absolute clean paths other than /, e.g. /workspace: %w", p, wire.ErrBadRequest)
		}
	}
	st, err := s.cpStore()
	if err != nil {
		return wire.Checkpoint{}, err
	}
	e, err := s.lookup(idOrName)
	if err != nil {
		return wire.Checkpoint{}, err
	}
	d, err := s.Dial(ctx, e.rec.ID)
	if err != nil {
		return wire.Checkpoint{}, err
	}
	sb := d.ID()
	defer s.cpLock(sb)()
	start := time.Now()
	m, err := s.scanInto(ctx, st, d, req.Paths)
	if err != nil {
		return wire.Checkpoint{}, err
	}
	m.Meta.ID = newID("cp_")
	m.Meta.Name = req.Name
	m.Meta.CreatedAt = start.UTC()
	m.Meta.Sandbox = sb
	m.Meta.Spec = s.specFor(s.record(e))
	m.Meta.Checkpoint.Sessions = len(m.Meta.Sessions)
	ttl := s.opts.CheckpointTTL
	if req.TTL > 0 {
		ttl = time.Duration(req.TTL * float64(time.Second))
	}
	if ttl == 0 {
		ttl = DefaultCheckpointTTL
	}
	if ttl > 0 {
		exp := start.Add(ttl).UTC()
		m.Meta.ExpiresAt = &exp
	}
	scan := m.Meta.Scan
	m.Meta.Scan = ""
	m.Meta.DurationMS = time.Since(start).Milliseconds()
	if err := st.Save(m, m.Meta.ID); err != nil {
		return wire.Checkpoint{}, err
	}
	if scan != "" {
		if err := s.setHead(st, sb, m, m.Meta.ID, scan); err != nil {
			s.log.Warn("recording the newest scan", "sandbox", sb, "err", err)
		}
	}
	s.logEvents(sb, cpEvent(wire.EventCheckpointCreated, wire.CheckpointData{Checkpoint: m.Meta.ID, Name: m.Meta.Name, Size: m.Meta.Size, FrozenMS: m.Meta.FrozenMS}))
	return m.Meta.Checkpoint, nil
}

// scanInto takes a scan with content of d, based on the sandbox's head.
func (s *Plane) scanInto(ctx context.Context, st *cpstore.Store, d *Daemon, paths []string) (*cpstore.Manifest, error) {
	head := s.headOf(st, d.ID())
	if head != nil && len(paths) > 0 && !sameRoots(head.Meta.Roots, paths) {
		head = nil
	}
	base := ""
	if head != nil {
		base = head.Meta.Scan
	}
	resp, err := s.scan(ctx, d, paths, base, true, false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	ing, err := st.Ingest(resp.Body, head, checkpoint.DefaultLimits)
	if err != nil {
		if errors.Is(err, checkpoint.ErrInvalid) {
			return nil, fmt.Errorf("the sandbox sent an invalid checkpoint stream (%v); nothing was recorded: %w", err, wire.ErrUnavailable)
		}
		return nil, err
	}
	return ing.Manifest, nil
}

func sameRoots(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

func cpEvent(typ wire.EventType, data wire.CheckpointData) wire.Event {
	ev := wire.Event{Time: time.Now().UTC(), Type: typ, Source: wire.SourceAPI}
	ev.Data, _ = json.Marshal(data)
	return ev
}

// sandboxIDOf names the sandbox whose checkpoints a request means: a
// sandbox known now by id or name, or the id of a deleted one.
func (s *Plane) sandboxIDOf(idOrName string) (string, error) {
	if e, err := s.lookup(idOrName); err == nil {
		return e.rec.ID, nil
	}
	if strings.HasPrefix(idOrName, "sb_") {
		return idOrName, nil
	}
	return "", fmt.Errorf("no sandbox %q (a deleted sandbox's checkpoints are found by its sb_ id): %w", idOrName, wire.ErrNotFound)
}

// Checkpoints lists a sandbox's checkpoints (a deleted one's too, by id).
func (s *Plane) Checkpoints(ctx context.Context, idOrName string) ([]wire.Checkpoint, error) {
	st, err := s.cpStore()
	if err != nil {
		return nil, err
	}
	sb, err := s.sandboxIDOf(idOrName)
	if err != nil {
		return nil, err
	}
	metas, err := st.List(sb)
	if err != nil {
		return nil, err
	}
	out := make([]wire.Checkpoint, 0, len(metas))
	for _, m := range metas {
		out = append(out, m.Checkpoint)
	}
	return out, nil
}

// DeleteCheckpoint removes one checkpoint and the blobs only it held.
func (s *Plane) DeleteCheckpoint(ctx context.Context, idOrName, cp string) error {
	st, err := s.cpStore()
	if err != nil {
		return err
	}
	sb, err := s.sandboxIDOf(idOrName)
	if err != nil {
		return err
	}
	defer s.cpLock(sb)()
	if cp, err = checkpointID(st, sb, cp); err != nil {
		return err
	}
	if err := st.Delete(sb, cp); err != nil {
		return err
	}
	s.sweepTrees()
	s.logEvents(sb, cpEvent(wire.EventCheckpointDeleted, wire.CheckpointData{Checkpoint: cp}))
	return nil
}

// loadCheckpoint finds checkpoint cp of idOrName, or "sb_x/cp_y".
func (s *Plane) loadCheckpoint(idOrName, cp string) (*cpstore.Manifest, error) {
	st, err := s.cpStore()
	if err != nil {
		return nil, err
	}
	if sbPart, cpPart, ok := strings.Cut(cp, "/"); ok {
		idOrName, cp = sbPart, cpPart
	}
	sb, err := s.sandboxIDOf(idOrName)
	if err != nil {
		return nil, err
	}
	if cp, err = checkpointID(st, sb, cp); err != nil {
		return nil, err
	}
	return st.Load(sb, cp)
}

// checkpointID is the id of sandbox sb's checkpoint cp, which is an id
// (cp_...) or the name of one checkpoint (limbs agent
// --checkpoint-each-step names its checkpoints step-N); a name that
// several have is a conflict that lists them, so that a checkpoint an
// agent named after an older one cannot stand in for it.
func checkpointID(st *cpstore.Store, sb, cp string) (string, error) {
	if strings.HasPrefix(cp, "cp_") || cp == "" {
		return cp, nil
	}
	metas, err := st.List(sb)
	if err != nil {
		return "", err
	}
	var found []string
	for _, m := range metas {
		if m.Name == cp {
			found = append(found, fmt.Sprintf("%s (%s)", m.ID, m.CreatedAt.UTC().Format(time.RFC3339)))
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("sandbox %s has no checkpoint named %q; list them with GET /v1/sandboxes/%s/checkpoints (limbs checkpoint ls %s): %w", sb, cp, sb, sb, wire.ErrNotFound)
	case 1:
		return strings.Fields(found[0])[0], nil
	}
	// Never the newest of them: the agent may have named one so.
	return "", fmt.Errorf("sandbox %s has %d checkpoints named %q: %s; name the one you mean by its id: %w", sb, len(found), cp, strings.Join(found, ", "), wire.ErrConflict)
}

// Restore puts checkpoint cp back into the sandbox (cp may name another
// sandbox's as "sb_x/cp_y") and restarts the recorded sessions.
func (s *Plane) Restore(ctx context.Context, idOrName, cp string) (wire.Restored, error) {
	m, err := s.loadCheckpoint(idOrName, cp)
	if err != nil {
		return wire.Restored{}, err
	}
	d, err := s.Dial(ctx, idOrName)
	if err != nil {
		return wire.Restored{}, err
	}
	return s.restoreInto(ctx, d, m, false, nil)
}

// movable says whether m may be restored into sandbox sb ("": a new one)
// of provider. A local sandbox's workspace is a host directory of its own,
// and a checkpoint records absolute paths: restored into another local
// sandbox, it would be written to the first one's workspace (unisolated)
// or fail; a local sandbox's checkpoint restored into a docker sandbox
// would put its files under the host's path, not /workspace. Docker
// sandboxes all have theirs at /workspace.
func (s *Plane) movable(m *cpstore.Manifest, provider, sb string) error {
	if (provider != "local" && m.Meta.Spec.Provider != "local") || m.Meta.Sandbox == sb {
		return nil
	}
	return fmt.Errorf("checkpoint %s of sandbox %s: a local sandbox's workspace is a host directory of its own, so a local sandbox's checkpoint restores only into that sandbox and a local sandbox takes only its own; fork and restore across sandboxes with the docker provider (limbs serve --provider docker): %w", m.Meta.ID, m.Meta.Sandbox, wire.ErrBadRequest)
}

// restoreInto puts m back into d's sandbox. With shared (a fork whose
// workspace is a copy-on-write view of m's tree, which nothing has run in
// yet), a file whose type, size, mode, owner and mtime are m's is taken to
// hold m's content, so that nothing is rewritten.
func (s *Plane) restoreInto(ctx context.Context, d *Daemon, m *cpstore.Manifest, shared bool, stats []byte) (wire.Restored, error) {
	st, err := s.cpStore()
	if err != nil {
		return wire.Restored{}, err
	}
	sb := d.ID()
	if err := s.movable(m, s.record(d.e).Provider, sb); err != nil {
		return wire.Restored{}, err
	}
	defer s.cpLock(sb)()
	start := time.Now()
	// What is there now, without content, the sandbox held frozen.
	head := s.headOf(st, sb)
	if head != nil && !sameRoots(head.Meta.Roots, m.Meta.Roots) {
		head = nil
	}
	base := ""
	if head != nil {
		base = head.Meta.Scan
	}
	if shared {
		// A fork's fresh copy-on-write workspace is the checkpoint: limbsd
		// walks it for its base and restarts the sessions.
		if out, ok := s.adoptFork(ctx, st, d, m, stats, start); ok {
			return out, nil
		}
	}
	resp, err := s.scan(ctx, d, m.Meta.Roots, base, false, true)
	if err != nil {
		return wire.Restored{}, err
	}
	ing, err := st.Ingest(resp.Body, head, checkpoint.DefaultLimits)
	resp.Body.Close()
	if err != nil {
		return wire.Restored{}, fmt.Errorf("reading what the sandbox holds now: %w", err)
	}
	base, trust := ing.End.Base, false
	if shared && ing.End.MetaScan != "" {
		base, trust = ing.End.MetaScan, true
	}
	res, err := s.sendRestore(ctx, st, d, m, ing.Manifest, base, trust)
	if errors.Is(err, wire.ErrConflict) {
		res, err = s.sendRestore(ctx, st, d, m, nil, "", false)
	}
	if err != nil {
		s.dropHead(st, sb)
		return wire.Restored{}, err
	}
	s.headAfterRestore(st, sb, m, res.Scan)
	out := wire.Restored{Checkpoint: m.Meta.ID, Written: res.Written, Removed: res.Removed, Bytes: res.Bytes, FrozenMS: res.FrozenMS, DurationMS: time.Since(start).Milliseconds(), Sessions: res.Sessions}
	s.logEvents(sb, cpEvent(wire.EventCheckpointRestored, wire.CheckpointData{Checkpoint: m.Meta.ID, Name: m.Meta.Name, Written: res.Written, Removed: res.Removed, FrozenMS: res.FrozenMS, From: m.Meta.Sandbox}))
	if res.Warning != "" {
		s.log.Warn("restore: sessions", "sandbox", sb, "err", res.Warning)
	}
	return out, nil
}

// sendRestore streams target to limbsd: every entry, with the content of
// each file that cur (the sandbox now, as of scan base) does not hold.
// With trust, a file of cur whose metadata is target's holds its content
// (restoreInto's shared).
// headAfterRestore records m as sb's head, under limbsd's scan id.
func (s *Plane) headAfterRestore(st *cpstore.Store, sb string, m *cpstore.Manifest, scan string) {
	switch {
	case scan == "":
		s.dropHead(st, sb)
	case m.Meta.Sandbox == sb:
		_ = s.setHead(st, sb, m, m.Meta.ID, scan)
	default:
		// Another sandbox's checkpoint: keep a manifest of its own.
		h := *m
		h.Meta.Sandbox = sb
		if err := st.Save(&h, "head"); err == nil {
			_ = s.setHead(st, sb, &h, "head", scan)
		} else {
			s.dropHead(st, sb)
		}
	}
}

// adoptFork asks limbsd to take its fresh copy-on-write workspace for m (see
// checkpoint.Daemon.adopt). false: the caller restores the usual way (an
// older limbsd, or a walk that does not find m's paths).
func (s *Plane) adoptFork(ctx context.Context, st *cpstore.Store, d *Daemon, m *cpstore.Manifest, stats []byte, start time.Time) (wire.Restored, bool) {
	sb := d.ID()
	body, ctype := checkpoint.AdoptBody(checkpoint.AdoptRequest{Roots: m.Meta.Roots, Sessions: m.Meta.Sessions, Stats: stats})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://limbsd/v1/checkpoint/adopt", body)
	if err != nil {
		return wire.Restored{}, false
	}
	req.Header.Set("Content-Type", ctype)
	d.Authorize(req.Header)
	resp, err := d.tr.RoundTrip(req)
	if err != nil {
		return wire.Restored{}, false
	}
	defer resp.Body.Close()
	var res checkpoint.AdoptResult
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&res) != nil || res.Scan == "" {
		return wire.Restored{}, false
	}
	if res.Entries != len(m.Entries) {
		s.log.Warn("a fork's workspace does not hold its checkpoint's paths; restoring it the usual way", "sandbox", sb, "checkpoint", m.Meta.ID, "walked", res.Entries, "manifest", len(m.Entries))
		return wire.Restored{}, false
	}
	s.headAfterRestore(st, sb, m, res.Scan)
	out := wire.Restored{Checkpoint: m.Meta.ID, DurationMS: time.Since(start).Milliseconds(), Sessions: res.Sessions}
	s.log.Debug("fork adopted its workspace", "sandbox", sb, "walk_ms", res.WalkMS, "stated", res.Stated, "took_ms", out.DurationMS)
	if res.Fallback != "" {
		s.log.Warn("a fork's workspace is not as its tree's stats say: limbsd walked it in full", "sandbox", sb, "why", res.Fallback)
	}
	s.logEvents(sb, cpEvent(wire.EventCheckpointRestored, wire.CheckpointData{Checkpoint: m.Meta.ID, Name: m.Meta.Name, From: m.Meta.Sandbox}))
	if res.Warning != "" {
		s.log.Warn("restore: sessions", "sandbox", sb, "err", res.Warning)
	}
	return out, true
}

func (s *Plane) sendRestore(ctx context.Context, st *cpstore.Store, d *Daemon, target, cur *cpstore.Manifest, base string, trust bool) (checkpoint.RestoreResult, error) {
	var ci map[string]*checkpoint.Entry
	if cur != nil && base != "" {
		ci = cur.Index()
	}
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 256<<10)
		h, _ := json.Marshal(checkpoint.RestoreHeader{Roots: target.Meta.Roots, Base: base, Sessions: target.Meta.Sessions})
		var err error
		_, err = bw.Write(checkpoint.AppendJSON(nil, checkpoint.KindHeader, h))
		var line []byte
		for i := range target.Entries {
			if err != nil {
				break
			}
			e := target.Entries[i]
			flag := byte(checkpoint.FlagMeta)
			if e.Type == checkpoint.TypeFile {
				flag = checkpoint.FlagContent
				if c, ok := ci[e.Path]; ok && c.Type == checkpoint.TypeFile && c.Hash != "" && c.Hash == e.Hash {
					flag = checkpoint.FlagKeep
				} else if ok && trust && c.Type == checkpoint.TypeFile && c.Size == e.Size && c.Mtime == e.Mtime && c.Mode == e.Mode && c.UID == e.UID && c.GID == e.GID {
					flag = checkpoint.FlagKeep
				}
			}
			hash := e.Hash
			e.Hash = ""
			line = checkpoint.AppendEntry(line[:0], &e, flag)
			if _, err = bw.Write(line); err != nil || flag != checkpoint.FlagContent || e.Size == 0 {
				continue
			}
			var f io.ReadCloser
			if f, err = st.OpenBlob(hash); err != nil {
				break
			}
			var n int64
			n, err = io.Copy(bw, f)
			f.Close()
			if err == nil && n != e.Size {
				err = fmt.Errorf("blob %s holds %d bytes, not %d: the store is damaged; delete the checkpoint", hash, n, e.Size)
			}
		}
		if err == nil {
			_, err = bw.Write(checkpoint.AppendJSON(nil, checkpoint.KindEnd, []byte("{}")))
		}
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://limbsd/v1/checkpoint/restore", pr)
	if err != nil {
		pr.Close()
		return checkpoint.RestoreResult{}, err
	}
	req.Header.Set("Content-Type", "application/x-limbs-checkpoint")
	d.Authorize(req.Header)
	resp, err := d.tr.RoundTrip(req)
	pr.Close()
	if err != nil {
		return checkpoint.RestoreResult{}, d.Explain(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return checkpoint.RestoreResult{}, daemonError(resp)
	}
	var res checkpoint.RestoreResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&res); err != nil {
		return res, fmt.Errorf("the sandbox's answer to a restore: %v: %w", err, wire.ErrUnavailable)
	}
	return res, nil
}

// DiffCheckpoints compares checkpoint a with b, or with what the sandbox
// holds now when to is "current" (which takes a scan).
func (s *Plane) DiffCheckpoints(ctx context.Context, idOrName, a, to string) (wire.Diff, error) {
	st, err := s.cpStore()
	if err != nil {
		return wire.Diff{}, err
	}
	ma, err := s.loadCheckpoint(idOrName, a)
	if err != nil {
		return wire.Diff{}, err
	}
	var mb *cpstore.Manifest
	if to == "" || to == "current" {
		d, err := s.Dial(ctx, idOrName)
		if err != nil {
			return wire.Diff{}, err
		}
		unlock := s.cpLock(d.ID())
		mb, err = s.scanInto(ctx, st, d, ma.Meta.Roots)
		if err == nil {
			mb.Meta.ID = "current"
			mb.Meta.Sandbox = d.ID()
			scan := mb.Meta.Scan
			if err = st.Save(mb, "head"); err == nil && scan != "" {
				err = s.setHead(st, d.ID(), mb, "head", scan)
			}
		}
		unlock()
		if err != nil {
			return wire.Diff{}, err
		}
	} else if mb, err = s.loadCheckpoint(idOrName, to); err != nil {
		return wire.Diff{}, err
	}
	df := st.Diff(ma, mb)
	df.Diff = s.secrets.String(df.Diff)
	return df, nil
}

// CreateFromCheckpoint creates a sandbox like the one "sb_x/cp_y" was
// taken of (req's own fields win) and restores the checkpoint into it.
func (s *Plane) CreateFromCheckpoint(ctx context.Context, req wire.CreateSandbox) (wire.Sandbox, error) {
	sbPart, cpPart, ok := strings.Cut(req.FromCheckpoint, "/")
	if !ok {
		return wire.Sandbox{}, fmt.Errorf("from_checkpoint %q: name it as SANDBOX/CHECKPOINT, e.g. sb_abc/cp_def: %w", req.FromCheckpoint, wire.ErrBadRequest)
	}
	m, err := s.loadCheckpoint(sbPart, cpPart)
	if err != nil {
		return wire.Sandbox{}, err
	}
	fk, err := s.forkFrom(ctx, m, []wire.CreateSandbox{mergeSpec(m.Meta.Spec, req)})
	if err != nil {
		return wire.Sandbox{}, err
	}
	return fk.Sandboxes[0], nil
}

// mergeSpec is the checkpoint's spec with what req sets.
func mergeSpec(base, req wire.CreateSandbox) wire.CreateSandbox {
	out := base
	out.Name = req.Name
	out.FromCheckpoint = ""
	if req.Image != "" {
		out.Image = req.Image
	}
	if req.Provider != "" {
		out.Provider = req.Provider
	}
	if req.Env != nil {
		out.Env, out.SecretEnv = req.Env, req.SecretEnv
	}
	if req.Network != "" {
		out.Network = req.Network
	}
	if req.Cpus != 0 {
		out.Cpus = req.Cpus
	}
	if req.MemoryMB != 0 {
		out.MemoryMB = req.MemoryMB
	}
	if req.Workspace != "" {
		out.Workspace = req.Workspace
	}
	return out
}

// Fork starts req.Count sandboxes from a checkpoint of the sandbox (a new
// one when req names none), in parallel.
func (s *Plane) Fork(ctx context.Context, idOrName string, req wire.Fork) (wire.Forked, error) {
	if req.Count < 1 || req.Count > maxForks {
		return wire.Forked{}, fmt.Errorf("count %d: fork 1 to %d sandboxes at a time: %w", req.Count, maxForks, wire.ErrBadRequest)
	}
	start := time.Now()
	var m *cpstore.Manifest
	var err error
	if req.Checkpoint != "" {
		m, err = s.loadCheckpoint(idOrName, req.Checkpoint)
	} else {
		var cp wire.Checkpoint
		if cp, err = s.CreateCheckpoint(ctx, idOrName, wire.CreateCheckpoint{Name: "fork"}); err == nil {
			m, err = s.loadCheckpoint(cp.Sandbox, cp.ID)
		}
	}
	if err != nil {
		return wire.Forked{}, err
	}
	specs := make([]wire.CreateSandbox, req.Count)
	for i := range specs {
		specs[i] = mergeSpec(m.Meta.Spec, wire.CreateSandbox{})
	}
	fk, err := s.forkFrom(ctx, m, specs)
	if err != nil {
		return wire.Forked{}, err
	}
	ids := make([]string, len(fk.Sandboxes))
	for i, sb := range fk.Sandboxes {
		ids[i] = sb.ID
	}
	s.logEvents(m.Meta.Sandbox, cpEvent(wire.EventSandboxForked, wire.CheckpointData{Checkpoint: m.Meta.ID, Sandboxes: ids}))
	fk.Checkpoint = m.Meta.Sandbox + "/" + m.Meta.ID
	fk.DurationMS = time.Since(start).Milliseconds()
	return fk, nil
}

// forkLower is the checkpoint tree forks of m with specs can share as the
// lower layer of copy-on-write workspaces, and the bytes written to make
// it (0 when it existed); "" when they cannot: a checkpoint of another
// path than the docker workspace, a provider other than docker, a
// workspace of their own, limbs serve not root, or --fork-copy.
func (s *Plane) forkLower(m *cpstore.Manifest, specs []wire.CreateSandbox) (string, int64) {
	if s.opts.ForkCopy || os.Geteuid() != 0 || len(m.Meta.Roots) != 1 || m.Meta.Roots[0] != "/workspace" {
		return "", 0
	}
	for _, sp := range specs {
		if cmp.Or(sp.Provider, s.opts.DefaultProvider) != "docker" || sp.Workspace != "" {
			return "", 0
		}
	}
	st, err := s.cpStore()
	if err != nil {
		return "", 0
	}
	// Held before the tree is looked for: a sweep after the checkpoint's
	// deletion must not take it before the forks' records name it.
	held := st.TreeDir(m.Meta.Sandbox, m.Meta.ID)
	s.holdTree(held, 1)
	dir, n, err := st.Tree(m)
	if err != nil {
		s.holdTree(held, -1)
		s.log.Warn("forks copy the checkpoint instead of sharing it", "checkpoint", m.Meta.ID, "err", err)
		return "", 0
	}
	return dir, n
}

// holdTree adds d to the forks being made over the tree dir.
func (s *Plane) holdTree(dir string, d int) {
	name := filepath.Base(dir)
	s.ck.mu.Lock()
	defer s.ck.mu.Unlock()
	if s.ck.forking == nil {
		s.ck.forking = map[string]int{}
	}
	if s.ck.forking[name] += d; s.ck.forking[name] <= 0 {
		delete(s.ck.forking, name)
	}
}

// treeInUse reports whether a sandbox's workspace has the tree name as
// its lower layer, or forks are being made over it. By name: a record
// spells the state dir as it was spelled when the fork was made (a
// symlink, another --state-dir).
func (s *Plane) treeInUse(name string) bool {
	s.ck.mu.Lock()
	forking := s.ck.forking[name] > 0
	s.ck.mu.Unlock()
	if forking {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.sandboxes {
		if e.rec.Lower != "" && filepath.Base(e.rec.Lower) == name {
			return true
		}
	}
	return false
}

// sweepTrees removes the checkpoint trees nothing needs any more.
func (s *Plane) sweepTrees() {
	if st, err := s.cpStore(); err == nil {
		if err := st.SweepTrees(s.treeInUse); err != nil {
			s.log.Warn("removing checkpoint trees no fork uses", "err", err)
		}
	}
}

// maxAdoptStats bounds the tree stats an adopt carries (limbsd reads 64
// MiB of request).
const maxAdoptStats = 60 << 20

// forkFrom creates a sandbox per spec and restores m into each, in
// parallel; on any failure every one of them is removed. The forks share
// m's tree when they can (forkLower); otherwise each gets a copy.
func (s *Plane) forkFrom(ctx context.Context, m *cpstore.Manifest, specs []wire.CreateSandbox) (wire.Forked, error) {
	for _, sp := range specs {
		if err := s.movable(m, cmp.Or(sp.Provider, s.opts.DefaultProvider), ""); err != nil {
			return wire.Forked{}, err
		}
	}
	out := make([]wire.Sandbox, len(specs))
	errs := make([]error, len(specs))
	written := make([]int64, len(specs))
	start := time.Now()
	lower, built := s.forkLower(m, specs)
	if lower != "" {
		// Once every create is done, the records name the tree.
		defer s.holdTree(lower, -1)
	}
	// The tree's stats, once for all the forks: each limbsd then lists
	// only its directories (checkpoint.StatTree).
	var stats []byte
	if lower != "" {
		var err error
		if stats, err = checkpoint.StatTree(lower, strings.TrimPrefix(m.Meta.Roots[0], "/")); err != nil || len(stats) > maxAdoptStats {
			s.log.Warn("the forks' limbsd state every path of the checkpoint's tree themselves", "checkpoint", m.Meta.ID, "err", err, "bytes", len(stats))
			stats = nil
		}
	}
	treeT := time.Since(start)
	var created, restored atomic.Int64 // the slowest, in ms
	note := func(slowest *atomic.Int64, d time.Duration) {
		ms := d.Milliseconds()
		for m := slowest.Load(); ms > m && !slowest.CompareAndSwap(m, ms); m = slowest.Load() {
		}
	}
	var copied atomic.Int64  // forks that could not share the tree
	var pooledN atomic.Int64 // forks made of warm-pool sandboxes
	var wg sync.WaitGroup
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			shared := lower != ""
			var sb wire.Sandbox
			var err error
			pooled := false
			if shared {
				sb, pooled = s.forkFromPool(ctx, specs[i], lower)
			}
			if pooled {
				pooledN.Add(1)
			} else {
				sb, err = s.createOver(ctx, specs[i], lower)
			}
			if err != nil && shared && !errors.Is(err, wire.ErrTooMany) && !errors.Is(err, wire.ErrConflict) && ctx.Err() == nil {
				// The engine could not make the overlay (its file system,
				// a remapped or rootless engine): this fork gets a copy.
				s.log.Warn("a fork copies its checkpoint: its copy-on-write workspace could not be made (limbs serve --fork-copy skips trying)", "checkpoint", m.Meta.ID, "err", err)
				shared = false
				copied.Add(1)
				sb, err = s.createOver(ctx, specs[i], "")
			}
			if err != nil {
				errs[i] = err
				return
			}
			note(&created, time.Since(t0))
			out[i] = sb
			t0 = time.Now()
			var d *Daemon
			if pooled {
				// Still "creating" (a serve that dies now removes it at
				// start); running once restored.
				d, err = s.daemonOf(sb.ID)
			} else {
				d, err = s.Dial(ctx, sb.ID)
			}
			if err == nil {
				var res wire.Restored
				res, err = s.restoreInto(ctx, d, m, shared, stats)
				written[i] = res.Bytes
			}
			if err == nil && pooled {
				err = s.markRunning(sb.ID)
			}
			note(&restored, time.Since(t0))
			if err != nil {
				errs[i] = fmt.Errorf("restoring %s/%s into %s: %w", m.Meta.Sandbox, m.Meta.ID, sb.ID, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, sb := range out {
			if sb.ID != "" {
				_ = s.Remove(cctx, sb.ID)
			}
		}
		return wire.Forked{}, err
	}
	fk := wire.Forked{Sandboxes: out, Shared: lower != "" && copied.Load() == 0, DiskBytes: built, TreeMS: treeT.Milliseconds(),
		CreateMS: created.Load(), RestoreMS: restored.Load(), FromPool: int(pooledN.Load())}
	s.log.Info("forked", "checkpoint", m.Meta.ID, "count", len(specs), "shared", fk.Shared, "from_pool", fk.FromPool, "took", time.Since(start),
		"tree_ms", fk.TreeMS, "slowest_create_ms", fk.CreateMS, "slowest_restore_ms", fk.RestoreMS)
	for i, sb := range out {
		if g, err := s.Get(ctx, sb.ID); err == nil {
			out[i] = g
		}
		fk.DiskBytes += written[i]
	}
	return fk, nil
}

// WorkspaceMounter is a provider that mounts a copy-on-write workspace
// over the workspace of a sandbox that runs already (docker).
type WorkspaceMounter interface {
	// MountWorkspace reports whether it mounted (false: it was there).
	MountWorkspace(ctx context.Context, id, lower string) (bool, error)
}

// forkFromPool makes a shared fork out of a warm-pool sandbox: claimed,
// its workspace covered by the overlay over lower, its sessions (in the
// old workspace) closed; the caller restores the checkpoint into it. It
// reports false when no pool sandbox fits or the mount failed (the
// claimed sandbox is then removed): the caller creates one instead.
func (s *Plane) forkFromPool(ctx context.Context, req wire.CreateSandbox, lower string) (wire.Sandbox, bool) {
	rec, err := s.validate(req)
	if err != nil {
		return wire.Sandbox{}, false
	}
	if p, err := s.provider(rec.Provider); err != nil {
		return wire.Sandbox{}, false
	} else if _, ok := p.(WorkspaceMounter); !ok {
		return wire.Sandbox{}, false
	}
	rec.Lower = lower
	r, ok := s.pool.claimFork(rec)
	if !ok {
		return wire.Sandbox{}, false
	}
	if err := s.mountLower(ctx, r, "close"); err != nil {
		s.log.Warn("a fork could not use the warm-pool sandbox it claimed; creating one instead", "sandbox", r.ID, "err", err)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = s.Remove(cctx, r.ID)
		return wire.Sandbox{}, false
	}
	s.log.Info("fork from the warm pool", "sandbox", r.ID, "lower", lower)
	return toWire(r), true
}

// daemonOf is the limbsd of sandbox id whatever its status.
func (s *Plane) daemonOf(id string) (*Daemon, error) {
	e, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	return e.daemon, nil
}

// markRunning ends the "creating" of a fork from the warm pool.
func (s *Plane) markRunning(id string) error {
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	_, err = s.update(e, func(r *store.Record) { r.Status = wire.SandboxRunning })
	return err
}

// mountLower mounts rec's copy-on-write workspace into its running
// sandbox, then tells limbsd, which forgets what it knew of the old
// workspace and closes (sessions "close": the fork's restore brings its
// own) or restarts (sessions "restart") the sessions whose shells sat in
// it.
func (s *Plane) mountLower(ctx context.Context, rec store.Record, sessions string) error {
	p, err := s.provider(rec.Provider)
	if err != nil {
		return err
	}
	m, ok := p.(WorkspaceMounter)
	if !ok {
		return fmt.Errorf("provider %s cannot mount sandbox %s's copy-on-write workspace; remove the sandbox: %w", rec.Provider, rec.ID, wire.ErrUnavailable)
	}
	mounted, err := m.MountWorkspace(ctx, rec.ID, rec.Lower)
	if err != nil {
		return err
	}
	if !mounted {
		return nil // there already: limbsd and its sessions are in it
	}
	e, err := s.lookup(rec.ID)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://limbsd/v1/checkpoint/remounted?sessions="+sessions, nil)
	if err != nil {
		return err
	}
	d := e.daemon
	d.Authorize(req.Header)
	resp, err := d.tr.RoundTrip(req)
	if err != nil {
		return d.Explain(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return daemonError(resp)
	}
	return nil
}

// HTTP edge.

func (s *Server) checkpointRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /v1/sandboxes/{id}/checkpoints", s.handleCheckpoint)
	m.HandleFunc("GET /v1/sandboxes/{id}/checkpoints", s.handleCheckpoints)
	m.HandleFunc("DELETE /v1/sandboxes/{id}/checkpoints/{cp}", s.handleDeleteCheckpoint)
	m.HandleFunc("POST /v1/sandboxes/{id}/checkpoints/{cp}/restore", s.handleRestore)
	m.HandleFunc("GET /v1/sandboxes/{id}/checkpoints/{cp}/diff", s.handleDiff)
	m.HandleFunc("POST /v1/sandboxes/{id}/fork", s.handleFork)
}

func (s *Server) handleCheckpoint(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateCheckpoint
	if err := wire.DecodeJSON(r, &req, true); err != nil {
		wire.WriteError(w, err)
		return
	}
	cp, err := s.CreateCheckpoint(r.Context(), r.PathValue("id"), req)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusCreated, cp)
}

func (s *Server) handleCheckpoints(w http.ResponseWriter, r *http.Request) {
	list, err := s.Checkpoints(r.Context(), r.PathValue("id"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, wire.CheckpointList{Checkpoints: list})
}

func (s *Server) handleDeleteCheckpoint(w http.ResponseWriter, r *http.Request) {
	if err := s.DeleteCheckpoint(r.Context(), r.PathValue("id"), r.PathValue("cp")); err != nil {
		wire.WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleRestore(w http.ResponseWriter, r *http.Request) {
	if err := wire.DecodeJSON(r, &struct{}{}, true); err != nil {
		wire.WriteError(w, err)
		return
	}
	res, err := s.Restore(r.Context(), r.PathValue("id"), r.PathValue("cp"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

func (s *Server) handleDiff(w http.ResponseWriter, r *http.Request) {
	df, err := s.DiffCheckpoints(r.Context(), r.PathValue("id"), r.PathValue("cp"), r.URL.Query().Get("to"))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, df)
}

func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	var req wire.Fork
	if err := wire.DecodeJSON(r, &req, false); err != nil {
		wire.WriteError(w, err)
		return
	}
	res, err := s.Fork(r.Context(), r.PathValue("id"), req)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusCreated, res)
}
