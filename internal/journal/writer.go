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
// newest event segment.
func (w *segWriter) writeEvents(first uint64, buf []byte) error {
	j := w.j
	_, err := w.appendSegment(&j.evSegs, j.opts.MaxDisk, first, "events-", &w.ev, &w.evFirst, buf, nil)
	return err
}

// writeOutput appends p to the spool and returns its spool offset.
func (w *segWriter) writeOutput(p []byte) (int64, error) {
	j := w.j
	var at int64 = -1
	_, err := w.appendSegment(&j.outSegs, j.opts.MaxOutputDisk, uint64(j.outEnd) /* written only by this goroutine */, "output-", &w.out, &w.outFirst, p, func(seg segment, n int) {
		at = int64(seg.first) + seg.size
		j.outEnd = at + int64(n)
	})
	if err != nil {
		return -1, err
	}
	return at, nil
}

// appendSegment appends p to the newest segment of *segs (files named
// prefix and the segment's first), starting a new one that begins at next
// past a segment's share of bound, and dropping the oldest segments past
// bound. A failed write is cut back off, so that the file never holds half
// a record. done, when set, runs under j.mu after a write, with the segment
// as it was before it.
func (w *segWriter) appendSegment(segs *[]segment, bound int64, next uint64, prefix string, f **os.File, open *uint64, p []byte, done func(segment, int)) (segment, error) {
	j := w.j
	segMax := bound / segmentsPerBound
	j.mu.Lock()
	k := len(*segs)
	if k == 0 || ((*segs)[k-1].size > 0 && (*segs)[k-1].size+int64(len(p)) > segMax) {
		*segs = append(*segs, segment{first: next})
		k++
	}
	seg := (*segs)[k-1]
	var drop []uint64
	var total int64
	for _, s := range *segs {
		total += s.size
	}
	for len(*segs) > 1 && total+int64(len(p)) > bound {
		drop = append(drop, (*segs)[0].first)
		total -= (*segs)[0].size
		*segs = (*segs)[1:]
	}
	j.mu.Unlock()
	for _, d := range drop {
		_ = os.Remove(segPath(j.opts.Dir, prefix, d))
	}
	file, err := w.file(f, open, prefix, seg.first)
	if err != nil {
		return seg, err
	}
	n, err := file.WriteAt(p, seg.size)
	if err != nil || n < len(p) {
		_ = file.Truncate(seg.size)
		if err == nil {
			err = errShort
		}
		return seg, err
	}
	j.mu.Lock()
	for i := range *segs {
		if (*segs)[i].first == seg.first {
			(*segs)[i].size += int64(n)
		}
	}
	if done != nil {
		done(seg, n)
	}
	j.mu.Unlock()
	return seg, nil
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
