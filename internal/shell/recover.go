package shell

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Markers are the fast path; the process state is the ground truth. A
// user can lose limbs' end of a command: close descriptor 251, the end
// channel (`exec 251>&-`), unset limbs' functions and delete the end file,
// or bypass limbs with `builtin trap` (a DEBUG trap under extdebug that
// skips limbs' steps). The shell then comes back to its prompt with no
// proven end. limbsd watches every running command of a bash: when the
// shell itself is at its top-level prompt (prompt.go), twice in a row
// with the terminal's output all read between, the command has ended.
// Its exit code is the status of the last end marker the shell printed
// after the command started, unproven but printed while the shell was
// already past the command (the marker carries the status: rc.go), or
// null when none came; its cwd is the shell's, from /proc. The result
// says end_recovered, with a note of what was lost and what to do. A
// marker without its message is never an end by itself: only the shell
// at its prompt is.
//
// The integration is put back for the next command: limbsd rewrites the
// end file when it is missing or changed (a stat at each command), and the
// next command's run line sources it when limbs' functions are gone.

// recoverState is a proc's part of recovery.
type recoverState struct {
	prompt promptState
	typed  atomic.Int64 // writes to the terminal
	logged atomic.Bool  // a recovered end was logged at info level
	// lost is set once a command of this shell ended with no proven end:
	// its later commands are checked from recoverFirst on.
	lost atomic.Bool
}

// Recovery checks start at quietPeriod (with the await loop's own check
// when output goes quiet: a timer no earlier than the ones every command
// has costs the fast path no wake-up of the network poller), or at
// recoverFirst in a shell that lost an end before, and back off to
// recoverMax while the command runs; an end marker without its message
// brings one on at once. Two samples recoverGap apart must both find the
// prompt.
const (
	recoverFirst = 10 * time.Millisecond
	recoverMax   = 250 * time.Millisecond
	recoverGap   = 20 * time.Millisecond
	// pendingChecks is how many checks in a row find the shell at its
	// prompt with its end message sent and no marker before the message
	// alone ends the command (the marker went elsewhere).
	pendingChecks = 4
	// recoverSoon is the delay of a check after an unproven end marker.
	recoverSoon = 2 * time.Millisecond
)

// candidate is the newest end marker without its message, while a
// command runs; guarded by Session.mu.
type candidate struct {
	ok     bool
	status int
	off    int64 // stream offset of the marker
}

// watchLocked starts checking whether c, a bash command, has ended
// without a proven end. s.mu is held.
func (s *Session) watchLocked(c *command) {
	if s.p == nil || !s.p.bash || nrPselect6 < 0 || c.watch != nil {
		return
	}
	first := quietPeriod
	if s.p.lost.Load() {
		first = recoverFirst
	}
	c.watchEvery = first
	c.watch = time.AfterFunc(first, func() { s.watchFired(c) })
}

func (s *Session) watchFired(c *command) {
	if s.recoverEnd(c) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !c.ended && s.cur == c {
		c.watchEvery = min(2*c.watchEvery, recoverMax)
		c.watch.Reset(c.watchEvery)
	}
}

// candidateLocked notes an end marker that came without its message.
func (s *Session) candidateLocked(ev event) {
	c := s.cur
	if c == nil || !c.started || c.ended {
		return
	}
	s.cand = candidate{ok: true, status: ev.status, off: s.out.size()}
	if c.watch != nil {
		c.watchEvery = recoverFirst
		c.watch.Reset(recoverSoon)
	}
}

// drained reports whether the read loop has taken in all the terminal's
// output.
func (s *Session) drained(p *proc) bool {
	return p.unread() == 0 && s.inflight.Load() == 0
}

