package eventlog

import (
	"os"
	"strconv"
	"time"
)

func (l *Log) sweeper() {
	defer l.wg.Done()
	t := time.NewTicker(l.opts.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.Sweep()
	}
}

// maxSweep bounds the files one Sweep removes, so that one pass never
// holds the disk for long; the next pass goes on.
const maxSweep = 10_000

// Sweep applies retention once: the logs of sandboxes deleted more than
// KeepDeleted ago are removed, and each other log loses its oldest
// segments past MaxSize or older than MaxAge (its last segment is kept).
func (l *Log) Sweep() {
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	removed := 0
	for id, sl := range l.logs {
		if removed >= maxSweep {
			return
		}
		if !sl.meta.DeletedAt.IsZero() && now.Sub(sl.meta.DeletedAt) > l.opts.KeepDeleted {
			// The high-water mark of cursors is kept, so that a cursor
			// never goes back even when every log is gone.
			_ = os.WriteFile(l.opts.Dir+"/cursor", []byte(strconv.FormatUint(l.cursor, 10)+"\n"), 0o600)
			if sl.f != nil {
				sl.f.Close()
				sl.f = nil
			}
			if err := os.RemoveAll(sl.dir); err != nil {
				l.log.Warn("removing the event log of a deleted sandbox", "sandbox", id, "err", err)
				continue
			}
			delete(l.logs, id)
			removed += len(sl.segs) + 1
			l.log.Info("removed the event log of a deleted sandbox after its retention", "sandbox", id, "deleted_at", sl.meta.DeletedAt)
			continue
		}
		var total int64
		for _, s := range sl.segs {
			total += s.size
		}
		cut := 0
		for cut < len(sl.segs)-1 && removed < maxSweep {
			s := sl.segs[cut]
			old := false
			if l.opts.MaxAge > 0 {
				if fi, err := os.Stat(s.path); err == nil && now.Sub(fi.ModTime()) > l.opts.MaxAge {
					old = true
				}
			}
			if !(l.opts.MaxSize > 0 && total > l.opts.MaxSize) && !old {
				break
			}
			if err := os.Remove(s.path); err != nil && !os.IsNotExist(err) {
				l.log.Warn("removing an old event log segment", "sandbox", id, "err", err)
				break
			}
			total -= s.size
			cut++
			removed++
		}
		if cut > 0 {
			sl.segs = append([]segment(nil), sl.segs[cut:]...)
			sl.meta.FirstSeq = sl.segs[0].first
			if err := sl.writeMeta(); err != nil {
				l.log.Warn("recording an event log's retention", "sandbox", id, "err", err)
			}
		}
	}
}

// boundSizeLocked keeps MaxSize as sl grows: when a segment is started,
// its oldest segments go until the others hold at most MaxSize (the
// sweeper, once a minute, would let a flood write gigabytes past it
// meanwhile). l.mu is held.
func (l *Log) boundSizeLocked(sl *sandboxLog) {
	if l.opts.MaxSize <= 0 || len(sl.segs) < 2 {
		return
	}
	var total int64
	for _, s := range sl.segs {
		total += s.size
	}
	cut := 0
	for cut < len(sl.segs)-1 && total > l.opts.MaxSize {
		s := sl.segs[cut]
		if err := os.Remove(s.path); err != nil && !os.IsNotExist(err) {
			l.log.Warn("removing an old event log segment", "sandbox", sl.id, "err", err)
			break
		}
		total -= s.size
		cut++
	}
	if cut > 0 {
		sl.segs = append([]segment(nil), sl.segs[cut:]...)
		sl.meta.FirstSeq = sl.segs[0].first
		if err := sl.writeMeta(); err != nil {
			l.log.Warn("recording an event log's retention", "sandbox", sl.id, "err", err)
		}
	}
}
