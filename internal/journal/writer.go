package journal

import (
	"encoding/json"
	"os"
	"time"
)

// syncEvery is how often the writer asks the kernel to put the files on
// the disk itself: what a host crash can lose (a kill -9 of limbsd loses
// nothing the writer handed over).
const syncEvery = time.Second

// writer is the only goroutine that writes the journal's files.
func (j *Journal) writer() {
	defer close(j.done)
	w := &segWriter{j: j}
	defer w.close()
	var lastSync time.Time
	for {
		select {
		case <-j.wake:
		case <-j.quit:
			w.drain()
			w.sync()
			return
		}
		w.drain()
		if time.Since(lastSync) >= syncEvery {
			w.sync()
			lastSync = time.Now()
		}
	}
}

// segWriter holds the writer's open segment files.
type segWriter struct {
	j        *Journal
	ev, out  *os.File
	evFirst  uint64 // first of the open event segment
	outFirst uint64
}

func (w *segWriter) close() {
	if w.ev != nil {
		w.ev.Close()
	}
	if w.out != nil {
		w.out.Close()
	}
}

func (w *segWriter) sync() {
	if w.ev != nil {
		_ = w.ev.Sync()
	}
	if w.out != nil {
		_ = w.out.Sync()
	}
}

// pendingWrite is one event the writer takes from the ring.
type pendingWrite struct {
	ev    record
	bytes []byte
}

// drain writes every event appended since the last drain, in batches.
func (w *segWriter) drain() {
	j := w.j
	for range 1 << 20 {
		j.mu.Lock()
		from := max(j.written, j.first)
		if j.written < j.first {
			j.written = j.first // lost: noted by appendLocked
		}
		to := min(j.next, from+256)
		batch := make([]pendingWrite, 0, to-from)
		n := uint64(len(j.ring))
		for s := from; s < to; s++ {
			e := j.ring[s%n]
			batch = append(batch, pendingWrite{ev: record{Event: e.ev}, bytes: e.bytes})
		}
		j.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		spools := make([]int64, len(batch))
		var buf []byte
		var failed error
		for i := range batch {
			b := &batch[i]
			spools[i] = -1
			if b.bytes != nil {
				if at, err := w.writeOutput(b.bytes); err == nil {
					spools[i] = at
					b.ev.Spool = &spools[i]
				} else {
					failed = err
				}
			}
			line, err := json.Marshal(b.ev)
			if err != nil {
				continue
			}
			buf = append(buf, line...)
			buf = append(buf, '\n')
		}
		if err := w.writeEvents(batch[0].ev.Seq, buf); err != nil {
			failed = err
			j.mu.Lock()
			j.loseLocked(from, to, "a write to limbsd's state directory failed: "+err.Error())
			j.mu.Unlock()
		}
		j.mu.Lock()
		n = uint64(len(j.ring)) // the ring may have grown meanwhile
		for i, s := 0, from; s < to; i, s = i+1, s+1 {
			if s >= j.first {
				j.ring[s%n].spool = spools[i]
			}
		}
		j.written = to
		close(j.notify)
		j.notify = make(chan struct{})
		if failed == nil {
			j.werr = nil
		}
		j.mu.Unlock()
		if failed != nil {
			j.noteWriteErr(failed)
		}
	}
}

// writeEvents appends buf (whole lines, the first with seq first) to the
// newest event segment, starting a new one past the segment size and
// dropping the oldest past the bound. A failed write is cut back off, so
// that the file never holds half a line.
func (w *segWriter) writeEvents(first uint64, buf []byte) error {
	j := w.j
	segMax := j.opts.MaxDisk / segmentsPerBound
	j.mu.Lock()
	k := len(j.evSegs)
	if k == 0 || (j.evSegs[k-1].size > 0 && j.evSegs[k-1].size+int64(len(buf)) > segMax) {
		j.evSegs = append(j.evSegs, segment{first: first})
		k++
	}
	seg := j.evSegs[k-1]
	var drop []uint64
	var total int64
	for _, s := range j.evSegs {
		total += s.size
	}
	for len(j.evSegs) > 1 && total+int64(len(buf)) > j.opts.MaxDisk {
		drop = append(drop, j.evSegs[0].first)
		total -= j.evSegs[0].size
		j.evSegs = j.evSegs[1:]
	}
	j.mu.Unlock()
	for _, d := range drop {
		_ = os.Remove(segPath(j.opts.Dir, "events-", d))
	}
	f, err := w.file(&w.ev, &w.evFirst, "events-", seg.first)
	if err != nil {
		return err
	}
	n, err := f.WriteAt(buf, seg.size)
	if err != nil || n < len(buf) {
		_ = f.Truncate(seg.size)
		if err == nil {
			err = errShort
		}
		return err
	}
	j.mu.Lock()
	for i := range j.evSegs {
		if j.evSegs[i].first == seg.first {
			j.evSegs[i].size += int64(n)
		}
	}
	j.mu.Unlock()
	return nil
}

// writeOutput appends p to the spool and returns its spool offset.
func (w *segWriter) writeOutput(p []byte) (int64, error) {
	j := w.j
	segMax := j.opts.MaxOutputDisk / segmentsPerBound
	j.mu.Lock()
	k := len(j.outSegs)
	if k == 0 || (j.outSegs[k-1].size > 0 && j.outSegs[k-1].size+int64(len(p)) > segMax) {
		j.outSegs = append(j.outSegs, segment{first: uint64(j.outEnd)})
		k++
	}
	seg := j.outSegs[k-1]
	var drop []uint64
	var total int64
	for _, s := range j.outSegs {
		total += s.size
	}
	for len(j.outSegs) > 1 && total+int64(len(p)) > j.opts.MaxOutputDisk {
		drop = append(drop, j.outSegs[0].first)
		total -= j.outSegs[0].size
		j.outSegs = j.outSegs[1:]
	}
	j.mu.Unlock()
	for _, d := range drop {
		_ = os.Remove(segPath(j.opts.Dir, "output-", d))
	}
	f, err := w.file(&w.out, &w.outFirst, "output-", seg.first)
	if err != nil {
		return -1, err
	}
	n, err := f.WriteAt(p, seg.size)
	if err != nil || n < len(p) {
		_ = f.Truncate(seg.size)
		if err == nil {
			err = errShort
		}
		return -1, err
	}
	at := int64(seg.first) + seg.size
	j.mu.Lock()
	for i := range j.outSegs {
		if j.outSegs[i].first == seg.first {
			j.outSegs[i].size += int64(n)
		}
	}
	j.outEnd = at + int64(n)
	j.mu.Unlock()
	return at, nil
}

// file returns the open segment file named by first, opening it (and
// closing the previous one) when it changed.
func (w *segWriter) file(f **os.File, open *uint64, prefix string, first uint64) (*os.File, error) {
	if *f != nil && *open == first {
		return *f, nil
	}
	if *f != nil {
		(*f).Close()
		*f = nil
	}
	nf, err := os.OpenFile(segPath(w.j.opts.Dir, prefix, first), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	*f, *open = nf, first
	return nf, nil
}

type shortWrite struct{}

func (shortWrite) Error() string { return "short write (is the disk full?)" }

var errShort error = shortWrite{}