// recoverEnd ends c when its shell is back at its prompt with no proven
// end; it reports whether c has ended.
func (s *Session) recoverEnd(c *command) bool {
	if !c.checking.CompareAndSwap(false, true) {
		return false
	}
	defer c.checking.Store(false)
	s.mu.Lock()
	p := s.p
	ok := p != nil && s.cur == c && c.started && !c.ended
	s.mu.Unlock()
	if !ok || !p.knowsPrompt() {
		return isClosed(c.done)
	}
	if !s.drained(p) || !p.atPrompt() || !s.drained(p) {
		c.pending = 0
		return false
	}
	size := s.out.size()
	ran, ranOK := runs(p.pid)
	t := time.NewTimer(recoverGap)
	select {
	case <-c.done:
		t.Stop()
		return true
	case <-p.done:
		t.Stop()
		return isClosed(c.done)
	case <-t.C:
	}
	if !s.drained(p) || !p.atPrompt() || !s.drained(p) || s.out.size() != size {
		c.pending = 0
		return false
	}
	if now, ok := runs(p.pid); ranOK && (!ok || now != ran) {
		// The shell woke up in between: whatever it printed may still be
		// on its way.
		return false
	}
	msg, proven := p.ends.pendingEnd()
	if proven {
		// The shell sent its end: the marker follows, unless it went
		// elsewhere; then the message, the kernel's proof, ends it.
		if c.pending++; c.pending < pendingChecks || !p.ends.takePending(msg) {
			return false
		}
	}
	image := imageOf(p.pid)
	holds := p.ends == nil || p.ends.shellHolds()
	cwd := cwdOf(p.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != p || s.cur != c || c.ended || image != p.image {
		return c.ended
	}
	end := s.out.size()
	cand := s.cand
	code, known := 0, false
	switch {
	case proven:
		code, known = msg.status, true
		if msg.cwd != "" {
			cwd = msg.cwd
		}
		end = s.lastLineLocked(c.startOff, end)
	case cand.ok && cand.off >= c.startOff && cand.off <= end:
		code, known = cand.status, true
		end = cand.off
	default:
		end = s.lastLineLocked(c.startOff, end)
	}
	if cwd != "" {
		s.cwd = cwd
	}
	p.lost.Store(true)
	c.recovered = true
	c.codeLost = !known
	c.endNote = recoverNote(holds, known, proven)
	s.inputsAt = s.inputs
	s.finishLocked(c, code, false)
	c.endOff = end
	s.noteFinishedLocked(c)
	// What follows the end is the prompt: the gap until the next command.
	s.gap = gapState{open: true, from: end, promptFrom: s.lastLineLocked(end, s.out.size()), promptTo: s.out.size()}
	lvl := slog.LevelDebug
	if !p.logged.Swap(true) {
		lvl = slog.LevelInfo // once per shell: later ones are alike
	}
	s.log.Log(context.Background(), lvl, "a command ended with no proven end: the shell is back at its prompt", "command", c.id, "exit_code_known", known, "proven_by_message", proven, "end_channel_held", holds)
	return true
}

// lastLineLocked is where the last line of the stream's [from, to)
// starts: the prompt the shell printed, when it printed no end marker.
func (s *Session) lastLineLocked(from, to int64) int64 {
	const look = 4096
	lo := max(from, to-look)
	if lo >= to {
		return to
	}
	b := make([]byte, to-lo)
	got, _ := s.out.readAt(b, lo)
	if i := bytes.LastIndexByte(b[:got], '\n'); i >= 0 {
		return lo + int64(i) + 1
	}
	if lo == from {
		return from
	}
	return to
}

// recoverNote says what a recovered end lost and what to do.
func recoverNote(holds, known, proven bool) string {
	if proven {
		return "the shell sent this command's end on descriptor " + strconv.Itoa(endFD) + " but its end marker never reached the terminal (was the shell's stdout redirected, as by exec >file?); limbs ended it when the shell was back at its prompt, with the exit code and cwd the shell sent; output after the command's own may be missing"
	}
	n := "limbs saw no proven end of this command and ended it when the shell was back at its prompt (process state); cwd is the shell's"
	if !holds {
		n += "; this shell closed or replaced descriptor " + strconv.Itoa(endFD) + ", limbs' end-of-command channel, so its commands end by process state from now on, a little later and with the exit code of an unproven end marker: restart the session (POST /v1/sessions/{id}/restart) for the fast path"
	}
	if known {
		n += "; exit_code is the status the shell's end marker printed"
	} else {
		n += "; exit_code is null: the shell printed no end marker (limbs' functions or hooks were removed, or a DEBUG trap skipped them); limbs puts them back for the next command"
	}
	return n
}

// endFileStat is what limbsd wrote as the end file.
type endFileStat struct {
	ino   uint64
	size  int64
	mtime int64
}

// writeEndFileLocked writes the end file and remembers it.
func (s *Session) writeEndFileLocked() error {
	path := filepath.Join(s.rdir, "end")
	if err := writeFile(path, []byte(endFile()), 0o600); err != nil {
		return err
	}
	if err := s.m.opts.Agent.give(path); err != nil {
		return err
	}
	s.endStat, _ = statEndFile(path)
	return nil
}

func statEndFile(path string) (endFileStat, bool) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return endFileStat{}, false
	}
	return endFileStat{ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}, true
}

// checkEndFileLocked puts the end file back when a command deleted or
// changed it, so that the next command's run line can source it. s.mu
// is held; it costs a stat.
func (s *Session) checkEndFileLocked() {
	if s.p == nil || !s.p.bash {
		return
	}
	path := filepath.Join(s.rdir, "end")
	if st, ok := statEndFile(path); ok && st == s.endStat {
		return
	}
	if err := s.writeEndFileLocked(); err != nil {
		s.log.Warn("putting back the shell's end file", "err", err)
	}
}

// pendingEnd drains the channel and reports the shell's newest end
// message whose marker has not been parsed: the shell sends it before it
// prints the marker, so while it is there the proven end is on its way
// (the terminal's output can lag in the kernel after the shell is asleep
// again), or the marker was lost (the shell's stdout redirected).
func (c *endChan) pendingEnd() (endMsg, bool) {
	if c == nil {
		return endMsg{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drainLocked(maxDrain, nil)
	return c.last, c.have && c.last.kind == evEnd
}

// takePending consumes the message pendingEnd reported, when it is still
// the newest.
func (c *endChan) takePending(m endMsg) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.have || c.last != m {
		return false
	}
	c.have = false
	return true
}

// runs is how many times pid was scheduled (/proc/PID/schedstat); ok is
// false when the kernel does not say.
func runs(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, false
	}
	n, err := strconv.ParseUint(f[2], 10, 64)
	return n, err == nil
}
